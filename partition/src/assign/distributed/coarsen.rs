//! Coarsening across ranks: size-constrained label propagation (as
//! `assign::coarsen`, dKaMinPar-style) and contraction.
//!
//! A cluster is named by a vertex (its global id), and that vertex's owner
//! keeps the cluster's weight and size and decides who joins: each batch,
//! every rank picks for its vertices the best linked cluster from its view
//! (ghost labels of the last batch), sends the joins to the clusters'
//! owners, which admit them in order while the cluster has room, and the
//! admitted vertices tell their old clusters' owners that they left. A
//! refused cluster is not asked again by that rank this level.
//!
//! Contraction numbers the clusters by prefix sums over the ranks (the
//! owner of a cluster owns its coarse vertex), then every rank sends each
//! coarse edge to the owner of its coarse source, in bounded rounds.

use std::collections::HashSet;

use rayon::prelude::*;

use super::graph::{self, Compacting, LocalGraph, Owners};
use super::stage;
use crate::assign::coarsen::{best_linked, fits, group_alone, prefers, BATCHES, ROUNDS};
use crate::exchange::{Buckets, Exchange};
use crate::Result;

/// One level coarser: the coarse graph and each owned vertex's coarse
/// vertex (global id).
pub fn coarsen<E: Exchange>(
    ex: &E,
    g: &LocalGraph,
    max_w: &[i64],
    seed: u64,
    round_edges: u64,
) -> Result<(LocalGraph, Vec<u64>)> {
    let labels = cluster(ex, g, max_w, seed)?;
    super::log_memory(ex.rank(), "clustered");
    let (cmap, owners) = number(ex, g, &labels)?;
    drop(labels);
    let coarse = contract(ex, g, &cmap, owners, round_edges)?;
    Ok((coarse, cmap))
}

/// Cluster state kept by the owner of each cluster's naming vertex.
struct Clusters {
    /// Label of every local vertex (owned, then ghosts): a global id.
    label: Vec<u64>,
    /// Weight of the cluster named by each owned vertex.
    cw: Vec<i64>,
    size: Vec<u64>,
    /// Remote clusters that refused a join.
    full: HashSet<u64>,
}

/// The labels of the owned vertices.
fn cluster<E: Exchange>(ex: &E, g: &LocalGraph, max_w: &[i64], seed: u64) -> Result<Vec<u64>> {
    let n = g.n_own;
    let mut c = Clusters {
        label: g.global_ids(),
        cw: g.vwgt.clone(),
        size: vec![1; n],
        full: HashSet::new(),
    };
    for round in 0..ROUNDS {
        let mut moved = 0u64;
        for b in 0..BATCHES {
            let range = n * b / BATCHES..n * (b + 1) / BATCHES;
            let wanted = best_clusters(g, &c, max_w, range, seed ^ round as u64);
            moved += joins(ex, g, &mut c, &wanted, max_w)?;
            let ghosts = g.halo_values(ex, &c.label[..n])?;
            c.label[n..].copy_from_slice(&ghosts);
        }
        let moved = ex.all_sum(moved)?;
        tracing::debug!(round, moved, "distributed label propagation");
        if moved < g.n_global() / 100 {
            break;
        }
    }
    merge_singletons(g, &mut c, max_w);
    c.label.truncate(n);
    Ok(c.label)
}

/// Whether owned `v` may ask to join cluster `l` as far as this rank knows.
fn room(g: &LocalGraph, c: &Clusters, v: usize, l: u64, max_w: &[i64]) -> bool {
    match g.owners.find(l) {
        Some((r, i)) if r == g.rank => {
            let i = i as usize;
            c.size[i] > 0 && fits(&c.cw[i * g.ncon..(i + 1) * g.ncon], g.w(v), max_w)
        }
        _ => !c.full.contains(&l),
    }
}

/// Connections of one vertex to its linked clusters, summed by label in an
/// open-addressing table kept per thread and cleared through the slots
/// used: no sort and no allocation per vertex.
#[derive(Default)]
struct Links {
    keys: Vec<u64>,
    sums: Vec<u64>,
    /// Slots in use, in the order first filled.
    used: Vec<usize>,
    /// Of the table's first `mask + 1` slots, indexed by a hash's top bits.
    mask: usize,
    shift: u32,
}

/// Marks a free slot (labels are global ids, below the vertex count).
const FREE: u64 = u64::MAX;

