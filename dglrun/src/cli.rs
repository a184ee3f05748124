//! Command line. The flags of the example DGLJob (`--graph-name ...
//! --num-servers`, docs/runtime-design.md "dglrun's command line") plus what
//! dglrun needs to run in a pod or on plain machines. Every flag that the
//! operator sets has an environment fallback, so a pod template needs no
//! more than the example's arguments.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::{Args, Parser, Subcommand, ValueEnum};
use dgl_api::logging::LogFormat;
use dgl_api::names;
use dgl_api::wire::TrainSpec;
use dgl_api::{PartitionMode, ReplicaType};

use crate::channel::Token;
use crate::command::{Template, Value, Values};
use crate::dglenv;
use crate::distpart::{self, DistPartition};
use crate::hosts::{self, Peer};
use crate::launcher::LaunchConfig;
use crate::partition::PartitionConfig;
use crate::standalone::{self, StandaloneConfig};
use crate::training::TrainContext;
use crate::transfer::RetryPolicy;
use crate::worker::WorkerConfig;

/// The workflow runner inside a DGLJob's pods.
///
/// Without a subcommand the role comes from DGL_OPERATOR_PHASE_ENV
/// (Partitioner, Launcher or Worker), as the operator sets it; with a
/// subcommand dglrun runs that role directly, e.g. on machines without
/// Kubernetes:
///
///   dglrun partition --graph-name g --partition-entry-point partition.py --num-partitions 2
///   dglrun worker --listen 10.0.0.1 --index 0
///   dglrun launch --hostfile hosts.txt --partitioner 10.0.0.3 --graph-name g
///                 --train-entry-point train.py --num-epochs 3 --batch-size 1000 -- --lr 0.01
///
/// Arguments after `--` are appended to the training script's command line.
///
/// Or, as DGL's tools/launch.py takes them, the user's own command lines with
/// placeholders, run as written (nothing appended):
///
///   dglrun launch --hostfile hosts.txt --graph-name g --num-trainers 1 --num-servers 1
///     --train-command "python3 train.py --graph_name {graph_name} --ip_config {ip_config}"
///
/// With no workers (--num-partitions 0, a job with only a Launcher) the
/// launcher runs the training itself as one local process.
#[derive(Parser, Debug)]
#[command(
    name = "dglrun",
    version,
    verbatim_doc_comment,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub opts: Options,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the partition entry point, check its output, then serve the shards
    /// to the workers (role Partitioner).
    Partition(Options),
    /// Wait for the partitioner and the workers, ship every worker its shard,
    /// start the training everywhere and follow it (role Launcher).
    Launch(Options),
    /// Agent of one machine: receive the shard, run the DGL servers and the
    /// trainers when the launcher says so (role Worker).
    Worker(Options),
    /// Readiness check for an exec probe: exit 0 when the local agent answers
    /// an authenticated ping.
    Probe(ProbeArgs),
    /// mpirun's remote agent (partition mode DistParMETIS, instead of ssh):
    /// run MPI's daemon on worker HOST through its agent, relay its output,
    /// exit with its status. Used as `--mca plm_rsh_agent "dglrun rsh"`.
    Rsh(crate::rsh::RshArgs),
}

