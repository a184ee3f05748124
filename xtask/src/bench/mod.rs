//! `cargo xtask bench ...` and `cargo xtask bench-shards`: one module per
//! benchmark, the measuring helpers they share in `measure`.
//!
//! - `scale/`: the operator (and Kubeflow's mpi-operator) under N jobs on
//!   kwok fake nodes;
//! - `shards/`: `bench-shards`, dglrun shipping partition files vs a plain
//!   TCP copy, in network namespaces;
//! - `latency.rs`: apply → first training step on the real node;
//! - `graphbolt.rs`: graph.dgl vs GraphBolt partitions, real DGL;
//! - `partition`: the native partition pipeline vs DGL's tools
//!   (`partition.rs`, its script `partition_bench.py` here);
//! - `chart.rs`: the SVG chart each of them draws beside its `--json`.

pub(crate) mod chart;
mod graphbolt;
mod latency;
mod measure;
pub mod partition;
mod scale;
pub mod shards;

use anyhow::Result;
use clap::Subcommand;

#[derive(clap::Args)]
#[command(
    long_about = "Benchmarks on a local control plane with kwok fake nodes.\n\n\
    `scale` creates N DGLJobs of W workers and measures how fast the operator creates \
    their pods and finishes them, its CPU and memory, and the API requests it makes; \
    with `--peer mpi-operator` it then runs N MPIJobs of W workers through Kubeflow's \
    mpi-operator (built from the Go module proxy, cached) on the same cluster and \
    measures the same. \
    Builds what it needs first when it is not cached: the Kubernetes, etcd and kwok \
    binaries (from the Go module proxy, 20-30 min cold on 2 cores) and the operator's \
    release binary.\n\n\
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
    Scale(scale::ScaleArgs),
    /// dglrun's native partition pipeline vs dgl.distributed.partition_graph
    /// on the same R-MAT graph: wall time, peak memory, edge cut, balance.
    Partition(partition::PartitionArgs),
    /// GraphSAGE on two local workers (network namespaces, real DGL) with
    /// graph.dgl and with GraphBolt partitions of the same graph: bytes
    /// shipped per worker, seconds per epoch. Needs root.
    Graphbolt(graphbolt::GraphboltArgs),
    /// The example job on the real node: apply → first training step, the
    /// operator's share and the environment's, for each
    /// workerCreationPolicy (workers after the partitioner, or with it).
    /// Needs root, like `e2e`.
    Latency(latency::LatencyArgs),
}

pub fn run(args: Args) -> Result<()> {
    match args.cmd {
        Cmd::Scale(a) => scale::run(a),
        Cmd::Partition(a) => {
            // It builds dgl-partition with MPI and runs its ranks under mpirun.
            crate::ensure::apt(&crate::ensure::MPI_PACKAGES)?;
            partition::run(a)
        }
        Cmd::Graphbolt(a) => graphbolt::run(a),
        Cmd::Latency(a) => latency::run(a),
    }
}
