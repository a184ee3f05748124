//! Multilevel k-way partitioning with multi-constraint balance.
//!
//! Two paths. [`MetisMode::Direct`] hands the whole symmetric graph to
//! METIS 5.2.1's `METIS_PartGraphKway` with the options DGL 2.1.0 uses
//! (`src/graph/transform/metis_partition_hetero.cc`: one refinement
//! iteration, one initial partition, dropped edges during coarsening, cut
//! objective; DGL's `ONDISK` is left out because METIS would then write
//! temporary files into the working directory). [`MetisMode::Hybrid`]
//! coarsens in parallel with 64-bit ids until the graph is small, runs
//! METIS on that coarse graph, and refines in parallel on the way back up,
//! so it is faster and has no 32-bit limit.

use std::sync::Mutex;
use std::time::Instant;

use super::coarsen::{self, Level, View};
use super::refine::{self, Balance};
use super::weights::{self, Constraints};
use super::{with_pool, Assignment, Partitioner, Request};
use crate::settings::Choice;
use crate::{Error, Result};

/// METIS's default load imbalance tolerance (ufactor 30).
pub const UBFACTOR: f64 = 1.03;

/// Which path [`Metis`] takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetisMode {
    /// Hybrid for graphs above [`HYBRID_ABOVE`] nodes or beyond 32 bits,
    /// METIS on the whole graph otherwise.
    #[default]
    Auto,
    /// METIS on the whole graph (fails clearly beyond 32-bit counts).
    Direct,
    /// Parallel coarsening and refinement around METIS on a coarse graph.
    Hybrid,
}

/// Nodes above which [`MetisMode::Auto`] takes the hybrid path.
pub const HYBRID_ABOVE: u64 = 200_000;

/// The METIS-quality k-way partitioner.
#[derive(Clone, Debug, Default)]
pub struct Metis {
    pub mode: MetisMode,
    /// Hybrid: stop coarsening at this many vertices (0: the default,
    /// [`COARSE_NODES`] or [`COARSE_PER_PART`] per part if more).
    pub coarse_nodes: usize,
}

impl Partitioner for Metis {
    fn assign(&self, req: &Request<'_>) -> Result<Assignment> {
        if req.csr.num_nodes() != req.graph.num_nodes() {
            return Err(Error::Config(format!(
                "the adjacency has {} nodes, the graph {}",
                req.csr.num_nodes(),
                req.graph.num_nodes()
            )));
        }
        let cons = weights::constraints(req.graph, req.balance_train, req.balance_edges)?;
        let parts = with_pool(req.threads, || {
            partition(req.csr_view(&cons), req.num_parts, self, req.seed)
        })?;
        Ok(Assignment {
            num_parts: req.num_parts,
            parts,
            algo_name: Choice::Metis.as_str().into(),
        })
    }
}

/// Partitions `g` into `k` parts.
pub fn partition(g: View<'_>, k: u32, opts: &Metis, seed: u64) -> Result<Vec<u32>> {
    if k == 0 {
        return Err(Error::Config("num_parts must be at least 1".into()));
    }
    if k == 1 || g.n() == 0 {
        return Ok(vec![0; g.n()]);
    }
    let hybrid = match opts.mode {
        MetisMode::Direct => false,
        MetisMode::Hybrid => true,
        MetisMode::Auto => g.n() as u64 > HYBRID_ABOVE || !fits_i32(g),
    };
    if hybrid {
        hybrid_kway(g, k, seed, coarse_target(opts.coarse_nodes, k))
    } else {
        let t = Instant::now();
        let parts = metis_kway(g, k, seed, true)?;
        tracing::info!(secs = t.elapsed().as_secs_f64(), "METIS on the whole graph");
        Ok(parts)
    }
}

fn fits_i32(g: View<'_>) -> bool {
    let max = i32::MAX as u64;
    g.n() as u64 <= max && g.adj.len() as u64 <= max
}

/// METIS is C with process-wide state in GKlib's allocator: one call at a
/// time.
static METIS_LOCK: Mutex<()> = Mutex::new(());