/// All flags; the headings say which role reads them.
#[derive(Args, Debug, Clone)]
pub struct Options {
    #[command(flatten)]
    pub job: JobArgs,
    #[command(flatten)]
    pub native: NativeArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    #[command(flatten)]
    pub launch: LaunchArgs,
    #[command(flatten)]
    pub worker: WorkerArgs,
    #[command(flatten)]
    pub timeouts: crate::channel::Timeouts,
    /// Extra arguments for the training script (after `--`).
    #[arg(last = true, value_name = "TRAIN_ARGS")]
    pub extra: Vec<String>,
}

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Job (the example DGLJob's command line)")]
pub struct JobArgs {
    /// Graph name: the partition JSON is <workspace>/dataset/<NAME>.json.
    #[arg(long, env = "DGLRUN_GRAPH_NAME", value_name = "NAME")]
    pub graph_name: Option<String>,
    /// Partition script, run by the partitioner as
    /// `<python> <FILE> --graph_name G --workspace W --rel_data_path dataset --num_parts N
    /// [--balance_train] [--balance_edges] [<--partition-arg>...]`.
    #[arg(long, env = "DGLRUN_PARTITION_ENTRY_POINT", value_name = "FILE")]
    pub partition_entry_point: Option<String>,
    /// The partition command as the user runs it by hand (DGL's own
    /// examples' way), as ONE string, instead of --partition-entry-point;
    /// run as written, with placeholders filled and nothing appended, e.g.
    /// "python3 partition_graph.py --dataset {graph_name} --num_parts
    /// {num_parts} --output {dataset_dir}". DGL-API mode: it must write
    /// {part_config} and {dataset_dir}/part<i>/; ParMETIS mode: it is the
    /// loader writing {chunked_dir}/metadata.json. Placeholders:
    /// {graph_name} {workspace} {num_parts} {dataset_dir} {part_config}
    /// {chunked_dir}; {{ and }} are literal braces; any other name is an
    /// error. Split into words as a shell would (quotes, backslashes), never
    /// run by a shell.
    #[arg(
        long,
        env = "DGLRUN_PARTITION_COMMAND",
        value_name = "COMMAND",
        conflicts_with_all = ["partition_entry_point", "partition_args"],
        verbatim_doc_comment
    )]
    pub partition_command: Option<String>,
    /// Number of partitions; must equal the number of workers. 0 (a job
    /// without workers): the launcher runs the training itself, as one local
    /// process without DGL's distributed environment.
    #[arg(long, env = names::ENV_NUM_WORKERS, value_name = "N")]
    pub num_partitions: Option<u32>,
    /// Pass --balance_train to the partition script.
    #[arg(long)]
    pub balance_train: bool,
    /// Pass --balance_edges to the partition script.
    #[arg(long)]
    pub balance_edges: bool,
    /// Training script, run on every worker as
    /// `<python> <FILE> --graph_name G --ip_config F --part_config J --num_epochs E
    /// --batch_size B --num_workers S [TRAIN_ARGS...]` for the DGL servers and
    /// through `python -m torch.distributed.run` for the trainers.
    #[arg(long, env = "DGLRUN_TRAIN_ENTRY_POINT", value_name = "FILE")]
    pub train_entry_point: Option<String>,
    /// The training command as DGL's tools/launch.py takes it: the user's
    /// whole command line as ONE string, instead of --train-entry-point, e.g.
    /// "python3 train.py --graph_name {graph_name} --ip_config {ip_config}
    /// --num_epochs 30". Every worker runs it as written, placeholders filled
    /// and nothing appended: the DGL servers as is, the trainers as
    /// `<python> -m torch.distributed.run <its options> <the rest>` (so it
    /// starts with the interpreter, then the script or `-m module`). DGL's
    /// environment (DGL_IP_CONFIG, DGL_CONF_PATH, DGL_NUM_SERVER,
    /// DGL_NUM_SAMPLER, DGL_ROLE, ...) is set as with --train-entry-point.
    /// Placeholders: {ip_config} {part_config} {graph_name} {workspace}
    /// {num_trainers} {num_samplers} {num_servers} {num_machines}
    /// {machine_rank}, and {num_epochs} {batch_size} when those flags are
    /// given; {{ and }} are literal braces; any other name is an error.
    /// Split into words as a shell would (quotes, backslashes), never run by
    /// a shell.
    #[arg(
        long,
        env = "DGLRUN_TRAIN_COMMAND",
        value_name = "COMMAND",
        conflicts_with_all = ["train_entry_point", "extra"],
        verbatim_doc_comment
    )]
    pub train_command: Option<String>,
    /// Training epochs (--num_epochs of the training script).
    #[arg(long, env = "DGLRUN_NUM_EPOCHS", value_name = "N")]
    pub num_epochs: Option<u32>,
    /// Mini-batch size (--batch_size of the training script; with
    /// --train-command only the value of {batch_size}).
    #[arg(long, env = "DGLRUN_BATCH_SIZE", value_name = "N")]
    pub batch_size: Option<u32>,
    /// Trainer processes per worker [default: the hostfile's slots=, else 1].
    #[arg(long, env = "DGLRUN_NUM_TRAINERS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub num_trainers: Option<u32>,
    /// Sampler processes per trainer (DGL_NUM_SAMPLER, --num_workers of the script).
    #[arg(
        long,
        env = "DGLRUN_NUM_SAMPLERS",
        value_name = "N",
        default_value_t = 0
    )]
    pub num_samplers: u32,
    /// DGL server processes per worker.
    #[arg(long, env = "DGLRUN_NUM_SERVERS", value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub num_servers: u32,
    /// How the graph is partitioned: DGL-API (a partitioner runs the
    /// partition script), ParMETIS (a partitioner runs the native pipeline
    /// on all its cores, see "Native partition pipeline"), DistParMETIS (no
    /// partitioner: the launcher runs mpirun with one `dgl-partition rank`
    /// per worker, each worker ends up holding its own partition) or Skip
    /// (the partitions already are in each worker's workspace).
    #[arg(long, env = names::ENV_PARTITION_MODE, value_name = "MODE", default_value = "DGL-API", value_parser = parse_mode)]
    pub partition_mode: PartitionMode,
    /// One extra argument for the partition script (repeat for several).
    #[arg(long = "partition-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub partition_args: Vec<String>,
    /// Train on GraphBolt partitions (DGL 2.1.0's distributed GraphBolt):
    /// the partition script (seed convention) gets --use_graphbolt, and
    /// partitions still in DGL's format are converted with DGL's
    /// dgl_partition_to_graphbolt (the partitioner: all of them; a Skip-mode
    /// worker: when its workspace holds every partition); each worker gets
    /// fused_csc_sampling_graph.pt instead of graph.dgl; the training script
    /// gets --use_graphbolt (seed convention) or {use_graphbolt} = true.
    /// Refused with DistParMETIS and without workers (DGL has no standalone
    /// GraphBolt). DGL 2.1.0 refuses in the script itself: sampling with
    /// replace or prob, outbound edges (edge_dir="out") and find_edges
    /// (edge data loaders).
    #[arg(long, env = names::ENV_USE_GRAPHBOLT, verbatim_doc_comment)]
    pub use_graphbolt: bool,
}

/// The native partition pipeline (partition mode ParMETIS). Its input is
/// DGL's chunked graph format or the text format of
/// docs/partition-pipeline.md; its output the partitions DGL 2.1.0 loads, in
/// <workspace>/dataset. In this mode the
/// partition entry point, if given, is a loader run first as
/// `<python> <FILE> --graph_name G --workspace W --rel_data_path chunked
/// --num_parts N [--balance_train] [--balance_edges] [<--partition-arg>...]`
/// that writes the chunked graph to <workspace>/chunked/metadata.json.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Native partition pipeline (partition modes ParMETIS, DistParMETIS)")]
pub struct NativeArgs {
    /// The chunked graph's metadata.json (or its folder)
    /// [default: <workspace>/chunked/metadata.json].
    #[arg(
        long,
        env = "DGLRUN_PARTITION_INPUT",
        value_name = "PATH",
        conflicts_with = "text_nodes"
    )]
    pub partition_input: Option<PathBuf>,
    /// Input in the text format instead (docs/partition-pipeline.md): the xxx_nodes.txt file
    /// (`<node_type> <weights...> <type-wise node id> <attributes...>` per line).
    #[arg(long, value_name = "FILE", requires = "text_edges")]
    pub text_nodes: Option<PathBuf>,
    /// The text format's xxx_edges.txt file
    /// (`<src id> <dst id> <type-wise edge id> <edge_type> <attributes...>` per line).
    #[arg(long, value_name = "FILE", requires = "text_nodes")]
    pub text_edges: Option<PathBuf>,
    /// The text format's schema JSON naming the node and edge types
    /// (`{"nid": {ntype: [start, end]}, "eid": {etype: [start, end]}}`).
    #[arg(long, value_name = "FILE", requires = "text_nodes")]
    pub text_schema: Option<PathBuf>,
    /// The text format's removed-edges file (self loops and duplicates set
    /// aside by the preprocessing; same columns as the edges file).
    #[arg(long, value_name = "FILE", requires = "text_nodes")]
    pub text_removed_edges: Option<PathBuf>,
    /// Weight columns per line of the text format's nodes file.
    #[arg(long, value_name = "K", default_value_t = 0, requires = "text_nodes")]
    pub num_node_weights: usize,
    /// How nodes are assigned to partitions: metis (multilevel k-way with
    /// the balance constraints of --balance-train / --balance-edges),
    /// random, or file (a DGL assignment: <ntype>.txt + partition_meta.json
    /// in --assignment-dir).
    /// (DGL's `part_method`.)
    #[arg(long, env = "DGLRUN_PART_METHOD", value_enum, default_value_t = PartitionerKind::Metis)]
    pub part_method: PartitionerKind,
    /// Folder of the assignment files for --part-method file.
    #[arg(long, value_name = "DIR", required_if_eq("part_method", "file"))]
    pub assignment_dir: Option<PathBuf>,
    /// Node feature that marks training nodes, balanced by --balance-train.
    #[arg(long, value_name = "NAME", default_value = "train_mask")]
    pub train_mask: String,
    /// Threads of the pipeline [default: the CPUs this process may use,
    /// honouring the pod's CPU limit].
    #[arg(long, env = "DGLRUN_PARTITION_THREADS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub partition_threads: Option<u32>,
    /// Seed of the random choices (random partitioner, METIS).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub partition_seed: u64,
}

