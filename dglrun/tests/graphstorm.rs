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
//! `graphstorm_trains_on_native_partitions_then_infers_embeddings`: the same
//! tables through examples/graphstorm/make_chunked.py (DGL's chunked format)
//! and dglrun's native pipeline (partition mode ParMETIS); gsgnn_np trains
//! as in dgljob-parmetis.yaml and saves its model; then gsgnn_node_emb runs
//! as the Skip-mode job of dgljob-infer.yaml on the partitioner's whole
//! dataset folder, and the embeddings must have one finite row per node,
//! with node ids 0..n-1 that order them as the tables do.
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

/// examples/graphstorm/dgljob-parmetis.yaml: the loader that writes the
/// tables in DGL's chunked format for the native pipeline, and the training
/// command, which saves the model to the volume both jobs mount.
const PARMETIS_LOADER: &str = "make_chunked.py";
const PARMETIS_TRAIN_COMMAND: &str = "python3 -m graphstorm.run.gsgnn_np.gsgnn_np --cf nc.yaml \
     --ip-config {ip_config} --part-config {part_config} --save-model-path /data/gsexample/model";
/// examples/graphstorm/dgljob-infer.yaml: GraphStorm's embedding entry point
/// (the one gs_gen_node_embedding starts) on the training job's partitions
/// and model, writing the embeddings to the same volume.
/// Its --part-config is a folder holding only the JSON and the part<i>/
/// folders of the training job's dataset (subPath mounts in the pods):
/// GraphStorm counts every entry named part* as a part when it reads the id
/// mapping, and the native pipeline's dataset also holds
/// partition_assignment/.
const INFER_COMMAND: &str = "python3 -m graphstorm.run.gsgnn_emb.gsgnn_node_emb --cf nc.yaml \
     --ip-config {ip_config} --part-config /gs-partitions/gsexample.json \
     --restore-model-path /data/gsexample/model/epoch-3 --save-embed-path /data/gsexample/embeddings";
/// The volume both jobs mount (hostPath or PVC in the pods).
const VOLUME: &str = "/data/gsexample";
/// Where the inference job's workers see the partitions for GraphStorm.
const PARTS_VIEW: &str = "/gs-partitions";

fn repo_root() -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs a test"),
    )
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

