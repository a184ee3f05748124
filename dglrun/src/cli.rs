//! Command line. The flags of the example DGLJob (`--graph-name ...
//! --num-servers`, docs/runtime-design.md "dglrun's command line") plus what
//! dglrun needs to run in a pod or on plain machines. Every flag that the
//! operator sets has an environment fallback, so a pod template needs no
//! more than the example's arguments.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::anyhow;
use clap::{Args, Parser, Subcommand};
use dgl_api::duration;
use dgl_api::logging::LogFormat;
use dgl_api::names;
use dgl_api::wire::Run;
use dgl_api::{PartitionMode, ReplicaType};
use dgl_partition::settings::PartitionArgs;

use crate::net::channel::Token;
use crate::workers::Workers;

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
    Rsh(crate::mpi::rsh::RshArgs),
    /// How each DistParMETIS rank is started: run PROGRAM, and if a signal
    /// kills it, print the rank, this host and its memory limit for the launcher.
    RankGuard(crate::roles::distpart::guard::GuardArgs),
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
    pub timeouts: crate::net::channel::Timeouts,
    /// Extra arguments for the training script (after `--`).
    #[arg(last = true, value_name = "TRAIN_ARGS")]
    pub extra: Vec<String>,
}

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Job (the example DGLJob's command line)")]
pub struct JobArgs {
    /// Graph name: the partition JSON is <workspace>/dataset/<NAME>.json
    /// (so one file name: no '/', not "." or "..").
    #[arg(long, env = "DGLRUN_GRAPH_NAME", value_name = "NAME", value_parser = parse_graph_name)]
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
    #[arg(long, env = names::ENV_NUM_WORKERS, value_name = "N", value_parser = Workers::parse)]
    pub num_partitions: Option<Workers>,
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
    /// Input path, partitioner, threads and seed (shared with
    /// `dgl-partition rank`).
    #[command(flatten)]
    pub pipeline: PartitionArgs,
    /// Input in the text format instead (docs/partition-pipeline.md): the xxx_nodes.txt file
    /// (`<node_type> <weights...> <type-wise node id> <attributes...>` per line).
    #[arg(
        long,
        value_name = "FILE",
        requires = "text_edges",
        conflicts_with = "input"
    )]
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
    /// Node feature that marks training nodes, balanced by --balance-train.
    #[arg(long, value_name = "NAME", default_value = "train_mask")]
    pub train_mask: String,
    /// Partition once, train many (partition mode ParMETIS or DistParMETIS
    /// with a chunked --partition-input): s3://bucket/prefix where
    /// partitions are kept under a key of the input (metadata.json, each
    /// chunk's size and ETag), the settings, the mode and the worker count.
    /// The partitioner (ParMETIS) or each worker its own part (DistParMETIS,
    /// the launcher writing the manifest last) stores what was made there;
    /// a later job with the same key skips partitioning (no partitioner, no
    /// rank) and each worker downloads only its own part, checked by
    /// SHA-256. The operator sets it from spec.partitionCache.
    #[arg(long, env = names::ENV_PARTITION_CACHE, value_name = "URL")]
    pub partition_cache: Option<String>,
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
    /// This pod's run of the job (0, then +1 per restart; the operator sets
    /// it). Bound into the control channel's handshake: a peer of an older
    /// run is refused, so a process of an old run cannot act on a new one.
    #[arg(long, env = names::ENV_RUN, value_name = "N", default_value = "0")]
    pub run: Run,
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
    /// Seconds between SIGTERM and SIGKILL when stopping processes
    /// (capped at 1 year).
    #[arg(
        long,
        env = "DGLRUN_STOP_GRACE",
        value_name = "SECONDS",
        default_value_t = 10,
        value_parser = duration::parse_secs
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
    /// Seconds to wait for the partitioner and the workers to answer
    /// (capped at 1 year).
    #[arg(
        long,
        env = "DGLRUN_WAIT_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = 600,
        value_parser = duration::parse_secs
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
    /// The interval is capped at 1 year.
    #[arg(
        long,
        env = "DGLRUN_PROGRESS_INTERVAL",
        value_name = "SECONDS",
        default_value_t = 5,
        value_parser = duration::parse_secs
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
    /// Seconds to wait for the DGL servers to listen (capped at 1 year).
    #[arg(long, value_name = "SECONDS", default_value_t = 300, value_parser = duration::parse_secs)]
    pub server_start_timeout: u64,
    /// OMP_NUM_THREADS of the trainers [default: CPUs / trainers, at least 1].
    #[arg(long, value_name = "N")]
    pub num_omp_threads: Option<u32>,
    /// Seconds DGL's GraphBolt converter may run on this worker's partitions
    /// (partition mode Skip, --use-graphbolt) before it is killed and the
    /// shard fails, naming this flag (capped at 1 year).
    #[arg(long, env = "DGLRUN_GRAPHBOLT_CONVERT_TIMEOUT", value_name = "SECONDS", default_value_t = crate::dgl::graphbolt::CONVERT_TIMEOUT_SECS, value_parser = duration::parse_secs)]
    pub graphbolt_convert_timeout: u64,
    /// Seconds to wait for the dataset folder's GraphBolt conversion lock
    /// while another worker sharing the folder converts; the error names
    /// the lock file and its holder. Default: the converter's limit and a
    /// minute (capped at 1 year).
    #[arg(long, env = "DGLRUN_GRAPHBOLT_LOCK_TIMEOUT", value_name = "SECONDS", default_value_t = crate::dgl::graphbolt::LOCK_TIMEOUT_SECS, value_parser = duration::parse_secs)]
    pub graphbolt_lock_timeout: u64,
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
    /// Seconds before the probe fails (capped at 1 year).
    #[arg(long, value_name = "SECONDS", default_value_t = 5, value_parser = duration::parse_secs)]
    pub timeout: u64,
    #[command(flatten)]
    pub opts: Options,
}

