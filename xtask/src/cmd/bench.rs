//! `cargo xtask bench`: choose one of the benchmarks in `bench`.
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
    Scale(crate::bench::scale::ScaleArgs),
    /// dglrun's native partition pipeline vs dgl.distributed.partition_graph
    /// on the same R-MAT graph: wall time, peak memory, edge cut, balance.
    Partition(crate::bench::partition::PartitionArgs),
    /// GraphSAGE on two local workers (network namespaces, real DGL) with
    /// graph.dgl and with GraphBolt partitions of the same graph: bytes
    /// shipped per worker, seconds per epoch. Needs root.
    Graphbolt(crate::bench::graphbolt::GraphboltArgs),
    /// The example job on the real node: apply → first training step, the
    /// operator's share and the environment's, for each
    /// workerCreationPolicy (workers after the partitioner, or with it).
    /// Needs root, like `e2e`.
    Latency(crate::bench::latency::LatencyArgs),
}

pub fn run(args: Args) -> Result<()> {
    match args.cmd {
        Cmd::Scale(a) => crate::bench::scale::run(a),
        Cmd::Partition(a) => {
            // It builds dgl-partition with MPI and runs its ranks under mpirun.
            crate::ensure::apt(&crate::ensure::MPI_PACKAGES)?;
            crate::bench::partition::run(a)
        }
        Cmd::Graphbolt(a) => crate::bench::graphbolt::run(a),
        Cmd::Latency(a) => crate::bench::latency::run(a),
    }
}
