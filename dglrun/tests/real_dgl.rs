//! Real DGL 2.1.0 across two "machines": two network namespaces joined by a
//! veth pair, each process additionally in its own mount + IPC namespace
//! with a private tmpfs on /dev/shm (DGL's servers and trainers share the
//! partition through shared memory, which two real machines never share).
//!
//! - `graphsage_trains_on_two_machines`: `dglrun partition` runs
//!   examples/graphsage/partition.py (partition mode DGL-API) and serves the
//!   shards; `dglrun worker` in each namespace pulls its shard and runs one
//!   DGL server and one trainer; `dglrun launch` drives it. Every process
//!   must exit 0 and the loss printed in the launcher's log must fall.
//! - `a_crashing_trainer_stops_the_job`: partitions placed in the workers'
//!   workspaces beforehand (partition mode Skip), one sampler per trainer
//!   (a hard-crashed trainer orphans its sampler); the trainer of rank 1
//!   exits 3 at epoch 1 (DGL_EXAMPLE_CRASH_AT_EPOCH). The launcher must exit
//!   non-zero within 30 s naming worker-1 and the exit code, and no process
//!   of the test may remain.
//! - `sigterm_to_the_launcher_stops_every_worker`: SIGTERM to the launcher
//!   in the middle of training: it tells the workers to stop, they kill
//!   their process groups, the launcher exits 143, nothing remains.
//!
//! - `launchpy_commands_train_on_two_machines`: the same with DGL's own
//!   convention (`--partition-command`, `--train-command` with
//!   placeholders) and scripts that parse strictly, declaring only what
//!   DGL's GraphSAGE example declares (examples/launchpy).
//! - `a_launcher_without_workers_trains_alone`: a job without workers; the
//!   launcher runs examples/standalone/node_classification.py itself, exits
//!   with its status.
//!
//! Needs root (network namespaces) and the DGL venv (`cargo xtask pyenv`).
//! `DGLRUN_TEST_KEEP_LOGS=1` keeps every process's log and workspace.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;
use common::netns::{kill_all, log_tails, wait_timeout, Hosts, Isolation};

/// The two tests each load a CPU-heavy DGL job; on a small machine they
/// would slow each other past the time limits. Run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const DGLRUN: &str = env!("CARGO_BIN_EXE_dglrun");
const AGENT_PORT: &str = "30049";
const PARTITIONER_PORT: &str = "30061";

fn repo_root() -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs a test"),
    )
    .parent()
    .unwrap()
    .to_path_buf()
}

/// The DGL interpreter: $DGLRUN_TEST_PYTHON, else the venv `cargo xtask
/// pyenv` builds. Missing is a failure, never a skip.
fn python() -> PathBuf {
    if let Ok(p) = std::env::var("DGLRUN_TEST_PYTHON") {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "DGLRUN_TEST_PYTHON={} does not exist; run `cargo xtask pyenv` and point it at the venv's python",
            p.display()
        );
        return p;
    }
    let cache = std::env::var_os("DGL_OPERATOR_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/dgl-operator")
        });
    let venv = cache.join("venv/dgl-2.1.0-torch-2.2.1");
    let p = venv.join("bin/python");
    assert!(
        p.exists(),
        "the DGL venv is missing ({}): run `cargo xtask pyenv` first (or set DGLRUN_TEST_PYTHON)",
        p.display()
    );
    // xtask writes this stamp last, after an import check: without it the
    // venv is half-built (or being rebuilt right now).
    assert!(
        venv.join(".dgl-operator-requirements.sha256").exists(),
        "the DGL venv at {} is incomplete (no stamp file; is `cargo xtask pyenv` running?): run `cargo xtask pyenv` and retry",
        venv.display()
    );
    p
}

/// Two namespaces, a veth pair between them, and every process started in
/// them.
struct TwoMachines {
    hosts: Hosts,
    children: Vec<Child>,
}

impl TwoMachines {
    /// `tag` keeps names unique per test; the pid keeps them unique per run.
    fn create(tag: &str, ips: [&str; 2]) -> TwoMachines {
        let id = format!("{}{tag}", std::process::id() % 100_000);
        // Interface names are limited to 15 characters.
        let hosts = Hosts::paired(&format!("dglrun-{id}"), &format!("vd{id}"), ips);
        TwoMachines {
            hosts,
            children: Vec::new(),
        }
    }

