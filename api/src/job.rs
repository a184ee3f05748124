//! The `DGLJob` custom resource (`dgloperator.io/v1alpha1`).
//!
//! Validation lives in the schema: OpenAPI bounds and enums from the Rust types,
//! CEL rules (`x-kubernetes-validations`) for what spans several fields (those
//! the operator or dglrun check too are defined once, in [`crate::rules`]). Every
//! rule carries a message that names the field, because that message is what a
//! user sees from `kubectl apply`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::progress::{self, Base, Progress, Seen};
use crate::rules;

/// Specification of a distributed DGL training job.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "dgloperator.io",
    version = "v1alpha1",
    kind = "DGLJob",
    plural = "dgljobs",
    singular = "dgljob",
    shortname = "dglj",
    category = "all",
    namespaced,
    status = "DGLJobStatus",
    derive = "PartialEq",
    doc = "A distributed DGL (Deep Graph Library) training job: partition a graph, ship each worker its shard, train.",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Where the job is in its life"
    ),
    printcolumn(
        name = "Mode",
        type_ = "string",
        json_path = ".spec.partitionMode",
        description = "How the graph is partitioned"
    ),
    printcolumn(
        name = "Workers",
        type_ = "integer",
        json_path = ".spec.dglReplicaSpecs.Worker.replicas",
        description = "Number of worker pods"
    ),
    printcolumn(
        name = "Progress",
        type_ = "string",
        json_path = ".status.progress.summary",
        description = "The training's last progress report: epoch, percent done, estimated time left"
    ),
    printcolumn(
        name = "Queue",
        type_ = "string",
        json_path = ".status.queue.summary",
        description = "Kueue: queued in or admitted from which LocalQueue"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = Rule::new("self.metadata.name.size() <= 50").message(
        "metadata.name: must be at most 50 characters, so that the names of the job's pods (<name>-partitioner, <name>-worker-<i>) stay valid"
    ),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message(
        "metadata.name: must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter, ending with a letter or digit, no dots), so that it is a valid label value and every name made from it is valid"
    ),
)]
// Rules the operator or dglrun also check come from `crate::rules`.
#[x_kube(validation = rules::NO_PARTITIONER_WITH_SKIP.crd_rule())]
#[x_kube(validation = rules::NO_PARTITIONER_WITH_DISTPARMETIS.crd_rule())]
#[x_kube(validation = rules::WORKERS_UNLESS_SKIP.crd_rule())]
#[x_kube(validation = Rule::new(
    "!has(self.runPolicy) || !has(self.runPolicy.schedulingPolicy) || !has(self.runPolicy.schedulingPolicy.minAvailable) || self.runPolicy.schedulingPolicy.minAvailable <= ('Worker' in self.dglReplicaSpecs ? (has(self.dglReplicaSpecs.Worker.replicas) ? self.dglReplicaSpecs.Worker.replicas : 1) : 0) + 2"
).message("spec.runPolicy.schedulingPolicy.minAvailable: must not exceed the number of pods of the job (workers + launcher + partitioner)"))]
#[x_kube(validation = rules::GRAPHBOLT_NOT_WITH_DISTPARMETIS.crd_rule())]
#[x_kube(validation = rules::GRAPHBOLT_NEEDS_WORKERS.crd_rule())]
#[x_kube(validation = rules::PARTITION_CACHE_NEEDS_NATIVE_PARTITIONER.crd_rule())]
#[x_kube(validation = rules::no_launcher_account_rule(ReplicaType::Worker))]
#[x_kube(validation = rules::no_launcher_account_rule(ReplicaType::Partitioner))]
// On the spec, not the field: a rule on the field runs only when the old and
// the new object both have it, so unset (false) → true would pass.
#[x_kube(validation = Rule::new(
    "(has(self.useGraphbolt) && self.useGraphbolt) == (has(oldSelf.useGraphbolt) && oldSelf.useGraphbolt)"
).message("spec.useGraphbolt: is immutable (the partitions are made for it); create a new DGLJob to change it"))]
#[x_kube(validation = Rule::new(
    "(has(self.managedBy) ? self.managedBy : '') == (has(oldSelf.managedBy) ? oldSelf.managedBy : '')"
).message("spec.managedBy: is immutable; create a new DGLJob to change it"))]
#[serde(rename_all = "camelCase")]
pub struct DGLJobSpec {
    /// Which pods to delete when the job ends: `Running` (default) deletes the
    /// pods still running, `All` deletes every pod, `None` keeps them all.
    #[serde(default)]
    pub clean_pod_policy: CleanPodPolicy,

