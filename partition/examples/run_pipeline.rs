//! Runs the ParMETIS-mode pipeline (`run::run`) on a chunked graph and
//! prints its report: a profiling target without dglrun around it.
//!
//! cargo run --release -p dgl-partition --example run_pipeline -- \
//!     <metadata.json> <out_dir> <python> [parts=4] [threads=2] [train_mask]
//!
//! (`<python>` is ignored: graph.dgl is written natively; a balance feature
//! of `-` balances no training nodes, for graphs without features.)

use dgl_partition::config::{AllParts, Config};
use dgl_partition::input::Source;
use dgl_partition::run;
use dgl_partition::settings::Choice;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err(
            "usage: run_pipeline <metadata.json> <out_dir> <python> [parts] [threads] [train_mask]"
                .into(),
        );
    }
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let cfg = Config {
        source: Source::Chunked {
            metadata: args[1].clone().into(),
        },
        out_dir: args[2].clone().into(),
        graph_name: "g".into(),
        partitioner: Choice::Metis,
        balance_train: match args.get(6).map(String::as_str) {
            Some("-") => None,
            other => Some(other.unwrap_or("train_mask").into()),
        },
        balance_edges: true,
        threads: num(5, 2),
        seed: 0,
        driver: AllParts {
            num_parts: num(4, 4) as u32,
        },
    };
    let report = run::run(&cfg)?;
    for line in report.lines() {
        println!("{line}");
    }
    Ok(())
}
