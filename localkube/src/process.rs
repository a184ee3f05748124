//! Detached control-plane processes, tracked by pid files.
//!
//! Processes run in their own session (setsid) so they outlive the `xtask`
//! or test process that started them and do not receive its terminal's
//! Ctrl-C. A pid file records the pid and the binary; before signalling a
//! pid we check that `/proc/<pid>/exe` is still that binary, so a stale pid
//! file whose pid was reused by an unrelated process is never acted on.
use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::util;

/// What to start.
#[derive(Debug, Clone)]
pub(crate) struct ProcSpec {
    pub name: &'static str,
    pub binary: PathBuf,
    pub args: Vec<String>,
    /// Extra environment variables (on top of the caller's environment).
    pub env: Vec<(String, String)>,
}

/// A pid file's content.
#[derive(Debug, Clone)]
pub(crate) struct PidRecord {
    pub pid: i32,
    pub binary: PathBuf,
    pub file: PathBuf,
}

pub(crate) fn pid_file(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join(format!("{name}.pid"))
}

pub(crate) fn log_file(log_dir: &Path, name: &str) -> PathBuf {
    log_dir.join(format!("{name}.log"))
}

/// Starts `spec` detached, logging to `<log_dir>/<name>.log` (the previous
/// run's log is kept as `.log.prev`), and records its pid.
pub(crate) fn spawn(run_dir: &Path, log_dir: &Path, spec: &ProcSpec) -> Result<PidRecord> {
    spawn_in(run_dir, log_dir, spec, None)
}

/// [`spawn`], with the process moved into the network namespace bound at
/// `netns` (a file, see `node::netns`) before it executes. Only the network
/// namespace changes: mounts stay shared with the host, which the kubelet
/// and containerd of one node need (volumes, rootfs, the pods' netns files).
pub(crate) fn spawn_in(
    run_dir: &Path,
    log_dir: &Path,
    spec: &ProcSpec,
    netns: Option<&Path>,
) -> Result<PidRecord> {
    util::create_dir_all(run_dir)?;
    util::create_dir_all(log_dir)?;
    if !spec.binary.is_file() {
        return Err(Error::MissingBinary {
            path: spec.binary.clone(),
            stamp: spec
                .binary
                .parent()
                .map(|p| p.join(".localkube-stamp.json"))
                .unwrap_or_default(),
        });
    }
    let log = log_file(log_dir, spec.name);
    if log.exists() {
        let _ = fs::rename(&log, log.with_extension("log.prev"));
    }
    let out = File::create(&log).map_err(Error::io("creating log", &log))?;
    let err = out
        .try_clone()
        .map_err(Error::io("duplicating log handle", &log))?;
    let binary = fs::canonicalize(&spec.binary).map_err(Error::io("resolving", &spec.binary))?;

    let mut cmd = Command::new(&binary);
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    if let Some(ns) = netns {
        enter_netns(&mut cmd, ns)?;
    }
    // SAFETY: setsid and fcntl are async-signal-safe and touch no memory of
    // the parent; they are all that is done between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // A daemon outlives its starter: it must not keep what the starter
            // inherited open (a `flock` around `cargo xtask e2e` would stay
            // held by the cluster for as long as it runs). Close-on-exec, not
            // close: the spawn's own error pipe is among them.
            for fd in 3..1024 {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags >= 0 {
                    libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| Error::Spawn {
        program: binary.display().to_string(),
        source,
    })?;
    let pid = child.id() as i32;
    // Reap the child if it exits while this process is still alive (a test
    // binary runs for minutes); otherwise it would linger as a zombie and look
    // alive to kill(pid, 0). When this process exits first, init adopts it.
    std::thread::Builder::new()
        .name(format!("reap-{}", spec.name))
        .spawn(move || {
            let _ = child.wait();
        })
        .map_err(Error::io("spawning reaper thread for", &binary))?;

    let file = pid_file(run_dir, spec.name);
    let record = PidRecord {
        pid,
        binary,
        file: file.clone(),
    };
    util::write_atomic(
        &file,
        format!("{}\n{}\n", record.pid, record.binary.display()).as_bytes(),
        0o644,
    )?;
    Ok(record)
}

/// Makes `cmd` join the network namespace bound at `netns` between fork
/// and exec (setns(2) on a file opened there; both are async-signal-safe).
pub(crate) fn enter_netns(cmd: &mut Command, netns: &Path) -> Result<()> {
    let path = std::ffi::CString::new(netns.as_os_str().as_encoded_bytes())
        .map_err(|e| Error::Invalid(format!("netns path {}: {e}", netns.display())))?;
    // SAFETY: open, setns and close are async-signal-safe syscalls; `path`
    // is moved into the closure and outlives it.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let rc = libc::setns(fd, libc::CLONE_NEWNET);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if rc != 0 {
                return Err(err);
            }
            Ok(())
        });
    }
    Ok(())
}

