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
use crate::dist::{Buckets, Exchange};
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
    pub fn halo_values<E: Exchange, T: crate::dist::Elem>(
        &self,
        ex: &E,
        own: &[T],
    ) -> Result<Vec<T>> {
        let data = self.halo.data().iter().map(|&i| own[i as usize]).collect();
        let got = ex.alltoallv(&Buckets::new(data, self.halo.counts().to_vec())?)?;
        Ok(got.into_data())
    }

    /// `own` followed by the ghosts' values: one value per local vertex.
    pub fn with_ghosts<E: Exchange, T: crate::dist::Elem>(
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
/// The other end of a self loop: counted in the in-degree, not linked.
const LOOP: u64 = u64::MAX;

/// Level 0 from the share: the symmetric, deduplicated adjacency without
/// loops over all edge types (as `csr::symmetric`), and each owned
/// vertex's in-degree (loops and repeats counted, as `weights::in_degrees`).
pub fn build<E: Exchange>(
    ex: &E,
    share: &Share,
    owners: Owners,
    round_edges: u64,
) -> Result<(LocalGraph, Vec<i64>)> {
    let (rank, world) = (ex.rank(), ex.size());
    let n_own = owners.counts[rank as usize];
    let n_own = usize::try_from(n_own)
        .ok()
        .filter(|&n| n <= u32::MAX as usize)
        .ok_or_else(|| {
            stage(format!(
                "rank {rank} owns {n_own} nodes, more than 32-bit local indices"
            ))
        })?;
    let g = &share.graph;
    let offs = g.node_offsets();
    let total: u64 = g.etypes.iter().map(|e| e.count()).sum();
    let round_edges = round_edges.max(1);
    let rounds = ex.all_max(total.div_ceil(round_edges))?;
    let mut indeg = vec![0i64; n_own];
    let mut acc = Compacting::default();
    let mut cursor = EdgeCursor::default();
    for _ in 0..rounds {
        let mut rows = Vec::new();
        let mut dest = Vec::new();
        cursor.take(g, round_edges, |e, s, d| {
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
            rows.extend([ld | IN_EDGE, if s == d { LOOP } else { s }]);
            dest.push(rd);
            if s != d {
                rows.extend([ls, d]);
                dest.push(rs);
            }
            Ok(())
        })?;
        let send = Buckets::by_destination(&rows, 2, &dest, world)?;
        drop((rows, dest));
        let got = ex.alltoallv(&send)?;
        drop(send);
        for r in got.data().chunks_exact(2) {
            let local = (r[0] & !IN_EDGE) as usize;
            if local >= n_own {
                return Err(stage(format!(
                    "rank {rank} got an edge of a node it does not own"
                )));
            }
            if r[0] & IN_EDGE != 0 {
                indeg[local] += 1;
            }
            if r[1] != LOOP {
                acc.push((local as u32, r[1], 1));
            }
        }
        acc.maybe_compact(false);
    }
    let entries = acc.finish(false);
    let graph = assemble(ex, owners, n_own, entries, false)?;
    Ok((graph, indeg))
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
/// of their distinct pairs: sorted and merged whenever they have doubled.
#[derive(Default)]
pub struct Compacting {
    entries: Vec<(u32, u64, u64)>,
    compacted: usize,
}

impl Compacting {
    pub fn push(&mut self, e: (u32, u64, u64)) {
        self.entries.push(e);
    }

    /// Compacts when the entries have doubled since the last time;
    /// `sum` adds the weights of repeats (else they are dropped).
    pub fn maybe_compact(&mut self, sum: bool) {
        if self.entries.len() > 2 * self.compacted + (1 << 16) {
            compact(&mut self.entries, sum);
            self.compacted = self.entries.len();
        }
    }

    pub fn finish(mut self, sum: bool) -> Vec<(u32, u64, u64)> {
        compact(&mut self.entries, sum);
        self.entries.shrink_to_fit();
        self.entries
    }
}

fn compact(e: &mut Vec<(u32, u64, u64)>, sum: bool) {
    e.par_sort_unstable_by_key(|x| (x.0, x.1));
    let mut w = 0usize;
    for r in 0..e.len() {
        if w > 0 && (e[w - 1].0, e[w - 1].1) == (e[r].0, e[r].1) {
            if sum {
                e[w - 1].2 += e[r].2;
            }
        } else {
            e[w] = e[r];
            w += 1;
        }
    }
    e.truncate(w);
}

/// A rank's piece from its sorted, merged `(local, global neighbour,
/// weight)` entries: ghosts numbered, neighbours as local u32 indices, the
/// halo lists agreed with the ghosts' owners.
pub fn assemble<E: Exchange>(
    ex: &E,
    owners: Owners,
    n_own: usize,
    entries: Vec<(u32, u64, u64)>,
    weighted: bool,
) -> Result<LocalGraph> {
    let (rank, world) = (ex.rank(), ex.size() as usize);
    let find = |v: u64| {
        owners.find(v).ok_or_else(|| {
            stage(format!(
                "neighbour {v} is beyond the {} nodes",
                owners.total()
            ))
        })
    };
    // Distinct remote neighbours first (8 bytes each while sorting).
    let mut ids: Vec<u64> = Vec::new();
    for &(_, v, _) in &entries {
        if find(v)?.0 != rank {
            ids.push(v);
        }
    }
    ids.par_sort_unstable();
    ids.dedup();
    let mut remote: Vec<(u32, u64, u64)> = Vec::with_capacity(ids.len());
    for v in ids {
        let (r, l) = find(v)?;
        remote.push((r, v, l));
    }
    remote.par_sort_unstable();
    let local_count = n_own as u64 + remote.len() as u64;
    if local_count > u64::from(u32::MAX) {
        return Err(stage(format!(
            "rank {rank} holds {n_own} nodes and {} ghosts, more than 32-bit local indices",
            remote.len()
        )));
    }
    let mut xadj = vec![0u64; n_own + 1];
    let mut adj = Vec::with_capacity(entries.len());
    let mut adjw = Vec::with_capacity(if weighted { entries.len() } else { 0 });
    for &(u, v, w) in &entries {
        xadj[u as usize + 1] += 1;
        let (r, l) = find(v)?;
        let idx = if r == rank {
            l
        } else {
            let at = remote.partition_point(|x| (x.0, x.1) < (r, v));
            n_own as u64 + at as u64
        };
        adj.push(idx as u32);
        if weighted {
            adjw.push(w);
        }
    }
    drop(entries);
    for i in 0..n_own {
        xadj[i + 1] += xadj[i];
    }
    let mut ghost_counts = vec![0u64; world];
    remote.iter().for_each(|g| ghost_counts[g.0 as usize] += 1);
    let want: Vec<u64> = remote.iter().map(|g| g.2).collect();
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
        ghosts: remote.into_iter().map(|g| g.1).collect(),
        ghost_counts,
        halo,
        xadj,
        adj,
        adjw,
        vwgt: Vec::new(),
        ncon: 0,
    })
}

/// The values of `keys` (global ids of `owners`' graph) from their owners,
/// who hold `values` (one per owned vertex): one request and one reply.
pub fn lookup<E: Exchange, T: crate::dist::Elem>(
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
    let mut next = crate::dist::plan::offsets(got.counts());
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
