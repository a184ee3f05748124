//! `cargo xtask <task>`: developer tasks. Each subcommand lives in its own module.
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "dgl-operator developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.task {}
}
