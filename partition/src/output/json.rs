//! The partition JSON `<graph>.json` that DGL 2.1.0's `load_partition_book`
//! reads (python/dgl/distributed/partition.py): keys and their order as
//! `partition_graph` writes them; `node_map` / `edge_map` as range lists
//! `[[start, end], ...]` per part, part-major then type order in the shuffled
//! id space; `etypes` keyed by canonical `src:rel:dst`.

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::model::InputGraph;
use crate::shuffle::IdMaps;

/// A list of (key, value) serialised as a JSON object in list order.
struct Ordered<'a, V>(&'a [(String, V)]);

impl<V: Serialize> Serialize for Ordered<'_, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// What the JSON says about the partitioning.
pub struct PartitionJson<'a> {
    pub graph_name: &'a str,
    pub part_method: &'a str,
    pub graph: &'a InputGraph,
    pub ids: &'a IdMaps,
}

#[derive(serde::Serialize)]
struct PartFiles {
    node_feats: String,
    edge_feats: String,
    part_graph: String,
}

type Ranges = Vec<[u64; 2]>;

/// The JSON document, fields in `partition_graph`'s order.
#[derive(serde::Serialize)]
struct Doc<'a> {
    graph_name: &'a str,
    num_nodes: u64,
    num_edges: u64,
    part_method: &'a str,
    num_parts: u32,
    halo_hops: u32,
    node_map: Ordered<'a, Ranges>,
    edge_map: Ordered<'a, Ranges>,
    ntypes: Ordered<'a, usize>,
    etypes: Ordered<'a, usize>,
    #[serde(flatten)]
    parts: Ordered<'a, PartFiles>,
}

/// The folder of part `p`, relative to the JSON's folder.
pub fn part_dir(p: u32) -> String {
    format!("part{p}")
}

impl PartitionJson<'_> {
    /// The JSON text.
    pub fn render(&self) -> String {
        let (g, ids) = (self.graph, self.ids);
        let ranges = |m: &[(u64, u64)]| m.iter().map(|&(s, e)| [s, e]).collect::<Ranges>();
        let etype_names: Vec<String> = (0..g.etypes.len()).map(|e| g.canonical_etype(e)).collect();
        let node_map: Vec<(String, Ranges)> = g
            .ntypes
            .iter()
            .zip(&ids.node_map)
            .map(|(t, m)| (t.name.clone(), ranges(m)))
            .collect();
        let edge_map: Vec<(String, Ranges)> = etype_names
            .iter()
            .zip(&ids.edge_map)
            .map(|(n, m)| (n.clone(), ranges(m)))
            .collect();
        let ntypes: Vec<(String, usize)> = g
            .ntypes
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        let etypes: Vec<(String, usize)> = etype_names.iter().cloned().zip(0..).collect();
        let parts: Vec<(String, PartFiles)> = (0..ids.num_parts)
            .map(|p| {
                let d = part_dir(p);
                let files = PartFiles {
                    node_feats: format!("{d}/node_feat.dgl"),
                    edge_feats: format!("{d}/edge_feat.dgl"),
                    part_graph: format!("{d}/graph.dgl"),
                };
                (format!("part-{p}"), files)
            })
            .collect();
        let doc = Doc {
            graph_name: self.graph_name,
            // From the id maps: a rank of the distributed mode holds only
            // its own edges, but every rank's maps cover the whole graph.
            num_nodes: ids.part_nodes.last().copied().unwrap_or(0),
            num_edges: ids.part_edges.last().copied().unwrap_or(0),
            part_method: self.part_method,
            num_parts: ids.num_parts,
            halo_hops: 1,
            node_map: Ordered(&node_map),
            edge_map: Ordered(&edge_map),
            ntypes: Ordered(&ntypes),
            etypes: Ordered(&etypes),
            parts: Ordered(&parts),
        };
        let mut out = serde_json::to_string_pretty(&doc).expect("plain JSON values");
        out.push('\n');
        out
    }
}
