//! Names shared by the operator and the programs in the pods: object names,
//! labels, environment variables, paths and ports. Defined once, here.

use crate::ReplicaType;

/// API group of the DGLJob.
pub const GROUP: &str = "dgloperator.io";
/// The operator's field manager for server-side apply.
pub const FIELD_MANAGER: &str = "dgl-operator";

/// Label: the name of the job a child belongs to.
pub const LABEL_JOB_NAME: &str = "dgloperator.io/job-name";
/// Label: the role of a pod (`launcher`, `worker`, `partitioner`).
pub const LABEL_REPLICA_TYPE: &str = "dgloperator.io/replica-type";
/// Label: the index of a worker pod (its partition id).
pub const LABEL_REPLICA_INDEX: &str = "dgloperator.io/replica-index";
/// Label: which run of the job (0, then +1 per restart) created the pod.
pub const LABEL_RUN: &str = "dgloperator.io/run";
/// Annotation on the launcher pod: the training's latest progress report
/// (`dgl_api::progress::Progress` as JSON), written by the launcher itself.
pub const ANNOTATION_PROGRESS: &str = "dgloperator.io/progress";
/// Annotation on a DGLJob: `none` turns off the spread of its workers over
/// nodes that the operator adds by default (docs/user-guide.md, Placement);
/// `preferred` (or no annotation) keeps it.
pub const ANNOTATION_WORKER_SPREAD: &str = "dgloperator.io/worker-spread";
/// The node label the default worker spread is over.
pub const TOPOLOGY_HOSTNAME: &str = "kubernetes.io/hostname";
/// Standard label naming the controller of every child.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "dgl-operator";

/// Env: the role of the pod (`Partitioner`, `Launcher`, `Worker`). The
/// variable keeps the name of the original DGL operator design (see
/// docs/runtime-design.md); it holds the pod's role, not the job's phase
/// ([`crate::JobPhase`]).
pub const ENV_ROLE: &str = "DGL_OPERATOR_PHASE_ENV";
/// Env: the job's name.
pub const ENV_JOB_NAME: &str = "DGL_OPERATOR_JOB_NAME";
/// Env: the job's namespace.
pub const ENV_NAMESPACE: &str = "DGL_OPERATOR_NAMESPACE";
/// Env: this pod's name (downward API).
pub const ENV_POD_NAME: &str = "DGL_OPERATOR_POD_NAME";
/// Env: this pod's IP (downward API).
pub const ENV_POD_IP: &str = "DGL_OPERATOR_POD_IP";
/// Env: a worker's index (its partition id).
pub const ENV_WORKER_INDEX: &str = "DGL_OPERATOR_WORKER_INDEX";
/// Env: number of worker pods.
pub const ENV_NUM_WORKERS: &str = "DGL_OPERATOR_NUM_WORKERS";
/// Env: the partition mode.
pub const ENV_PARTITION_MODE: &str = "DGL_OPERATOR_PARTITION_MODE";
/// Env: `true` when the job trains on GraphBolt partitions (`spec.useGraphbolt`).
pub const ENV_USE_GRAPHBOLT: &str = "DGL_OPERATOR_USE_GRAPHBOLT";
/// Env: directory holding the job's ConfigMap files.
pub const ENV_CONFIG_DIR: &str = "DGL_OPERATOR_CONFIG_DIR";
/// Env: the pod's run (as its [`LABEL_RUN`]), which dglrun binds into the
/// control channel's handshake (`crate::wire::Run`).
pub const ENV_RUN: &str = "DGL_OPERATOR_RUN";
/// Env: file holding the job's secret token for the control channel.
pub const ENV_TOKEN_FILE: &str = "DGL_OPERATOR_TOKEN_FILE";
/// Env: `watcher-loop`'s file of pods to watch.
pub const ENV_WATCHER_FILE: &str = "WATCHERFILE";
/// Env: `watcher-loop`'s mode (`ready` or `finished`).
pub const ENV_WATCHER_MODE: &str = "WATCHERMODE";
/// Env: `watcher-loop`'s namespace of the pods.
pub const ENV_WATCHER_NAMESPACE: &str = "NAMESPACE";
/// Env: `watcher-loop`'s timeout (e.g. `10m`).
pub const ENV_WATCHER_TIMEOUT: &str = "WATCHERTIMEOUT";
/// The launcher's init container that runs `watcher-loop`.
pub const WATCHER_CONTAINER: &str = "watcher-loop-worker";
/// Env: the ConfigMap `watcher-loop` waits for before it watches the pods
/// (the job's `<job>-config`, read through the API, not a volume).
pub const ENV_WATCHER_CONFIG_MAP: &str = "WATCHERCONFIGMAP";
/// Env: the run whose launch `watcher-loop` waits for: the ConfigMap's
/// [`CONFIG_RUN`] key must hold it.
pub const ENV_WATCHER_RUN: &str = "WATCHERRUN";
/// Env: the folder `watcher-loop` writes the ConfigMap's files into (the
/// launcher's [`CONFIG_DIR`], an emptyDir it shares with the launcher).
pub const ENV_WATCHER_CONFIG_DIR: &str = "WATCHERCONFIGDIR";

