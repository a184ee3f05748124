//! Partitioners: every node in exactly one part in range, balance within
//! tolerance per constraint, cut quality on a grid, determinism, and DGL's
//! assignment file format (round trip and every error).

use std::collections::BTreeMap;

use dgl_partition::assign::{self, Assignment, Metis, MetisMode, Partitioner, Random, Request};
use dgl_partition::csr::{self, Csr};
use dgl_partition::model::{DType, EdgeType, InputGraph, NodeType, Tensor};
use dgl_partition::{rmat, Error};

fn ntype(name: &str, count: u64, train_every: Option<u64>) -> NodeType {
    let mut data = BTreeMap::new();
    if let Some(e) = train_every {
        let mask = (0..count).map(|v| u8::from(v % e == 0)).collect();
        let t = Tensor {
            dtype: DType::U8,
            shape: vec![count],
            data: mask,
        };
        data.insert("train_mask".to_string(), t);
    }
    NodeType {
        name: name.into(),
        count,
        data,
        weights: None,
    }
}

fn etype(s: usize, d: usize, (src, dst): (Vec<u64>, Vec<u64>)) -> EdgeType {
    EdgeType {
        src_type: s,
        rel: format!("r{s}{d}"),
        dst_type: d,
        src,
        dst,
        data: BTreeMap::new(),
    }
}

/// An R-MAT graph with a train mask on every 7th node.
fn rmat_graph(n: u64, m: u64, seed: u64) -> InputGraph {
    InputGraph {
        name: "rmat".into(),
        ntypes: vec![ntype("_N", n, Some(7))],
        etypes: vec![etype(0, 0, rmat::rmat(n, m, seed))],
    }
}

/// Two node types (users with a train mask, items without) and two edge
/// types between them.
fn hetero_graph(seed: u64) -> InputGraph {
    let (nu, ni) = (6000u64, 4000u64);
    let (s, d) = rmat::rmat(nu, 40_000, seed);
    let (s2, d2) = rmat::rmat(nu.max(ni), 30_000, seed + 1);
    let clicks: (Vec<u64>, Vec<u64>) = s2.iter().zip(&d2).map(|(&a, &b)| (a % nu, b % ni)).unzip();
    InputGraph {
        name: "hetero".into(),
        ntypes: vec![ntype("user", nu, Some(5)), ntype("item", ni, None)],
        etypes: vec![etype(0, 0, (s, d)), etype(0, 1, clicks)],
    }
}

/// A `w` x `h` grid: the best 4-way cut of a square grid is two straight
/// lines, `w + h` edges.
fn grid(w: u64, h: u64) -> InputGraph {
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for y in 0..h {
        for x in 0..w {
            let v = y * w + x;
            if x + 1 < w {
                src.push(v);
                dst.push(v + 1);
            }
            if y + 1 < h {
                src.push(v);
                dst.push(v + w);
            }
        }
    }
    InputGraph {
        name: "grid".into(),
        ntypes: vec![ntype("_N", w * h, None)],
        etypes: vec![etype(0, 0, (src, dst))],
    }
}

fn request<'a>(g: &'a InputGraph, c: &'a Csr, k: u32, train: bool, edges: bool) -> Request<'a> {
    Request {
        graph: g,
        csr: c,
        num_parts: k,
        balance_train: train.then_some("train_mask"),
        balance_edges: edges,
        threads: 2,
        seed: 7,
    }
}

fn hybrid(coarse_nodes: usize) -> Metis {
    Metis {
        mode: MetisMode::Hybrid,
        coarse_nodes,
    }
}

fn direct() -> Metis {
    Metis {
        mode: MetisMode::Direct,
        coarse_nodes: 0,
    }
}

fn assert_complete(a: &Assignment, g: &InputGraph, k: u32) {
    assert_eq!(a.num_parts, k);
    assert_eq!(a.parts.len() as u64, g.num_nodes());
    assert!(a.parts.iter().all(|&p| p < k), "a part id out of range");
    // No part is empty on these graphs.
    for p in 0..k {
        assert!(a.parts.contains(&p), "part {p} is empty");
    }
}

