//! Partition assignment: every node gets one partition id. Partitioners sit
//! behind one trait; the assignment is read and written in DGL's own format
//! (`<ntype>.txt` + `partition_meta.json`) so DGL's tools can use ours and we
//! can use theirs.

mod coarsen;
pub mod distributed;
pub mod file;
pub mod metis;
pub mod quality;
pub mod random;
mod refine;
pub mod weights;

pub use file::{read_files, write_files, FromFiles};
pub use metis::{Metis, MetisMode};
pub use quality::{quality, Quality};
pub use random::Random;
pub use weights::{constraints, Constraints};

use crate::csr::Csr;
use crate::model::InputGraph;
use crate::Result;

/// The partition of every node, indexed by homogeneous node id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub num_parts: u32,
    pub parts: Vec<u32>,
    /// `algo_name` of partition_meta.json and `part_method` of the partition
    /// JSON (`metis`, `random`, or what a user's file says).
    pub algo_name: String,
}

/// What a partitioner is asked.
pub struct Request<'a> {
    pub graph: &'a InputGraph,
    pub csr: &'a Csr,
    pub num_parts: u32,
    /// Balance each partition's share of training nodes (a node feature,
    /// usually `train_mask`), as `--balance-train` asks.
    pub balance_train: Option<&'a str>,
    /// Balance each partition's share of edges (in-degree), as
    /// `--balance-edges` asks.
    pub balance_edges: bool,
    pub threads: usize,
    pub seed: u64,
}

/// A partitioner.
pub trait Partitioner: Send + Sync {
    fn assign(&self, req: &Request<'_>) -> Result<Assignment>;
}

// The stages share one thread-pool helper (settings.rs).
pub(crate) use crate::settings::with_pool;