/// Where the ConfigMap is mounted.
pub const CONFIG_DIR: &str = "/etc/dgl";
/// Where the secret is mounted.
pub const SECRET_DIR: &str = "/etc/dgl-secret";
/// Key of the token in the job's Secret.
pub const SECRET_TOKEN_KEY: &str = "token";
// The paths below are spelled once, here, and composed with `concat!`.
macro_rules! workspace {
    () => {
        "/dgl_workspace"
    };
}
macro_rules! dataset_dir {
    () => {
        "dataset"
    };
}

/// The default workspace inside the pods.
pub const WORKSPACE: &str = workspace!();
/// The partitions' folder below the workspace (`--rel_data_path` of the
/// partition script): `<workspace>/dataset/<graph>.json` and `part<i>/`. In
/// partition mode Skip the partitions must already be there.
pub const DATASET_DIR: &str = dataset_dir!();
/// `<WORKSPACE>/<DATASET_DIR>`: where the operator mounts an empty volume for
/// the partitions when the pod template mounts nothing there or at the workspace.
pub const DATASET_PATH: &str = concat!(workspace!(), "/", dataset_dir!());
/// The chunked input graph's folder below the workspace in the native modes
/// (ParMETIS, DistParMETIS): a loader script run as the partition entry point
/// writes `<workspace>/chunked/metadata.json` (its `--rel_data_path`), the
/// native pipeline reads it.
pub const CHUNKED_DIR: &str = "chunked";
/// The launcher's own state folder (an emptyDir in DistParMETIS mode).
pub const LAUNCHER_STATE_DIR: &str = "/var/run/dglrun";
/// File in [`LAUNCHER_STATE_DIR`] the launcher writes once the workers have
/// partitioned the graph (DistParMETIS); its readiness probe
/// (`dglrun probe --partitioned`) turns Ready then, and the operator reads
/// that as Partitioned.
pub const PARTITIONED_MARKER: &str = "partitioned";

/// The launcher's init container (before watcher-loop) that looks the
/// job's partitions up in `spec.partitionCache`; its termination message
/// and [`CACHE_LOOKUP_FILE`] hold the answer ([`crate::partition_cache`]).
pub const CACHE_LOOKUP_CONTAINER: &str = "partition-cache-lookup";
/// [`ENV_ROLE`]'s value for that container: dglrun's lookup role.
pub const ROLE_CACHE_LOOKUP: &str = "PartitionCacheLookup";
/// `spec.partitionCache.url`, for the lookup, the partitioner (which
/// stores what it made there) and the launcher (which then ships from it).
pub const ENV_PARTITION_CACHE: &str = "DGL_OPERATOR_PARTITION_CACHE";
/// File in [`LAUNCHER_STATE_DIR`]: the lookup's answer for the launcher.
pub const CACHE_LOOKUP_FILE: &str = "partition-cache";

/// ConfigMap key: workers, one line each in partition order (`<ip> <port> <pod> slots=<n>`).
pub const HOSTFILE: &str = "hostfile";
/// ConfigMap key: the partitioner (`<ip> <port> <pod>`).
pub const PARTFILE: &str = "partfile";
/// ConfigMap key: the launcher (`<ip> <port> <pod>`).
pub const LEADFILE: &str = "leadfile";
/// ConfigMap key: DGL's ip_config (`<ip> <port>` per worker, partition order).
pub const IP_CONFIG: &str = "ip_config";
/// ConfigMap key: the run (0, then +1 per restart, as [`LABEL_RUN`]) the
/// ConfigMap launches. The operator writes it, with every worker's IP, once
/// that run's workers are Ready and the graph is partitioned; the launcher
/// (created with the workers) starts training only when its watcher-loop
/// reads its own run here.
pub const CONFIG_RUN: &str = "run";

/// DGL's default server port.
pub const DGL_SERVER_PORT: u16 = 30050;
/// The port of dglrun's authenticated control and shard channel.
pub const AGENT_PORT: u16 = 30049;
/// Where the kubelet reads a container's termination message (the default
/// `terminationMessagePath`); it shows in the pod's status and the job's.
pub const TERMINATION_LOG: &str = "/dev/termination-log";
/// The kubelet keeps at most this many bytes of a termination message.
pub const TERMINATION_MESSAGE_MAX: usize = 4096;

/// `<job>-launcher`
pub fn launcher_name(job: &str) -> String {
    format!("{job}-launcher")
}

/// `<job>-partitioner`
pub fn partitioner_name(job: &str) -> String {
    format!("{job}-partitioner")
}

/// `<job>-worker-<i>`
pub fn worker_name(job: &str, index: i32) -> String {
    format!("{job}-worker-{index}")
}

/// `<job>-config`
pub fn config_name(job: &str) -> String {
    format!("{job}-config")
}

/// `<job>-token`: the per-job Secret for the control channel.
pub fn secret_name(job: &str) -> String {
    format!("{job}-token")
}

/// `<job>-network`: the NetworkPolicy that admits only the job's own pods.
pub fn network_policy_name(job: &str) -> String {
    format!("{job}-network")
}

/// The pod name of a role's replica.
pub fn pod_name(job: &str, role: ReplicaType, index: i32) -> String {
    match role {
        ReplicaType::Launcher => launcher_name(job),
        ReplicaType::Partitioner => partitioner_name(job),
        ReplicaType::Worker => worker_name(job, index),
    }
}

/// The ServiceAccount / Role / RoleBinding name of a role that calls the API.
pub fn rbac_name(job: &str, role: ReplicaType) -> String {
    format!("{job}-{}", role.label_value())
}
