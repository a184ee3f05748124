//! k-way refinement across ranks under multi-constraint balance (as
//! `assign::refine`, in rounds): every rank moves only its own vertices,
//! judging gains with its ghosts' parts from the last round; part weights
//! are all-reduced (one component per constraint) after every round.
//!
//! Budgets: each rank sees every part as if it had 1/P of the part's room
//! below the limit (or 1/P of its excess above it), so the ranks' moves
//! together never push a constraint of a part past the limit, and together
//! remove an overweight part's excess. Two boundary vertices on different
//! ranks could swap parts at once and gain nothing: a vertex with ghost
//! neighbours moves only to a higher part in even rounds, to a lower one in
//! odd rounds (ParMETIS's rule).

use super::graph::{all_sum_vec, LocalGraph};
use crate::assign::refine::{self, rebalance_round, refine_round, Balance, RefineGraph};
use crate::exchange::Exchange;
use crate::Result;

/// Refinement rounds per level at most (two directions per round).
const ROUNDS: usize = 10;
/// Rebalancing rounds per level at most.
const REBALANCE_ROUNDS: usize = 40;

impl Balance {
    /// The global limits and part weights, from the all-reduced part
    /// weights (the single-process [`Balance`], shared).
    pub fn global<E: Exchange>(
        ex: &E,
        g: &LocalGraph,
        parts: &[u32],
        k: usize,
        ub: f64,
    ) -> Result<Self> {
        let pw = part_weights(ex, g, parts, k)?;
        Ok(Balance::with_limits(k, g.ncon, pw, ub))
    }

    /// This rank's share of the room (or the excess) of every part.
    fn local(&self, ranks: i64) -> Balance {
        let pw = self
            .pw
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let m = self.max[i % self.ncon];
                if w <= m {
                    m - (m - w) / ranks
                } else {
                    m + (w - m + ranks - 1) / ranks
                }
            })
            .collect();
        Balance {
            k: self.k,
            ncon: self.ncon,
            pw,
            max: self.max.clone(),
        }
    }
}

/// `pw[p * ncon + c]` over all ranks.
pub fn part_weights<E: Exchange>(
    ex: &E,
    g: &LocalGraph,
    parts: &[u32],
    k: usize,
) -> Result<Vec<i64>> {
    all_sum_vec(ex, &refine::part_weights(g, &parts[..g.n_own], k))
}

/// Rebalances, then refines; `parts` holds the owned vertices' parts and
/// gets the ghosts' appended while it works (truncated again at the end).
pub fn refine<E: Exchange>(
    ex: &E,
    g: &LocalGraph,
    parts: &mut Vec<u32>,
    k: usize,
    ub: f64,
) -> Result<()> {
    let ranks = i64::from(ex.size());
    let n_global = g.n_global();
    for _ in 0..REBALANCE_ROUNDS {
        let bal = Balance::global(ex, g, &parts[..g.n_own], k, ub)?;
        if !bal.overweight() {
            break;
        }
        sync_ghosts(ex, g, parts)?;
        let moved = rebalance_round(g, parts, &mut bal.local(ranks));
        if ex.all_sum(moved as u64)? == 0 {
            break;
        }
    }
    for round in 0..2 * ROUNDS {
        let mut bal = Balance::global(ex, g, &parts[..g.n_own], k, ub)?.local(ranks);
        sync_ghosts(ex, g, parts)?;
        let moved = ex.all_sum(refine_round(g, parts, &mut bal, round % 2 == 0) as u64)?;
        tracing::debug!(n = n_global, round, moved, "refine round");
        if round % 2 == 1 && moved <= n_global / 1000 {
            break;
        }
    }
    parts.truncate(g.n_own);
    Ok(())
}

/// Makes `parts` the owned parts followed by the ghosts' current parts.
fn sync_ghosts<E: Exchange>(ex: &E, g: &LocalGraph, parts: &mut Vec<u32>) -> Result<()> {
    parts.truncate(g.n_own);
    let ghosts = g.halo_values(ex, parts)?;
    parts.extend_from_slice(&ghosts);
    Ok(())
}

impl RefineGraph for LocalGraph {
    fn movable(&self) -> usize {
        self.n_own
    }

    fn ncon(&self) -> usize {
        self.ncon
    }

    fn w(&self, v: usize) -> &[i64] {
        LocalGraph::w(self, v)
    }

    fn connect(&self, v: usize, parts: &[u32], conn: &mut [i64]) -> bool {
        conn.fill(0);
        let mut ghost = false;
        for (u, w) in self.edges(v) {
            conn[parts[u] as usize] += w as i64;
            ghost |= u >= self.n_own;
        }
        ghost
    }
}
