//! Our METIS assignment against DGL 2.1.0's own
//! (`dgl.metis_partition_assignment` with a train mask and balanced edges)
//! on the same symmetric graph: our cut within 5% of DGL's, and DGL's logged
//! cut is the undirected count that `quality` reports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use dgl_partition::assign::{self, Assignment, Metis, MetisMode, Partitioner, Request};
use dgl_partition::csr::{self, Csr};
use dgl_partition::model::{DType, EdgeType, InputGraph, NodeType, Tensor};
use dgl_partition::rmat;

/// The DGL interpreter: $DGLRUN_TEST_PYTHON, else the venv `cargo xtask
/// pyenv` builds. Missing is a failure, never a skip.
fn python() -> PathBuf {
    if let Ok(p) = std::env::var("DGLRUN_TEST_PYTHON") {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "DGLRUN_TEST_PYTHON={} does not exist; run `cargo xtask pyenv` and point it at the venv's python",
            p.display()
        );
        return p;
    }
    let cache = std::env::var_os("DGL_OPERATOR_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/dgl-operator")
        });
    let venv = cache.join("venv/dgl-2.1.0-torch-2.2.1");
    let p = venv.join("bin/python");
    assert!(
        p.exists() && venv.join(".dgl-operator-requirements.sha256").exists(),
        "the DGL venv is missing or incomplete ({}): run `cargo xtask pyenv` first (or set DGLRUN_TEST_PYTHON)",
        p.display()
    );
    p
}

const SCRIPT: &str = r#"
import sys, numpy as np, torch, dgl
src = np.fromfile(sys.argv[1], dtype="<i8")
dst = np.fromfile(sys.argv[2], dtype="<i8")
n, k = int(sys.argv[3]), int(sys.argv[4])
g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n)
train = (torch.arange(n) % 7 == 0).long()
parts = dgl.metis_partition_assignment(g, k, balance_ntypes=train, balance_edges=True)
parts.numpy().astype("<i8").tofile(sys.argv[5])
"#;

/// The symmetric edges of `c` as one edge type, so that DGL and we see the
/// same graph and the same in-degrees.
fn symmetric_graph(c: &Csr) -> InputGraph {
    let n = c.num_nodes();
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for v in 0..n {
        for &u in c.neighbors_of(v) {
            src.push(v);
            dst.push(u);
        }
    }
    let mask = (0..n).map(|v| u8::from(v % 7 == 0)).collect();
    let train = Tensor {
        dtype: DType::U8,
        shape: vec![n],
        data: mask,
    };
    InputGraph {
        name: "rmat".into(),
        ntypes: vec![NodeType {
            name: "_N".into(),
            count: n,
            data: BTreeMap::from([("train_mask".to_string(), train)]),
            weights: None,
        }],
        etypes: vec![EdgeType {
            src_type: 0,
            rel: "_E".into(),
            dst_type: 0,
            src,
            dst,
            data: BTreeMap::new(),
        }],
    }
}

fn write_i64(path: &Path, v: &[u64]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| (*x as i64).to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap();
}

/// DGL's assignment and the edge cut its METIS logged.
fn dgl_metis(g: &InputGraph, k: u32, dir: &Path) -> (Vec<u32>, u64) {
    let (s, d) = (dir.join("src.bin"), dir.join("dst.bin"));
    write_i64(&s, &g.etypes[0].src);
    write_i64(&d, &g.etypes[0].dst);
    let script = dir.join("metis.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let out = dir.join("parts.bin");
    let run = Command::new(python())
        .arg(&script)
        .args([&s, &d])
        .args([g.num_nodes().to_string(), k.to_string()])
        .arg(&out)
        .output()
        .expect("running DGL's python");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "DGL failed: {stderr}");
    let parts = std::fs::read(&out)
        .unwrap()
        .chunks(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
        .collect();
    // metis_partition_hetero.cc: "... into 4 parts and get N edge cuts".
    let logged = stderr
        .split("and get ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no edge cut in DGL's log: {stderr}"));
    (parts, logged)
}

#[test]
fn our_metis_cut_is_within_five_percent_of_dgls() {
    let (s, d) = rmat::rmat(20_000, 200_000, 21);
    let raw = InputGraph {
        name: "raw".into(),
        ntypes: vec![NodeType {
            name: "_N".into(),
            count: 20_000,
            ..Default::default()
        }],
        etypes: vec![EdgeType {
            src: s,
            dst: d,
            ..Default::default()
        }],
    };
    let c = csr::symmetric(&raw, 2);
    let g = symmetric_graph(&c);
    assert_eq!(csr::symmetric(&g, 2), c);
    let cons = assign::constraints(&g, Some("train_mask"), true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let k = 4;
    let (dgl_parts, logged) = dgl_metis(&g, k, dir.path());
    let dgl = Assignment {
        num_parts: k,
        parts: dgl_parts,
        algo_name: "metis".into(),
    };
    let theirs = assign::quality(&c, &dgl, &cons);
    assert_eq!(theirs.edge_cut, logged, "METIS logs undirected cut edges");
    let req = Request {
        graph: &g,
        csr: &c,
        num_parts: k,
        balance_train: Some("train_mask"),
        balance_edges: true,
        threads: 2,
        seed: 1,
    };
    for mode in [MetisMode::Direct, MetisMode::Hybrid] {
        let ours = Metis {
            mode,
            coarse_nodes: 2000,
        }
        .assign(&req)
        .unwrap();
        let q = assign::quality(&c, &ours, &cons);
        println!(
            "{mode:?}: cut {} vs DGL {}; balance {:?} vs {:?}",
            q.edge_cut, theirs.edge_cut, q.balance, theirs.balance
        );
        assert!(
            q.edge_cut as f64 <= 1.05 * theirs.edge_cut as f64,
            "{mode:?}: our cut {} vs DGL's {}",
            q.edge_cut,
            theirs.edge_cut
        );
    }
}