    /// Starts dglrun on machine `i`: in its network namespace, in a new
    /// mount and IPC namespace with a private /dev/shm. Output goes to `log`.
    fn spawn(&mut self, i: usize, args: &[String], env: &[(&str, &str)], log: &Path) -> usize {
        let out = File::create(log).unwrap();
        let mut cmd = Command::new(DGLRUN);
        cmd.args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        let isolation = Isolation {
            hostname: None,
            private_shm: true,
        };
        self.hosts.enter(&mut cmd, i, isolation);
        self.children.push(cmd.spawn().unwrap());
        self.children.len() - 1
    }

    fn wait(&mut self, idx: usize, timeout: Duration) -> Option<ExitStatus> {
        wait_timeout(&mut self.children[idx], timeout)
    }

    /// Pids still running in the namespaces.
    fn ns_pids(&self) -> Vec<String> {
        self.hosts.ns_pids()
    }

    /// Pids (anywhere) carrying this test's marker in their environment.
    fn marked_pids(&self) -> Vec<String> {
        self.hosts.marked()
    }
}

impl Drop for TwoMachines {
    fn drop(&mut self) {
        // Then `hosts` kills whatever is left and deletes the namespaces
        // (deleting a namespace deletes its end of the veth pair, and so the pair).
        kill_all(&mut self.children);
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The last lines of every log, for failure messages.
fn logs(dir: &Path) -> String {
    log_tails(dir, 40)
}

/// `[worker-i] epoch=E loss=L rank=R ...` lines of the launcher's log:
/// rank → [(epoch, loss)].
fn losses(launcher_log: &str) -> BTreeMap<u32, Vec<(u32, f64)>> {
    let mut out: BTreeMap<u32, Vec<(u32, f64)>> = BTreeMap::new();
    for line in launcher_log.lines() {
        let Some(rest) = line.strip_prefix("[worker-") else {
            continue;
        };
        let Some((_, body)) = rest.split_once("] ") else {
            continue;
        };
        if !body.starts_with("epoch=") {
            continue;
        }
        let field = |k: &str| {
            body.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k))
                .map(str::to_string)
        };
        let (Some(e), Some(l), Some(r)) = (field("epoch="), field("loss="), field("rank=")) else {
            continue;
        };
        out.entry(r.parse().unwrap())
            .or_default()
            .push((e.parse().unwrap(), l.parse().unwrap()));
    }
    out
}

struct Job {
    dir: tempfile::TempDir,
    token: PathBuf,
    hostfile: PathBuf,
    python: PathBuf,
}

