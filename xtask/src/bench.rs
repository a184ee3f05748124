//! `cargo xtask bench scale`: the operator under hundreds of DGLJobs and
//! thousands of pods, and with `--peer mpi-operator` Kubeflow's mpi-operator
//! under as many MPIJobs on the same cluster right after.
//!
//! A dedicated local control plane ("bench": etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler) with fake nodes played by kwok
//! (a separate process): kwok gives bound pods an IP and makes them Running
//! and Ready, and Stages of ours make each launcher pod (a DGLJob's, an
//! MPIJob's) Succeed a few seconds after it runs. Each operator runs as a
//! binary in its own process, so its CPU time and memory are read from /proc,
//! and as a ServiceAccount of its own, so the API server counts its requests
//! (`bench/identity.rs`).
//!
//! The runs ("phases") follow one another on the same cluster, kwok and
//! scheduler: ours in each `--mode`, then the peer with each
//! `--peer-queue` limit; each in a namespace of its own, deleted (and its
//! pods gone) before the next phase starts.
//!
//! What is measured per phase (client-side, from this process's own watches):
//! - the time from the first job's creation to the last pod created, and per
//!   job from its creation request to the moment all its pods exist
//!   (p50/p95/p99);
//! - the time until every job is Succeeded, and until cleanPodPolicy's
//!   deletions are done (every pod that is not Succeeded is gone);
//! - the operator's CPU seconds and RSS (idle before the jobs, peak, final);
//! - from the API server's metrics: requests of all clients until the
//!   cleanup is done, and of the operator (its FlowSchema) until the settle
//!   period after it has passed too (ours sends its Events in the
//!   background, some after the cleanup), per job;
//! - for ours, from its /metrics: requests it sent by verb (counted by its
//!   client layer), status writes, reconciles and their duration, errors;
//!   status writes that changed nothing: the operator's status writes minus
//!   the DGLJob updates this process saw (only the operator writes a job
//!   after it is created).
//!
//! Every process started here (kwok, the operators) is stopped by pid at the
//! end, and the cluster is stopped unless --keep-cluster.

mod identity;
mod peer;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};
use dgl_api::names::{
    launcher_name, CONFIG_RUN, LABEL_JOB_NAME, LABEL_MANAGED_BY, LABEL_REPLICA_TYPE, MANAGED_BY,
};
use dgl_api::DGLJob;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use localkube::{ClusterConfig, LocalCluster};
use serde_json::json;

use crate::test::{repo_root, run_cmd};

const CLUSTER: &str = "bench";
const STAGES: &str = include_str!("bench/kwok-stages.yaml");
/// Fake nodes carry this annotation; kwok manages only them.
const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// ServiceAccount (and FlowSchema suffix) our operator runs as.
const OUR_ACCOUNT: &str = "dgl-operator";
const PEER_ACCOUNT: &str = "mpi-operator";
/// The bench plays the launcher's watcher-loop: once a DGLJob's ConfigMap
/// launches its run, it sets this annotation on the launcher pod, and only
/// then does kwok's `dgl-launcher-complete` Stage "train" it.
const LAUNCHED_ANNOTATION: &str = "bench.dgloperator.io/launched";

#[derive(clap::Args)]
#[command(
    long_about = "Benchmarks on a local control plane with kwok fake nodes.\n\n\
    `scale` creates N DGLJobs of W workers and measures how fast the operator creates \
    their pods and finishes them, its CPU and memory, and the API requests it makes; \
    with `--peer mpi-operator` it then runs N MPIJobs of W workers through Kubeflow's \
    mpi-operator (built from the Go module proxy, cached) on the same cluster and \
    measures the same. \
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
    /// N jobs x W workers; prints markdown table rows (and details).
    Scale(ScaleArgs),
    /// dglrun's native partition pipeline vs dgl.distributed.partition_graph
    /// on the same R-MAT graph: wall time, peak memory, edge cut, balance.
    Partition(crate::bench_partition::PartitionArgs),
    /// GraphSAGE on two local workers (network namespaces, real DGL) with
    /// graph.dgl and with GraphBolt partitions of the same graph: bytes
    /// shipped per worker, seconds per epoch. Needs root.
    Graphbolt(crate::bench_graphbolt::GraphboltArgs),
    /// The example job on the real node: apply → first training step, the
    /// operator's share and the environment's, for each
    /// workerCreationPolicy (workers after the partitioner, or with it).
    /// Needs root, like `e2e`.
    Latency(crate::bench_latency::LatencyArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
enum Mode {
    /// Partitioner and workers at once (kwok makes them Ready), then the launcher.
    DglApi,
    /// Workers at once, then the launcher.
    Skip,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
enum PeerOperator {
    /// Kubeflow's mpi-operator (MPIJob v2beta1), see `bench/peer.rs`.
    MpiOperator,
}

#[derive(clap::Args, Clone)]
struct ScaleArgs {
    /// Number of jobs per phase (0: only measure the idle operator).
    #[arg(long, default_value_t = 100)]
    jobs: usize,
    /// Workers per job.
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// spec.partitionMode of the DGLJobs; several (comma-separated) run one
    /// phase each, in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "dgl-api")]
    mode: Vec<Mode>,
    /// Also run the peer operator with as many jobs of as many workers,
    /// after ours, with the same client QPS, burst and worker threads.
    #[arg(long, value_enum)]
    peer: Option<PeerOperator>,
    /// The peer's controller-queue limits, one phase each (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "default,lifted"
    )]
    peer_queue: Vec<peer::QueueLimit>,
    /// Run only the peer's phases (not ours).
    #[arg(long, requires = "peer")]
    peer_only: bool,
    /// Extra argument for the peer (repeatable), e.g. --peer-arg=-v=2
    #[arg(long = "peer-arg", allow_hyphen_values = true)]
    peer_args: Vec<String>,
    /// The operator binary (e.g. one built from an earlier commit, to compare).
    /// Default: the workspace's release build ($CARGO_TARGET_DIR or
    /// target/), built first.
    #[arg(long, alias = "operator-bin")]
    operator: Option<PathBuf>,
    /// Extra argument for `dgl-operator run` (repeatable), e.g.
    /// --operator-arg=--kube-api-qps=100 (the peer gets the same
    /// --kube-api-qps, --kube-api-burst and --concurrency as --threadiness)
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
    /// Give up on a phase after this many seconds from its first job's creation.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Seconds the started operator runs with no job before idle RSS is read.
    #[arg(long, default_value_t = 10)]
    idle_seconds: u64,
    /// Seconds after the cleanup before the final RSS, CPU and the
    /// operator's request count are read.
    #[arg(long, default_value_t = 10)]
    settle_seconds: u64,
    /// Job creations in flight at once.
    #[arg(long, default_value_t = 32)]
    create_parallelism: usize,
    /// A label for the table rows (e.g. "before", "after").
    #[arg(long, default_value = "")]
    label: String,
    /// Keep the "bench" cluster running afterwards (it is restarted with an
    /// empty etcd at the start of every run anyway).
    #[arg(long)]
    keep_cluster: bool,
    /// Append the figures of each phase as one JSON line to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One phase of a run: which operator, on which jobs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Subject {
    Ours(Mode),
    Mpi(peer::QueueLimit),
}

impl Subject {
    fn all(args: &ScaleArgs) -> Vec<Subject> {
        let mut out = Vec::new();
        if !args.peer_only {
            out.extend(args.mode.iter().map(|m| Subject::Ours(*m)));
        }
        if args.peer == Some(PeerOperator::MpiOperator) {
            out.extend(args.peer_queue.iter().map(|q| Subject::Mpi(*q)));
        }
        out
    }

