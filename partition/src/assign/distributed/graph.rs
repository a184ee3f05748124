//! One rank's piece of a distributed graph: the vertices it owns, their
//! symmetric adjacency in local u32 indices, and the ghosts (neighbours
//! owned elsewhere) with the lists that keep their values current.
//!
//! Level 0 is built from the rank's input share: every edge goes to the
//! owners of both ends in bounded rounds, so no buffer holds the share
//! twice; received entries are compacted (sorted, deduplicated) whenever
//! they have doubled, so they hold about the final adjacency.

use rayon::prelude::*;

use super::stage;
use crate::exchange::{Buckets, Exchange, RoundBuffers};
use crate::input::Share;
use crate::Result;

/// Which rank owns which global vertex: sorted segments of global ids.
#[derive(Clone, Debug, Default)]
pub struct Owners {
    starts: Vec<u64>,
    ends: Vec<u64>,
    ranks: Vec<u32>,
    /// Local index of each segment's first vertex at its owner.
    local: Vec<u64>,
    /// Vertices each rank owns.
    pub counts: Vec<u64>,
    /// Input level: this rank's vertices per node type.
    pub own_per_type: Vec<u64>,
}

impl Owners {
    /// Rank `r` owns `counts[r]` consecutive ids after the ranks before it.
    pub fn contiguous(counts: &[u64]) -> Owners {
        let mut o = Owners {
            counts: counts.to_vec(),
            ..Default::default()
        };
        let mut at = 0u64;
        for (r, &c) in counts.iter().enumerate() {
            o.push(at, at + c, r as u32, 0);
            at += c;
        }
        o
    }

    /// The input's owners: per node type, rank r owns the rows it read
    /// (`node_first`), so its local order is type-major.
    pub fn of_share<E: Exchange>(ex: &E, share: &Share) -> Result<Owners> {
        let g = &share.graph;
        let firsts = ex.allgather(&share.node_first)?;
        let (nt, world) = (g.ntypes.len(), ex.size() as usize);
        let offs = g.node_offsets();
        let mut o = Owners {
            counts: vec![0; world],
            ..Default::default()
        };
        for (t, ty) in g.ntypes.iter().enumerate() {
            for r in 0..world {
                let lo = firsts[r * nt + t];
                let hi = if r + 1 < world {
                    firsts[(r + 1) * nt + t]
                } else {
                    ty.count
                };
                if lo > hi || hi > ty.count {
                    return Err(stage(format!(
                        "rank {r} reads rows {lo}..{hi} of node type {:?} ({} nodes): \
                         the shares must follow each other",
                        ty.name, ty.count
                    )));
                }
                if r == ex.rank() as usize {
                    o.own_per_type.push(hi - lo);
                }
                let local = o.counts[r];
                o.push(offs[t] + lo, offs[t] + hi, r as u32, local);
                o.counts[r] += hi - lo;
            }
        }
        Ok(o)
    }

    fn push(&mut self, start: u64, end: u64, rank: u32, local: u64) {
        if end > start {
            self.starts.push(start);
            self.ends.push(end);
            self.ranks.push(rank);
            self.local.push(local);
        }
    }

    /// The owner of global vertex `v` and its local index there.
    pub fn find(&self, v: u64) -> Option<(u32, u64)> {
        let i = self.starts.partition_point(|&s| s <= v).checked_sub(1)?;
        (v < self.ends[i]).then(|| (self.ranks[i], self.local[i] + v - self.starts[i]))
    }

    /// Every vertex.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Global ids of rank `rank`'s vertices, in its local order.
    pub fn globals(&self, rank: u32) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.counts[rank as usize] as usize);
        for i in (0..self.starts.len()).filter(|&i| self.ranks[i] == rank) {
            out.extend(self.starts[i]..self.ends[i]);
        }
        out
    }
}

/// One rank's piece of a graph (see the module docs).
#[derive(Default)]
pub struct LocalGraph {
    pub owners: Owners,
    pub rank: u32,
    pub n_own: usize,
    /// Global ids of the ghosts, grouped by owner in rank order: ghost `i`
    /// has local index `n_own + i`.
    pub ghosts: Vec<u64>,
    pub ghost_counts: Vec<u64>,
    /// Per rank, the owned local indices whose values it keeps as ghosts.
    pub halo: Buckets<u64>,
    pub xadj: Vec<u64>,
    pub adj: Vec<u32>,
    /// Edge weights; empty = all 1.
    pub adjw: Vec<u64>,
    pub vwgt: Vec<i64>,
    pub ncon: usize,
}