impl Job {
    fn new(ips: [&str; 2]) -> Job {
        // DGLRUN_TEST_KEEP_LOGS=1 keeps the workspaces and logs for a look.
        let keep = std::env::var_os("DGLRUN_TEST_KEEP_LOGS").is_some();
        let dir = tempfile::Builder::new()
            .prefix("dglrun-real-")
            .disable_cleanup(keep)
            .tempdir()
            .unwrap();
        if keep {
            eprintln!("keeping logs in {}", dir.path().display());
        }
        let token = dir.path().join("token");
        std::fs::write(&token, format!("test-token-{}\n", std::process::id())).unwrap();
        let hostfile = dir.path().join("hosts.txt");
        std::fs::write(&hostfile, format!("{}\n{}\n", ips[0], ips[1])).unwrap();
        Job {
            dir,
            token,
            hostfile,
            python: python(),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn common(&self, workspace: &str) -> Vec<String> {
        vec![
            "--python".into(),
            self.python.display().to_string(),
            "--token-file".into(),
            self.token.display().to_string(),
            "--workspace".into(),
            self.path(workspace).display().to_string(),
        ]
    }

    fn worker_args(&self, i: usize, ip: &str) -> Vec<String> {
        let mut a = vec!["worker".to_string()];
        a.extend(self.common(&format!("w{i}")));
        a.extend(
            [
                "--listen",
                ip,
                "--agent-port",
                AGENT_PORT,
                "--index",
                &i.to_string(),
            ]
            .map(String::from),
        );
        a
    }

    fn launch_args(
        &self,
        mode: &str,
        epochs: u32,
        samplers: u32,
        partitioner: Option<&str>,
    ) -> Vec<String> {
        let mut a = vec!["launch".to_string()];
        a.extend(self.common("launcher"));
        let train = repo_root().join("examples/graphsage/train.py");
        a.extend(
            [
                "--hostfile",
                &self.hostfile.display().to_string(),
                "--agent-port",
                AGENT_PORT,
                "--partition-mode",
                mode,
                "--graph-name",
                "sage",
                "--num-partitions",
                "2",
                "--train-entry-point",
                &train.display().to_string(),
                "--num-epochs",
                &epochs.to_string(),
                "--batch-size",
                "100",
                "--num-trainers",
                "1",
                "--num-samplers",
                &samplers.to_string(),
                "--num-servers",
                "1",
                "--wait-timeout",
                "300",
            ]
            .map(String::from),
        );
        if let Some(p) = partitioner {
            a.extend(["--partitioner".to_string(), p.to_string()]);
        }
        a
    }

    fn partition_args(&self, workspace: &str) -> Vec<String> {
        let mut a = vec!["partition".to_string()];
        a.extend(self.common(workspace));
        let script = repo_root().join("examples/graphsage/partition.py");
        a.extend(
            [
                "--graph-name",
                "sage",
                "--partition-entry-point",
                &script.display().to_string(),
                "--num-partitions",
                "2",
                "--balance-train",
            ]
            .map(String::from),
        );
        // `cargo xtask bench graphbolt` trains on a larger graph.
        if let Ok(n) = std::env::var("DGLRUN_TEST_NUM_NODES") {
            a.push(format!("--partition-arg=--num_nodes={n}"));
        }
        a
    }
}

#[test]
fn graphsage_trains_on_two_machines() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ips = ["10.213.0.9", "10.213.0.10"];
    trains_on_two_machines("s", ips, "DGL-API", &[], &[]);
}

/// GraphBolt (--use-graphbolt, DGL-API mode): partition.py calls
/// partition_graph(..., use_graphbolt=True), each worker receives
/// fused_csc_sampling_graph.pt and not graph.dgl, and the example trains
/// with dgl.distributed.initialize(use_graphbolt=True). No DGL_DIST_DEBUG:
/// with it DGL's converter keeps every attribute of the DGL partition
/// (partition.py, dgl_partition_to_graphbolt), which is not what is shipped
/// in production and would skew `cargo xtask bench graphbolt`'s bytes.
#[test]
fn graphsage_trains_with_graphbolt() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::netns::require_root();
    let ips = ["10.213.0.25", "10.213.0.26"];
    let job = Job::new(ips);
    let mut part = job.partition_args("partitioner");
    part.extend(["--partition-mode", "DGL-API", "--use-graphbolt"].map(String::from));
    let mut launch = job.launch_args(
        "DGL-API",
        3,
        0,
        Some(&format!("{}:{PARTITIONER_PORT}", ips[0])),
    );
    launch.push("--use-graphbolt".into());
    let run = TwoMachineRun {
        tag: "gb",
        ips,
        graph: "sage",
        partition: part,
        launch,
        env: &[],
    };
    run.trains(&job);
    for i in 0..2 {
        let dir = job.path(&format!("w{i}/dataset/part{i}"));
        assert!(
            dir.join("fused_csc_sampling_graph.pt").is_file(),
            "worker {i} got GraphBolt's graph"
        );
        assert!(
            !dir.join("graph.dgl").exists(),
            "worker {i} must not receive graph.dgl"
        );
    }
    let log = read(&job.path("launcher.log"));
    assert!(
        log.contains("Initialize the distributed services with graphbolt: True"),
        "the script ran with use_graphbolt=True:\n{log}"
    );
}