    fn namespace(self) -> String {
        match self {
            Subject::Ours(Mode::DglApi) => "bench-dgl-api".into(),
            Subject::Ours(Mode::Skip) => "bench-skip".into(),
            Subject::Mpi(q) => format!("bench-mpi-{}", q.name()),
        }
    }

    fn describe(self) -> String {
        match self {
            Subject::Ours(Mode::DglApi) => "dgl-operator, DGLJob DGL-API".into(),
            Subject::Ours(Mode::Skip) => "dgl-operator, DGLJob Skip".into(),
            Subject::Mpi(q) => format!(
                "mpi-operator {}, MPIJob, queue limit {}",
                peer::version(),
                q.name()
            ),
        }
    }

    fn pods_per_job(self, workers: u32) -> u32 {
        match self {
            Subject::Ours(Mode::DglApi) => workers + 2,
            Subject::Ours(Mode::Skip) | Subject::Mpi(_) => workers + 1,
        }
    }

    fn account(self) -> &'static str {
        match self {
            Subject::Ours(_) => OUR_ACCOUNT,
            Subject::Mpi(_) => PEER_ACCOUNT,
        }
    }

    fn resource(self) -> ApiResource {
        match self {
            Subject::Ours(_) => ApiResource::erase::<DGLJob>(&()),
            Subject::Mpi(_) => peer::resource(),
        }
    }

    /// Label selector of the jobs' pods, and their job-name and role labels.
    fn pod_labels(self) -> (String, &'static str, &'static str) {
        match self {
            Subject::Ours(_) => (
                format!("{LABEL_MANAGED_BY}={MANAGED_BY}"),
                LABEL_JOB_NAME,
                LABEL_REPLICA_TYPE,
            ),
            Subject::Mpi(_) => (peer::POD_SELECTOR.into(), peer::JOB_LABEL, peer::ROLE_LABEL),
        }
    }

    /// Succeeded (true), Failed (false) or still running (None), from a
    /// job's status.
    fn finished(self, status: &serde_json::Value) -> Option<bool> {
        match self {
            Subject::Ours(_) => match status.get("phase").and_then(|p| p.as_str()) {
                Some("Succeeded") => Some(true),
                Some("Failed") => Some(false),
                _ => None,
            },
            Subject::Mpi(_) => peer::finished(status),
        }
    }

    fn job_object(self, name: &str, ns: &str, workers: u32) -> serde_json::Value {
        match self {
            Subject::Ours(mode) => job_object(name, ns, workers, mode),
            Subject::Mpi(_) => peer::job_object(name, ns, workers),
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    match args.cmd {
        Cmd::Scale(a) => scale(a),
        Cmd::Partition(a) => crate::bench_partition::run(a),
        Cmd::Graphbolt(a) => crate::bench_graphbolt::run(a),
        Cmd::Latency(a) => crate::bench_latency::run(a),
    }
}

/// The binaries a run needs: ours, and the peer's with its CRD.
struct Bins {
    operator: PathBuf,
    peer: Option<(PathBuf, PathBuf)>,
}

fn binaries(args: &ScaleArgs) -> Result<Bins> {
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
    let peer = match args.peer {
        Some(PeerOperator::MpiOperator) => {
            peer::check_health_port()?;
            Some(peer::ensure()?)
        }
        None => None,
    };
    Ok(Bins { operator, peer })
}

fn scale(args: ScaleArgs) -> Result<()> {
    if Subject::all(&args).is_empty() {
        bail!("nothing to run: --peer-only without --peer-queue");
    }
    let bins = binaries(&args)?;
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
    let mut reports = Vec::new();
    let result = rt.block_on(scale_async(
        &args,
        &bins,
        &cluster,
        &mut procs,
        &mut reports,
    ));
    procs.stop_all();
    if !args.keep_cluster {
        eprintln!("==> stopping cluster {CLUSTER:?}");
        if let Err(e) = rt.block_on(cluster.down(false)) {
            eprintln!("warning: stopping cluster {CLUSTER:?}: {e}");
        }
    }
    print_reports(&args, &reports)?;
    result
}

fn print_reports(args: &ScaleArgs, reports: &[Report]) -> Result<()> {
    if reports.iter().any(|r| r.own.is_some()) {
        println!("{}", Report::header());
        for r in reports.iter().filter(|r| r.own.is_some()) {
            println!("{}", r.row());
        }
        println!();
    }
    if !reports.is_empty() {
        println!("{}", Report::compare_header());
        for r in reports {
            println!("{}", r.compare_row());
        }
        println!();
    }
    for r in reports {
        println!("{}", r.details());
    }
    if let Some(path) = &args.json {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        for r in reports {
            writeln!(f, "{}", serde_json::to_string(&r.json())?)?;
        }
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

    /// Stops the child with this pid (an operator between phases).
    fn stop(&mut self, pid: u32) {
        if let Some(i) = self.0.iter().position(|(_, c)| c.id() == pid) {
            let (name, child) = self.0.remove(i);
            stop_child(name, child);
        }
    }

    fn stop_all(&mut self) {
        for (name, child) in self.0.drain(..).rev() {
            stop_child(name, child);
        }
    }
}

fn stop_child(name: &str, mut child: Child) {
    let pid = child.id() as i32;
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
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
    pods: HashMap<String, PodSeen>,
    jobs: HashMap<String, JobSeen>,
    pod_events: u64,
}

struct PodSeen {
    job: String,
    /// The role label's value (launcher, worker, partitioner).
    role: String,
    seen: Instant,
    /// First seen Ready with an IP.
    ready: Option<Instant>,
    /// Phase Succeeded or Failed (kept by cleanPodPolicy Running).
    terminal: bool,
    deleted: Option<Instant>,
}

#[derive(Default, Clone)]
struct JobSeen {
    created: Option<Instant>,
    pods: u32,
    all_pods: Option<Instant>,
    succeeded: Option<Instant>,
    failed: bool,
    /// Ours: its ConfigMap seen launching the run (the launcher may train).
    launched: Option<Instant>,
    /// Watch events of the job after its creation (status updates: only the
    /// operator writes a job once it exists).
    updates: u64,
    last_rv: Option<String>,
}

impl Seen {
    fn note_pod(&mut self, p: &Pod, job_label: &str, role_label: &str, pods_per_job: u32) {
        let now = Instant::now();
        self.pod_events += 1;
        let st = p.status.as_ref();
        let ready = st.is_some_and(|st| {
            st.pod_ip.is_some()
                && st
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        });
        let terminal = st
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
        let labels = p.labels();
        let job = labels.get(job_label).cloned().unwrap_or_default();
        let entry = self.pods.entry(p.name_any());
        let new = matches!(entry, std::collections::hash_map::Entry::Vacant(_));
        let ps = entry.or_insert_with(|| PodSeen {
            job: job.clone(),
            role: labels.get(role_label).cloned().unwrap_or_default(),
            seen: now,
            ready: None,
            terminal: false,
            deleted: None,
        });
        if ready && ps.ready.is_none() {
            ps.ready = Some(now);
        }
        ps.terminal |= terminal;
        if new && !job.is_empty() {
            let j = self.jobs.entry(job).or_default();
            j.pods += 1;
            if j.pods == pods_per_job {
                j.all_pods = Some(now);
            }
        }
    }

    /// A ConfigMap seen: true the first time it launches its job's run.
    fn note_config_map(&mut self, cm: &ConfigMap) -> bool {
        let launches = cm.data.as_ref().is_some_and(|d| d.contains_key(CONFIG_RUN));
        let Some(job) = cm.labels().get(LABEL_JOB_NAME) else {
            return false;
        };
        let js = self.jobs.entry(job.clone()).or_default();
        if !launches || js.launched.is_some() {
            return false;
        }
        js.launched = Some(Instant::now());
        true
    }

    fn note_job(&mut self, subject: Subject, j: &DynamicObject) {
        let now = Instant::now();
        let js = self.jobs.entry(j.name_any()).or_default();
        let rv = j.resource_version();
        if js.last_rv.is_some() && js.last_rv != rv {
            js.updates += 1;
        }
        js.last_rv = rv;
        match j.data.get("status").and_then(|s| subject.finished(s)) {
            Some(true) if js.succeeded.is_none() => js.succeeded = Some(now),
            Some(false) => js.failed = true,
            _ => {}
        }
    }

    /// When cleanPodPolicy's deletions were done: every pod is gone or
    /// finished (the launchers stay). None while a pod remains to delete.
    fn cleanup_done(&self) -> Option<Option<Instant>> {
        if self
            .pods
            .values()
            .any(|p| p.deleted.is_none() && !p.terminal)
        {
            return None;
        }
        Some(self.pods.values().filter_map(|p| p.deleted).max())
    }
}

/// Watches the phase's pods and jobs into `seen`; resolves once both
/// initial lists are done.
async fn start_watches(
    client: &Client,
    seen: Arc<Mutex<Seen>>,
    subject: Subject,
    ns: &str,
    pods_per_job: u32,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let (pods_ready_tx, pods_ready) = tokio::sync::oneshot::channel::<()>();
    let (jobs_ready_tx, jobs_ready) = tokio::sync::oneshot::channel::<()>();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let jobs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &subject.resource());
    let (selector, job_label, role_label) = subject.pod_labels();

    let s = seen.clone();
    let pod_task = tokio::spawn(async move {
        let mut ready = Some(pods_ready_tx);
        let wc = watcher::Config::default().labels(&selector);
        let mut stream = watcher(pods, wc).boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => {
                    s.lock()
                        .unwrap()
                        .note_pod(&p, job_label, role_label, pods_per_job);
                }
                Ok(watcher::Event::Delete(p)) => {
                    let mut s = s.lock().unwrap();
                    if let Some(ps) = s.pods.get_mut(&p.name_any()) {
                        ps.deleted.get_or_insert(Instant::now());
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
            match ev {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(watcher::Event::Apply(j)) | Ok(watcher::Event::InitApply(j)) => {
                    s.lock().unwrap().note_job(subject, &j);
                }
                Ok(_) => {}
                Err(e) => eprintln!("    job watch: {e}"),
            }
        }
    });
    pods_ready.await.context("pod watch ended")?;
    jobs_ready.await.context("job watch ended")?;
    let mut tasks = vec![pod_task, job_task];
    if let Subject::Ours(_) = subject {
        tasks.push(play_watcher_loop(client, seen, ns));
    }
    Ok(tasks)
}

/// What each DGLJob launcher's watcher-loop does on a real node, for kwok:
/// once the job's ConfigMap launches its run, the launcher may train. Here
/// that is an annotation on the launcher pod (one PATCH per job, counted
/// among all clients' requests), which kwok's `dgl-launcher-complete`
/// Stage waits for.
fn play_watcher_loop(
    client: &Client,
    seen: Arc<Mutex<Seen>>,
    ns: &str,
) -> tokio::task::JoinHandle<()> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    tokio::spawn(async move {
        let wc = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
        let mut stream = watcher(cms, wc).boxed();
        while let Some(ev) = stream.next().await {
            let cm = match ev {
                Ok(watcher::Event::Apply(cm)) | Ok(watcher::Event::InitApply(cm)) => cm,
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("    ConfigMap watch: {e}");
                    continue;
                }
            };
            if !seen.lock().unwrap().note_config_map(&cm) {
                continue;
            }
            let job = cm.labels()[LABEL_JOB_NAME].clone();
            let patch = json!({"metadata": {"annotations": {LAUNCHED_ANNOTATION: "true"}}});
            let pods = pods.clone();
            tokio::spawn(async move {
                let name = launcher_name(&job);
                if let Err(e) = pods
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    eprintln!("    marking {name} launched: {e}");
                }
            });
        }
    })
}