impl LocalGraph {
    /// Owned and ghost vertices.
    pub fn n_local(&self) -> usize {
        self.n_own + self.ghosts.len()
    }

    pub fn n_global(&self) -> u64 {
        self.owners.total()
    }

    /// Neighbours of owned `v` with edge weights.
    pub fn edges(&self, v: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        let (a, b) = (self.xadj[v] as usize, self.xadj[v + 1] as usize);
        let w = &self.adjw;
        self.adj[a..b]
            .iter()
            .enumerate()
            .map(move |(i, &u)| (u as usize, if w.is_empty() { 1 } else { w[a + i] }))
    }

    pub fn w(&self, v: usize) -> &[i64] {
        &self.vwgt[v * self.ncon..(v + 1) * self.ncon]
    }

    /// Global id of local vertex `v` (owned or ghost).
    pub fn global_ids(&self) -> Vec<u64> {
        let mut g = self.owners.globals(self.rank);
        g.extend_from_slice(&self.ghosts);
        g
    }

    /// The ghosts' values of `own` (one per owned vertex) from their owners.
    pub fn halo_values<E: Exchange, T: crate::exchange::Elem>(
        &self,
        ex: &E,
        own: &[T],
    ) -> Result<Vec<T>> {
        let data = self.halo.data().iter().map(|&i| own[i as usize]).collect();
        let got = ex.alltoallv(&Buckets::new(data, self.halo.counts().to_vec())?)?;
        Ok(got.into_data())
    }

    /// `own` followed by the ghosts' values: one value per local vertex.
    pub fn with_ghosts<E: Exchange, T: crate::exchange::Elem>(
        &self,
        ex: &E,
        mut own: Vec<T>,
    ) -> Result<Vec<T>> {
        let ghosts = self.halo_values(ex, &own)?;
        own.extend_from_slice(&ghosts);
        Ok(own)
    }
}

/// Marks a record sent to the owner of an edge's destination.
const IN_EDGE: u64 = 1 << 63;
/// Marks a self loop: counted in the in-degree, not linked.
const LOOP: u64 = 1 << 62;
const LOCAL: u64 = (1 << 32) - 1;

/// Level 0 from the share: the symmetric, deduplicated adjacency without
/// loops over all edge types (as `csr::symmetric`), and each owned
/// vertex's in-degree (loops and repeats counted, as `weights::in_degrees`).
///
/// Two passes over the share, each in rounds of `round_edges` edges: the
/// first sends one word per edge end and counts the degrees, the second
/// sends the neighbours into their exact places, so a rank holds one
/// 8-byte slot per entry (then 4 bytes) and never a list of pairs.
pub fn build<E: Exchange>(
    ex: &E,
    share: &Share,
    owners: Owners,
    round_edges: u64,
) -> Result<(LocalGraph, Vec<i64>)> {
    let rank = ex.rank();
    let n_own = owners.counts[rank as usize];
    let n_own = usize::try_from(n_own)
        .ok()
        .filter(|&n| n as u64 <= LOCAL)
        .ok_or_else(|| {
            stage(format!(
                "rank {rank} owns {n_own} nodes, more than 32-bit local indices"
            ))
        })?;
    let g = &share.graph;
    let total: u64 = g.etypes.iter().map(|e| e.count()).sum();
    let round_edges = round_edges.max(1);
    let rounds = ex.all_max(total.div_ceil(round_edges))?;
    let t0 = std::time::Instant::now();
    let (mut deg, mut indeg) = (vec![0u64; n_own], vec![0i64; n_own]);
    let out = Outgoing {
        share,
        owners: &owners,
        n: round_edges,
    };
    let mut cursor = EdgeCursor::default();
    let mut bufs = RoundBuffers::default();
    for _ in 0..rounds {
        let got = send_round(ex, &out, &mut cursor, false, &mut bufs)?;
        for &r in got.data() {
            let local = owned_index(r & LOCAL, n_own, rank)?;
            indeg[local] += i64::from(r & IN_EDGE != 0);
            deg[local] += u64::from(r & LOOP == 0);
        }
        bufs.recycle(got);
    }
    tracing::debug!(rank, secs = t0.elapsed().as_secs_f64(), "degrees counted");
    let mut xadj = Vec::with_capacity(n_own + 1);
    xadj.push(0u64);
    for d in deg {
        xadj.push(xadj[xadj.len() - 1] + d);
    }
    let mut fill: Vec<u64> = xadj[..n_own].to_vec();
    let mut nbrs = vec![0u64; xadj[n_own] as usize];
    let mut cursor = EdgeCursor::default();
    for _ in 0..rounds {
        let got = send_round(ex, &out, &mut cursor, true, &mut bufs)?;
        for r in got.data().chunks_exact(2) {
            let local = owned_index(r[0], n_own, rank)?;
            let at = fill[local];
            if at >= xadj[local + 1] {
                return Err(stage(format!(
                    "rank {rank}: the second pass sent more edges than the first"
                )));
            }
            nbrs[at as usize] = r[1];
            fill[local] += 1;
        }
        bufs.recycle(got);
    }
    drop((fill, bufs));
    tracing::debug!(rank, secs = t0.elapsed().as_secs_f64(), "neighbours placed");
    sort_dedup(&mut xadj, &mut nbrs);
    tracing::debug!(rank, secs = t0.elapsed().as_secs_f64(), "rows deduplicated");
    let graph = assemble(ex, owners, n_own, xadj, nbrs, Vec::new())?;
    tracing::debug!(
        rank,
        secs = t0.elapsed().as_secs_f64(),
        "local graph assembled"
    );
    Ok((graph, indeg))
}