fn default_token_file() -> String {
    format!("{}/{}", names::SECRET_DIR, names::SECRET_TOKEN_KEY)
}

/// Parses a partition mode with the API's own spelling.
/// A graph name becomes file names (`<NAME>.json`, the staging folder).
fn parse_graph_name(s: &str) -> Result<String, String> {
    use dgl_partition::names;
    names::check(s).map_err(|e| format!("found {e}; {}", names::EXPECTED))?;
    Ok(s.to_string())
}

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
    /// The launcher pod's first init container with spec.partitionCache.
    CacheLookup,
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
    if v.eq_ignore_ascii_case(names::ROLE_CACHE_LOOKUP) {
        return Ok(Role::CacheLookup);
    }
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

impl Options {
    pub fn stop_grace(&self) -> Duration {
        duration::secs(self.runtime.stop_grace)
    }

    /// The graph name, or an error naming the flag.
    pub fn graph_name(&self) -> Result<&str, String> {
        self.job
            .graph_name
            .as_deref()
            .ok_or_else(|| "--graph-name is required".to_string())
    }

    /// Whether the job has no workers: the launcher runs the training itself.
    pub fn is_standalone(&self) -> bool {
        self.job.num_partitions == Some(Workers::Standalone)
    }

    /// The marker file of `dglrun probe --partitioned`.
    pub fn partitioned_marker(&self) -> PathBuf {
        self.launch.state_dir.join(names::PARTITIONED_MARKER)
    }
}

/// A flag the role cannot do without.
pub(crate) fn required<'a, T>(v: &'a Option<T>, flag: &str, role: &str) -> anyhow::Result<&'a T> {
    v.as_ref()
        .ok_or_else(|| anyhow!("{flag} is required for the {role}"))
}

impl Options {
    /// The job's token, from --token-file, held by a process of --run.
    pub fn token(&self) -> anyhow::Result<Token> {
        Ok(Token::from_file(Path::new(&self.runtime.token_file))?.with_run(self.runtime.run))
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
        assert_eq!(o.job.num_partitions, Some(Workers::of(2)));
        assert!(o.job.balance_train && o.job.balance_edges);
        assert_eq!(o.job.partition_mode, PartitionMode::DglApi);
        assert_eq!(o.extra, ["--lr", "0.1"]);
        assert_eq!(o.runtime.workspace, PathBuf::from(names::WORKSPACE));
    }

