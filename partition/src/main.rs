//! `dgl-partition`: the rank program of partition mode DistParMETIS. `mpirun`
//! starts one per worker (through `dglrun rsh`); built with `--features mpi`
//! the ranks talk over MPI, without it the world has one rank. Also the
//! transport's self-test, the benchmark graph's generator and the
//! partition cache's transfers (`cache upload|fetch`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dgl_partition::cache::cli::CacheCommand;
use dgl_partition::config::{Config, OwnPart};
use dgl_partition::exchange::{plan::Limits, selftest, Exchange};
use dgl_partition::input::Source;
use dgl_partition::rank;
use dgl_partition::settings::{self, PartitionArgs};

/// Rank program of DGL's distributed partition pipeline.
#[derive(Parser, Debug)]
#[command(name = "dgl-partition", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check the transport among the ranks: every collective with known,
    /// uneven data, each rank checking what it receives; prints one line
    /// per rank and exits 0 when everything arrived intact.
    Selftest(SelftestArgs),
    /// One rank of partition mode DistParMETIS: rank r of n reads its share
    /// of the chunked graph, the ranks exchange it, and rank r writes
    /// partition r of n (and the partition JSON) into --out. Started by
    /// mpirun, one rank per worker, in partition order.
    Rank(Box<RankArgs>),
    /// Write the partition benchmark's R-MAT graph (undirected and simple,
    /// as `dgl.to_bidirected` makes it; float32 `features`, int64 `labels`,
    /// a 60 % `train_mask`) in DGL's chunked format, for sizes DGL's own
    /// generator cannot hold. Holds the whole graph while it writes.
    MakeRmat(MakeRmatArgs),
    /// The partition cache in an S3-compatible bucket (credentials, region
    /// and endpoint from the AWS_* environment variables): upload a
    /// finished output folder as an entry, or fetch one part of an entry,
    /// verified. Exit status 3: the entry is not cached (2: a usage error).
    #[command(subcommand)]
    Cache(CacheCommand),
}

