//! DistParMETIS under a memory limit per rank: real `mpirun -n 3` of
//! `dgl-partition rank`, each rank started through `prlimit --data` (the
//! kernel refuses its heap and private mappings past the limit; OpenMPI
//! runs under it). On an R-MAT graph of 200 k nodes and 5.5 M directed
//! edges the limit, 300 MB per rank, has a third of margin on both sides
//! (measured 2026-11-27, release build): the distributed partitioner runs
//! under 225 MB (not under 200 MB; 181-192 MB peak RSS per rank), while
//! gathering the structure on rank 0 (429 MB peak RSS there) fails even
//! under 400 MB: rank 0 runs out of memory, the run fails and names it.
#![cfg(feature = "mpi")]

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_dgl-partition");
/// RLIMIT_DATA of every rank.
const LIMIT: &str = "300000000";

fn mpirun_limited(metadata: &Path, out: &Path, extra: &[&str]) -> Output {
    // MPI's session files in a dir of its own: OpenMPI processes started
    // at once race creating /tmp/ompi.<host>.<uid> ("File exists").
    let mpi_tmp = tempfile::tempdir().expect("a temp dir for MPI's session files");
    Command::new("mpirun")
        .args(["-n", "3", "--oversubscribe", "--bind-to", "none"])
        .args(["--mca", "btl", "tcp,self", "--mca", "pml", "ob1"])
        .args(["--mca", "btl_tcp_if_include", "lo"])
        .args(["--mca", "oob_tcp_if_include", "lo"])
        .args(["prlimit", &format!("--data={LIMIT}"), BIN, "rank"])
        .arg("--input")
        .arg(metadata)
        .arg("--out")
        .arg(out)
        .args(["--graph-name", "g", "--threads", "1", "--seed", "7"])
        .arg("--balance-edges")
        .args(extra)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("TMPDIR", mpi_tmp.path())
        .env_remove("DGL_OPERATOR_WORKER_INDEX")
        .output()
        .unwrap_or_else(|e| panic!("cannot run mpirun (install openmpi-bin): {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn ranks_fit_a_limit_that_gathering_the_structure_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("graph");
    let made = Command::new(BIN)
        .args(["make-rmat", "--nodes", "200000", "--edges", "3000000"])
        .args(["--feat", "1", "--chunks", "3", "--seed", "0", "--out"])
        .arg(&graph)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made));
    let metadata = graph.join("metadata.json");

    let out = dir.path().join("dist");
    let run = mpirun_limited(&metadata, &out, &[]);
    let t = text(&run);
    assert!(run.status.success(), "distributed under {LIMIT} bytes: {t}");
    for r in 0..3 {
        assert!(t.contains(&format!("rank {r} of 3: part {r}: ")), "{t}");
        assert!(t.contains(&format!("rank {r} of 3: peak RSS: ")), "{t}");
    }
    let quality = t
        .lines()
        .find(|l| l.contains("edge cut"))
        .expect("rank 0's quality");
    let balance = quality.split("balance").nth(1).unwrap();
    for b in balance.split_whitespace() {
        assert!(b.parse::<f64>().unwrap() <= 1.0305, "{quality}");
    }
    assert!(out.join("g.json").exists());

    let out = dir.path().join("gather");
    let run = mpirun_limited(&metadata, &out, &["--gather-structure"]);
    let t = text(&run);
    assert!(
        !run.status.success(),
        "gathering fit under {LIMIT} bytes: {t}"
    );
    // Out of memory in Rust's allocator (an abort mpirun reports for rank
    // 0) or in METIS (an error rank 0 reports itself).
    let lower = t.to_lowercase();
    assert!(
        (lower.contains("memory allocation") || lower.contains("out of memory"))
            && (t.contains("process rank 0") || t.contains("rank 0 of 3 failed")),
        "the out-of-memory rank is named: {t}"
    );
    assert!(!out.join("g.json").exists());
}
