//! No duration panics the binary (issue #25, item 7): every duration
//! environment variable of dglrun set to u64::MAX seconds, and to a number
//! too large for 64 bits, on the real binary. Each is capped at a year when
//! parsed; before, `DGLRUN_STOP_GRACE=18446744073709551615` panicked the
//! launcher (`Duration + Duration` overflowed) and a huge wait timeout
//! panicked at `Instant + timeout`.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::free_port;

const DGLRUN: &str = env!("CARGO_BIN_EXE_dglrun");

/// Every duration env var of dglrun (flags without one are covered by the
/// unit proptest over the command line).
const DURATION_ENVS: [&str; 5] = [
    "DGLRUN_STOP_GRACE",
    "DGLRUN_WAIT_TIMEOUT",
    "DGLRUN_PROGRESS_INTERVAL",
    "DGLRUN_PEER_TIMEOUT",
    "DGLRUN_SESSION_IDLE_TIMEOUT",
];

const HUGE: [&str; 2] = ["18446744073709551615", "99999999999999999999999999999"];

/// A launcher of one worker that is not there (a closed port), partition
/// mode Skip, so it waits for the worker until --wait-timeout (1 s unless
/// `var` is its env var, which then counts).
fn launcher(dir: &Path, port: u16, var: &str, value: &str) -> Command {
    std::fs::write(dir.join("token"), "secret\n").unwrap();
    std::fs::write(dir.join("hostfile"), format!("127.0.0.1 {port} w-0\n")).unwrap();
    let mut c = Command::new(DGLRUN);
    c.args([
        "launch",
        "--partition-mode",
        "Skip",
        "--num-partitions",
        "1",
    ])
    .args(["--graph-name", "g", "--train-entry-point", "t.py"])
    .args(["--num-epochs", "1", "--batch-size", "1"])
    .arg("--hostfile")
    .arg(dir.join("hostfile"))
    .arg("--token-file")
    .arg(dir.join("token"))
    .arg("--state-dir")
    .arg(dir.join("state"))
    .env_remove("DGL_OPERATOR_NUM_WORKERS")
    .env_remove("DGL_OPERATOR_PARTITION_MODE")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for v in DURATION_ENVS {
        c.env_remove(v);
    }
    if var != "DGLRUN_WAIT_TIMEOUT" {
        c.args(["--wait-timeout", "1"]);
    }
    c.env(var, value);
    c
}

/// Runs `c` for at most `limit`: its output, or `None` when it still ran
/// (then killed).
fn run_for(mut c: Command, limit: Duration) -> (Option<Output>, String) {
    let mut child = c.spawn().unwrap();
    let start = Instant::now();
    while start.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            return (Some(out), err);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    (None, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_huge_duration_in_any_env_var_is_capped_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    for var in DURATION_ENVS {
        for value in HUGE {
            let c = launcher(dir.path(), port, var, value);
            if var == "DGLRUN_WAIT_TIMEOUT" {
                // It waits (a year), where it panicked at `Instant + timeout`.
                let (out, err) = run_for(c, Duration::from_secs(3));
                assert!(out.is_none(), "{var}={value}: ended early: {err}");
                assert!(!err.contains("panicked"), "{var}={value}: {err}");
                continue;
            }
            let (out, err) = run_for(c, Duration::from_secs(30));
            let out = out.unwrap_or_else(|| panic!("{var}={value}: still running: {err}"));
            assert_eq!(out.status.code(), Some(1), "{var}={value}: {err}");
            assert!(!err.contains("panicked"), "{var}={value}: {err}");
            assert!(
                err.contains("did not answer within"),
                "{var}={value}: {err}"
            );
        }
    }
}

#[test]
fn a_probe_with_a_huge_timeout_answers_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "secret\n").unwrap();
    let mut c = Command::new(DGLRUN);
    c.args(["probe", "--timeout", HUGE[0], "--addr"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--token-file")
        .arg(dir.path().join("token"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (out, err) = run_for(c, Duration::from_secs(30));
    let out = out.expect("the probe ends");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not ready"), "{err}");
}
