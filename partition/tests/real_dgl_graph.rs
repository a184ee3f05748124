//! Our graph.dgl writer against DGL 2.1.0's own `dgl.save_graphs` (the
//! Python from env DGLRUN_TEST_PYTHON): for the same part-local arrays, DGL
//! builds the graph as its partition pipeline does (`dgl.graph` + the
//! reserved ndata/edata, dtypes as RESERVED_FIELD_DTYPE) and saves it; the
//! two files must be byte for byte equal (but for the unused rest of the
//! 4 KiB header, which DGL leaves uninitialised and we write as zeros), and
//! DGL's `load_graphs` must read ours back field by field.

use std::path::{Path, PathBuf};
use std::process::Command;

use dgl_partition::output::graph_dgl::{write_graph, GraphSpec};
use dgl_partition::output::tensors::{write_npy, Rows};
use dgl_partition::shuffle::Partition;

/// Builds the graph from the arrays as DGL's pipeline (and our former
/// Python writer) did, saves it with DGL, and checks that DGL loads ours
/// with the same structure, tensors and dtypes.
const SCRIPT: &str = r#"
import json, sys, numpy as np, torch, dgl
folder = sys.argv[1]
job = json.load(open(folder + "/job.json"))
load = lambda n: torch.from_numpy(np.load(folder + "/" + n + ".npy"))
src, dst, halo = load("src"), load("dst"), load("halo")
num_inner = job["num_inner"]
n = num_inner + len(halo)
g = dgl.graph((src, dst), num_nodes=n, idtype=torch.int64)
start = job["node_start"]
g.ndata[dgl.NID] = torch.cat([torch.arange(start, start + num_inner, dtype=torch.int64), halo])
inner = torch.zeros(n, dtype=torch.uint8)
inner[:num_inner] = 1
g.ndata["inner_node"] = inner
m = g.num_edges()
g.edata[dgl.EID] = torch.arange(job["edge_start"], job["edge_start"] + m, dtype=torch.int64)
g.edata["inner_edge"] = torch.ones(m, dtype=torch.uint8)
def runs(counts, dtype):
    return torch.repeat_interleave(torch.arange(len(counts), dtype=dtype), torch.tensor(counts, dtype=torch.int64))
if job["hetero"]:
    g.ndata[dgl.NTYPE] = torch.cat([runs(job["inner_counts"], torch.int16), load("halo_types").to(torch.int16)])
    g.edata[dgl.ETYPE] = runs(job["edge_counts"], torch.int32)
dgl.save_graphs(folder + "/dgl.dgl", [g])
ours = dgl.load_graphs(folder + "/ours.dgl")[0][0]
assert ours.ntypes == ["_N"] and ours.etypes == ["_E"], (ours.ntypes, ours.etypes)
assert ours.num_nodes() == n and ours.idtype == torch.int64
s, d = ours.edges(order="eid")
assert torch.equal(s, src) and torch.equal(d, dst)
for want, got in ((g.ndata, ours.ndata), (g.edata, ours.edata)):
    assert sorted(want.keys()) == sorted(got.keys()), (want.keys(), got.keys())
    for k in want.keys():
        assert want[k].dtype == got[k].dtype, (k, want[k].dtype, got[k].dtype)
        assert torch.equal(want[k], got[k]), k
print("loaded: %d nodes, %d edges, ndata %s, edata %s" % (n, m, list(ours.ndata.keys()), list(ours.edata.keys())))
"#;

fn python() -> PathBuf {
    match std::env::var_os("DGLRUN_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "DGLRUN_TEST_PYTHON is not set: these tests need a Python with DGL 2.1.0 \
             (e.g. ~/.cache/dgl-operator/venv/dgl-2.1.0-torch-2.2.1/bin/python)"
        ),
    }
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

