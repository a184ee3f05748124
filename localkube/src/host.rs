//! Host-level operations for the node tier: Debian packages, network links,
//! mounts, sysctls, cgroup v1 directories, iptables chains and stray
//! processes.
//!
//! Everything here either creates something the node teardown must remove
//! again, or finds and removes such things. The functions are deliberately
//! small and named after what they touch, so the teardown in `node.rs` reads
//! as a list of host changes.
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::util::{self, progress};

/// Directories every tool and daemon we start on the host must see: CNI
/// plugins and kube-proxy call `iptables`, `conntrack` and `ip` by name, and
/// these live in /usr/sbin, which a developer's PATH (or a test harness's)
/// may lack.
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The caller's PATH (which finds `go`, `cargo`, ...) followed by the
/// system directories it lacks.
pub(crate) fn path_env() -> String {
    let current = std::env::var("PATH").unwrap_or_default();
    let mut dirs: Vec<&str> = current.split(':').filter(|d| !d.is_empty()).collect();
    for d in SYSTEM_PATH.split(':') {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs.join(":")
}

/// True when running as root (euid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Fails with a clear message unless we are root.
pub(crate) fn require_root(what: &str) -> Result<()> {
    if is_root() {
        Ok(())
    } else {
        Err(Error::NotRoot { what: what.into() })
    }
}

fn render(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs a short command to completion and returns its stdout. On failure the
/// error carries the full command line and its stderr (or stdout).
pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    run_with_stdin(cmd, Stdio::null())
}

/// [`run`], reading `stdin` (a pipe from another process, say).
pub(crate) fn run_with_stdin(cmd: &mut Command, stdin: Stdio) -> Result<String> {
    cmd.env("PATH", path_env()).stdin(stdin);
    let rendered = render(cmd);
    let out = cmd.output().map_err(|source| Error::Spawn {
        program: cmd.get_program().to_string_lossy().into_owned(),
        source,
    })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let output = if stderr.trim().is_empty() {
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    } else {
        stderr.trim().to_owned()
    };
    Err(Error::HostCommand {
        command: rendered,
        status: out.status.to_string(),
        output,
    })
}

/// `Command::new(program).args(args)`, run with [`run`].
pub(crate) fn cmd(program: &str, args: &[&str]) -> Result<String> {
    run(Command::new(program).args(args))
}

/// Whether a Debian package is installed (`dpkg-query`).
pub fn package_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .env("PATH", path_env())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// Installs the Debian packages that are missing (`apt-get install
/// --no-install-recommends`, after one `apt-get update`), logging to
/// `<log_dir>/apt.log`. Returns the packages it installed. A machine that
/// already has them all is not touched (and root is not needed).
pub fn ensure_packages(packages: &[&str], log_dir: &Path) -> Result<Vec<String>> {
    let missing: Vec<String> = packages
        .iter()
        .filter(|p| !package_installed(p))
        .map(|p| (*p).to_owned())
        .collect();
    if missing.is_empty() {
        return Ok(missing);
    }
    require_root(&format!("installing {}", missing.join(" ")))?;
    util::create_dir_all(log_dir)?;
    let log = log_dir.join("apt.log");
    let _lock = util::FileLock::acquire(&log_dir.join("apt.lock"), "apt-get")?;
    progress!(
        "installing Debian packages: {} (log: {})",
        missing.join(" "),
        log.display()
    );
    let started = Instant::now();
    // Wait for a concurrent apt/dpkg instead of failing at once on its lock.
    let lock_wait = "DPkg::Lock::Timeout=600";
    run_logged(
        Command::new("apt-get").args(["-o", lock_wait, "update", "-q"]),
        &log,
    )?;
    let mut install = Command::new("apt-get");
    install
        .args([
            "-o",
            lock_wait,
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
        ])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive");
    run_logged(&mut install, &log)?;
    let still: Vec<&String> = missing.iter().filter(|p| !package_installed(p)).collect();
    if !still.is_empty() {
        return Err(Error::CommandFailed {
            command: render(&install),
            status: format!("packages still missing afterwards: {still:?}"),
            tail: util::tail(&log, 20),
            log,
        });
    }
    progress!(
        "installed {} in {}",
        missing.join(" "),
        util::human(started.elapsed())
    );
    Ok(missing)
}

/// Runs a (longer) command with its output appended to `log`.
pub(crate) fn run_logged(cmd: &mut Command, log: &Path) -> Result<()> {
    use std::io::Write as _;
    let rendered = render(cmd);
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(Error::io("opening log", log))?;
    let _ = writeln!(file, "\n$ {rendered}");
    let err = file
        .try_clone()
        .map_err(Error::io("duplicating log handle", log))?;
    let status = cmd
        .env("PATH", path_env())
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .status()
        .map_err(|source| Error::Spawn {
            program: cmd.get_program().to_string_lossy().into_owned(),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::CommandFailed {
            command: rendered,
            status: status.to_string(),
            log: log.to_owned(),
            tail: util::tail(log, 30),
        })
    }
}

// ---------------------------------------------------------------- links

pub fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// Interfaces enslaved to a bridge (the pods' host-side veths).
pub(crate) fn bridge_ports(bridge: &str) -> Vec<String> {
    fs::read_dir(Path::new("/sys/class/net").join(bridge).join("brif"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Creates the node's own interface: a bridge with no ports that only holds
/// the node IP. This kernel has no `dummy` driver; a port-less bridge is the
/// same thing for our purpose (an always-local, non-loopback address that
/// pods reach through their default route).
pub(crate) fn create_address_bridge(name: &str, ip: &str) -> Result<()> {
    cmd("ip", &["link", "add", name, "type", "bridge"])?;
    cmd("ip", &["addr", "add", &format!("{ip}/32"), "dev", name])?;
    cmd("ip", &["link", "set", name, "up"])?;
    Ok(())
}

pub(crate) fn has_address(name: &str, ip: &str) -> bool {
    cmd("ip", &["-o", "-4", "addr", "show", "dev", name])
        .map(|out| out.contains(&format!(" {ip}/")))
        .unwrap_or(false)
}

/// Deletes a link if it exists; true if something was deleted.
pub(crate) fn delete_link(name: &str) -> Result<bool> {
    if !link_exists(name) {
        return Ok(false);
    }
    cmd("ip", &["link", "del", name])?;
    Ok(true)
}

// ---------------------------------------------------------------- mounts

/// Mount points at or below `prefix`, deepest first (the unmount order).
pub fn mounts_under(prefix: &Path) -> Vec<PathBuf> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mount_path(p)))
        .filter(|p| p.starts_with(prefix))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape_mount_path(p: &str) -> String {
    let bytes = p.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                out.push(v as u8);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmounts everything at or below `prefix` (repeating, because mounts can be
/// stacked). A busy mount is detached lazily as a last resort so the
/// directory can be deleted; its users are gone by the time we get here.
pub fn unmount_all_under(prefix: &Path) -> Result<Vec<PathBuf>> {
    let mut done = Vec::new();
    for _round in 0..5 {
        let mounts = mounts_under(prefix);
        if mounts.is_empty() {
            return Ok(done);
        }
        for m in mounts {
            let c = std::ffi::CString::new(m.as_os_str().as_encoded_bytes())
                .map_err(|e| Error::Invalid(format!("mount path {}: {e}", m.display())))?;
            // SAFETY: umount2 with a valid NUL-terminated path.
            let mut rc = unsafe { libc::umount2(c.as_ptr(), 0) };
            if rc != 0 {
                // SAFETY: as above.
                rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            if rc == 0 {
                done.push(m);
            } else {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() != Some(libc::EINVAL)
                    && err.raw_os_error() != Some(libc::ENOENT)
                {
                    return Err(Error::io("unmounting", &m)(err));
                }
            }
        }
    }
    let left = mounts_under(prefix);
    if left.is_empty() {
        Ok(done)
    } else {
        Err(Error::Invalid(format!(
            "mounts under {} survived 5 unmount rounds: {left:?}",
            prefix.display()
        )))
    }
}

// ---------------------------------------------------------------- sysctl

fn sysctl_path(key: &str) -> PathBuf {
    Path::new("/proc/sys").join(key.replace('.', "/"))
}

pub(crate) fn sysctl_read(key: &str) -> Option<String> {
    fs::read_to_string(sysctl_path(key))
        .ok()
        .map(|s| s.trim().to_owned())
}

pub(crate) fn sysctl_write(key: &str, value: &str) -> Result<()> {
    let path = sysctl_path(key);
    fs::write(&path, value).map_err(Error::io("writing sysctl", &path))
}

// ---------------------------------------------------------------- cgroups (v1)

/// Mount points of the cgroup hierarchies with their version: the v1
/// controllers (`/sys/fs/cgroup/cpu`, ...) and, on a hybrid host, the v2
/// `unified` mount, where runc and the kubelet create the same paths too.
fn cgroup_mounts() -> Vec<(PathBuf, bool)> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, bool)> = text
        .lines()
        .filter_map(|l| {
            // "... - <fstype> <source> <options>"
            let (pre, post) = l.split_once(" - ")?;
            let v2 = match post.split(' ').next()? {
                "cgroup" => false,
                "cgroup2" => true,
                _ => return None,
            };
            pre.split(' ')
                .nth(4)
                .map(|p| (PathBuf::from(unescape_mount_path(p)), v2))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Every cgroup hierarchy's mount point (v1 and v2).
pub fn cgroup_hierarchies() -> Vec<PathBuf> {
    cgroup_mounts().into_iter().map(|(p, _)| p).collect()
}

/// True if the host runs cgroup v2 only (no v1 hierarchies mounted).
pub(crate) fn cgroup_v2_only() -> bool {
    !cgroup_mounts().iter().any(|(_, v2)| !v2)
}

/// Creates `/<name>` in every cgroup hierarchy: the kubelet's
/// `cgroupRoot`, which it requires to exist. A new cpuset cgroup starts with
/// no CPUs and memory nodes, so those are copied from the parent.
pub(crate) fn create_cgroup_root(name: &str) -> Result<Vec<PathBuf>> {
    let mut made = Vec::new();
    for h in cgroup_hierarchies() {
        let dir = h.join(name);
        if !dir.exists() {
            fs::create_dir(&dir).map_err(Error::io("creating cgroup", &dir))?;
        }
        for f in ["cpuset.cpus", "cpuset.mems"] {
            let parent = h.join(f);
            if parent.exists() {
                let v = util::read_to_string(&parent)?;
                let target = dir.join(f);
                fs::write(&target, v.trim()).map_err(Error::io("writing", &target))?;
            }
        }
        made.push(dir);
    }
    Ok(made)
}

/// Kills every process in the `/<name>` subtree of every hierarchy and
/// removes the cgroup directories, deepest first. Returns the killed pids.
pub(crate) fn remove_cgroup_root(name: &str) -> Result<Vec<i32>> {
    let mut killed = BTreeSet::new();
    let mut dirs = Vec::new();
    for h in cgroup_hierarchies() {
        let root = h.join(name);
        if root.is_dir() {
            collect_dirs(&root, &mut dirs);
        }
    }
    // Deepest first so every rmdir finds an empty cgroup.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in &dirs {
        for pid in cgroup_pids(d) {
            killed.insert(pid);
        }
    }
    let pids: Vec<i32> = killed.into_iter().collect();
    kill_and_wait(&pids, Duration::from_secs(10));
    for d in &dirs {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match fs::remove_dir(d) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                // EBUSY while the last task of the cgroup is still exiting.
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(dir = %d.display(), error = %e, "cgroup busy, retrying");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(Error::io("removing cgroup", d)(e)),
            }
        }
    }
    Ok(pids)
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_owned());
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

fn cgroup_pids(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------- processes

/// Pids whose command line contains `needle` (excluding our own process).
pub(crate) fn pids_with_cmdline(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    let c: Vec<u8> = c.iter().map(|b| if *b == 0 { b' ' } else { *b }).collect();
                    String::from_utf8_lossy(&c).contains(needle)
                })
                .unwrap_or(false)
        })
        .collect()
}

