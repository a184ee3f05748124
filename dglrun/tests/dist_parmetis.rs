//! Partition mode DistParMETIS with real DGL 2.1.0 and OpenMPI across
//! three "machines": network namespaces a and b (the workers) and c (the
//! launcher) on one bridge, each process also with its own host name,
//! mount and IPC namespace and a private /dev/shm (as pods).
//!
//! The GraphSAGE example graph is written once in DGL's chunked format
//! (examples/graphsage/partition.py --output_format chunked) into a folder
//! every namespace sees (the image or a shared volume on a cluster). The
//! launcher waits for the workers, runs mpirun with `dglrun rsh` as its
//! remote agent: one `dgl-partition rank` per worker, rank i in worker i's
//! namespace, each writing its own partition into its worker's workspace
//! (nothing is shipped); then the launcher's marker file appears and
//! GraphSAGE (examples/graphsage/train.py) trains with DGL_DIST_DEBUG=1,
//! and its loss must fall on both ranks. The marker must not exist before
//! both partitions are complete, and no process may remain.
//!
//! Needs root, OpenMPI, the DGL venv (`cargo xtask pyenv`, or
//! DGLRUN_TEST_PYTHON) and `dgl-partition` built with MPI next to dglrun
//! (`cargo build -p dgl-partition --features mpi`) or in
//! DGL_PARTITION_BIN. `DGLRUN_TEST_KEEP_LOGS=1` keeps every log.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::netns::{kill_all, log_tails, netns_of, wait_timeout, Hosts, Isolation};

const DGLRUN: &str = env!("CARGO_BIN_EXE_dglrun");
const PORT: &str = "30249";
const IPS: [&str; 3] = ["10.79.0.2", "10.79.0.3", "10.79.0.1"];

fn repo_root() -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs a test"),
    )
    .parent()
    .unwrap()
    .to_path_buf()
}

/// $DGLRUN_TEST_PYTHON, else the venv of `cargo xtask pyenv` (complete:
/// its stamp file exists). Missing is a failure, never a skip.
fn python() -> PathBuf {
    if let Ok(p) = std::env::var("DGLRUN_TEST_PYTHON") {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "DGLRUN_TEST_PYTHON={} does not exist",
            p.display()
        );
        return p;
    }
    let home = PathBuf::from(std::env::var_os("HOME").expect("HOME is set"));
    let venv = home.join(".cache/dgl-operator/venv/dgl-2.1.0-torch-2.2.1");
    assert!(
        venv.join(".dgl-operator-requirements.sha256").exists(),
        "the DGL venv at {} is missing or incomplete: run `cargo xtask pyenv` (or set DGLRUN_TEST_PYTHON)",
        venv.display()
    );
    venv.join("bin/python")
}

