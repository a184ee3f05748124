//! The rank program of partition mode DistParMETIS against the
//! single-process pipeline (partition mode ParMETIS) on the same chunked
//! input, partitioner and seed: the same assignment, so byte for byte the
//! same partition JSON, feature files, original ids, graph arrays and
//! assignment files.
//!
//! - a world of one (`exchange::Single`, no MPI) through the library;
//! - with `--features mpi`: `mpirun -n 2` and `-n 3` of `dgl-partition
//!   rank` on this machine (TCP only, as between pods; once with a tiny
//!   count limit that forces chunked rounds), every rank writing into the
//!   same folder; and a bad chunk that only one rank reads ends every rank
//!   (MPI_Abort) with a message naming the rank and the file.
//!
//! graph.dgl is written natively by both (tests/real_dgl*.rs load it with
//! real DGL and compare it with DGL's own save_graphs).

#[path = "input_common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dgl_partition::config::{AllParts, Config, OwnPart};
use dgl_partition::exchange::Single;
use dgl_partition::input::{write_chunked, EdgeFormat, Source};
use dgl_partition::model::InputGraph;
use dgl_partition::rank;
use dgl_partition::run;
use dgl_partition::settings::Choice;

/// The `--python` the callers still pass: ignored since graph.dgl is
/// written natively (a path that does not exist proves it is not run).
const PYTHON: &str = "/nonexistent/python-is-not-run";

/// Every file below `dir` (relative path → bytes).
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn assert_same_files(want: &Path, got: &Path) {
    let (w, g) = (files(want), files(got));
    let names = |m: &BTreeMap<PathBuf, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&w), names(&g), "the same files");
    for (name, bytes) in &w {
        assert!(&g[name] == bytes, "{} differs", name.display());
    }
    assert!(w.keys().any(|k| k.ends_with("graph.dgl")));
}

struct Case {
    graph: InputGraph,
    choice: Choice,
    balance_train: Option<String>,
    balance_edges: bool,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            graph: common::heterogeneous(),
            choice: Choice::Metis,
            balance_train: Some("mask".into()),
            balance_edges: true,
        },
        Case {
            graph: common::homogeneous(),
            choice: Choice::Metis,
            balance_train: None,
            balance_edges: false,
        },
        Case {
            graph: common::heterogeneous(),
            choice: Choice::Random,
            balance_train: None,
            balance_edges: false,
        },
    ]
}

/// `case`'s settings for either driver, reading `metadata`, writing `out`.
fn config<D>(case: &Case, metadata: &Path, out: &Path, driver: D) -> Config<D> {
    Config {
        source: Source::Chunked {
            metadata: metadata.to_path_buf(),
        },
        out_dir: out.to_path_buf(),
        graph_name: "g".into(),
        partitioner: case.choice.clone(),
        balance_train: case.balance_train.clone(),
        balance_edges: case.balance_edges,
        threads: 2,
        seed: 7,
        driver,
    }
}

/// ParMETIS mode's output for `case` in `num_parts` parts.
fn single_process(case: &Case, metadata: &Path, out: &Path, num_parts: u32) {
    run::run(&config(case, metadata, out, AllParts { num_parts })).unwrap();
}

#[test]
fn a_world_of_one_writes_what_the_single_process_pipeline_writes() {
    let dir = tempfile::tempdir().unwrap();
    for (i, case) in cases().iter().enumerate() {
        let input = dir.path().join(format!("in{i}"));
        let metadata = write_chunked(&case.graph, &input, 3, EdgeFormat::Csv).unwrap();
        let want = dir.path().join(format!("want{i}"));
        single_process(case, &metadata, &want, 1);
        let got = dir.path().join(format!("got{i}"));
        let cfg = config(case, &metadata, &got, OwnPart::default());
        let report = rank::run(&Single, &cfg).unwrap();
        assert_eq!(report.parts()[0].inner_nodes, case.graph.num_nodes());
        assert_eq!(report.num_edges, case.graph.num_edges());
        assert!(report.quality.is_some(), "rank 0 reports the quality");
        assert_same_files(&want, &got);
    }
}

