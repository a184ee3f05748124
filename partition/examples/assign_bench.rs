//! Times the adjacency build and the partitioners on an R-MAT graph.
//!
//! cargo run --release -p dgl-partition --example assign_bench -- \
//!     [nodes=1000000] [raw_edges=10000000] [parts=4] [mode=hybrid|direct|both|random] [threads=2] [coarse_nodes=0: default]
//!
//! The graph is made undirected (both directions, duplicates and loops
//! dropped, as `dgl.to_bidirected` makes DGL's benchmark graph) and gets a
//! `train_mask` on 10% of the nodes; the constraints are DGL's for
//! `balance_ntypes=train_mask, balance_edges=True`.

use std::time::Instant;

use dgl_partition::assign::{self, Metis, MetisMode, Partitioner, Request};
use dgl_partition::model::{DType, EdgeType, InputGraph, NodeType, Tensor};
use dgl_partition::{csr, rmat};

fn arg<T: std::str::FromStr>(i: usize, default: T) -> T {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let n: u64 = arg(1, 1_000_000);
    let m: u64 = arg(2, 10_000_000);
    let k: u32 = arg(3, 4);
    let mode: String = arg(4, "hybrid".to_string());
    let threads: usize = arg(5, 2);
    let coarse_nodes: usize = arg(6, 0);
    let t = Instant::now();
    let g = graph(n, m);
    println!(
        "rmat {n} nodes {m} raw edges: {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let (t, c0) = (Instant::now(), cpu());
    let c = csr::symmetric(&g, threads);
    let directed = c.num_directed_edges();
    println!(
        "csr: {:.2} s (cpu {:.2} s), {directed} directed edges",
        t.elapsed().as_secs_f64(),
        cpu() - c0
    );
    let t = Instant::now();
    let cons = assign::constraints(&g, Some("train_mask"), true)?;
    println!(
        "constraints {:?}: {:.2} s",
        cons.names,
        t.elapsed().as_secs_f64()
    );
    let modes: Vec<&str> = match mode.as_str() {
        "both" => vec!["direct", "hybrid"],
        other => vec![other],
    };
    for mode in modes {
        let req = Request {
            graph: &g,
            csr: &c,
            num_parts: k,
            balance_train: Some("train_mask"),
            balance_edges: true,
            threads,
            seed: 1,
        };
        let (t, c0) = (Instant::now(), cpu());
        let a = match mode {
            "random" => assign::Random.assign(&req)?,
            "direct" => Metis {
                mode: MetisMode::Direct,
                coarse_nodes,
            }
            .assign(&req)?,
            _ => Metis {
                mode: MetisMode::Hybrid,
                coarse_nodes,
            }
            .assign(&req)?,
        };
        let secs = t.elapsed().as_secs_f64();
        let cpu_secs = cpu() - c0;
        let q = assign::quality(&c, &a, &cons);
        println!(
            "{mode}: {secs:.2} s (cpu {cpu_secs:.2} s), edge cut {} undirected ({} directed, {:.1}% of edges), balance {:?}",
            q.edge_cut,
            2 * q.edge_cut,
            200.0 * q.edge_cut as f64 / directed as f64,
            q.balance.iter().map(|b| (b * 1000.0).round() / 1000.0).collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// CPU seconds this process has used (user + system), from /proc: on a
/// shared machine wall time alone says little.
fn cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // Fields 14 and 15 (utime, stime) in clock ticks of 1/100 s.
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

fn graph(n: u64, m: u64) -> InputGraph {
    let (src, dst) = rmat::rmat(n, m, 42);
    let mask: Vec<u8> = (0..n)
        .map(|v| u8::from(v.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60 < 2))
        .collect();
    let mut data = std::collections::BTreeMap::new();
    data.insert(
        "train_mask".to_string(),
        Tensor {
            dtype: DType::U8,
            shape: vec![n],
            data: mask,
        },
    );
    InputGraph {
        name: "rmat".into(),
        ntypes: vec![NodeType {
            name: "_N".into(),
            count: n,
            data,
            weights: None,
        }],
        etypes: vec![EdgeType {
            src_type: 0,
            rel: "_E".into(),
            dst_type: 0,
            src,
            dst,
            data: Default::default(),
        }],
    }
}
