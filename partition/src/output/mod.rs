//! Writers of what DGL 2.1.0 loads, all native: per part `node_feat.dgl`,
//! `edge_feat.dgl` (and `orig_nids.dgl` / `orig_eids.dgl`) in DGL's
//! `save_tensors` format, `graph.dgl` in its `save_graphs` format, and the
//! partition JSON; [`files`] keeps half-written output from looking
//! complete.

pub mod files;
pub mod graph_dgl;
pub mod json;
pub mod tensors;

use std::path::Path;

use crate::model::InputGraph;
use crate::shuffle::Partition;
use crate::{Error, Result};
use graph_dgl::{write_graph, GraphSpec};
use tensors::{write_tensors, Rows};

/// Writes part `part`'s feature files (and original-id files when asked)
/// and its `graph.dgl` into `dir`.
pub fn write_part(g: &InputGraph, part: &Partition, dir: &Path, save_orig_ids: bool) -> Result<()> {
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
) -> Result<()> {
    write_part_rows(g, part, dir, save_orig_ids, true)
}

fn write_part_rows(
    g: &InputGraph,
    part: &Partition,
    dir: &Path,
    save_orig_ids: bool,
    owned: bool,
) -> Result<()> {
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
    let spec = GraphSpec::of_partition(part, !g.is_homogeneous());
    write_graph(&dir.join("graph.dgl"), &spec).map(|_| ())
}
