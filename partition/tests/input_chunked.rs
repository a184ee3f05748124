//! DGL's chunked format: round trips through write_chunked for every edge
//! format, shares whose union is the whole graph, both count keys, and
//! every kind of input error.

mod input_common;

use std::path::{Path, PathBuf};

use dgl_partition::input::{read, read_share, write_chunked, EdgeFormat, Source};
use dgl_partition::model::InputGraph;
use input_common::*;
use serde_json::json;

const FORMATS: [EdgeFormat; 3] = [EdgeFormat::Csv, EdgeFormat::Parquet, EdgeFormat::Npy];

fn src(meta: &Path) -> Source {
    Source::Chunked {
        metadata: meta.to_path_buf(),
    }
}

fn write(g: &InputGraph, dir: &Path, chunks: usize, f: EdgeFormat) -> PathBuf {
    write_chunked(g, dir, chunks, f).unwrap()
}

#[test]
fn round_trip_every_edge_format_homogeneous_and_heterogeneous() {
    for g in [homogeneous(), heterogeneous()] {
        for f in FORMATS {
            for chunks in [1, 3] {
                let dir = tempfile::tempdir().unwrap();
                let meta = write(&g, dir.path(), chunks, f);
                let back = read(&src(&meta), 2).unwrap();
                assert_eq!(back, g, "{} {f:?} {chunks} chunks", g.name);
            }
        }
    }
}

/// Concatenates shares in rank order and checks first ids and global counts.
fn union_of_shares(meta: &Path, world: u32) -> InputGraph {
    let mut all: Option<InputGraph> = None;
    for rank in 0..world {
        let s = read_share(&src(meta), rank, world, 2).unwrap();
        let Some(acc) = all.as_mut() else {
            assert!(s.node_first.iter().chain(&s.edge_first).all(|&f| f == 0));
            all = Some(s.graph);
            continue;
        };
        for (t, nt) in s.graph.ntypes.into_iter().enumerate() {
            assert_eq!(
                nt.count, acc.ntypes[t].count,
                "global node counts in every share"
            );
            let rows_before = acc.ntypes[t].data.values().next().map(|x| x.rows());
            if let Some(rows) = rows_before {
                assert_eq!(s.node_first[t], rows, "node_first of rank {rank}");
            }
            for (k, x) in nt.data {
                let a = acc.ntypes[t].data.get_mut(&k).unwrap();
                a.data.extend_from_slice(&x.data);
                a.shape[0] += x.shape[0];
            }
        }
        for (e, et) in s.graph.etypes.into_iter().enumerate() {
            assert_eq!(
                s.edge_first[e],
                acc.etypes[e].count(),
                "edge_first of rank {rank}"
            );
            let a = &mut acc.etypes[e];
            a.src.extend_from_slice(&et.src);
            a.dst.extend_from_slice(&et.dst);
            for (k, x) in et.data {
                let d = a.data.get_mut(&k).unwrap();
                d.data.extend_from_slice(&x.data);
                d.shape[0] += x.shape[0];
            }
        }
    }
    all.unwrap()
}

#[test]
fn shares_over_several_ranks_make_up_the_whole_graph() {
    for f in FORMATS {
        let g = heterogeneous();
        let dir = tempfile::tempdir().unwrap();
        let meta = write(&g, dir.path(), 5, f);
        for world in [1, 2, 3, 5, 7] {
            assert_eq!(union_of_shares(&meta, world), g, "{f:?} world {world}");
        }
        // A share of 2 of 5 chunks: rank 1 of 2 takes chunks 3..5.
        let s = read_share(&src(&meta), 1, 2, 1).unwrap();
        assert_eq!(s.edge_first[1], 90 / 5 * 3);
        assert_eq!(s.graph.etypes[1].count(), 90 / 5 * 2);
        assert_eq!(s.node_first[0], 15);
        assert_eq!(s.graph.ntypes[0].data["feat"].rows(), 10);
    }
}

#[test]
fn either_count_key_alone_is_enough() {
    let g = heterogeneous();
    for (drop_a, drop_b) in [
        ("num_nodes_per_chunk", "num_edges_per_chunk"),
        ("num_nodes_per_type", "num_edges_per_type"),
    ] {
        for f in FORMATS {
            let dir = tempfile::tempdir().unwrap();
            let meta = write(&g, dir.path(), 3, f);
            edit_metadata(&meta, |v| {
                let o = v.as_object_mut().unwrap();
                o.remove(drop_a);
                o.remove(drop_b);
            });
            assert_eq!(read(&src(&meta), 2).unwrap(), g, "without {drop_a}");
            for world in [2, 4] {
                assert_eq!(
                    union_of_shares(&meta, world),
                    g,
                    "without {drop_a}, world {world}"
                );
            }
        }
    }
}

