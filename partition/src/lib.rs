//! The native DistDGL partition pipeline (docs/partition-pipeline.md).
//!
//! Stages, each a module: [`input`] reads DGL's chunked graph format or the
//! seed's text format into an [`model::InputGraph`] (64-bit ids and counts
//! throughout); [`csr`] builds the symmetric adjacency over homogeneous node
//! ids; [`assign`] gives every node a partition (multilevel k-way, random, or
//! a user's assignment file); [`shuffle`] decides ownership (an edge belongs
//! to its destination's partition), assigns shuffled global ids and
//! part-local ids by prefix sums and cuts the per-partition arrays, features
//! following their node or edge; [`output`] writes what DGL 2.1.0's
//! `load_partition` reads ([`output::files`] keeps half-written output from
//! looking complete). Two drivers run them: [`run`] in one process
//! (partition mode ParMETIS; [`shuffle_write`] holds its shuffle-and-write
//! step), and [`rank`], one rank of partition mode DistParMETIS, which
//! assigns with [`assign::distributed`] (or, with `--gather-structure`, on
//! rank 0 as [`run`] does) and moves data between ranks through
//! [`exchange`]'s transport (MPI, threads in one process, or a world of
//! one). Both take one [`config::Config`] (its `driver` part says what
//! differs) and return one [`report::Report`]; [`settings`] holds the flags
//! both binaries take and the partitioner [`settings::Choice`], [`stages`]
//! the timing of the reports. [`rmat`] generates the benchmark's graph.
//! [`names`] checks every name from the input that becomes a file name.
//! [`cache`] keeps finished partitions in a bucket for later runs of the
//! same input and settings (the library only: not yet wired into a job).

pub mod assign;
pub mod cache;
pub mod config;
pub mod csr;
pub mod error;
pub mod exchange;
pub mod input;
pub mod model;
pub mod names;
pub mod output;
pub mod rank;
pub mod report;
pub mod rmat;
pub mod run;
pub mod settings;
pub mod shuffle;
pub mod shuffle_write;
pub mod stages;

pub use error::{Error, Result};
