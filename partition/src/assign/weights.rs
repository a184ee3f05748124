//! The balance constraints (METIS vertex weights), built as DGL 2.1.0 builds
//! them: `partition_graph`'s `get_homogeneous` gives every node a balance
//! class (its node type; with balanced training nodes, per node type the
//! mask's value), and `metis_partition_assignment` makes one 0/1 weight per
//! class plus, with `balance_edges`, the in-degree per class (or the
//! in-degree alone when there are no classes). A homogeneous graph without
//! balanced training nodes has no classes, so METIS balances node counts.
//! The text format's weight columns ([`NodeType::weights`]) follow as more
//! constraints, as DGL's ParMETIS pipeline uses them.

use rayon::prelude::*;

use crate::model::{DType, InputGraph, NodeType, Tensor};
use crate::{Error, Result};

/// Vertex weights, `ncon` per node, row-major (`vwgt[v * ncon + c]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraints {
    pub ncon: usize,
    pub vwgt: Vec<i64>,
    /// What each constraint balances, for reports.
    pub names: Vec<String>,
}

impl Constraints {
    /// One unit weight per node: balance node counts only.
    pub fn unit(num_nodes: u64) -> Self {
        Constraints {
            ncon: 1,
            vwgt: vec![1; num_nodes as usize],
            names: vec!["nodes".into()],
        }
    }

    pub fn num_nodes(&self) -> u64 {
        (self.vwgt.len() / self.ncon.max(1)) as u64
    }

    /// Sum of every constraint over all nodes.
    pub fn totals(&self) -> Vec<i64> {
        column_sums(&self.vwgt, self.ncon)
    }
}

/// Sum of every constraint of the row-major weights `vwgt`.
pub(crate) fn column_sums(vwgt: &[i64], ncon: usize) -> Vec<i64> {
    let mut t = vec![0i64; ncon];
    for row in vwgt.chunks(ncon.max(1)) {
        t.iter_mut().zip(row).for_each(|(s, w)| *s += w);
    }
    t
}

/// The constraints DGL would give METIS for this graph and options.
pub fn constraints(
    g: &InputGraph,
    balance_train: Option<&str>,
    balance_edges: bool,
) -> Result<Constraints> {
    let n = g.num_nodes() as usize;
    let (class, names) = classes(g, balance_train)?;
    let mut cols: Vec<(String, Vec<i64>)> = Vec::new();
    let num_classes = names.len();
    for (k, name) in names.iter().enumerate() {
        let col = class
            .par_iter()
            .map(|&c| i64::from(c == k as u32))
            .collect();
        cols.push((name.clone(), col));
    }
    if balance_edges {
        let indeg = in_degrees(g);
        if num_classes == 0 {
            cols.push(("in-degree".into(), indeg));
        } else {
            for (k, name) in names.iter().enumerate() {
                let col = (0..n)
                    .into_par_iter()
                    .map(|v| if class[v] == k as u32 { indeg[v] } else { 0 })
                    .collect();
                cols.push((format!("in-degree of {name}"), col));
            }
        }
    }
    cols.extend(weight_columns(g)?);
    // A constraint nothing weighs (no edges, say) constrains nothing.
    cols.retain(|(_, c)| c.iter().any(|&w| w != 0));
    if cols.is_empty() {
        return Ok(Constraints::unit(n as u64));
    }
    Ok(interleave(cols, n))
}

fn interleave(cols: Vec<(String, Vec<i64>)>, n: usize) -> Constraints {
    let ncon = cols.len();
    let mut vwgt = vec![0i64; n * ncon];
    vwgt.par_chunks_mut(ncon).enumerate().for_each(|(v, row)| {
        for (w, (_, col)) in row.iter_mut().zip(&cols) {
            *w = col[v];
        }
    });
    Constraints {
        ncon,
        vwgt,
        names: cols.into_iter().map(|(name, _)| name).collect(),
    }
}

