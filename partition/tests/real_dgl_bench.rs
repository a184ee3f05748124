//! The time of write_partitions at the size of the project's anchor: 1 M
//! nodes, 19 M edges, 64 float32 features, 4 parts, every file (graph.dgl
//! too) written natively. Ignored by default (it needs a release build and
//! ~2 GB):
//!
//! cargo test --release -p dgl-partition --test real_dgl_bench -- \
//!     --ignored --nocapture

use std::collections::BTreeMap;
use std::time::Instant;

use dgl_partition::assign::Assignment;
use dgl_partition::model::{DType, EdgeType, InputGraph, NodeType, Tensor};
use dgl_partition::shuffle_write::{write_partitions, OutputConfig};

/// splitmix64.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn graph(n: u64, m: u64, dims: u64) -> InputGraph {
    let src = (0..m).map(|i| mix(2 * i) % n).collect();
    let dst = (0..m).map(|i| mix(2 * i + 1) % n).collect();
    let feat: Vec<u8> = (0..n * dims)
        .flat_map(|i| ((mix(i) % 1000) as f32).to_le_bytes())
        .collect();
    let mut data = BTreeMap::new();
    data.insert(
        "feat".into(),
        Tensor {
            dtype: DType::F32,
            shape: vec![n, dims],
            data: feat,
        },
    );
    let nt = NodeType {
        name: "_N".into(),
        count: n,
        data,
        weights: None,
    };
    let et = EdgeType {
        src_type: 0,
        rel: "_E".into(),
        dst_type: 0,
        src,
        dst,
        data: BTreeMap::new(),
    };
    InputGraph {
        name: "bench".into(),
        ntypes: vec![nt],
        etypes: vec![et],
    }
}

/// (own, waited-for children) user + system CPU seconds, from
/// /proc/self/stat (clock ticks of 1/100 s).
fn cpu_secs() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // Fields 14-17 of stat(5), counted from field 3 here.
    ((f[11] + f[12]) / 100.0, (f[13] + f[14]) / 100.0)
}

#[test]
#[ignore]
fn write_partitions_1m_nodes_19m_edges_4_parts() {
    let (n, m) = (1_000_000u64, 19_073_876u64);
    let g = graph(n, m, 64);
    // Random assignment: the worst case for halo sizes.
    let parts = (0..n).map(|i| (mix(i ^ 0x5555) % 4) as u32).collect();
    let a = Assignment {
        num_parts: 4,
        parts,
        algo_name: "random".into(),
    };
    let dir = tempfile::tempdir().unwrap();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let cfg = OutputConfig {
        out_dir: dir.path().join("out"),
        graph_name: "bench".into(),
        threads,
        save_orig_ids: false,
    };
    let (t, cpu_before) = (Instant::now(), cpu_secs());
    let s = write_partitions(&g, &a, &cfg).unwrap();
    let (wall, cpu) = (t.elapsed(), cpu_secs());
    println!(
        "write_partitions: {wall:.2?} with {threads} threads, {} bytes",
        s.bytes_written
    );
    println!(
        "cpu seconds (self, children): {:.2?} -> {cpu:.2?}",
        cpu_before
    );
    println!("timings: {:#?}", s.timings);
    for p in &s.parts {
        println!("{p:?}");
    }
    assert_eq!(s.parts.iter().map(|p| p.edges).sum::<u64>(), m);
}

#[test]
#[ignore]
fn build_steps_1m() {
    use dgl_partition::shuffle::{build_partition, owned_edges, part::inner_nodes, IdMaps};
    let (n, m) = (1_000_000u64, 19_073_876u64);
    let g = graph(n, m, 64);
    let parts: Vec<u32> = (0..n).map(|i| (mix(i ^ 0x5555) % 4) as u32).collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(|| {
        let t = Instant::now();
        let ids = IdMaps::for_graph(&g, &parts, 4).unwrap();
        println!("ids {:?}", t.elapsed());
        let t = Instant::now();
        let inner = inner_nodes(&ids, &parts, 0);
        println!("inner {:?}", t.elapsed());
        let t = Instant::now();
        let e = owned_edges(&g, &parts, 0);
        println!("owned {:?}", t.elapsed());
        let t = Instant::now();
        let p = build_partition(&g, &ids, 0, inner, e).unwrap();
        println!("build {:?} {}", t.elapsed(), p.halo.len());
    });
}
