//! `cargo xtask bench scale`: the operator under hundreds of DGLJobs and
//! thousands of pods.
//!
//! A dedicated local control plane ("bench": etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler) with fake nodes played by kwok
//! (a separate process): kwok gives bound pods an IP and makes them Running
//! and Ready, and a Stage of ours makes each launcher pod Succeed a few
//! seconds after it runs. The operator runs as its release binary in its own
//! process, so its CPU time and memory are read from /proc.
//!
//! What is measured (client-side, from this process's own watches):
//! - the time from the first job's creation to the last pod created, and per
//!   job from its creation request to the moment all its pods exist
//!   (p50/p95/p99);
//! - the time until every job is Succeeded;
//! - the operator's CPU seconds and RSS (idle before the jobs, peak, final);
//! - from the operator's /metrics: requests it sent by verb (counted by its
//!   client layer, so the bench's own requests are not in them), status
//!   writes, reconciles and their duration, errors;
//! - status writes that changed nothing: the operator's status writes minus
//!   the DGLJob updates this process saw (only the operator writes a job
//!   after it is created).
//!
//! Every process started here (kwok, the operator) is stopped by pid at the
//! end, and the cluster is stopped unless --keep-cluster.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};
use dgl_api::names::{LABEL_JOB_NAME, LABEL_MANAGED_BY, MANAGED_BY};
use dgl_api::{DGLJob, JobPhase};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use localkube::{ClusterConfig, LocalCluster};
use serde_json::json;

use crate::test::{repo_root, run_cmd};

const CLUSTER: &str = "bench";
const NAMESPACE: &str = "bench";
const STAGES: &str = include_str!("bench/kwok-stages.yaml");
/// Fake nodes carry this annotation; kwok manages only them.
const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

#[derive(clap::Args)]
#[command(
    long_about = "Benchmarks on a local control plane with kwok fake nodes.\n\n\
    `scale` creates N DGLJobs of W workers and measures how fast the operator creates \
    their pods and finishes them, its CPU and memory, and the API requests it makes. \
    Needs the cached Kubernetes and kwok binaries (`cargo xtask cluster build`).\n\n\
    `partition` runs dglrun's native partition pipeline and DGL's partition_graph on the \
    same R-MAT graph (default 1 M nodes / 10 M raw edges, 64 features, 4 parts) and \
    prints wall time, peak memory, edge cut and balance side by side."
)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// N jobs x W workers; prints one markdown table row (and details).
    Scale(ScaleArgs),
    /// dglrun's native partition pipeline vs dgl.distributed.partition_graph
    /// on the same R-MAT graph: wall time, peak memory, edge cut, balance.
    Partition(crate::bench_partition::PartitionArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Partitioner pod first (kwok makes it Ready), then workers, then the launcher.
    DglApi,
    /// Workers at once, then the launcher.
    Skip,
}

#[derive(clap::Args, Clone)]
struct ScaleArgs {
    /// Number of DGLJobs (0: only measure the idle operator).
    #[arg(long, default_value_t = 100)]
    jobs: usize,
    /// Workers per job.
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// spec.partitionMode of the jobs.
    #[arg(long, value_enum, default_value_t = Mode::DglApi)]
    mode: Mode,
    /// The operator binary (e.g. one built from an earlier commit, to compare).
    /// Default: the workspace's release build ($CARGO_TARGET_DIR or
    /// target/), built first.
    #[arg(long, alias = "operator-bin")]
    operator: Option<PathBuf>,
    /// Extra argument for `dgl-operator run` (repeatable), e.g.
    /// --operator-arg=--kube-api-qps=100
    #[arg(long = "operator-arg", allow_hyphen_values = true)]
    operator_args: Vec<String>,
    /// Client QPS of the bench's own kube-scheduler (burst: twice that), so
    /// that binding pods does not limit what is measured. 0: localkube's
    /// kube-scheduler with the stock client limit (50 QPS, burst 100).
    #[arg(long, default_value_t = 500.0)]
    scheduler_qps: f32,
    /// Fake kwok nodes (each takes 1000 pods).
    #[arg(long, default_value_t = 10)]
    nodes: u32,
    /// Milliseconds a launcher pod runs before kwok makes it Succeeded.
    #[arg(long, default_value_t = 3000)]
    launcher_ms: u64,
    /// Give up after this many seconds from the first job's creation.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Seconds the started operator runs with no job before idle RSS is read.
    #[arg(long, default_value_t = 10)]
    idle_seconds: u64,
    /// Seconds after the last job Succeeded before the final RSS is read.
    #[arg(long, default_value_t = 10)]
    settle_seconds: u64,
    /// Job creations in flight at once.
    #[arg(long, default_value_t = 32)]
    create_parallelism: usize,
    /// A label for the table row (e.g. "before", "after").
    #[arg(long, default_value = "")]
    label: String,
    /// Keep the "bench" cluster running afterwards (it is restarted with an
    /// empty etcd at the start of every run anyway).
    #[arg(long)]
    keep_cluster: bool,
    /// Append the figures of the run as one JSON line to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    match args.cmd {
        Cmd::Scale(a) => scale(a),
        Cmd::Partition(a) => crate::bench_partition::run(a),
    }
}

fn scale(args: ScaleArgs) -> Result<()> {
    let operator = match &args.operator {
        Some(p) => p.clone(),
        None => {
            eprintln!("==> building dgl-operator (release)");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            run_cmd(Command::new(&cargo).args(["build", "--release", "-q", "-p", "dgl-operator"]))?;
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo_root().join("target"));
            target.join("release/dgl-operator")
        }
    };
    if !operator.is_file() {
        bail!("operator binary {} does not exist", operator.display());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut cfg = ClusterConfig::new(CLUSTER)?;
    cfg.scheduler = args.scheduler_qps <= 0.0;
    // Never start the long Kubernetes build from a benchmark.
    cfg.build_if_missing = false;
    let cluster = LocalCluster::new(cfg)?;
    let mut procs = Procs::default();
    let result = rt.block_on(scale_async(&args, &operator, &cluster, &mut procs));
    procs.stop_all();
    if !args.keep_cluster {
        eprintln!("==> stopping cluster {CLUSTER:?}");
        if let Err(e) = rt.block_on(cluster.down(false)) {
            eprintln!("warning: stopping cluster {CLUSTER:?}: {e}");
        }
    }
    let report = result?;
    println!("{}", Report::header());
    println!("{}", report.row());
    println!();
    println!("{}", report.details());
    if let Some(path) = &args.json {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        writeln!(f, "{}", serde_json::to_string(&report.json())?)?;
    }
    Ok(())
}

