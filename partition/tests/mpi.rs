//! The MPI exchange between real ranks on this machine: `mpirun` starts
//! `dgl-partition selftest` (every collective, known data, each rank checks
//! every element), over TCP only as between pods, once with MPI's own limits
//! and once with a tiny count limit that forces the chunked rounds.
//! Needs OpenMPI (`openmpi-bin`, `libopenmpi-dev`).
#![cfg(feature = "mpi")]

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_dgl-partition");

/// Runs the self-test on `ranks` local ranks; returns each rank's line.
fn mpirun(ranks: u32, extra: &[&str]) -> Vec<String> {
    // MPI's session files in a dir of its own: OpenMPI processes started
    // at once race creating /tmp/ompi.<host>.<uid> ("File exists").
    let mpi_tmp = tempfile::tempdir().expect("a temp dir for MPI's session files");
    let mut cmd = Command::new("mpirun");
    cmd.args([
        "-n",
        &ranks.to_string(),
        "--oversubscribe",
        "--bind-to",
        "none",
    ])
    .args(["--mca", "btl", "tcp,self", "--mca", "pml", "ob1"])
    .args([
        "--mca",
        "btl_tcp_if_include",
        "lo",
        "--mca",
        "oob_tcp_if_include",
        "lo",
    ])
    .args([BIN, "selftest"])
    .args(extra)
    // mpirun refuses root without these; harmless otherwise.
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    .env("TMPDIR", mpi_tmp.path());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run mpirun (install openmpi-bin): {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mpirun -n {ranks} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("selftest ok: "))
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(lines.len(), ranks as usize, "one line per rank:\n{stdout}");
    for (r, l) in lines.iter().enumerate() {
        assert!(
            l.starts_with(&format!("selftest ok: rank {r} of {ranks}: ")) && l.contains("(mpi,"),
            "{l}"
        );
    }
    lines
}

/// The number before " transfers" in a rank's line.
fn transfers(line: &str) -> u64 {
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| *w == "transfers").unwrap();
    words[i - 1].parse().unwrap()
}

#[test]
fn two_ranks_exchange_in_one_call_per_operation() {
    for l in mpirun(2, &["--scale", "2000"]) {
        // broadcast, two gathervs, three alltoallvs: one call each.
        assert_eq!(transfers(&l), 6, "{l}");
    }
}

#[test]
fn a_small_count_limit_splits_every_operation_into_rounds() {
    for l in mpirun(3, &["--scale", "300", "--max-count", "64"]) {
        assert!(transfers(&l) > 50, "expected many rounds: {l}");
    }
    // Rounds also respect a memory budget: 40 bytes, i.e. 5 u64 per round.
    let by_count = mpirun(2, &["--scale", "100", "--max-count", "64"]);
    let by_memory = mpirun(
        2,
        &["--scale", "100", "--max-count", "64", "--round-bytes", "40"],
    );
    assert!(
        transfers(&by_memory[0]) > transfers(&by_count[0]),
        "{by_count:?} {by_memory:?}"
    );
}
