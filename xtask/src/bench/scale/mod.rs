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
//! (`identity.rs`).
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

mod cluster;
mod identity;
mod metrics;
mod operator;
mod peer;
mod phase;
mod procs;
mod report;
#[cfg(test)]
mod tests;
mod times;
mod watch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use dgl_api::names::{LABEL_JOB_NAME, LABEL_MANAGED_BY, LABEL_REPLICA_TYPE, MANAGED_BY};
use dgl_api::DGLJob;
use kube::core::ApiResource;
use kube::{Client, Resource};
use localkube::{ClusterConfig, LocalCluster};
use serde_json::json;

use super::measure::loadavg;
use cluster::{create_namespace, delete_namespace, start_cluster, start_kwok, start_scheduler};
use operator::start_operator;
use phase::measure_phase;
use procs::Procs;
use report::Report;

const CLUSTER: &str = "bench";
const STAGES: &str = include_str!("kwok-stages.yaml");
/// Fake nodes carry this annotation; kwok manages only them.
const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// ServiceAccount (and FlowSchema suffix) our operator runs as.
const OUR_ACCOUNT: &str = "dgl-operator";
const PEER_ACCOUNT: &str = "mpi-operator";
/// The bench plays the launcher's watcher-loop: once a DGLJob's ConfigMap
/// launches its run, it sets this annotation on the launcher pod, and only
/// then does kwok's `dgl-launcher-complete` Stage "train" it.
const LAUNCHED_ANNOTATION: &str = "bench.dgloperator.io/launched";

#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
enum Mode {
    /// Partitioner and workers at once (kwok makes them Ready), then the launcher.
    DglApi,
    /// Workers at once, then the launcher.
    Skip,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
enum PeerOperator {
    /// Kubeflow's mpi-operator (MPIJob v2beta1), see `peer.rs`.
    MpiOperator,
}

#[derive(clap::Args, Clone)]
pub(crate) struct ScaleArgs {
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
    /// Append the figures of each phase as one JSON line to this file, and
    /// draw this run's phases side by side in `<stem>.svg` beside it.
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

/// The binaries a run needs: ours, the peer's with its CRD, and the
/// cluster's (Kubernetes, etcd, kwok).
struct Bins {
    operator: PathBuf,
    peer: Option<(PathBuf, PathBuf)>,
    kube: localkube::Binaries,
}

/// Builds (or finds cached) every binary of the run before anything is
/// started or measured.
fn binaries(args: &ScaleArgs) -> Result<Bins> {
    let operator = match &args.operator {
        Some(p) => p.clone(),
        None => crate::ensure::release_binary("dgl-operator", "dgl-operator")?,
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
    let kube = crate::ensure::kube_binaries_with_kwok()?;
    Ok(Bins {
        operator,
        peer,
        kube,
    })
}

pub(crate) fn run(args: ScaleArgs) -> Result<()> {
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
    // `binaries` has built them: the cluster only checks them.
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
        if !reports.is_empty() {
            // This run's phases side by side, from the lines just written.
            let phases: Vec<serde_json::Value> = reports.iter().map(Report::json).collect();
            let svg = super::chart::svg_path(path, None);
            super::chart::scale(&phases, &svg)?;
            println!("chart: {}", svg.display());
        }
    }
    Ok(())
}

/// What a phase needs besides its subject: the arguments, the binaries,
/// the work directory.
struct Args2<'a> {
    scale: &'a ScaleArgs,
    bins: &'a Bins,
    work: &'a Path,
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
    let scheduler_pid = start_scheduler(args, &info, &work, &bins.kube, procs)?;
    let kwok_pid = start_kwok(args, &client, &info, &work, &bins.kube, procs).await?;
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