    /// How the graph is partitioned before training. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf")
        .message("spec.partitionMode: is immutable (a job's pods are built for its mode); create a new DGLJob to change it"))]
    #[serde(default)]
    pub partition_mode: PartitionMode,

    /// Pod templates per role. `Launcher` (exactly one replica) is required,
    /// `Worker` (one or more) too unless `partitionMode` is `Skip`: a job
    /// without workers runs its training in the launcher pod, as one
    /// process. `Partitioner` is optional (at most one) and defaults to the
    /// Launcher's template.
    #[x_kube(validation = Rule::new("self.all(k, k in ['Launcher', 'Worker', 'Partitioner'])")
        .message("spec.dglReplicaSpecs: the only allowed keys are Launcher, Worker and Partitioner"))]
    #[x_kube(validation = Rule::new("'Launcher' in self")
        .message("spec.dglReplicaSpecs.Launcher: is required"))]
    #[x_kube(validation = Rule::new("!('Launcher' in self) || !has(self.Launcher.replicas) || self.Launcher.replicas == 1")
        .message("spec.dglReplicaSpecs.Launcher.replicas: must be exactly 1"))]
    #[x_kube(validation = Rule::new("!('Worker' in self) || !has(self.Worker.replicas) || self.Worker.replicas >= 1")
        .message("spec.dglReplicaSpecs.Worker.replicas: must be at least 1"))]
    #[x_kube(validation = Rule::new("!('Partitioner' in self) || !has(self.Partitioner.replicas) || self.Partitioner.replicas <= 1")
        .message("spec.dglReplicaSpecs.Partitioner.replicas: must be 0 or 1"))]
    #[x_kube(validation = rules::replicas_fixed_rule(ReplicaType::Worker))]
    #[x_kube(validation = rules::replicas_fixed_rule(ReplicaType::Partitioner))]
    pub dgl_replica_specs: BTreeMap<ReplicaType, ReplicaSpec>,

    /// Trainer processes per worker pod, written into the hostfile as
    /// `slots=N`; dglrun uses it as the default of `--num-trainers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub slots_per_worker: Option<i32>,

    /// Lifecycle policies, in the vocabulary of Kubeflow's training jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_policy: Option<RunPolicy>,

    /// Train on GraphBolt partitions (DGL 2.1.0's `use_graphbolt`): the
    /// partitions are made (or converted) into `fused_csc_sampling_graph.pt`,
    /// which is shipped instead of `graph.dgl`, and the training script gets
    /// `--use_graphbolt`. Needs workers (DGL has no standalone GraphBolt) and
    /// a partition mode other than DistParMETIS. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_graphbolt: Option<bool>,

    /// When the worker pods are created (see [`WorkerCreationPolicy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_creation_policy: Option<WorkerCreationPolicy>,

    /// The controller that runs this job, as Kubernetes Job and MPIJob have
    /// it. Unset or `dgloperator.io/dgl-operator`: this operator. Any other
    /// value (e.g. `kueue.x-k8s.io/multikueue`) and this operator leaves the
    /// job alone: no pods, no status writes. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub managed_by: Option<String>,

    /// Partition once, train many: where partitions are kept and reused
    /// (partition mode ParMETIS or DistParMETIS with a chunked
    /// `--partition-input`). Before anything partitions, the launcher pod
    /// looks the job's key up (a digest of the input's metadata.json and
    /// each chunk's size and ETag, the partition settings and the worker
    /// count): found, no partitioner or rank runs and each worker downloads
    /// only its own part, verified by SHA-256; not found, the partitioner
    /// (ParMETIS) or the workers' ranks (DistParMETIS, each worker its own
    /// part) partition and store them there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_cache: Option<PartitionCacheSpec>,
}

