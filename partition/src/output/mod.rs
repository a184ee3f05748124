//! Writers of what DGL 2.1.0 loads: per part `node_feat.dgl`,
//! `edge_feat.dgl` (and `orig_nids.dgl` / `orig_eids.dgl`) natively in
//! DGL's `save_tensors` format, the arrays `graph.dgl` is built from, and
//! the partition JSON.

pub mod graph_py;
pub mod json;
pub mod tensors;

use std::path::Path;

use crate::model::InputGraph;
use crate::shuffle::Partition;
use crate::{Error, Result};
use graph_py::GraphJob;
use tensors::{write_npy, write_tensors, Rows};

/// The folder (inside a part's folder) of the arrays `graph.dgl` is built
/// from; removed once the graph is saved.
pub const ARRAYS_DIR: &str = "graph_arrays";

/// Writes part `part`'s feature files (and original-id files when asked)
/// and its graph arrays into `dir`; returns the Python job for its
/// `graph.dgl`.
pub fn write_part(
    g: &InputGraph,
    part: &Partition,
    dir: &Path,
    save_orig_ids: bool,
) -> Result<GraphJob> {
    write_part_rows(g, part, dir, save_orig_ids, false)
}

/// [`write_part`] for a graph whose feature tensors hold exactly the
/// part's rows, in the part's order (inner nodes by type, owned edges by
/// type, each ascending by original id): what a rank of the distributed
/// mode receives.
pub fn write_owned_part(
    g: &InputGraph,
    part: &Partition,
    dir: &Path,
    save_orig_ids: bool,
) -> Result<GraphJob> {
    write_part_rows(g, part, dir, save_orig_ids, true)
}

fn write_part_rows(
    g: &InputGraph,
    part: &Partition,
    dir: &Path,
    save_orig_ids: bool,
    owned: bool,
) -> Result<GraphJob> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let rows = |tensor, rows| {
        if owned {
            Rows::All(tensor)
        } else {
            Rows::Gather { tensor, rows }
        }
    };
    let etype_names: Vec<String> = (0..g.etypes.len()).map(|e| g.canonical_etype(e)).collect();
    let mut node_feats = Vec::new();
    for (t, nt) in g.ntypes.iter().enumerate() {
        for (name, tensor) in &nt.data {
            node_feats.push((format!("{}/{name}", nt.name), rows(tensor, &part.inner[t])));
        }
    }
    let mut edge_feats = Vec::new();
    for (e, et) in g.etypes.iter().enumerate() {
        for (name, tensor) in &et.data {
            edge_feats.push((
                format!("{}/{name}", etype_names[e]),
                rows(tensor, &part.eids[e]),
            ));
        }
    }
    write_tensors(&dir.join("node_feat.dgl"), &node_feats)?;
    write_tensors(&dir.join("edge_feat.dgl"), &edge_feats)?;
    if save_orig_ids {
        let nids: Vec<(String, Rows)> = g
            .ntypes
            .iter()
            .zip(&part.inner)
            .map(|(t, v)| (t.name.clone(), Rows::Ids(v)))
            .collect();
        let eids: Vec<(String, Rows)> = etype_names
            .iter()
            .zip(&part.eids)
            .map(|(n, v)| (n.clone(), Rows::Ids(v)))
            .collect();
        write_tensors(&dir.join("orig_nids.dgl"), &nids)?;
        write_tensors(&dir.join("orig_eids.dgl"), &eids)?;
    }
    write_graph_arrays(g, part, dir)
}

/// The arrays of the part-local graph as `.npy` files, and the job that
/// turns them into `graph.dgl`.
fn write_graph_arrays(g: &InputGraph, part: &Partition, dir: &Path) -> Result<GraphJob> {
    let arrays = dir.join(ARRAYS_DIR);
    std::fs::create_dir_all(&arrays).map_err(|e| Error::io(&arrays, e))?;
    let hetero = !g.is_homogeneous();
    write_npy(&arrays.join("src.npy"), &Rows::Ids(&part.src))?;
    write_npy(&arrays.join("dst.npy"), &Rows::Ids(&part.dst))?;
    write_npy(&arrays.join("halo_nid.npy"), &Rows::Ids(&part.halo))?;
    if hetero {
        write_npy(&arrays.join("halo_ntype.npy"), &Rows::I16(&part.halo_types))?;
    }
    let job = GraphJob {
        part: part.part,
        arrays,
        out: dir.join("graph.dgl"),
        num_inner: part.num_inner(),
        node_start: part.node_start,
        edge_start: part.edge_start,
        hetero,
        inner_ntype_counts: part.inner.iter().map(|v| v.len() as u64).collect(),
        etype_counts: part.eids.iter().map(|v| v.len() as u64).collect(),
    };
    Ok(job)
}