fn alive(pid: i32) -> bool {
    // A zombie has exited; only its parent's wait is missing.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next()),
            Some("Z") | Some("X") | None
        ),
        Err(_) => false,
    }
}

/// SIGKILLs the pids and waits (bounded) until they are gone.
pub(crate) fn kill_and_wait(pids: &[i32], timeout: Duration) -> Vec<i32> {
    for pid in pids {
        if *pid > 1 {
            // SAFETY: plain syscall; a pid that no longer exists gives ESRCH.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
    }
    let deadline = Instant::now() + timeout;
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------- iptables

/// The netfilter tables kube-proxy, the kubelet and the CNI plugins write to.
pub const IPTABLES_TABLES: [&str; 3] = ["filter", "nat", "mangle"];
/// Both families: kube-proxy programs IPv6 too when the host has it.
pub const IPTABLES_BINARIES: [&str; 2] = ["iptables", "ip6tables"];

/// User-defined chains of one table (`-N` lines of `iptables -S`).
pub fn iptables_chains(bin: &str, table: &str) -> Result<BTreeSet<String>> {
    let out = cmd(bin, &["-w", "5", "-t", table, "-S"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.strip_prefix("-N "))
        .map(|c| c.trim().to_owned())
        .collect())
}

/// Deletes user-defined chains that did not exist in `before` and whose name
/// starts with one of `prefixes`, after deleting every rule that jumps to
/// them. Returns the removed chain names.
pub(crate) fn remove_new_chains(
    bin: &str,
    table: &str,
    before: &BTreeSet<String>,
    prefixes: &[&str],
) -> Result<Vec<String>> {
    let now = iptables_chains(bin, table)?;
    let ours: BTreeSet<String> = now
        .difference(before)
        .filter(|c| prefixes.iter().any(|p| c.starts_with(p)))
        .cloned()
        .collect();
    if ours.is_empty() {
        return Ok(Vec::new());
    }
    // 1. Rules anywhere that jump to one of our chains.
    let rules = cmd(bin, &["-w", "5", "-t", table, "-S"])?;
    for rule in rules.lines().filter(|l| l.starts_with("-A ")) {
        let jumps_to_ours = rule
            .split_once(" -j ")
            .or_else(|| rule.split_once(" -g "))
            .map(|(_, t)| t.split_whitespace().next().unwrap_or(""))
            .is_some_and(|t| ours.contains(t));
        if jumps_to_ours {
            delete_rule(bin, table, rule)?;
        }
    }
    // 2. Flush, then delete (a chain must be empty and unreferenced).
    for c in &ours {
        cmd(bin, &["-w", "5", "-t", table, "-F", c])?;
    }
    for c in &ours {
        cmd(bin, &["-w", "5", "-t", table, "-X", c])?;
    }
    Ok(ours.into_iter().collect())
}

/// Deletes rules of built-in or pre-existing chains that carry `needle` in a
/// comment (the CNI bridge plugin's masquerade rules name the network).
pub(crate) fn remove_rules_mentioning(bin: &str, table: &str, needle: &str) -> Result<usize> {
    let rules = cmd(bin, &["-w", "5", "-t", table, "-S"])?;
    let mut n = 0;
    for rule in rules
        .lines()
        .filter(|l| l.starts_with("-A ") && l.contains(needle))
    {
        delete_rule(bin, table, rule)?;
        n += 1;
    }
    Ok(n)
}

/// Deletes one rule given in `iptables -S` form ("-A CHAIN spec...").
fn delete_rule(bin: &str, table: &str, rule: &str) -> Result<()> {
    let spec = rule.trim_start_matches("-A ");
    let args = split_iptables_words(spec);
    let mut c = Command::new(bin);
    c.args(["-w", "5", "-t", table, "-D"]).args(&args);
    match run(&mut c) {
        Ok(_) => Ok(()),
        // Already gone (e.g. deleted by kube-proxy --cleanup in the meantime).
        Err(Error::HostCommand { output, .. })
            if output.contains("does a matching rule exist")
                || output.contains("No chain/target/match")
                || output.contains("Bad rule") =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Splits an `iptables -S` rule into words, honouring the double quotes
/// iptables puts around comments with spaces.
fn split_iptables_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut has = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                has = true;
            }
            '\\' if quoted => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            c if c.is_whitespace() && !quoted => {
                if has {
                    words.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            c => {
                cur.push(c);
                has = true;
            }
        }
    }
    if has {
        words.push(cur);
    }
    words
}

// ---------------------------------------------------------------- nfacct

/// Deletes a netfilter accounting object (what `nfacct del <name>` does),
/// over netlink. kube-proxy creates such counters for its metrics and never
/// removes them. Returns `Ok(false)` if there is no object of that name.
pub(crate) fn nfacct_delete(name: &str) -> Result<bool> {
    const NETLINK_NETFILTER: libc::c_int = 12;
    const NFNL_SUBSYS_ACCT: u16 = 7;
    // enum nfnl_acct_msg_types: NEW, GET, GET_CTRZERO, DEL.
    const NFNL_MSG_ACCT_DEL: u16 = 3;
    const NFACCT_NAME: u16 = 1;
    let what = || format!("netlink nfacct delete {name}");
    // Message: nlmsghdr (16) + nfgenmsg (4) + attribute (4 + name + NUL, padded to 4).
    let attr_len = 4 + name.len() + 1;
    let total = 16 + 4 + attr_len.div_ceil(4) * 4;
    let mut msg = vec![0u8; total];
    msg[0..4].copy_from_slice(&(total as u32).to_ne_bytes());
    msg[4..6].copy_from_slice(&((NFNL_SUBSYS_ACCT << 8) | NFNL_MSG_ACCT_DEL).to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16;
    msg[6..8].copy_from_slice(&flags.to_ne_bytes());
    msg[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // nfgenmsg: family AF_UNSPEC, version 0, res_id 0 (all zero).
    msg[20..22].copy_from_slice(&(attr_len as u16).to_ne_bytes());
    msg[22..24].copy_from_slice(&NFACCT_NAME.to_ne_bytes());
    msg[24..24 + name.len()].copy_from_slice(name.as_bytes());

    // SAFETY: plain socket syscalls on a descriptor we own and close below;
    // the buffers outlive the calls and their lengths are passed correctly.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_NETFILTER,
        );
        if fd < 0 {
            return Err(Error::io("opening a netlink socket for", what())(
                std::io::Error::last_os_error(),
            ));
        }
        let mut addr: libc::sockaddr_nl = std::mem::zeroed();
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let sent = libc::sendto(
            fd,
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        );
        if sent < 0 {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(Error::io("sending", what())(e));
        }
        let mut buf = [0u8; 512];
        let n = libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0);
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        if n < 20 {
            return Err(Error::io("reading the answer to", what())(e));
        }
        // NLMSG_ERROR (type 2) carries a negative errno, 0 for success.
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if kind != libc::NLMSG_ERROR as u16 {
            return Err(Error::Invalid(format!(
                "{}: unexpected netlink answer type {kind}",
                what()
            )));
        }
        let errno = -i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
        match errno {
            0 => Ok(true),
            libc::ENOENT => Ok(false),
            _ => Err(Error::io("answer to", what())(
                std::io::Error::from_raw_os_error(errno),
            )),
        }
    }
}

/// A pipe fed from `from` by a thread that counts what passes and prints,
/// every [`METER_EVERY`], how far it is: an image import streams GiB for a
/// minute or more and would otherwise say nothing. Returns the pipe's read
/// end (a child's stdin) and the thread, which ends with the byte count when
/// `from` ends (or with the error when the reader went away first).
pub fn metered(
    mut from: impl std::io::Read + Send + 'static,
    what: String,
    total: Option<u64>,
) -> Result<(Stdio, std::thread::JoinHandle<std::io::Result<u64>>)> {
    let (reader, mut writer) =
        std::io::pipe().map_err(|e| Error::Invalid(format!("making a pipe for {what}: {e}")))?;
    let pump = std::thread::spawn(move || {
        let (start, mut shown, mut n) = (Instant::now(), Instant::now(), 0u64);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let got = from.read(&mut buf)?;
            if got == 0 {
                return Ok(n);
            }
            std::io::Write::write_all(&mut writer, &buf[..got])?;
            n = n.saturating_add(got as u64);
            if shown.elapsed() >= METER_EVERY {
                shown = Instant::now();
                progress!("{}", meter_line(&what, n, total, start.elapsed()));
            }
        }
    });
    Ok((Stdio::from(reader), pump))
}

