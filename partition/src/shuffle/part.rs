//! The per-partition step: the part-local graph of one partition from the
//! edges it owns and its inner nodes.

use rayon::prelude::*;

use super::ids::{bad_endpoint, IdMaps};
use crate::model::InputGraph;
use crate::{Error, Result};

/// Marks a part-local source that is still a halo node's shuffled id.
const HALO: u64 = 1 << 63;

/// The edges of one type a part owns: per-type edge ids (ascending once
/// built) and per-type endpoint ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnedEdges {
    pub eids: Vec<u64>,
    pub src: Vec<u64>,
    pub dst: Vec<u64>,
}

/// One partition, as DGL's `graph.dgl` and feature files lay it out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Partition {
    pub part: u32,
    /// Shuffled id of part-local node 0 (inner nodes are
    /// `node_start..node_start + num_inner`).
    pub node_start: u64,
    /// Per node type: original per-type ids of the inner nodes, in shuffled
    /// order (the feature rows and `orig_nids.dgl`).
    pub inner: Vec<Vec<u64>>,
    /// Shuffled ids of the halo nodes, ascending; they follow the inner
    /// nodes in part-local order.
    pub halo: Vec<u64>,
    /// Node type of each halo node.
    pub halo_types: Vec<u16>,
    /// Shuffled id of part-local edge 0.
    pub edge_start: u64,
    /// Per edge type: original per-type ids of the owned edges in shuffled
    /// order (the feature rows and `orig_eids.dgl`).
    pub eids: Vec<Vec<u64>>,
    /// Part-local source of each edge, edge types in order.
    pub src: Vec<u64>,
    /// Part-local destination of each edge.
    pub dst: Vec<u64>,
}

impl Partition {
    pub fn num_inner(&self) -> u64 {
        self.inner.iter().map(|v| v.len() as u64).sum()
    }

    pub fn num_nodes(&self) -> u64 {
        self.num_inner() + self.halo.len() as u64
    }

    pub fn num_edges(&self) -> u64 {
        self.src.len() as u64
    }
}

/// Per node type, the original per-type ids of the nodes assigned to `part`,
/// ascending (= shuffled order).
pub fn inner_nodes(ids: &IdMaps, parts: &[u32], part: u32) -> Vec<Vec<u64>> {
    ids.node_offsets
        .windows(2)
        .map(|w| {
            parts[w[0] as usize..w[1] as usize]
                .par_iter()
                .enumerate()
                .filter(|&(_, &p)| p == part)
                .map(|(i, _)| i as u64)
                .collect()
        })
        .collect()
}

/// Per edge type, the edges of `g` whose destination is assigned to `part`.
pub fn owned_edges(g: &InputGraph, parts: &[u32], part: u32) -> Vec<OwnedEdges> {
    let offsets = g.node_offsets();
    g.etypes
        .iter()
        .map(|et| {
            let off = offsets[et.dst_type];
            let eids: Vec<u64> = et
                .dst
                .par_iter()
                .enumerate()
                .filter(|&(_, &d)| parts.get((off + d) as usize) == Some(&part))
                .map(|(i, _)| i as u64)
                .collect();
            let src = eids.par_iter().map(|&e| et.src[e as usize]).collect();
            let dst = eids.par_iter().map(|&e| et.dst[e as usize]).collect();
            OwnedEdges { eids, src, dst }
        })
        .collect()
}

/// Builds partition `part` from its inner nodes (per type, as
/// [`inner_nodes`] gives them) and the edges it owns (per edge type, any
/// order). `g` only names types in error messages.
///
/// The owned edges' endpoint lists become the part's in place (the first
/// type's lists grow to hold the others'), so building holds about the
/// edges as given, 24 bytes each (and one edge type's list twice while it
/// is appended), rather than a second and third copy of every edge.
pub fn build_partition(
    g: &InputGraph,
    ids: &IdMaps,
    part: u32,
    inner: Vec<Vec<u64>>,
    mut edges: Vec<OwnedEdges>,
) -> Result<Partition> {
    check_counts(ids, part, &inner, &edges)?;
    let p = part as usize;
    let (node_start, node_end) = (ids.part_nodes[p], ids.part_nodes[p + 1]);
    let num_inner = node_end - node_start;
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    let mut eids = Vec::with_capacity(edges.len());
    for (e, owned) in edges.iter_mut().enumerate() {
        sort_by_eid(owned);
        to_local(g, ids, e, owned, (node_start, node_end))?;
        for (all, one) in [(&mut src, &mut owned.src), (&mut dst, &mut owned.dst)] {
            if all.is_empty() {
                // Moved, not copied.
                *all = std::mem::take(one);
            } else {
                // Grown by one type at a time (a large block grows in place)
                // and that type's list released at once: one type's list
                // is all that is held twice.
                all.reserve_exact(one.len());
                all.append(one);
                *one = Vec::new();
            }
        }
        eids.push(std::mem::take(&mut owned.eids));
    }
    let halo = HaloSet::mark(&src, ids.part_nodes[ids.num_parts as usize]);
    src.par_iter_mut()
        .filter(|s| **s & HALO != 0)
        .for_each(|s| *s = num_inner + halo.rank(*s & !HALO));
    let halo = halo.ids();
    let halo_types = halo.par_iter().map(|&s| ids.locate(s).1 as u16).collect();
    Ok(Partition {
        part,
        node_start,
        inner,
        halo,
        halo_types,
        edge_start: ids.part_edges[p],
        eids,
        src,
        dst,
    })
}

