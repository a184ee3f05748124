//! write_partitions against real DGL 2.1.0 (the Python from env
//! DGLRUN_TEST_PYTHON): DGL's `partition_graph` partitions a random graph,
//! its assignment is fed to `write_partitions`, and both outputs are loaded
//! through `load_partition` with DGL_DIST_DEBUG=1 and compared
//! (tests/check_partitions.py says what and how).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use dgl_partition::assign::Assignment;
use dgl_partition::model::{DType, EdgeType, InputGraph, NodeType, Tensor};
use dgl_partition::output::tensors::{write_npy, Rows};
use dgl_partition::shuffle_write::{write_partitions, OutputConfig};

fn python() -> PathBuf {
    match std::env::var_os("DGLRUN_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "DGLRUN_TEST_PYTHON is not set: these tests need a Python with DGL 2.1.0 \
             (e.g. ~/.cache/dgl-operator/venv/dgl-2.1.0-torch-2.2.1/bin/python)"
        ),
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs a test"),
    )
    .join("tests")
    .join(name)
}

/// Runs a test script; its output is shown, a failure fails the test.
fn run(args: &[&Path]) {
    let out = Command::new(python())
        .args(args)
        .env("DGL_DIST_DEBUG", "1")
        .output()
        .expect("start python");
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    println!("{so}");
    assert!(out.status.success(), "{:?} failed:\n{so}\n{se}", args[0]);
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

fn tensor(dtype: DType, shape: Vec<u64>, data: Vec<u8>) -> Tensor {
    Tensor { dtype, shape, data }
}

/// Random features: f32 [n, 4], i64 [n], u8 [n, 2].
fn node_type(rng: &mut Rng, name: &str, count: u64) -> NodeType {
    let mut data = BTreeMap::new();
    let f: Vec<u8> = (0..count * 4)
        .flat_map(|_| (rng.below(1 << 20) as f32 / 7.0).to_le_bytes())
        .collect();
    data.insert("feat".into(), tensor(DType::F32, vec![count, 4], f));
    let l: Vec<u8> = (0..count)
        .flat_map(|_| (rng.below(1000) as i64 - 500).to_le_bytes())
        .collect();
    data.insert("label".into(), tensor(DType::I64, vec![count], l));
    let m: Vec<u8> = (0..count * 2).map(|_| rng.below(256) as u8).collect();
    data.insert("mask".into(), tensor(DType::U8, vec![count, 2], m));
    NodeType {
        name: name.into(),
        count,
        data,
        weights: None,
    }
}

fn edge_type(rng: &mut Rng, ends: (usize, usize), rel: &str, n: (u64, u64), m: u64) -> EdgeType {
    let mut data = BTreeMap::new();
    let w: Vec<u8> = (0..m)
        .flat_map(|_| (rng.below(1 << 30) as f64 / 3.0).to_le_bytes())
        .collect();
    data.insert("w".into(), tensor(DType::F64, vec![m], w));
    let src = (0..m).map(|_| rng.below(n.0)).collect();
    let dst = (0..m).map(|_| rng.below(n.1)).collect();
    EdgeType {
        src_type: ends.0,
        rel: rel.into(),
        dst_type: ends.1,
        src,
        dst,
        data,
    }
}

/// Types named in DGL's sorted order, dense enough that every (part, type)
/// of DGL's random partitioning is non-empty (its partition_graph needs it).
fn random_graph(seed: u64, hetero: bool) -> InputGraph {
    let mut rng = Rng(seed);
    if !hetero {
        let n = 200 + rng.below(200);
        let e = edge_type(&mut rng, (0, 0), "_E", (n, n), 8 * n);
        return InputGraph {
            name: "g".into(),
            ntypes: vec![node_type(&mut rng, "_N", n)],
            etypes: vec![e],
        };
    }
    let (ni, nu) = (100 + rng.below(100), 150 + rng.below(100));
    let ntypes = vec![
        node_type(&mut rng, "item", ni),
        node_type(&mut rng, "user", nu),
    ];
    let etypes = vec![
        edge_type(&mut rng, (0, 1), "bought-by", (ni, nu), 600),
        edge_type(&mut rng, (1, 0), "buys", (nu, ni), 700),
        edge_type(&mut rng, (1, 1), "follows", (nu, nu), 800),
    ];
    InputGraph {
        name: "g".into(),
        ntypes,
        etypes,
    }
}

/// The graph as `.npy` arrays + graph.json for the Python scripts.
fn write_input(g: &InputGraph, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let all = |n: u64| (0..n).collect::<Vec<u64>>();
    let mut ntypes = Vec::new();
    for (i, t) in g.ntypes.iter().enumerate() {
        let rows = all(t.count);
        for (f, x) in &t.data {
            write_npy(
                &dir.join(format!("n{i}_{f}.npy")),
                &Rows::Gather {
                    tensor: x,
                    rows: &rows,
                },
            )
            .unwrap();
        }
        let feats: Vec<&String> = t.data.keys().collect();
        ntypes.push(serde_json::json!({"name": t.name, "count": t.count, "feats": feats}));
    }
    let mut etypes = Vec::new();
    for (i, e) in g.etypes.iter().enumerate() {
        write_npy(&dir.join(format!("e{i}_src.npy")), &Rows::Ids(&e.src)).unwrap();
        write_npy(&dir.join(format!("e{i}_dst.npy")), &Rows::Ids(&e.dst)).unwrap();
        let rows = all(e.count());
        for (f, x) in &e.data {
            write_npy(
                &dir.join(format!("e{i}_{f}.npy")),
                &Rows::Gather {
                    tensor: x,
                    rows: &rows,
                },
            )
            .unwrap();
        }
        let feats: Vec<&String> = e.data.keys().collect();
        let (s, d) = (&g.ntypes[e.src_type].name, &g.ntypes[e.dst_type].name);
        etypes.push(serde_json::json!({"src": s, "rel": e.rel, "dst": d, "feats": feats}));
    }
    let meta =
        serde_json::json!({"homogeneous": g.is_homogeneous(), "ntypes": ntypes, "etypes": etypes});
    std::fs::write(dir.join("graph.json"), meta.to_string()).unwrap();
}

fn read_assignment(path: &Path, num_parts: u32) -> Assignment {
    let text = std::fs::read_to_string(path).unwrap();
    let parts = text.lines().map(|l| l.trim().parse().unwrap()).collect();
    Assignment {
        num_parts,
        parts,
        algo_name: "random".into(),
    }
}

/// DGL partitions, we partition with DGL's assignment, then compare.
fn same_as_dgl(seed: u64, hetero: bool, num_parts: u32) {
    let tmp = tempfile::tempdir().unwrap();
    let g = random_graph(seed, hetero);
    write_input(&g, &tmp.path().join("input"));
    let parts = num_parts.to_string();
    run(&[&script("dgl_reference.py"), tmp.path(), Path::new(&parts)]);
    let assignment = read_assignment(&tmp.path().join("assignment.txt"), num_parts);
    let cfg = OutputConfig {
        out_dir: tmp.path().join("ours"),
        graph_name: "ours".into(),
        threads: 2,
        save_orig_ids: true,
    };
    let summary = write_partitions(&g, &assignment, &cfg).unwrap();
    assert_eq!(summary.parts.len() as u32, num_parts);
    assert_eq!(
        summary.parts.iter().map(|p| p.edges).sum::<u64>(),
        g.num_edges()
    );
    assert_eq!(
        summary.parts.iter().map(|p| p.inner_nodes).sum::<u64>(),
        g.num_nodes()
    );
    let leftovers: Vec<_> = std::fs::read_dir(&cfg.out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len() as u32,
        num_parts + 1,
        "parts + JSON, no staging: {leftovers:?}"
    );
    let mut files: Vec<String> = std::fs::read_dir(cfg.out_dir.join("part0"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let want = [
        "edge_feat.dgl",
        "graph.dgl",
        "node_feat.dgl",
        "orig_eids.dgl",
        "orig_nids.dgl",
    ];
    assert_eq!(files, want, "a part's files, nothing temporary");
    let ours = summary.json.clone();
    let reference = tmp.path().join("ref").join("ref.json");
    run(&[
        &script("check_partitions.py"),
        tmp.path(),
        &ours,
        &reference,
    ]);
}

#[test]
fn homogeneous_matches_dgl() {
    same_as_dgl(1, false, 3);
    same_as_dgl(2, false, 2);
}

#[test]
fn heterogeneous_matches_dgl() {
    same_as_dgl(3, true, 2);
    same_as_dgl(4, true, 4);
}

#[test]
fn single_part_matches_dgl() {
    same_as_dgl(5, false, 1);
    same_as_dgl(6, true, 1);
}