/// Each node's balance class and the classes' names; no classes for a
/// homogeneous graph without balanced training nodes.
fn classes(g: &InputGraph, balance_train: Option<&str>) -> Result<(Vec<u32>, Vec<String>)> {
    let mut class = Vec::with_capacity(g.num_nodes() as usize);
    let mut names = Vec::new();
    let Some(feat) = balance_train else {
        if g.ntypes.len() <= 1 {
            return Ok((class, names));
        }
        for t in g.ntypes.iter().filter(|t| t.count > 0) {
            class.extend(std::iter::repeat_n(names.len() as u32, t.count as usize));
            names.push(t.name.clone());
        }
        return Ok((class, names));
    };
    if !g.ntypes.iter().any(|t| t.data.contains_key(feat)) {
        return Err(Error::Config(format!(
            "cannot balance training nodes: no node type has the feature {feat:?}"
        )));
    }
    for t in g.ntypes.iter().filter(|t| t.count > 0) {
        let Some(mask) = t.data.get(feat) else {
            class.extend(std::iter::repeat_n(names.len() as u32, t.count as usize));
            names.push(t.name.clone());
            continue;
        };
        let train = mask_values(t, feat, mask)?;
        // DGL numbers only the values present (np.unique).
        let has = [train.contains(&false), train.contains(&true)];
        let base = names.len() as u32;
        let id = |b: bool| if has[0] && b { base + 1 } else { base };
        class.extend(train.iter().map(|&b| id(b)));
        if has[0] {
            names.push(format!("{}/non-{feat}", t.name));
        }
        if has[1] {
            names.push(format!("{}/{feat}", t.name));
        }
    }
    Ok((class, names))
}

/// The mask as booleans (non-zero = training node), one per node.
fn mask_values(t: &NodeType, feat: &str, mask: &Tensor) -> Result<Vec<bool>> {
    let cols: u64 = mask.shape.iter().skip(1).product();
    if mask.rows() != t.count || cols != 1 {
        return Err(Error::Config(format!(
            "{}/{feat}: a balance mask needs one value per node ({} rows, 1 column), has shape {:?}",
            t.name, t.count, mask.shape
        )));
    }
    let size = mask.dtype.size();
    let nonzero = |b: &[u8]| match mask.dtype {
        DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) != 0.0,
        DType::F64 => f64::from_le_bytes(b.try_into().unwrap_or([0; 8])) != 0.0,
        // Integers, booleans, and f16 (whose zero is all zero bits, except -0).
        DType::F16 => (u16::from_le_bytes([b[0], b[1]]) & 0x7fff) != 0,
        _ => b.iter().any(|&x| x != 0),
    };
    Ok(mask.data.chunks(size).map(nonzero).collect())
}

/// In-degree of every node over all edge types (loops and repeats counted,
/// as `g.in_degrees()` counts them).
pub fn in_degrees(g: &InputGraph) -> Vec<i64> {
    let offs = g.node_offsets();
    let mut deg = vec![0i64; g.num_nodes() as usize];
    for t in &g.etypes {
        let base = offs[t.dst_type] as usize;
        for &d in &t.dst {
            deg[base + d as usize] += 1;
        }
    }
    deg
}

/// The weight columns of the text format; a type without them weighs 0.
fn weight_columns(g: &InputGraph) -> Result<Vec<(String, Vec<i64>)>> {
    let k = g
        .ntypes
        .iter()
        .filter_map(|t| t.weights.as_ref())
        .map(|w| w.shape.get(1).copied().unwrap_or(1) as usize)
        .max()
        .unwrap_or(0);
    let mut cols = vec![Vec::with_capacity(g.num_nodes() as usize); k];
    for t in &g.ntypes {
        let Some(w) = &t.weights else {
            cols.iter_mut()
                .for_each(|c| c.extend(std::iter::repeat_n(0, t.count as usize)));
            continue;
        };
        let wk = w.shape.get(1).copied().unwrap_or(1) as usize;
        if w.dtype != DType::I64 || w.rows() != t.count || wk != k {
            return Err(Error::Config(format!(
                "{}: node weights must be I64 [{}, {k}], are {:?} {:?}",
                t.name, t.count, w.dtype, w.shape
            )));
        }
        for (i, b) in w.data.chunks_exact(8).enumerate() {
            let v = i64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
            if v < 0 {
                return Err(Error::Config(format!(
                    "{}: node {} has the negative weight {v} (column {})",
                    t.name,
                    i / k,
                    i % k
                )));
            }
            cols[i % k].push(v);
        }
    }
    Ok(cols
        .into_iter()
        .enumerate()
        .map(|(i, c)| (format!("weight {i}"), c))
        .collect())
}
