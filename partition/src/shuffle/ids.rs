//! The global step: `node_map` / `edge_map` and the shuffled id of every
//! node, from the type counts, the assignment and the owned-edge counts.

use rayon::prelude::*;

use crate::model::{prefix, InputGraph};
use crate::{Error, Result};

/// Nodes counted or numbered per rayon task.
const CHUNK: u64 = 1 << 16;

/// A half-open id range `[start, end)`.
pub type Range = (u64, u64);

/// The global id maps every partition shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdMaps {
    pub num_parts: u32,
    /// Homogeneous id of each node type's first node, plus the total.
    pub node_offsets: Vec<u64>,
    /// (source ntype, destination ntype) of each edge type.
    pub etype_ends: Vec<(usize, usize)>,
    /// `node_map[ntype][part]`: the shuffled ids of that type in that part.
    pub node_map: Vec<Vec<Range>>,
    /// `edge_map[etype][part]`: the shuffled edge ids likewise.
    pub edge_map: Vec<Vec<Range>>,
    /// First shuffled node id of each part, plus the total.
    pub part_nodes: Vec<u64>,
    /// First shuffled edge id of each part, plus the total.
    pub part_edges: Vec<u64>,
    /// Shuffled id of every node, indexed by original homogeneous id.
    shuffled: Vec<u64>,
}

/// One run of nodes of one type: `[lo, hi)` in homogeneous ids.
#[derive(Clone, Copy)]
struct Span {
    ntype: usize,
    lo: u64,
    hi: u64,
}

impl IdMaps {
    /// `owned[etype][part]` is the number of edges of that type whose
    /// destination lives in that part (see [`count_owned_edges`]; a
    /// distributed driver sums the ranks' counts).
    pub fn new(
        ntype_counts: &[u64],
        etype_ends: Vec<(usize, usize)>,
        parts: &[u32],
        num_parts: u32,
        owned: &[Vec<u64>],
    ) -> Result<Self> {
        let node_offsets = prefix(ntype_counts.iter().copied());
        check_shapes(&node_offsets, &etype_ends, parts, num_parts, owned)?;
        let spans = spans(&node_offsets);
        let counts = count_spans(&spans, parts, num_parts)?;
        let mut per_type = vec![vec![0u64; num_parts as usize]; ntype_counts.len()];
        for (span, c) in spans.iter().zip(&counts) {
            for (p, n) in c.iter().enumerate() {
                per_type[span.ntype][p] += n;
            }
        }
        let (node_map, part_nodes) = part_major_ranges(&per_type, num_parts);
        let (edge_map, part_edges) = part_major_ranges(owned, num_parts);
        let shuffled = number_nodes(&spans, &counts, &node_map, parts);
        Ok(IdMaps {
            num_parts,
            node_offsets,
            etype_ends,
            node_map,
            edge_map,
            part_nodes,
            part_edges,
            shuffled,
        })
    }

    /// The id maps of a whole in-memory graph.
    pub fn for_graph(g: &InputGraph, parts: &[u32], num_parts: u32) -> Result<Self> {
        let counts: Vec<u64> = g.ntypes.iter().map(|t| t.count).collect();
        let ends = g.etypes.iter().map(|e| (e.src_type, e.dst_type)).collect();
        if parts.len() as u64 != g.num_nodes() {
            return Err(Error::Config(format!(
                "the assignment has {} entries but the graph has {} nodes",
                parts.len(),
                g.num_nodes()
            )));
        }
        if num_parts == 0 {
            return Err(Error::Config("num_parts must be at least 1".into()));
        }
        if let Some(i) = parts.par_iter().position_first(|&p| p >= num_parts) {
            return Err(out_of_range(i as u64, Some(parts[i]), num_parts));
        }
        let owned = count_owned_edges(g, parts, num_parts)?;
        IdMaps::new(&counts, ends, parts, num_parts, &owned)
    }

    /// Shuffled id of the node with original homogeneous id `orig`.
    pub fn shuffled_nid(&self, orig: u64) -> u64 {
        self.shuffled[orig as usize]
    }

    /// Shuffled ids of all nodes, indexed by original homogeneous id.
    pub fn shuffled(&self) -> &[u64] {
        &self.shuffled
    }

    pub fn num_ntypes(&self) -> usize {
        self.node_map.len()
    }

    pub fn num_etypes(&self) -> usize {
        self.edge_map.len()
    }

    /// The (part, ntype) whose range holds shuffled node id `s`.
    pub fn locate(&self, s: u64) -> (u32, usize) {
        let p = self.part_nodes.partition_point(|&start| start <= s) - 1;
        let t = (0..self.num_ntypes())
            .find(|&t| s < self.node_map[t][p].1)
            .unwrap_or(self.num_ntypes() - 1);
        (p as u32, t)
    }
}

/// `owned[etype][part]`: how many edges of each type each part owns (the
/// part of the edge's destination), over the edges `g` holds.
pub fn count_owned_edges(g: &InputGraph, parts: &[u32], num_parts: u32) -> Result<Vec<Vec<u64>>> {
    let offsets = g.node_offsets();
    g.etypes
        .iter()
        .enumerate()
        .map(|(e, et)| {
            let (off, n) = (offsets[et.dst_type], g.ntypes[et.dst_type].count);
            let per_chunk: Vec<Result<Vec<u64>>> = et
                .dst
                .par_chunks(CHUNK as usize)
                .enumerate()
                .map(|(c, dst)| {
                    let mut counts = vec![0u64; num_parts as usize];
                    for (i, &d) in dst.iter().enumerate() {
                        if d >= n {
                            let at = c as u64 * CHUNK + i as u64;
                            return Err(bad_endpoint(g, e, at, "destination", d, n));
                        }
                        match parts.get((off + d) as usize) {
                            Some(&p) if p < num_parts => counts[p as usize] += 1,
                            p => return Err(out_of_range(off + d, p.copied(), num_parts)),
                        }
                    }
                    Ok(counts)
                })
                .collect();
            sum_counts(per_chunk, num_parts)
        })
        .collect()
}