#[test]
fn a_bad_input_is_named_and_leaves_no_json() {
    let dir = tempfile::tempdir().unwrap();
    let case = &cases()[0];
    let metadata = write_chunked(&case.graph, dir.path(), 2, EdgeFormat::Csv).unwrap();
    let chunk = dir.path().join("edge_index/author:writes:paper1.txt");
    let text = std::fs::read_to_string(&chunk).unwrap();
    std::fs::write(&chunk, text.replacen('\n', " 3\n", 1)).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("g.json"), "{}").unwrap();
    let cfg = Config {
        source: Source::Chunked { metadata },
        out_dir: out.clone(),
        graph_name: "g".into(),
        partitioner: Choice::Metis,
        balance_train: None,
        balance_edges: false,
        threads: 1,
        seed: 0,
        driver: OwnPart::default(),
    };
    let e = rank::run(&Single, &cfg).unwrap_err().to_string();
    assert!(
        e.contains("author:writes:paper1.txt") && e.contains("line 1"),
        "{e}"
    );
    assert!(!out.join("g.json").exists(), "the stale JSON is gone");
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;
    use std::process::Command;

    const BIN: &str = env!("CARGO_BIN_EXE_dgl-partition");

    /// `mpirun -n <ranks> dgl-partition rank ...` on this machine, TCP only.
    fn mpirun(ranks: u32, args: &[String]) -> std::process::Output {
        // MPI's session files in a dir of its own: OpenMPI processes started
        // at once race creating /tmp/ompi.<host>.<uid> ("File exists").
        let mpi_tmp = tempfile::tempdir().expect("a temp dir for MPI's session files");
        Command::new("mpirun")
            .args(["-n", &ranks.to_string(), "--oversubscribe"])
            .args(["--bind-to", "none", "--mca", "btl", "tcp,self"])
            .args(["--mca", "pml", "ob1", "--mca", "btl_tcp_if_include", "lo"])
            .args(["--mca", "oob_tcp_if_include", "lo"])
            .arg(BIN)
            .arg("rank")
            .args(args)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("TMPDIR", mpi_tmp.path())
            .env_remove("DGL_OPERATOR_WORKER_INDEX")
            .output()
            .unwrap_or_else(|e| panic!("cannot run mpirun (install openmpi-bin): {e}"))
    }

    fn rank_args(case: &Case, metadata: &Path, out: &Path, python: &str) -> Vec<String> {
        let mut a: Vec<String> = [
            "--input",
            &metadata.display().to_string(),
            "--out",
            &out.display().to_string(),
            "--graph-name",
            "g",
            "--python",
            python,
            "--threads",
            "2",
            "--seed",
            "7",
            "--part-method",
            match case.choice {
                Choice::Random => "random",
                _ => "metis",
            },
        ]
        .map(String::from)
        .to_vec();
        if let Some(m) = &case.balance_train {
            a.push(format!("--balance-train={m}"));
        }
        if case.balance_edges {
            a.push("--balance-edges".into());
        }
        a
    }

    fn output_text(o: &std::process::Output) -> String {
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    }

    #[test]
    fn ranks_write_what_parmetis_mode_writes() {
        let dir = tempfile::tempdir().unwrap();
        let python = PYTHON.to_string();
        for (i, case) in cases().iter().enumerate() {
            let input = dir.path().join(format!("in{i}"));
            let metadata = write_chunked(&case.graph, &input, 4, EdgeFormat::Parquet).unwrap();
            for (ranks, extra) in [(2, &[][..]), (3, &["--max-count", "16"][..])] {
                let want = dir.path().join(format!("want{i}-{ranks}"));
                single_process(case, &metadata, &want, ranks);
                let got = dir.path().join(format!("got{i}-{ranks}"));
                let mut args = rank_args(case, &metadata, &got, &python);
                args.extend(extra.iter().map(|s| s.to_string()));
                let out = mpirun(ranks, &args);
                let text = output_text(&out);
                assert!(out.status.success(), "mpirun -n {ranks}: {text}");
                for r in 0..ranks {
                    assert!(
                        text.contains(&format!("rank {r} of {ranks}: part {r}: ")),
                        "{text}"
                    );
                }
                assert_same_files(&want, &got);
            }
        }
    }

    #[test]
    fn a_bad_chunk_read_by_one_rank_ends_every_rank() {
        let dir = tempfile::tempdir().unwrap();
        let python = PYTHON.to_string();
        let case = &cases()[0];
        let metadata = write_chunked(&case.graph, dir.path(), 2, EdgeFormat::Csv).unwrap();
        // Chunk 1 is rank 1's share only.
        let chunk = dir.path().join("edge_index/paper:cites:paper1.txt");
        let text = std::fs::read_to_string(&chunk).unwrap();
        std::fs::write(&chunk, text.replacen('\n', "\n7 x\n", 1)).unwrap();
        let out_dir = dir.path().join("out");
        let started = std::time::Instant::now();
        let out = mpirun(2, &rank_args(case, &metadata, &out_dir, &python));
        let text = output_text(&out);
        assert!(!out.status.success(), "{text}");
        assert!(
            text.contains("dgl-partition rank 1 of 2 failed: ")
                && text.contains("paper:cites:paper1.txt, line 2"),
            "{text}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        assert!(!out_dir.join("g.json").exists());
    }
}
