//! "Machines" for dglrun's multi-host tests: network namespaces joined by a
//! bridge or a veth pair, processes started in them (optionally with their
//! own host name and a private /dev/shm), and cleanup of everything a test
//! started, found by a marker in the environment. Needs root.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::ffi::CString;
use std::fs::File;
use std::os::fd::IntoRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// The environment variable that marks every process a test starts.
pub const MARKER_VAR: &str = "DGLRUN_TEST_MARKER";

/// Runs a command, failing the test with its stderr.
pub fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert!(
        unsafe { libc::geteuid() } == 0,
        "these tests create network namespaces and need root"
    );
}

/// Network namespaces and the marker of the processes started in them.
/// Drop kills every process still in them or carrying the marker, then
/// deletes them (which deletes their veth ends and bridge).
pub struct Hosts {
    pub ns: Vec<String>,
    pub marker: String,
}

impl Hosts {
    /// Fresh namespaces `<name>-<x>` for each `x` (a leftover of an earlier
    /// run of the same name is deleted first), loopback up.
    fn fresh(name: &str, hosts: &[&str]) -> Hosts {
        require_root();
        let ns: Vec<String> = hosts.iter().map(|x| format!("{name}-{x}")).collect();
        let h = Hosts {
            ns: ns.clone(),
            marker: format!(
                "{name}-{}",
                std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos()
            ),
        };
        for n in &ns {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
            run("ip", &["netns", "add", n]);
            run("ip", &["-n", n, "link", "set", "lo", "up"]);
        }
        h
    }

    /// One namespace per IP on a bridge that lives in the last one and holds
    /// its IP; the others reach it through veth pairs named `<veth>x` (in the
    /// host) and `<veth>xp` (on the bridge). Interface names have at most 15
    /// characters, so `veth` must be short.
    pub fn bridged(name: &str, veth: &str, ips: &[&str], prefix_len: u8) -> Hosts {
        let letters = ["a", "b", "c", "d", "e", "f"];
        let h = Hosts::fresh(name, &letters[..ips.len()]);
        let (last, bridge_ip) = (&h.ns[ips.len() - 1], ips[ips.len() - 1]);
        run("ip", &["-n", last, "link", "add", "br0", "type", "bridge"]);
        let cidr = format!("{bridge_ip}/{prefix_len}");
        run("ip", &["-n", last, "addr", "add", &cidr, "dev", "br0"]);
        run("ip", &["-n", last, "link", "set", "br0", "up"]);
        for (i, x) in letters[..ips.len() - 1].iter().enumerate() {
            let (inner, outer) = (format!("{veth}{x}"), format!("{veth}{x}p"));
            run(
                "ip",
                &[
                    "link", "add", &inner, "type", "veth", "peer", "name", &outer,
                ],
            );
            run("ip", &["link", "set", &inner, "netns", &h.ns[i]]);
            run("ip", &["link", "set", &outer, "netns", last]);
            run(
                "ip",
                &["-n", last, "link", "set", &outer, "master", "br0", "up"],
            );
            let cidr = format!("{}/{prefix_len}", ips[i]);
            run("ip", &["-n", &h.ns[i], "addr", "add", &cidr, "dev", &inner]);
            run("ip", &["-n", &h.ns[i], "link", "set", &inner, "up"]);
        }
        h
    }

    /// Two namespaces joined directly by a veth pair `<veth>a`/`<veth>b`, in a
    /// /30.
    pub fn paired(name: &str, veth: &str, ips: [&str; 2]) -> Hosts {
        let h = Hosts::fresh(name, &["a", "b"]);
        let ends = [format!("{veth}a"), format!("{veth}b")];
        run(
            "ip",
            &[
                "link", "add", &ends[0], "type", "veth", "peer", "name", &ends[1],
            ],
        );
        for i in 0..2 {
            run("ip", &["link", "set", &ends[i], "netns", &h.ns[i]]);
            let cidr = format!("{}/30", ips[i]);
            run(
                "ip",
                &["-n", &h.ns[i], "addr", "add", &cidr, "dev", &ends[i]],
            );
            run("ip", &["-n", &h.ns[i], "link", "set", &ends[i], "up"]);
        }
        h
    }