/// Child processes started by the bench, stopped by pid (SIGTERM, then SIGKILL).
#[derive(Default)]
struct Procs(Vec<(&'static str, Child)>);

impl Procs {
    fn spawn(&mut self, name: &'static str, cmd: &mut Command, log: &Path) -> Result<u32> {
        let out =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let pid = child.id();
        eprintln!("    {name}: pid {pid}, log {}", log.display());
        self.0.push((name, child));
        Ok(pid)
    }

    fn check_running(&mut self) -> Result<()> {
        for (name, child) in &mut self.0 {
            if let Some(status) = child.try_wait()? {
                bail!("{name} (pid {}) exited: {status}", child.id());
            }
        }
        Ok(())
    }

    fn stop_all(&mut self) {
        for (name, mut child) in self.0.drain(..).rev() {
            let pid = child.id() as i32;
            if matches!(child.try_wait(), Ok(Some(_))) {
                continue;
            }
            // SAFETY: kill(2) on the pid of our own child, which we have not reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    _ if Instant::now() >= deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(100)),
                }
            }
            eprintln!("    stopped {name} (pid {pid})");
        }
    }
}

/// CPU seconds (user + system) and memory of a process, from /proc.
#[derive(Debug, Clone, Copy, Default)]
struct ProcSample {
    cpu_seconds: f64,
    rss_kib: u64,
    hwm_kib: u64,
}

fn proc_sample(pid: u32) -> Result<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after "(comm)": state is field 3; utime, stime are fields 14, 15.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(ProcSample {
        cpu_seconds: (ticks(11) + ticks(12)) as f64 / tck,
        rss_kib: kib("VmRSS:"),
        hwm_kib: kib("VmHWM:"),
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// GET over plain HTTP/1.0 (the operator's metrics endpoint).
async fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    Ok(localkube::http_get(port, path).await?)
}

/// One sample of the Prometheus text format: name, labels, value.
#[derive(Debug, Clone, Default)]
struct Metrics(Vec<(String, BTreeMap<String, String>, f64)>);

impl Metrics {
    fn parse(text: &str) -> Metrics {
        let mut out = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = match line.rsplit_once(' ') {
                Some(x) => x,
                None => continue,
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (series, ""),
            };
            let mut map = BTreeMap::new();
            for kv in labels.split(',').filter(|s| !s.is_empty()) {
                if let Some((k, v)) = kv.split_once('=') {
                    map.insert(k.to_string(), v.trim_matches('"').to_string());
                }
            }
            out.push((name.to_string(), map, value));
        }
        Metrics(out)
    }

    fn sum(&self, name: &str, filter: impl Fn(&BTreeMap<String, String>) -> bool) -> f64 {
        self.0
            .iter()
            .filter(|(n, l, _)| n == name && filter(l))
            .map(|(_, _, v)| v)
            .sum()
    }

    fn get(&self, name: &str) -> f64 {
        self.sum(name, |_| true)
    }

    /// Requests by verb.
    fn requests_by_verb(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (n, l, v) in &self.0 {
            if n == "dgl_operator_api_requests_total" {
                *out.entry(l.get("verb").cloned().unwrap_or_default())
                    .or_insert(0.0) += v;
            }
        }
        out
    }

    fn requests_by_verb_resource(&self) -> BTreeMap<(String, String), f64> {
        let mut out = BTreeMap::new();
        for (n, l, v) in &self.0 {
            if n == "dgl_operator_api_requests_total" {
                let key = (
                    l.get("verb").cloned().unwrap_or_default(),
                    l.get("resource").cloned().unwrap_or_default(),
                );
                *out.entry(key).or_insert(0.0) += v;
            }
        }
        out
    }

    /// Cumulative buckets (le, count) of a histogram.
    fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        let bucket = format!("{name}_bucket");
        let mut b: Vec<(f64, f64)> = self
            .0
            .iter()
            .filter(|(n, _, _)| *n == bucket)
            .filter_map(|(_, l, v)| {
                let le = l.get("le")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, *v))
            })
            .collect();
        b.sort_by(|a, b| a.0.total_cmp(&b.0));
        b
    }
}

/// histogram_quantile over the difference of two scrapes (linear within a bucket).
fn histogram_quantile(q: f64, before: &[(f64, f64)], after: &[(f64, f64)]) -> Option<f64> {
    let diff: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, c)| {
            let b = before
                .iter()
                .find(|(l, _)| l == le)
                .map(|x| x.1)
                .unwrap_or(0.0);
            (*le, c - b)
        })
        .collect();
    let total = diff.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for (le, c) in &diff {
        if *c >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let in_bucket = c - prev.1;
            let frac = if in_bucket > 0.0 {
                (rank - prev.1) / in_bucket
            } else {
                1.0
            };
            return Some(prev.0 + (le - prev.0) * frac);
        }
        prev = (*le, *c);
    }
    None
}

/// Exact percentile (nearest rank) of a sample.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// What the bench's watches saw, with client-side arrival times.
#[derive(Default)]
struct Seen {
    /// Pod name -> first time seen.
    pods: HashMap<String, Instant>,
    /// Pod name -> first time seen Ready with an IP.
    ready: HashMap<String, Instant>,
    jobs: HashMap<String, JobSeen>,
    pod_events: u64,
}

#[derive(Default, Clone)]
struct JobSeen {
    created: Option<Instant>,
    pods: u32,
    all_pods: Option<Instant>,
    succeeded: Option<Instant>,
    failed: bool,
    /// Watch events of the job after its creation (status updates: only the
    /// operator writes a job once it exists).
    updates: u64,
    last_rv: Option<String>,
}