fn job_object(name: &str, ns: &str, workers: u32, mode: Mode) -> serde_json::Value {
    let container = |extra: serde_json::Value| {
        let mut c = json!({"name": "main", "image": "registry.invalid/dgl-bench:none"});
        if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        c
    };
    json!({
        "apiVersion": DGLJob::api_version(&()),
        "kind": DGLJob::kind(&()),
        "metadata": {"name": name, "namespace": ns},
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
    })
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

/// Step 1: a fresh bench cluster with the CRDs (ours; the peer's with
/// --peer).
async fn start_cluster(
    cluster: &LocalCluster,
    load: &str,
    peer_crd: Option<&Path>,
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
    if let Some(crd) = peer_crd {
        localkube::apply_crds(&client, &peer::crd_yaml(crd)?).await?;
    }
    Ok((info, client, work))
}

async fn create_namespace(client: &Client, ns: &str) -> Result<()> {
    let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    Api::<Namespace>::all(client.clone())
        .patch(ns, &PatchParams::apply("xtask-bench"), &Patch::Apply(&obj))
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    Ok(())
}

/// Deletes a phase's namespace and waits (up to 5 min) until it is gone, so
/// that the next phase starts on an empty cluster; not measured.
async fn delete_namespace(client: &Client, ns: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let started = Instant::now();
    api.delete(ns, &DeleteParams::background()).await?;
    while api.get_opt(ns).await?.is_some() {
        if started.elapsed() > Duration::from_secs(300) {
            eprintln!("    warning: namespace {ns} still exists after 300 s; going on");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "    namespace {ns} deleted in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
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

/// An operator under test, started and ready.
struct Operator {
    pid: u32,
    log: PathBuf,
    /// Our operator's metrics port (its request counters, reconciles).
    metrics_port: Option<u16>,
    /// The arguments it was started with (for the report).
    args: Vec<String>,
}

/// Step 4: the operator under test for this phase, ready.
async fn start_operator(
    args: &Args2<'_>,
    subject: Subject,
    ns: &str,
    kubeconfig: &Path,
    procs: &mut Procs,
) -> Result<Operator> {
    match subject {
        Subject::Ours(_) => start_ours(args, ns, kubeconfig, procs).await,
        Subject::Mpi(q) => start_peer(args, q, ns, kubeconfig, procs).await,
    }
}

/// What a phase needs besides its subject: the arguments, the binaries,
/// the work directory.
struct Args2<'a> {
    scale: &'a ScaleArgs,
    bins: &'a Bins,
    work: &'a Path,
}

async fn start_ours(
    a: &Args2<'_>,
    ns: &str,
    kubeconfig: &Path,
    procs: &mut Procs,
) -> Result<Operator> {
    let operator = &a.bins.operator;
    eprintln!("==> operator {}", operator.display());
    let metrics_port = free_port()?;
    let mut op_args: Vec<String> = vec![
        "run".into(),
        "--leader-elect=false".into(),
        "--metrics-auth=none".into(),
        format!("--metrics-addr=127.0.0.1:{metrics_port}"),
        "--gang-scheduler=none".into(),
        format!("--namespace={ns}"),
    ];
    op_args.extend(a.scale.operator_args.iter().cloned());
    let log = a.work.join(format!("operator-{ns}.log"));
    let mut cmd = Command::new(operator);
    cmd.args(&op_args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1");
    // Its flags' environment variables would change the limits the peer is
    // given (read from --operator-arg).
    for v in [
        "WATCH_NAMESPACE",
        "DGL_OPERATOR_CONCURRENCY",
        "DGL_OPERATOR_KUBE_API_QPS",
        "DGL_OPERATOR_KUBE_API_BURST",
    ] {
        cmd.env_remove(v);
    }
    let pid = procs.spawn("dgl-operator", &mut cmd, &log)?;
    wait_ready(procs, &log, || async move {
        matches!(http_get(metrics_port, "/readyz").await, Ok((200, _)))
    })
    .await?;
    Ok(Operator {
        pid,
        log,
        metrics_port: Some(metrics_port),
        args: op_args,
    })
}

async fn start_peer(
    a: &Args2<'_>,
    queue: peer::QueueLimit,
    ns: &str,
    kubeconfig: &Path,
    procs: &mut Procs,
) -> Result<Operator> {
    let Some((bin, _)) = &a.bins.peer else {
        bail!("the peer's binary was not built");
    };
    eprintln!(
        "==> mpi-operator {} (queue limit {})",
        bin.display(),
        queue.name()
    );
    peer::check_health_port()?;
    let metrics_port = free_port()?;
    let limits = peer::ClientLimits::from_operator_args(&a.scale.operator_args)?;
    let mut op_args = peer::args(ns, identity::SYSTEM_NAMESPACE, metrics_port, limits, queue)?;
    op_args.extend(a.scale.peer_args.iter().cloned());
    let log = a.work.join(format!("mpi-operator-{ns}.log"));
    let pid = procs.spawn(
        "mpi-operator",
        Command::new(bin)
            .args(&op_args)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBEFLOW_NAMESPACE"),
        &log,
    )?;
    // Ready once it leads (it starts its informers then).
    wait_ready(procs, &log, || async move {
        match http_get(metrics_port, "/metrics").await {
            Ok((200, body)) => Metrics::parse(&body).get("mpi_operator_is_leader") >= 1.0,
            _ => false,
        }
    })
    .await?;
    Ok(Operator {
        pid,
        log,
        metrics_port: None,
        args: op_args,
    })
}

async fn wait_ready<F, Fut>(procs: &mut Procs, log: &Path, ready: F) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        procs.check_running()?;
        if ready().await {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("operator not ready in 60 s; see {}", log.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Step 5: creates the jobs, `--create-parallelism` at a time, noting when
/// each was created.
fn spawn_creator(
    jobs_api: Api<DynamicObject>,
    seen: Arc<Mutex<Seen>>,
    names: Vec<String>,
    args: &ScaleArgs,
    subject: Subject,
    ns: &str,
) -> tokio::task::JoinHandle<Result<Vec<()>>> {
    let workers = args.workers;
    let par = args.create_parallelism.max(1);
    let ns = ns.to_string();
    tokio::spawn(async move {
        futures::stream::iter(names)
            .map(|name| {
                let api = jobs_api.clone();
                let seen = seen.clone();
                let obj = subject.job_object(&name, &ns, workers);
                async move {
                    let job: DynamicObject = serde_json::from_value(obj)?;
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
    /// When every job had finished, and the operator's CPU seconds then.
    finished: Option<(Duration, f64)>,
    /// When cleanPodPolicy's deletions were done (from the watch).
    cleanup_done: Option<Duration>,
}

/// Step 6: waits until every job has finished and its pods are cleaned up
/// (or `--timeout`), sampling the operator's memory and the nodes, with a
/// line every 10 s.
async fn wait_for_jobs(
    args: &ScaleArgs,
    client: &Client,
    seen: &Mutex<Seen>,
    creator: &tokio::task::JoinHandle<Result<Vec<()>>>,
    procs: &mut Procs,
    op_pid: u32,
    t0: Instant,
) -> Result<Progress> {
    let mut p = Progress {
        peak_rss: 0,
        timed_out: false,
        created_all_at: None,
        min_nodes_ready: args.nodes as usize,
        finished: None,
        cleanup_done: None,
    };
    let mut last_print = Instant::now();
    let timeout = Duration::from_secs(args.timeout);
    let mut nodes_checked = Instant::now();
    loop {
        procs.check_running()?;
        if nodes_checked.elapsed() > Duration::from_secs(5) {
            nodes_checked = Instant::now();
            if let Ok(r) = nodes_ready(client).await {
                if r < p.min_nodes_ready {
                    eprintln!(
                        "    warning: only {r} of {} nodes Ready (kwok heartbeats late?)",
                        args.nodes
                    );
                }
                p.min_nodes_ready = p.min_nodes_ready.min(r);
            }
        }
        let sample = proc_sample(op_pid).ok();
        if let Some(s) = sample {
            p.peak_rss = p.peak_rss.max(s.rss_kib);
        }
        if p.created_all_at.is_none() && creator.is_finished() {
            p.created_all_at = Some(t0.elapsed());
        }
        let (pods, done, failed, cleanup) = {
            let s = seen.lock().unwrap();
            let done = s.jobs.values().filter(|j| j.succeeded.is_some()).count();
            let failed = s.jobs.values().filter(|j| j.failed).count();
            (s.pods.len(), done, failed, s.cleanup_done())
        };
        if done + failed >= args.jobs && p.created_all_at.is_some() {
            if p.finished.is_none() {
                p.finished = Some((t0.elapsed(), sample.map(|s| s.cpu_seconds).unwrap_or(0.0)));
            }
            if let Some(at) = cleanup {
                p.cleanup_done = Some(
                    at.map(|at| at.saturating_duration_since(t0))
                        .unwrap_or_default(),
                );
                break;
            }
        }
        if t0.elapsed() > timeout {
            p.timed_out = true;
            eprintln!("    timed out after {} s", args.timeout);
            break;
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            last_print = Instant::now();
            eprintln!(
                "    {:>5.0} s: {pods} pods, {done} of {} jobs Succeeded, {failed} Failed; operator RSS {:.1} MiB; load {}",
                t0.elapsed().as_secs_f64(),
                args.jobs,
                p.peak_rss as f64 / 1024.0,
                loadavg()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(p)
}

/// How many warning/error lines the operator logged, and the first three
/// (ours: tracing's " WARN "/" ERROR "; mpi-operator: klog's W/E prefixes).
fn log_warnings(op_log: &Path) -> (usize, Vec<String>) {
    let log = std::fs::read_to_string(op_log).unwrap_or_default();
    let is_warning = |l: &&str| {
        l.contains(" WARN ")
            || l.contains(" ERROR ")
            || ((l.starts_with('W') || l.starts_with('E'))
                && l.as_bytes().get(1).is_some_and(u8::is_ascii_digit))
    };
    let first_warnings: Vec<String> = log
        .lines()
        .filter(is_warning)
        .take(3)
        .map(|l| l.chars().take(300).collect())
        .collect();
    (log.lines().filter(is_warning).count(), first_warnings)
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
    /// The last job launched (see `split_job`).
    last_launch: Option<Duration>,
    succeeded: usize,
    failed: usize,
    pods_seen: usize,
}

/// One job's pods as the watches saw them: the last of a role seen / Ready.
struct RoleTimes {
    seen: Option<Instant>,
    ready: Option<Instant>,
    count: usize,
}

fn role_times(s: &Seen, job: &str, role: &str) -> RoleTimes {
    let pods: Vec<&PodSeen> = s
        .pods
        .values()
        .filter(|p| p.job == job && p.role == role)
        .collect();
    let all = |f: &dyn Fn(&PodSeen) -> Option<Instant>| {
        pods.iter()
            .map(|p| f(p))
            .collect::<Option<Vec<_>>>()
            .and_then(|v| v.into_iter().max())
    };
    RoleTimes {
        seen: all(&|p| Some(p.seen)),
        ready: all(&|p| p.ready),
        count: pods.len(),
    }
}

/// One job's time split into the operator reacting (an event seen here →
/// the next pods seen here) and the environment (pods seen → seen Ready
/// with an IP: scheduler + kwok). For an MPIJob "reacting" to Ready workers
/// includes the Job controller creating the launcher pod.
fn split_job(
    s: &Seen,
    name: &str,
    created: Instant,
    subject: Subject,
    workers: u32,
) -> Option<(f64, f64)> {
    let d = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
    let w = role_times(s, name, "worker");
    if w.count != workers as usize {
        return None;
    }
    let (w_seen, w_ready) = (w.seen?, w.ready?);
    // When the launcher may train: our ConfigMap launching the run (the
    // launcher pod exists from the start), an MPIJob's launcher pod seen.
    let launch = match subject {
        Subject::Ours(_) => s.jobs.get(name)?.launched?,
        Subject::Mpi(_) => role_times(s, name, "launcher").seen?,
    };
    Some(match subject {
        Subject::Ours(Mode::DglApi) => {
            let p = role_times(s, name, "partitioner");
            let (p_seen, p_ready) = (p.seen?, p.ready?);
            (
                d(created, p_seen) + d(p_ready.max(w_ready), launch),
                d(p_seen, p_ready).max(d(w_seen, w_ready)),
            )
        }
        Subject::Ours(Mode::Skip) | Subject::Mpi(_) => {
            (d(created, w_seen) + d(w_ready, launch), d(w_seen, w_ready))
        }
    })
}

/// Step 8: per-job timings, split into the operator's share and the rest.
fn job_times(s: &Seen, names: &[String], subject: Subject, workers: u32, t0: Instant) -> JobTimes {
    let mut per_job: Vec<f64> = Vec::new();
    let mut incomplete = 0;
    let mut updates = 0u64;
    let mut reaction: Vec<f64> = Vec::new();
    let mut environment: Vec<f64> = Vec::new();
    for name in names {
        let j = s.jobs.get(name).cloned().unwrap_or_default();
        updates += j.updates;
        match (j.created, j.all_pods) {
            (Some(c), Some(a)) => per_job.push(a.saturating_duration_since(c).as_secs_f64()),
            _ => incomplete += 1,
        }
        if let Some((r, e)) = j
            .created
            .and_then(|c| split_job(s, name, c, subject, workers))
        {
            reaction.push(r);
            environment.push(e);
        }
    }
    for v in [&mut per_job, &mut reaction, &mut environment] {
        v.sort_by(|a, b| a.total_cmp(b));
    }
    let last_pod = s
        .pods
        .values()
        .map(|p| p.seen)
        .max()
        .map(|t| t.saturating_duration_since(t0));
    let launches: Vec<Instant> = match subject {
        Subject::Ours(_) => names
            .iter()
            .filter_map(|n| s.jobs.get(n).and_then(|j| j.launched))
            .collect(),
        Subject::Mpi(_) => s
            .pods
            .values()
            .filter(|p| p.role == "launcher")
            .map(|p| p.seen)
            .collect(),
    };
    let last_launch = (launches.len() == names.len())
        .then(|| launches.into_iter().max())
        .flatten()
        .map(|t| t.saturating_duration_since(t0));
    let count = |f: &dyn Fn(&JobSeen) -> bool| {
        names
            .iter()
            .filter(|n| s.jobs.get(*n).is_some_and(f))
            .count()
    };
    JobTimes {
        per_job,
        incomplete,
        updates,
        reaction,
        environment,
        last_pod,
        last_launch,
        succeeded: count(&|j| j.succeeded.is_some()),
        failed: count(&|j| j.failed),
        pods_seen: s.pods.len(),
    }
}

async fn scale_async(
    args: &ScaleArgs,
    bins: &Bins,
    cluster: &LocalCluster,
    procs: &mut Procs,
    reports: &mut Vec<Report>,
) -> Result<()> {
    let load_start = loadavg();
    let peer_crd = bins.peer.as_ref().map(|(_, crd)| crd.as_path());
    let (info, client, work) = start_cluster(cluster, &load_start, peer_crd).await?;
    let kbins = localkube::installed_binaries(&localkube::cache_dir()?)?;
    let scheduler_pid = start_scheduler(args, &info, &work, &kbins, procs)?;
    let kwok_pid = start_kwok(args, &client, &info, &work, &kbins, procs).await?;
    let env = Env {
        args: Args2 {
            scale: args,
            bins,
            work: &work,
        },
        client: &client,
        cluster,
        scheduler_pid,
        kwok_pid,
    };
    let mut kubeconfigs: HashMap<&str, PathBuf> = HashMap::new();
    for subject in Subject::all(args) {
        let account = subject.account();
        if !kubeconfigs.contains_key(account) {
            let kc = identity::identity(&client, &info.kubeconfig, &work, account).await?;
            kubeconfigs.insert(account, kc);
        }
        reports.push(run_phase(&env, subject, &kubeconfigs[account], procs).await?);
    }
    Ok(())
}

/// The cluster side every phase shares.
struct Env<'a> {
    args: Args2<'a>,
    client: &'a Client,
    cluster: &'a LocalCluster,
    scheduler_pid: Option<u32>,
    kwok_pid: u32,
}

/// One phase: its namespace, its operator, its jobs; afterwards the
/// operator is stopped and the namespace deleted.
async fn run_phase(
    env: &Env<'_>,
    subject: Subject,
    kubeconfig: &Path,
    procs: &mut Procs,
) -> Result<Report> {
    let ns = subject.namespace();
    eprintln!(
        "==> phase: {} in namespace {ns}; load average {}",
        subject.describe(),
        loadavg()
    );
    create_namespace(env.client, &ns).await?;
    let op = start_operator(&env.args, subject, &ns, kubeconfig, procs).await?;
    let result = measure_phase(env, subject, &ns, &op, procs).await;
    procs.stop(op.pid);
    if let Err(e) = delete_namespace(env.client, &ns).await {
        eprintln!("    warning: deleting namespace {ns}: {e:#}");
    }
    // The garbage collector and the endpoints controllers finish behind
    // the namespace; their requests belong to no phase.
    tokio::time::sleep(Duration::from_secs(15)).await;
    result
}

async fn scrape_opt(port: Option<u16>) -> Result<Option<Metrics>> {
    Ok(match port {
        Some(p) => Some(scrape(p).await?),
        None => None,
    })
}

async fn measure_phase(
    env: &Env<'_>,
    subject: Subject,
    ns: &str,
    op: &Operator,
    procs: &mut Procs,
) -> Result<Report> {
    let args = env.args.scale;
    let client = env.client;
    let flow = identity::flow_schema(subject.account());
    let idle0 = (Instant::now(), apiserver_scrape(client).await?);
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    procs.check_running()?;
    let idle = proc_sample(op.pid)?;
    let idle_requests_per_s = (identity::dispatched(&apiserver_scrape(client).await?, &flow)
        - identity::dispatched(&idle0.1, &flow))
        / idle0.0.elapsed().as_secs_f64();
    let m0 = scrape_opt(op.metrics_port).await?;
    eprintln!(
        "    idle: RSS {:.1} MiB, CPU {:.2} s",
        idle.rss_kib as f64 / 1024.0,
        idle.cpu_seconds
    );
    let pods_per_job = subject.pods_per_job(args.workers);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watches = start_watches(client, seen.clone(), subject, ns, pods_per_job).await?;
    let base = baseline(env.cluster, client, env.scheduler_pid, env.kwok_pid).await?;
    let load_start = loadavg();

    eprintln!(
        "==> creating {} jobs x {} workers ({}, {pods_per_job} pods each)",
        args.jobs,
        args.workers,
        subject.describe(),
    );
    let t0 = Instant::now();
    let jobs_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &subject.resource());
    let names: Vec<String> = (0..args.jobs).map(|i| format!("bench-{i:05}")).collect();
    let creator = spawn_creator(jobs_api, seen.clone(), names.clone(), args, subject, ns);
    let progress = wait_for_jobs(args, client, &seen, &creator, procs, op.pid, t0).await?;
    creator.await.context("job creation task")??;
    let load_end = loadavg();
    let after = proc_sample(op.pid)?;
    let m1 = scrape_opt(op.metrics_port).await?;
    let api1 = apiserver_scrape(client).await?;

    let peak_rss = settle(args, op.pid, progress.peak_rss.max(idle.rss_kib)).await;
    procs.check_running()?;
    let fin = proc_sample(op.pid)?;
    let m2 = scrape_opt(op.metrics_port).await?;
    let api2 = apiserver_scrape(client).await?;
    for w in watches {
        w.abort();
    }
    let since = |pid: u32, c0: f64| proc_sample(pid).map(|s| s.cpu_seconds - c0).unwrap_or(0.0);
    let components_cpu: Vec<(String, f64)> = base
        .components
        .iter()
        .zip(&base.comp_cpu0)
        .map(|((n, p), (_, c0))| (n.clone(), since(*p, *c0)))
        .chain([
            ("kwok".to_string(), since(env.kwok_pid, base.kwok_cpu0)),
            (
                "this bench (watches, creates)".to_string(),
                since(std::process::id(), base.bench_cpu0),
            ),
        ])
        .collect();
    let (log_warnings, first_warnings) = log_warnings(&op.log);
    let times = job_times(&seen.lock().unwrap(), &names, subject, args.workers, t0);

    let n = args.jobs.max(1) as f64;
    let api0 = &base.apiserver;
    let own = match (&m0, &m1, &m2) {
        (Some(m0), Some(m1), Some(m2)) => Some(own_metrics(m0, m1, m2, n, times.updates)),
        _ => None,
    };
    let write_latency = [0.5, 0.99].map(|q| {
        histogram_quantile(q, &write_buckets(api0), &write_buckets(&api1)).map(|s| s * 1000.0)
    });
    Ok(Report {
        label: args.label.clone(),
        subject,
        namespace: ns.to_string(),
        jobs: args.jobs,
        workers: args.workers,
        pods_per_job,
        operator_args: op.args.join(" "),
        scheduler: if args.scheduler_qps > 0.0 {
            format!("bench kube-scheduler, client QPS {}", args.scheduler_qps)
        } else {
            "localkube kube-scheduler, stock client QPS 50".into()
        },
        first_create_to_last_pod: times.last_pod.map(|d| d.as_secs_f64()),
        first_create_to_last_launch: times.last_launch.map(|d| d.as_secs_f64()),
        jobs_created_in: progress.created_all_at.map(|d| d.as_secs_f64()),
        per_job: [0.5, 0.95, 0.99].map(|q| percentile(&times.per_job, q)),
        per_job_max: times.per_job.last().copied().unwrap_or(f64::NAN),
        reaction: [0.5, 0.95, 0.99].map(|q| percentile(&times.reaction, q)),
        environment: [0.5, 0.95, 0.99].map(|q| percentile(&times.environment, q)),
        apiserver_requests: requests_total(&api1) - requests_total(api0),
        apiserver_detail: per_job_diff(&by_verb_resource(api0), &by_verb_resource(&api1), n),
        operator_requests: identity::dispatched(&api2, &flow) - identity::dispatched(api0, &flow),
        idle_requests_per_s,
        min_nodes_ready: progress.min_nodes_ready,
        nodes: args.nodes as usize,
        apiserver_write_ms: write_latency,
        jobs_without_all_pods: times.incomplete,
        all_succeeded: (!progress.timed_out && times.succeeded == args.jobs)
            .then_some(progress.finished.map(|f| f.0.as_secs_f64()))
            .flatten(),
        cleanup_done: progress.cleanup_done.map(|d| d.as_secs_f64()),
        succeeded: times.succeeded,
        failed: times.failed,
        pods_seen: times.pods_seen,
        cpu_seconds: progress
            .finished
            .map(|f| f.1 - idle.cpu_seconds)
            .unwrap_or(f64::NAN),
        cpu_seconds_cleanup: after.cpu_seconds - idle.cpu_seconds,
        cpu_seconds_settled: fin.cpu_seconds - idle.cpu_seconds,
        idle_rss_mib: idle.rss_kib as f64 / 1024.0,
        peak_rss_mib: peak_rss.max(fin.hwm_kib) as f64 / 1024.0,
        final_rss_mib: fin.rss_kib as f64 / 1024.0,
        own,
        log_warnings,
        first_warnings,
        components_cpu,
        load_start,
        load_end,
    })
}

/// Our operator's own counters between the scrapes before the jobs (m0),
/// after the cleanup (m1) and after settling (m2).
fn own_metrics(m0: &Metrics, m1: &Metrics, m2: &Metrics, n: f64, updates: u64) -> OwnMetrics {
    let (requests_per_job, requests_detail) = requests_per_job(m0, m1, n);
    let hist = "dgl_operator_reconcile_duration_seconds";
    let status_writes =
        m1.get("dgl_operator_status_writes_total") - m0.get("dgl_operator_status_writes_total");
    let reconciles = m1.get(&format!("{hist}_count")) - m0.get(&format!("{hist}_count"));
    OwnMetrics {
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
    }
}

/// CPU seconds and API server counters before the jobs are created.
struct Baseline {
    components: Vec<(String, u32)>,
    comp_cpu0: Vec<(String, f64)>,
    kwok_cpu0: f64,
    bench_cpu0: f64,
    apiserver: Metrics,
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
    Ok(Baseline {
        components,
        comp_cpu0,
        kwok_cpu0: proc_sample(kwok_pid)?.cpu_seconds,
        bench_cpu0: proc_sample(std::process::id())?.cpu_seconds,
        apiserver: apiserver_scrape(client).await?,
    })
}

/// Settle: the final memory after a quiet while; returns the peak RSS seen
/// so far.
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

/// (after - before) / n per key, keys that grew only.
fn per_job_diff(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    n: f64,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, c)| (k.clone(), (c - before.get(k).copied().unwrap_or(0.0)) / n))
        .filter(|(_, c)| *c > 0.0)
        .collect()
}

/// The operator's requests between two scrapes, per job: by verb, and by
/// verb and resource.
fn requests_per_job(
    m0: &Metrics,
    m1: &Metrics,
    n: f64,
) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let by_verb = per_job_diff(&m0.requests_by_verb(), &m1.requests_by_verb(), n);
    let flat = |m: &Metrics| {
        m.requests_by_verb_resource()
            .into_iter()
            .map(|((v, r), c)| (format!("{v} {r}"), c))
            .collect::<BTreeMap<_, _>>()
    };
    (by_verb, per_job_diff(&flat(m0), &flat(m1), n))
}

/// The API server's own metrics.
async fn apiserver_scrape(client: &Client) -> Result<Metrics> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    Ok(Metrics::parse(&client.request_text(req).await?))
}

/// Requests served, all clients, watches excluded.
fn requests_total(m: &Metrics) -> f64 {
    m.sum("apiserver_request_total", |l| {
        l.get("verb").is_none_or(|v| v != "WATCH")
    })
}

/// Requests served by verb and resource[/subresource], all clients,
/// watches excluded.
fn by_verb_resource(m: &Metrics) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (n, l, v) in &m.0 {
        let verb = l.get("verb").map(String::as_str).unwrap_or("");
        if n != "apiserver_request_total" || verb == "WATCH" {
            continue;
        }
        let res = l.get("resource").map(String::as_str).unwrap_or("");
        let key = match l.get("subresource").map(String::as_str) {
            Some(s) if !s.is_empty() => format!("{verb} {res}/{s}"),
            _ => format!("{verb} {res}"),
        };
        *out.entry(key).or_insert(0.0) += v;
    }
    out
}

/// The latency histogram of writes, all clients (buckets summed over
/// resources).
fn write_buckets(m: &Metrics) -> Vec<(f64, f64)> {
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
    b
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

/// Our operator's own counters (its /metrics), per phase.
struct OwnMetrics {
    requests_per_job: BTreeMap<String, f64>,
    requests_detail: BTreeMap<String, f64>,
    status_writes_per_job: f64,
    noop_status_writes: f64,
    reconciles_per_job: f64,
    reconcile_p50_ms: Option<f64>,
    reconcile_p99_ms: Option<f64>,
    reconcile_errors: f64,
    throttled_seconds: f64,
}

struct Report {
    label: String,
    subject: Subject,
    namespace: String,
    jobs: usize,
    workers: u32,
    pods_per_job: u32,
    operator_args: String,
    scheduler: String,
    first_create_to_last_pod: Option<f64>,
    /// First job's creation → the last job launched: its ConfigMap holding
    /// the run (ours), its launcher pod created (an MPIJob's, created once
    /// every worker is Ready).
    first_create_to_last_launch: Option<f64>,
    jobs_created_in: Option<f64>,
    /// Per job, creation → all pods seen: p50, p95, p99.
    per_job: [f64; 3],
    per_job_max: f64,
    /// p50/p95/p99 of the operator's share of a job's time to all pods.
    reaction: [f64; 3],
    /// p50/p95/p99 of the scheduler's and kwok's share (pod created → Ready).
    environment: [f64; 3],
    /// Requests the API server served from the first job's creation until
    /// the cleanup was done, from all clients (watches excluded).
    apiserver_requests: f64,
    /// The same by verb and resource, per job.
    apiserver_detail: BTreeMap<String, f64>,
    /// Requests of the operator until the settle period after the cleanup
    /// has passed (its FlowSchema's dispatched requests, watches included).
    operator_requests: f64,
    /// The operator's requests per second with no job (leader election,
    /// resyncs), over `--idle-seconds`.
    idle_requests_per_s: f64,
    /// Fewest fake nodes Ready at once during the run (all, unless kwok's
    /// heartbeats fell behind: then pods were marked NotReady too).
    min_nodes_ready: usize,
    nodes: usize,
    /// p50/p99 (ms) of the API server's latency for writes, all clients.
    apiserver_write_ms: [Option<f64>; 2],
    jobs_without_all_pods: usize,
    all_succeeded: Option<f64>,
    /// First job's creation → every pod that cleanPodPolicy deletes gone.
    cleanup_done: Option<f64>,
    succeeded: usize,
    failed: usize,
    pods_seen: usize,
    /// Operator CPU from the first job until all finished, until the
    /// cleanup was done, and after settling.
    cpu_seconds: f64,
    cpu_seconds_cleanup: f64,
    cpu_seconds_settled: f64,
    idle_rss_mib: f64,
    peak_rss_mib: f64,
    final_rss_mib: f64,
    own: Option<OwnMetrics>,
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

    /// The table of `--peer` runs: the same figures for every phase.
    fn compare_header() -> String {
        "| run | operator, jobs | jobs x workers (pods per job) | load avg at start | first job → last pod (s) | first job → last launch (s) | per job → all pods p50 / p95 / p99 (s) | all Succeeded (s) | cleanup done (s) | operator CPU until cleanup (s) | RSS idle / peak (MiB) | API requests per job: operator / all clients |\n\
         |---|---|---|---|---:|---:|---|---:|---:|---:|---|---|"
            .to_string()
    }

    fn succeeded_cell(&self) -> String {
        match self.all_succeeded {
            Some(s) => format!("{s:.1}"),
            None => format!(
                "— ({} of {} ok, {} failed)",
                self.succeeded, self.jobs, self.failed
            ),
        }
    }

    fn compare_row(&self) -> String {
        let n = self.jobs.max(1) as f64;
        format!(
            "| {} | {} | {} x {} ({}) | {} | {} | {} | {:.1} / {:.1} / {:.1} | {} | {} | {:.1} | {:.1} / {:.1} | {:.1} / {:.1} |",
            if self.label.is_empty() { "-" } else { &self.label },
            self.subject.describe(),
            self.jobs,
            self.workers,
            self.pods_per_job,
            self.load_start,
            secs(self.first_create_to_last_pod),
            secs(self.first_create_to_last_launch),
            self.per_job[0],
            self.per_job[1],
            self.per_job[2],
            self.succeeded_cell(),
            secs(self.cleanup_done),
            self.cpu_seconds_cleanup,
            self.idle_rss_mib,
            self.peak_rss_mib,
            self.operator_requests / n,
            self.apiserver_requests / n,
        )
    }

    fn mode(&self) -> &'static str {
        match self.subject {
            Subject::Ours(Mode::DglApi) => "DGL-API",
            Subject::Ours(Mode::Skip) => "Skip",
            Subject::Mpi(_) => "MPIJob",
        }
    }

    /// The row of our operator's own table (its counters).
    fn row(&self) -> String {
        let Some(own) = &self.own else {
            return String::new();
        };
        let reqs = own
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
            self.per_job[0],
            self.per_job[1],
            self.per_job[2],
            self.succeeded_cell(),
            self.cpu_seconds,
            self.idle_rss_mib,
            self.peak_rss_mib,
            self.final_rss_mib,
            reqs,
            own.status_writes_per_job,
            own.noop_status_writes,
            own.reconciles_per_job,
            ms(own.reconcile_p50_ms),
            ms(own.reconcile_p99_ms),
            own.reconcile_errors as u64 + self.log_warnings as u64,
        )
    }

    fn details(&self) -> String {
        let mut out = String::new();
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "details: {} (namespace {})",
            self.subject.describe(),
            self.namespace
        );
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
            "  all jobs created in {} s; slowest job to all pods {:.1} s; all finished at {} s, cleanup done at {} s",
            secs(self.jobs_created_in),
            self.per_job_max,
            secs(self.all_succeeded),
            secs(self.cleanup_done)
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
            "  operator CPU {:.1} s until all finished, {:.1} s until cleanup done, {:.1} s including settle; RSS idle / peak / final {:.1} / {:.1} / {:.1} MiB",
            self.cpu_seconds, self.cpu_seconds_cleanup, self.cpu_seconds_settled,
            self.idle_rss_mib, self.peak_rss_mib, self.final_rss_mib
        );
        let n = self.jobs.max(1) as f64;
        let _ = writeln!(
            out,
            "  API server requests until cleanup done, all clients (no watches): {:.0} ({:.1} per job); the operator's (its FlowSchema, until settled): {:.0} ({:.1} per job)",
            self.apiserver_requests,
            self.apiserver_requests / n,
            self.operator_requests,
            self.operator_requests / n,
        );
        let _ = writeln!(
            out,
            "  the operator's requests with no job: {:.2}/s",
            self.idle_requests_per_s
        );
        let _ = writeln!(out, "  all clients' requests per job by verb and resource:");
        for (k, v) in self.apiserver_detail.iter().filter(|(_, v)| **v >= 0.05) {
            let _ = writeln!(out, "    {k:<40} {v:.2}");
        }
        if let Some(own) = &self.own {
            let _ = writeln!(out, "  the operator's requests per job (its own counter):");
            for (k, v) in &own.requests_detail {
                let _ = writeln!(out, "    {k:<40} {v:.2}");
            }
            let _ = writeln!(
                out,
                "  client-side throttling: {:.1} s waited in total; reconcile errors {}",
                own.throttled_seconds, own.reconcile_errors
            );
        }
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
        let _ = writeln!(out, "  warning/error log lines {}", self.log_warnings);
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
        let own = self.own.as_ref().map(|o| {
            json!({
                "requests_per_job": o.requests_per_job,
                "requests_per_job_detail": o.requests_detail,
                "status_writes_per_job": o.status_writes_per_job,
                "noop_status_writes": o.noop_status_writes,
                "reconciles_per_job": o.reconciles_per_job,
                "reconcile_ms": {"p50": o.reconcile_p50_ms, "p99": o.reconcile_p99_ms},
                "reconcile_errors": o.reconcile_errors,
                "throttled_s": o.throttled_seconds,
            })
        });
        json!({
            "label": self.label,
            "subject": self.subject.describe(),
            "namespace": self.namespace,
            "jobs": self.jobs,
            "workers": self.workers,
            "pods_per_job": self.pods_per_job,
            "mode": self.mode(),
            "operator_args": self.operator_args,
            "scheduler": self.scheduler,
            "first_create_to_last_pod_s": self.first_create_to_last_pod,
            "first_create_to_last_launch_s": self.first_create_to_last_launch,
            "jobs_created_in_s": self.jobs_created_in,
            "per_job_all_pods_s": {"p50": self.per_job[0], "p95": self.per_job[1],
                                   "p99": self.per_job[2], "max": self.per_job_max},
            "operator_reaction_s": {"p50": self.reaction[0], "p95": self.reaction[1], "p99": self.reaction[2]},
            "scheduler_kwok_s": {"p50": self.environment[0], "p95": self.environment[1], "p99": self.environment[2]},
            "all_succeeded_s": self.all_succeeded,
            "cleanup_done_s": self.cleanup_done,
            "apiserver_requests": self.apiserver_requests,
            "apiserver_requests_per_job_detail": self.apiserver_detail,
            "operator_requests": self.operator_requests,
            "operator_idle_requests_per_s": self.idle_requests_per_s,
            "min_nodes_ready": self.min_nodes_ready,
            "apiserver_write_ms": {"p50": self.apiserver_write_ms[0], "p99": self.apiserver_write_ms[1]},
            "succeeded": self.succeeded,
            "failed": self.failed,
            "operator_cpu_s": self.cpu_seconds,
            "operator_cpu_until_cleanup_s": self.cpu_seconds_cleanup,
            "rss_mib": {"idle": self.idle_rss_mib, "peak": self.peak_rss_mib, "final": self.final_rss_mib},
            "own": own,
            "log_warnings": self.log_warnings,
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

    fn pod(name: &str, job: &str, role: &str, phase: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {peer::JOB_LABEL: job, peer::ROLE_LABEL: role}},
            "status": {"phase": phase, "podIP": "10.0.0.1", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]}
        }))
        .unwrap()
    }

    #[test]
    fn watches_count_pods_per_job_and_see_the_cleanup() {
        let mut s = Seen::default();
        let (job, role) = (peer::JOB_LABEL, peer::ROLE_LABEL);
        s.note_pod(
            &pod("a-worker-0", "a", "worker", "Running", true),
            job,
            role,
            2,
        );
        assert!(s.jobs["a"].all_pods.is_none());
        s.note_pod(
            &pod("a-worker-0", "a", "worker", "Running", true),
            job,
            role,
            2,
        );
        assert!(
            s.jobs["a"].all_pods.is_none(),
            "a pod seen twice counts once"
        );
        s.note_pod(
            &pod("a-launcher-x", "a", "launcher", "Running", true),
            job,
            role,
            2,
        );
        assert!(s.jobs["a"].all_pods.is_some());
        assert_eq!(role_times(&s, "a", "worker").count, 1);
        assert!(role_times(&s, "a", "worker").ready.is_some());
        assert_eq!(s.cleanup_done(), None, "a running worker remains");
        s.note_pod(
            &pod("a-launcher-x", "a", "launcher", "Succeeded", false),
            job,
            role,
            2,
        );
        assert_eq!(s.cleanup_done(), None);
        let gone = Instant::now();
        s.pods.get_mut("a-worker-0").unwrap().deleted = Some(gone);
        assert_eq!(s.cleanup_done(), Some(Some(gone)));
    }

    #[test]
    fn a_config_map_launches_its_job_once() {
        let cm = |run: Option<&str>| -> ConfigMap {
            let mut data = serde_json::Map::new();
            data.insert("hostfile".into(), json!("- 30049 a-worker-0 slots=1\n"));
            if let Some(r) = run {
                data.insert(CONFIG_RUN.into(), json!(r));
            }
            serde_json::from_value(json!({
                "metadata": {"name": "a-config", "labels": {LABEL_JOB_NAME: "a"}},
                "data": data,
            }))
            .unwrap()
        };
        let mut s = Seen::default();
        assert!(!s.note_config_map(&cm(None)), "created, not launched");
        assert!(s.jobs["a"].launched.is_none());
        assert!(s.note_config_map(&cm(Some("0"))));
        let at = s.jobs["a"].launched;
        assert!(at.is_some());
        assert!(!s.note_config_map(&cm(Some("0"))), "marked once");
        assert_eq!(s.jobs["a"].launched, at);
    }

    #[test]
    fn job_status_is_read_per_kind() {
        let ours = Subject::Ours(Mode::Skip);
        let mpi = Subject::Mpi(peer::QueueLimit::Default);
        assert_eq!(ours.finished(&json!({"phase": "Succeeded"})), Some(true));
        assert_eq!(ours.finished(&json!({"phase": "Running"})), None);
        assert_eq!(
            mpi.finished(&json!({"conditions": [{"type": "Succeeded", "status": "True"}]})),
            Some(true)
        );
        assert_eq!(ours.pods_per_job(4), 5);
        assert_eq!(mpi.pods_per_job(4), 5);
        assert_eq!(Subject::Ours(Mode::DglApi).pods_per_job(4), 6);
        let j: DynamicObject = serde_json::from_value(ours.job_object("x", "ns", 3)).unwrap();
        assert_eq!(j.data["spec"]["partitionMode"], "Skip");
    }

    #[test]
    fn warnings_of_both_log_formats_are_counted() {
        let dir = std::env::temp_dir().join(format!("bench-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("log");
        std::fs::write(
            &log,
            "2024-01-01T00:00:00Z  WARN dgl_operator: slow\n\
             I1123 19:09:00.1 1 x.go:1] fine\n\
             E1123 19:09:00.1 1 x.go:1] failed\n\
             Error is not a klog line\n",
        )
        .unwrap();
        let (n, first) = log_warnings(&log);
        assert_eq!(n, 2, "{first:?}");
        std::fs::remove_dir_all(&dir).unwrap();
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
                "dgl-launcher-complete",
                "mpi-launcher-complete"
            ]
        );
    }
}