/// A part as the shuffle builds one: `inner[t]` nodes of each type, halo
/// nodes after them, every edge ending at an inner node.
fn random_part(seed: u64, inner: &[u64], halo: u64, edges: &[u64]) -> Partition {
    let mut rng = Rng(seed);
    let num_inner: u64 = inner.iter().sum();
    let n = num_inner + halo;
    let m: u64 = edges.iter().sum();
    let node_start = 1000 + rng.below(1000);
    let mut halo_ids: Vec<u64> = (0..halo).map(|i| 5000 + 3 * i + rng.below(3)).collect();
    halo_ids.sort_unstable();
    Partition {
        part: 1,
        node_start,
        inner: inner.iter().map(|&c| (0..c).collect()).collect(),
        halo: halo_ids,
        halo_types: (0..halo)
            .map(|_| rng.below(inner.len() as u64) as u16)
            .collect(),
        edge_start: rng.below(1 << 40),
        eids: edges.iter().map(|&c| (0..c).collect()).collect(),
        src: (0..m).map(|_| rng.below(n.max(1))).collect(),
        dst: (0..m).map(|_| rng.below(num_inner.max(1))).collect(),
    }
}

/// Writes ours and DGL's graph.dgl for `part`; asserts DGL reads ours and
/// both files are the same bytes.
fn same_bytes_as_dgl(part: &Partition, hetero: bool) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_graph(&d.join("ours.dgl"), &GraphSpec::of_partition(part, hetero)).unwrap();
    write_npy(&d.join("src.npy"), &Rows::Ids(&part.src)).unwrap();
    write_npy(&d.join("dst.npy"), &Rows::Ids(&part.dst)).unwrap();
    write_npy(&d.join("halo.npy"), &Rows::Ids(&part.halo)).unwrap();
    write_npy(&d.join("halo_types.npy"), &Rows::I16(&part.halo_types)).unwrap();
    let job = serde_json::json!({
        "num_inner": part.num_inner(),
        "node_start": part.node_start,
        "edge_start": part.edge_start,
        "hetero": hetero,
        "inner_counts": part.inner.iter().map(Vec::len).collect::<Vec<_>>(),
        "edge_counts": part.eids.iter().map(Vec::len).collect::<Vec<_>>(),
    });
    std::fs::write(d.join("job.json"), job.to_string()).unwrap();
    run_script(d);
    let (ours, mut theirs) = (read(&d.join("ours.dgl")), read(&d.join("dgl.dgl")));
    // DGL fills the header from a std::array<char, 4096> it never clears:
    // after its 32 bytes of fields the rest is whatever was on its stack.
    assert!(ours.len() > 4096 && theirs.len() > 4096);
    assert!(
        ours[32..4096].iter().all(|&b| b == 0),
        "our header's rest is zeros"
    );
    theirs[32..4096].fill(0);
    if let Some(at) = ours.iter().zip(&theirs).position(|(a, b)| a != b) {
        panic!(
            "graph.dgl differs from DGL's at byte {at} (ours {} bytes, DGL's {}): ours {:02x?}, DGL's {:02x?}",
            ours.len(),
            theirs.len(),
            &ours[at..(at + 16).min(ours.len())],
            &theirs[at..(at + 16).min(theirs.len())]
        );
    }
    assert_eq!(ours.len(), theirs.len(), "same bytes, different lengths");
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn run_script(dir: &Path) {
    let out = Command::new(python())
        .arg("-c")
        .arg(SCRIPT)
        .arg(dir)
        .output()
        .expect("start python");
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    println!("{so}");
    assert!(out.status.success(), "DGL's check failed:\n{so}\n{se}");
}

#[test]
fn homogeneous_parts_are_dgls_bytes() {
    same_bytes_as_dgl(&random_part(1, &[300], 120, &[2000]), false);
    same_bytes_as_dgl(&random_part(2, &[57], 0, &[400]), false);
}

#[test]
fn heterogeneous_parts_are_dgls_bytes() {
    same_bytes_as_dgl(&random_part(3, &[100, 40, 7], 90, &[500, 0, 300]), true);
    same_bytes_as_dgl(&random_part(4, &[10, 20], 5, &[30, 40, 50]), true);
}

#[test]
fn a_part_without_edges_is_dgls_bytes() {
    same_bytes_as_dgl(&random_part(5, &[12], 0, &[0]), false);
    same_bytes_as_dgl(&random_part(6, &[3, 4], 0, &[0, 0]), true);
}
