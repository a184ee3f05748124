//! The seed's text format (DGL 0.8's xxx_nodes.txt / xxx_edges.txt with a
//! {"nid", "eid"} schema): homogeneous ids in the files, per-type ids in
//! the model, weights, attributes, shares, and errors naming file + line.

mod input_common;

use std::path::{Path, PathBuf};

use dgl_partition::input::{read, read_share, Source, TextSource};
use dgl_partition::model::DType;
use input_common::assert_error;
use serde_json::json;

struct Files {
    _dir: tempfile::TempDir,
    text: TextSource,
}

fn put(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// author: homogeneous ids 0..3 (two attributes), paper: 3..7 (one); two
/// weights each.
const NODES: &str = "\
0 1 0 0 0.5 1.5
0 1 0 1 2.5 3.5
0 1 0 2 4.5 5.5
1 0 1 0 7
1 0 1 1 8
1 0 1 2 9
1 0 1 3 10
";

/// writes (author -> paper), listed out of order by type edge id; cites.
const EDGES: &str = "\
2 6 1 0 0.25
0 3 0 0 0.75
4 5 0 1 1
5 3 1 1 2
";

const REMOVED: &str = "6 6 2 1 3\n";

fn files(schema: Option<serde_json::Value>, removed: bool) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let text = TextSource {
        nodes: put(d, "mag_nodes.txt", NODES),
        edges: put(d, "mag_edges.txt", EDGES),
        removed_edges: removed.then(|| put(d, "mag_removed_edges.txt", REMOVED)),
        schema: schema.map(|s| put(d, "mag.json", &s.to_string())),
        num_node_weights: 2,
        node_attr_dtype: DType::F32,
        edge_attr_dtype: DType::F64,
    };
    Files { _dir: dir, text }
}