#[test]
fn every_partitioner_gives_every_node_one_part_in_range() {
    let g = rmat_graph(5000, 40_000, 1);
    let c = csr::symmetric(&g, 2);
    for k in [2u32, 3, 8] {
        let req = request(&g, &c, k, true, true);
        let parts: Vec<(&str, Box<dyn Partitioner>)> = vec![
            ("direct", Box::new(direct())),
            ("hybrid", Box::new(hybrid(500))),
            ("random", Box::new(Random)),
        ];
        for (name, p) in parts {
            let a = p
                .assign(&req)
                .unwrap_or_else(|e| panic!("{name} k={k}: {e}"));
            assert_complete(&a, &g, k);
        }
    }
}

#[test]
fn hybrid_balances_every_constraint_within_tolerance() {
    for (g, train, edges) in [
        (rmat_graph(20_000, 200_000, 2), true, true),
        (rmat_graph(20_000, 200_000, 3), false, false),
        (hetero_graph(4), true, true),
        (hetero_graph(5), false, true),
    ] {
        let c = csr::symmetric(&g, 2);
        let cons = assign::constraints(&g, train.then_some("train_mask"), edges).unwrap();
        for k in [2u32, 4, 7] {
            let req = request(&g, &c, k, train, edges);
            let a = hybrid(1000).assign(&req).unwrap();
            assert_complete(&a, &g, k);
            let q = assign::quality(&c, &a, &cons);
            for (name, b) in cons.names.iter().zip(&q.balance) {
                assert!(*b <= 1.03 + 1e-9, "{} k={k}: {name} balance {b}", g.name);
            }
        }
    }
}

#[test]
fn direct_metis_balance_is_near_its_tolerance() {
    // METIS with DGL's options (one refinement pass) overshoots 1.03 a
    // little on multi-constraint power-law graphs; it must stay close.
    let g = rmat_graph(20_000, 200_000, 6);
    let c = csr::symmetric(&g, 2);
    let cons = assign::constraints(&g, Some("train_mask"), true).unwrap();
    let a = direct().assign(&request(&g, &c, 4, true, true)).unwrap();
    let q = assign::quality(&c, &a, &cons);
    assert!(q.max_balance() < 1.10, "balance {:?}", q.balance);
}

#[test]
fn metis_cut_on_a_grid_is_near_optimal() {
    let g = grid(200, 200);
    let c = csr::symmetric(&g, 2);
    let cons = assign::constraints(&g, None, false).unwrap();
    let optimal = 400.0;
    for (name, m) in [("direct", direct()), ("hybrid", hybrid(2000))] {
        let a = m.assign(&request(&g, &c, 4, false, false)).unwrap();
        let q = assign::quality(&c, &a, &cons);
        let ratio = q.edge_cut as f64 / optimal;
        println!("{name}: cut {} vs optimal 400", q.edge_cut);
        // METIS's k-way on a grid gives ragged borders, not straight lines
        // (549 with DGL's options); a random split cuts ~30,000.
        assert!(ratio <= 1.6, "{name}: cut {} vs optimal 400", q.edge_cut);
        assert!(q.max_balance() <= 1.031, "{name}: balance {:?}", q.balance);
    }
}

#[test]
fn hybrid_cut_is_within_five_percent_of_metis() {
    let g = rmat_graph(30_000, 300_000, 8);
    let c = csr::symmetric(&g, 2);
    let cons = assign::constraints(&g, Some("train_mask"), true).unwrap();
    let req = request(&g, &c, 4, true, true);
    let m = assign::quality(&c, &direct().assign(&req).unwrap(), &cons);
    let h = assign::quality(&c, &hybrid(2000).assign(&req).unwrap(), &cons);
    assert!(
        h.edge_cut as f64 <= 1.05 * m.edge_cut as f64,
        "hybrid cut {} vs METIS {}",
        h.edge_cut,
        m.edge_cut
    );
    // And far better than random.
    let r = assign::quality(&c, &Random.assign(&req).unwrap(), &cons);
    assert!(
        h.edge_cut < r.edge_cut,
        "{} vs random {}",
        h.edge_cut,
        r.edge_cut
    );
}

#[test]
fn partitioners_are_deterministic_for_a_seed() {
    let g = rmat_graph(20_000, 150_000, 9);
    let c = csr::symmetric(&g, 2);
    let mut req = request(&g, &c, 4, true, true);
    let h1 = hybrid(1000).assign(&req).unwrap();
    let r1 = Random.assign(&req).unwrap();
    let d1 = direct().assign(&req).unwrap();
    req.threads = 1;
    assert_eq!(hybrid(1000).assign(&req).unwrap(), h1);
    assert_eq!(Random.assign(&req).unwrap(), r1);
    assert_eq!(direct().assign(&req).unwrap(), d1);
    req.seed = 8;
    assert_ne!(Random.assign(&req).unwrap(), r1);
}