fn owned_index(local: u64, n_own: usize, rank: u32) -> Result<usize> {
    if local < n_own as u64 {
        Ok(local as usize)
    } else {
        Err(stage(format!(
            "rank {rank} got an edge of a node it does not own"
        )))
    }
}

/// The share's edges as the rounds send them: `n` a round, to the owners
/// of their ends.
struct Outgoing<'a> {
    share: &'a Share,
    owners: &'a Owners,
    n: u64,
}

/// One round of the share's edges to the owners of their ends: one word
/// per end (first pass), or `[local, neighbour]` per non-loop end.
fn send_round<E: Exchange>(
    ex: &E,
    out: &Outgoing<'_>,
    cursor: &mut EdgeCursor,
    pairs: bool,
    bufs: &mut RoundBuffers<u64>,
) -> Result<Buckets<u64>> {
    let (g, owners, n) = (&out.share.graph, out.owners, out.n);
    let offs = g.node_offsets();
    let (rows, dest) = (&mut bufs.rows, &mut bufs.dest);
    cursor.take(g, n, |e, s, d| {
        let ty = &g.etypes[e];
        let (s, d) = (offs[ty.src_type] + s, offs[ty.dst_type] + d);
        let bad = |v: u64| {
            stage(format!(
                "edge type {}: node id {v} is beyond the {} nodes",
                g.canonical_etype(e),
                owners.total()
            ))
        };
        let (rs, ls) = owners.find(s).ok_or_else(|| bad(s))?;
        let (rd, ld) = owners.find(d).ok_or_else(|| bad(d))?;
        if pairs {
            if s != d {
                rows.extend([ld, s, ls, d]);
                dest.extend([rd, rs]);
            }
        } else if s == d {
            rows.push(ld | IN_EDGE | LOOP);
            dest.push(rd);
        } else {
            rows.extend([ld | IN_EDGE, ls]);
            dest.extend([rd, rs]);
        }
        Ok(())
    })?;
    bufs.exchange(ex, if pairs { 2 } else { 1 })
}

/// Sorts every row of `nbrs` in place, drops repeats and closes the gaps,
/// rewriting `xadj`.
pub fn sort_dedup(xadj: &mut [u64], nbrs: &mut Vec<u64>) {
    let n = xadj.len().saturating_sub(1);
    let mut out = 0usize;
    for v in 0..n {
        let (a, b) = (xadj[v] as usize, xadj[v + 1] as usize);
        xadj[v] = out as u64;
        nbrs[a..b].sort_unstable();
        for i in a..b {
            // `out <= i`: the kept entries never overtake the read ones.
            if i == a || nbrs[i] != nbrs[i - 1] {
                nbrs[out] = nbrs[i];
                out += 1;
            }
        }
    }
    if let Some(last) = xadj.last_mut() {
        *last = out as u64;
    }
    nbrs.truncate(out);
    nbrs.shrink_to_fit();
}

/// Walks a share's edges type after type, a bounded number at a time.
#[derive(Default)]
struct EdgeCursor {
    etype: usize,
    at: usize,
}