/// The chunked graph's description file (DGL's name).
const CHUNKED_METADATA: &str = "metadata.json";

/// The partitioners of the native pipeline.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionerKind {
    Metis,
    Random,
    File,
}

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Runtime (every role)")]
pub struct RuntimeArgs {
    /// Working directory; partitions live in <DIR>/dataset.
    #[arg(long, env = "DGLRUN_WORKSPACE", value_name = "DIR", default_value = names::WORKSPACE)]
    pub workspace: PathBuf,
    /// Python interpreter for the user's scripts.
    #[arg(
        long,
        env = "DGLRUN_PYTHON",
        value_name = "PATH",
        default_value = "python3"
    )]
    pub python: String,
    /// File holding the job's secret token for the control channel.
    #[arg(long, env = names::ENV_TOKEN_FILE, value_name = "FILE", default_value_t = default_token_file())]
    pub token_file: String,
    /// Port of the authenticated agent channel (partitioner and workers listen on it).
    #[arg(long, env = "DGLRUN_AGENT_PORT", value_name = "PORT", default_value_t = names::AGENT_PORT)]
    pub agent_port: u16,
    /// Address the agent listens on; for a worker also its machine IP
    /// (must be its line in ip_config). Default: all addresses.
    #[arg(long, env = names::ENV_POD_IP, value_name = "IP")]
    pub listen: Option<IpAddr>,
    /// Directory of the job's ConfigMap (hostfile, partfile, ip_config).
    #[arg(long, env = names::ENV_CONFIG_DIR, value_name = "DIR", default_value = names::CONFIG_DIR)]
    pub config_dir: PathBuf,
    /// Seconds between SIGTERM and SIGKILL when stopping processes.
    #[arg(
        long,
        env = "DGLRUN_STOP_GRACE",
        value_name = "SECONDS",
        default_value_t = 10
    )]
    pub stop_grace: u64,
    /// Log format of dglrun's own messages (stderr); process output goes to stdout.
    #[arg(long, env = "DGLRUN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Partitioner: exit after checking the partitions instead of serving them.
    #[arg(long)]
    pub no_serve: bool,
}

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Launcher")]
pub struct LaunchArgs {
    /// Workers in partition order: the operator's hostfile (`<ip> <port> <pod>
    /// [slots=<n>]`) or one IP per line [default: <config-dir>/hostfile].
    #[arg(long, value_name = "FILE")]
    pub hostfile: Option<PathBuf>,
    /// Partitioner agent as IP or IP:PORT [default: from <config-dir>/partfile].
    #[arg(long, value_name = "ADDR")]
    pub partitioner: Option<String>,
    /// DGL ip_config to use [default: <config-dir>/ip_config if it exists, else
    /// generated from the hostfile's IPs and --dgl-port].
    #[arg(long, value_name = "FILE")]
    pub ip_config: Option<PathBuf>,
    /// DGL server base port, used when ip_config is generated.
    #[arg(long, value_name = "PORT", default_value_t = names::DGL_SERVER_PORT)]
    pub dgl_port: u16,
    /// torch.distributed rendezvous port on worker 0.
    #[arg(
        long,
        env = "DGLRUN_MASTER_PORT",
        value_name = "PORT",
        default_value_t = 29500
    )]
    pub master_port: u16,
    /// Seconds to wait for the partitioner and the workers to answer.
    #[arg(
        long,
        env = "DGLRUN_WAIT_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = 600
    )]
    pub wait_timeout: u64,
    /// Attempts per shard file before a transfer fails.
    #[arg(long, value_name = "N", default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..))]
    pub transfer_attempts: u32,
    /// Partition mode DistParMETIS: the network of MPI's traffic (OpenMPI's
    /// oob/btl_tcp_if_include): a CIDR or an interface name; `auto` takes
    /// the network of the interface holding the launcher's IP when every
    /// worker is in it (else lets OpenMPI choose); `all` lets OpenMPI choose.
    #[arg(
        long,
        env = "DGLRUN_MPI_IF_INCLUDE",
        value_name = "CIDR|IFACE|auto|all",
        default_value = "auto"
    )]
    pub mpi_if_include: String,
    /// Partition mode DistParMETIS: the mpirun program (OpenMPI 4).
    #[arg(
        long,
        env = "DGLRUN_MPIRUN",
        value_name = "PATH",
        default_value = "mpirun"
    )]
    pub mpirun: String,
    /// Partition mode DistParMETIS: the rank program as the workers find it
    /// (dgl-partition built with MPI, in the image).
    #[arg(
        long,
        env = "DGLRUN_DGL_PARTITION",
        value_name = "PATH",
        default_value = "dgl-partition"
    )]
    pub dgl_partition: String,
    /// The launcher's state folder: it writes the file `partitioned` there
    /// once the workers hold their partitions (DistParMETIS), which
    /// `dglrun probe --partitioned` checks.
    #[arg(long, env = "DGLRUN_STATE_DIR", value_name = "DIR", default_value = names::LAUNCHER_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Seconds between two publications of the training's progress (its
    /// `DGLRUN_PROGRESS` lines) as an annotation on the launcher's own pod,
    /// which the operator shows in the job's status; 0 publishes nothing.
    /// Only in a pod (the operator's downward-API env and service account).
    #[arg(
        long,
        env = "DGLRUN_PROGRESS_INTERVAL",
        value_name = "SECONDS",
        default_value_t = 5
    )]
    pub progress_interval: u64,
}

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Worker")]
pub struct WorkerArgs {
    /// This worker's index = partition id = line in ip_config [default: the
    /// launcher's order].
    #[arg(long, env = names::ENV_WORKER_INDEX, value_name = "I")]
    pub index: Option<u32>,
    /// Shared-memory mount the DGL servers load the partition into; checked
    /// for free space before the servers start.
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub shm_path: PathBuf,
    /// Seconds to wait for the DGL servers to listen.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub server_start_timeout: u64,
    /// OMP_NUM_THREADS of the trainers [default: CPUs / trainers, at least 1].
    #[arg(long, value_name = "N")]
    pub num_omp_threads: Option<u32>,
}