impl Links {
    /// Readies the table for up to `n` distinct keys.
    fn start(&mut self, n: usize) {
        // At most half full: probes stay short.
        let cap = (2 * n).next_power_of_two().max(16);
        if self.keys.len() < cap {
            self.keys.resize(cap, FREE);
            self.sums.resize(cap, 0);
        }
        self.mask = cap - 1;
        self.shift = 64 - cap.trailing_zeros();
    }

    /// Adds `w` to the sum of `key` (at most the `n` of [`Self::start`]
    /// distinct keys between clears).
    fn add(&mut self, key: u64, w: u64) {
        let mut at = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize;
        loop {
            if self.keys[at] == key {
                self.sums[at] += w;
                return;
            }
            if self.keys[at] == FREE {
                (self.keys[at], self.sums[at]) = (key, w);
                self.used.push(at);
                return;
            }
            at = (at + 1) & self.mask;
        }
    }

    /// Fills the table with the linked clusters of owned `v`.
    fn fill(&mut self, g: &LocalGraph, label: &[u64], v: usize) {
        self.start((g.xadj[v + 1] - g.xadj[v]) as usize);
        for (u, w) in g.edges(v) {
            self.add(label[u], w);
        }
    }

    /// The (label, connection) pairs filled since the last clear.
    fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.used.iter().map(|&i| (self.keys[i], self.sums[i]))
    }

    fn clear(&mut self) {
        for &i in &self.used {
            self.keys[i] = FREE;
        }
        self.used.clear();
    }
}

thread_local! {
    static LINKS: std::cell::RefCell<Links> = std::cell::RefCell::default();
}

/// Runs `f` on the linked clusters of owned `v` (this thread's table).
fn with_links<R>(g: &LocalGraph, label: &[u64], v: usize, f: impl FnOnce(&Links) -> R) -> R {
    LINKS.with(|l| {
        let mut l = l.borrow_mut();
        l.fill(g, label, v);
        let out = f(&l);
        l.clear();
        out
    })
}

/// The heaviest linked cluster `allowed` accepts (ties: the lower label)
/// and the connection to `own`.
fn rate(links: &Links, own: u64, allowed: impl Fn(u64) -> bool) -> (Option<(u64, u64)>, u64) {
    best_linked(links.iter(), own, allowed)
}

/// For owned vertices in `range`: the cluster each would rather join.
fn best_clusters(
    g: &LocalGraph,
    c: &Clusters,
    max_w: &[i64],
    range: std::ops::Range<usize>,
    seed: u64,
) -> Vec<(usize, u64)> {
    range
        .into_par_iter()
        .filter_map(|v| {
            let own = c.label[v];
            let (best, own_r) = with_links(g, &c.label, v, |l| {
                rate(l, own, |x| x != own && room(g, c, v, x, max_w))
            });
            let (to, r) = best?;
            prefers(r, own_r, seed, own, to).then_some((v, to))
        })
        .collect()
}

/// Sends the joins to the clusters' owners, which admit them in order;
/// the admitted leave their old clusters. Returns the joins admitted.
fn joins<E: Exchange>(
    ex: &E,
    g: &LocalGraph,
    c: &mut Clusters,
    wanted: &[(usize, u64)],
    max_w: &[i64],
) -> Result<u64> {
    let ncon = g.ncon;
    let rows = |pairs: &mut dyn Iterator<Item = (usize, u64)>| -> Result<(Vec<u64>, Vec<u32>)> {
        let (mut rows, mut dest) = (Vec::new(), Vec::new());
        for (v, l) in pairs {
            let (r, i) = g
                .owners
                .find(l)
                .ok_or_else(|| stage(format!("cluster {l} has no owner")))?;
            rows.push(i);
            rows.extend(g.w(v).iter().map(|&x| x as u64));
            dest.push(r);
        }
        Ok((rows, dest))
    };
    let (req, dest) = rows(&mut wanted.iter().copied())?;
    let send = Buckets::by_destination(&req, 1 + ncon, &dest, ex.size())?;
    let asked = ex.alltoallv(&send)?;
    let mut answer = Vec::new();
    for row in asked.data().chunks_exact(1 + ncon) {
        let i = row[0] as usize;
        let w: Vec<i64> = row[1..].iter().map(|&x| x as i64).collect();
        let ok = i < g.n_own && c.size[i] > 0 && fits(&c.cw[i * ncon..(i + 1) * ncon], &w, max_w);
        if ok {
            c.cw[i * ncon..(i + 1) * ncon]
                .iter_mut()
                .zip(&w)
                .for_each(|(s, x)| *s += x);
            c.size[i] += 1;
        }
        answer.push(u64::from(ok));
    }
    let counts: Vec<u64> = asked
        .counts()
        .iter()
        .map(|&n| n / (1 + ncon) as u64)
        .collect();
    let got = ex.alltoallv(&Buckets::new(answer, counts)?)?;
    let mut next = crate::exchange::plan::offsets(got.counts());
    let mut left = Vec::new();
    for (&(v, to), &r) in wanted.iter().zip(&dest) {
        let at = next[r as usize] as usize;
        next[r as usize] += 1;
        if got.data()[at] == 1 {
            left.push((v, c.label[v]));
            c.label[v] = to;
        } else {
            c.full.insert(to);
        }
    }
    let (rows_left, dest_left) = rows(&mut left.iter().copied())?;
    let send = Buckets::by_destination(&rows_left, 1 + ncon, &dest_left, ex.size())?;
    for row in ex.alltoallv(&send)?.data().chunks_exact(1 + ncon) {
        let i = row[0] as usize;
        if i >= g.n_own {
            return Err(stage(format!(
                "a vertex left cluster {i}, which rank {} does not own",
                g.rank
            )));
        }
        for (s, &x) in c.cw[i * ncon..(i + 1) * ncon].iter_mut().zip(&row[1..]) {
            *s -= x as i64;
        }
        c.size[i] = c.size[i].saturating_sub(1);
    }
    Ok(left.len() as u64)
}

