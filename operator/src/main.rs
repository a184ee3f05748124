//! `dgl-operator`: the DGLJob controller binary.
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    version,
    about = "Kubernetes operator for distributed DGL training jobs (DGLJob)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the DGLJob CustomResourceDefinition as YAML (what crds/dgljobs.yaml holds).
    Crd,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crd => print!("{}", dgl_api::crd_yaml()),
    }
    Ok(())
}