fn schema() -> serde_json::Value {
    json!({"nid": {"paper": [3, 7], "author": [0, 3]}, "eid": {"writes": [0, 2], "paper:cites:paper": [2, 5]}})
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn f64s(b: &[u8]) -> Vec<f64> {
    b.chunks(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn i64s(b: &[u8]) -> Vec<i64> {
    b.chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn heterogeneous_with_schema_weights_attributes_and_removed_edges() {
    let f = files(Some(schema()), true);
    let g = read(&Source::Text(f.text.clone()), 2).unwrap();
    assert_eq!(g.name, "mag");
    let names: Vec<_> = g
        .ntypes
        .iter()
        .map(|t| (t.name.as_str(), t.count))
        .collect();
    assert_eq!(
        names,
        vec![("author", 3), ("paper", 4)],
        "types in order of their first id"
    );
    let a = &g.ntypes[0];
    assert_eq!(a.data["feat"].shape, vec![3, 2]);
    assert_eq!(
        f32s(&a.data["feat"].data),
        vec![0.5, 1.5, 2.5, 3.5, 4.5, 5.5]
    );
    let w = a.weights.as_ref().unwrap();
    assert_eq!((w.dtype, w.shape.clone()), (DType::I64, vec![3, 2]));
    assert_eq!(i64s(&w.data), vec![1, 0, 1, 0, 1, 0]);
    assert_eq!(
        f32s(&g.ntypes[1].data["feat"].data),
        vec![7.0, 8.0, 9.0, 10.0]
    );
    assert_eq!(
        i64s(&g.ntypes[1].weights.as_ref().unwrap().data),
        vec![0, 1, 0, 1, 0, 1, 0, 1]
    );
    assert_eq!(
        g.canonical_etype(0),
        "author:writes:paper",
        "ends inferred from the edges"
    );
    let writes = &g.etypes[0];
    assert_eq!(
        (writes.src.clone(), writes.dst.clone()),
        (vec![0, 2], vec![0, 3]),
        "per-type ids, by type edge id"
    );
    assert_eq!(f64s(&writes.data["feat"].data), vec![0.75, 0.25]);
    let cites = &g.etypes[1];
    assert_eq!(g.canonical_etype(1), "paper:cites:paper");
    assert_eq!(
        (cites.src.clone(), cites.dst.clone()),
        (vec![1, 2, 3], vec![2, 0, 3])
    );
    assert_eq!(f64s(&cites.data["feat"].data), vec![1.0, 2.0, 3.0]);
}

#[test]
fn without_schema_counts_come_from_the_files() {
    let f = files(None, true);
    let g = read(&Source::Text(f.text.clone()), 1).unwrap();
    let names: Vec<_> = g
        .ntypes
        .iter()
        .map(|t| (t.name.as_str(), t.count))
        .collect();
    assert_eq!(names, vec![("_N0", 3), ("_N1", 4)]);
    assert_eq!(g.canonical_etype(0), "_N0:_E0:_N1");
    assert_eq!(g.canonical_etype(1), "_N1:_E1:_N1");
    assert_eq!(g.etypes[1].count(), 3);
}

#[test]
fn homogeneous_text_graph() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let text = TextSource {
        nodes: put(d, "g_nodes.txt", "0 0\n0 1\n0 2\n"),
        edges: put(d, "g_edges.txt", "0 1 0 0\n1 2 1 0\n2 0 2 0\n"),
        removed_edges: None,
        schema: None,
        num_node_weights: 0,
        node_attr_dtype: DType::F32,
        edge_attr_dtype: DType::F32,
    };
    let g = read(&Source::Text(text), 1).unwrap();
    assert!(g.is_homogeneous());
    assert_eq!(g.canonical_etype(0), "_N:_E:_N");
    assert_eq!(
        (g.etypes[0].src.clone(), g.etypes[0].dst.clone()),
        (vec![0, 1, 2], vec![1, 2, 0])
    );
    assert!(g.ntypes[0].weights.is_none() && g.ntypes[0].data.is_empty());
}

#[test]
fn shares_split_each_type_evenly() {
    let f = files(Some(schema()), true);
    let whole = read(&Source::Text(f.text.clone()), 1).unwrap();
    let shares: Vec<_> = (0..2)
        .map(|r| read_share(&Source::Text(f.text.clone()), r, 2, 1).unwrap())
        .collect();
    assert_eq!(shares[1].node_first, vec![2, 2]);
    assert_eq!(shares[1].edge_first, vec![1, 2]);
    for e in 0..2 {
        let src: Vec<u64> = shares
            .iter()
            .flat_map(|s| s.graph.etypes[e].src.clone())
            .collect();
        assert_eq!(src, whole.etypes[e].src);
    }
    let feat: Vec<u8> = shares
        .iter()
        .flat_map(|s| s.graph.ntypes[1].data["feat"].data.clone())
        .collect();
    assert_eq!(feat, whole.ntypes[1].data["feat"].data);
    assert!(shares.iter().all(|s| s.graph.ntypes[1].count == 4));
}

fn with(nodes: &str, edges: &str, schema_v: Option<serde_json::Value>) -> Files {
    let f = files(schema_v, false);
    std::fs::write(&f.text.nodes, nodes).unwrap();
    std::fs::write(&f.text.edges, edges).unwrap();
    f
}

#[test]
fn errors_name_file_and_line() {
    let cases: Vec<(String, String, Option<serde_json::Value>, Vec<&str>)> = vec![
        (
            NODES.replace("1 0 1 1 8", "1 0 1 2 8"),
            EDGES.into(),
            Some(schema()),
            vec!["mag_nodes.txt", "line 5", "type node id 2; expected 1"],
        ),
        (
            NODES.replace("0 1 0 2 4.5", "1 1 0 2 4.5"),
            EDGES.into(),
            Some(schema()),
            vec!["mag_nodes.txt", "line 3", "node 2", "type 1"],
        ),
        (
            NODES.replace("1 0 1 3 10", "1 0 1 3 x"),
            EDGES.into(),
            Some(schema()),
            vec![
                "mag_nodes.txt",
                "line 7",
                "F32 attribute",
                "1 byte that is not a number",
            ],
        ),
        (
            NODES.replace("1 0 1 3 10", "1 0 1 3 10 11"),
            EDGES.into(),
            Some(schema()),
            vec!["mag_nodes.txt", "line 7", "2 attributes", "have 1"],
        ),
        (
            NODES.replace("1 0 1 3 10", "1 0"),
            EDGES.into(),
            Some(schema()),
            vec!["mag_nodes.txt", "line 7", "at least 4 columns", "found 2"],
        ),
        (
            NODES.into(),
            EDGES.replace("4 5 0 1 1", "4 9 0 1 1"),
            Some(schema()),
            vec!["mag_edges.txt", "line 3", "node id 9", "below 7"],
        ),
        (
            NODES.into(),
            EDGES.replace("4 5 0 1 1", "4 5 1 1 1"),
            Some(schema()),
            vec!["mag_edges.txt", "line 4", "type edge id 1", "twice"],
        ),
        (
            NODES.into(),
            EDGES.replace("4 5 0 1 1", "4 5 7 1 1"),
            Some(schema()),
            vec!["mag_edges.txt", "line 3", "type edge id 7", "below 3"],
        ),
        (
            NODES.into(),
            EDGES.replace("4 5 0 1 1", "4 0 0 1 1"),
            Some(schema()),
            vec![
                "mag_edges.txt",
                "line 3",
                "paper:cites:paper",
                "joins paper -> author",
            ],
        ),
        (
            NODES.into(),
            EDGES.replace("4 5 0 1 1", "4 5 0 2 1"),
            Some(schema()),
            vec!["mag_edges.txt", "line 3", "edge type 2", "lists 2 types"],
        ),
        (
            NODES.into(),
            EDGES.into(),
            Some(schema()),
            vec![
                "mag.json",
                "eid.paper:cites:paper",
                "type edge id 2 is in no edges file",
            ],
        ),
        (
            NODES.into(),
            EDGES.into(),
            Some(json!({"nid": {"author": [0, 3], "paper": [4, 7]}, "eid": {}})),
            vec!["mag.json", "nid.paper", "starts at 4; expected 3"],
        ),
        (
            NODES.into(),
            EDGES.into(),
            Some(
                json!({"nid": {"author": [0, 3], "paper": [3, 8]}, "eid": {"writes": [0, 2], "paper:cites:paper": [2, 4]}}),
            ),
            vec!["mag_nodes.txt", "hold 8 nodes", "7 node lines"],
        ),
        (
            NODES.into(),
            EDGES.into(),
            Some(
                json!({"nid": {"author": [0, 3], "paper": [3, 7]}, "eid": {"writes": [0, 2], "paper:cites:venue": [2, 4]}}),
            ),
            vec!["mag.json", "eid.paper:cites:venue", "node type"],
        ),
        (
            NODES.into(),
            EDGES.into(),
            Some(json!({"nid": {"author": [0, 3], "paper": [3, 7]}})),
            vec!["mag.json", "eid", "missing"],
        ),
    ];
    for (nodes, edges, schema_v, pieces) in cases {
        let f = with(&nodes, &edges, schema_v);
        assert_error(read(&Source::Text(f.text.clone()), 1), &pieces);
    }
}
