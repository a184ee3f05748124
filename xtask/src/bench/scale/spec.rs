//! The bench's shared vocabulary: its settings (`ScaleArgs`), what a phase
//! runs (`Subject`, `Mode`), the binaries and the cluster side every phase
//! shares (`Bins`, `Args2`, `Env`). A leaf: it imports none of the phase
//! modules, which import it (no circle through `mod.rs`).

use std::path::{Path, PathBuf};

use clap::ValueEnum;
use dgl_api::names::{LABEL_JOB_NAME, LABEL_MANAGED_BY, LABEL_REPLICA_TYPE, MANAGED_BY};
use dgl_api::DGLJob;
use kube::core::ApiResource;
use kube::{Client, Resource};
use localkube::LocalCluster;
use serde_json::json;

use super::peer;

pub(super) const CLUSTER: &str = "bench";
pub(super) const STAGES: &str = include_str!("kwok-stages.yaml");
/// Fake nodes carry this annotation; kwok manages only them.
pub(super) const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// ServiceAccount (and FlowSchema suffix) our operator runs as.
pub(super) const OUR_ACCOUNT: &str = "dgl-operator";
pub(super) const PEER_ACCOUNT: &str = "mpi-operator";
/// The bench plays the launcher's watcher-loop: once a DGLJob's ConfigMap
/// launches its run, it sets this annotation on the launcher pod, and only
/// then does kwok's `dgl-launcher-complete` Stage "train" it.
pub(super) const LAUNCHED_ANNOTATION: &str = "bench.dgloperator.io/launched";

#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub(super) enum Mode {
    /// Partitioner and workers at once (kwok makes them Ready), then the launcher.
    DglApi,
    /// Workers at once, then the launcher.
    Skip,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub(super) enum PeerOperator {
    /// Kubeflow's mpi-operator (MPIJob v2beta1), see `peer.rs`.
    MpiOperator,
}

#[derive(clap::Args, Clone)]
pub(crate) struct ScaleArgs {
    /// Number of jobs per phase (0: only measure the idle operator).
    #[arg(long, default_value_t = 100)]
    pub(super) jobs: usize,
    /// Workers per job.
    #[arg(long, default_value_t = 4)]
    pub(super) workers: u32,
    /// spec.partitionMode of the DGLJobs; several (comma-separated) run one
    /// phase each, in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "dgl-api")]
    pub(super) mode: Vec<Mode>,
    /// Also run the peer operator with as many jobs of as many workers,
    /// after ours, with the same client QPS, burst and worker threads.
    #[arg(long, value_enum)]
    pub(super) peer: Option<PeerOperator>,
    /// The peer's controller-queue limits, one phase each (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "default,lifted"
    )]
    pub(super) peer_queue: Vec<peer::QueueLimit>,
    /// Run only the peer's phases (not ours).
    #[arg(long, requires = "peer")]
    pub(super) peer_only: bool,
    /// Extra argument for the peer (repeatable), e.g. --peer-arg=-v=2
    #[arg(long = "peer-arg", allow_hyphen_values = true)]
    pub(super) peer_args: Vec<String>,
    /// The operator binary (e.g. one built from an earlier commit, to compare).
    /// Default: the workspace's release build ($CARGO_TARGET_DIR or
    /// target/), built first.
    #[arg(long, alias = "operator-bin")]
    pub(super) operator: Option<PathBuf>,
    /// Extra argument for `dgl-operator run` (repeatable), e.g.
    /// --operator-arg=--kube-api-qps=100 (the peer gets the same
    /// --kube-api-qps, --kube-api-burst and --concurrency as --threadiness)
    #[arg(long = "operator-arg", allow_hyphen_values = true)]
    pub(super) operator_args: Vec<String>,
    /// Client QPS of the bench's own kube-scheduler (burst: twice that), so
    /// that binding pods does not limit what is measured. 0: localkube's
    /// kube-scheduler with the stock client limit (50 QPS, burst 100).
    #[arg(long, default_value_t = 500.0)]
    pub(super) scheduler_qps: f32,
    /// Fake kwok nodes (each takes 1000 pods).
    #[arg(long, default_value_t = 10)]
    pub(super) nodes: u32,
    /// Milliseconds a launcher pod runs before kwok makes it Succeeded.
    #[arg(long, default_value_t = 3000)]
    pub(super) launcher_ms: u64,
    /// Give up on a phase after this many seconds from its first job's creation.
    #[arg(long, default_value_t = 900)]
    pub(super) timeout: u64,
    /// Seconds the started operator runs with no job before idle RSS is read.
    #[arg(long, default_value_t = 10)]
    pub(super) idle_seconds: u64,
    /// Seconds after the cleanup before the final RSS, CPU and the
    /// operator's request count are read.
    #[arg(long, default_value_t = 10)]
    pub(super) settle_seconds: u64,
    /// Job creations in flight at once.
    #[arg(long, default_value_t = 32)]
    pub(super) create_parallelism: usize,
    /// A label for the table rows (e.g. "before", "after").
    #[arg(long, default_value = "")]
    pub(super) label: String,
    /// Keep the "bench" cluster running afterwards (it is restarted with an
    /// empty etcd at the start of every run anyway).
    #[arg(long)]
    pub(super) keep_cluster: bool,
    /// Append the figures of each phase as one JSON line to this file, and
    /// draw this run's phases side by side in `<stem>.svg` beside it.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
}