/// Watches pods and jobs of the bench namespace into `seen`; resolves once
/// both initial lists are done.
async fn start_watches(
    client: &Client,
    seen: Arc<Mutex<Seen>>,
    pods_per_job: u32,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let (pods_ready_tx, pods_ready) = tokio::sync::oneshot::channel::<()>();
    let (jobs_ready_tx, jobs_ready) = tokio::sync::oneshot::channel::<()>();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), NAMESPACE);

    let s = seen.clone();
    let pod_task = tokio::spawn(async move {
        let mut ready = Some(pods_ready_tx);
        let wc = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
        let mut stream = watcher(pods, wc).boxed();
        while let Some(ev) = stream.next().await {
            let now = Instant::now();
            match ev {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => {
                    let mut s = s.lock().unwrap();
                    s.pod_events += 1;
                    let name = p.name_any();
                    let ready = p.status.as_ref().is_some_and(|st| {
                        st.pod_ip.is_some()
                            && st
                                .conditions
                                .iter()
                                .flatten()
                                .any(|c| c.type_ == "Ready" && c.status == "True")
                    });
                    if ready && !s.ready.contains_key(&name) {
                        s.ready.insert(name.clone(), now);
                    }
                    if s.pods.contains_key(&name) {
                        continue;
                    }
                    s.pods.insert(name, now);
                    if let Some(job) = p.labels().get(LABEL_JOB_NAME) {
                        let j = s.jobs.entry(job.clone()).or_default();
                        j.pods += 1;
                        if j.pods == pods_per_job {
                            j.all_pods = Some(now);
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!("    pod watch: {e}"),
            }
        }
    });
    let s = seen.clone();
    let job_task = tokio::spawn(async move {
        let mut ready = Some(jobs_ready_tx);
        let mut stream = watcher(jobs, watcher::Config::default()).boxed();
        while let Some(ev) = stream.next().await {
            let now = Instant::now();
            match ev {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(watcher::Event::Apply(j)) | Ok(watcher::Event::InitApply(j)) => {
                    let mut s = s.lock().unwrap();
                    let js = s.jobs.entry(j.name_any()).or_default();
                    let rv = j.resource_version();
                    if js.last_rv.is_some() && js.last_rv != rv {
                        js.updates += 1;
                    }
                    js.last_rv = rv;
                    match j.status.as_ref().and_then(|s| s.phase) {
                        Some(JobPhase::Succeeded) if js.succeeded.is_none() => {
                            js.succeeded = Some(now)
                        }
                        Some(JobPhase::Failed) => js.failed = true,
                        _ => {}
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!("    job watch: {e}"),
            }
        }
    });
    pods_ready.await.context("pod watch ended")?;
    jobs_ready.await.context("job watch ended")?;
    Ok(vec![pod_task, job_task])
}

fn job_object(name: &str, workers: u32, mode: Mode) -> Result<DGLJob> {
    let container = |extra: serde_json::Value| {
        let mut c = json!({"name": "main", "image": "registry.invalid/dgl-bench:none"});
        if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        c
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": DGLJob::api_version(&()),
        "kind": DGLJob::kind(&()),
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "cleanPodPolicy": "Running",
            "partitionMode": match mode { Mode::DglApi => "DGL-API", Mode::Skip => "Skip" },
            "dglReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                    container(json!({"command": ["dglrun"], "args": ["--graph-name", "bench"]}))
                ]}}},
                "Worker": {"replicas": workers, "template": {"spec": {"containers": [
                    container(json!({}))
                ]}}}
            }
        }
    }))?)
}

async fn create_nodes(client: &Client, n: u32) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 0..n {
        let name = format!("kwok-node-{i}");
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", "type": "kwok"}
            },
            "spec": {},
            "status": {
                "allocatable": {"cpu": "1000", "memory": "1Ti", "pods": "1000"},
                "capacity": {"cpu": "1000", "memory": "1Ti", "pods": "1000"}
            }
        }))?;
        nodes
            .patch(
                &name,
                &PatchParams::apply("xtask-bench").force(),
                &Patch::Apply(&node),
            )
            .await
            .with_context(|| format!("creating node {name}"))?;
    }
    Ok(())
}

/// Fake nodes whose Ready condition is True.
async fn nodes_ready(client: &Client) -> Result<usize> {
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(nodes
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count())
}

async fn wait_nodes_ready(client: &Client, n: u32, procs: &mut Procs) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        procs.check_running()?;
        let ready = nodes_ready(client).await?;
        if ready as u32 >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {ready} of {n} kwok nodes became Ready in 60 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn scrape(port: u16) -> Result<Metrics> {
    let (code, body) = http_get(port, "/metrics").await?;
    if code != 200 {
        bail!("operator /metrics answered {code}: {body}");
    }
    Ok(Metrics::parse(&body))
}

/// Step 1: a fresh bench cluster with the CRD and the bench namespace.
async fn start_cluster(
    cluster: &LocalCluster,
    load: &str,
) -> Result<(localkube::ClusterInfo, Client, PathBuf)> {
    eprintln!("==> cluster {CLUSTER:?} (fresh etcd); load average {load}");
    cluster
        .down(false)
        .await
        .context("stopping an earlier bench cluster")?;
    let info = cluster.up().await.context("starting the bench cluster")?;
    let client = info.client().await?;
    let work = cluster.state_dir().join("bench");
    std::fs::create_dir_all(&work)?;
    localkube::apply_crds(&client, &dgl_api::crd_yaml()).await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone())
        .patch(
            NAMESPACE,
            &PatchParams::apply("xtask-bench"),
            &Patch::Apply(&ns),
        )
        .await?;
    Ok((info, client, work))
}

/// Step 2 (with --scheduler-qps): a kube-scheduler of the bench's own, with
/// that client QPS; its pid.
fn start_scheduler(
    args: &ScaleArgs,
    info: &localkube::ClusterInfo,
    work: &Path,
    bins: &localkube::Binaries,
    procs: &mut Procs,
) -> Result<Option<u32>> {
    if args.scheduler_qps <= 0.0 {
        return Ok(None);
    }
    let cfg = work.join("kube-scheduler.yaml");
    let config = json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": info.kubeconfig.display().to_string(),
            "qps": args.scheduler_qps,
            "burst": (args.scheduler_qps * 2.0).ceil() as u32,
        },
        "leaderElection": {"leaderElect": false},
        "enableProfiling": false,
    });
    std::fs::write(&cfg, serde_yaml::to_string(&config)?)?;
    eprintln!("==> kube-scheduler (client QPS {})", args.scheduler_qps);
    let pid = procs.spawn(
        "kube-scheduler",
        Command::new(&bins.kube_scheduler).args([
            format!("--config={}", cfg.display()),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", free_port()?),
        ]),
        &work.join("kube-scheduler.log"),
    )?;
    Ok(Some(pid))
}

