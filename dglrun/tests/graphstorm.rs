//! GraphStorm 0.5.0.post1 through dglrun, on real DGL 2.1.0 across two
//! "machines" (network namespaces joined by a veth pair, each process with
//! a private /dev/shm, as in real_dgl.rs).
//!
//! `graphstorm_node_classification_trains_on_two_machines`: the example's
//! table graph (examples/graphstorm/make_tables.py: nodes and edges as
//! Parquet) is built into 2 DGL partitions by GraphStorm's gconstruct, run
//! as dglrun's `--partition-command`; each worker pulls its shard; GraphStorm's
//! own per-process entry point (graphstorm.run.gsgnn_np.gsgnn_np) trains node
//! classification as dglrun's `--train-command`, servers and trainers (under
//! torch.distributed.run) started with DGL's environment. Both commands are
//! the ones of examples/graphstorm/dgljob.yaml, word for word, with the
//! image's `python3` replaced by the venv's interpreter, and the workers get
//! its PYTHONPATH (progress_hook/: GraphStorm's loss as DGLRUN_PROGRESS
//! lines). Every process must exit 0, GraphStorm's loss must fall, its
//! validation accuracy must show in the launcher's log, and one progress
//! report per epoch must reach the launcher in dglrun's format.
//!
//! Needs root and the GraphStorm venv ($DGLRUN_TEST_GRAPHSTORM_PYTHON, which
//! `cargo xtask test` builds on the DGL venv: xtask/src/graphstorm_env.rs).
//! `DGLRUN_TEST_KEEP_LOGS=1` keeps every log and workspace.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::netns::{kill_all, log_tails, wait_timeout, Hosts, Isolation};

const DGLRUN: &str = env!("CARGO_BIN_EXE_dglrun");
const AGENT_PORT: &str = "30049";
const PARTITIONER_PORT: &str = "30061";
const GRAPH: &str = "gsexample";

/// The example's commands, as in its dgljob.yaml (checked below).
const PARTITION_COMMAND: &str =
    "python3 -m graphstorm.gconstruct.construct_graph --conf-file gconstruct.json \
     --num-parts {num_parts} --part-method metis --add-reverse-edges \
     --output-dir {dataset_dir} --graph-name {graph_name}";
const TRAIN_COMMAND: &str = "python3 -m graphstorm.run.gsgnn_np.gsgnn_np --cf nc.yaml \
     --ip-config {ip_config} --part-config {part_config}";
/// The workers' PYTHONPATH in the example's dgljob.yaml, below /opt/graphstorm.
const HOOK_DIR: &str = "progress_hook";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn example(file: &str) -> PathBuf {
    repo_root().join("examples/graphstorm").join(file)
}