    #[test]
    fn a_graph_name_must_be_one_file_name() {
        for bad in ["../x", "a/b", "..", ""] {
            let e = Cli::try_parse_from(["dglrun", "--graph-name", bad]).unwrap_err();
            let m = e.to_string();
            assert!(
                m.contains("--graph-name") && m.contains("one file name"),
                "{m}"
            );
        }
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

    /// The durations `opts` holds, as the roles take them.
    fn durations(o: &Options) -> [Duration; 6] {
        [
            o.stop_grace(),
            o.timeouts.peer(),
            o.timeouts.session_idle(),
            duration::secs(o.launch.wait_timeout),
            duration::secs(o.launch.progress_interval),
            duration::secs(o.worker.server_start_timeout),
        ]
    }

    /// Every flag that takes seconds, with the subcommand it needs (found
    /// once: building clap's command for each case is slow).
    fn seconds_flags() -> &'static [(Option<String>, String)] {
        static FLAGS: std::sync::OnceLock<Vec<(Option<String>, String)>> =
            std::sync::OnceLock::new();
        FLAGS.get_or_init(find_seconds_flags)
    }

    fn find_seconds_flags() -> Vec<(Option<String>, String)> {
        let top = Cli::command();
        let mut all = Vec::new();
        let subs = top
            .get_subcommands()
            .map(|c| (Some(c.get_name().to_string()), c.clone()));
        for (sub, cmd) in std::iter::once((None, top.clone())).chain(subs) {
            for a in cmd.get_arguments() {
                let secs = a
                    .get_value_names()
                    .is_some_and(|v| v.iter().any(|n| n == "SECONDS"));
                if secs {
                    let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
                    assert!(
                        help.contains(duration::CAP_HELP),
                        "--{}: {help}",
                        a.get_id()
                    );
                    all.push((sub.clone(), format!("--{}", a.get_long().unwrap())));
                }
            }
        }
        all
    }

    #[test]
    fn every_seconds_flag_is_found_and_states_its_cap() {
        let flags: Vec<&String> = seconds_flags().iter().map(|(_, f)| f).collect();
        for f in [
            "--stop-grace",
            "--wait-timeout",
            "--progress-interval",
            "--server-start-timeout",
            "--peer-timeout",
            "--session-idle-timeout",
            "--timeout",
            "--connect-timeout",
        ] {
            assert!(flags.iter().any(|g| *g == f), "{f} in {flags:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Any number or text for any duration flag (their env vars use the
        /// same parsers): a usage error, or durations within the cap whose
        /// deadlines (and the stop bounds, grace + 20 s) are computed
        /// without a panic.
        #[test]
        fn any_duration_flag_value_is_capped_or_refused(n in proptest::prelude::any::<u64>(), text in "\\PC{0,24}") {
            for (sub, flag) in seconds_flags() {
                for value in [n.to_string(), text.clone()] {
                    let mut args = vec!["dglrun".to_string()];
                    args.extend(sub.clone());
                    args.extend([flag.clone(), value.clone()]);
                    if sub.as_deref() == Some("rsh") {
                        args.extend(["w-0".into(), "true".into()]);
                    }
                    let Ok(cli) = Cli::try_parse_from(&args) else { continue };
                    let opts = match cli.command {
                        Some(Command::Probe(p)) => {
                            proptest::prop_assert!(p.timeout <= duration::MAX_SECS);
                            p.opts
                        }
                        Some(Command::RankGuard(_)) => continue,
                        Some(Command::Rsh(r)) => {
                            proptest::prop_assert!(r.connect_timeout <= duration::MAX_SECS);
                            continue;
                        }
                        Some(Command::Partition(o) | Command::Launch(o) | Command::Worker(o)) => o,
                        None => cli.opts,
                    };
                    for d in durations(&opts) {
                        proptest::prop_assert!(d <= duration::MAX, "{flag} {value}");
                        let _ = crate::clock::after(d.saturating_add(Duration::from_secs(20)));
                    }
                }
            }
        }
    }
}