/// `spec.partitionCache`: an S3-compatible prefix and the Secret to reach it.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionCacheSpec {
    /// The cache, `s3://bucket/prefix`: an entry is `<prefix>/<key>/`
    /// with its `manifest.json` written last.
    #[schemars(length(min = 6, max = 1024), regex(pattern = r"^s3://[^/\s]+(/\S*)?$"))]
    pub url: String,
    /// A Secret in the job's namespace whose keys become environment
    /// variables (`envFrom`) of the lookup, the partitioner and the workers:
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, and for an
    /// S3-compatible store `AWS_ENDPOINT`, `AWS_REGION`,
    /// `AWS_ALLOW_HTTP`. The keys must write the prefix and read the input.
    /// Unset: the pods' own environment (e.g. the templates' `envFrom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret: Option<String>,
}

/// [`DGLJobSpec::managed_by`]'s value naming this operator.
pub const MANAGED_BY_DGL_OPERATOR: &str = "dgloperator.io/dgl-operator";

/// When the worker pods are created in a mode with a partitioner pod
/// (DGL-API, ParMETIS): `AtStartup` (default) with the partitioner, so they
/// pull their image and start while it partitions (none reads a shard before
/// the partitions are complete); `AfterPartitioning` once the partitioner
/// serves the partitions, so that workers (e.g. on GPU nodes) are not held
/// idle through a long partition step. Other modes create them at once.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum WorkerCreationPolicy {
    /// With the partitioner pod, when the job starts.
    #[default]
    AtStartup,
    /// Once the partitioner pod serves the partitions (Ready).
    AfterPartitioning,
}

/// Which pods survive the end of a job.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CleanPodPolicy {
    /// Delete the pods that are still running or pending when the job ends.
    #[default]
    Running,
    /// Delete every pod of the job when it ends.
    All,
    /// Keep every pod.
    None,
}

/// How the graph is partitioned.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PartitionMode {
    /// One partitioner pod runs the user's partition script
    /// (`dgl.distributed.partition_graph`).
    #[default]
    #[serde(rename = "DGL-API")]
    DglApi,
    /// One partitioner pod runs the native partition pipeline on all its
    /// cores (DGL's chunked graph in, DGL partitions out), then ships the
    /// shards like DGL-API.
    #[serde(rename = "ParMETIS")]
    ParMetis,
    /// No partitioner pod: every worker pod is one MPI rank of the native
    /// pipeline (started through dglrun, never ssh) and keeps the partition
    /// it trains on.
    #[serde(rename = "DistParMETIS")]
    DistParMetis,
    /// No partitioning: the partitions already exist (for example on a volume).
    Skip,
}

impl PartitionMode {
    /// The spelling used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            PartitionMode::DglApi => "DGL-API",
            PartitionMode::ParMetis => "ParMETIS",
            PartitionMode::DistParMetis => "DistParMETIS",
            PartitionMode::Skip => "Skip",
        }
    }

    /// Whether this mode runs a partitioner pod.
    pub fn has_partitioner(self) -> bool {
        matches!(self, PartitionMode::DglApi | PartitionMode::ParMetis)
    }

    /// The modes whose native pipeline (not a user's partition script)
    /// makes the partitions.
    pub const NATIVE: [PartitionMode; 2] = [PartitionMode::ParMetis, PartitionMode::DistParMetis];

    /// Whether the native pipeline (not a user's partition script) makes the
    /// partitions ([`PartitionMode::NATIVE`]).
    pub fn is_native(self) -> bool {
        Self::NATIVE.contains(&self)
    }
}

impl std::fmt::Display for PartitionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The roles of a job's pods, the keys of `dglReplicaSpecs`.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum ReplicaType {
    Launcher,
    Worker,
    Partitioner,
}

impl ReplicaType {
    pub const ALL: [ReplicaType; 3] = [
        ReplicaType::Launcher,
        ReplicaType::Worker,
        ReplicaType::Partitioner,
    ];

