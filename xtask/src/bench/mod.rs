//! The benchmarks `cargo xtask bench ...` runs (its entry is `cmd::bench`;
//! `bench-shards` is `cmd::bench_shards`): one module per benchmark, the
//! measuring helpers they share in `measure`.
//!
//! - `scale/`: the operator (and Kubeflow's mpi-operator) under N jobs on
//!   kwok fake nodes;
//! - `latency.rs`: apply → first training step on the real node;
//! - `graphbolt.rs`: graph.dgl vs GraphBolt partitions, real DGL;
//! - `partition`: the native partition pipeline vs DGL's tools
//!   (`partition.rs`, its script `partition_bench.py` here; with
//!   `--from-bucket` the same graph read from SeaweedFS, `partition_bucket.rs`);
//! - `chart.rs`: the SVG chart each of them draws beside its `--json`.

pub(crate) mod chart;
pub(crate) mod graphbolt;
pub(crate) mod latency;
pub(crate) mod measure;
pub mod partition;
pub(crate) mod partition_bucket;
pub(crate) mod scale;