// Indices into METIS 5.2.1's options array (enum moptions_et in metis.h).
const OPT_OBJTYPE: usize = 1;
const OPT_NIPARTS: usize = 6;
const OPT_NITER: usize = 7;
const OPT_SEED: usize = 9;
const OPT_DROPEDGES: usize = 19;

/// `METIS_PartGraphKway` on `g`; `like_dgl` sets DGL's options, otherwise
/// METIS's defaults (for small coarse graphs, where quality is cheap).
pub fn metis_kway(g: View<'_>, k: u32, seed: u64, like_dgl: bool) -> Result<Vec<u32>> {
    let m = to_i32(g)?;
    let mut options = [-1 as metis::Idx; metis::NOPTIONS];
    options[OPT_OBJTYPE] = 0; // METIS_OBJTYPE_CUT
    options[OPT_SEED] = (seed & 0x7fff_ffff) as metis::Idx;
    if like_dgl {
        options[OPT_NITER] = 1;
        options[OPT_NIPARTS] = 1;
        options[OPT_DROPEDGES] = 1;
    }
    let stage = |e: &dyn std::fmt::Display| Error::Stage {
        stage: "metis",
        message: e.to_string(),
    };
    let ncon = g.ncon as metis::Idx;
    let mut graph = metis::Graph::new(ncon, k as metis::Idx, &m.xadj, &m.adjncy)
        .map_err(|e| stage(&e))?
        .set_options(&options);
    if let Some(v) = &m.vwgt {
        graph = graph.set_vwgt(v);
    }
    if let Some(w) = &m.adjwgt {
        graph = graph.set_adjwgt(w);
    }
    let mut part = vec![0 as metis::Idx; g.n()];
    let _guard = METIS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    graph.part_kway(&mut part).map_err(|e| stage(&e))?;
    Ok(part.into_iter().map(|p| p as u32).collect())
}

/// `g` in METIS's 32-bit arrays.
struct MetisGraph {
    xadj: Vec<metis::Idx>,
    adjncy: Vec<metis::Idx>,
    vwgt: Option<Vec<metis::Idx>>,
    adjwgt: Option<Vec<metis::Idx>>,
}

fn to_i32(g: View<'_>) -> Result<MetisGraph> {
    if !fits_i32(g) {
        return Err(Error::Stage {
            stage: "metis",
            message: format!(
                "{} nodes / {} directed edges exceed METIS's 32-bit indices \
                 (the hybrid mode coarsens a graph before METIS sees it)",
                g.n(),
                g.adj.len()
            ),
        });
    }
    let xadj = g.xadj.iter().map(|&x| x as metis::Idx).collect();
    let adjncy = g.adj.iter().map(|&x| x as metis::Idx).collect();
    let unit = g.ncon == 1 && g.vwgt.iter().all(|&w| w == 1);
    let vwgt = (!unit).then(|| scaled_vwgt(g));
    // METIS sums edge weights in 32 bits: keep the total below 2^30.
    let adjwgt = g.adjw.map(|w| {
        let div = w.iter().sum::<u64>() / (1 << 30) + 1;
        w.iter().map(|&x| (x / div).max(1) as metis::Idx).collect()
    });
    Ok(MetisGraph {
        xadj,
        adjncy,
        vwgt,
        adjwgt,
    })
}

/// Vertex weights for METIS, each constraint scaled down when its total
/// would overflow METIS's 32-bit sums (balance is then re-checked on the
/// exact weights by the refinement).
fn scaled_vwgt(g: View<'_>) -> Vec<metis::Idx> {
    let ncon = g.ncon;
    let div: Vec<i64> = (0..ncon)
        .map(|c| {
            let total: i64 = g.vwgt.iter().skip(c).step_by(ncon).sum();
            (total / (1 << 30) + 1).max(1)
        })
        .collect();
    g.vwgt
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            let d = div[i % ncon];
            let s = w / d;
            // Keep a weighed vertex weighed.
            (if w > 0 && s == 0 { 1 } else { s }) as metis::Idx
        })
        .collect()
}