/// How often [`metered`] reports.
pub const METER_EVERY: Duration = Duration::from_secs(10);

/// `what: 1.2 of 3.6 GiB (33%), 45 MB/s`.
fn meter_line(what: &str, n: u64, total: Option<u64>, took: Duration) -> String {
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let rate = n as f64 / took.as_secs_f64().max(0.001) / 1e6;
    match total {
        Some(t) if t > 0 => format!(
            "{what}: {:.2} of {:.2} GiB ({:.0}%), {rate:.0} MB/s",
            gib(n),
            gib(t),
            (n as f64 / t as f64 * 100.0).min(100.0)
        ),
        _ => format!("{what}: {:.2} GiB, {rate:.0} MB/s", gib(n)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_meter_says_how_far_and_how_fast() {
        let d = Duration::from_secs(10);
        assert_eq!(
            super::meter_line("img", 1 << 30, Some(4 << 30), d),
            "img: 1.00 of 4.00 GiB (25%), 107 MB/s"
        );
        assert_eq!(
            super::meter_line("img", 1 << 29, None, d),
            "img: 0.50 GiB, 54 MB/s"
        );
    }

    #[test]
    fn metered_passes_every_byte_on() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
        let (stdin, pump) =
            super::metered(std::io::Cursor::new(data.clone()), "t".into(), None).unwrap();
        let out = std::process::Command::new("cat")
            .stdin(stdin)
            .output()
            .unwrap();
        assert_eq!(pump.join().unwrap().unwrap(), data.len() as u64);
        assert_eq!(out.stdout, data);
    }

    use super::*;

    #[test]
    fn iptables_words_keep_quoted_comments_together() {
        let w = split_iptables_words(
            r#"POSTROUTING -s 10.244.0.5/32 -m comment --comment "name: \"localkube-dev\" id: \"abc\"" -j CNI-123"#,
        );
        assert_eq!(
            w,
            vec![
                "POSTROUTING",
                "-s",
                "10.244.0.5/32",
                "-m",
                "comment",
                "--comment",
                r#"name: "localkube-dev" id: "abc""#,
                "-j",
                "CNI-123"
            ]
        );
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
        assert_eq!(unescape_mount_path(r"/end\"), r"/end\");
    }
}
