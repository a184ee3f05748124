//! One run's settings, for either driver: what both need (input, output,
//! partitioner, balance, threads, seed) and, in `driver`, what only one of
//! them needs ([`AllParts`] for [`crate::run`], [`OwnPart`] for
//! [`crate::rank`]). The binaries build it from
//! [`crate::settings::PartitionArgs::config`].

use std::path::PathBuf;

use crate::input::Source;
use crate::settings::Choice;

/// Everything a driver needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Config<D> {
    pub source: Source,
    /// Where `<graph>.json` and `part<i>/` go (a rank: its own worker's).
    pub out_dir: PathBuf,
    pub graph_name: String,
    pub partitioner: Choice,
    /// The node feature marking training nodes, when they are balanced.
    pub balance_train: Option<String>,
    pub balance_edges: bool,
    pub threads: usize,
    pub seed: u64,
    /// What only this driver needs.
    pub driver: D,
}

/// One process makes every part (partition mode ParMETIS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllParts {
    pub num_parts: u32,
}

/// One rank makes its own part, one per rank (partition mode DistParMETIS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnPart {
    /// Assign on rank 0 after gathering the whole structure there (the
    /// single-process pipeline's assignment; needs one rank to hold it)
    /// instead of the distributed partitioner.
    pub gather_structure: bool,
}