impl EdgeCursor {
    /// Calls `f(type, src, dst)` for the next `n` edges (fewer at the end).
    fn take(
        &mut self,
        g: &crate::model::InputGraph,
        n: u64,
        mut f: impl FnMut(usize, u64, u64) -> Result<()>,
    ) -> Result<()> {
        let mut left = n;
        while left > 0 && self.etype < g.etypes.len() {
            let t = &g.etypes[self.etype];
            let end = t.src.len().min(self.at + left as usize);
            for i in self.at..end {
                f(self.etype, t.src[i], t.dst[i])?;
            }
            left -= (end - self.at) as u64;
            self.at = end;
            if self.at == t.src.len() {
                (self.etype, self.at) = (self.etype + 1, 0);
            }
        }
        Ok(())
    }
}

/// Received `(local, global neighbour, weight)` entries, kept about the size
/// of their distinct pairs: sorted and merged whenever they have grown by
/// half. 16 bytes each: the pair packed into one word (coarse vertices are
/// numbered below 2^32).
#[derive(Default)]
pub struct Compacting {
    entries: Vec<(u64, u64)>,
    compacted: usize,
}

impl Compacting {
    pub fn push(&mut self, local: u32, nbr: u64, w: u64) -> Result<()> {
        let nbr = u32::try_from(nbr).map_err(|_| {
            stage(format!(
                "coarse vertex {nbr}: a coarse graph has at most 2^32 vertices"
            ))
        })?;
        self.entries
            .push(((u64::from(local) << 32) | u64::from(nbr), w));
        Ok(())
    }

    /// Compacts when the entries have grown by half since the last time;
    /// `sum` adds the weights of repeats (else they are dropped).
    pub fn maybe_compact(&mut self, sum: bool) {
        if self.entries.len() > self.compacted + self.compacted / 2 + (1 << 16) {
            compact(&mut self.entries, sum);
            self.compacted = self.entries.len();
        }
    }

    /// The merged entries as rows over `n` owned vertices: offsets,
    /// neighbours, weights. Filled from the back while the entries are cut
    /// and released, so the two never both stand whole.
    pub fn finish(mut self, n: usize) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
        compact(&mut self.entries, true);
        let mut xadj = vec![0u64; n + 1];
        for e in &self.entries {
            xadj[(e.0 >> 32) as usize + 1] += 1;
        }
        for i in 0..n {
            xadj[i + 1] += xadj[i];
        }
        let len = self.entries.len();
        // Zeroed pages are not resident until written.
        let (mut nbrs, mut w) = (vec![0u64; len], vec![0u64; len]);
        while !self.entries.is_empty() {
            let keep = self.entries.len().saturating_sub(1 << 20);
            for (i, e) in self.entries[keep..].iter().enumerate() {
                nbrs[keep + i] = e.0 & LOCAL;
                w[keep + i] = e.1;
            }
            self.entries.truncate(keep);
            self.entries.shrink_to_fit();
        }
        (xadj, nbrs, w)
    }
}

fn compact(e: &mut Vec<(u64, u64)>, sum: bool) {
    e.par_sort_unstable_by_key(|x| x.0);
    let mut w = 0usize;
    for r in 0..e.len() {
        if w > 0 && e[w - 1].0 == e[r].0 {
            if sum {
                e[w - 1].1 += e[r].1;
            }
        } else {
            e[w] = e[r];
            w += 1;
        }
    }
    e.truncate(w);
}