/// Stop coarsening at this many vertices (per part at least
/// [`COARSE_PER_PART`]).
pub const COARSE_NODES: usize = 60_000;
pub const COARSE_PER_PART: usize = 4_000;

/// The coarsening's stop rule for `k` parts: `coarse_nodes` vertices, or
/// with 0 the default, [`COARSE_NODES`] ([`COARSE_PER_PART`] per part if
/// more).
pub(crate) fn coarse_target(coarse_nodes: usize, k: u32) -> usize {
    match coarse_nodes {
        0 => COARSE_NODES.max(COARSE_PER_PART * k as usize),
        n => n,
    }
}

/// The heaviest a cluster may be, per constraint of `totals`: 3% of a part
/// (KaMinPar's rule), so that the coarse graph can still be balanced.
pub(crate) fn cluster_limits(totals: &[i64], k: u32) -> Vec<i64> {
    totals
        .iter()
        .map(|&t| ((t as f64 * (UBFACTOR - 1.0) / f64::from(k)) as i64).max(1))
        .collect()
}

/// Whether a level of `next` vertices shrank too little from `cur` (to
/// more than 90%) for coarsening to go on.
pub(crate) fn stalled(next: u64, cur: u64) -> bool {
    next as f64 > 0.9 * cur as f64
}

/// Parallel coarsening, METIS on the coarse graph, parallel refinement.
fn hybrid_kway(g: View<'_>, k: u32, seed: u64, target: usize) -> Result<Vec<u32>> {
    let t = Instant::now();
    let max_w = cluster_limits(&weights::column_sums(g.vwgt, g.ncon), k);
    let mut levels: Vec<(Level, Vec<u64>)> = Vec::new();
    loop {
        let cur = levels.last().map_or(g, |l| l.0.view());
        if cur.n() <= target {
            break;
        }
        let (next, cmap) = coarsen::coarsen(cur, &max_w, seed ^ levels.len() as u64);
        let shrunk = next.xadj.len() - 1;
        tracing::debug!(from = cur.n(), to = shrunk, "coarsened");
        let stalled = stalled(shrunk as u64, cur.n() as u64);
        levels.push((next, cmap));
        if stalled {
            break;
        }
    }
    let t_coarse = t.elapsed().as_secs_f64();
    let coarsest = levels.last().map_or(g, |l| l.0.view());
    let mut parts = metis_kway(coarsest, k, seed, false)?;
    let t_metis = t.elapsed().as_secs_f64() - t_coarse;
    let coarse_nodes = coarsest.n();
    while let Some((level, cmap)) = levels.pop() {
        drop(level);
        parts = project(&parts, &cmap);
        drop(cmap);
        let finer = levels.last().map_or(g, |l| l.0.view());
        let mut bal = Balance::new(finer, &parts, k as usize, UBFACTOR);
        let tr = Instant::now();
        refine::refine(finer, &mut parts, &mut bal);
        tracing::debug!(
            n = finer.n(),
            secs = tr.elapsed().as_secs_f64(),
            overweight = bal.overweight(),
            "refined"
        );
    }
    tracing::info!(
        coarsen = t_coarse,
        metis = t_metis,
        total = t.elapsed().as_secs_f64(),
        coarse_nodes,
        "hybrid multilevel k-way"
    );
    Ok(parts)
}

fn project(coarse: &[u32], cmap: &[u64]) -> Vec<u32> {
    use rayon::prelude::*;
    cmap.par_iter().map(|&c| coarse[c as usize]).collect()
}

impl Request<'_> {
    /// The symmetric graph with these constraints, as the partitioners see it.
    pub(crate) fn csr_view<'a>(&'a self, cons: &'a Constraints) -> View<'a> {
        View {
            xadj: &self.csr.offsets,
            adj: &self.csr.neighbors,
            adjw: None,
            vwgt: &cons.vwgt,
            ncon: cons.ncon,
        }
    }
}
