//! Writes an [`InputGraph`] in DGL's chunked format, laid out as DGL's
//! `tools/chunk_graph.py` does (`edge_index/<etype><k>.txt`,
//! `node_data/<ntype>/<feat>-<k>.npy`, `edge_data/<etype>/<feat>-<k>.npy`),
//! with paths relative to metadata.json and both the `*_per_chunk` and the
//! `*_per_type` counts. Node weights have no place in the format and are
//! not written.

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::{json, Map, Value};

use super::{npy, parquet, split_even, EdgeFormat};
use crate::model::{InputGraph, Tensor};
use crate::{Error, Result};

/// Writes `graph` under `dir` in `chunks` chunks per type; returns the path
/// of metadata.json.
pub fn write_chunked(
    graph: &InputGraph,
    dir: &Path,
    chunks: usize,
    edge_format: EdgeFormat,
) -> Result<PathBuf> {
    if chunks == 0 {
        return Err(Error::Config(
            "write_chunked needs at least one chunk".into(),
        ));
    }
    // Type and feature names become file names below `dir`.
    crate::names::check_graph(graph)?;
    let mkdir = |p: &Path| std::fs::create_dir_all(p).map_err(|e| Error::io(p, e));
    mkdir(&dir.join("edge_index"))?;
    let sizes = |n: u64| -> Vec<u64> {
        (0..chunks as u32)
            .map(|k| split_even(n, k, chunks as u32))
            .map(|r| r.end - r.start)
            .collect()
    };
    let mut node_data = Map::new();
    for t in &graph.ntypes {
        let feats = write_features(
            dir,
            &format!("node_data/{}", t.name),
            &t.data,
            &sizes(t.count),
        )?;
        node_data.insert(t.name.clone(), feats);
    }
    let (mut edges, mut edge_data) = (Map::new(), Map::new());
    for e in 0..graph.etypes.len() {
        let name = graph.canonical_etype(e);
        let sizes = sizes(graph.etypes[e].count());
        edges.insert(
            name.clone(),
            write_edges(graph, e, dir, &sizes, edge_format)?,
        );
        let feats = write_features(
            dir,
            &format!("edge_data/{name}"),
            &graph.etypes[e].data,
            &sizes,
        )?;
        edge_data.insert(name, feats);
    }
    let metadata = json!({
        "graph_name": graph.name,
        "node_type": graph.ntypes.iter().map(|t| &t.name).collect::<Vec<_>>(),
        "num_nodes_per_chunk": graph.ntypes.iter().map(|t| sizes(t.count)).collect::<Vec<_>>(),
        "num_nodes_per_type": graph.ntypes.iter().map(|t| t.count).collect::<Vec<_>>(),
        "edge_type": (0..graph.etypes.len()).map(|e| graph.canonical_etype(e)).collect::<Vec<_>>(),
        "num_edges_per_chunk": graph.etypes.iter().map(|t| sizes(t.count())).collect::<Vec<_>>(),
        "num_edges_per_type": graph.etypes.iter().map(|t| t.count()).collect::<Vec<_>>(),
        "edges": edges,
        "node_data": node_data,
        "edge_data": edge_data,
    });
    let path = dir.join("metadata.json");
    let text = serde_json::to_vec_pretty(&metadata).map_err(|e| Error::Stage {
        stage: "input",
        message: format!("encoding metadata.json: {e}"),
    })?;
    std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
    Ok(path)
}

/// Writes one edge type's chunks; returns its `edges` entry.
fn write_edges(
    g: &InputGraph,
    e: usize,
    dir: &Path,
    sizes: &[u64],
    fmt: EdgeFormat,
) -> Result<Value> {
    let (t, name) = (&g.etypes[e], g.canonical_etype(e));
    let ext = match fmt {
        EdgeFormat::Csv => "txt",
        EdgeFormat::Parquet => "parquet",
        EdgeFormat::Npy => "npy",
    };
    let files: Vec<String> = (0..sizes.len())
        .map(|k| format!("edge_index/{name}{k}.{ext}"))
        .collect();
    let starts = offsets(sizes);
    files.par_iter().enumerate().try_for_each(|(k, file)| {
        let (lo, hi) = (starts[k] as usize, starts[k + 1] as usize);
        let (src, dst) = (&t.src[lo..hi], &t.dst[lo..hi]);
        let path = dir.join(file);
        match fmt {
            EdgeFormat::Csv => {
                std::fs::write(&path, csv_bytes(src, dst)).map_err(|e| Error::io(&path, e))
            }
            EdgeFormat::Parquet => parquet::write_edges(&path, src, dst),
            EdgeFormat::Npy => {
                let data: Vec<u8> = src
                    .iter()
                    .zip(dst)
                    .flat_map(|(&s, &d)| [s, d])
                    .flat_map(u64::to_le_bytes)
                    .collect();
                npy::write(&path, "<i8", &[src.len() as u64, 2], &data)
            }
        }
    })?;
    let format = match fmt {
        EdgeFormat::Csv => json!({"name": "csv", "delimiter": " "}),
        EdgeFormat::Parquet => json!({"name": "parquet"}),
        EdgeFormat::Npy => json!({"name": "numpy"}),
    };
    Ok(json!({"format": format, "data": files}))
}

fn offsets(sizes: &[u64]) -> Vec<u64> {
    let mut out = vec![0];
    for s in sizes {
        out.push(out[out.len() - 1] + s);
    }
    out
}

fn csv_bytes(src: &[u64], dst: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len() * 16);
    for (&s, &d) in src.iter().zip(dst) {
        push_decimal(&mut out, s);
        out.push(b' ');
        push_decimal(&mut out, d);
        out.push(b'\n');
    }
    out
}

fn push_decimal(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Writes every feature of one type in chunks of `sizes` rows; returns the
/// type's `node_data` / `edge_data` entry.
fn write_features(
    dir: &Path,
    folder: &str,
    data: &std::collections::BTreeMap<String, Tensor>,
    sizes: &[u64],
) -> Result<Value> {
    let mut out = Map::new();
    if !data.is_empty() {
        let p = dir.join(folder);
        std::fs::create_dir_all(&p).map_err(|e| Error::io(&p, e))?;
    }
    let starts = offsets(sizes);
    for (name, t) in data {
        if t.rows() != sizes.iter().sum::<u64>() || t.shape.is_empty() {
            return Err(Error::Config(format!(
                "{folder}/{name} has shape {:?}; expected {} rows",
                t.shape,
                sizes.iter().sum::<u64>()
            )));
        }
        let files: Vec<String> = (0..sizes.len())
            .map(|k| format!("{folder}/{name}-{k}.npy"))
            .collect();
        files.par_iter().enumerate().try_for_each(|(k, file)| {
            let rb = t.row_bytes();
            let mut shape = t.shape.clone();
            shape[0] = sizes[k];
            let bytes = &t.data[starts[k] as usize * rb..starts[k + 1] as usize * rb];
            npy::write(&dir.join(file), t.dtype.numpy_descr(), &shape, bytes)
        })?;
        out.insert(
            name.clone(),
            json!({"format": {"name": "numpy"}, "data": files}),
        );
    }
    Ok(Value::Object(out))
}