    /// The spelling used in the API (`dglReplicaSpecs` keys).
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaType::Launcher => "Launcher",
            ReplicaType::Worker => "Worker",
            ReplicaType::Partitioner => "Partitioner",
        }
    }

    /// The lower-case spelling used in labels and object names.
    pub fn label_value(self) -> &'static str {
        match self {
            ReplicaType::Launcher => "launcher",
            ReplicaType::Worker => "worker",
            ReplicaType::Partitioner => "partitioner",
        }
    }

    /// Parses a label value back into a role.
    pub fn from_label_value(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.label_value() == s)
    }
}

impl std::fmt::Display for ReplicaType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pods of one role.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.template.spec) && size(self.template.spec.containers) > 0")
    .message("template.spec.containers: must contain at least one container"))]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    /// Number of pods of this role (Launcher: 1, Worker: 1 to 4096,
    /// Partitioner: 0 or 1). Defaults to 1. The cap keeps the job's
    /// ConfigMap (a hostfile line and an ip_config line per worker) well
    /// under Kubernetes' 1 MiB limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4096))]
    pub replicas: Option<i32>,

    /// The pod template. The operator keeps it and only adds what it needs:
    /// env, volumes, labels, and a command where the template has none.
    pub template: PodTemplateSpec,
}

impl ReplicaSpec {
    /// The replica count with the API default (1) applied.
    pub fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(1)
    }
}

/// Lifecycle policies of a job.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// Seconds after the job finishes (Succeeded or Failed) before the job and
    /// everything it owns are deleted. Unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,

    /// Seconds from the job's start before it is failed with reason
    /// `DeadlineExceeded`. Unset: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,

    /// How many times a failed run is restarted (reusing finished partitions)
    /// before the job fails. Defaults to 0: the first failure is final.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub backoff_limit: Option<i32>,

    /// When true, the job's pods are deleted and no new ones are created; the
    /// job is kept. Setting it back to false starts the job again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// Gang scheduling. Used when Volcano or scheduler-plugins is installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<SchedulingPolicy>,

    /// Rules by exit code or pod condition that fail the job at once
    /// (FailJob), restart without counting against backoffLimit (Ignore) or
    /// count (Count, the default for a failure no rule matches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_failure_policy: Option<crate::failure_policy::PodFailurePolicy>,

    /// Seconds a pod of the job may be unable to start (Unschedulable,
    /// ErrImagePull/ImagePullBackOff, CreateContainerConfigError, ...)
    /// before the job fails with reason `PodStartTimeout`, naming the pod
    /// and the cause. Condition `PodsNotStarting` names such a pod at once
    /// either way. Unset: 300. 0: never fail for it (the condition only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pod_start_timeout_seconds: Option<i32>,
}

impl RunPolicy {
    /// [`RunPolicy::pod_start_timeout_seconds`] when unset.
    pub const DEFAULT_POD_START_TIMEOUT_SECONDS: i32 = 300;

    /// The pod start timeout with the default applied; `None` for 0 (never).
    pub fn pod_start_timeout(&self) -> Option<i64> {
        let t = self
            .pod_start_timeout_seconds
            .unwrap_or(Self::DEFAULT_POD_START_TIMEOUT_SECONDS);
        (t > 0).then_some(i64::from(t))
    }
}

/// Gang-scheduling settings, turned into a PodGroup.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    /// Pods that must be schedulable together. Defaults to every pod of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_available: Option<i32>,

    /// The scheduler queue (Volcano) to submit the PodGroup to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub queue: Option<String>,

    /// The PriorityClass of the PodGroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class: Option<String>,

    /// Seconds the scheduler waits for the whole gang (scheduler-plugins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub schedule_timeout_seconds: Option<i32>,
}