/// A rank's piece from its rows of global neighbour ids (sorted, without
/// repeats; `adjw` empty or one weight each): ghosts numbered, neighbours
/// as local u32 indices, the halo lists agreed with the ghosts' owners.
pub fn assemble<E: Exchange>(
    ex: &E,
    owners: Owners,
    n_own: usize,
    xadj: Vec<u64>,
    nbrs: Vec<u64>,
    adjw: Vec<u64>,
) -> Result<LocalGraph> {
    let (rank, world) = (ex.rank(), ex.size() as usize);
    let t0 = std::time::Instant::now();
    let find = |v: u64| {
        owners.find(v).ok_or_else(|| {
            stage(format!(
                "neighbour {v} is beyond the {} nodes",
                owners.total()
            ))
        })
    };
    let mut bits = GhostBits::new(owners.total())?;
    for &v in &nbrs {
        if find(v)?.0 != rank {
            bits.mark(v);
        }
    }
    let n_ghosts = bits.rank_all();
    if n_own as u64 + n_ghosts > u64::from(u32::MAX) {
        return Err(stage(format!(
            "rank {rank} holds {n_own} nodes and {n_ghosts} ghosts, more than 32-bit local indices"
        )));
    }
    let (ghosts, want, ghost_counts, slot) = ghost_order(&bits, n_ghosts as usize, world, find)?;
    tracing::debug!(rank, secs = t0.elapsed().as_secs_f64(), "ghosts listed");
    let mut adj = Vec::with_capacity(nbrs.len());
    for &v in &nbrs {
        let (r, l) = find(v)?;
        let idx = if r == rank {
            l
        } else {
            n_own as u64 + u64::from(slot[bits.position(v)])
        };
        adj.push(idx as u32);
    }
    drop((nbrs, bits, slot));
    tracing::debug!(rank, secs = t0.elapsed().as_secs_f64(), "adjacency mapped");
    let halo = ex.alltoallv(&Buckets::new(want, ghost_counts.clone())?)?;
    if halo
        .data()
        .iter()
        .any(|&i| i >= owners.counts[rank as usize])
    {
        return Err(stage(format!(
            "rank {rank} was asked for a node it does not own"
        )));
    }
    Ok(LocalGraph {
        owners,
        rank,
        n_own,
        ghosts,
        ghost_counts,
        halo,
        xadj,
        adj,
        adjw,
        vwgt: Vec::new(),
        ncon: 0,
    })
}

/// The ghosts in owner order (grouped by owner rank, by id within one):
/// their global ids, their local indices at their owners, how many each
/// rank owns, and each ghost's number by its position in id order.
#[allow(clippy::type_complexity)]
fn ghost_order(
    bits: &GhostBits,
    n: usize,
    world: usize,
    find: impl Fn(u64) -> Result<(u32, u64)>,
) -> Result<(Vec<u64>, Vec<u64>, Vec<u64>, Vec<u32>)> {
    let mut counts = vec![0u64; world];
    for v in bits.ids() {
        counts[find(v)?.0 as usize] += 1;
    }
    // Ids ascend, so each owner's ghosts come in id order.
    let mut next = crate::exchange::plan::offsets(&counts);
    let (mut ghosts, mut want, mut slot) = (vec![0u64; n], vec![0u64; n], vec![0u32; n]);
    for (i, v) in bits.ids().enumerate() {
        let (r, l) = find(v)?;
        let at = next[r as usize] as usize;
        next[r as usize] += 1;
        (ghosts[at], want[at], slot[i]) = (v, l, at as u32);
    }
    Ok((ghosts, want, counts, slot))
}

/// A bit per global vertex marking the ghosts, with the count of marks
/// before each word: a ghost's position in id order is two reads, and
/// the marks list the ghosts sorted (an eighth of a byte per vertex).
struct GhostBits {
    bits: Vec<u64>,
    before: Vec<u32>,
}

impl GhostBits {
    fn new(total: u64) -> Result<GhostBits> {
        let words = usize::try_from(total.div_ceil(64))
            .map_err(|_| stage(format!("{total} vertices do not fit in memory")))?;
        Ok(GhostBits {
            bits: vec![0; words],
            before: Vec::new(),
        })
    }

    /// `v` is below the total (the caller found its owner).
    fn mark(&mut self, v: u64) {
        self.bits[(v / 64) as usize] |= 1 << (v % 64);
    }

    /// Counts the marks before each word; returns all of them.
    fn rank_all(&mut self) -> u64 {
        let mut n = 0u64;
        self.before = self
            .bits
            .iter()
            .map(|w| {
                let at = n as u32;
                n += u64::from(w.count_ones());
                at
            })
            .collect();
        n
    }

    /// Position in id order of marked `v` (after [`Self::rank_all`]).
    fn position(&self, v: u64) -> usize {
        let (w, b) = ((v / 64) as usize, v % 64);
        let below = self.bits[w] & ((1u64 << b) - 1);
        self.before[w] as usize + below.count_ones() as usize
    }

    /// The marked ids, ascending.
    fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.bits.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let b = w.trailing_zeros();
                    w &= w - 1;
                    i as u64 * 64 + u64::from(b)
                })
            })
        })
    }
}

