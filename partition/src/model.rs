//! The in-memory graph every stage shares: node and edge types with 64-bit
//! counts and ids, edges as per-type id pairs, features as raw row-major
//! tensors. Node ids inside an edge type are *per-type* ids (0..count of
//! that node type); the homogeneous ("global") id of a node is its type's
//! offset (types in order) plus its per-type id, as in DGL.

use std::collections::BTreeMap;

/// Element type of a tensor, with the codes DGL's NDArray serialisation
/// (dlpack) and numpy use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F16 | DType::I16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    /// dlpack (type code, bits): 0 int, 1 uint, 2 float, 6 bool. (The
    /// writer stores Bool as uint8, as DGL does: output/tensors.rs.)
    pub fn dlpack(self) -> (u8, u8) {
        match self {
            DType::I8 => (0, 8),
            DType::I16 => (0, 16),
            DType::I32 => (0, 32),
            DType::I64 => (0, 64),
            DType::U8 => (1, 8),
            DType::F16 => (2, 16),
            DType::F32 => (2, 32),
            DType::F64 => (2, 64),
            DType::Bool => (6, 8),
        }
    }

    /// The numpy `descr` of this type, little-endian.
    pub fn numpy_descr(self) -> &'static str {
        match self {
            DType::I8 => "|i1",
            DType::I16 => "<i2",
            DType::I32 => "<i4",
            DType::I64 => "<i8",
            DType::U8 => "|u1",
            DType::F16 => "<f2",
            DType::F32 => "<f4",
            DType::F64 => "<f8",
            DType::Bool => "|b1",
        }
    }
}

/// A dense row-major tensor. `shape[0]` is the number of rows (one per node
/// or edge); the rest is one row's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// Little-endian elements, `rows * row_bytes` bytes.
    pub data: Vec<u8>,
}

impl Tensor {
    pub fn rows(&self) -> u64 {
        self.shape.first().copied().unwrap_or(0)
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.shape.iter().skip(1).product::<u64>() as usize * self.dtype.size()
    }

    /// A new tensor of the given rows, in that order.
    pub fn gather(&self, rows: &[u64]) -> Tensor {
        let rb = self.row_bytes();
        let mut data = Vec::with_capacity(rows.len() * rb);
        for &r in rows {
            let at = r as usize * rb;
            data.extend_from_slice(&self.data[at..at + rb]);
        }
        let mut shape = self.shape.clone();
        if let Some(first) = shape.first_mut() {
            *first = rows.len() as u64;
        }
        Tensor {
            dtype: self.dtype,
            shape,
            data,
        }
    }
}

/// One node type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeType {
    pub name: String,
    pub count: u64,
    /// Node features, each with `count` rows.
    pub data: BTreeMap<String, Tensor>,
    /// Node weights for the partitioner (the text format's weight columns):
    /// I64, shape `[count, k]`.
    pub weights: Option<Tensor>,
}

/// One edge type (DGL's canonical `src:rel:dst`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EdgeType {
    /// Index into [`InputGraph::ntypes`].
    pub src_type: usize,
    pub rel: String,
    pub dst_type: usize,
    /// Per-type ids of the source nodes, one per edge, in input order (the
    /// edge's per-type id is its position).
    pub src: Vec<u64>,
    /// Per-type ids of the destination nodes.
    pub dst: Vec<u64>,
    /// Edge features, each with one row per edge.
    pub data: BTreeMap<String, Tensor>,
}

impl EdgeType {
    pub fn count(&self) -> u64 {
        self.src.len() as u64
    }
}

/// A whole input graph (or, in distributed mode, one rank's share of it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InputGraph {
    pub name: String,
    pub ntypes: Vec<NodeType>,
    pub etypes: Vec<EdgeType>,
}

impl InputGraph {
    /// DGL's canonical name of edge type `e`: `src:rel:dst`.
    pub fn canonical_etype(&self, e: usize) -> String {
        let t = &self.etypes[e];
        format!(
            "{}:{}:{}",
            self.ntypes[t.src_type].name, t.rel, self.ntypes[t.dst_type].name
        )
    }

    pub fn num_nodes(&self) -> u64 {
        self.ntypes.iter().map(|t| t.count).sum()
    }

    pub fn num_edges(&self) -> u64 {
        self.etypes.iter().map(EdgeType::count).sum()
    }

    /// Homogeneous id of each type's first node; one more entry at the end
    /// (the total).
    pub fn node_offsets(&self) -> Vec<u64> {
        prefix(self.ntypes.iter().map(|t| t.count))
    }

    /// Homogeneous id of each edge type's first edge, plus the total.
    pub fn edge_offsets(&self) -> Vec<u64> {
        prefix(self.etypes.iter().map(EdgeType::count))
    }

    /// Whether DGL would treat the graph as homogeneous (`_N`, `_N:_E:_N`).
    pub fn is_homogeneous(&self) -> bool {
        self.ntypes.len() == 1 && self.etypes.len() == 1
    }
}

/// 0 and the running sums of `counts` (each type's first id).
pub(crate) fn prefix(counts: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut out = vec![0];
    let mut sum = 0u64;
    for c in counts {
        sum += c;
        out.push(sum);
    }
    out
}