/// The error for an edge endpoint outside its node type.
pub(crate) fn bad_endpoint(
    g: &InputGraph,
    e: usize,
    at: u64,
    what: &str,
    id: u64,
    n: u64,
) -> Error {
    Error::Stage {
        stage: "shuffle",
        message: format!(
            "edge {at} of type {}: {what} {id} is not a node of that type ({n} nodes)",
            g.canonical_etype(e)
        ),
    }
}

fn out_of_range(node: u64, part: Option<u32>, num_parts: u32) -> Error {
    let part = part.map_or("no part".to_string(), |p| format!("part {p}"));
    Error::Config(format!(
        "node {node} is assigned to {part} but there are {num_parts} parts"
    ))
}

fn sum_counts(per_chunk: Vec<Result<Vec<u64>>>, num_parts: u32) -> Result<Vec<u64>> {
    let mut total = vec![0u64; num_parts as usize];
    for c in per_chunk {
        for (t, n) in total.iter_mut().zip(c?) {
            *t += n;
        }
    }
    Ok(total)
}

fn check_shapes(
    node_offsets: &[u64],
    etype_ends: &[(usize, usize)],
    parts: &[u32],
    num_parts: u32,
    owned: &[Vec<u64>],
) -> Result<()> {
    let bad = |m: String| Err(Error::Config(m));
    if num_parts == 0 {
        return bad("num_parts must be at least 1".into());
    }
    if node_offsets.len() < 2 {
        return bad("the graph has no node type".into());
    }
    if parts.len() as u64 != node_offsets[node_offsets.len() - 1] {
        return bad(format!(
            "the assignment has {} entries but the graph has {} nodes",
            parts.len(),
            node_offsets[node_offsets.len() - 1]
        ));
    }
    let n = node_offsets.len() - 1;
    if etype_ends.iter().any(|&(s, d)| s >= n || d >= n) {
        return bad("an edge type names a node type that does not exist".into());
    }
    if owned.len() != etype_ends.len() || owned.iter().any(|o| o.len() != num_parts as usize) {
        return bad("owned-edge counts must be [edge type][part]".into());
    }
    Ok(())
}

/// Runs of at most CHUNK nodes, each of one type, in homogeneous order.
fn spans(node_offsets: &[u64]) -> Vec<Span> {
    let mut out = Vec::new();
    for t in 0..node_offsets.len() - 1 {
        let (mut lo, end) = (node_offsets[t], node_offsets[t + 1]);
        while lo < end {
            let hi = end.min(lo + CHUNK);
            out.push(Span { ntype: t, lo, hi });
            lo = hi;
        }
    }
    out
}

/// Nodes per part in each span; an error names the first node whose part
/// is out of range.
fn count_spans(spans: &[Span], parts: &[u32], num_parts: u32) -> Result<Vec<Vec<u64>>> {
    spans
        .par_iter()
        .map(|s| {
            let mut c = vec![0u64; num_parts as usize];
            for (i, &p) in parts[s.lo as usize..s.hi as usize].iter().enumerate() {
                if p >= num_parts {
                    return Err(out_of_range(s.lo + i as u64, Some(p), num_parts));
                }
                c[p as usize] += 1;
            }
            Ok(c)
        })
        .collect()
}

/// Ranges laid out part-major, then type order (what DGL's
/// `_assert_is_sorted` checks), from `counts[type][part]`; also each
/// part's first id plus the total.
fn part_major_ranges(counts: &[Vec<u64>], num_parts: u32) -> (Vec<Vec<Range>>, Vec<u64>) {
    let mut map = vec![vec![(0, 0); num_parts as usize]; counts.len()];
    let mut part_start = Vec::with_capacity(num_parts as usize + 1);
    let mut acc = 0u64;
    for p in 0..num_parts as usize {
        part_start.push(acc);
        for (t, c) in counts.iter().enumerate() {
            map[t][p] = (acc, acc + c[p]);
            acc += c[p];
        }
    }
    part_start.push(acc);
    (map, part_start)
}

/// Shuffled id of every node: its (part, type) range start plus the number
/// of nodes of that part and type before it in original order.
fn number_nodes(
    spans: &[Span],
    counts: &[Vec<u64>],
    node_map: &[Vec<Range>],
    parts: &[u32],
) -> Vec<u64> {
    let mut next: Vec<Vec<u64>> = node_map
        .iter()
        .map(|r| r.iter().map(|&(s, _)| s).collect())
        .collect();
    let mut starts = Vec::with_capacity(spans.len());
    for (s, c) in spans.iter().zip(counts) {
        starts.push(next[s.ntype].clone());
        for (n, k) in next[s.ntype].iter_mut().zip(c) {
            *n += k;
        }
    }
    let mut shuffled = vec![0u64; parts.len()];
    let mut rest: &mut [u64] = &mut shuffled;
    let mut slices = Vec::with_capacity(spans.len());
    for s in spans {
        let (head, tail) = rest.split_at_mut((s.hi - s.lo) as usize);
        slices.push(head);
        rest = tail;
    }
    slices
        .into_par_iter()
        .zip(spans.par_iter().zip(starts))
        .for_each(|(out, (s, mut next))| {
            for (o, &p) in out.iter_mut().zip(&parts[s.lo as usize..s.hi as usize]) {
                *o = next[p as usize];
                next[p as usize] += 1;
            }
        });
    shuffled
}