/// The GraphStorm interpreter: $DGLRUN_TEST_GRAPHSTORM_PYTHON, else the venv
/// `cargo xtask test` builds. Missing is a failure, never a skip.
fn python() -> PathBuf {
    if let Ok(p) = std::env::var("DGLRUN_TEST_GRAPHSTORM_PYTHON") {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "DGLRUN_TEST_GRAPHSTORM_PYTHON={} does not exist",
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
    let venv = cache.join("venv/graphstorm-0.5.0.post1-on-dgl-2.1.0");
    // Written last by xtask, after an import check.
    assert!(
        venv.join(".dgl-operator-requirements.sha256").exists(),
        "the GraphStorm venv at {} is missing or incomplete: run `cargo xtask test` (or set DGLRUN_TEST_GRAPHSTORM_PYTHON)",
        venv.display()
    );
    venv.join("bin/python")
}

/// Collapses whitespace, so a YAML folded block compares with a one-line
/// string.
fn words(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The command as the test runs it: the image's `python3` is the venv's.
fn with_python(command: &str, python: &Path) -> String {
    let rest = command
        .strip_prefix("python3 ")
        .expect("the example's commands start with python3");
    format!("{} {}", python.display(), words(rest))
}

#[test]
fn the_example_job_runs_these_commands() {
    let yaml = words(&std::fs::read_to_string(example("dgljob.yaml")).unwrap());
    for (flag, command) in [
        ("--partition-command", PARTITION_COMMAND),
        ("--train-command", TRAIN_COMMAND),
    ] {
        let want = format!("- {flag} - >- {}", words(command));
        assert!(
            yaml.contains(&want),
            "examples/graphstorm/dgljob.yaml does not pass {flag} as the test runs it: {want}"
        );
    }
    let env = format!("{{ name: PYTHONPATH, value: /opt/graphstorm/{HOOK_DIR} }}");
    assert!(yaml.contains(&env), "the workers' {env}");
}

/// A temporary job folder: token, hostfile, the example's working directory
/// (as the image's /opt/graphstorm: the tables in data/, the two configs).
struct Job {
    dir: tempfile::TempDir,
    python: PathBuf,
}

impl Job {
    fn new(ips: [&str; 2]) -> Job {
        let keep = std::env::var_os("DGLRUN_TEST_KEEP_LOGS").is_some();
        let dir = tempfile::Builder::new()
            .prefix("dglrun-graphstorm-")
            .disable_cleanup(keep)
            .tempdir()
            .unwrap();
        if keep {
            eprintln!("keeping logs in {}", dir.path().display());
        }
        let job = Job {
            dir,
            python: python(),
        };
        std::fs::write(
            job.path("token"),
            format!("gs-token-{}\n", std::process::id()),
        )
        .unwrap();
        std::fs::write(job.path("hosts.txt"), format!("{}\n{}\n", ips[0], ips[1])).unwrap();
        std::fs::create_dir_all(job.path("example")).unwrap();
        std::fs::create_dir_all(job.path("example").join(HOOK_DIR)).unwrap();
        for f in [
            "gconstruct.json",
            "nc.yaml",
            "progress_hook/sitecustomize.py",
        ] {
            std::fs::copy(example(f), job.path("example").join(f)).unwrap();
        }
        job.make_tables();
        job
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// The example's tables, as the image's build writes them.
    fn make_tables(&self) {
        let out = Command::new(&self.python)
            .arg(example("make_tables.py"))
            .arg("--output")
            .arg(self.path("example/data"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "make_tables.py: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn common(&self, workspace: &str) -> Vec<String> {
        [
            "--python",
            &self.python.display().to_string(),
            "--token-file",
            &self.path("token").display().to_string(),
            "--workspace",
            &self.path(workspace).display().to_string(),
        ]
        .map(String::from)
        .to_vec()
    }

    fn partition_args(&self, ip: &str) -> Vec<String> {
        let mut a = vec!["partition".to_string()];
        a.extend(self.common("partitioner"));
        a.extend(["--graph-name", GRAPH, "--num-partitions", "2"].map(String::from));
        a.push("--partition-command".into());
        a.push(with_python(PARTITION_COMMAND, &self.python));
        a.extend(["--listen", ip, "--agent-port", PARTITIONER_PORT].map(String::from));
        a
    }

    fn worker_args(&self, i: usize, ip: &str) -> Vec<String> {
        let mut a = vec!["worker".to_string()];
        a.extend(self.common(&format!("w{i}")));
        let index = i.to_string();
        a.extend(
            [
                "--listen",
                ip,
                "--agent-port",
                AGENT_PORT,
                "--index",
                &index,
            ]
            .map(String::from),
        );
        a
    }

    fn launch_args(&self, partitioner_ip: &str) -> Vec<String> {
        let mut a = vec!["launch".to_string()];
        a.extend(self.common("launcher"));
        let hostfile = self.path("hosts.txt").display().to_string();
        let partitioner = format!("{partitioner_ip}:{PARTITIONER_PORT}");
        a.extend(
            [
                "--hostfile",
                &hostfile,
                "--agent-port",
                AGENT_PORT,
                "--partitioner",
                &partitioner,
                "--graph-name",
                GRAPH,
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
        a.push("--train-command".into());
        a.push(with_python(TRAIN_COMMAND, &self.python));
        a
    }
}

/// Two namespaces and every dglrun started in them, killed on drop.
struct Machines {
    hosts: Hosts,
    children: Vec<Child>,
}

impl Machines {
    fn create(ips: [&str; 2]) -> Machines {
        let id = std::process::id() % 100_000;
        Machines {
            hosts: Hosts::paired(&format!("dglrun-gs{id}"), &format!("vgs{id}"), ips),
            children: Vec::new(),
        }
    }

    /// dglrun on machine `i`, in `cwd` (the pod's workingDir), output to `log`.
    fn spawn(&mut self, i: usize, args: &[String], cwd: &Path, log: &Path) -> usize {
        let out = File::create(log).unwrap();
        let mut cmd = Command::new(DGLRUN);
        cmd.args(args)
            .current_dir(cwd)
            // As the image's ENV: DGL would otherwise guess and write ~/.dgl.
            .env("DGLBACKEND", "pytorch")
            // As the Worker template's env (the partitioner's too).
            .env("PYTHONPATH", cwd.join(HOOK_DIR))
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
}

impl Drop for Machines {
    fn drop(&mut self) {
        kill_all(&mut self.children);
    }
}

/// GraphStorm's loss lines (`Part 0 | Epoch 00002 | Batch 000 | Loss: 0.7321
/// | Time: ...`, rank 0 every 20 batches) in the launcher's log: (epoch, loss).
fn losses(log: &str) -> Vec<(u32, f64)> {
    log.lines()
        .filter(|l| l.starts_with("[worker-"))
        .filter_map(|l| {
            let epoch = l.split("| Epoch ").nth(1)?.split_whitespace().next()?;
            let loss = l.split("| Loss: ").nth(1)?.split_whitespace().next()?;
            Some((epoch.parse().ok()?, loss.parse().ok()?))
        })
        .collect()
}

/// GraphStorm's validation scores (`Step N | Validation accuracy: 0.81`).
fn validation_scores(log: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.starts_with("[worker-"))
        .filter_map(|l| l.split("| Validation accuracy: ").nth(1))
        .filter_map(|v| v.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The DGLRUN_PROGRESS reports in the launcher's log, read by dglrun's own
/// parser: (epoch, epochs, loss).
fn progress_reports(log: &str) -> Vec<(u32, Option<u32>, Option<f64>)> {
    log.lines()
        .filter_map(|l| l.split_once("] ").map(|(_, body)| body))
        .filter_map(dgl_api::progress::parse_line)
        .map(|r| {
            let p = r.expect("the hook's reports follow dglrun's format");
            (p.epoch, p.epochs, p.loss)
        })
        .collect()
}

/// The mean loss of each epoch's logged batches, in epoch order.
fn epoch_means(losses: &[(u32, f64)]) -> Vec<(u32, f64)> {
    let mut out: Vec<(u32, f64, u32)> = Vec::new();
    for &(e, l) in losses {
        match out.last_mut() {
            Some(last) if last.0 == e => {
                last.1 += l;
                last.2 += 1;
            }
            _ => out.push((e, l, 1)),
        }
    }
    out.into_iter()
        .map(|(e, s, n)| (e, s / f64::from(n)))
        .collect()
}

#[test]
fn graphstorm_node_classification_trains_on_two_machines() {
    common::netns::require_root();
    let ips = ["10.214.0.1", "10.214.0.2"];
    let job = Job::new(ips);
    let cwd = job.path("example");
    let mut m = Machines::create(ips);
    let started = Instant::now();
    let part = m.spawn(
        0,
        &job.partition_args(ips[0]),
        &cwd,
        &job.path("partitioner.log"),
    );
    let workers: Vec<usize> = (0..2)
        .map(|i| {
            let log = job.path(&format!("worker-{i}.log"));
            m.spawn(i, &job.worker_args(i, ips[i]), &cwd, &log)
        })
        .collect();
    let launcher = m.spawn(0, &job.launch_args(ips[0]), &cwd, &job.path("launcher.log"));

    let status = m.wait(launcher, Duration::from_secs(1200));
    let elapsed = started.elapsed();
    let all = log_tails(job.dir.path(), 60);
    let status = status.unwrap_or_else(|| panic!("the launcher did not finish in 1200 s{all}"));
    assert!(status.success(), "the launcher failed: {status}{all}");
    for (name, idx) in [
        ("worker-0", workers[0]),
        ("worker-1", workers[1]),
        ("partitioner", part),
    ] {
        let s = m.wait(idx, Duration::from_secs(60));
        assert!(s.is_some_and(|s| s.success()), "{name}: {s:?}{all}");
    }

    let part_log = std::fs::read_to_string(job.path("partitioner.log")).unwrap();
    assert!(
        part_log.contains("Train/val/test on _N with mask train_mask, val_mask, test_mask"),
        "gconstruct read the tables and split the labels{all}"
    );
    // Each worker received the JSON and its own partition only.
    for i in 0..2 {
        let ds = job.path(&format!("w{i}/dataset"));
        assert!(
            ds.join(format!("{GRAPH}.json")).is_file(),
            "worker {i}'s JSON{all}"
        );
        assert!(
            ds.join(format!("part{i}/graph.dgl")).is_file(),
            "worker {i}'s part{all}"
        );
        assert!(
            !ds.join(format!("part{}", 1 - i)).exists(),
            "worker {i} got the other part"
        );
    }

    let log = std::fs::read_to_string(job.path("launcher.log")).unwrap();
    assert!(!log.contains("unrecognized arguments"), "{all}");
    let per_epoch = epoch_means(&losses(&log));
    assert!(
        per_epoch.len() >= 2,
        "GraphStorm's loss lines of at least 2 epochs in the launcher's log: {per_epoch:?}{all}"
    );
    let (first, last) = (per_epoch[0].1, per_epoch[per_epoch.len() - 1].1);
    assert!(last < first, "the loss did not fall: {per_epoch:?}{all}");
    let val = validation_scores(&log);
    assert!(
        !val.is_empty(),
        "no validation accuracy in the launcher's log{all}"
    );
    // 4 balanced classes: chance is 0.25.
    let best = val.iter().copied().fold(0.0, f64::max);
    assert!(
        best > 0.5,
        "validation accuracy {val:?} is near chance{all}"
    );
    // nc.yaml: 4 epochs; one report at the end of each, from rank 0.
    let reports = progress_reports(&log);
    let epochs: Vec<u32> = reports.iter().map(|r| r.0).collect();
    assert_eq!(epochs, [1, 2, 3, 4], "progress reports {reports:?}{all}");
    assert!(
        reports.iter().all(|r| r.1 == Some(4) && r.2.is_some()),
        "every report has epochs and a loss: {reports:?}{all}"
    );
    let left = [m.hosts.ns_pids(), m.hosts.marked()].concat();
    assert!(left.is_empty(), "processes left behind: {left:?}{all}");
    eprintln!(
        "graphstorm on two machines: {elapsed:?}; loss by epoch {per_epoch:?}; validation accuracy {val:?}; progress {reports:?}"
    );
}