/// The halo nodes of a part as a bitmap over shuffled node ids with a rank
/// per word: O(edges + nodes / 64), no sort, and ascending ids for free.
struct HaloSet {
    words: Vec<u64>,
    /// Set bits before each word.
    ranks: Vec<u64>,
}

impl HaloSet {
    /// Marks the shuffled ids of the `HALO`-flagged entries of `src`.
    fn mark(src: &[u64], num_nodes: u64) -> Self {
        let mut words = vec![0u64; num_nodes.div_ceil(64) as usize];
        for &s in src.iter().filter(|&&s| s & HALO != 0) {
            let s = s & !HALO;
            words[(s / 64) as usize] |= 1 << (s % 64);
        }
        let mut ranks = Vec::with_capacity(words.len());
        let mut acc = 0u64;
        for w in &words {
            ranks.push(acc);
            acc += w.count_ones() as u64;
        }
        HaloSet { words, ranks }
    }

    /// Position of marked id `s` among the marked ids.
    fn rank(&self, s: u64) -> u64 {
        let (w, b) = ((s / 64) as usize, s % 64);
        self.ranks[w] + (self.words[w] & ((1u64 << b) - 1)).count_ones() as u64
    }

    /// The marked ids, ascending.
    fn ids(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.ranks.last().copied().unwrap_or(0) as usize + 64);
        for (i, &w) in self.words.iter().enumerate() {
            let mut w = w;
            while w != 0 {
                out.push(i as u64 * 64 + w.trailing_zeros() as u64);
                w &= w - 1;
            }
        }
        out
    }
}

fn check_counts(ids: &IdMaps, part: u32, inner: &[Vec<u64>], edges: &[OwnedEdges]) -> Result<()> {
    let p = part as usize;
    let bad = |what: &str, t: usize, got: usize, want: u64| {
        Err(Error::Stage {
            stage: "shuffle",
            message: format!(
                "part {part}: {got} {what} of type {t} given, the id maps count {want}"
            ),
        })
    };
    if inner.len() != ids.num_ntypes() || edges.len() != ids.num_etypes() {
        return Err(Error::Stage {
            stage: "shuffle",
            message: format!("part {part}: inner nodes or owned edges not given per type"),
        });
    }
    for (t, v) in inner.iter().enumerate() {
        let (s, e) = ids.node_map[t][p];
        if v.len() as u64 != e - s {
            return bad("inner nodes", t, v.len(), e - s);
        }
    }
    for (t, o) in edges.iter().enumerate() {
        let (s, e) = ids.edge_map[t][p];
        if o.eids.len() as u64 != e - s
            || o.src.len() != o.eids.len()
            || o.dst.len() != o.eids.len()
        {
            return bad("owned edges", t, o.eids.len(), e - s);
        }
    }
    Ok(())
}

/// Puts edges in per-type edge id order (a distributed driver receives them
/// in any order).
fn sort_by_eid(o: &mut OwnedEdges) {
    if o.eids.windows(2).all(|w| w[0] < w[1]) {
        return;
    }
    let mut order: Vec<usize> = (0..o.eids.len()).collect();
    order.par_sort_unstable_by_key(|&i| o.eids[i]);
    let take = |v: &[u64]| order.iter().map(|&i| v[i]).collect::<Vec<u64>>();
    (o.eids, o.src, o.dst) = (take(&o.eids), take(&o.src), take(&o.dst));
}

/// Turns one edge type's owned endpoints into part-local ones, in place;
/// a source outside the part becomes `HALO | shuffled id`.
fn to_local(
    g: &InputGraph,
    ids: &IdMaps,
    e: usize,
    o: &mut OwnedEdges,
    (start, end): (u64, u64),
) -> Result<()> {
    let (st, dt) = ids.etype_ends[e];
    let count = |t: usize| ids.node_offsets[t + 1] - ids.node_offsets[t];
    for (v, t, what) in [(&o.src, st, "source"), (&o.dst, dt, "destination")] {
        if let Some(i) = v.par_iter().position_first(|&x| x >= count(t)) {
            return Err(bad_endpoint(g, e, o.eids[i], what, v[i], count(t)));
        }
    }
    let (so, doff) = (ids.node_offsets[st], ids.node_offsets[dt]);
    let inside = |s: u64| (start..end).contains(&s);
    if let Some(i) = o
        .dst
        .par_iter()
        .position_first(|&x| !inside(ids.shuffled_nid(doff + x)))
    {
        return Err(Error::Stage {
            stage: "shuffle",
            message: format!(
                "edge {} of type {} was given to a part that does not own its destination",
                o.eids[i],
                g.canonical_etype(e)
            ),
        });
    }
    o.src.par_iter_mut().for_each(|x| {
        let s = ids.shuffled_nid(so + *x);
        *x = if inside(s) { s - start } else { HALO | s };
    });
    o.dst
        .par_iter_mut()
        .for_each(|x| *x = ids.shuffled_nid(doff + *x) - start);
    Ok(())
}