/// One phase of a run: which operator, on which jobs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Subject {
    Ours(Mode),
    Mpi(peer::QueueLimit),
}

impl Subject {
    pub(super) fn all(args: &ScaleArgs) -> Vec<Subject> {
        let mut out = Vec::new();
        if !args.peer_only {
            out.extend(args.mode.iter().map(|m| Subject::Ours(*m)));
        }
        if args.peer == Some(PeerOperator::MpiOperator) {
            out.extend(args.peer_queue.iter().map(|q| Subject::Mpi(*q)));
        }
        out
    }

    pub(super) fn namespace(self) -> String {
        match self {
            Subject::Ours(Mode::DglApi) => "bench-dgl-api".into(),
            Subject::Ours(Mode::Skip) => "bench-skip".into(),
            Subject::Mpi(q) => format!("bench-mpi-{}", q.name()),
        }
    }

    pub(super) fn describe(self) -> String {
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

    pub(super) fn pods_per_job(self, workers: u32) -> u32 {
        match self {
            Subject::Ours(Mode::DglApi) => workers + 2,
            Subject::Ours(Mode::Skip) | Subject::Mpi(_) => workers + 1,
        }
    }

    pub(super) fn account(self) -> &'static str {
        match self {
            Subject::Ours(_) => OUR_ACCOUNT,
            Subject::Mpi(_) => PEER_ACCOUNT,
        }
    }

    pub(super) fn resource(self) -> ApiResource {
        match self {
            Subject::Ours(_) => ApiResource::erase::<DGLJob>(&()),
            Subject::Mpi(_) => peer::resource(),
        }
    }

    /// Label selector of the jobs' pods, and their job-name and role labels.
    pub(super) fn pod_labels(self) -> (String, &'static str, &'static str) {
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
    pub(super) fn finished(self, status: &serde_json::Value) -> Option<bool> {
        match self {
            Subject::Ours(_) => match status.get("phase").and_then(|p| p.as_str()) {
                Some("Succeeded") => Some(true),
                Some("Failed") => Some(false),
                _ => None,
            },
            Subject::Mpi(_) => peer::finished(status),
        }
    }

    pub(super) fn job_object(self, name: &str, ns: &str, workers: u32) -> serde_json::Value {
        match self {
            Subject::Ours(mode) => job_object(name, ns, workers, mode),
            Subject::Mpi(_) => peer::job_object(name, ns, workers),
        }
    }
}

pub(super) fn job_object(name: &str, ns: &str, workers: u32, mode: Mode) -> serde_json::Value {
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
pub(super) struct Bins {
    pub(super) operator: PathBuf,
    pub(super) peer: Option<(PathBuf, PathBuf)>,
    pub(super) kube: localkube::Binaries,
}

/// What a phase needs besides its subject: the arguments, the binaries,
/// the work directory.
pub(super) struct Args2<'a> {
    pub(super) scale: &'a ScaleArgs,
    pub(super) bins: &'a Bins,
    pub(super) work: &'a Path,
}

/// The cluster side every phase shares.
pub(super) struct Env<'a> {
    pub(super) args: Args2<'a>,
    pub(super) client: &'a Client,
    pub(super) cluster: &'a LocalCluster,
    pub(super) scheduler_pid: Option<u32>,
    pub(super) kwok_pid: u32,
}