#[test]
fn feature_files_may_be_chunked_apart_from_the_nodes() {
    // DGL's test utilities chunk node data separately (num_chunks_node_data).
    let g = heterogeneous();
    let dir = tempfile::tempdir().unwrap();
    let meta = write(&g, dir.path(), 3, EdgeFormat::Csv);
    let other = dir.path().join("other");
    let meta2 = write(&g, &other, 2, EdgeFormat::Csv);
    let feat2 = load_json(&meta2)["node_data"]["paper"]["emb"].clone();
    let files: Vec<String> = feat2["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| other.join(p.as_str().unwrap()).display().to_string())
        .collect();
    edit_metadata(&meta, |v| {
        v["node_data"]["paper"]["emb"]["data"] = json!(files)
    });
    assert_eq!(read(&src(&meta), 2).unwrap(), g);
    assert_eq!(union_of_shares(&meta, 3), g);
}

/// Absolute paths inside the folder (DGL's chunk_graph.py writes them) are
/// read; hostile paths are tested in hostile_input.rs.
#[test]
fn relative_and_absolute_paths() {
    let g = homogeneous();
    let dir = tempfile::tempdir().unwrap();
    let meta = write(&g, dir.path(), 2, EdgeFormat::Csv);
    let abs =
        |p: &serde_json::Value| json!(dir.path().join(p.as_str().unwrap()).display().to_string());
    edit_metadata(&meta, |v| {
        let files: Vec<_> = v["edges"]["_N:_E:_N"]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(abs)
            .collect();
        v["edges"]["_N:_E:_N"]["data"] = json!(files);
    });
    assert_eq!(read(&src(&meta), 1).unwrap(), g);
}

#[test]
fn csv_delimiter_from_the_format() {
    let g = homogeneous();
    let dir = tempfile::tempdir().unwrap();
    let meta = write(&g, dir.path(), 2, EdgeFormat::Csv);
    let v = load_json(&meta);
    for p in v["edges"]["_N:_E:_N"]["data"].as_array().unwrap() {
        let path = dir.path().join(p.as_str().unwrap());
        let text = std::fs::read_to_string(&path).unwrap().replace(' ', ",");
        std::fs::write(&path, text).unwrap();
    }
    assert_error(
        read(&src(&meta), 1),
        &["_N:_E:_N0.txt", "line 1", "that are not a number"],
    );
    edit_metadata(&meta, |v| {
        v["edges"]["_N:_E:_N"]["format"]["delimiter"] = json!(",")
    });
    assert_eq!(read(&src(&meta), 1).unwrap(), g);
}

fn edge_file(meta: &Path, etype: &str, k: usize) -> PathBuf {
    let v = load_json(meta);
    meta.parent()
        .unwrap()
        .join(v["edges"][etype]["data"][k].as_str().unwrap())
}

#[test]
fn missing_chunk_file_is_named() {
    for f in FORMATS {
        let dir = tempfile::tempdir().unwrap();
        let meta = write(&heterogeneous(), dir.path(), 3, f);
        let file = edge_file(&meta, "paper:cites:paper", 1);
        std::fs::remove_file(&file).unwrap();
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        assert_error(
            read(&src(&meta), 2),
            &[&name, "missing", "chunk 1 of edges.paper:cites:paper"],
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 3, EdgeFormat::Csv);
    std::fs::remove_file(dir.path().join("node_data/paper/year-2.npy")).unwrap();
    assert_error(
        read(&src(&meta), 2),
        &["year-2.npy", "missing", "node_data.paper.year"],
    );
}

#[test]
fn wrong_column_counts_are_named_with_line_or_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 2, EdgeFormat::Csv);
    let file = edge_file(&meta, "author:writes:paper", 1);
    let mut text = std::fs::read_to_string(&file).unwrap();
    text = text.replacen('\n', " 9\n", 2);
    std::fs::write(&file, text).unwrap();
    assert_error(
        read(&src(&meta), 2),
        &[
            "author:writes:paper1.txt",
            "line 1",
            "expected 2 columns",
            "found 3",
        ],
    );

    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 2, EdgeFormat::Npy);
    let file = edge_file(&meta, "paper:in:field", 0);
    write_npy_i64(&file, &[16, 3], &vec![0; 48]);
    assert_error(
        read(&src(&meta), 2),
        &["paper:in:field0.npy", "chunk 0", "expected shape [m, 2]"],
    );

    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 2, EdgeFormat::Parquet);
    let file = edge_file(&meta, "paper:in:field", 0);
    write_parquet_columns(&file, &[vec![0; 16], vec![0; 16], vec![0; 16]]);
    assert_error(
        read(&src(&meta), 2),
        &[
            "paper:in:field0.parquet",
            "chunk 0",
            "expected 2 columns",
            "found 3",
        ],
    );
}