/// The command as the test runs it: the image's `python3` is the venv's,
/// and the pods' mounts (the shared volume, the partitions' view) are
/// folders of the job's temporary directory `dir`.
fn with_python(command: &str, python: &Path, dir: &Path) -> String {
    let rest = command
        .strip_prefix("python3 ")
        .expect("the example's commands start with python3");
    let rest = words(rest)
        .replace(VOLUME, &dir.join("volume").display().to_string())
        .replace(PARTS_VIEW, &dir.join("infer-parts").display().to_string());
    format!("{} {rest}", python.display())
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

#[test]
fn the_parmetis_and_inference_jobs_run_these_commands() {
    let train = words(&std::fs::read_to_string(example("dgljob-parmetis.yaml")).unwrap());
    for want in [
        "partitionMode: ParMETIS".to_string(),
        format!("- --partition-entry-point={PARMETIS_LOADER}"),
        format!("- --train-command - >- {}", words(PARMETIS_TRAIN_COMMAND)),
        format!("mountPath: {VOLUME}"),
    ] {
        assert!(
            train.contains(&want),
            "examples/graphstorm/dgljob-parmetis.yaml lacks {want:?}, as the test runs it"
        );
    }
    let infer = words(&std::fs::read_to_string(example("dgljob-infer.yaml")).unwrap());
    for want in [
        "partitionMode: Skip".to_string(),
        format!("- --train-command - >- {}", words(INFER_COMMAND)),
        format!("mountPath: {VOLUME}"),
        "mountPath: /dgl_workspace/dataset".to_string(),
        format!("mountPath: {PARTS_VIEW}/gsexample.json, subPath: dataset/gsexample.json"),
        format!("mountPath: {PARTS_VIEW}/part0, subPath: dataset/part0"),
        format!("mountPath: {PARTS_VIEW}/part1, subPath: dataset/part1"),
    ] {
        assert!(
            infer.contains(&want),
            "examples/graphstorm/dgljob-infer.yaml lacks {want:?}, as the test runs it"
        );
    }
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
        std::fs::create_dir_all(job.path("volume")).unwrap();
        for f in [
            "gconstruct.json",
            "nc.yaml",
            "progress_hook/sitecustomize.py",
            PARMETIS_LOADER,
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

    /// The partitioner with gconstruct as its command (`gconstruct`), or the
    /// native pipeline fed by make_chunked.py (partition mode ParMETIS).
    fn partition_args(&self, ip: &str, gconstruct: bool) -> Vec<String> {
        let mut a = vec!["partition".to_string()];
        a.extend(self.common("partitioner"));
        a.extend(["--graph-name", GRAPH, "--num-partitions", "2"].map(String::from));
        if gconstruct {
            a.push("--partition-command".into());
            a.push(self.command(PARTITION_COMMAND));
        } else {
            a.extend(["--partition-mode", "ParMETIS", "--partition-entry-point"].map(String::from));
            a.push(PARMETIS_LOADER.into());
        }
        a.extend(["--listen", ip, "--agent-port", PARTITIONER_PORT].map(String::from));
        a
    }

    /// A user's command as this test runs it (see [`with_python`]).
    fn command(&self, command: &str) -> String {
        with_python(command, &self.python, self.dir.path())
    }

    fn worker_args(&self, i: usize, ip: &str, workspace: &str, port: &str) -> Vec<String> {
        let mut a = vec!["worker".to_string()];
        a.extend(self.common(workspace));
        let index = i.to_string();
        a.extend(["--listen", ip, "--agent-port", port, "--index", &index].map(String::from));
        a
    }

    /// The launcher: after the partitioner at `partitioner_ip` (None: partition
    /// mode Skip, the partitions already in the workers' workspaces).
    fn launch_args(
        &self,
        partitioner_ip: Option<&str>,
        port: &str,
        train_command: &str,
    ) -> Vec<String> {
        let mut a = vec!["launch".to_string()];
        a.extend(self.common("launcher"));
        let hostfile = self.path("hosts.txt").display().to_string();
        match partitioner_ip {
            Some(ip) => a.extend(["--partitioner".into(), format!("{ip}:{PARTITIONER_PORT}")]),
            None => a.extend(["--partition-mode", "Skip"].map(String::from)),
        }
        a.extend(
            [
                "--hostfile",
                &hostfile,
                "--agent-port",
                port,
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
        a.push(self.command(train_command));
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

/// One training run: a partitioner (gconstruct or the native pipeline), two
/// workers and the launcher; every process must exit 0. Returns the time
/// from start to the launcher's exit.
fn train(job: &Job, m: &mut Machines, ips: [&str; 2], gconstruct: bool, command: &str) -> Duration {
    let cwd = job.path("example");
    let part = m.spawn(
        0,
        &job.partition_args(ips[0], gconstruct),
        &cwd,
        &job.path("partitioner.log"),
    );
    let workers: Vec<usize> = (0..2)
        .map(|i| {
            let log = job.path(&format!("worker-{i}.log"));
            m.spawn(
                i,
                &job.worker_args(i, ips[i], &format!("w{i}"), AGENT_PORT),
                &cwd,
                &log,
            )
        })
        .collect();
    let launch = job.launch_args(Some(ips[0]), AGENT_PORT, command);
    let launcher = m.spawn(0, &launch, &cwd, &job.path("launcher.log"));
    let mut all = [
        ("worker-0", workers[0]),
        ("worker-1", workers[1]),
        ("partitioner", part),
    ];
    let elapsed = finish(job, m, launcher, &mut all);
    // Each worker received the JSON and its own partition only.
    for i in 0..2 {
        let ds = job.path(&format!("w{i}/dataset"));
        let tails = log_tails(job.dir.path(), 60);
        assert!(
            ds.join(format!("{GRAPH}.json")).is_file(),
            "worker {i}'s JSON{tails}"
        );
        assert!(
            ds.join(format!("part{i}/graph.dgl")).is_file(),
            "worker {i}'s part{tails}"
        );
        assert!(
            !ds.join(format!("part{}", 1 - i)).exists(),
            "worker {i} got the other part"
        );
    }
    elapsed
}

/// Waits for the launcher (1200 s), then for `others` (60 s each); every
/// one must exit 0. Returns the launcher's time.
fn finish(job: &Job, m: &mut Machines, launcher: usize, others: &mut [(&str, usize)]) -> Duration {
    let started = Instant::now();
    let status = m.wait(launcher, Duration::from_secs(1200));
    let elapsed = started.elapsed();
    let all = log_tails(job.dir.path(), 60);
    let status = status.unwrap_or_else(|| panic!("the launcher did not finish in 1200 s{all}"));
    assert!(status.success(), "the launcher failed: {status}{all}");
    for (name, idx) in others.iter() {
        let s = m.wait(*idx, Duration::from_secs(60));
        assert!(s.is_some_and(|s| s.success()), "{name}: {s:?}{all}");
    }
    elapsed
}

/// GraphStorm's loss by epoch in the launcher's log; it must fall over at
/// least 2 epochs, and validation accuracy must beat chance (4 balanced
/// classes: 0.25) clearly.
fn check_training(log: &str, all: &str) -> (Vec<(u32, f64)>, Vec<f64>) {
    assert!(!log.contains("unrecognized arguments"), "{all}");
    let per_epoch = epoch_means(&losses(log));
    assert!(
        per_epoch.len() >= 2,
        "GraphStorm's loss lines of at least 2 epochs in the launcher's log: {per_epoch:?}{all}"
    );
    let (first, last) = (per_epoch[0].1, per_epoch[per_epoch.len() - 1].1);
    assert!(last < first, "the loss did not fall: {per_epoch:?}{all}");
    let val = validation_scores(log);
    assert!(
        !val.is_empty(),
        "no validation accuracy in the launcher's log{all}"
    );
    let best = val.iter().copied().fold(0.0, f64::max);
    assert!(
        best > 0.5,
        "validation accuracy {val:?} is near chance{all}"
    );
    (per_epoch, val)
}

/// The two-machine tests name their namespaces and links after this
/// process, and each takes most of the machine: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn graphstorm_node_classification_trains_on_two_machines() {
    common::netns::require_root();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ips = ["10.214.0.1", "10.214.0.2"];
    let job = Job::new(ips);
    let mut m = Machines::create(ips);
    let elapsed = train(&job, &mut m, ips, true, TRAIN_COMMAND);
    let all = log_tails(job.dir.path(), 60);
    let part_log = std::fs::read_to_string(job.path("partitioner.log")).unwrap();
    assert!(
        part_log.contains("Train/val/test on _N with mask train_mask, val_mask, test_mask"),
        "gconstruct read the tables and split the labels{all}"
    );
    let log = std::fs::read_to_string(job.path("launcher.log")).unwrap();
    let (per_epoch, val) = check_training(&log, &all);
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

/// Issue #27 items 2 and 3: the example's tables in DGL's chunked format
/// (make_chunked.py, as the partition entry point) partitioned by the
/// native pipeline (partition mode ParMETIS); GraphStorm's gsgnn_np trains
/// on them and saves its model to the "volume"; then, as a second job in
/// partition mode Skip whose workers see the partitioner's whole dataset
/// folder (the volume in the pods), GraphStorm's embedding entry point
/// restores the model and writes one embedding per node, in the tables'
/// node ids (GraphStorm remaps them through the pipeline's
/// part<i>/orig_nids.dgl, which it reads for every part on rank 0).
#[test]
fn graphstorm_trains_on_native_partitions_then_infers_embeddings() {
    common::netns::require_root();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ips = ["10.215.0.1", "10.215.0.2"];
    let job = Job::new(ips);
    let mut m = Machines::create(ips);
    let train_time = train(&job, &mut m, ips, false, PARMETIS_TRAIN_COMMAND);
    let all = log_tails(job.dir.path(), 60);
    let part_log = std::fs::read_to_string(job.path("partitioner.log")).unwrap();
    assert!(
        part_log.contains("3000 nodes, 29828 edges"),
        "make_chunked.py's report{all}"
    );
    let dataset = job.path("partitioner/dataset");
    for i in 0..2 {
        let f = dataset.join(format!("part{i}/orig_nids.dgl"));
        assert!(f.is_file(), "the native pipeline's {}{all}", f.display());
    }
    let log = std::fs::read_to_string(job.path("launcher.log")).unwrap();
    let (per_epoch, val) = check_training(&log, &all);
    let model = job.path("volume/model/epoch-3");
    assert!(
        model.is_dir(),
        "GraphStorm saved no model at {}{all}",
        model.display()
    );

    let infer_time = infer(&job, &mut m, ips, &dataset);
    let all = log_tails(job.dir.path(), 60);
    let report = check_embeddings(&job, &all);
    let left = [m.hosts.ns_pids(), m.hosts.marked()].concat();
    assert!(left.is_empty(), "processes left behind: {left:?}{all}");
    eprintln!(
        "graphstorm on native partitions: training {train_time:?}, loss by epoch {per_epoch:?}, validation accuracy {val:?}; inference {infer_time:?}: {report}"
    );
}

/// The inference job: two Skip-mode workers whose `dataset` is the
/// partitioner's folder (every part, as the volume the pods mount), and the
/// launcher running GraphStorm's embedding entry point.
fn infer(job: &Job, m: &mut Machines, ips: [&str; 2], dataset: &Path) -> Duration {
    // The training job's agents have exited; DGL's servers take 30050 on.
    const PORT: &str = AGENT_PORT;
    let cwd = job.path("example");
    // The subPath mounts of dgljob-infer.yaml: the JSON and the parts only.
    let view = job.path("infer-parts");
    std::fs::create_dir_all(&view).unwrap();
    for name in [format!("{GRAPH}.json"), "part0".into(), "part1".into()] {
        std::os::unix::fs::symlink(dataset.join(&name), view.join(&name)).unwrap();
    }
    let workers: Vec<usize> = (0..2)
        .map(|i| {
            let ws = format!("infer-w{i}");
            std::fs::create_dir_all(job.path(&ws)).unwrap();
            std::os::unix::fs::symlink(dataset, job.path(&format!("{ws}/dataset"))).unwrap();
            let log = job.path(&format!("infer-worker-{i}.log"));
            m.spawn(i, &job.worker_args(i, ips[i], &ws, PORT), &cwd, &log)
        })
        .collect();
    let launch = job.launch_args(None, PORT, INFER_COMMAND);
    let launcher = m.spawn(0, &launch, &cwd, &job.path("infer-launcher.log"));
    let mut others = [
        ("infer-worker-0", workers[0]),
        ("infer-worker-1", workers[1]),
    ];
    finish(job, m, launcher, &mut others)
}

/// Reads GraphStorm's embeddings with torch: emb_info.json, and per rank
/// `_N/embed-<rank>.pt` (rows) with `_N/embed_nids-<rank>.pt` (the node id
/// of each row). The ids must be the tables' node ids 0..n-1, each once,
/// every row finite; and since they are the tables' ids, a
/// nearest-class-centroid accuracy against the tables' labels far above
/// chance (ids left in the partitions' shuffled order score ~0.25).
fn check_embeddings(job: &Job, all: &str) -> String {
    /// Shared with the e2e graphstorm scenario (xtask/src/e2e/graphstorm.rs).
    const CHECK: &str = include_str!("graphstorm_embeddings.py");
    let out = Command::new(&job.python)
        .args(["-c", CHECK])
        .arg(job.path("volume/embeddings"))
        .arg(job.path("example/data"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "the embeddings: {text}{}{all}",
        String::from_utf8_lossy(&out.stderr)
    );
    let accuracy: f64 = text
        .split("centroid_accuracy=")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no accuracy in {text:?}"));
    assert!(
        accuracy > 0.6,
        "embeddings do not follow the tables' ids: {text}{all}"
    );
    text
}
