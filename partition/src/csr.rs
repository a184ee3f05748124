//! The symmetric adjacency over homogeneous node ids that partitioners read.

use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::model::InputGraph;

/// Symmetric, deduplicated adjacency without self loops, over homogeneous
/// node ids (every edge type merged, both directions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Csr {
    /// `num_nodes + 1` offsets into `neighbors`.
    pub offsets: Vec<u64>,
    pub neighbors: Vec<u64>,
}

impl Csr {
    pub fn num_nodes(&self) -> u64 {
        self.offsets.len().saturating_sub(1) as u64
    }

    pub fn neighbors_of(&self, v: u64) -> &[u64] {
        let (a, b) = (self.offsets[v as usize], self.offsets[v as usize + 1]);
        &self.neighbors[a as usize..b as usize]
    }

    /// Number of directed entries (twice the undirected edges).
    pub fn num_directed_edges(&self) -> u64 {
        self.neighbors.len() as u64
    }

    pub fn degree(&self, v: u64) -> u64 {
        self.offsets[v as usize + 1] - self.offsets[v as usize]
    }
}

/// Builds the symmetric adjacency of `g` using up to `threads` threads.
///
/// Memory: the offsets, one `u64` per node of counters, and one slot per
/// directed non-loop edge (2 per input edge); duplicates are removed in
/// place, so the peak is about `16 * E + 16 * N` bytes over the input.
pub fn symmetric(g: &InputGraph, threads: usize) -> Csr {
    crate::settings::with_pool(threads, || build(g))
}

/// The edges of `g` as homogeneous ids, one slice pair per edge type.
fn typed_edges(g: &InputGraph) -> Vec<(&[u64], &[u64], u64, u64)> {
    let offs = g.node_offsets();
    g.etypes
        .iter()
        .map(|t| (&t.src[..], &t.dst[..], offs[t.src_type], offs[t.dst_type]))
        .collect()
}

