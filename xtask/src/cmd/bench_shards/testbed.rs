//! The network namespaces: a bridge, the partitioner and the workers.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::common::*;
use super::registry;

/// The switch, partitioner and worker namespaces and the dglrun processes in
/// them. Drop stops the processes and deletes the namespaces (which deletes
/// the veth pairs and the bridge).
pub(super) struct Testbed {
    pub(super) dglrun: PathBuf,
    pub(super) namespaces: Vec<String>,
    pub(super) partitioner_ns: String,
    pub(super) worker_ns: Vec<String>,
    pub(super) children: Vec<(String, Child)>,
}

pub(super) fn ip(args: &[&str]) -> Result<()> {
    iproute2("ip", args)
}

/// Runs `ip` or `tc`, failing with its stderr.
pub(super) fn iproute2(tool: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(tool)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {tool}"))?;
    if !out.status.success() {
        bail!(
            "{tool} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Testbed {
    pub(super) fn create(workers: u32, dglrun: &Path, link: Link) -> Result<Testbed> {
        // The pid keeps names unique between concurrent benches; the worker
        // count between the testbeds of one bench.
        let prefix = format!("dglbs{}-n{workers}", std::process::id());
        let switch = format!("{prefix}-sw");
        let partitioner_ns = format!("{prefix}-part");
        let worker_ns: Vec<String> = (0..workers).map(|i| format!("{prefix}-w{i}")).collect();
        let mut bed = Testbed {
            dglrun: dglrun.to_path_buf(),
            namespaces: Vec::new(),
            partitioner_ns: partitioner_ns.clone(),
            worker_ns: worker_ns.clone(),
            children: Vec::new(),
        };
        for ns in std::iter::once(&switch)
            .chain(std::iter::once(&partitioner_ns))
            .chain(&worker_ns)
        {
            // Registered first: an interrupt between the two steps still deletes it.
            registry::track_ns(ns);
            bed.namespaces.push(ns.clone());
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &switch, "link", "set", "br0", "up"])?;
        // A wire, not a firewall: bridged frames skip iptables (best effort,
        // the knob exists only with br_netfilter loaded).
        let _ = Command::new("ip")
            .args(["netns", "exec", &switch, "sysctl", "-qw"])
            .args([
                "net.bridge.bridge-nf-call-iptables=0",
                "net.bridge.bridge-nf-call-ip6tables=0",
                "net.bridge.bridge-nf-call-arptables=0",
            ])
            .stderr(Stdio::null())
            .status();
        let mut hosts = vec![(partitioner_ns.clone(), "part".to_string(), PARTITIONER_IP)];
        for (i, ns) in worker_ns.iter().enumerate() {
            hosts.push((ns.clone(), format!("w{i}"), worker_ip(i as u32)));
        }
        for (ns, port, addr) in &hosts {
            // Both ends are created directly in their namespaces: nothing
            // ever appears in the root namespace.
            ip(&[
                "link", "add", "name", "eth0", "netns", ns, "type", "veth", "peer", "name", port,
                "netns", &switch,
            ])?;
            ip(&["-n", &switch, "link", "set", port, "master", "br0", "up"])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        }
        if let Some(tbf) = link.tbf_args() {
            let mut tc = vec!["-n", &partitioner_ns, "qdisc", "add", "dev", "eth0", "root"];
            tc.extend(tbf.iter().map(String::as_str));
            iproute2("tc", &tc).context(
                "cannot shape the partitioner's link (the kernel needs the tbf qdisc, sch_tbf); \
                 --link-gbit 0 measures the unshaped link only",
            )?;
        }
        Ok(bed)
    }

    /// Starts dglrun with `args` in namespace `ns`, output to `log`.
    pub(super) fn spawn(
        &mut self,
        ns: &str,
        name: &str,
        args: &[String],
        log: &Path,
    ) -> Result<u32> {
        let nsfile = File::open(netns_path(ns))
            .with_context(|| format!("cannot open network namespace {ns}"))?;
        let fd = nsfile.as_raw_fd();
        let out = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        let mut cmd = Command::new(&self.dglrun);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            // Its own process group: a Ctrl-C at the terminal reaches only
            // the bench, which stops the agents in order.
            .process_group(0);
        // SAFETY: only async-signal-safe system calls run between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // This thread blocks the signals the bench handles itself
                // (see `interrupts`), and a child inherits the mask: dglrun
                // must get its SIGTERM.
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                if libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::other("cannot reset the signal mask"));
                }
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Dies with the bench even when the bench is SIGKILLed and
                // no cleanup code runs. (Spawned from the main thread, which
                // lives as long as the bench.)
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {} for the {name}", self.dglrun.display()))?;
        drop(nsfile);
        let pid = child.id();
        registry::track_pid(pid);
        self.children.push((name.to_string(), child));
        Ok(pid)
    }

    /// Fails, with the end of its log, when a dglrun process has exited.
    pub(super) fn check_running(&mut self, work: &Path) -> Result<()> {
        for (name, child) in &mut self.children {
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_dir(work.join("logs"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .find(|p| p.to_string_lossy().ends_with(&format!("-{name}.log")));
                let tail = log
                    .map(|p| {
                        let text = std::fs::read_to_string(&p).unwrap_or_default();
                        let lines: Vec<&str> = text.lines().collect();
                        lines[lines.len().saturating_sub(20)..].join("\n")
                    })
                    .unwrap_or_default();
                bail!("dglrun {name} exited early ({status}):\n{tail}");
            }
        }
        Ok(())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if registry::interrupted() {
            return; // the signal thread removes everything
        }
        for (_, child) in &mut self.children {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for (name, child) in &mut self.children {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        eprintln!("    {name} ignored SIGTERM; killing it");
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
            registry::untrack_pid(child.id());
        }
        registry::delete_namespaces(&self.namespaces);
    }
}

pub(super) fn netns_path(ns: &str) -> String {
    format!("/var/run/netns/{ns}")
}

/// Runs `f` on a new thread that has entered network namespace `ns`: every
/// socket it creates lives there.
pub(super) fn in_netns<T, F>(ns: &str, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let nsfile = File::open(netns_path(ns))
        .with_context(|| format!("cannot open network namespace {ns}"))?;
    let ns_name = ns.to_string();
    std::thread::Builder::new()
        .name(format!("netns-{ns}"))
        .spawn(move || {
            // SAFETY: setns(2) with a namespace fd we own; it changes only
            // this thread's network namespace.
            if unsafe { libc::setns(nsfile.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("cannot enter network namespace {ns_name}"));
            }
            drop(nsfile);
            f()
        })?
        .join()
        .map_err(|_| anyhow!("a thread in namespace {ns} panicked"))?
}
