//! The whole pipeline from files to partitions, as `dglrun` runs it in
//! partition mode ParMETIS: read → symmetric adjacency → assignment (also
//! written in DGL's own format) → ownership, ids and per-partition arrays →
//! DGL partitions. Each stage is timed for the report.

use std::fmt;
use std::path::PathBuf;

use crate::assign::{self, Partitioner, Request};
use crate::input::{self, Source};
use crate::output::files::write_assignment;
use crate::settings::Choice;
use crate::stages::Stages;
use crate::{csr, shuffle_write, Error, Result};

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Chunked { metadata } => write!(f, "chunked {}", metadata.display()),
            Source::ChunkedAnywhere { metadata } => {
                write!(f, "chunked {} (files anywhere)", metadata.display())
            }
            Source::Text(t) => {
                write!(f, "text {} + {}", t.nodes.display(), t.edges.display())
            }
        }
    }
}

/// Everything the pipeline needs.
#[derive(Clone, Debug)]
pub struct Config {
    pub source: Source,
    /// Where `<graph>.json` and `part<i>/` go.
    pub out_dir: PathBuf,
    pub graph_name: String,
    pub num_parts: u32,
    pub partitioner: Choice,
    /// The node feature marking training nodes, when they are balanced.
    pub balance_train: Option<String>,
    pub balance_edges: bool,
    pub threads: usize,
    pub seed: u64,
    /// Deprecated and ignored: graph.dgl is written natively now. Kept
    /// so that callers passing dglrun's `--python` still build.
    pub python: String,
}

/// What happened, for the log and the benchmark.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Wall and CPU time of each stage.
    pub stages: Stages,
    pub num_nodes: u64,
    pub num_edges: u64,
    pub quality: Option<assign::Quality>,
    pub summary: Option<shuffle_write::Summary>,
}

impl Report {
    /// One line per stage, then the totals and the partition quality.
    pub fn lines(&self) -> Vec<String> {
        let mut out = self.stages.lines();
        let total = self.stages.total();
        out.push(format!(
            "{} nodes, {} edges partitioned in {:.2}s",
            self.num_nodes,
            self.num_edges,
            total.as_secs_f64()
        ));
        if let Some(q) = &self.quality {
            out.push(format!("{q}"));
        }
        if let Some(s) = &self.summary {
            let t = &s.timings;
            out.push(format!(
                "shuffle and write: ids {:.2}s, partitions built and written (features, graph.dgl) {:.2}s, publish {:.2}s",
                t.ids.as_secs_f64(),
                t.parts.as_secs_f64(),
                t.publish.as_secs_f64()
            ));
            for p in &s.parts {
                out.push(format!(
                    "part {}: {} inner nodes, {} halo nodes, {} edges, {} bytes",
                    p.part, p.inner_nodes, p.halo_nodes, p.edges, p.bytes
                ));
            }
            out.push(format!(
                "wrote {} ({} bytes)",
                s.json.display(),
                s.bytes_written
            ));
        }
        out
    }
}

/// Runs every stage on `cfg.threads` threads.
pub fn run(cfg: &Config) -> Result<Report> {
    if cfg.num_parts == 0 {
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

fn run_stages(cfg: &Config) -> Result<Report> {
    let mut report = Report {
        stages: Stages::with_cpu(),
        ..Default::default()
    };
    let graph = report
        .stages
        .timed("read", || input::read(&cfg.source, cfg.threads))?;
    report.num_nodes = graph.num_nodes();
    report.num_edges = graph.num_edges();
    let adjacency = report
        .stages
        .timed("adjacency", || Ok(csr::symmetric(&graph, cfg.threads)))?;
    let req = Request {
        graph: &graph,
        csr: &adjacency,
        num_parts: cfg.num_parts,
        balance_train: cfg.balance_train.as_deref(),
        balance_edges: cfg.balance_edges,
        threads: cfg.threads,
        seed: cfg.seed,
    };
    let assignment = report
        .stages
        .timed("assign", || partitioner(&cfg.partitioner).assign(&req))?;
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
    report.summary = Some(summary);
    Ok(report)
}

pub(crate) fn partitioner(choice: &Choice) -> Box<dyn Partitioner> {
    match choice {
        Choice::Metis => Box::new(assign::Metis::default()),
        Choice::Random => Box::new(assign::Random),
        Choice::File(dir) => Box::new(assign::FromFiles::new(dir.clone())),
    }
}