/// Step 3: kwok with `--nodes` fake nodes, all Ready; its pid.
async fn start_kwok(
    args: &ScaleArgs,
    client: &Client,
    info: &localkube::ClusterInfo,
    work: &Path,
    bins: &localkube::Binaries,
    procs: &mut Procs,
) -> Result<u32> {
    eprintln!("==> kwok with {} fake nodes", args.nodes);
    let kwok_cfg = work.join("kwok.yaml");
    std::fs::write(
        &kwok_cfg,
        STAGES.replace("__LAUNCHER_DELAY_MS__", &args.launcher_ms.to_string()),
    )?;
    create_nodes(client, args.nodes).await?;
    let kwok_pid = procs.spawn(
        "kwok",
        Command::new(&bins.kwok).args([
            format!("--kubeconfig={}", info.kubeconfig.display()),
            format!("--config={}", kwok_cfg.display()),
            "--manage-all-nodes=false".into(),
            format!("--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake"),
            // Room for every pod's IP (the default /24 has 254).
            "--cidr=10.0.0.1/16".into(),
            "--node-ip=10.255.0.1".into(),
            // Heartbeats by node Lease (renewed every 10 s), which is what the
            // node-heartbeat-with-lease Stage above assumes; without it the
            // nodes would turn NotReady after the controller-manager's grace
            // period and it would mark every pod NotReady.
            "--node-lease-duration-seconds=40".into(),
        ]),
        &work.join("kwok.log"),
    )?;
    wait_nodes_ready(client, args.nodes, procs).await?;

    Ok(kwok_pid)
}

