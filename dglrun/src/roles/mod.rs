//! The roles dglrun runs, one folder each: its settings from the command
//! line (`config.rs`) and what it does. The launcher has two: with workers
//! ([`launcher`], which runs [`distpart`] in partition mode DistParMETIS)
//! and without ([`standalone`]). With `spec.partitionCache` the launcher
//! pod first runs [`cache_lookup`].

use anyhow::{anyhow, bail};
use dgl_api::rules::{graphbolt_conflict, Facts, GraphBoltConflict};

use crate::cli::{Options, ProbeArgs, Role};
use crate::dgl::command::Template;
use crate::dgl::dglenv;

pub mod cache_lookup;
pub mod distpart;
pub mod launcher;
pub mod partitioner;
pub mod probe;
pub mod standalone;
#[cfg(test)]
pub(crate) mod testing;
pub mod worker;

/// Runs `role` with `opts`; its exit status (the training's for a worker
/// and a launcher).
pub async fn run(role: Role, opts: &Options, probe: Option<&ProbeArgs>) -> anyhow::Result<i32> {
    match (role, probe) {
        (Role::Partitioner, _) => partitioner::main(opts).await.map(|()| 0),
        (Role::Worker, _) => worker::main(opts).await,
        (Role::Launcher, _) if opts.is_standalone() => standalone::main(opts).await,
        (Role::Launcher, _) => launcher::main(opts).await,
        (Role::Probe, Some(p)) => probe::run(opts, p).await.map(|()| 0),
        (Role::Probe, None) => Err(anyhow!("the probe role needs its arguments")),
        (Role::CacheLookup, _) => cache_lookup::main(opts).await.map(|()| 0),
    }
}

/// What DGL 2.1.0's GraphBolt cannot be given, refused before any worker
/// starts (the operator's validation says the same for a DGLJob).
fn check_graphbolt(opts: &Options) -> anyhow::Result<()> {
    // The rule is dgl_api::rules' (the CRD's CEL and the operator read it
    // too); the words here name dglrun's flags.
    let facts = Facts::of_flags(
        opts.job.partition_mode,
        opts.job.use_graphbolt,
        !opts.is_standalone(),
    );
    match graphbolt_conflict(&facts) {
        None => Ok(()),
        Some(GraphBoltConflict::DistParMetis) => bail!("--use-graphbolt is not supported with partition mode DistParMETIS: each worker holds only its own partition and DGL 2.1.0's converter (dgl_partition_to_graphbolt) needs all of them; use ParMETIS, DGL-API or Skip"),
        Some(GraphBoltConflict::Standalone) => bail!("--use-graphbolt needs workers (--num-partitions 0 trains in standalone mode, where DGL 2.1.0 has no GraphBolt: dist_graph.py falls back to DGLGraph)"),
    }
}

/// --train-command, split into words.
fn train_template(opts: &Options) -> anyhow::Result<Option<Template>> {
    let Some(line) = &opts.job.train_command else {
        return Ok(None);
    };
    Ok(Some(Template::parse(dglenv::TRAIN_COMMAND_FLAG, line)?))
}