/// Partition mode Skip with partitions in DGL's format and --use-graphbolt:
/// each worker converts its workspace (all partitions) with DGL's
/// dgl_partition_to_graphbolt before training, then trains on GraphBolt.
#[test]
fn skip_mode_partitions_are_converted_to_graphbolt() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::netns::require_root();
    let ips = ["10.213.0.29", "10.213.0.30"];
    let job = Job::new(ips);
    prepare_skip(&job);
    assert!(!read(&job.path("w0/dataset/sage.json")).contains("part_graph_graphbolt"));
    let mut m = TwoMachines::create("k", ips);
    let w: Vec<usize> = (0..2)
        .map(|i| {
            let log = job.path(&format!("worker-{i}.log"));
            m.spawn(i, &job.worker_args(i, ips[i]), &[], &log)
        })
        .collect();
    let mut launch = job.launch_args("Skip", 2, 0, None);
    launch.push("--use-graphbolt".into());
    let launcher = m.spawn(0, &launch, &[], &job.path("launcher.log"));
    let status = m.wait(launcher, Duration::from_secs(900));
    let all = logs(job.dir.path());
    let status = status.unwrap_or_else(|| panic!("the launcher did not finish{all}"));
    assert!(status.success(), "the launcher failed: {status}{all}");
    for (i, idx) in w.into_iter().enumerate() {
        let s = m.wait(idx, Duration::from_secs(60));
        assert!(s.is_some_and(|s| s.success()), "worker-{i}: {s:?}{all}");
        let json = read(&job.path(&format!("w{i}/dataset/sage.json")));
        assert!(
            json.contains("part_graph_graphbolt"),
            "worker {i}'s JSON converted{all}"
        );
        let pt = job.path(&format!("w{i}/dataset/part{i}/fused_csc_sampling_graph.pt"));
        assert!(pt.is_file(), "worker {i} wrote {}{all}", pt.display());
    }
    let log = read(&job.path("launcher.log"));
    assert!(log.contains("graphbolt: True"), "trained on GraphBolt{all}");
    assert_eq!(losses(&log).len(), 2, "both ranks trained{all}");
}

/// Partition mode ParMETIS: the example's loader writes DGL's chunked
/// format, the partitioner runs the native pipeline (METIS, train nodes and
/// edges balanced), and GraphSAGE trains on its partitions with DGL
/// verifying each one as it loads (DGL_DIST_DEBUG=1).
#[test]
fn graphsage_trains_on_native_partitions() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ips = ["10.213.0.21", "10.213.0.22"];
    let log = trains_on_two_machines(
        "n",
        ips,
        "ParMETIS",
        &[
            "--partition-arg=--output_format",
            "--partition-arg=chunked",
            "--balance-edges",
        ],
        &[("DGL_DIST_DEBUG", "1")],
    );
    assert!(
        log.contains("native partition pipeline") && log.contains("edge cut"),
        "the partitioner ran the native pipeline:\n{log}"
    );
}

/// Runs partitioner, two workers and the launcher in partition mode `mode`
/// until GraphSAGE has trained 3 epochs with falling losses; returns the
/// partitioner's log.
fn trains_on_two_machines(
    tag: &str,
    ips: [&str; 2],
    mode: &str,
    partition_args: &[&str],
    env: &[(&str, &str)],
) -> String {
    common::netns::require_root();
    let job = Job::new(ips);
    let mut part = job.partition_args("partitioner");
    part.extend(["--partition-mode", mode].map(String::from));
    part.extend(partition_args.iter().map(|a| a.to_string()));
    let launch = job.launch_args(mode, 3, 0, Some(&format!("{}:{PARTITIONER_PORT}", ips[0])));
    let run = TwoMachineRun {
        tag,
        ips,
        graph: "sage",
        partition: part,
        launch,
        env,
    };
    run.trains(&job)
}

/// One job on two machines: the partitioner's and the launcher's command
/// lines (the workers' are always the same).
struct TwoMachineRun<'a> {
    tag: &'a str,
    ips: [&'a str; 2],
    /// The graph's name: the partition JSON is `<graph>.json`.
    graph: &'a str,
    partition: Vec<String>,
    launch: Vec<String>,
    env: &'a [(&'a str, &'a str)],
}