fn build(g: &InputGraph) -> Csr {
    let n = g.num_nodes() as usize;
    let edges = typed_edges(g);
    // Degrees with loops left out, both directions counted.
    let counts: Vec<AtomicU64> = (0..n).into_par_iter().map(|_| AtomicU64::new(0)).collect();
    for &(src, dst, so, d_o) in &edges {
        src.par_iter().zip(dst.par_iter()).for_each(|(&s, &d)| {
            let (u, v) = (s + so, d + d_o);
            if u != v {
                counts[u as usize].fetch_add(1, Ordering::Relaxed);
                counts[v as usize].fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let mut offsets = prefix_sum(&counts);
    // Reuse the counters as fill cursors.
    counts
        .par_iter()
        .zip(offsets.par_iter())
        .for_each(|(c, &o)| c.store(o, Ordering::Relaxed));
    let total = offsets[n] as usize;
    let slots: Vec<AtomicU64> = (0..total)
        .into_par_iter()
        .map(|_| AtomicU64::new(0))
        .collect();
    for &(src, dst, so, d_o) in &edges {
        src.par_iter().zip(dst.par_iter()).for_each(|(&s, &d)| {
            let (u, v) = (s + so, d + d_o);
            if u != v {
                let a = counts[u as usize].fetch_add(1, Ordering::Relaxed);
                slots[a as usize].store(v, Ordering::Relaxed);
                let b = counts[v as usize].fetch_add(1, Ordering::Relaxed);
                slots[b as usize].store(u, Ordering::Relaxed);
            }
        });
    }
    drop(counts);
    let mut neighbors: Vec<u64> = slots.into_iter().map(AtomicU64::into_inner).collect();
    let unique = sort_dedup(&offsets, &mut neighbors);
    compact(&mut offsets, &mut neighbors, &unique);
    Csr { offsets, neighbors }
}

/// Offsets from counts: `n + 1` entries.
fn prefix_sum(counts: &[AtomicU64]) -> Vec<u64> {
    let mut offsets = Vec::with_capacity(counts.len() + 1);
    let mut sum = 0u64;
    offsets.push(0);
    for c in counts {
        sum += c.load(Ordering::Relaxed);
        offsets.push(sum);
    }
    offsets
}

/// Sorts every list and moves its distinct entries to the list's front;
/// returns each list's number of distinct entries.
fn sort_dedup(offsets: &[u64], neighbors: &mut [u64]) -> Vec<u64> {
    let lists = split_lists(offsets, neighbors);
    lists
        .into_par_iter()
        .map(|list| {
            list.sort_unstable();
            let mut w = 0;
            for r in 0..list.len() {
                if r == 0 || list[r] != list[w - 1] {
                    list[w] = list[r];
                    w += 1;
                }
            }
            w as u64
        })
        .collect()
}

/// One mutable slice per node.
fn split_lists<'a>(offsets: &[u64], mut rest: &'a mut [u64]) -> Vec<&'a mut [u64]> {
    let mut lists = Vec::with_capacity(offsets.len().saturating_sub(1));
    for w in offsets.windows(2) {
        let (head, tail) = rest.split_at_mut((w[1] - w[0]) as usize);
        lists.push(head);
        rest = tail;
    }
    lists
}

/// Moves the distinct prefixes together (each moves left, so in place) and
/// rewrites the offsets.
fn compact(offsets: &mut [u64], neighbors: &mut Vec<u64>, unique: &[u64]) {
    let mut w = 0usize;
    for (v, &len) in unique.iter().enumerate() {
        let from = offsets[v] as usize;
        neighbors.copy_within(from..from + len as usize, w);
        offsets[v] = w as u64;
        w += len as usize;
    }
    if let Some(last) = offsets.last_mut() {
        *last = w as u64;
    }
    neighbors.truncate(w);
    neighbors.shrink_to_fit();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EdgeType, NodeType};

    fn ntype(name: &str, count: u64) -> NodeType {
        NodeType {
            name: name.into(),
            count,
            ..Default::default()
        }
    }

    fn etype(s: usize, d: usize, src: Vec<u64>, dst: Vec<u64>) -> EdgeType {
        EdgeType {
            src_type: s,
            rel: "r".into(),
            dst_type: d,
            src,
            dst,
            ..Default::default()
        }
    }

    #[test]
    fn symmetric_dedups_and_drops_loops() {
        // 0->1 twice, 1->0, a loop on 2, 2->3.
        let g = InputGraph {
            name: "g".into(),
            ntypes: vec![ntype("n", 5)],
            etypes: vec![etype(0, 0, vec![0, 0, 1, 2, 2], vec![1, 1, 0, 2, 3])],
        };
        let c = symmetric(&g, 2);
        assert_eq!(c.offsets, vec![0, 1, 2, 3, 4, 4]);
        assert_eq!(c.neighbors, vec![1, 0, 3, 2]);
        assert_eq!(c.num_nodes(), 5);
    }

    #[test]
    fn symmetric_merges_types_with_offsets() {
        // user(2) -follows-> user, user -clicks-> item(3).
        let g = InputGraph {
            name: "g".into(),
            ntypes: vec![ntype("user", 2), ntype("item", 3)],
            etypes: vec![
                etype(0, 0, vec![0], vec![1]),
                etype(0, 1, vec![0, 1, 1], vec![2, 0, 0]),
            ],
        };
        let c = symmetric(&g, 1);
        assert_eq!(c.neighbors_of(0), &[1, 4]);
        assert_eq!(c.neighbors_of(1), &[0, 2]);
        assert_eq!(c.neighbors_of(2), &[1]);
        assert_eq!(c.neighbors_of(3), &[] as &[u64]);
        assert_eq!(c.neighbors_of(4), &[0]);
    }

    #[test]
    fn symmetric_matches_a_naive_build() {
        let n = 300u64;
        let (src, dst) = crate::rmat::rmat(n, 5000, 7);
        let g = InputGraph {
            name: "g".into(),
            ntypes: vec![ntype("n", n)],
            etypes: vec![etype(0, 0, src.clone(), dst.clone())],
        };
        let c = symmetric(&g, 2);
        let mut sets = vec![std::collections::BTreeSet::new(); n as usize];
        for (&s, &d) in src.iter().zip(&dst) {
            if s != d {
                sets[s as usize].insert(d);
                sets[d as usize].insert(s);
            }
        }
        for v in 0..n {
            let want: Vec<u64> = sets[v as usize].iter().copied().collect();
            assert_eq!(c.neighbors_of(v), &want[..], "node {v}");
        }
    }
}
