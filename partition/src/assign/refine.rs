//! Parallel k-way boundary refinement under multi-constraint balance, for
//! the uncoarsening of the multilevel partitioner. Each round finds, in
//! parallel on a snapshot, the vertices whose move to a neighbouring part
//! lowers the cut; the moves are then applied in order of gain, each one
//! re-checked against the current parts (gain still positive, every
//! constraint of the target part still within its limit). A rebalancing
//! pass first moves the cheapest vertices out of overweight parts.
//!
//! The rounds are written once for any [`RefineGraph`]: the single
//! process's whole graph ([`View`]) and a rank's owned vertices with their
//! ghosts (`distributed::refine`, which adds the ranks' budgets).

use rayon::prelude::*;

use super::coarsen::View;

/// Rounds of refinement per level at most.
const ROUNDS: usize = 6;
/// Rounds of rebalancing per level at most: each move lowers the total
/// excess, so they end, but small steps may take many rounds.
const REBALANCE_ROUNDS: usize = 40;

/// Part weights and their limits.
pub struct Balance {
    pub k: usize,
    pub ncon: usize,
    /// `pw[p * ncon + c]`.
    pub pw: Vec<i64>,
    /// Largest allowed weight of a part, per constraint.
    pub max: Vec<i64>,
}

/// A graph as the refinement sees it.
pub(crate) trait RefineGraph: Sync {
    /// The vertices this process moves are `0..movable()`.
    fn movable(&self) -> usize;
    fn ncon(&self) -> usize;
    /// The `ncon` weights of vertex `v`.
    fn w(&self, v: usize) -> &[i64];
    /// Connection of `v` to every part into `conn` (length k); whether a
    /// neighbour of `v` is a ghost (a vertex another rank moves).
    fn connect(&self, v: usize, parts: &[u32], conn: &mut [i64]) -> bool;
}

impl RefineGraph for View<'_> {
    fn movable(&self) -> usize {
        self.n()
    }

    fn ncon(&self) -> usize {
        self.ncon
    }

    fn w(&self, v: usize) -> &[i64] {
        View::w(self, v)
    }

    fn connect(&self, v: usize, parts: &[u32], conn: &mut [i64]) -> bool {
        conn.fill(0);
        for (u, w) in self.edges(v) {
            conn[parts[u as usize] as usize] += w as i64;
        }
        false
    }
}

/// `pw[p * ncon + c]` of the vertices `parts` covers (from the first).
pub(crate) fn part_weights(g: &impl RefineGraph, parts: &[u32], k: usize) -> Vec<i64> {
    let ncon = g.ncon();
    let mut pw = vec![0i64; k * ncon];
    for (v, &p) in parts.iter().enumerate() {
        for (c, w) in g.w(v).iter().enumerate() {
            pw[p as usize * ncon + c] += w;
        }
    }
    pw
}

impl Balance {
    /// Limits `ub` times the average part, per constraint (METIS's
    /// `ubfactor`; never below the average rounded up).
    pub fn new(g: View<'_>, parts: &[u32], k: usize, ub: f64) -> Self {
        Self::with_limits(k, g.ncon, part_weights(&g, parts, k), ub)
    }

    /// The part weights `pw` with limits `ub` times the average part per
    /// constraint (never below the average rounded up).
    pub(crate) fn with_limits(k: usize, ncon: usize, pw: Vec<i64>, ub: f64) -> Self {
        let max = (0..ncon)
            .map(|c| {
                let total: i64 = (0..k).map(|p| pw[p * ncon + c]).sum();
                let avg = total as f64 / k as f64;
                ((avg * ub).floor() as i64).max(avg.ceil() as i64)
            })
            .collect();
        Balance { k, ncon, pw, max }
    }

    pub(crate) fn has_room(&self, p: usize, w: &[i64]) -> bool {
        w.iter()
            .enumerate()
            .all(|(c, &x)| x == 0 || self.pw[p * self.ncon + c] + x <= self.max[c])
    }

    /// Whether part `p` is over a limit in a constraint `w` weighs in.
    pub(crate) fn over_in(&self, p: usize, w: &[i64]) -> bool {
        w.iter()
            .enumerate()
            .any(|(c, &x)| x > 0 && self.pw[p * self.ncon + c] > self.max[c])
    }