/// A little-endian int64 `.npy` (written by hand, independent of the crate).
fn write_npy_i64(path: &Path, shape: &[u64], values: &[i64]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut header = format!(
        "{{'descr': '<i8', 'fortran_order': False, 'shape': ({},), }}",
        dims.join(", ")
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(path, out).unwrap();
}

/// A parquet file of INT64 columns, nullable as pyarrow writes them.
fn write_parquet_columns(path: &Path, cols: &[Vec<i64>]) {
    use parquet::data_type::Int64Type;
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use std::sync::Arc;
    let fields: String = (0..cols.len())
        .map(|c| format!("OPTIONAL INT64 c{c}; "))
        .collect();
    let schema =
        parquet::schema::parser::parse_message_type(&format!("message t {{ {fields}}}")).unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = SerializedFileWriter::new(
        file,
        Arc::new(schema),
        Arc::new(WriterProperties::builder().build()),
    )
    .unwrap();
    let mut rg = w.next_row_group().unwrap();
    for c in cols {
        let mut col = rg.next_column().unwrap().unwrap();
        let defs = vec![1i16; c.len()];
        col.typed::<Int64Type>()
            .write_batch(c, Some(&defs), None)
            .unwrap();
        col.close().unwrap();
    }
    rg.close().unwrap();
    w.close().unwrap();
}

#[test]
fn ids_out_of_range_name_line_or_row() {
    // paper:in:field: destination ids must be below 3 (field has 3 nodes).
    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 2, EdgeFormat::Csv);
    let file = edge_file(&meta, "paper:in:field", 1);
    let mut lines: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    lines[4] = "2 3".into();
    std::fs::write(&file, lines.join("\n")).unwrap();
    assert_error(
        read(&src(&meta), 2),
        &[
            "paper:in:field1.txt",
            "line 5",
            "destination id 3",
            "\"field\"",
            "below 3",
        ],
    );

    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 2, EdgeFormat::Npy);
    let file = edge_file(&meta, "paper:in:field", 1);
    let mut v = vec![0i64; 30];
    v[14] = 31; // row 7's source: paper has 31 nodes
    write_npy_i64(&file, &[15, 2], &v);
    assert_error(
        read(&src(&meta), 2),
        &[
            "paper:in:field1.npy",
            "row 7 of chunk 1",
            "source id 31",
            "\"paper\"",
        ],
    );

    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 2, EdgeFormat::Parquet);
    let file = edge_file(&meta, "paper:in:field", 1);
    let mut dst = vec![0i64; 15];
    dst[9] = 7;
    write_parquet_columns(&file, &[vec![1; 15], dst]);
    assert_error(
        read(&src(&meta), 2),
        &[
            "paper:in:field1.parquet",
            "row 9 of chunk 1",
            "destination id 7",
        ],
    );
}