#[derive(Args, Debug, Clone)]
pub struct ProbeArgs {
    /// Check readiness: the agent is up and (partitioner) serves checked
    /// partitions. This is the only check, so the flag may be left out.
    #[arg(long)]
    pub ready: bool,
    /// Instead: check that the launcher has seen the graph partitioned
    /// (partition mode DistParMETIS): its file <state-dir>/partitioned
    /// exists. Needs no agent and no token.
    #[arg(long, conflicts_with = "ready")]
    pub partitioned: bool,
    /// Agent to ask [default: 127.0.0.1 or --listen, at --agent-port].
    #[arg(long, value_name = "IP:PORT")]
    pub addr: Option<std::net::SocketAddr>,
    /// Seconds before the probe fails.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub timeout: u64,
    #[command(flatten)]
    pub opts: Options,
}

fn default_token_file() -> String {
    format!("{}/{}", names::SECRET_DIR, names::SECRET_TOKEN_KEY)
}

/// Parses a partition mode with the API's own spelling.
fn parse_mode(s: &str) -> Result<PartitionMode, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
        format!("unknown partition mode {s:?}; expected DGL-API, ParMETIS, DistParMETIS or Skip")
    })
}

/// The role to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Partitioner,
    Launcher,
    Worker,
    Probe,
}

/// Role from DGL_OPERATOR_PHASE_ENV: a replica type's name, any case
/// (docs/runtime-design.md, "Pods and order").
pub fn role_from_env(value: Option<&str>) -> Result<Role, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Err(format!(
            "no role: give a subcommand (partition, launch, worker, probe) or set {}",
            names::ENV_ROLE
        ));
    };
    match ReplicaType::ALL
        .into_iter()
        .find(|r| r.as_str().eq_ignore_ascii_case(v))
    {
        Some(ReplicaType::Partitioner) => Ok(Role::Partitioner),
        Some(ReplicaType::Launcher) => Ok(Role::Launcher),
        Some(ReplicaType::Worker) => Ok(Role::Worker),
        None => Err(format!(
            "{}={v:?} is not a role; expected Partitioner, Launcher or Worker",
            names::ENV_ROLE
        )),
    }
}

/// The native pipeline's settings from the options: input (chunked by
/// default at <workspace>/chunked/metadata.json, or the text format), output
/// <workspace>/dataset, partitioner, balance, threads.
fn native_config(opts: &Options, graph_name: &str, num_parts: u32) -> dgl_partition::run::Config {
    use dgl_partition::input::{Source, TextSource};
    use dgl_partition::model::DType;
    use dgl_partition::run::Choice;
    let n = &opts.native;
    let ws = &opts.runtime.workspace;
    let source = match (&n.text_nodes, &n.text_edges) {
        (Some(nodes), Some(edges)) => Source::Text(TextSource {
            nodes: nodes.clone(),
            edges: edges.clone(),
            removed_edges: n.text_removed_edges.clone(),
            schema: n.text_schema.clone(),
            num_node_weights: n.num_node_weights,
            node_attr_dtype: DType::F32,
            edge_attr_dtype: DType::F32,
        }),
        // The default folder may not exist yet: the loader writes it.
        _ => Source::Chunked {
            metadata: match &n.partition_input {
                Some(p) if p.is_dir() => p.join(CHUNKED_METADATA),
                Some(p) => p.clone(),
                None => ws.join(names::CHUNKED_DIR).join(CHUNKED_METADATA),
            },
        },
    };
    let partitioner = match n.part_method {
        PartitionerKind::Metis => Choice::Metis,
        PartitionerKind::Random => Choice::Random,
        PartitionerKind::File => Choice::File(n.assignment_dir.clone().unwrap_or_default()),
    };
    let threads = n
        .partition_threads
        .map(|t| t as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()));
    dgl_partition::run::Config {
        source,
        out_dir: ws.join(names::DATASET_DIR),
        graph_name: graph_name.to_string(),
        num_parts,
        partitioner,
        balance_train: opts.job.balance_train.then(|| n.train_mask.clone()),
        balance_edges: opts.job.balance_edges,
        threads,
        seed: n.partition_seed,
        python: opts.runtime.python.clone(),
    }
}

impl Options {
    pub fn stop_grace(&self) -> Duration {
        Duration::from_secs(self.runtime.stop_grace)
    }

    /// The graph name, or an error naming the flag.
    pub fn graph_name(&self) -> Result<&str, String> {
        self.job
            .graph_name
            .as_deref()
            .ok_or_else(|| "--graph-name is required".to_string())
    }

    /// The marker file of `dglrun probe --partitioned`.
    pub fn partitioned_marker(&self) -> PathBuf {
        self.launch.state_dir.join(names::PARTITIONED_MARKER)
    }
}

/// A flag the role cannot do without.
fn required<'a, T>(v: &'a Option<T>, flag: &str, role: &str) -> anyhow::Result<&'a T> {
    v.as_ref()
        .ok_or_else(|| anyhow!("{flag} is required for the {role}"))
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

impl Options {
    /// The job's token, from --token-file.
    pub fn token(&self) -> anyhow::Result<Token> {
        Ok(Token::from_file(Path::new(&self.runtime.token_file))?)
    }

    /// Where the agent listens: --listen (default: every address) at --agent-port.
    pub fn agent_addr(&self) -> SocketAddr {
        SocketAddr::new(
            self.runtime
                .listen
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            self.runtime.agent_port,
        )
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.launch.transfer_attempts,
            idle_timeout: self.timeouts.peer(),
            ..RetryPolicy::default()
        }
    }
}

/// The partitioner's settings from the options. `job_workers` is the job's
/// worker count as the operator states it in a pod (ENV_NUM_WORKERS), if
/// set: partitions for another count would only fail later, at the launcher.
pub fn partition_config(
    opts: &Options,
    job_workers: Option<&str>,
) -> anyhow::Result<PartitionConfig> {
    match opts.job.partition_mode {
        PartitionMode::Skip => bail!("partition mode Skip has no partitioner: the partitions must already be in each worker's workspace"),
        PartitionMode::DistParMetis => bail!("partition mode DistParMETIS has no partitioner: the launcher runs one partition rank per worker (mpirun)"),
        _ => {}
    }
    let native = opts.job.partition_mode.is_native();
    let user_command = opts.job.partition_command.is_some();
    let entry_point = if native || user_command {
        opts.job.partition_entry_point.clone()
    } else {
        Some(
            required(
                &opts.job.partition_entry_point,
                "--partition-entry-point (or --partition-command)",
                "partitioner",
            )?
            .clone(),
        )
    };
    let graph_name = opts.graph_name().map_err(|e| anyhow!(e))?.to_string();
    let num_parts = *required(&opts.job.num_partitions, "--num-partitions", "partitioner")?;
    check_worker_count(num_parts, job_workers)?;
    if num_parts == 0 {
        bail!("--num-partitions must be at least 1");
    }
    let command = match &opts.job.partition_command {
        Some(line) => Some(partition_words(opts, line, &graph_name, num_parts)?),
        None => None,
    };
    Ok(PartitionConfig {
        python: opts.runtime.python.clone(),
        entry_point,
        command,
        native: native.then(|| native_config(opts, &graph_name, num_parts)),
        graph_name,
        num_parts,
        balance_train: opts.job.balance_train,
        balance_edges: opts.job.balance_edges,
        workspace: opts.runtime.workspace.clone(),
        extra_args: opts.job.partition_args.clone(),
        stop_grace: opts.stop_grace(),
        use_graphbolt: opts.job.use_graphbolt,
    })
}