    /// How far part `p` is over its limits if it weighed `pw`, relative to
    /// the limits, summed over constraints.
    fn excess(&self, pw: impl Iterator<Item = i64>) -> f64 {
        pw.zip(&self.max)
            .map(|(w, &m)| (w - m).max(0) as f64 / m.max(1) as f64)
            .sum()
    }

    /// Change of the total excess if `w` moved from `p` to `q`: moves that
    /// lower it are allowed to fill `q` beyond a limit a little, which
    /// breaks the deadlock of a part full in one constraint and with room
    /// in another.
    pub(crate) fn excess_delta(&self, p: usize, q: usize, w: &[i64]) -> f64 {
        let row = |x: usize| &self.pw[x * self.ncon..(x + 1) * self.ncon];
        let before = self.excess(row(p).iter().copied()) + self.excess(row(q).iter().copied());
        let after_p = self.excess(row(p).iter().zip(w).map(|(a, b)| a - b));
        let after_q = self.excess(row(q).iter().zip(w).map(|(a, b)| a + b));
        after_p + after_q - before
    }

    pub fn overweight(&self) -> bool {
        (0..self.k).any(|p| (0..self.ncon).any(|c| self.pw[p * self.ncon + c] > self.max[c]))
    }

    pub(crate) fn shift(&mut self, from: usize, to: usize, w: &[i64]) {
        for (c, x) in w.iter().enumerate() {
            self.pw[from * self.ncon + c] -= x;
            self.pw[to * self.ncon + c] += x;
        }
    }
}

/// Rebalances, then refines `parts` on `g`.
pub fn refine(g: View<'_>, parts: &mut [u32], bal: &mut Balance) {
    for _ in 0..REBALANCE_ROUNDS {
        if !bal.overweight() {
            break;
        }
        let mut moved = rebalance_round(&g, parts, bal);
        if moved == 0 {
            moved = swap_round(g, parts, bal);
        }
        tracing::debug!(moved, "rebalanced");
        if moved == 0 {
            break;
        }
    }
    for _ in 0..ROUNDS {
        let moved = refine_round(&g, parts, bal, true);
        if moved <= g.n() / 1000 {
            break;
        }
    }
}

/// One round of positive-gain moves; returns how many were made. `up`:
/// a vertex with ghost neighbours moves only to a higher part (else only
/// to a lower one), so that two ranks' boundary vertices do not swap parts
/// at once for nothing (ParMETIS's rule; no matter without ghosts).
pub(crate) fn refine_round<G: RefineGraph>(
    g: &G,
    parts: &mut [u32],
    bal: &mut Balance,
    up: bool,
) -> usize {
    let shared: &Balance = bal;
    let cands = candidates(g, parts, bal.k, |conn, v, p| {
        let ghost = g.connect(v, parts, conn);
        let dir_ok = |q: usize| !ghost || (q > p) == up;
        let (q, cq) = best_other(conn, p, |q| dir_ok(q) && shared.has_room(q, g.w(v)))?;
        let gain = cq - conn[p];
        (gain > 0).then_some((-gain, q))
    });
    let mut conn = vec![0i64; bal.k];
    let mut moved = 0;
    for &(_, v, q) in &cands {
        let (v, q) = (v as usize, q as usize);
        let p = parts[v] as usize;
        let w = g.w(v);
        if !bal.has_room(q, w) {
            continue;
        }
        g.connect(v, parts, &mut conn);
        if conn[q] - conn[p] <= 0 {
            continue;
        }
        bal.shift(p, q, w);
        parts[v] = q as u32;
        moved += 1;
    }
    moved
}

