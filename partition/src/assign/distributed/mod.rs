//! The assignment of partition mode DistParMETIS with every rank holding
//! only its share: a distributed multilevel k-way partitioner.
//!
//! 1. [`graph`]: a rank owns the nodes whose rows it read; each edge of its
//!    share goes to the owners of both ends (bounded rounds), which build
//!    the symmetric adjacency of their vertices in local u32 indices, with
//!    ghosts for the neighbours owned elsewhere;
//! 2. [`constraints`]: the balance constraints of the owned vertices, as
//!    the single-process pipeline computes them;
//! 3. [`coarsen`]: size-constrained label propagation across ranks and
//!    contraction, until the graph is as small as the hybrid's stop rule
//!    says (or stops shrinking);
//! 4. [`initial`]: the coarsest graph is gathered on rank 0 and partitioned
//!    by METIS, the parts broadcast;
//! 5. [`refine`]: projected back level by level and refined across ranks
//!    under the 1.03 balance of every constraint;
//! 6. the quality is measured across ranks (cut from the local adjacency
//!    and the ghosts' parts, balance from all-reduced weights), and the
//!    owned parts are gathered into the whole assignment (4 bytes per node,
//!    replicated: the id maps need it).
//!
//! Methods `random` and `file` need no structure to assign: every rank
//! computes or reads the whole assignment; the local graph is still built
//! for the quality report. Deterministic for a seed and rank count.

mod coarsen;
mod constraints;
pub mod graph;
mod initial;
mod refine;

use std::time::Instant;

use self::graph::{all_sum_vec, LocalGraph, Owners};
use super::metis::{cluster_limits, coarse_target, stalled, UBFACTOR};
use super::weights::column_sums;
use super::{Assignment, Plan, Quality};
use crate::exchange::Exchange;
use crate::input::Share;
use crate::settings::Choice;
use crate::{Error, Result};

/// Edges one rank sends per round while building and contracting: a
/// sixteenth of the largest share, within these bounds.
pub const ROUND_EDGES: std::ops::RangeInclusive<u64> = (1 << 16)..=(1 << 20);

/// The coarsest graph has at most this many adjacency entries per vertex
/// of the stop rule's target (beyond it, coarsening goes on).
pub const COARSE_ENTRIES_PER_NODE: u64 = 16;

fn round_edges<E: Exchange>(ex: &E, share: &Share) -> Result<u64> {
    let mine: u64 = share.graph.etypes.iter().map(|e| e.count()).sum();
    let largest = ex.all_max(mine)?;
    Ok((largest / 16).clamp(*ROUND_EDGES.start(), *ROUND_EDGES.end()))
}

/// What the distributed assignment is asked.
#[derive(Clone, Debug)]
pub struct Options<'a> {
    pub method: &'a Choice,
    pub balance_train: Option<&'a str>,
    pub balance_edges: bool,
    pub seed: u64,
    /// Stop coarsening at this many vertices (0: the hybrid's rule).
    pub coarse_nodes: usize,
    /// Edges per round of the all-to-all exchanges (0: see [`ROUND_EDGES`]).
    pub round_edges: u64,
}

/// The whole assignment (on every rank), its quality and what it took.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub assignment: Assignment,
    pub quality: Quality,
    /// Vertices of each level, finest first.
    pub levels: Vec<u64>,
    /// This rank's owned vertices, ghosts and adjacency entries (level 0).
    pub owned: u64,
    pub ghosts: u64,
    pub entries: u64,
}

/// Logs this rank's resident memory and its high-water mark at `phase`:
/// where the peak grows is where a pod's limit bites.
pub(crate) fn log_memory(rank: u32, phase: &str) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mib = |key: &str| {
        let kb = status.lines().find_map(|l| l.strip_prefix(key))?;
        kb.trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
            .map(|k| k / 1024)
    };
    tracing::info!(
        rank,
        phase,
        rss_mib = mib("VmRSS:"),
        peak_mib = mib("VmHWM:"),
        "memory"
    );
}

pub(crate) fn stage(message: String) -> Error {
    Error::Stage {
        stage: "distributed assign",
        message,
    }
}

/// Assigns every node to one of `ex.size()` parts (see the module docs).
pub fn assign<E: Exchange>(ex: &E, share: &Share, opts: &Options<'_>) -> Result<Outcome> {
    let k = ex.size();
    let t = Instant::now();
    let owners = Owners::of_share(ex, share)?;
    let per_type = owners.own_per_type.clone();
    let round = match opts.round_edges {
        0 => round_edges(ex, share)?,
        n => n,
    };
    let (mut g, indeg) = graph::build(ex, share, owners, round)?;
    let (vwgt, ncon) = constraints::constraints(
        ex,
        share,
        &per_type,
        &indeg,
        opts.balance_train,
        opts.balance_edges,
    )?;
    drop(indeg);
    (g.vwgt, g.ncon) = (vwgt, ncon);
    tracing::info!(
        secs = t.elapsed().as_secs_f64(),
        ghosts = g.ghosts.len(),
        "local graph"
    );
    log_memory(ex.rank(), "local graph");
    let own_globals = g.owners.globals(g.rank);
    let mut levels = vec![g.n_global()];
    let (own_parts, whole, algo_name) = match opts.method.plan(&share.graph, k, opts.seed)? {
        Plan::Multilevel => {
            let target = coarse_target(opts.coarse_nodes, k);
            let own = multilevel(ex, &g, k, opts.seed, target, round, &mut levels)?;
            (own, None, Choice::Metis.as_str().to_string())
        }
        Plan::Whole(a) => {
            let own = own_globals.iter().map(|&v| a.parts[v as usize]).collect();
            (own, Some(a.parts), a.algo_name)
        }
    };
    let quality = quality(ex, &g, &own_parts, k as usize)?;
    let parts = match whole {
        Some(p) => p,
        None => gather_parts(ex, &g.owners, &own_parts)?,
    };
    log_memory(ex.rank(), "assigned");
    Ok(Outcome {
        assignment: Assignment {
            num_parts: k,
            parts,
            algo_name,
        },
        quality,
        levels,
        owned: g.n_own as u64,
        ghosts: g.ghosts.len() as u64,
        entries: g.adj.len() as u64,
    })
}

