//! Ownership, shuffled ids and per-partition arrays.
//!
//! Two layers, so a distributed driver (one rank per partition, each holding
//! only its share of the edges and features but the whole assignment) can
//! reuse them:
//! - [`ids`], global: from the type counts, the assignment and the number of
//!   owned edges per (partition, edge type), the `node_map` / `edge_map`
//!   ranges and the shuffled id of every node (DGL's "IDs and ownership":
//!   nodes sorted by (partition, ntype) then original order, edges by
//!   (partition, etype) then original order, an edge owned by the partition
//!   of its destination);
//! - [`part`], per partition: from the edges a partition owns (with their
//!   per-type edge ids) and its inner nodes, the part-local graph: inner
//!   nodes first, halo nodes (sources of owned edges that live elsewhere)
//!   after, edges etype-major.

pub mod ids;
pub mod part;

pub use ids::{count_owned_edges, IdMaps};
pub use part::{build_partition, owned_edges, OwnedEdges, Partition};

#[cfg(test)]
mod tests;
