//! The whole pipeline from files to partitions, as `dglrun` runs it in
//! partition mode ParMETIS: read → symmetric adjacency → assignment (also
//! written in DGL's own format) → ownership, ids and per-partition arrays →
//! DGL partitions. Each stage is timed for the report.

use crate::assign::{Partitioner, Request};
use crate::config::{AllParts, Config};
use crate::input;
use crate::output::files::write_assignment;
use crate::report::{Report, Written};
use crate::stages::Stages;
use crate::{csr, shuffle_write, Error, Result};

/// Runs every stage on `cfg.threads` threads.
pub fn run(cfg: &Config<AllParts>) -> Result<Report> {
    if cfg.driver.num_parts == 0 {
        return Err(Error::Config("num_parts must be at least 1".into()));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cfg.threads.max(1))
        .build()
        .map_err(|e| Error::Stage {
            stage: "threads",
            message: e.to_string(),
        })?;
    pool.install(|| run_stages(cfg))
}

fn run_stages(cfg: &Config<AllParts>) -> Result<Report> {
    let mut report = Report {
        stages: Stages::with_cpu(),
        ..Default::default()
    };
    let share = report
        .stages
        .timed("read", || input::read_share(&cfg.source, 0, 1, cfg.threads))?;
    report.fetched = share.fetched;
    let graph = share.graph;
    // Names become file names (the assignment's `<ntype>.txt`, the JSON):
    // checked before anything is written.
    shuffle_write::validate_names(&graph, &cfg.graph_name)?;
    report.num_nodes = graph.num_nodes();
    report.num_edges = graph.num_edges();
    let adjacency = report
        .stages
        .timed("adjacency", || Ok(csr::symmetric(&graph, cfg.threads)))?;
    let req = Request {
        graph: &graph,
        csr: &adjacency,
        num_parts: cfg.driver.num_parts,
        balance_train: cfg.balance_train.as_deref(),
        balance_edges: cfg.balance_edges,
        threads: cfg.threads,
        seed: cfg.seed,
    };
    let assignment = report
        .stages
        .timed("assign", || cfg.partitioner.assign(&req))?;
    report.quality = Some(req.quality(&assignment)?);
    drop(adjacency);
    report.stages.timed("write assignment", || {
        write_assignment(&cfg.out_dir, &assignment, &graph)
    })?;
    let out = shuffle_write::OutputConfig {
        out_dir: cfg.out_dir.clone(),
        graph_name: cfg.graph_name.clone(),
        threads: cfg.threads,
        save_orig_ids: true,
    };
    let summary = report.stages.timed("shuffle and write", || {
        shuffle_write::write_partitions(&graph, &assignment, &out)
    })?;
    report.written = Written::All(summary);
    Ok(report)
}
