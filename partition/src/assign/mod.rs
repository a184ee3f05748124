//! Partition assignment: every node gets one partition id. Partitioners sit
//! behind one trait; the method a user names ([`Choice`]) is dispatched in
//! one place, [`Choice::plan`], for the single process and the ranks alike.
//! The assignment is read and written in DGL's own format (`<ntype>.txt` +
//! `partition_meta.json`) so DGL's tools can use ours and we can use theirs.

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
use crate::settings::Choice;
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

/// How a method assigns, for either driver: the whole assignment made
/// without the graph's structure (random draws, a user's files: every
/// process makes or reads the same one), or the multilevel k-way
/// partitioner over the adjacency the driver holds (whole in one process,
/// or shared among the ranks).
pub(crate) enum Plan {
    Whole(Assignment),
    Multilevel,
}

impl Choice {
    /// The one dispatch of a method, shared by the single process (the
    /// [`Partitioner`] impl below) and the ranks ([`distributed::assign`]).
    pub(crate) fn plan(&self, graph: &InputGraph, num_parts: u32, seed: u64) -> Result<Plan> {
        match self {
            Choice::Metis => Ok(Plan::Multilevel),
            Choice::Random => {
                random::assignment(graph.num_nodes(), num_parts, seed).map(Plan::Whole)
            }
            Choice::File(dir) => read_files(dir, graph, Some(num_parts)).map(Plan::Whole),
        }
    }
}

/// The chosen method in one process, on the whole adjacency.
impl Partitioner for Choice {
    fn assign(&self, req: &Request<'_>) -> Result<Assignment> {
        match self.plan(req.graph, req.num_parts, req.seed)? {
            Plan::Whole(a) => Ok(a),
            Plan::Multilevel => Metis::default().assign(req),
        }
    }
}

// The stages share one thread-pool helper (settings.rs).
pub(crate) use crate::settings::with_pool;
