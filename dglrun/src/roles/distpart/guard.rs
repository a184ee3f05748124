//! `dglrun rank-guard -- PROGRAM ARGS...`: how every DistParMETIS rank is
//! started on its worker (mpirun's daemon runs the guard, the guard runs
//! `dgl-partition rank`). It waits for the rank; when the rank ended by a
//! signal it did not pass on (the kernel's OOM killer sends SIGKILL), it
//! prints one line naming the rank, this worker and its memory limit (read
//! from this process's cgroup), which mpirun relays to the launcher like
//! the rank's own output, and exits 128+signal. So the launcher names a
//! killed rank without relying on mpirun's own wording, which OpenMPI under
//! load sometimes omits.
//!
//! The guard holds a few MiB, so the OOM killer (which picks the largest
//! process of the cgroup) takes the rank, not the guard. Signals sent to
//! the guard (mpirun stopping the job) are passed on to the rank; if the
//! guard itself is killed, the kernel kills the rank (parent-death signal).

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use clap::Args;
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use super::killed::{self, Limit};

/// `dglrun rank-guard`'s command line.
#[derive(Args, Debug, Clone)]
pub struct GuardArgs {
    /// The cgroup filesystem, where the guard reads its memory limit
    /// (cgroup v2's `memory.max`, or v1's `memory/…/memory.limit_in_bytes`).
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,
    /// The rank program and its arguments (after `--`).
    #[arg(
        value_name = "PROGRAM",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<String>,
}

/// Status when the guard could not start or wait for the rank.
const GUARD_FAILED: u8 = 127;

/// The rank's pid once started (0 before), for the signal handler.
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal that came before the rank started, passed on once it has.
static PENDING: AtomicI32 = AtomicI32::new(0);
/// Whether the guard passed a signal on: the rank's death by it is then
/// the job being stopped, not a kill to report.
static FORWARDED: AtomicBool = AtomicBool::new(false);

/// The signals mpirun's daemon stops its processes with.
const FORWARD: [Signal; 5] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

extern "C" fn forward(sig: libc::c_int) {
    FORWARDED.store(true, Ordering::SeqCst);
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    } else {
        PENDING.store(sig, Ordering::SeqCst);
    }
}

fn install_forwarding() -> nix::Result<()> {
    let act = SigAction::new(
        SigHandler::Handler(forward),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for s in FORWARD {
        // SAFETY: the handler only touches atomics and calls kill(2).
        unsafe { sigaction(s, &act) }?;
    }
    Ok(())
}

pub fn main(args: GuardArgs) -> ExitCode {
    if let Err(e) = install_forwarding() {
        eprintln!("dglrun rank-guard: cannot install its signal handlers: {e}");
        return ExitCode::from(GUARD_FAILED);
    }
    let (program, rest) = match args.command.split_first() {
        Some(p) => p,
        None => return ExitCode::from(GUARD_FAILED),
    };
    let mut cmd = Command::new(program);
    cmd.args(rest);
    // SAFETY: prctl(2) is async-signal-safe; nothing else runs between
    // fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dglrun rank-guard: cannot start {program}: {e}");
            return ExitCode::from(GUARD_FAILED);
        }
    };
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    let pending = PENDING.swap(0, Ordering::SeqCst);
    if pending != 0 {
        // SAFETY: a plain kill(2) of our own child.
        unsafe { libc::kill(child.id() as i32, pending) };
    }
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("dglrun rank-guard: waiting for {program}: {e}");
            return ExitCode::from(GUARD_FAILED);
        }
    };
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(GUARD_FAILED)),
        (None, Some(sig)) => {
            if !FORWARDED.load(Ordering::SeqCst) {
                eprintln!("{}", report(sig, &args));
            }
            ExitCode::from(u8::try_from(128 + sig).unwrap_or(GUARD_FAILED))
        }
        (None, None) => ExitCode::from(GUARD_FAILED),
    }
}

/// The line for a rank killed by `sig`, with what this process knows.
fn report(sig: i32, args: &GuardArgs) -> String {
    let var = |k: &str| std::env::var(k).ok();
    let rank = var("OMPI_COMM_WORLD_RANK")
        .or_else(|| var("PMIX_RANK"))
        .and_then(|r| r.parse().ok());
    let host = var("HOSTNAME")
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|| "an unknown host".into());
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let limit = match killed::own_memory_limit(&args.cgroup_root, &cgroups) {
        Some(b) => Limit::Bytes(b),
        None => Limit::Unlimited,
    };
    killed::guard_line(rank, &host, &signal_name(sig), limit)
}

/// `9 (Killed)`, as mpirun and the shell word it.
fn signal_name(sig: i32) -> String {
    // SAFETY: strsignal returns a static or thread-local string, copied at
    // once; the guard has one thread.
    let name = unsafe {
        let p = libc::strsignal(sig);
        if p.is_null() {
            return sig.to_string();
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    format!("{sig} ({name})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_worded_as_mpirun_words_it() {
        assert_eq!(signal_name(9), "9 (Killed)");
        assert_eq!(signal_name(15), "15 (Terminated)");
    }
}