#[test]
fn metadata_counts_that_disagree_with_the_files() {
    for f in FORMATS {
        let dir = tempfile::tempdir().unwrap();
        let meta = write(&heterogeneous(), dir.path(), 3, f);
        edit_metadata(&meta, |v| {
            v["num_edges_per_chunk"][1][2] = json!(31);
            v["num_edges_per_type"][1] = json!(91);
        });
        assert_error(
            read(&src(&meta), 2),
            &[
                "paper:cites:paper2",
                "num_edges_per_chunk[1][2]",
                "holds 30 edges",
                "says 31",
            ],
        );
        edit_metadata(&meta, |v| {
            v.as_object_mut().unwrap().remove("num_edges_per_chunk");
        });
        assert_error(
            read(&src(&meta), 2),
            &[
                "metadata.json",
                "num_edges_per_type[1]",
                "91 edges",
                "hold 90",
            ],
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 3, EdgeFormat::Csv);
    edit_metadata(&meta, |v| v["num_nodes_per_type"][0] = json!(26));
    assert_error(
        read(&src(&meta), 2),
        &[
            "metadata.json",
            "num_nodes_per_type[0]",
            "26",
            "25",
            "must agree",
        ],
    );
    edit_metadata(&meta, |v| v["num_nodes_per_type"] = json!([25, 31]));
    assert_error(
        read(&src(&meta), 2),
        &["metadata.json", "num_nodes_per_type", "expected 3 entries"],
    );
    edit_metadata(&meta, |v| {
        let o = v.as_object_mut().unwrap();
        o.remove("num_nodes_per_type");
        o.remove("num_nodes_per_chunk");
    });
    assert_error(
        read(&src(&meta), 2),
        &["metadata.json", "num_nodes_per_chunk or num_nodes_per_type"],
    );
}

#[test]
fn feature_rows_that_disagree_with_the_type() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 2, EdgeFormat::Csv);
    edit_metadata(&meta, |v| {
        v["num_nodes_per_chunk"][0] = json!([13, 13]);
        v["num_nodes_per_type"][0] = json!(26);
    });
    assert_error(
        read(&src(&meta), 2),
        &[
            "metadata.json",
            "node_data.author.feat",
            "hold 25 rows",
            "has 26",
        ],
    );

    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 2, EdgeFormat::Csv);
    let v = load_json(&meta);
    let w1 = dir.path().join(
        v["edge_data"]["author:writes:paper"]["w"]["data"][1]
            .as_str()
            .unwrap(),
    );
    write_npy_i64(&w1, &[35, 2], &vec![0; 70]);
    assert_error(
        read(&src(&meta), 2),
        &["w-1.npy", "chunk 1", "\"<i8\"", "expected the same dtype"],
    );
}

#[test]
fn unknown_dtype_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 2, EdgeFormat::Csv);
    let file = dir.path().join("node_data/author/feat-0.npy");
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.windows(3).position(|w| w == b"<f4").unwrap();
    bytes[at + 1] = b'u';
    bytes[at + 2] = b'4';
    std::fs::write(&file, bytes).unwrap();
    assert_error(
        read(&src(&meta), 2),
        &["feat-0.npy", "unknown dtype", "\"<u4\""],
    );

    edit_metadata(&meta, |v| {
        v["node_data"]["author"]["feat"]["format"]["name"] = json!("hdf5")
    });
    assert_error(
        read(&src(&meta), 2),
        &[
            "metadata.json",
            "node_data.author.feat.format",
            "unknown format \"hdf5\"",
        ],
    );
}

#[test]
fn edge_type_keys_must_be_canonical_and_known() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write(&heterogeneous(), dir.path(), 2, EdgeFormat::Csv);
    let original = load_json(&meta);
    edit_metadata(&meta, |v| v["edge_type"][1] = json!("cites"));
    assert_error(
        read(&src(&meta), 2),
        &[
            "metadata.json",
            "edge_type[1]",
            "\"cites\" is not of the form src:rel:dst",
        ],
    );
    save_json(&meta, &original);
    edit_metadata(&meta, |v| v["edge_type"][2] = json!("paper:in:venue"));
    assert_error(
        read(&src(&meta), 2),
        &["metadata.json", "edge_type[2]", "node type \"venue\""],
    );
    save_json(&meta, &original);
    edit_metadata(&meta, |v| {
        let e = v["edges"]["paper:cites:paper"].clone();
        v["edges"]["paper:cites:book"] = e;
    });
    assert_error(
        read(&src(&meta), 2),
        &[
            "metadata.json",
            "edges.paper:cites:book",
            "edge_type does not list",
        ],
    );
    save_json(&meta, &original);
    edit_metadata(&meta, |v| {
        let d = v["edge_data"]["author:writes:paper"].clone();
        v["edge_data"] = json!({ "writes": d });
    });
    assert_eq!(
        read(&src(&meta), 2).unwrap(),
        heterogeneous(),
        "a unique relation name keys edge_data"
    );
    edit_metadata(&meta, |v| v["edge_data"] = json!({ "reads": {} }));
    assert_error(
        read(&src(&meta), 2),
        &["metadata.json", "edge_data.reads", "unknown type"],
    );
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write(&homogeneous(), dir.path(), 2, EdgeFormat::Csv);
    assert_error(read_share(&src(&meta), 2, 2, 1), &["rank 2", "world of 2"]);
    assert_error(read(&src(&dir.path().join("nope.json")), 1), &["nope.json"]);
    std::fs::write(&meta, "{ not json").unwrap();
    assert_error(
        read(&src(&meta), 1),
        &["metadata.json", "line 1", "not valid JSON"],
    );
}