/// The placeholders of a partition command and their values.
pub fn partition_values(workspace: &Path, graph_name: &str, num_parts: u32) -> Values {
    let dataset = workspace.join(names::DATASET_DIR);
    vec![
        ("graph_name", Value::of(graph_name)),
        ("workspace", Value::of(workspace.display())),
        ("num_parts", Value::of(num_parts)),
        ("dataset_dir", Value::of(dataset.display())),
        (
            "part_config",
            Value::of(dataset.join(format!("{graph_name}.json")).display()),
        ),
        (
            "chunked_dir",
            Value::of(workspace.join(names::CHUNKED_DIR).display()),
        ),
    ]
}

/// --partition-command, split and filled. In DGL-API mode the balance flags
/// would be silently lost: the user writes them into the command instead.
fn partition_words(
    opts: &Options,
    line: &str,
    graph_name: &str,
    num_parts: u32,
) -> anyhow::Result<Vec<String>> {
    let native = opts.job.partition_mode.is_native();
    if !native && (opts.job.balance_train || opts.job.balance_edges) {
        bail!("--balance-train and --balance-edges add nothing to --partition-command (nothing is appended to it): write the partition script's own flags into the command");
    }
    let template = Template::parse(PARTITION_COMMAND_FLAG, line)?;
    let values = partition_values(&opts.runtime.workspace, graph_name, num_parts);
    Ok(template.fill(&values)?)
}

/// The flag of the launch.py convention's partition command.
pub const PARTITION_COMMAND_FLAG: &str = "--partition-command";

/// DGL needs one partition per worker.
fn check_worker_count(num_parts: u32, job_workers: Option<&str>) -> anyhow::Result<()> {
    match job_workers.map(|w| w.trim().parse::<u32>()) {
        Some(Ok(workers)) if workers != num_parts => bail!(
            "--num-partitions is {num_parts} but the job has {workers} worker(s) ({}); DGL needs one partition per worker",
            names::ENV_NUM_WORKERS
        ),
        _ => Ok(()),
    }
}

/// The worker's settings from the options (reads the token).
pub fn worker_config(opts: &Options) -> anyhow::Result<WorkerConfig> {
    Ok(WorkerConfig {
        listen: opts.agent_addr().ip(),
        agent_port: opts.runtime.agent_port,
        token: opts.token()?,
        retry: opts.retry_policy(),
        timeouts: opts.timeouts,
        train: TrainContext {
            python: opts.runtime.python.clone(),
            workspace: opts.runtime.workspace.clone(),
            shm_path: opts.worker.shm_path.clone(),
            index: opts.worker.index,
            stop_grace: opts.stop_grace(),
            server_start_timeout: Duration::from_secs(opts.worker.server_start_timeout),
            server_exit_timeout: Duration::from_secs(120),
            omp_threads: opts.worker.num_omp_threads,
        },
        partition_mode: opts.job.partition_mode,
    })
}

/// The launcher's settings from the options and the files they name: the
/// workers (hostfile), the partitioner, DGL's ip_config, the token and, in
/// partition mode DistParMETIS, mpirun's.
pub fn launch_config(opts: &Options) -> anyhow::Result<LaunchConfig> {
    let graph_name = opts.graph_name().map_err(|e| anyhow!(e))?.to_string();
    let command = train_template(opts)?;
    // The seed's convention passes these to the script; launch.py's only
    // fills them into placeholders, when given (0: not given).
    let (entry_point, num_epochs, batch_size) = match &command {
        Some(_) => (
            String::new(),
            opts.job.num_epochs.unwrap_or(0),
            opts.job.batch_size.unwrap_or(0),
        ),
        None => (
            required(
                &opts.job.train_entry_point,
                "--train-entry-point (or --train-command)",
                "launcher",
            )?
            .clone(),
            *required(&opts.job.num_epochs, "--num-epochs", "launcher")?,
            *required(&opts.job.batch_size, "--batch-size", "launcher")?,
        ),
    };
    let (hostfile, workers) = launch_workers(opts)?;
    let partitioner = launch_partitioner(opts)?;
    let ip_config = launch_ip_config(opts, &workers)?;
    let num_trainers = opts
        .job
        .num_trainers
        .or_else(|| workers[0].slots)
        .unwrap_or(1);
    let dist_partition = (opts.job.partition_mode == PartitionMode::DistParMetis)
        .then(|| dist_partition(opts, &graph_name, &hostfile))
        .transpose()?;
    let spec = TrainSpec {
        graph_name,
        entry_point,
        num_epochs,
        batch_size,
        num_trainers,
        num_samplers: opts.job.num_samplers,
        num_servers: opts.job.num_servers,
        machine_rank: 0,
        ip_config,
        master_port: opts.launch.master_port,
        extra_args: opts.extra.clone(),
        command: command.map(|t| t.words),
        use_graphbolt: opts.job.use_graphbolt,
    };
    check_graphbolt(opts)?;
    check_train_command(opts, &spec, workers.len() as u32)?;
    Ok(LaunchConfig {
        spec,
        workers,
        partitioner,
        token: opts.token()?,
        wait_timeout: Duration::from_secs(opts.launch.wait_timeout),
        peer_timeout: opts.timeouts.peer(),
        stop_grace: opts.stop_grace(),
        dist_partition,
        progress_interval: Duration::from_secs(opts.launch.progress_interval),
    })
}

/// What DGL 2.1.0's GraphBolt cannot be given, refused before any worker
/// starts (the operator's validation says the same for a DGLJob).
fn check_graphbolt(opts: &Options) -> anyhow::Result<()> {
    if !opts.job.use_graphbolt {
        return Ok(());
    }
    if opts.job.partition_mode == PartitionMode::DistParMetis {
        bail!("--use-graphbolt is not supported with partition mode DistParMETIS: each worker holds only its own partition and DGL 2.1.0's converter (dgl_partition_to_graphbolt) needs all of them; use ParMETIS, DGL-API or Skip");
    }
    if is_standalone(opts) {
        bail!("--use-graphbolt needs workers (--num-partitions 0 trains in standalone mode, where DGL 2.1.0 has no GraphBolt: dist_graph.py falls back to DGLGraph)");
    }
    Ok(())
}