/// Observed state of a job, derived by the operator from what exists.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DGLJobStatus {
    /// Standard conditions: Created, Partitioning, Partitioned, Running,
    /// Restarting, Succeeded, Failed, Suspended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// Pod counts per role.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replica_statuses: BTreeMap<ReplicaType, ReplicaStatus>,

    /// When the job's first pod was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,

    /// When the job reached Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,

    /// A one-word summary for printer columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,

    /// How many times the job's pods were restarted after a failed run; the
    /// restarts that count against runPolicy.backoffLimit are
    /// `restartCount - ignoredRestarts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<i32>,

    /// Restarts an Ignore rule of runPolicy.podFailurePolicy made, which do
    /// not count against backoffLimit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignored_restarts: Option<i32>,

    /// The generation of the spec this status was derived from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The training's last progress report (only for scripts that print
    /// `DGLRUN_PROGRESS` lines; see the user guide). Kept after the job
    /// finished; cleared when a restart begins a new run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<JobProgress>,

    /// Where the job stands in Kueue (only for a job labelled
    /// `kueue.x-k8s.io/queue-name` with the operator's Kueue integration on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueStatus>,
}

/// A job's place in Kueue: its LocalQueue, its Workload, whether admitted.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// The LocalQueue named by the label `kueue.x-k8s.io/queue-name`.
    pub local_queue: String,
    /// The job's Workload (kueue.x-k8s.io), in the job's namespace.
    pub workload: String,
    /// The ClusterQueue that admitted the Workload, once admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
    /// Whether Kueue has admitted the Workload (the job may run).
    pub admitted: bool,
    /// `queued in <LocalQueue>` or `admitted via <LocalQueue>`: the Queue
    /// printer column.
    pub summary: String,
}

/// The training's last progress report, as the launcher published it, with
/// how far along it is and an estimate of the time left (named as Kubeflow
/// Trainer's `status.trainerStatus` names them).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobProgress {
    /// The epoch the training is in or has just finished, as the script counts.
    pub epoch: u32,
    /// Total epochs, when the script reports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u32>,
    /// The last loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// The last throughput, in `unit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<f64>,
    /// Unit of `throughput`, e.g. `samples/s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Percent of the epochs done (epoch/epochs, rounded down, at most 100);
    /// only when `epochs` is reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub progress_percentage: Option<u32>,
    /// Estimated seconds of training left as of `updatedAt`: the epochs left
    /// at the rate since `firstReport`. Absent when unknown: before a second
    /// epoch was seen in this run, without `epochs`, after the epoch or the
    /// clock went back (until measured again), once a later report of the
    /// same epoch has used it up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub estimated_remaining_seconds: Option<i64>,
    /// The report the estimate counts from: the first of this run (or
    /// since the epoch or the clock went back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_report: Option<ProgressMark>,
    /// `epoch 3/10 (30%, ~2m10s left)` (or `epoch 3`): the Progress
    /// printer column.
    pub summary: String,
    /// When the operator first saw this report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Time>,
}

/// An epoch and when the operator first saw a report of it.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProgressMark {
    /// The epoch reported.
    pub epoch: u32,
    /// When the operator first saw a report of it.
    pub seen_at: Time,
}

impl JobProgress {
    /// The status form of report `p`, seen at `at`, after `prev` (the
    /// status' progress of this run, if any).
    pub fn next(prev: Option<&JobProgress>, p: &Progress, at: Time) -> JobProgress {
        let seen = prev.map(JobProgress::seen);
        let est = progress::estimate(seen.as_ref(), p, at.0.as_second());
        let first_report = match est.base {
            Base::Keep => prev.and_then(|s| s.first_report.clone()),
            Base::Now => Some(ProgressMark {
                epoch: p.epoch,
                seen_at: at.clone(),
            }),
            Base::Drop => None,
        };
        JobProgress {
            epoch: p.epoch,
            epochs: p.epochs,
            loss: p.loss,
            throughput: p.throughput,
            unit: p.unit.clone(),
            progress_percentage: p.percent(),
            estimated_remaining_seconds: est.remaining,
            first_report,
            summary: p.summary(est.remaining),
            updated_at: Some(at),
        }
    }

    /// What the estimate needs of this status.
    fn seen(&self) -> Seen {
        Seen {
            epoch: self.epoch,
            epochs: self.epochs,
            at: self.updated_at.as_ref().map(|t| t.0.as_second()),
            base: self
                .first_report
                .as_ref()
                .map(|m| (m.epoch, m.seen_at.0.as_second())),
            remaining: self.estimated_remaining_seconds,
        }
    }