/// Coarsen, partition the coarsest graph, project and refine: the parts of
/// the owned vertices.
fn multilevel<E: Exchange>(
    ex: &E,
    g0: &LocalGraph,
    k: u32,
    seed: u64,
    target: usize,
    round: u64,
    sizes: &mut Vec<u64>,
) -> Result<Vec<u32>> {
    if k == 1 {
        return Ok(vec![0; g0.n_own]);
    }
    let totals = all_sum_vec(ex, &column_sums(&g0.vwgt, g0.ncon))?;
    let max_w = cluster_limits(&totals, k);
    let mut levels: Vec<(LocalGraph, Vec<u64>)> = Vec::new();
    let t = Instant::now();
    loop {
        let cur = levels.last().map_or(g0, |l| &l.0);
        // Rank 0 gathers the coarsest graph: small in edges too, not only
        // in vertices (a coarse R-MAT graph is dense).
        let entries = ex.all_sum(cur.adj.len() as u64)?;
        if cur.n_global() <= target as u64 && entries <= COARSE_ENTRIES_PER_NODE * target as u64 {
            break;
        }
        let seed = seed ^ levels.len() as u64;
        let (next, cmap) = coarsen::coarsen(ex, cur, &max_w, seed, round)?;
        let stalled = stalled(next.n_global(), cur.n_global());
        sizes.push(next.n_global());
        levels.push((next, cmap));
        log_memory(ex.rank(), "coarsened");
        if stalled {
            break;
        }
    }
    let t_coarse = t.elapsed().as_secs_f64();
    let coarsest = levels.last().map_or(g0, |l| &l.0);
    let all = initial::initial(ex, coarsest, k, seed, levels.is_empty())?;
    let mut parts: Vec<u32> = coarsest
        .owners
        .globals(coarsest.rank)
        .iter()
        .map(|&v| all[v as usize])
        .collect();
    drop(all);
    log_memory(ex.rank(), "initial");
    let t_initial = t.elapsed().as_secs_f64() - t_coarse;
    while let Some((level, cmap)) = levels.pop() {
        let finer = levels.last().map_or(g0, |l| &l.0);
        let mut fine = graph::lookup(ex, &level.owners, &cmap, &parts)?;
        drop((level, cmap));
        let before = cut(ex, finer, &fine)?;
        refine::refine(ex, finer, &mut fine, k as usize, UBFACTOR)?;
        tracing::debug!(
            n = finer.n_global(),
            before,
            after = cut(ex, finer, &fine)?,
            "refined"
        );
        parts = fine;
        log_memory(ex.rank(), "refined");
    }
    tracing::info!(
        coarsen = t_coarse,
        initial = t_initial,
        total = t.elapsed().as_secs_f64(),
        levels = ?sizes,
        "distributed multilevel k-way"
    );
    Ok(parts)
}

/// The edge cut (weighted, undirected) of `g` under the owned parts.
fn cut<E: Exchange>(ex: &E, g: &LocalGraph, own: &[u32]) -> Result<u64> {
    let parts = g.with_ghosts(ex, own.to_vec())?;
    let cut2: u64 = (0..g.n_own)
        .map(|v| {
            g.edges(v)
                .filter(|&(u, _)| parts[u] != parts[v])
                .map(|(_, w)| w)
                .sum::<u64>()
        })
        .sum();
    Ok(ex.all_sum(cut2)? / 2)
}

/// Edge cut (undirected, as METIS counts it) and balance per constraint,
/// measured across ranks.
fn quality<E: Exchange>(ex: &E, g: &LocalGraph, own: &[u32], k: usize) -> Result<Quality> {
    let parts = g.with_ghosts(ex, own.to_vec())?;
    let cut2: u64 = (0..g.n_own)
        .map(|v| g.edges(v).filter(|&(u, _)| parts[u] != parts[v]).count() as u64)
        .sum();
    let cut2 = ex.all_sum(cut2)?;
    let pw = refine::part_weights(ex, g, own, k)?;
    let ncon = g.ncon;
    let part_weights: Vec<Vec<i64>> = (0..ncon)
        .map(|c| (0..k).map(|p| pw[p * ncon + c]).collect())
        .collect();
    Ok(Quality::new(cut2 / 2, part_weights))
}

/// Every rank's owned parts, in global order, on every rank.
fn gather_parts<E: Exchange>(ex: &E, owners: &Owners, own: &[u32]) -> Result<Vec<u32>> {
    let got = ex.gatherv(0, own)?;
    let mut parts = Vec::new();
    if let Some(b) = got {
        parts = vec![0u32; owners.total() as usize];
        for (r, piece) in b.parts().enumerate() {
            let ids = owners.globals(r as u32);
            if ids.len() != piece.len() {
                return Err(stage(format!(
                    "rank {r} sent {} parts for its {} nodes",
                    piece.len(),
                    ids.len()
                )));
            }
            for (&v, &p) in ids.iter().zip(piece) {
                parts[v as usize] = p;
            }
        }
    }
    ex.broadcast(0, &mut parts)?;
    Ok(parts)
}
