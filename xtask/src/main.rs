//! `cargo xtask <task>`: developer tasks. Each subcommand lives in its own module.
use clap::{Parser, Subcommand};

mod cluster;
mod demo;
mod pyenv;
mod test;

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
    Cluster(cluster::Args),
    /// Run every check and test (what CI runs); installs what is missing first.
    Test(test::Args),
    /// Start the local control plane and the operator, and apply the example DGLJob.
    Demo(demo::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.task {
        Task::Pyenv(args) => pyenv::run(args),
        Task::Cluster(args) => cluster::run(args),
        Task::Test(args) => test::run(args),
        Task::Demo(args) => demo::run(args),
    }
}