/// --train-command, split into words.
fn train_template(opts: &Options) -> anyhow::Result<Option<Template>> {
    let Some(line) = &opts.job.train_command else {
        return Ok(None);
    };
    Ok(Some(Template::parse(dglenv::TRAIN_COMMAND_FLAG, line)?))
}

/// Refuses a training command a worker could not fill (an unknown
/// placeholder, {num_epochs} without --num-epochs, no interpreter) before
/// any worker is started, with this launcher's workspace for the paths.
fn check_train_command(opts: &Options, spec: &TrainSpec, machines: u32) -> anyhow::Result<()> {
    if spec.command.is_none() {
        return Ok(());
    }
    let ws = &opts.runtime.workspace;
    let paths = dglenv::Paths {
        workspace: ws,
        ip_config: &ws.join(names::IP_CONFIG),
        part_config: &ws
            .join(names::DATASET_DIR)
            .join(format!("{}.json", spec.graph_name)),
        num_machines: machines,
    };
    dglenv::user_command(spec, &opts.runtime.python, paths)?;
    Ok(())
}

/// A job without workers (--num-partitions 0): the launcher's one local
/// process.
pub fn standalone_config(opts: &Options) -> anyhow::Result<StandaloneConfig> {
    check_graphbolt(opts)?;
    let template = train_template(opts)?;
    let values = standalone::values(
        &opts.runtime.workspace,
        opts.job.graph_name.as_deref(),
        opts.job.num_epochs,
        opts.job.batch_size,
    );
    let spec = standalone::process(
        &opts.runtime.python,
        opts.job.train_entry_point.as_deref(),
        &opts.extra,
        template.as_ref().map(|t| (t, &values)),
    )
    .map_err(|e| anyhow!(e))?;
    Ok(StandaloneConfig {
        spec,
        stop_grace: opts.stop_grace(),
        progress_interval: Duration::from_secs(opts.launch.progress_interval),
    })
}

/// Whether the job has no workers: the launcher runs the training itself.
pub fn is_standalone(opts: &Options) -> bool {
    opts.job.num_partitions == Some(0)
}

/// The hostfile (--hostfile, else the ConfigMap's) and its workers, as many
/// as --num-partitions says when given.
fn launch_workers(opts: &Options) -> anyhow::Result<(PathBuf, Vec<Peer>)> {
    let hostfile = opts
        .launch
        .hostfile
        .clone()
        .unwrap_or_else(|| opts.runtime.config_dir.join(names::HOSTFILE));
    let workers = hosts::parse_hostfile(
        &hostfile.display().to_string(),
        &read(&hostfile)?,
        opts.runtime.agent_port,
    )?;
    if let Some(p) = opts.job.num_partitions {
        if p as usize != workers.len() {
            bail!(
                "--num-partitions is {p} but {} lists {} worker(s); DGL needs one partition per worker",
                hostfile.display(),
                workers.len()
            );
        }
    }
    Ok((hostfile, workers))
}

/// The partitioner's agent: --partitioner, else the ConfigMap's partfile;
/// none in partition modes Skip and DistParMETIS.
fn launch_partitioner(opts: &Options) -> anyhow::Result<Option<SocketAddr>> {
    if matches!(
        opts.job.partition_mode,
        PartitionMode::Skip | PartitionMode::DistParMetis
    ) {
        return Ok(None);
    }
    let addr = match &opts.launch.partitioner {
        Some(a) => hosts::parse_addr(a, opts.runtime.agent_port)
            .map_err(|e| anyhow!("--partitioner: {e}"))?,
        None => {
            let f = opts.runtime.config_dir.join(names::PARTFILE);
            hosts::parse_partfile(&f.display().to_string(), &read(&f)?)?
        }
    };
    Ok(Some(addr))
}

/// DGL's ip_config: --ip-config, else the ConfigMap's when it has one
/// (either checked against the workers), else made from the workers' IPs
/// and --dgl-port.
fn launch_ip_config(opts: &Options, workers: &[Peer]) -> anyhow::Result<String> {
    let file = opts.launch.ip_config.clone().or_else(|| {
        let f = opts.runtime.config_dir.join(names::IP_CONFIG);
        f.is_file().then_some(f)
    });
    Ok(match file {
        Some(f) => {
            let content = read(&f)?;
            hosts::check_ip_config(&f.display().to_string(), &content, workers)?;
            content
        }
        None => dgl_api::files::render_ip_config(
            &workers
                .iter()
                .map(|w| (w.ip, opts.launch.dgl_port))
                .collect::<Vec<_>>(),
        ),
    })
}

