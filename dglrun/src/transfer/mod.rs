//! Shard transfer, pod to pod: the partitioner serves the files of its
//! manifest ([`serve`]), a worker pulls its own ([`fetch`]); both sides
//! frame a file as chunks, each followed by its sha256 ([`chunks`]).

pub mod chunks;
pub mod fetch;
pub mod serve;

pub use fetch::{FetchStats, Fetcher, RetryPolicy, TransferError};
pub use serve::FileServer;