/// Step 4: the operator under test, ready; its pid and metrics port.
async fn start_operator(
    args: &ScaleArgs,
    operator: &Path,
    info: &localkube::ClusterInfo,
    work: &Path,
    procs: &mut Procs,
) -> Result<(u32, u16)> {
    eprintln!("==> operator {}", operator.display());
    let metrics_port = free_port()?;
    let mut op_args: Vec<String> = vec![
        "run".into(),
        "--leader-elect=false".into(),
        "--metrics-auth=none".into(),
        format!("--metrics-addr=127.0.0.1:{metrics_port}"),
        "--gang-scheduler=none".into(),
        format!("--namespace={NAMESPACE}"),
    ];
    op_args.extend(args.operator_args.iter().cloned());
    let op_log = work.join("operator.log");
    let op_pid = procs.spawn(
        "dgl-operator",
        Command::new(operator)
            .args(&op_args)
            .env("KUBECONFIG", &info.kubeconfig)
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1"),
        &op_log,
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        procs.check_running()?;
        if let Ok((200, _)) = http_get(metrics_port, "/readyz").await {
            break;
        }
        if Instant::now() > deadline {
            bail!("operator not ready in 30 s; see {}", op_log.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok((op_pid, metrics_port))
}

/// Step 5: creates the jobs, `--create-parallelism` at a time, noting when
/// each was created.
fn spawn_creator(
    jobs_api: Api<DGLJob>,
    seen: Arc<Mutex<Seen>>,
    names: Vec<String>,
    args: &ScaleArgs,
) -> tokio::task::JoinHandle<Result<Vec<()>>> {
    let workers = args.workers;
    let mode = args.mode;
    let par = args.create_parallelism.max(1);
    tokio::spawn(async move {
        futures::stream::iter(names)
            .map(|name| {
                let api = jobs_api.clone();
                let seen = seen.clone();
                async move {
                    let job = job_object(&name, workers, mode)?;
                    let at = Instant::now();
                    api.create(&PostParams::default(), &job)
                        .await
                        .with_context(|| format!("creating job {name}"))?;
                    seen.lock().unwrap().jobs.entry(name).or_default().created = Some(at);
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(par)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()
    })
}

/// What the wait for the jobs saw.
struct Progress {
    peak_rss: u64,
    timed_out: bool,
    created_all_at: Option<Duration>,
    min_nodes_ready: usize,
}

/// Step 6: waits until every job has finished (or `--timeout`), sampling
/// the operator's memory and the nodes, with a line every 10 s.
#[allow(clippy::too_many_arguments)]
async fn wait_for_jobs(
    args: &ScaleArgs,
    client: &Client,
    seen: &Mutex<Seen>,
    creator: &tokio::task::JoinHandle<Result<Vec<()>>>,
    procs: &mut Procs,
    op_pid: u32,
    idle_rss: u64,
    t0: Instant,
) -> Result<Progress> {
    let mut peak_rss = idle_rss;
    let mut last_print = Instant::now();
    let timeout = Duration::from_secs(args.timeout);
    let mut timed_out = false;
    let mut created_all_at = None;
    let mut nodes_checked = Instant::now();
    let mut min_nodes_ready = args.nodes as usize;
    loop {
        procs.check_running()?;
        if nodes_checked.elapsed() > Duration::from_secs(5) {
            nodes_checked = Instant::now();
            if let Ok(r) = nodes_ready(client).await {
                if r < min_nodes_ready {
                    eprintln!(
                        "    warning: only {r} of {} nodes Ready (kwok heartbeats late?)",
                        args.nodes
                    );
                }
                min_nodes_ready = min_nodes_ready.min(r);
            }
        }
        if let Ok(s) = proc_sample(op_pid) {
            peak_rss = peak_rss.max(s.rss_kib);
        }
        if created_all_at.is_none() && creator.is_finished() {
            created_all_at = Some(t0.elapsed());
        }
        let (pods, done, failed) = {
            let s = seen.lock().unwrap();
            let done = s.jobs.values().filter(|j| j.succeeded.is_some()).count();
            let failed = s.jobs.values().filter(|j| j.failed).count();
            (s.pods.len(), done, failed)
        };
        if done + failed >= args.jobs && created_all_at.is_some() {
            break;
        }
        if t0.elapsed() > timeout {
            timed_out = true;
            eprintln!("    timed out after {} s", args.timeout);
            break;
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            last_print = Instant::now();
            eprintln!(
                "    {:>5.0} s: {pods} pods, {done} of {} jobs Succeeded, {failed} Failed; operator RSS {:.1} MiB; load {}",
                t0.elapsed().as_secs_f64(),
                args.jobs,
                peak_rss as f64 / 1024.0,
                loadavg()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(Progress {
        peak_rss,
        timed_out,
        created_all_at,
        min_nodes_ready,
    })
}

/// How many WARN/ERROR lines the operator logged, and the first three.
fn log_warnings(op_log: &Path) -> (usize, Vec<String>) {
    let log = std::fs::read_to_string(op_log).unwrap_or_default();
    let log_warnings = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .count();
    let first_warnings: Vec<String> = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .take(3)
        .map(|l| l.chars().take(300).collect())
        .collect();
    (log_warnings, first_warnings)
}

/// Where the jobs' time went, from what the watches saw.
struct JobTimes {
    /// Creation to all pods seen, per job, sorted.
    per_job: Vec<f64>,
    incomplete: usize,
    updates: u64,
    reaction: Vec<f64>,
    environment: Vec<f64>,
    last_pod: Option<Duration>,
    succeeded: usize,
    failed: usize,
    pods_seen: usize,
}

/// Step 8: per-job timings, split into the operator's share and the rest.
fn job_times(s: &Seen, names: &[String], args: &ScaleArgs, t0: Instant) -> JobTimes {
    let mut per_job: Vec<f64> = Vec::new();
    let mut incomplete = 0;
    let mut updates = 0u64;
    for name in names {
        let j = s.jobs.get(name).cloned().unwrap_or_default();
        updates += j.updates;
        match (j.created, j.all_pods) {
            (Some(c), Some(a)) => per_job.push(a.saturating_duration_since(c).as_secs_f64()),
            _ => incomplete += 1,
        }
    }
    per_job.sort_by(|a, b| a.total_cmp(b));
    // Where each job's time went: the operator reacting (an event seen here →
    // the next pods seen here) vs. the environment (a pod seen here → seen
    // Ready with an IP: scheduler + kwok).
    let mut reaction: Vec<f64> = Vec::new();
    let mut environment: Vec<f64> = Vec::new();
    for name in names {
        let Some(created) = s.jobs.get(name).and_then(|j| j.created) else {
            continue;
        };
        let seen = |p: &str| s.pods.get(p).copied();
        let ready = |p: &str| s.ready.get(p).copied();
        let workers: Vec<String> = (0..args.workers as i32)
            .map(|i| dgl_api::names::worker_name(name, i))
            .collect();
        let last = |f: &dyn Fn(&str) -> Option<Instant>| {
            workers
                .iter()
                .map(|w| f(w))
                .collect::<Option<Vec<_>>>()
                .and_then(|v| v.into_iter().max())
        };
        let (Some(w_seen), Some(w_ready), Some(l_seen)) = (
            last(&seen),
            last(&ready),
            seen(&dgl_api::names::launcher_name(name)),
        ) else {
            continue;
        };
        let d = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
        let (r, e) = match args.mode {
            Mode::DglApi => {
                let part = dgl_api::names::partitioner_name(name);
                let (Some(p_seen), Some(p_ready)) = (seen(&part), ready(&part)) else {
                    continue;
                };
                (
                    d(created, p_seen) + d(p_ready, w_seen) + d(w_ready, l_seen),
                    d(p_seen, p_ready) + d(w_seen, w_ready),
                )
            }
            Mode::Skip => (d(created, w_seen) + d(w_ready, l_seen), d(w_seen, w_ready)),
        };
        reaction.push(r);
        environment.push(e);
    }
    reaction.sort_by(|a, b| a.total_cmp(b));
    environment.sort_by(|a, b| a.total_cmp(b));
    let last_pod = s
        .pods
        .values()
        .max()
        .map(|t| t.saturating_duration_since(t0));
    let succeeded = names
        .iter()
        .filter(|n| s.jobs.get(*n).is_some_and(|j| j.succeeded.is_some()))
        .count();
    let failed = names
        .iter()
        .filter(|n| s.jobs.get(*n).is_some_and(|j| j.failed))
        .count();
    let pods_seen = s.pods.len();
    JobTimes {
        per_job,
        incomplete,
        updates,
        reaction,
        environment,
        last_pod,
        succeeded,
        failed,
        pods_seen,
    }
}

async fn scale_async(
    args: &ScaleArgs,
    operator: &Path,
    cluster: &LocalCluster,
    procs: &mut Procs,
) -> Result<Report> {
    let load_start = loadavg();
    let (info, client, work) = start_cluster(cluster, &load_start).await?;
    let bins = localkube::installed_binaries(&localkube::cache_dir()?)?;
    let scheduler_pid = start_scheduler(args, &info, &work, &bins, procs)?;
    let kwok_pid = start_kwok(args, &client, &info, &work, &bins, procs).await?;
    let (op_pid, metrics_port) = start_operator(args, operator, &info, &work, procs).await?;
    let op_log = work.join("operator.log");
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    procs.check_running()?;
    let idle = proc_sample(op_pid)?;
    let m0 = scrape(metrics_port).await?;
    eprintln!(
        "    idle: RSS {:.1} MiB, CPU {:.2} s",
        idle.rss_kib as f64 / 1024.0,
        idle.cpu_seconds
    );
    let pods_per_job = args.workers
        + 1
        + match args.mode {
            Mode::DglApi => 1,
            Mode::Skip => 0,
        };
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watches = start_watches(&client, seen.clone(), pods_per_job).await?;

    let Baseline {
        components,
        comp_cpu0,
        kwok_cpu0,
        bench_cpu0,
        apiserver0,
        write_latency0,
    } = baseline(cluster, &client, scheduler_pid, kwok_pid).await?;

    eprintln!(
        "==> creating {} DGLJobs x {} workers ({} mode, {} pods each)",
        args.jobs,
        args.workers,
        if args.mode == Mode::DglApi {
            "DGL-API"
        } else {
            "Skip"
        },
        pods_per_job
    );
    let t0 = Instant::now();
    let jobs_api: Api<DGLJob> = Api::namespaced(client.clone(), NAMESPACE);
    let names: Vec<String> = (0..args.jobs).map(|i| format!("bench-{i:05}")).collect();
    let creator = spawn_creator(jobs_api, seen.clone(), names.clone(), args);

    let progress = wait_for_jobs(
        args,
        &client,
        &seen,
        &creator,
        procs,
        op_pid,
        idle.rss_kib,
        t0,
    )
    .await?;
    let Progress {
        mut peak_rss,
        timed_out,
        created_all_at,
        min_nodes_ready,
    } = progress;
    let all_done = t0.elapsed();
    creator.await.context("job creation task")??;
    let load_end = loadavg();
    let after_jobs = proc_sample(op_pid)?;
    let m1 = scrape(metrics_port).await?;
    let (apiserver1, write_latency1) = apiserver_metrics(&client).await?;
    let apiserver_total = apiserver1 - apiserver0;
    let write_latency = [0.5, 0.99]
        .map(|q| histogram_quantile(q, &write_latency0, &write_latency1).map(|s| s * 1000.0));

    peak_rss = settle(args, op_pid, peak_rss).await;
    procs.check_running()?;
    let fin = proc_sample(op_pid)?;
    let m2 = scrape(metrics_port).await?;
    for w in watches {
        w.abort();
    }
    let since = |pid: u32, c0: f64| proc_sample(pid).map(|s| s.cpu_seconds - c0).unwrap_or(0.0);
    let comp_cpu: Vec<(String, f64)> = components
        .iter()
        .zip(comp_cpu0)
        .map(|((n, p), (_, c0))| (n.clone(), since(*p, c0)))
        .chain([
            ("kwok".to_string(), since(kwok_pid, kwok_cpu0)),
            (
                "this bench (watches, creates)".to_string(),
                since(std::process::id(), bench_cpu0),
            ),
        ])
        .collect();

    let (log_warnings, first_warnings) = log_warnings(&op_log);

    let JobTimes {
        per_job,
        incomplete,
        updates,
        reaction,
        environment,
        last_pod,
        succeeded,
        failed,
        pods_seen,
    } = job_times(&seen.lock().unwrap(), &names, args, t0);

    let n = args.jobs.max(1) as f64;
    let (requests_per_job, requests_detail) = requests_per_job(&m0, &m1, n);
    let hist = "dgl_operator_reconcile_duration_seconds";
    let status_writes =
        m1.get("dgl_operator_status_writes_total") - m0.get("dgl_operator_status_writes_total");
    let reconciles = m1.get(&format!("{hist}_count")) - m0.get(&format!("{hist}_count"));

    Ok(Report {
        label: args.label.clone(),
        jobs: args.jobs,
        workers: args.workers,
        mode: args.mode,
        pods_per_job,
        operator_args: args.operator_args.join(" "),
        scheduler: if args.scheduler_qps > 0.0 {
            format!("bench kube-scheduler, client QPS {}", args.scheduler_qps)
        } else {
            "localkube kube-scheduler, stock client QPS 50".into()
        },
        first_create_to_last_pod: last_pod.map(|d| d.as_secs_f64()),
        jobs_created_in: created_all_at.map(|d| d.as_secs_f64()),
        per_job_p50: percentile(&per_job, 0.50),
        per_job_p95: percentile(&per_job, 0.95),
        per_job_p99: percentile(&per_job, 0.99),
        per_job_max: per_job.last().copied().unwrap_or(f64::NAN),
        apiserver_requests: apiserver_total,
        min_nodes_ready,
        nodes: args.nodes as usize,
        apiserver_write_ms: write_latency,
        reaction: [
            percentile(&reaction, 0.5),
            percentile(&reaction, 0.95),
            percentile(&reaction, 0.99),
        ],
        environment: [
            percentile(&environment, 0.5),
            percentile(&environment, 0.95),
            percentile(&environment, 0.99),
        ],
        jobs_without_all_pods: incomplete,
        all_succeeded: (!timed_out && succeeded == args.jobs).then_some(all_done.as_secs_f64()),
        succeeded,
        failed,
        pods_seen,
        cpu_seconds: after_jobs.cpu_seconds - idle.cpu_seconds,
        cpu_seconds_settled: fin.cpu_seconds - idle.cpu_seconds,
        idle_rss_mib: idle.rss_kib as f64 / 1024.0,
        peak_rss_mib: peak_rss.max(fin.hwm_kib) as f64 / 1024.0,
        final_rss_mib: fin.rss_kib as f64 / 1024.0,
        requests_per_job,
        requests_detail,
        status_writes_per_job: status_writes / n,
        noop_status_writes: status_writes - updates as f64,
        reconciles_per_job: reconciles / n,
        reconcile_p50_ms: histogram_quantile(0.5, &m0.buckets(hist), &m1.buckets(hist))
            .map(|s| s * 1000.0),
        reconcile_p99_ms: histogram_quantile(0.99, &m0.buckets(hist), &m1.buckets(hist))
            .map(|s| s * 1000.0),
        reconcile_errors: m2.get("dgl_operator_reconcile_errors_total")
            - m0.get("dgl_operator_reconcile_errors_total"),
        throttled_seconds: m1.get("dgl_operator_client_throttled_seconds_total")
            - m0.get("dgl_operator_client_throttled_seconds_total"),
        log_warnings,
        first_warnings,
        components_cpu: comp_cpu,
        load_start,
        load_end,
    })
}

/// CPU seconds and API server counters before the jobs are created.
struct Baseline {
    components: Vec<(String, u32)>,
    comp_cpu0: Vec<(String, f64)>,
    kwok_cpu0: f64,
    bench_cpu0: f64,
    apiserver0: f64,
    write_latency0: Vec<(f64, f64)>,
}

async fn baseline(
    cluster: &LocalCluster,
    client: &Client,
    scheduler_pid: Option<u32>,
    kwok_pid: u32,
) -> Result<Baseline> {
    let mut components = component_pids(cluster).await;
    if let Some(pid) = scheduler_pid {
        components.push(("kube-scheduler (bench)".into(), pid));
    }
    let comp_cpu0 = components
        .iter()
        .map(|(n, p)| {
            (
                n.clone(),
                proc_sample(*p).map(|s| s.cpu_seconds).unwrap_or(0.0),
            )
        })
        .collect();
    let (apiserver0, write_latency0) = apiserver_metrics(client).await?;
    Ok(Baseline {
        components,
        comp_cpu0,
        kwok_cpu0: proc_sample(kwok_pid)?.cpu_seconds,
        bench_cpu0: proc_sample(std::process::id())?.cpu_seconds,
        apiserver0,
        write_latency0,
    })
}

/// Settle: cleanPodPolicy deletions, then the final memory; returns the
/// peak RSS seen so far.
async fn settle(args: &ScaleArgs, op_pid: u32, mut peak_rss: u64) -> u64 {
    let settle_end = Instant::now() + Duration::from_secs(args.settle_seconds);
    while Instant::now() < settle_end {
        if let Ok(s) = proc_sample(op_pid) {
            peak_rss = peak_rss.max(s.rss_kib);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    peak_rss
}

/// The operator's requests between two scrapes, per job: by verb, and by
/// verb and resource.
fn requests_per_job(
    m0: &Metrics,
    m1: &Metrics,
    n: f64,
) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let verbs0 = m0.requests_by_verb();
    let by_verb = m1
        .requests_by_verb()
        .into_iter()
        .map(|(v, c)| {
            let before = verbs0.get(&v).copied().unwrap_or(0.0);
            (v, (c - before) / n)
        })
        .filter(|(_, c)| *c > 0.0)
        .collect();
    let vr0 = m0.requests_by_verb_resource();
    let detail = m1
        .requests_by_verb_resource()
        .into_iter()
        .map(|((v, r), c)| {
            let before = vr0.get(&(v.clone(), r.clone())).copied().unwrap_or(0.0);
            (format!("{v} {r}"), (c - before) / n)
        })
        .filter(|(_, c)| *c > 0.0)
        .collect();
    (by_verb, detail)
}

/// The API server's own metrics: requests served (all clients, watches
/// excluded) and the latency histogram of writes.
async fn apiserver_metrics(client: &Client) -> Result<(f64, Vec<(f64, f64)>)> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let m = Metrics::parse(&client.request_text(req).await?);
    let total = m.sum("apiserver_request_total", |l| {
        l.get("verb").is_none_or(|v| v != "WATCH")
    });
    let mut buckets: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (n, l, v) in &m.0 {
        let write = l
            .get("verb")
            .is_some_and(|v| matches!(v.as_str(), "POST" | "PATCH" | "PUT" | "DELETE" | "APPLY"));
        if n == "apiserver_request_duration_seconds_bucket" && write {
            if let Some(le) = l.get("le") {
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::NAN)
                };
                buckets.entry(le.clone()).or_insert((bound, 0.0)).1 += v;
            }
        }
    }
    let mut b: Vec<(f64, f64)> = buckets
        .into_values()
        .filter(|(le, _)| !le.is_nan())
        .collect();
    b.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok((total, b))
}

async fn component_pids(cluster: &LocalCluster) -> Vec<(String, u32)> {
    match cluster.status().await {
        Ok(s) => s
            .components
            .iter()
            .filter_map(|c| Some((c.name.to_string(), u32::try_from(c.pid?).ok()?)))
            .collect(),
        Err(_) => Vec::new(),
    }
}

struct Report {
    label: String,
    jobs: usize,
    workers: u32,
    mode: Mode,
    pods_per_job: u32,
    operator_args: String,
    scheduler: String,
    first_create_to_last_pod: Option<f64>,
    jobs_created_in: Option<f64>,
    per_job_p50: f64,
    per_job_p95: f64,
    per_job_p99: f64,
    per_job_max: f64,
    /// p50/p95/p99 of the operator's share of a job's time to all pods.
    reaction: [f64; 3],
    /// Requests the API server served from the first job's creation until
    /// every job Succeeded, from all clients (watches excluded).
    apiserver_requests: f64,
    /// Fewest fake nodes Ready at once during the run (all, unless kwok's
    /// heartbeats fell behind: then pods were marked NotReady too).
    min_nodes_ready: usize,
    nodes: usize,
    /// p50/p99 (ms) of the API server's latency for writes, all clients.
    apiserver_write_ms: [Option<f64>; 2],
    /// p50/p95/p99 of the scheduler's and kwok's share (pod created → Ready).
    environment: [f64; 3],
    jobs_without_all_pods: usize,
    all_succeeded: Option<f64>,
    succeeded: usize,
    failed: usize,
    pods_seen: usize,
    cpu_seconds: f64,
    cpu_seconds_settled: f64,
    idle_rss_mib: f64,
    peak_rss_mib: f64,
    final_rss_mib: f64,
    requests_per_job: BTreeMap<String, f64>,
    requests_detail: BTreeMap<String, f64>,
    status_writes_per_job: f64,
    noop_status_writes: f64,
    reconciles_per_job: f64,
    reconcile_p50_ms: Option<f64>,
    reconcile_p99_ms: Option<f64>,
    reconcile_errors: f64,
    throttled_seconds: f64,
    log_warnings: usize,
    first_warnings: Vec<String>,
    components_cpu: Vec<(String, f64)>,
    load_start: String,
    load_end: String,
}

fn secs(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "—".into())
}

impl Report {
    fn header() -> String {
        "| run | jobs x workers (mode) | first job → last pod (s) | per job → all pods p50/p95/p99 (s) | all Succeeded (s) | operator CPU (s) | RSS idle / peak / final (MiB) | API requests per job (verb) | status writes per job (no-op total) | reconciles per job, p50/p99 (ms) | errors |\n\
         |---|---|---|---|---|---|---|---|---|---|---|"
            .to_string()
    }

    fn mode(&self) -> &'static str {
        match self.mode {
            Mode::DglApi => "DGL-API",
            Mode::Skip => "Skip",
        }
    }

    fn row(&self) -> String {
        let reqs = self
            .requests_per_job
            .iter()
            .map(|(v, c)| format!("{v} {c:.1}"))
            .collect::<Vec<_>>()
            .join(", ");
        let ms = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "—".into());
        format!(
            "| {} | {} x {} ({}) | {} | {:.1} / {:.1} / {:.1} | {} | {:.1} | {:.1} / {:.1} / {:.1} | {} | {:.1} ({:.0}) | {:.1}, {} / {} | {} |",
            if self.label.is_empty() { "-" } else { &self.label },
            self.jobs,
            self.workers,
            self.mode(),
            secs(self.first_create_to_last_pod),
            self.per_job_p50,
            self.per_job_p95,
            self.per_job_p99,
            match self.all_succeeded {
                Some(s) => format!("{s:.1}"),
                None => format!("— ({} of {} ok, {} failed)", self.succeeded, self.jobs, self.failed),
            },
            self.cpu_seconds,
            self.idle_rss_mib,
            self.peak_rss_mib,
            self.final_rss_mib,
            reqs,
            self.status_writes_per_job,
            self.noop_status_writes,
            self.reconciles_per_job,
            ms(self.reconcile_p50_ms),
            ms(self.reconcile_p99_ms),
            self.reconcile_errors as u64 + self.log_warnings as u64,
        )
    }

    fn details(&self) -> String {
        let mut out = String::new();
        use std::fmt::Write;
        let _ = writeln!(out, "details:");
        let _ = writeln!(out, "  operator args: {}", self.operator_args);
        let _ = writeln!(out, "  scheduler: {}", self.scheduler);
        let _ = writeln!(
            out,
            "  pods seen {} (expected {}); jobs Succeeded {}, Failed {}; jobs without all pods {}",
            self.pods_seen,
            self.jobs * self.pods_per_job as usize,
            self.succeeded,
            self.failed,
            self.jobs_without_all_pods
        );
        if self.min_nodes_ready < self.nodes {
            let _ = writeln!(
                out,
                "  WARNING: at one point only {} of {} fake nodes were Ready: the controller-manager marks their pods NotReady, which stalls jobs (environment, not operator)",
                self.min_nodes_ready, self.nodes
            );
        }
        let _ = writeln!(
            out,
            "  all jobs created in {} s; slowest job to all pods {:.1} s",
            secs(self.jobs_created_in),
            self.per_job_max
        );
        let _ = writeln!(
            out,
            "  per job, operator reacting (event → next pods) p50/p95/p99: {:.1} / {:.1} / {:.1} s; \
             scheduler + kwok (pods created → Ready) p50/p95/p99: {:.1} / {:.1} / {:.1} s",
            self.reaction[0],
            self.reaction[1],
            self.reaction[2],
            self.environment[0],
            self.environment[1],
            self.environment[2]
        );
        let _ = writeln!(
            out,
            "  operator CPU {:.1} s until all Succeeded, {:.1} s including settle",
            self.cpu_seconds, self.cpu_seconds_settled
        );
        let _ = writeln!(out, "  requests per job by verb and resource:");
        for (k, v) in &self.requests_detail {
            let _ = writeln!(out, "    {k:<40} {v:.2}");
        }
        let operator_total: f64 = self.requests_per_job.values().sum::<f64>() * self.jobs as f64;
        let _ = writeln!(
            out,
            "  API server requests during the run, all clients (no watches): {:.0} ({:.1} per job); the operator's: {:.0} ({:.0}%)",
            self.apiserver_requests,
            self.apiserver_requests / self.jobs.max(1) as f64,
            operator_total,
            100.0 * operator_total / self.apiserver_requests.max(1.0)
        );
        let _ = writeln!(
            out,
            "  API server latency of writes (all clients) p50/p99: {} / {} ms",
            self.apiserver_write_ms[0]
                .map(|v| format!("{v:.0}"))
                .unwrap_or("—".into()),
            self.apiserver_write_ms[1]
                .map(|v| format!("{v:.0}"))
                .unwrap_or("—".into()),
        );
        let _ = writeln!(
            out,
            "  client-side throttling: {:.1} s waited in total",
            self.throttled_seconds
        );
        let _ = writeln!(
            out,
            "  reconcile errors {}, WARN/ERROR log lines {}",
            self.reconcile_errors, self.log_warnings
        );
        for w in &self.first_warnings {
            let _ = writeln!(out, "    {w}");
        }
        let _ = writeln!(out, "  CPU seconds of the other processes during the run:");
        for (n, c) in &self.components_cpu {
            let _ = writeln!(out, "    {n:<26} {c:.1}");
        }
        let _ = writeln!(
            out,
            "  load average at start {}, at end {}",
            self.load_start, self.load_end
        );
        out
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "label": self.label,
            "jobs": self.jobs,
            "workers": self.workers,
            "mode": self.mode(),
            "operator_args": self.operator_args,
            "scheduler": self.scheduler,
            "first_create_to_last_pod_s": self.first_create_to_last_pod,
            "jobs_created_in_s": self.jobs_created_in,
            "per_job_all_pods_s": {"p50": self.per_job_p50, "p95": self.per_job_p95,
                                   "p99": self.per_job_p99, "max": self.per_job_max},
            "operator_reaction_s": {"p50": self.reaction[0], "p95": self.reaction[1], "p99": self.reaction[2]},
            "scheduler_kwok_s": {"p50": self.environment[0], "p95": self.environment[1], "p99": self.environment[2]},
            "all_succeeded_s": self.all_succeeded,
            "apiserver_requests": self.apiserver_requests,
            "min_nodes_ready": self.min_nodes_ready,
            "apiserver_write_ms": {"p50": self.apiserver_write_ms[0], "p99": self.apiserver_write_ms[1]},
            "succeeded": self.succeeded,
            "failed": self.failed,
            "operator_cpu_s": self.cpu_seconds,
            "rss_mib": {"idle": self.idle_rss_mib, "peak": self.peak_rss_mib, "final": self.final_rss_mib},
            "requests_per_job": self.requests_per_job,
            "requests_per_job_detail": self.requests_detail,
            "status_writes_per_job": self.status_writes_per_job,
            "noop_status_writes": self.noop_status_writes,
            "reconciles_per_job": self.reconciles_per_job,
            "reconcile_ms": {"p50": self.reconcile_p50_ms, "p99": self.reconcile_p99_ms},
            "reconcile_errors": self.reconcile_errors,
            "log_warnings": self.log_warnings,
            "throttled_s": self.throttled_seconds,
            "components_cpu_s": self.components_cpu.iter().cloned().collect::<BTreeMap<_, _>>(),
            "load_start": self.load_start,
            "load_end": self.load_end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_metrics_parse() {
        let m = Metrics::parse(
            "# HELP x\n\
             dgl_operator_api_requests_total{verb=\"patch\",resource=\"pods\"} 4\n\
             dgl_operator_api_requests_total{verb=\"patch\",resource=\"configmaps\"} 2\n\
             h_bucket{le=\"0.001\"} 0\nh_bucket{le=\"0.01\"} 10\nh_bucket{le=\"+Inf\"} 10\n",
        );
        assert_eq!(m.requests_by_verb()["patch"], 6.0);
        let q = histogram_quantile(0.5, &[], &m.buckets("h")).unwrap();
        assert!((q - 0.0055).abs() < 1e-9, "{q}");
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
    }

    #[test]
    fn stages_parse_as_yaml_documents() {
        let text = STAGES.replace("__LAUNCHER_DELAY_MS__", "3000");
        let docs: Vec<serde_yaml::Value> = text
            .split("\n---\n")
            .map(|d| serde_yaml::from_str(d).unwrap())
            .collect();
        let names: Vec<&str> = docs
            .iter()
            .filter_map(|d| d["metadata"]["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "node-initialize",
                "node-heartbeat-with-lease",
                "pod-ready",
                "pod-delete",
                "dgl-launcher-complete"
            ]
        );
    }
}