/// Partition mode DistParMETIS: mpirun of `dgl-partition rank` on the
/// workers, through `dglrun rsh` (this binary) with the launcher's token,
/// agent port and hostfile.
fn dist_partition(
    opts: &Options,
    graph_name: &str,
    hostfile: &Path,
) -> anyhow::Result<DistPartition> {
    let program = distpart::rank_program(opts, &opts.launch.dgl_partition, graph_name)
        .map_err(|e| anyhow!(e))?;
    let dglrun = std::env::current_exe().context("cannot find the dglrun binary")?;
    let env = [
        (names::ENV_TOKEN_FILE, opts.runtime.token_file.clone()),
        ("DGLRUN_AGENT_PORT", opts.runtime.agent_port.to_string()),
        ("DGLRUN_RSH_HOSTFILE", hostfile.display().to_string()),
    ];
    Ok(DistPartition {
        mpirun: opts.launch.mpirun.clone(),
        dglrun: dglrun.display().to_string(),
        program,
        if_include: opts.launch.mpi_if_include.clone(),
        own_ip: opts.runtime.listen.filter(|ip| !ip.is_unspecified()),
        env: env.map(|(k, v)| (k.to_string(), v)).to_vec(),
        marker: opts.partitioned_marker(),
        stop_grace: opts.stop_grace(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_example_jobs_command_line_parses() {
        let cli = Cli::try_parse_from([
            "dglrun",
            "--graph-name",
            "graphsage",
            "--partition-entry-point",
            "code/load_and_partition_graph.py",
            "--num-partitions",
            "2",
            "--balance-train",
            "--balance-edges",
            "--train-entry-point",
            "code/train_dist.py",
            "--num-epochs",
            "1",
            "--batch-size",
            "1000",
            "--num-trainers",
            "1",
            "--num-samplers",
            "0",
            "--num-servers",
            "1",
            "--",
            "--lr",
            "0.1",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        let o = cli.opts;
        assert_eq!(o.graph_name().unwrap(), "graphsage");
        assert_eq!(o.job.num_partitions, Some(2));
        assert!(o.job.balance_train && o.job.balance_edges);
        assert_eq!(o.job.partition_mode, PartitionMode::DglApi);
        assert_eq!(o.extra, ["--lr", "0.1"]);
        assert_eq!(o.runtime.workspace, PathBuf::from(names::WORKSPACE));
    }

    #[test]
    fn subcommands_and_modes() {
        let cli = Cli::try_parse_from([
            "dglrun",
            "worker",
            "--listen",
            "10.0.0.1",
            "--index",
            "1",
            "--partition-mode",
            "DistParMETIS",
        ])
        .unwrap();
        let Some(Command::Worker(o)) = cli.command else {
            panic!("expected the worker subcommand")
        };
        assert_eq!(o.worker.index, Some(1));
        assert_eq!(o.job.partition_mode, PartitionMode::DistParMetis);
        assert_eq!(
            o.partitioned_marker(),
            PathBuf::from("/var/run/dglrun/partitioned")
        );
        let p = Cli::try_parse_from(["dglrun", "probe", "--partitioned", "--state-dir", "/s"]);
        let Some(Command::Probe(p)) = p.unwrap().command else {
            panic!("expected the probe subcommand")
        };
        assert!(p.partitioned);
        assert_eq!(p.opts.partitioned_marker(), PathBuf::from("/s/partitioned"));
        assert!(Cli::try_parse_from(["dglrun", "--partition-mode", "Metis"]).is_err());
    }

    #[test]
    fn role_comes_from_the_phase_env() {
        assert_eq!(role_from_env(Some("Partitioner")), Ok(Role::Partitioner));
        assert_eq!(role_from_env(Some("worker")), Ok(Role::Worker));
        assert!(role_from_env(Some("Trainer"))
            .unwrap_err()
            .contains("not a role"));
        assert!(role_from_env(None).unwrap_err().contains(names::ENV_ROLE));
    }

    /// Options as the command line `dglrun <args>` gives them.
    fn opts(args: &[&str]) -> Options {
        Cli::try_parse_from(["dglrun"].iter().chain(args))
            .unwrap()
            .opts
    }

    #[test]
    fn partition_config_checks_mode_flags_and_worker_count() {
        let skip = opts(&["--partition-mode", "Skip", "--num-partitions", "2"]);
        let e = partition_config(&skip, None).unwrap_err().to_string();
        assert!(e.contains("Skip has no partitioner"), "{e}");
        let e = partition_config(&opts(&["--graph-name", "g", "--num-partitions", "2"]), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--partition-entry-point (or --partition-command) is required"),
            "{e}"
        );
        let o = opts(&[
            "--graph-name",
            "g",
            "--partition-entry-point",
            "part.py",
            "--num-partitions",
            "2",
            "--balance-train",
            "--partition-arg",
            "--x",
        ]);
        let e = partition_config(&o, Some("3")).unwrap_err().to_string();
        assert!(e.contains("the job has 3 worker(s)"), "{e}");
        let cfg = partition_config(&o, Some(" 2\n")).unwrap();
        assert_eq!(cfg.entry_point.as_deref(), Some("part.py"));
        assert_eq!((cfg.graph_name.as_str(), cfg.num_parts), ("g", 2));
        assert!(cfg.balance_train && !cfg.balance_edges);
        assert_eq!(cfg.extra_args, ["--x"]);
        assert!(cfg.native.is_none());
        let zero = opts(&[
            "--graph-name",
            "g",
            "--partition-entry-point",
            "p.py",
            "--num-partitions",
            "0",
        ]);
        assert!(partition_config(&zero, None)
            .unwrap_err()
            .to_string()
            .contains("at least 1"));
        // ParMETIS: the entry point is an optional loader.
        let native = opts(&[
            "--partition-mode",
            "ParMETIS",
            "--graph-name",
            "g",
            "--num-partitions",
            "2",
        ]);
        let cfg = partition_config(&native, None).unwrap();
        assert!(cfg.entry_point.is_none());
        assert_eq!(cfg.native.unwrap().num_parts, 2);
    }

    /// A folder with a token file and a hostfile of two workers.
    fn launcher_files() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "secret\n").unwrap();
        std::fs::write(
            dir.path().join(names::HOSTFILE),
            "10.0.0.1 30049 j-worker-0 slots=3\n10.0.0.2 30049 j-worker-1 slots=3\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join(names::PARTFILE),
            "10.0.0.9 30049 j-partitioner\n",
        )
        .unwrap();
        dir
    }

    fn launcher_opts(dir: &Path, extra: &[&str]) -> Options {
        let d = dir.display().to_string();
        let token = dir.join("token").display().to_string();
        let mut args = vec![
            "--config-dir",
            &d,
            "--token-file",
            &token,
            "--graph-name",
            "g",
            "--train-entry-point",
            "train.py",
            "--num-epochs",
            "2",
            "--batch-size",
            "100",
        ];
        args.extend(extra);
        opts(&args)
    }

    #[test]
    fn launch_config_reads_the_configmaps_files() {
        let dir = launcher_files();
        let cfg = launch_config(&launcher_opts(dir.path(), &["--", "--lr", "0.1"])).unwrap();
        assert_eq!(cfg.workers.len(), 2);
        assert_eq!(cfg.partitioner, Some("10.0.0.9:30049".parse().unwrap()));
        assert_eq!(cfg.spec.ip_config, "10.0.0.1 30050\n10.0.0.2 30050\n");
        assert_eq!(cfg.spec.num_trainers, 3, "the hostfile's slots");
        assert_eq!(cfg.spec.extra_args, ["--lr", "0.1"]);
        assert!(cfg.dist_partition.is_none());
        // An ip_config in the ConfigMap is used, and checked.
        std::fs::write(dir.path().join(names::IP_CONFIG), "10.0.0.2\n10.0.0.1\n").unwrap();
        let e = launch_config(&launcher_opts(dir.path(), &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("partition order"), "{e}");
        std::fs::write(
            dir.path().join(names::IP_CONFIG),
            "10.0.0.1 40000\n10.0.0.2 40000\n",
        )
        .unwrap();
        let cfg = launch_config(&launcher_opts(dir.path(), &[])).unwrap();
        assert_eq!(cfg.spec.ip_config, "10.0.0.1 40000\n10.0.0.2 40000\n");
        let e = launch_config(&launcher_opts(dir.path(), &["--num-partitions", "3"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lists 2 worker(s)"), "{e}");
        // Skip: no partitioner, the partfile is not read.
        std::fs::remove_file(dir.path().join(names::PARTFILE)).unwrap();
        let skip = launcher_opts(
            dir.path(),
            &["--partition-mode", "Skip", "--num-trainers", "1"],
        );
        let cfg = launch_config(&skip).unwrap();
        assert_eq!((cfg.partitioner, cfg.spec.num_trainers), (None, 1));
        let e = launch_config(&launcher_opts(dir.path(), &[])).unwrap_err();
        assert!(format!("{e:#}").contains("cannot read"), "{e:#}");
    }

    #[test]
    fn use_graphbolt_is_sent_to_the_workers_or_refused_naming_the_option() {
        let dir = launcher_files();
        let cfg = launch_config(&launcher_opts(dir.path(), &["--use-graphbolt"])).unwrap();
        assert!(cfg.spec.use_graphbolt);
        let e = launch_config(&launcher_opts(
            dir.path(),
            &["--use-graphbolt", "--partition-mode", "DistParMETIS"],
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("--use-graphbolt is not supported with partition mode DistParMETIS"),
            "{e}"
        );
        let alone = opts(&[
            "--num-partitions",
            "0",
            "--use-graphbolt",
            "--train-entry-point",
            "t.py",
        ]);
        let e = standalone_config(&alone).unwrap_err().to_string();
        assert!(e.starts_with("--use-graphbolt needs workers"), "{e}");
    }

    #[test]
    fn a_train_command_is_checked_at_the_launcher_and_sent_unfilled() {
        let dir = launcher_files();
        let d = dir.path().display().to_string();
        let token = dir.path().join("token").display().to_string();
        let base = [
            "--config-dir",
            &d,
            "--token-file",
            &token,
            "--graph-name",
            "g",
        ];
        let with = |cmd: &str, more: &[&str]| {
            let mut a: Vec<&str> = base.to_vec();
            a.extend(["--train-command", cmd]);
            a.extend(more);
            Cli::try_parse_from(["dglrun"].iter().chain(&a)).map(|c| c.opts)
        };
        // Neither --num-epochs nor --batch-size is needed, nothing appended.
        let line =
            "python3 nc.py --graph_name {graph_name} --ip_config {ip_config} --num_epochs 30";
        let cfg = launch_config(&with(line, &[]).unwrap()).unwrap();
        let words = cfg.spec.command.as_deref().unwrap();
        assert_eq!(words.last().map(String::as_str), Some("30"));
        assert!(
            words.contains(&"{ip_config}".to_string()),
            "filled on the worker"
        );
        assert_eq!((cfg.spec.num_epochs, cfg.spec.batch_size), (0, 0));
        // Refused before any worker is contacted, naming flag and placeholder.
        for (cmd, want) in [
            (
                "python3 nc.py --x {ipconfig}",
                "--train-command: unknown placeholder {ipconfig}",
            ),
            (
                "python3 nc.py --e {num_epochs}",
                "--num-epochs was not given",
            ),
            ("python3 'nc.py", "a quote is not closed"),
            ("./run.sh", "must start with the Python interpreter"),
        ] {
            let e = launch_config(&with(cmd, &[]).unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{cmd}: {e}");
        }
        let o = with("python3 nc.py --e {num_epochs}", &["--num-epochs", "4"]).unwrap();
        assert!(launch_config(&o).is_ok());
        // One convention at a time.
        assert!(with(line, &["--train-entry-point", "t.py"]).is_err());
        assert!(with(line, &["--", "--lr", "0.1"]).is_err());
    }

    #[test]
    fn a_partition_command_is_filled_at_the_partitioner() {
        let o = opts(&[
            "--graph-name",
            "g",
            "--num-partitions",
            "2",
            "--workspace",
            "/ws",
            "--partition-command",
            "python3 partition_graph.py --dataset {graph_name} --num_parts {num_parts} --output {dataset_dir} --balance_train",
        ]);
        let cfg = partition_config(&o, None).unwrap();
        assert!(cfg.entry_point.is_none());
        let spec = crate::partition::user_command(cfg.command.as_deref().unwrap());
        assert_eq!(spec.program, "python3");
        assert_eq!(
            spec.args.join(" "),
            "partition_graph.py --dataset g --num_parts 2 --output /ws/dataset --balance_train"
        );
        let all =
            "p {graph_name} {workspace} {num_parts} {dataset_dir} {part_config} {chunked_dir}";
        let o = opts(&[
            "--graph-name",
            "g",
            "--num-partitions",
            "2",
            "--workspace",
            "/ws",
            "--partition-command",
            all,
        ]);
        let words = partition_config(&o, None).unwrap().command.unwrap();
        assert_eq!(
            words.join(" "),
            "p g /ws 2 /ws/dataset /ws/dataset/g.json /ws/chunked"
        );
        let bad = opts(&[
            "--graph-name",
            "g",
            "--num-partitions",
            "2",
            "--partition-command",
            "p {output}",
        ]);
        let e = partition_config(&bad, None).unwrap_err().to_string();
        assert!(
            e.starts_with("--partition-command: unknown placeholder {output}"),
            "{e}"
        );
        let balance = opts(&[
            "--graph-name",
            "g",
            "--num-partitions",
            "2",
            "--balance-train",
            "--partition-command",
            "p",
        ]);
        let e = partition_config(&balance, None).unwrap_err().to_string();
        assert!(e.contains("write the partition script's own flags"), "{e}");
        assert!(Cli::try_parse_from([
            "dglrun",
            "--partition-command",
            "p",
            "--partition-entry-point",
            "x.py"
        ])
        .is_err());
    }

    #[test]
    fn no_workers_means_the_launcher_trains_alone() {
        // The operator sets DGL_OPERATOR_NUM_WORKERS=0 for a job without workers.
        let o = opts(&[
            "--num-partitions",
            "0",
            "--train-entry-point",
            "code/nc.py",
            "--python",
            "/py",
        ]);
        assert!(is_standalone(&o));
        let cfg = standalone_config(&o).unwrap();
        assert_eq!(cfg.spec.program, "/py");
        assert_eq!(
            cfg.spec.args,
            ["code/nc.py"],
            "nothing appended (the seed's dglrun ran `python $TRAIN_ENTRY_POINT`)"
        );
        let o = opts(&[
            "--num-partitions",
            "0",
            "--train-command",
            "python3 nc.py --ip {ip_config}",
        ]);
        let e = standalone_config(&o).unwrap_err().to_string();
        assert!(e.contains("{ip_config} has no value here"), "{e}");
        assert!(!is_standalone(&opts(&["--num-partitions", "2"])));
    }

    #[test]
    fn worker_config_from_the_options() {
        let dir = launcher_files();
        let token = dir.path().join("token").display().to_string();
        let o = opts(&[
            "--token-file",
            &token,
            "--listen",
            "10.0.0.1",
            "--index",
            "1",
            "--transfer-attempts",
            "2",
        ]);
        let cfg = worker_config(&o).unwrap();
        assert_eq!(
            o.agent_addr(),
            SocketAddr::new(cfg.listen, names::AGENT_PORT)
        );
        assert_eq!(cfg.train.index, Some(1));
        assert_eq!(cfg.retry.max_attempts, 2);
        let e = worker_config(&opts(&["--token-file", "/nonexistent/token"])).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/token"), "{e}");
    }
}