/// The moves `pick` proposes, judged in parallel on `parts` (each vertex's
/// connections in a buffer of length `k`, its part): (cost, vertex, part)
/// in order of cost, lowest first.
fn candidates<G: RefineGraph>(
    g: &G,
    parts: &[u32],
    k: usize,
    pick: impl Fn(&mut [i64], usize, usize) -> Option<(i64, usize)> + Sync + Send,
) -> Vec<(i64, u64, u32)> {
    let mut cands: Vec<(i64, u64, u32)> = (0..g.movable())
        .into_par_iter()
        .map_init(
            || vec![0i64; k],
            |conn, v| {
                let (cost, q) = pick(conn, v, parts[v] as usize)?;
                Some((cost, v as u64, q as u32))
            },
        )
        .flatten_iter()
        .collect();
    cands.par_sort_unstable();
    cands
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

/// Moves vertices out of overweight parts, cheapest cut increase first,
/// each move lowering the total excess.
pub(crate) fn rebalance_round<G: RefineGraph>(
    g: &G,
    parts: &mut [u32],
    bal: &mut Balance,
) -> usize {
    let shared: &Balance = bal;
    let cands = candidates(g, parts, bal.k, |conn, v, p| {
        let w = g.w(v);
        if !shared.over_in(p, w) {
            return None;
        }
        g.connect(v, parts, conn);
        // A part with room if there is one, else any move that lowers the
        // total excess.
        let (q, cq) = best_other(conn, p, |q| shared.has_room(q, w))
            .or_else(|| best_other(conn, p, |q| shared.excess_delta(p, q, w) < 0.0))?;
        Some((conn[p] - cq, q))
    });
    let mut moved = 0;
    for &(_, v, q) in &cands {
        let (v, q) = (v as usize, q as usize);
        let p = parts[v] as usize;
        let w = g.w(v);
        if bal.over_in(p, w) && (bal.has_room(q, w) || bal.excess_delta(p, q, w) < 0.0) {
            bal.shift(p, q, w);
            parts[v] = q as u32;
            moved += 1;
        }
    }
    moved
}

/// When no single move helps (every other part is full in a constraint the
/// movable vertices weigh in), swaps pairs: a vertex of an overweight part
/// `p` for one of another part `q` that weighs the same in every constraint
/// but less in the one `p` is over in.
fn swap_round(g: View<'_>, parts: &mut [u32], bal: &mut Balance) -> usize {
    let ncon = bal.ncon;
    let Some((p, c)) = (0..bal.k)
        .flat_map(|p| (0..ncon).map(move |c| (p, c)))
        .find(|&(p, c)| bal.pw[p * ncon + c] > bal.max[c])
    else {
        return 0;
    };
    let mut swapped = 0;
    for q in (0..bal.k).filter(|&q| q != p) {
        // Same weights but in `c`: key (weights with c zeroed, w_c).
        let key = |v: usize| {
            let mut w = g.w(v).to_vec();
            let wc = std::mem::take(&mut w[c]);
            (w, wc)
        };
        let mut from_p: Vec<(Vec<i64>, i64, usize)> = (0..g.n())
            .filter(|&v| parts[v] as usize == p && g.w(v)[c] > 0)
            .map(|v| {
                let (w, wc) = key(v);
                (w, -wc, v)
            })
            .collect();
        let mut from_q: Vec<(Vec<i64>, i64, usize)> = (0..g.n())
            .filter(|&u| parts[u] as usize == q)
            .map(|u| {
                let (w, wc) = key(u);
                (w, wc, u)
            })
            .collect();
        from_p.sort_unstable();
        from_q.sort_unstable();
        swapped += pair_up(&from_p, &from_q, (p, q, c), parts, bal, g);
        if bal.pw[p * ncon + c] <= bal.max[c] {
            break;
        }
    }
    swapped
}

/// Greedy pairing of heavy-in-`c` vertices of `p` with light ones of `q`
/// of the same other weights, while `p` is over and `q` has room in `c`.
fn pair_up(
    from_p: &[(Vec<i64>, i64, usize)],
    from_q: &[(Vec<i64>, i64, usize)],
    (p, q, c): (usize, usize, usize),
    parts: &mut [u32],
    bal: &mut Balance,
    g: View<'_>,
) -> usize {
    let ncon = bal.ncon;
    let (mut i, mut j, mut swapped) = (0, 0, 0);
    while i < from_p.len() && j < from_q.len() && bal.pw[p * ncon + c] > bal.max[c] {
        let ((wp, neg_cp, v), (wq, cq, u)) = (&from_p[i], &from_q[j]);
        match wp.cmp(wq) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                let diff = -neg_cp - cq;
                if diff > 0 && bal.pw[q * ncon + c] + diff <= bal.max[c] {
                    bal.shift(p, q, g.w(*v));
                    bal.shift(q, p, g.w(*u));
                    parts[*v] = q as u32;
                    parts[*u] = p as u32;
                    swapped += 1;
                }
                i += 1;
                j += 1;
            }
        }
    }
    swapped
}