    /// Makes `cmd` run on host `i`: in its network namespace, with the
    /// marker, and as `isolation` asks.
    pub fn enter(&self, cmd: &mut Command, i: usize, isolation: Isolation) {
        let nsfd = File::open(format!("/var/run/netns/{}", self.ns[i]))
            .unwrap()
            .into_raw_fd();
        cmd.env(MARKER_VAR, &self.marker);
        // Everything the child needs is allocated before fork: only raw
        // system calls run between fork and exec.
        let host = isolation.hostname.map(|h| CString::new(h).unwrap());
        let shm = isolation.private_shm;
        let (root, dev_shm, tmpfs, opts) = (
            CString::new("/").unwrap(),
            CString::new("/dev/shm").unwrap(),
            CString::new("tmpfs").unwrap(),
            CString::new("size=2g,mode=1777").unwrap(),
        );
        // SAFETY: only async-signal-safe system calls run in the child.
        unsafe {
            cmd.pre_exec(move || {
                let check = |r: libc::c_int| {
                    if r == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                };
                check(libc::setns(nsfd, libc::CLONE_NEWNET))?;
                libc::close(nsfd);
                let mut flags = 0;
                if host.is_some() {
                    flags |= libc::CLONE_NEWUTS;
                }
                if shm {
                    flags |= libc::CLONE_NEWNS | libc::CLONE_NEWIPC;
                }
                if flags != 0 {
                    check(libc::unshare(flags))?;
                }
                if let Some(h) = &host {
                    check(libc::sethostname(h.as_ptr(), h.as_bytes().len()))?;
                }
                if shm {
                    check(libc::mount(
                        std::ptr::null(),
                        root.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ))?;
                    check(libc::mount(
                        tmpfs.as_ptr(),
                        dev_shm.as_ptr(),
                        tmpfs.as_ptr(),
                        0,
                        opts.as_ptr().cast(),
                    ))?;
                }
                Ok(())
            });
        }
        // The parent keeps its descriptor (close-on-exec, so no child
        // inherits it): a test opens a handful.
    }

    /// Pids still running in the namespaces, with their command lines.
    pub fn ns_pids(&self) -> Vec<String> {
        let mut pids = Vec::new();
        for n in &self.ns {
            let out = Command::new("ip")
                .args(["netns", "pids", n])
                .output()
                .unwrap();
            pids.extend(
                String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .map(|p| format!("{p} ({})", cmdline(p))),
            );
        }
        pids
    }

    /// Live processes (anywhere) carrying the marker, except `keep`, as
    /// "pid (command line)".
    pub fn marked_except(&self, keep: &[i32]) -> Vec<String> {
        let needle = format!("{MARKER_VAR}={}", self.marker);
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(pid) = name.parse::<i32>() else {
                continue;
            };
            let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            if !keep.contains(&pid)
                && !is_zombie(&name)
                && env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes())
            {
                out.push(format!("{pid} ({})", cmdline(&name)));
            }
        }
        out
    }

    pub fn marked(&self) -> Vec<String> {
        self.marked_except(&[])
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let pid_of = |p: &str| p.split_whitespace().next()?.parse::<i32>().ok();
        for p in self.ns_pids().iter().chain(&self.marked()) {
            if let Some(pid) = pid_of(p) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        for n in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// What a process gets besides its host's network namespace.
#[derive(Default, Clone)]
pub struct Isolation {
    /// Its own UTS namespace with this host name.
    pub hostname: Option<String>,
    /// Its own mount and IPC namespaces with a private tmpfs on /dev/shm
    /// (DGL's servers and trainers share partitions through shared memory,
    /// which two real machines never share).
    pub private_shm: bool,
}

/// Kills and reaps children (a test's own), before its `Hosts` goes.
pub fn kill_all(children: &mut [Child]) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The network namespace of a process, as /proc shows it.
pub fn netns_of(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .unwrap()
        .display()
        .to_string()
}

/// The last `lines` lines of every `*.log` in `dir`, for failure messages.
pub fn log_tails(dir: &Path, lines: usize) -> String {
    let mut s = String::new();
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    for p in logs {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let tail = all[all.len().saturating_sub(lines)..].join("\n");
        s.push_str(&format!("\n===== {} =====\n{tail}\n", p.display()));
    }
    s
}

fn cmdline(pid: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        .map(|c| c.replace('\0', " ").trim().chars().take(120).collect())
        .unwrap_or_default()
}

fn is_zombie(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}