fn cache_main(cmd: &CacheCommand) -> ExitCode {
    match cmd.run() {
        Ok(outcome) => {
            println!("{}", outcome.line);
            match outcome.hit {
                true => ExitCode::SUCCESS,
                false => ExitCode::from(3),
            }
        }
        Err(e) => {
            eprintln!("dgl-partition cache: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(clap::Args, Debug)]
struct MakeRmatArgs {
    /// Nodes.
    #[arg(long)]
    nodes: u64,
    /// Raw R-MAT edges, before the graph is made undirected and simple.
    #[arg(long)]
    edges: u64,
    /// float32 features per node.
    #[arg(long, default_value_t = 16)]
    feat: u32,
    /// Chunks per node and edge type (files of each feature and of edges).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    chunks: u32,
    /// Seed of the generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output folder (metadata.json and the chunks).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

fn make_rmat_main(args: &MakeRmatArgs) -> ExitCode {
    let g = dgl_partition::rmat::bidirected_graph(args.nodes, args.edges, args.feat, args.seed);
    let edges = g.etypes[0].count();
    let written = dgl_partition::input::write_chunked(
        &g,
        &args.out,
        args.chunks as usize,
        dgl_partition::input::EdgeFormat::Npy,
    );
    match written {
        Ok(path) => {
            println!(
                "{{\"nodes\": {}, \"edges\": {edges}, \"metadata\": {:?}}}",
                args.nodes,
                path.display().to_string()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dgl-partition make-rmat: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(clap::Args, Debug)]
struct RankArgs {
    /// This worker's workspace (its agent passes it to MPI's daemon).
    #[arg(
        long,
        env = "DGLRUN_WORKSPACE",
        value_name = "DIR",
        default_value = settings::WORKSPACE
    )]
    workspace: PathBuf,
    /// Where this rank writes <graph>.json and part<rank>/
    /// [default: <workspace>/dataset].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Graph name: the partition JSON is <out>/<NAME>.json.
    #[arg(long, value_name = "NAME")]
    graph_name: String,
    #[command(flatten)]
    pipeline: PartitionArgs,
    /// Balance training nodes: the node feature that marks them
    /// [default when given without a value: train_mask].
    #[arg(long, value_name = "NAME", num_args = 0..=1, default_missing_value = "train_mask")]
    balance_train: Option<String>,
    /// Balance the edges (in-degree) of each partition.
    #[arg(long)]
    balance_edges: bool,
    /// Deprecated, ignored: graph.dgl is written natively (no Python).
    /// Still accepted because dglrun passes it.
    #[arg(long, value_name = "PATH", default_value = "python3")]
    python: String,
    /// The worker this rank runs on (its agent passes it): must equal the
    /// rank, or mpirun placed the ranks out of partition order.
    #[arg(long, env = settings::ENV_WORKER_INDEX, value_name = "I")]
    worker_index: Option<u32>,
    #[command(flatten)]
    limits: LimitArgs,
    /// Gather the whole structure on rank 0 and assign there, as ParMETIS
    /// mode does (one rank must hold every edge), instead of the
    /// distributed partitioner.
    #[arg(long)]
    gather_structure: bool,
}

impl RankArgs {
    fn config(&self) -> Config<OwnPart> {
        let out = self.out.clone();
        let mut cfg = self.pipeline.config(
            self.pipeline.chunked_source(&self.workspace),
            out.unwrap_or_else(|| self.workspace.join(settings::DATASET_DIR)),
            &self.graph_name,
            OwnPart {
                gather_structure: self.gather_structure,
            },
        );
        cfg.balance_train = self.balance_train.clone();
        cfg.balance_edges = self.balance_edges;
        cfg
    }
}

/// The transport's limits (the selftest forces small ones to test the
/// chunked rounds large data needs).
#[derive(clap::Args, Debug)]
struct LimitArgs {
    /// Largest element count of one transport call [default: i32::MAX].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_count: Option<u64>,
    /// Memory budget of one staged round, in bytes [default: 256 MiB].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    round_bytes: Option<u64>,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        let d = Limits::default();
        Limits {
            max_count: self.max_count.unwrap_or(d.max_count),
            round_bytes: self.round_bytes.unwrap_or(d.round_bytes),
        }
    }
}

#[derive(clap::Args, Debug)]
struct SelftestArgs {
    /// Data size: elements per pair of ranks grow linearly with it.
    #[arg(long, default_value_t = 1000)]
    scale: u64,
    #[command(flatten)]
    limits: LimitArgs,
}

/// This process's resident high-water mark (VmHWM), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

/// The network namespace, so that a test can tell the ranks' machines apart.
fn netns() -> String {
    std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs (e.g. the distributed assignment's memory per phase) on stderr,
    // as RUST_LOG asks; none by default.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    match cli.command {
        Command::Selftest(args) => selftest_main(&args),
        Command::Rank(args) => rank_main(&args),
        Command::MakeRmat(args) => make_rmat_main(&args),
        Command::Cache(cmd) => cache_main(&cmd),
    }
}

/// Runs one rank on `ex`; prints its report, or its error naming the rank.
fn run_rank<E: Exchange>(ex: &E, args: &RankArgs) -> Result<(), String> {
    let (rank, world) = (ex.rank(), ex.size());
    let fail = |e: String| format!("dgl-partition rank {rank} of {world} failed: {e}");
    if let Some(i) = args.worker_index.filter(|&i| i != rank) {
        return Err(fail(format!(
            "it runs on worker {i}: mpirun placed the ranks out of partition order"
        )));
    }
    let cfg = args.config();
    // The parallel steps run on the global pool; MPI stays on this thread.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(cfg.threads)
        .build_global();
    println!(
        "rank {rank} of {world}: partitioning {} into {} ({}, {})",
        match &cfg.source {
            Source::Chunked { metadata } | Source::ChunkedAnywhere { metadata } => {
                metadata.display().to_string()
            }
            Source::Text(t) => t.nodes.display().to_string(),
        },
        cfg.out_dir.display(),
        cfg.partitioner,
        netns()
    );
    let report = rank::run(ex, &cfg).map_err(|e| fail(e.to_string()))?;
    for line in report.lines() {
        println!("rank {rank} of {world}: {line}");
    }
    // For `cargo xtask bench partition`'s per-rank table.
    if let Some(peak) = peak_rss() {
        println!("rank {rank} of {world}: peak RSS: {peak} bytes");
    }
    println!(
        "rank {rank} of {world}: bytes sent: {} in {} transport calls",
        ex.bytes_sent(),
        ex.transfers()
    );
    Ok(())
}

#[cfg(feature = "mpi")]
fn rank_main(args: &RankArgs) -> ExitCode {
    let ex = match dgl_partition::exchange::MpiExchange::init() {
        Ok(ex) => ex.with_limits(args.limits.limits()),
        Err(e) => {
            eprintln!("dgl-partition: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run_rank(&ex, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            // The other ranks may wait in a collective: end them all.
            ex.abort(1)
        }
    }
}

#[cfg(not(feature = "mpi"))]
fn rank_main(args: &RankArgs) -> ExitCode {
    // A world of one: the partitions of a one-worker job, without MPI.
    let _ = args.limits.limits();
    match run_rank(&dgl_partition::exchange::Single, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "mpi")]
fn selftest_main(args: &SelftestArgs) -> ExitCode {
    let ex = match dgl_partition::exchange::MpiExchange::init() {
        Ok(ex) => ex.with_limits(args.limits.limits()),
        Err(e) => {
            eprintln!("dgl-partition: {e}");
            return ExitCode::FAILURE;
        }
    };
    match selftest::run(&ex, args.scale) {
        Ok(r) => {
            println!("selftest ok: {r} (mpi, {})", netns());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dgl-partition selftest failed: {e}");
            // The other ranks may wait in a collective: end them all.
            ex.abort(1)
        }
    }
}

#[cfg(not(feature = "mpi"))]
fn selftest_main(args: &SelftestArgs) -> ExitCode {
    // A world of one moves nothing: the limits have nothing to split.
    let _ = args.limits.limits();
    match selftest::run(&dgl_partition::exchange::Single, args.scale) {
        Ok(r) => {
            println!(
                "selftest ok: {r} (single process, built without mpi, {})",
                netns()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dgl-partition selftest failed: {e}");
            ExitCode::FAILURE
        }
    }
}