    /// Whether this is the status form of `p` (whenever it was seen).
    pub fn reports(&self, p: &Progress) -> bool {
        self.epoch == p.epoch
            && self.epochs == p.epochs
            && self.loss == p.loss
            && self.throughput == p.throughput
            && self.unit == p.unit
    }
}

/// Pod counts of one role.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// Pods pending or running.
    #[serde(default)]
    pub active: i32,
    /// Pods that exited 0.
    #[serde(default)]
    pub succeeded: i32,
    /// Pods that failed (non-zero exit, eviction, deletion while running).
    #[serde(default)]
    pub failed: i32,
}

/// The summary phase shown by `kubectl get dgljobs`.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobPhase {
    Created,
    Partitioning,
    Partitioned,
    Running,
    Restarting,
    Succeeded,
    Failed,
    Suspended,
}

impl JobPhase {
    /// Every phase, in the order a job first reaches them.
    pub const ALL: [JobPhase; 8] = [
        JobPhase::Created,
        JobPhase::Partitioning,
        JobPhase::Partitioned,
        JobPhase::Running,
        JobPhase::Restarting,
        JobPhase::Succeeded,
        JobPhase::Failed,
        JobPhase::Suspended,
    ];

    /// The phase spelled `name`, as [`JobPhase::as_str`] writes it.
    pub fn from_name(name: &str) -> Option<JobPhase> {
        JobPhase::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The phase as `status.phase` spells it: its condition type's spelling.
    pub fn as_str(self) -> &'static str {
        crate::JobConditionType::from(self).as_str()
    }

    /// Succeeded and Failed are final.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobPhase::Succeeded | JobPhase::Failed)
    }
}

impl std::fmt::Display for JobPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl DGLJobSpec {
    /// The spec of a role, if present.
    pub fn replica_spec(&self, role: ReplicaType) -> Option<&ReplicaSpec> {
        self.dgl_replica_specs.get(&role)
    }

    /// Number of worker pods.
    pub fn num_workers(&self) -> i32 {
        self.replica_spec(ReplicaType::Worker)
            .map(ReplicaSpec::replicas)
            .unwrap_or(0)
    }

    /// `workerCreationPolicy`, default `AtStartup`.
    pub fn worker_creation_policy(&self) -> WorkerCreationPolicy {
        self.worker_creation_policy.unwrap_or_default()
    }

    /// `useGraphbolt`, default false.
    pub fn use_graphbolt(&self) -> bool {
        self.use_graphbolt.unwrap_or(false)
    }

    /// Trainer slots per worker (`slotsPerWorker`, default 1).
    pub fn slots_per_worker(&self) -> i32 {
        self.slots_per_worker.unwrap_or(1)
    }

    /// The run policy with defaults applied.
    pub fn run_policy(&self) -> RunPolicy {
        self.run_policy.clone().unwrap_or_default()
    }

    /// Whether the job asks to be suspended.
    pub fn suspended(&self) -> bool {
        self.run_policy
            .as_ref()
            .and_then(|p| p.suspend)
            .unwrap_or(false)
    }

    /// Whether another controller than this operator runs the job
    /// (`spec.managedBy` set to anything but [`MANAGED_BY_DGL_OPERATOR`]).
    pub fn managed_by_other(&self) -> bool {
        self.managed_by
            .as_deref()
            .is_some_and(|m| m != MANAGED_BY_DGL_OPERATOR)
    }

    /// Whether the job has no workers: its launcher runs the training
    /// itself, as one process (partition mode Skip only).
    pub fn is_standalone(&self) -> bool {
        self.num_workers() == 0
    }

    /// Whether the job has a partitioner pod: the mode needs one and
    /// `Partitioner.replicas` is not 0.
    pub fn has_partitioner(&self) -> bool {
        self.partition_mode.has_partitioner()
            && self
                .replica_spec(ReplicaType::Partitioner)
                .map(|s| s.replicas() > 0)
                .unwrap_or(true)
    }
}