/// Reads a pid file. A missing file is `None`; a malformed one is reported
/// and removed (it can only be left over from a crash mid-write or a manual
/// edit, and there is nothing safe to signal).
pub(crate) fn read_pid(run_dir: &Path, name: &str) -> Option<PidRecord> {
    let file = pid_file(run_dir, name);
    let text = fs::read_to_string(&file).ok()?;
    let mut lines = text.lines();
    let pid = lines.next().and_then(|l| l.trim().parse::<i32>().ok());
    let binary = lines.next().map(PathBuf::from);
    match (pid, binary) {
        (Some(pid), Some(binary)) if pid > 1 => Some(PidRecord { pid, binary, file }),
        _ => {
            tracing::warn!(file = %file.display(), "ignoring malformed pid file");
            let _ = fs::remove_file(&file);
            None
        }
    }
}

/// True if `pid` exists, is not a zombie, and runs `binary`.
pub(crate) fn is_running(rec: &PidRecord) -> bool {
    let proc_dir = PathBuf::from(format!("/proc/{}", rec.pid));
    let Ok(stat) = fs::read_to_string(proc_dir.join("stat")) else {
        return false;
    };
    // Field 3 follows the parenthesised command name, which may contain spaces.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    if matches!(state, Some("Z") | Some("X") | None) {
        return false;
    }
    match fs::read_link(proc_dir.join("exe")) {
        Ok(exe) => {
            // A binary replaced by a rebuild shows as "<path> (deleted)".
            let exe = exe.to_string_lossy();
            let exe = exe.trim_end_matches(" (deleted)");
            Path::new(exe) == rec.binary
        }
        // Without access to exe (should not happen for our own processes),
        // fall back to argv[0].
        Err(_) => fs::read(proc_dir.join("cmdline"))
            .ok()
            .and_then(|c| c.split(|b| *b == 0).next().map(|a| a.to_vec()))
            .is_some_and(|argv0| Path::new(&*String::from_utf8_lossy(&argv0)) == rec.binary),
    }
}

pub(crate) fn signal(rec: &PidRecord, sig: libc::c_int) -> Result<()> {
    // SAFETY: plain syscall with integer arguments.
    if unsafe { libc::kill(rec.pid, sig) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        return Ok(()); // already gone
    }
    Err(Error::Signal {
        pid: rec.pid,
        pid_file: rec.file.clone(),
        reason: format!("not signallable: {err}"),
    })
}

fn wait_gone(rec: &PidRecord, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if !is_running(rec) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !is_running(rec)
}

/// Stops the process recorded in `rec` (SIGTERM, then SIGKILL after
/// `grace`), if it is still the process we started, and removes the pid file.
pub(crate) fn stop(rec: &PidRecord, grace: Duration) -> Result<()> {
    if is_running(rec) {
        signal(rec, libc::SIGTERM)?;
        if !wait_gone(rec, grace) {
            tracing::warn!(pid = rec.pid, binary = %rec.binary.display(), "did not exit after SIGTERM; sending SIGKILL");
            signal(rec, libc::SIGKILL)?;
            if !wait_gone(rec, Duration::from_secs(10)) {
                return Err(Error::Signal {
                    pid: rec.pid,
                    pid_file: rec.file.clone(),
                    reason: "still running 10s after SIGKILL".into(),
                });
            }
        }
    }
    util::remove_file_if_exists(&rec.file)
}