impl TwoMachineRun<'_> {
    /// Runs it until the training has run 3 epochs with falling losses;
    /// returns the partitioner's log.
    fn trains(self, job: &Job) -> String {
        let TwoMachineRun {
            tag,
            ips,
            graph,
            partition: mut part,
            launch,
            env,
        } = self;
        let mut m = TwoMachines::create(tag, ips);
        let started = Instant::now();
        part.extend(["--listen", ips[0], "--agent-port", PARTITIONER_PORT].map(String::from));
        let partitioner = m.spawn(0, &part, env, &job.path("partitioner.log"));
        let w0 = m.spawn(
            0,
            &job.worker_args(0, ips[0]),
            env,
            &job.path("worker-0.log"),
        );
        let w1 = m.spawn(
            1,
            &job.worker_args(1, ips[1]),
            env,
            &job.path("worker-1.log"),
        );
        let launcher = m.spawn(0, &launch, &[], &job.path("launcher.log"));

        let status = m.wait(launcher, Duration::from_secs(900));
        let elapsed = started.elapsed();
        let all = logs(job.dir.path());
        let status =
            status.unwrap_or_else(|| panic!("the launcher did not finish within 900 s{all}"));
        assert!(status.success(), "the launcher failed: {status}{all}");
        for (name, idx) in [
            ("worker-0", w0),
            ("worker-1", w1),
            ("partitioner", partitioner),
        ] {
            let s = m
                .wait(idx, Duration::from_secs(60))
                .unwrap_or_else(|| panic!("{name} did not exit after the launcher{all}"));
            assert!(s.success(), "{name} exited with {s}{all}");
        }

        let log = read(&job.path("launcher.log"));
        assert!(
            log.contains("DGL 2.1.0"),
            "the preflight prints DGL's version{all}"
        );
        let losses = losses(&log);
        assert_eq!(
            losses.len(),
            2,
            "loss lines of both ranks in the launcher log{all}"
        );
        for (rank, per_epoch) in &losses {
            let epochs: Vec<u32> = per_epoch.iter().map(|e| e.0).collect();
            assert_eq!(epochs, [0, 1, 2], "rank {rank}{all}");
            let (first, last) = (per_epoch[0].1, per_epoch[2].1);
            assert!(
                last < first,
                "rank {rank}: loss did not fall: {per_epoch:?}{all}"
            );
            eprintln!("rank {rank}: loss per epoch {per_epoch:?}");
        }
        for w in ["worker-0", "worker-1"] {
            assert!(
                log.lines().any(|l| l.starts_with(&format!("[{w}] epoch="))),
                "{w}'s progress appears with its prefix{all}"
            );
        }
        // The worker fetched its shard: JSON + own part only.
        assert!(job.path(&format!("w1/dataset/{graph}.json")).is_file());
        assert!(job.path("w1/dataset/part1").is_dir());
        assert!(
            !job.path("w1/dataset/part0").exists(),
            "worker 1 received part0"
        );
        let left = [m.ns_pids(), m.marked_pids()].concat();
        assert!(left.is_empty(), "processes left behind: {left:?}{all}");
        eprintln!("{tag} on two machines: {elapsed:?} until the launcher exited");
        // Read by `cargo xtask bench graphbolt`.
        let shipped: Vec<u64> = (0..2)
            .map(|i| dir_bytes(&job.path(&format!("w{i}/dataset"))))
            .collect();
        eprintln!(
            "FIGURES tag={tag} shipped_w0={} shipped_w1={} epoch_seconds={} run_seconds={:.1}",
            shipped[0],
            shipped[1],
            epoch_seconds(&log).join(","),
            elapsed.as_secs_f64()
        );
        read(&job.path("partitioner.log"))
    }
}

#[test]
fn a_crashing_trainer_stops_the_job() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::netns::require_root();
    let ips = ["10.213.0.13", "10.213.0.14"];
    let job = Job::new(ips);
    let started = Instant::now();

    prepare_skip(&job);

    let mut m = TwoMachines::create("c", ips);
    let crash = [
        ("DGL_EXAMPLE_CRASH_AT_EPOCH", "1"),
        ("DGL_EXAMPLE_CRASH_RANK", "1"),
    ];
    let w0 = m.spawn(
        0,
        &job.worker_args(0, ips[0]),
        &crash,
        &job.path("worker-0.log"),
    );
    let w1 = m.spawn(
        1,
        &job.worker_args(1, ips[1]),
        &crash,
        &job.path("worker-1.log"),
    );
    let launcher = m.spawn(
        0,
        &job.launch_args("Skip", 5, 1, None),
        &[],
        &job.path("launcher.log"),
    );

    // Watch the launcher's log for the crash, then time how long it takes
    // the launcher to exit.
    let mut crashed_at = None;
    let deadline = Instant::now() + Duration::from_secs(900);
    let status = loop {
        if crashed_at.is_none() && read(&job.path("launcher.log")).contains("injected crash") {
            crashed_at = Some(Instant::now());
        }
        if let Some(s) = m.children[launcher].try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the launcher did not exit{}",
            logs(job.dir.path())
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let exited_at = Instant::now();
    let all = logs(job.dir.path());
    assert!(
        !status.success(),
        "the launcher must fail when a trainer crashes{all}"
    );
    let crashed_at =
        crashed_at.unwrap_or_else(|| panic!("the crash never showed in the launcher's log{all}"));
    let reaction = exited_at - crashed_at;
    assert!(
        reaction < Duration::from_secs(30),
        "the launcher took {reaction:?} after the crash{all}"
    );

    let log = read(&job.path("launcher.log"));
    let error = log
        .lines()
        .find(|l| l.contains("training failed"))
        .unwrap_or_else(|| panic!("no 'training failed' message{all}"));
    // worker-0's trainer fails too (gloo: connection closed by peer), but
    // the message must point at the worker whose trainer crashed.
    assert!(
        error.contains("training failed: worker-1"),
        "the message names the worker: {error}"
    );
    assert!(
        error.contains("exit code 3"),
        "the message names the exit code: {error}"
    );

    for (name, idx) in [("worker-0", w0), ("worker-1", w1)] {
        let s = m
            .wait(idx, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("{name} did not exit after the launcher{all}"));
        assert!(
            !s.success(),
            "{name} must report the failed training, got {s}{all}"
        );
    }
    let left = [m.ns_pids(), m.marked_pids()].concat();
    assert!(left.is_empty(), "processes left behind: {left:?}{all}");
    eprintln!("failure message: {error}");
    eprintln!(
        "a_crashing_trainer_stops_the_job: launcher exited {reaction:?} after the crash, {:?} in total",
        started.elapsed()
    );
}

