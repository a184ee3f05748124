//! `dgl-partition`: the rank program of partition mode DistParMETIS. `mpirun`
//! starts one per worker (through `dglrun rsh`); built with `--features mpi`
//! the ranks talk over MPI, without it the world has one rank.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dgl_partition::dist::{plan::Limits, selftest};

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
}

#[derive(clap::Args, Debug)]
struct SelftestArgs {
    /// Data size: elements per pair of ranks grow linearly with it.
    #[arg(long, default_value_t = 1000)]
    scale: u64,
    /// Largest element count of one transport call (smaller values force
    /// the chunked rounds that large data needs) [default: i32::MAX].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_count: Option<u64>,
    /// Memory budget of one staged round, in bytes [default: 256 MiB].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    round_bytes: Option<u64>,
}

impl SelftestArgs {
    fn limits(&self) -> Limits {
        let d = Limits::default();
        Limits {
            max_count: self.max_count.unwrap_or(d.max_count),
            round_bytes: self.round_bytes.unwrap_or(d.round_bytes),
        }
    }
}

/// The network namespace, so that a test can tell the ranks' machines apart.
fn netns() -> String {
    std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Selftest(args) => selftest_main(&args),
    }
}

#[cfg(feature = "mpi")]
fn selftest_main(args: &SelftestArgs) -> ExitCode {
    let ex = match dgl_partition::dist::MpiExchange::init() {
        Ok(ex) => ex.with_limits(args.limits()),
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
    let _ = args.limits();
    match selftest::run(&dgl_partition::dist::Single, args.scale) {
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