/// Owned vertices left alone are grouped, on their rank, by the cluster
/// they like best, up to the limit (two leaves of one hub belong together).
fn merge_singletons(g: &LocalGraph, c: &mut Clusters, max_w: &[i64]) {
    let n = g.n_own;
    let globals = &c.label;
    let own_id: Vec<u64> = g.owners.globals(g.rank);
    let mut alone: Vec<(u64, usize)> = (0..n)
        .into_par_iter()
        .filter(|&v| globals[v] == own_id[v] && c.size[v] == 1)
        .map(|v| {
            let (best, _) = with_links(g, &c.label, v, |l| rate(l, own_id[v], |x| x != own_id[v]));
            (best.map_or(u64::MAX, |b| b.0), v)
        })
        .collect();
    alone.par_sort_unstable();
    let label = &mut c.label;
    group_alone(
        &alone,
        g.ncon,
        max_w,
        |v| g.w(v),
        |v| own_id[v],
        |v, l| label[v] = l,
    );
}

/// Numbers the clusters by prefix sums over the ranks: each owned vertex's
/// coarse vertex, and who owns the coarse vertices.
fn number<E: Exchange>(ex: &E, g: &LocalGraph, labels: &[u64]) -> Result<(Vec<u64>, Owners)> {
    let mut distinct = labels.to_vec();
    distinct.par_sort_unstable();
    distinct.dedup();
    // Mark the used clusters at their owners.
    let used = mark_used(ex, &g.owners, &distinct)?;
    let count: u64 = used.iter().sum();
    let counts = ex.allgather(&[count])?;
    let base: u64 = counts[..g.rank as usize].iter().sum();
    let mut next = base;
    let ids: Vec<u64> = used
        .iter()
        .map(|&u| {
            let id = next;
            next += u;
            id
        })
        .collect();
    let coarse_of = graph::lookup(ex, &g.owners, &distinct, &ids)?;
    let cmap: Vec<u64> = labels
        .par_iter()
        .map(|l| coarse_of[distinct.partition_point(|d| d < l)])
        .collect();
    // Coarse vertices split by their edges, not by who named the clusters
    // nor by count: ties go to lower labels, so rank 0 names more and larger
    // clusters and would receive more coarse edges than the others.
    let total: u64 = counts.iter().sum();
    let split = split_by_degree(ex, g, &cmap, total)?;
    Ok((cmap, Owners::contiguous(&split)))
}

/// Coarse ids per bucket of the degree histogram (at most this many buckets).
const SPLIT_BUCKETS: u64 = 1 << 16;

