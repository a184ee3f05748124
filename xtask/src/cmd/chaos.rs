//! `cargo xtask chaos`: the faults of `chaos` on a fresh stack, then the outcome table.
use anyhow::Result;

use crate::chaos::{run_all, Args, Fault};

pub fn run(args: Args) -> Result<()> {
    let rt = crate::stack::runtime()?;
    let stack = crate::stack::prepare(&rt, &args.name, args.nodes as usize, args.profile)?;
    let faults = if args.only.is_empty() {
        Fault::ALL.to_vec()
    } else {
        args.only.clone()
    };
    let r = rt.block_on(run_all(
        &stack.client,
        &stack.cluster,
        &faults,
        args.runs,
        args.churn_jobs,
        // One fault at a time: its figures undisturbed by another job.
        1,
    ));
    let down = if args.keep_cluster {
        Ok(())
    } else {
        rt.block_on(stack.cluster.down(false)).map(drop)
    };
    let table = r?;
    down?;
    println!("\n{table}");
    Ok(())
}
