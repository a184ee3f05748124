//! `cargo xtask <task>`: developer tasks. Each subcommand is a module of `cmd`.
use clap::{Parser, Subcommand};

mod bench;
mod chaos;
mod cmd;
mod e2e;
mod ensure;
mod graphstorm_env;
mod images;
mod pyenv;
mod stack;
mod test_binaries;
mod util;

#[derive(Parser)]
#[command(about = "dgl-operator developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Create or reuse the cached Python venv with DGL; prints the interpreter path.
    Pyenv(pyenv::Args),
    /// Local Kubernetes control plane: build binaries, up/down/status/kubeconfig.
    Cluster(cmd::cluster::Args),
    /// Build the container images with podman (no registry) and load them into the node cluster.
    Images(images::Args),
    /// Run every check and test (what CI runs); installs what is missing first.
    Test(cmd::test::Args),
    /// Start the local control plane and the operator, and apply the example DGLJob.
    Demo(cmd::demo::Args),
    /// End-to-end: real DGLJobs on a real node, the operator installed with Helm.
    E2e(e2e::Args),
    /// Benchmarks: `bench scale` runs N DGLJobs on kwok fake nodes and measures the operator.
    Bench(cmd::bench::Args),
    /// Ship >= 1 GiB of partition files to workers in network namespaces with dglrun; MB/s vs plain TCP.
    BenchShards(cmd::bench_shards::Args),
    /// Long run of the hostile-input proptests: N inputs per partition-input reader.
    Fuzz(cmd::fuzz::Args),
    /// Fault injection on the real node: operator killed, worker deleted, churn; outcome table.
    Chaos(chaos::Args),
    /// Kueue v0.17 built from the Go module proxy (cached), then the operator's tests with Kueue's real manager.
    Kueue(stack::kueue::Args),
}

fn main() -> anyhow::Result<()> {
    util::forget_manifest_dir();
    let cli = Cli::parse();
    match cli.task {
        Task::Pyenv(args) => cmd::pyenv::run(args),
        Task::Cluster(args) => cmd::cluster::run(args),
        Task::Images(args) => images::run(args),
        Task::Test(args) => cmd::test::run(args),
        Task::Demo(args) => cmd::demo::run(args),
        Task::E2e(args) => cmd::e2e::run(args),
        Task::Bench(args) => cmd::bench::run(args),
        Task::BenchShards(args) => cmd::bench_shards::run(args),
        Task::Chaos(args) => cmd::chaos::run(args),
        Task::Fuzz(args) => cmd::fuzz::run(args),
        Task::Kueue(args) => cmd::kueue::run(args),
    }
}