#[test]
fn random_is_uniform() {
    let g = rmat_graph(40_000, 1000, 10);
    let c = csr::symmetric(&g, 2);
    let a = Random.assign(&request(&g, &c, 4, false, false)).unwrap();
    assert_eq!(a.algo_name, "random");
    for p in 0..4 {
        let n = a.parts.iter().filter(|&&x| x == p).count();
        assert!((9_500..10_500).contains(&n), "part {p} has {n} of 40000");
    }
}

#[test]
fn constraints_follow_dgl() {
    // Homogeneous, nothing balanced: METIS's unit weights.
    let g = rmat_graph(100, 500, 11);
    let cons = assign::constraints(&g, None, false).unwrap();
    assert_eq!(
        (cons.ncon, cons.names.clone()),
        (1, vec!["nodes".to_string()])
    );
    // Homogeneous with balance_edges only: the in-degree alone.
    let cons = assign::constraints(&g, None, true).unwrap();
    let indeg = assign::weights::in_degrees(&g);
    assert_eq!(cons.vwgt, indeg);
    // Train mask + edges: non-train, train, and their in-degrees.
    let cons = assign::constraints(&g, Some("train_mask"), true).unwrap();
    assert_eq!(cons.ncon, 4);
    let row = |v: usize| &cons.vwgt[v * 4..v * 4 + 4];
    assert_eq!(row(7), &[0, 1, 0, indeg[7]]);
    assert_eq!(row(8), &[1, 0, indeg[8], 0]);
    // Heterogeneous: users split by the mask, items one class.
    let h = hetero_graph(12);
    let cons = assign::constraints(&h, Some("train_mask"), false).unwrap();
    assert_eq!(
        cons.names,
        vec!["user/non-train_mask", "user/train_mask", "item"]
    );
    assert_eq!(cons.totals(), vec![4800, 1200, 4000]);
    // Heterogeneous without a mask: one class per node type.
    let cons = assign::constraints(&h, None, false).unwrap();
    assert_eq!(cons.totals(), vec![6000, 4000]);
    // A mask nobody has is a configuration error.
    let err = assign::constraints(&h, Some("nope"), false).unwrap_err();
    assert!(err.to_string().contains("\"nope\""), "{err}");
}

#[test]
fn file_format_round_trips_and_reads_dgl_layout() {
    let g = hetero_graph(13);
    let c = csr::symmetric(&g, 2);
    let a = hybrid(1000)
        .assign(&request(&g, &c, 3, true, false))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    assign::write_files(&a, &g, dir.path()).unwrap();
    let user = std::fs::read_to_string(dir.path().join("user.txt")).unwrap();
    assert_eq!(user.lines().count(), 6000);
    assert_eq!(user.lines().next().unwrap(), a.parts[0].to_string());
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("partition_meta.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        meta,
        serde_json::json!({"version": "1.0.0", "num_parts": 3, "algo_name": "metis"})
    );
    let back = assign::read_files(dir.path(), &g, Some(3)).unwrap();
    assert_eq!(back, a);
    let req = request(&g, &c, 3, false, false);
    let via_trait = assign::FromFiles::new(dir.path()).assign(&req).unwrap();
    assert_eq!(via_trait, a);
    let q = req.quality(&a).unwrap();
    assert!(q
        .to_string()
        .starts_with(&format!("edge cut {} (undirected), balance ", q.edge_cut)));
}

/// Writes a two-type assignment (a: 3 nodes, b: 2 nodes) with these file
/// contents and reads it back for 2 parts.
fn read_bad(a_txt: Option<&str>, meta: Option<&str>) -> (Error, std::path::PathBuf) {
    let g = InputGraph {
        name: "g".into(),
        ntypes: vec![ntype("a", 3, None), ntype("b", 2, None)],
        etypes: vec![],
    };
    let dir = tempfile::tempdir().unwrap();
    if let Some(t) = a_txt {
        std::fs::write(dir.path().join("a.txt"), t).unwrap();
    }
    std::fs::write(dir.path().join("b.txt"), "1\n0\n").unwrap();
    if let Some(m) = meta {
        std::fs::write(dir.path().join("partition_meta.json"), m).unwrap();
    }
    let err = assign::read_files(dir.path(), &g, Some(2)).unwrap_err();
    (err, dir.keep())
}