/// The values of `keys` (global ids of `owners`' graph) from their owners,
/// who hold `values` (one per owned vertex): one request and one reply.
pub fn lookup<E: Exchange, T: crate::exchange::Elem>(
    ex: &E,
    owners: &Owners,
    keys: &[u64],
    values: &[T],
) -> Result<Vec<T>> {
    let world = ex.size();
    let mut dest = Vec::with_capacity(keys.len());
    let mut locals = Vec::with_capacity(keys.len());
    for &k in keys {
        let (r, l) = owners.find(k).ok_or_else(|| {
            stage(format!(
                "vertex {k} is beyond the {} vertices",
                owners.total()
            ))
        })?;
        dest.push(r);
        locals.push(l);
    }
    let send = Buckets::by_destination(&locals, 1, &dest, world)?;
    drop(locals);
    let asked = ex.alltoallv(&send)?;
    drop(send);
    let mut answer = Vec::with_capacity(asked.data().len());
    for &l in asked.data() {
        let v = values.get(l as usize).ok_or_else(|| {
            stage(format!(
                "rank {} was asked for vertex {l} it does not own",
                ex.rank()
            ))
        })?;
        answer.push(*v);
    }
    let got = ex.alltoallv(&Buckets::new(answer, asked.counts().to_vec())?)?;
    // The send was a stable sort by owner: undo it.
    let mut next = crate::exchange::plan::offsets(got.counts());
    Ok(dest
        .iter()
        .map(|&r| {
            let at = next[r as usize];
            next[r as usize] += 1;
            got.data()[at as usize]
        })
        .collect())
}

/// Element-wise sums of `v` over all ranks.
pub fn all_sum_vec<E: Exchange>(ex: &E, v: &[i64]) -> Result<Vec<i64>> {
    let mine: Vec<u64> = v.iter().map(|&x| x as u64).collect();
    let all = ex.allgather(&mine)?;
    let mut out = vec![0i64; v.len()];
    for chunk in all.chunks(v.len().max(1)) {
        for (o, &x) in out.iter_mut().zip(chunk) {
            *o = o.wrapping_add(x as i64);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Marked ids come out ascending, each at its position in id order,
    /// and ghosts are grouped by owner, by id within one owner.
    #[test]
    fn ghost_bits_rank_and_order_the_ghosts() {
        for n in [0u64, 1, 5, 1000] {
            let total = n * n * 7 + 130;
            let mut bits = GhostBits::new(total).unwrap();
            let ids: Vec<u64> = (0..n).map(|i| i * i * 7 + 3).collect();
            for &v in ids.iter().rev() {
                bits.mark(v);
                bits.mark(v);
            }
            assert_eq!(bits.rank_all(), n);
            assert_eq!(bits.ids().collect::<Vec<_>>(), ids, "{n} ghosts");
            for (i, &v) in ids.iter().enumerate() {
                assert_eq!(bits.position(v), i, "{n} ghosts, id {v}");
            }
            // Owners interleave the ids, so owner order is not id order.
            let find = |v: u64| Ok(((v % 3) as u32, v / 3));
            let (ghosts, want, counts, slot) = ghost_order(&bits, n as usize, 3, find).unwrap();
            let mut expect: Vec<(u32, u64)> = ids.iter().map(|&v| ((v % 3) as u32, v)).collect();
            expect.sort_unstable();
            assert_eq!(ghosts, expect.iter().map(|g| g.1).collect::<Vec<_>>());
            assert_eq!(want, ghosts.iter().map(|v| v / 3).collect::<Vec<_>>());
            assert_eq!(counts.iter().sum::<u64>(), n);
            for (i, &v) in ids.iter().enumerate() {
                assert_eq!(ghosts[slot[i] as usize], v);
            }
        }
    }

    /// Repeats are merged with their weights summed, rows come out by
    /// local vertex and neighbour, whatever the push order.
    #[test]
    fn compacting_merges_repeats_and_fills_rows() {
        let mut c = Compacting::default();
        for (l, v, w) in [
            (1u32, 9u64, 2u64),
            (0, 5, 1),
            (1, 3, 1),
            (1, 9, 4),
            (0, 5, 1),
        ] {
            c.push(l, v, w).unwrap();
        }
        assert!(c.push(0, 1 << 32, 1).is_err());
        let (xadj, nbrs, w) = c.finish(3);
        assert_eq!(xadj, [0, 1, 3, 3]);
        assert_eq!(nbrs, [5, 3, 9]);
        assert_eq!(w, [2, 1, 6]);
    }
}
