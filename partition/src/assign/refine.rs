//! Parallel k-way boundary refinement under multi-constraint balance, for
//! the uncoarsening of the multilevel partitioner. Each round finds, in
//! parallel on a snapshot, the vertices whose move to a neighbouring part
//! lowers the cut; the moves are then applied in order of gain, each one
//! re-checked against the current parts (gain still positive, every
//! constraint of the target part still within its limit). A rebalancing
//! pass first moves the cheapest vertices out of overweight parts.

use rayon::prelude::*;

use super::coarsen::View;

/// Rounds of refinement per level at most.
const ROUNDS: usize = 10;

/// Part weights and their limits.
pub struct Balance {
    pub k: usize,
    pub ncon: usize,
    /// `pw[p * ncon + c]`.
    pub pw: Vec<i64>,
    /// Largest allowed weight of a part, per constraint.
    pub max: Vec<i64>,
}

impl Balance {
    /// Limits `ub` times the average part, per constraint (METIS's
    /// `ubfactor`; never below the average rounded up).
    pub fn new(g: View<'_>, parts: &[u32], k: usize, ub: f64) -> Self {
        let ncon = g.ncon;
        let mut pw = vec![0i64; k * ncon];
        for (v, &p) in parts.iter().enumerate() {
            for (c, w) in g.w(v).iter().enumerate() {
                pw[p as usize * ncon + c] += w;
            }
        }
        let max = (0..ncon)
            .map(|c| {
                let total: i64 = (0..k).map(|p| pw[p * ncon + c]).sum();
                let avg = total as f64 / k as f64;
                ((avg * ub).floor() as i64).max(avg.ceil() as i64)
            })
            .collect();
        Balance { k, ncon, pw, max }
    }

    fn has_room(&self, p: usize, w: &[i64]) -> bool {
        w.iter()
            .enumerate()
            .all(|(c, &x)| x == 0 || self.pw[p * self.ncon + c] + x <= self.max[c])
    }

    /// Whether part `p` is over a limit in a constraint `w` weighs in.
    fn over_in(&self, p: usize, w: &[i64]) -> bool {
        w.iter()
            .enumerate()
            .any(|(c, &x)| x > 0 && self.pw[p * self.ncon + c] > self.max[c])
    }

    pub fn overweight(&self) -> bool {
        (0..self.k).any(|p| (0..self.ncon).any(|c| self.pw[p * self.ncon + c] > self.max[c]))
    }

    fn shift(&mut self, from: usize, to: usize, w: &[i64]) {
        for (c, x) in w.iter().enumerate() {
            self.pw[from * self.ncon + c] -= x;
            self.pw[to * self.ncon + c] += x;
        }
    }
}

/// Rebalances, then refines `parts` on `g`.
pub fn refine(g: View<'_>, parts: &mut [u32], bal: &mut Balance) {
    for _ in 0..ROUNDS {
        if !bal.overweight() {
            break;
        }
        if rebalance_round(g, parts, bal) == 0 {
            break;
        }
    }
    for _ in 0..ROUNDS {
        let moved = refine_round(g, parts, bal);
        if moved <= g.n() / 2000 {
            break;
        }
    }
}

/// Connection of `v` to every part, into `conn` (length k).
fn connect(g: View<'_>, v: usize, parts: &[u32], conn: &mut [i64]) {
    conn.fill(0);
    for (u, w) in g.edges(v) {
        conn[parts[u as usize] as usize] += w as i64;
    }
}

/// One round of positive-gain moves; returns how many were made.
fn refine_round(g: View<'_>, parts: &mut [u32], bal: &mut Balance) -> usize {
    let k = bal.k;
    let snapshot: &[u32] = parts;
    let mut cands: Vec<(i64, u64, u32)> = (0..g.n())
        .into_par_iter()
        .map_init(
            || vec![0i64; k],
            |conn, v| {
                let p = snapshot[v] as usize;
                connect(g, v, snapshot, conn);
                let (q, cq) = best_other(conn, p, |q| bal.has_room(q, g.w(v)))?;
                let gain = cq - conn[p];
                (gain > 0).then_some((-gain, v as u64, q as u32))
            },
        )
        .flatten_iter()
        .collect();
    cands.par_sort_unstable();
    apply(g, parts, bal, &cands, |gain| gain > 0)
}

/// Applies candidate moves in order, re-checking each against the current
/// parts; `accept` judges the recomputed gain.
fn apply(
    g: View<'_>,
    parts: &mut [u32],
    bal: &mut Balance,
    cands: &[(i64, u64, u32)],
    accept: impl Fn(i64) -> bool,
) -> usize {
    let mut conn = vec![0i64; bal.k];
    let mut moved = 0;
    for &(_, v, q) in cands {
        let (v, q) = (v as usize, q as usize);
        let p = parts[v] as usize;
        let w = g.w(v);
        if !bal.has_room(q, w) {
            continue;
        }
        connect(g, v, parts, &mut conn);
        if !accept(conn[q] - conn[p]) {
            continue;
        }
        bal.shift(p, q, w);
        parts[v] = q as u32;
        moved += 1;
    }
    moved
}

/// The part other than `p` with the most connection among those `ok`
/// accepts (ties: the lower part id).
fn best_other(conn: &[i64], p: usize, ok: impl Fn(usize) -> bool) -> Option<(usize, i64)> {
    let mut best: Option<(usize, i64)> = None;
    for (q, &c) in conn.iter().enumerate() {
        if q != p && best.is_none_or(|b| c > b.1) && ok(q) {
            best = Some((q, c));
        }
    }
    best
}

/// Moves vertices out of overweight parts, cheapest cut increase first.
fn rebalance_round(g: View<'_>, parts: &mut [u32], bal: &mut Balance) -> usize {
    let k = bal.k;
    let snapshot: &[u32] = parts;
    let shared: &Balance = bal;
    let mut cands: Vec<(i64, u64, u32)> = (0..g.n())
        .into_par_iter()
        .map_init(
            || vec![0i64; k],
            |conn, v| {
                let p = snapshot[v] as usize;
                if !shared.over_in(p, g.w(v)) {
                    return None;
                }
                connect(g, v, snapshot, conn);
                let (q, cq) = best_other(conn, p, |q| shared.has_room(q, g.w(v)))?;
                Some((conn[p] - cq, v as u64, q as u32))
            },
        )
        .flatten_iter()
        .collect();
    cands.par_sort_unstable();
    let mut moved = 0;
    for &(_, v, q) in &cands {
        let (v, q) = (v as usize, q as usize);
        let p = parts[v] as usize;
        let w = g.w(v);
        if bal.over_in(p, w) && bal.has_room(q, w) {
            bal.shift(p, q, w);
            parts[v] = q as u32;
            moved += 1;
        }
    }
    moved
}