/// Partition mode Skip: the partitions are already in the workers'
/// workspaces. Make them with `dglrun partition --no-serve` and copy them.
fn prepare_skip(job: &Job) {
    let mut part = job.partition_args("prep");
    part.push("--no-serve".into());
    let out = Command::new(DGLRUN).args(&part).output().unwrap();
    assert!(
        out.status.success(),
        "dglrun partition --no-serve: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for w in ["w0", "w1"] {
        copy_dir(
            &job.path("prep/dataset"),
            &job.path(&format!("{w}/dataset")),
        );
    }
}

#[test]
fn sigterm_to_the_launcher_stops_every_worker() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::netns::require_root();
    let ips = ["10.213.0.17", "10.213.0.18"];
    let job = Job::new(ips);
    prepare_skip(&job);
    let mut m = TwoMachines::create("t", ips);
    let w0 = m.spawn(
        0,
        &job.worker_args(0, ips[0]),
        &[],
        &job.path("worker-0.log"),
    );
    let w1 = m.spawn(
        1,
        &job.worker_args(1, ips[1]),
        &[],
        &job.path("worker-1.log"),
    );
    // Far more epochs than the test waits for.
    let launcher = m.spawn(
        0,
        &job.launch_args("Skip", 1000, 0, None),
        &[],
        &job.path("launcher.log"),
    );

    let deadline = Instant::now() + Duration::from_secs(600);
    while !read(&job.path("launcher.log")).contains("epoch=0 ") {
        assert!(
            m.children[launcher].try_wait().unwrap().is_none(),
            "the launcher ended before training{}",
            logs(job.dir.path())
        );
        assert!(
            Instant::now() < deadline,
            "training never started{}",
            logs(job.dir.path())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let pid = nix::unistd::Pid::from_raw(m.children[launcher].id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let signalled = Instant::now();
    let status = m.wait(launcher, Duration::from_secs(60));
    let all = logs(job.dir.path());
    let status = status.unwrap_or_else(|| panic!("the launcher ignored SIGTERM for 60 s{all}"));
    let took = signalled.elapsed();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.code(), Some(143), "launcher status {status:?}{all}");
    assert!(status.signal().is_none());
    for (name, idx) in [("worker-0", w0), ("worker-1", w1)] {
        let s = m
            .wait(idx, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("{name} did not exit after the stop{all}"));
        assert!(!s.success(), "{name} was stopped, not successful: {s}{all}");
    }
    let log = read(&job.path("launcher.log"));
    assert!(log.contains("interrupted by SIGTERM"), "{all}");
    let left = [m.ns_pids(), m.marked_pids()].concat();
    assert!(left.is_empty(), "processes left behind: {left:?}{all}");
    eprintln!("sigterm_to_the_launcher_stops_every_worker: launcher exited {took:?} after SIGTERM");
}

/// DGL's own way (tools/launch.py): the user's command lines, with
/// placeholders, run as written. The scripts parse strictly and declare only
/// what DGL's GraphSAGE example declares (no --num_workers, no --workspace):
/// anything dglrun appended would end them with "unrecognized arguments".
#[test]
fn launchpy_commands_train_on_two_machines() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::netns::require_root();
    let ips = ["10.213.0.25", "10.213.0.26"];
    let job = Job::new(ips);
    let py = job.python.display().to_string();
    let dir = repo_root().join("examples/launchpy");
    let graph = "synthetic-5000";
    let mut part = vec!["partition".to_string()];
    part.extend(job.common("partitioner"));
    part.extend(["--graph-name", graph, "--num-partitions", "2"].map(String::from));
    part.push("--partition-command".into());
    part.push(format!(
        "{py} {}/partition_graph.py --dataset {graph} --num_parts {{num_parts}} --balance_train --balance_edges --undirected --output {{dataset_dir}}",
        dir.display()
    ));
    let mut launch = vec!["launch".to_string()];
    launch.extend(job.common("launcher"));
    let hostfile = job.hostfile.display().to_string();
    let partitioner = format!("{}:{PARTITIONER_PORT}", ips[0]);
    launch.extend(
        [
            "--hostfile",
            &hostfile,
            "--agent-port",
            AGENT_PORT,
            "--partitioner",
            &partitioner,
            "--graph-name",
            graph,
            "--num-trainers",
            "1",
            "--num-samplers",
            "0",
            "--num-servers",
            "1",
            "--wait-timeout",
            "300",
            "--train-command",
        ]
        .map(String::from),
    );
    launch.push(format!(
        "{py} {}/train_dist.py --graph_name {{graph_name}} --ip_config {{ip_config}} --num_epochs 3 --batch_size 100 --num_hidden 32 --fan_out 10,10 --lr 0.01 --dropout 0.2 --log_every 5",
        dir.display()
    ));
    let run = TwoMachineRun {
        tag: "l",
        ips,
        graph,
        partition: part,
        launch,
        env: &[],
    };
    let partitioner_log = run.trains(&job);
    assert!(
        partitioner_log.contains("partitioned synthetic-5000 into 2 parts"),
        "the user's partition command ran:\n{partitioner_log}"
    );
    let log = read(&job.path("launcher.log"));
    assert!(!log.contains("unrecognized arguments"), "{log}");
    for rank in 0..2 {
        assert!(log.contains(&format!("training done rank={rank}")), "{log}");
    }
}