const META2: &str = r#"{"version": "1.0.0", "num_parts": 2, "algo_name": "metis"}"#;

#[test]
fn file_format_errors_name_file_and_line() {
    // (a.txt, partition_meta.json, the file blamed, where, what).
    type Case<'a> = (Option<&'a str>, Option<&'a str>, &'a str, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (
            Some("0\nx\n1\n"),
            Some(META2),
            "a.txt",
            "line 2",
            "found \"x\"",
        ),
        (
            Some("0\n-1\n1\n"),
            Some(META2),
            "a.txt",
            "line 2",
            "found \"-1\"",
        ),
        (
            Some("0\n1\n2\n"),
            Some(META2),
            "a.txt",
            "line 3",
            "not below num_parts 2",
        ),
        (
            Some("0\n1\n"),
            Some(META2),
            "a.txt",
            "line 3",
            "too few lines: 2, expected 3",
        ),
        (
            Some("0\n1\n1\n0\n"),
            Some(META2),
            "a.txt",
            "line 4",
            "too many lines",
        ),
        (Some(""), Some(META2), "a.txt", "line 1", "too few lines: 0"),
        (None, Some(META2), "a.txt", "", "missing"),
        (
            Some("0\n1\n1\n"),
            None,
            "partition_meta.json",
            "",
            "missing",
        ),
        (
            Some("0\n1\n1\n"),
            Some(r#"{"version": "1.0.0", "num_parts": 4, "algo_name": "metis"}"#),
            "partition_meta.json",
            "num_parts",
            "4 partitions, 2 were requested",
        ),
        (
            Some("0\n1\n1\n"),
            Some(r#"{"version": "2.0.0", "num_parts": 2, "algo_name": "metis"}"#),
            "partition_meta.json",
            "version",
            "not supported",
        ),
        (
            Some("0\n1\n1\n"),
            Some("{"),
            "partition_meta.json",
            "line 1",
            "EOF",
        ),
    ];
    for (a_txt, meta, file, at, msg) in cases {
        let (err, dir) = read_bad(a_txt, meta);
        let text = err.to_string();
        match &err {
            Error::Input { path, at: got, .. } => {
                assert_eq!(path, &dir.join(file), "{text}");
                assert_eq!(got, at, "{text}");
            }
            other => panic!("expected an input error, got {other:?}"),
        }
        assert!(text.contains(msg), "{text:?} lacks {msg:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn file_format_accepts_crlf_and_no_final_newline() {
    let g = InputGraph {
        name: "g".into(),
        ntypes: vec![ntype("a", 3, None)],
        etypes: vec![],
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "1\r\n0\r\n1").unwrap();
    std::fs::write(dir.path().join("partition_meta.json"), META2).unwrap();
    let a = assign::read_files(dir.path(), &g, None).unwrap();
    assert_eq!(a.parts, vec![1, 0, 1]);
    assert_eq!(a.algo_name, "metis");
}

#[test]
fn edgeless_graphs_one_part_and_mismatches() {
    let g = InputGraph {
        name: "isolated".into(),
        ntypes: vec![ntype("_N", 5000, None)],
        etypes: vec![],
    };
    let c = csr::symmetric(&g, 2);
    assert_eq!(c.num_directed_edges(), 0);
    let cons = assign::constraints(&g, None, false).unwrap();
    for m in [hybrid(100), direct()] {
        let a = m.assign(&request(&g, &c, 4, false, false)).unwrap();
        assert_complete(&a, &g, 4);
        let q = assign::quality(&c, &a, &cons);
        assert!(q.max_balance() <= 1.031, "{:?}", q.balance);
        let one = m.assign(&request(&g, &c, 1, false, false)).unwrap();
        assert!(one.parts.iter().all(|&p| p == 0));
    }
    let other = csr::symmetric(&rmat_graph(10, 20, 1), 1);
    let err = direct()
        .assign(&request(&g, &other, 4, false, false))
        .unwrap_err();
    assert!(
        err.to_string().contains("10 nodes, the graph 5000"),
        "{err}"
    );
    assert!(direct().assign(&request(&g, &c, 0, false, false)).is_err());
}
