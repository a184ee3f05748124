//! The symmetric adjacency over homogeneous node ids that partitioners read.

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
}

/// Builds the symmetric adjacency of `g` using up to `threads` threads.
pub fn symmetric(g: &InputGraph, threads: usize) -> Csr {
    let _ = (g, threads);
    unimplemented!("owned by the partitioner work")
}