/// How many of `total` coarse vertices (numbered in order) each rank owns,
/// so that each gets about an equal share of their members' fine adjacency
/// entries (what its coarse edges will be at most): a histogram of degree
/// over buckets of coarse ids, summed over the ranks, cut at bucket edges.
fn split_by_degree<E: Exchange>(
    ex: &E,
    g: &LocalGraph,
    cmap: &[u64],
    total: u64,
) -> Result<Vec<u64>> {
    let k = u64::from(ex.size());
    let buckets = total.clamp(1, SPLIT_BUCKETS);
    let edge = |b: u64| (u128::from(total) * u128::from(b) / u128::from(buckets)) as u64;
    let mut hist = vec![0u64; buckets as usize];
    for (v, &c) in cmap.iter().enumerate().take(g.n_own) {
        // The bucket whose id range [edge(b), edge(b + 1)) holds c.
        let b = ((u128::from(c) * u128::from(buckets)) / u128::from(total.max(1))) as usize;
        let b = (b..hist.len())
            .find(|&b| edge(b as u64 + 1) > c)
            .unwrap_or(hist.len() - 1);
        hist[b] += g.xadj[v + 1] - g.xadj[v] + 1;
    }
    let all = ex.allgather(&hist)?;
    let mut sum = vec![0u64; hist.len()];
    for chunk in all.chunks(hist.len()) {
        sum.iter_mut().zip(chunk).for_each(|(s, c)| *s += c);
    }
    let weight: u128 = sum.iter().map(|&w| u128::from(w)).sum();
    let mut ends = Vec::with_capacity(k as usize);
    let (mut acc, mut b) = (0u128, 0u64);
    for r in 1..=k {
        let want = weight * u128::from(r) / u128::from(k);
        while b < buckets && (acc < want || r == k) {
            acc += u128::from(sum[b as usize]);
            b += 1;
        }
        ends.push(edge(b));
    }
    let mut at = 0;
    Ok(ends
        .into_iter()
        .map(|e| {
            let n = e - at;
            at = e;
            n
        })
        .collect())
}

/// At each owner, 1 for every owned vertex some rank named in `keys`.
fn mark_used<E: Exchange>(ex: &E, owners: &Owners, keys: &[u64]) -> Result<Vec<u64>> {
    let mut dest = Vec::with_capacity(keys.len());
    let mut locals = Vec::with_capacity(keys.len());
    for &k in keys {
        let (r, l) = owners
            .find(k)
            .ok_or_else(|| stage(format!("cluster {k} has no owner")))?;
        dest.push(r);
        locals.push(l);
    }
    let got = ex.alltoallv(&Buckets::by_destination(&locals, 1, &dest, ex.size())?)?;
    let mut used = vec![0u64; owners.counts[ex.rank() as usize] as usize];
    for &l in got.data() {
        *used
            .get_mut(l as usize)
            .ok_or_else(|| stage(format!("cluster {l} is not rank {}'s", ex.rank())))? = 1;
    }
    Ok(used)
}

/// The coarse graph: weights summed at the coarse vertices' owners, coarse
/// edges sent to the owner of their source in rounds of about
/// `round_edges` entries, parallel edges merged, inner edges dropped.
fn contract<E: Exchange>(
    ex: &E,
    g: &LocalGraph,
    cmap: &[u64],
    owners: Owners,
    round_edges: u64,
) -> Result<LocalGraph> {
    let (rank, world, ncon) = (ex.rank(), ex.size(), g.ncon);
    let n_coarse = owners.counts[rank as usize] as usize;
    let all_owned = g.with_ghosts(ex, cmap.to_vec())?;
    let all = &all_owned[..];
    let vwgt = coarse_weights(ex, g, cmap, &owners, n_coarse)?;
    let chunks = chunk_bounds(&g.xadj, round_edges.max(1));
    let rounds = ex.all_max(chunks.len() as u64)?;
    let mut acc = Compacting::default();
    for r in 0..rounds as usize {
        let range = chunks.get(r).cloned().unwrap_or(0..0);
        let (rows, dest) = coarse_edges(g, all, &owners, range)?;
        let send = Buckets::by_destination(&rows, 3, &dest, world)?;
        drop(rows);
        for row in ex.alltoallv(&send)?.data().chunks_exact(3) {
            if row[0] >= n_coarse as u64 {
                return Err(stage(format!(
                    "rank {rank} got an edge of a coarse vertex it does not own"
                )));
            }
            acc.push(row[0] as u32, row[1], row[2])?;
        }
        acc.maybe_compact(true);
    }
    // The table may have grown to a round's entries: give it back.
    LINKS.with(|l| l.take());
    super::log_memory(rank, "contraction received");
    let (xadj, nbrs, w) = acc.finish(n_coarse);
    let mut coarse = graph::assemble(ex, owners, n_coarse, xadj, nbrs, w)?;
    coarse.vwgt = vwgt;
    coarse.ncon = ncon;
    Ok(coarse)
}