/// A job without workers: `dglrun` in the launcher pod (role from the
/// environment, DGL_OPERATOR_NUM_WORKERS=0 as the operator sets it) runs
/// the single-process script itself and exits with its status.
#[test]
fn a_launcher_without_workers_trains_alone() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let py = python().display().to_string();
    let ws = tempfile::tempdir().unwrap();
    let script = repo_root().join("examples/standalone/node_classification.py");
    let run = |args: &[&str]| {
        Command::new(DGLRUN)
            .args(["--python", &py, "--workspace"])
            .arg(ws.path())
            .args(args)
            .env("DGL_OPERATOR_PHASE_ENV", "Launcher")
            .env("DGL_OPERATOR_NUM_WORKERS", "0")
            .env("DGL_OPERATOR_CONFIG_DIR", "/nonexistent")
            .output()
            .unwrap()
    };
    let started = Instant::now();
    let script = script.display().to_string();
    let out = run(&["--train-entry-point", &script, "--", "--num_epochs", "30"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{}: {all}", out.status);
    let losses: Vec<f64> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("epoch="))
        .filter_map(|l| l.split_whitespace().find_map(|kv| kv.strip_prefix("loss=")))
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(
        losses.len() >= 6,
        "one line per 5 epochs and the last: {all}"
    );
    assert!(
        losses.last() < losses.first(),
        "the loss did not fall: {losses:?}"
    );
    assert!(
        !all.contains("DGL_ROLE"),
        "no DGL distributed environment: {all}"
    );
    eprintln!("standalone: loss {losses:?} in {:?}", started.elapsed());

    // Its exit status is the job's: the user's command, as written.
    let out = run(&[
        "--train-command",
        &format!("{py} -c 'import sys; sys.exit(7)'"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Distributed placeholders have no value without workers.
    let out = run(&[
        "--train-command",
        &format!("{py} {script} --x {{ip_config}}"),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("{ip_config} has no value here"),
        "{err}"
    );
}

/// Bytes of the regular files below `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => dir_bytes(&e.path()),
                    Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
                    _ => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// The `seconds=` of rank 0's epoch lines, in order.
fn epoch_seconds(launcher_log: &str) -> Vec<String> {
    launcher_log
        .lines()
        .filter(|l| l.contains("] epoch=") && l.contains(" rank=0 "))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("seconds="))
        })
        .map(str::to_string)
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}