fn dgl_partition() -> PathBuf {
    let p = std::env::var_os("DGL_PARTITION_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(DGLRUN).with_file_name("dgl-partition"));
    assert!(
        p.exists(),
        "{} is missing: build it with `cargo build -p dgl-partition --features mpi` (or set DGL_PARTITION_BIN)",
        p.display()
    );
    p
}

/// Namespaces a, b, c on a bridge (in c), with the processes started in them.
struct Machines {
    hosts: Hosts,
    dir: tempfile::TempDir,
    children: Vec<Child>,
}

impl Machines {
    fn create() -> Machines {
        let id = format!("{}", std::process::id() % 100_000);
        let hosts = Hosts::bridged(&format!("dgldist-{id}"), &format!("vp{id}"), &IPS, 24);
        let keep = std::env::var_os("DGLRUN_TEST_KEEP_LOGS").is_some();
        let dir = tempfile::Builder::new()
            .prefix("dglrun-dist-")
            .disable_cleanup(keep)
            .tempdir()
            .unwrap();
        if keep {
            eprintln!("keeping logs in {}", dir.path().display());
        }
        for x in ["a", "b", "c"] {
            std::fs::create_dir_all(dir.path().join(format!("tmp-{x}"))).unwrap();
        }
        Machines {
            hosts,
            dir,
            children: Vec::new(),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn s(&self, p: &str) -> String {
        self.path(p).display().to_string()
    }

    /// dglrun on machine `i`: its network namespace, its own host name,
    /// mount and IPC namespace with a private /dev/shm, its own TMPDIR.
    fn spawn(&mut self, i: usize, args: &[String], log: &str) -> usize {
        let x = ["a", "b", "c"][i];
        let out = File::create(self.path(log)).unwrap();
        let mut cmd = Command::new(DGLRUN);
        cmd.args(args)
            .env("TMPDIR", self.path(&format!("tmp-{x}")))
            .env("DGL_DIST_DEBUG", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        let isolation = Isolation {
            hostname: Some(format!("dist-{x}")),
            private_shm: true,
        };
        self.hosts.enter(&mut cmd, i, isolation);
        self.children.push(cmd.spawn().unwrap());
        self.children.len() - 1
    }

    fn wait(&mut self, idx: usize, timeout: Duration) -> Option<ExitStatus> {
        wait_timeout(&mut self.children[idx], timeout)
    }

    fn netns_of(&self, idx: usize) -> String {
        netns_of(self.children[idx].id())
    }

    /// Live processes carrying this test's marker.
    fn marked(&self) -> Vec<String> {
        self.hosts.marked()
    }

    fn logs(&self) -> String {
        log_tails(self.dir.path(), 50)
    }
}

impl Drop for Machines {
    fn drop(&mut self) {
        // Then `hosts` kills whatever is left and deletes the namespaces.
        kill_all(&mut self.children);
    }
}

/// `[worker-i] epoch=E loss=L rank=R ...` lines: rank → [(epoch, loss)].
fn losses(log: &str) -> BTreeMap<u32, Vec<(u32, f64)>> {
    let mut out: BTreeMap<u32, Vec<(u32, f64)>> = BTreeMap::new();
    for line in log.lines() {
        let Some((_, body)) = line.split_once("] epoch=") else {
            continue;
        };
        let body = format!("epoch={body}");
        let field = |k: &str| {
            body.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k))
                .map(str::to_string)
        };
        if let (Some(e), Some(l), Some(r)) = (field("epoch="), field("loss="), field("rank=")) {
            out.entry(r.parse().unwrap())
                .or_default()
                .push((e.parse().unwrap(), l.parse().unwrap()));
        }
    }
    out
}

/// The chunked GraphSAGE graph, written once where every machine sees it.
fn chunked_input(m: &Machines, python: &Path) -> PathBuf {
    let out = Command::new(python)
        .arg(repo_root().join("examples/graphsage/partition.py"))
        .args(["--graph_name", "sage", "--workspace", &m.s("input")])
        .args(["--rel_data_path", "chunked", "--num_parts", "2"])
        .args(["--balance_train", "--output_format", "chunked"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "partition.py --output_format chunked: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = m.path("input/chunked/metadata.json");
    assert!(meta.is_file());
    meta
}

fn common(m: &Machines, python: &Path, workspace: &str) -> Vec<String> {
    vec![
        "--python".into(),
        python.display().to_string(),
        "--token-file".into(),
        m.s("token"),
        "--workspace".into(),
        m.s(workspace),
        "--agent-port".into(),
        PORT.into(),
        "--partition-mode".into(),
        "DistParMETIS".into(),
    ]
}

#[test]
fn workers_partition_over_mpi_then_graphsage_trains() {
    let bin = dgl_partition();
    let python = python();
    let mut m = Machines::create();
    std::fs::write(
        m.path("token"),
        format!("dist-token-{}\n", std::process::id()),
    )
    .unwrap();
    std::fs::write(m.path("hosts.txt"), format!("{}\n{}\n", IPS[0], IPS[1])).unwrap();
    let metadata = chunked_input(&m, &python);
    let started = Instant::now();

    let mut workers = Vec::new();
    for (i, ip) in IPS[..2].iter().enumerate() {
        let mut a = vec!["worker".to_string()];
        a.extend(common(&m, &python, &format!("w{i}")));
        a.extend(["--listen", ip, "--index", &i.to_string()].map(String::from));
        workers.push(m.spawn(i, &a, &format!("worker-{i}.log")));
    }
    let netns: Vec<String> = workers.iter().map(|&w| m.netns_of(w)).collect();
    let marker = m.path("state/partitioned");
    let mut a = vec!["launch".to_string()];
    a.extend(common(&m, &python, "launcher"));
    let train = repo_root().join("examples/graphsage/train.py");
    a.extend(
        [
            "--listen",
            IPS[2],
            "--hostfile",
            &m.s("hosts.txt"),
            "--graph-name",
            "sage",
            "--num-partitions",
            "2",
            "--partition-input",
            &metadata.display().to_string(),
            "--balance-train",
            "--partition-threads",
            "2",
            "--dgl-partition",
            &bin.display().to_string(),
            "--state-dir",
            &m.s("state"),
            "--train-entry-point",
            &train.display().to_string(),
            "--num-epochs",
            "3",
            "--batch-size",
            "100",
            "--num-trainers",
            "1",
            "--num-samplers",
            "0",
            "--num-servers",
            "1",
            "--wait-timeout",
            "300",
        ]
        .map(String::from),
    );
    let launcher = m.spawn(2, &a, "launcher.log");

    // The marker appears only once both partitions are complete.
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut marked_at = None;
    let status = loop {
        if marked_at.is_none() && marker.exists() {
            for i in 0..2 {
                let ds = m.path(&format!("w{i}/dataset"));
                assert!(
                    ds.join("sage.json").is_file()
                        && ds.join(format!("part{i}/graph.dgl")).is_file(),
                    "the marker exists before worker {i}'s partition{}",
                    m.logs()
                );
            }
            marked_at = Some(started.elapsed());
        }
        if let Some(s) = m.wait(launcher, Duration::ZERO) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the launcher did not finish{}",
            m.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let all = m.logs();
    assert!(status.success(), "the launcher failed: {status}{all}");
    let marked_at = marked_at.unwrap_or_else(|| panic!("no marker file{all}"));
    for (i, &w) in workers.iter().enumerate() {
        let s = m
            .wait(w, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("worker {i} did not exit{all}"));
        assert!(s.success(), "worker {i}: {s}{all}");
    }

    let log = std::fs::read_to_string(m.path("launcher.log")).unwrap();
    // Rank i ran in worker i's namespace, and wrote part i there only.
    for (i, ns) in netns.iter().enumerate() {
        let line = log
            .lines()
            .find(|l| l.starts_with(&format!("[partition] rank {i} of 2: partitioning")))
            .unwrap_or_else(|| panic!("rank {i}'s first line{all}"));
        assert!(line.contains(ns.as_str()), "{line}");
        assert!(
            log.contains(&format!("[partition] rank {i} of 2: part {i}: ")),
            "{all}"
        );
        let ds = m.path(&format!("w{i}/dataset"));
        assert!(
            !ds.join(format!("part{}", 1 - i)).exists(),
            "worker {i} holds another part"
        );
    }
    let losses = losses(&log);
    assert_eq!(losses.len(), 2, "loss lines of both ranks{all}");
    for (rank, per_epoch) in &losses {
        let epochs: Vec<u32> = per_epoch.iter().map(|e| e.0).collect();
        assert_eq!(epochs, [0, 1, 2], "rank {rank}{all}");
        assert!(
            per_epoch[2].1 < per_epoch[0].1,
            "rank {rank}: the loss did not fall: {per_epoch:?}{all}"
        );
        eprintln!("rank {rank}: loss per epoch {per_epoch:?}");
    }
    let left = m.marked();
    assert!(left.is_empty(), "processes left behind: {left:?}{all}");
    eprintln!(
        "partitioned after {marked_at:?}, trained and done after {:?}",
        started.elapsed()
    );
}