/// The coarse edges of the owned vertices in `range`: the members of one
/// coarse vertex summed in a table (no sort of the entries), inner edges
/// dropped; rows `[local index at its owner, coarse neighbour, weight]`
/// and the owner of each.
fn coarse_edges(
    g: &LocalGraph,
    all: &[u64],
    owners: &Owners,
    range: std::ops::Range<usize>,
) -> Result<(Vec<u64>, Vec<u32>)> {
    let mut members: Vec<(u64, usize)> = range.map(|v| (all[v], v)).collect();
    members.sort_unstable();
    let (mut rows, mut dest) = (Vec::new(), Vec::new());
    LINKS.with(|t| {
        let mut t = t.borrow_mut();
        for group in members.chunk_by(|a, b| a.0 == b.0) {
            let c = group[0].0;
            let entries: u64 = group.iter().map(|&(_, v)| g.xadj[v + 1] - g.xadj[v]).sum();
            t.start(entries as usize);
            for &(_, v) in group {
                for (u, w) in g.edges(v) {
                    if all[u] != c {
                        t.add(all[u], w);
                    }
                }
            }
            let (o, l) = owners
                .find(c)
                .ok_or_else(|| stage(format!("coarse vertex {c} has no owner")))?;
            for (d, w) in t.iter() {
                rows.extend([l, d, w]);
                dest.push(o);
            }
            t.clear();
        }
        Ok((rows, dest))
    })
}

/// Ranges of owned vertices with about `limit` edges each (at least one
/// vertex).
fn chunk_bounds(xadj: &[u64], limit: u64) -> Vec<std::ops::Range<usize>> {
    let n = xadj.len().saturating_sub(1);
    let mut out = Vec::new();
    let mut start = 0usize;
    while start < n {
        let mut end = start + 1;
        while end < n && xadj[end + 1] - xadj[start] <= limit {
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// Each coarse vertex's weights, summed at its owner.
fn coarse_weights<E: Exchange>(
    ex: &E,
    g: &LocalGraph,
    cmap: &[u64],
    owners: &Owners,
    n_coarse: usize,
) -> Result<Vec<i64>> {
    let ncon = g.ncon;
    let (mut rows, mut dest) = (Vec::new(), Vec::new());
    for (v, &c) in cmap.iter().enumerate() {
        let (o, l) = owners
            .find(c)
            .ok_or_else(|| stage(format!("coarse vertex {c} has no owner")))?;
        rows.push(l);
        rows.extend(g.w(v).iter().map(|&x| x as u64));
        dest.push(o);
    }
    let send = Buckets::by_destination(&rows, 1 + ncon, &dest, ex.size())?;
    let mut vwgt = vec![0i64; n_coarse * ncon];
    for row in ex.alltoallv(&send)?.data().chunks_exact(1 + ncon) {
        let i = row[0] as usize;
        let slot = vwgt
            .get_mut(i * ncon..(i + 1) * ncon)
            .ok_or_else(|| stage(format!("coarse vertex {i} is not rank {}'s", ex.rank())))?;
        slot.iter_mut()
            .zip(&row[1..])
            .for_each(|(s, &x)| *s += x as i64);
    }
    Ok(vwgt)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Repeated keys are summed, each key listed once in first-touch
    /// order, and a cleared table (even readied smaller) starts empty.
    #[test]
    fn links_table_sums_by_key_and_clears() {
        let mut t = Links::default();
        t.start(1000);
        for k in 0..1000u64 {
            t.add(k * 7919, 1);
            t.add((k % 10) * 7919, 2);
        }
        let got: Vec<(u64, u64)> = t.iter().collect();
        assert_eq!(got.len(), 1000);
        assert_eq!(got[3], (3 * 7919, 1 + 2 * 100));
        assert_eq!(got[999], (999 * 7919, 1));
        t.clear();
        t.start(2);
        t.add(5, 1);
        t.add(1 << 40, 4);
        t.add(5, 2);
        assert_eq!(t.iter().collect::<Vec<_>>(), [(5, 3), (1 << 40, 4)]);
    }

    /// The best allowed cluster wins, ties go to the lower label, and the
    /// connection to the own cluster is reported even when not allowed.
    #[test]
    fn rate_picks_heaviest_allowed_lowest_label() {
        let mut t = Links::default();
        t.start(4);
        for (k, w) in [(9u64, 3u64), (4, 3), (7, 5), (2, 1)] {
            t.add(k, w);
        }
        assert_eq!(rate(&t, 2, |_| true), (Some((7, 5)), 1));
        assert_eq!(rate(&t, 7, |x| x != 7), (Some((4, 3)), 5));
        assert_eq!(rate(&t, 1, |x| x == 2), (Some((2, 1)), 0));
        assert_eq!(rate(&t, 1, |_| false), (None, 0));
    }
}
