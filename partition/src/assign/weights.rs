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

use crate::model::{DType, InputGraph, Tensor};
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
    let indeg = balance_edges.then(|| in_degrees(g));
    // One process sees every row: what holds here holds everywhere.
    let mut any = |flags: &[bool]| Ok(flags.to_vec());
    constraints_of(&Rows::whole(g), balance_train, indeg.as_deref(), &mut any)
}

/// The node rows a process weighs: every node (one process) or a rank's
/// share, `count[t]` rows of node type `t` from per-type id `first[t]`.
pub(crate) struct Rows<'a> {
    pub graph: &'a InputGraph,
    pub count: Vec<u64>,
    pub first: Vec<u64>,
    /// A rank's share (its error messages say so).
    pub share: bool,
}

impl<'a> Rows<'a> {
    pub(crate) fn whole(graph: &'a InputGraph) -> Self {
        let count: Vec<u64> = graph.ntypes.iter().map(|t| t.count).collect();
        let first = vec![0; count.len()];
        Rows {
            graph,
            count,
            first,
            share: false,
        }
    }

    fn total(&self) -> usize {
        self.count.iter().sum::<u64>() as usize
    }
}

/// Whether each flag holds on any process (one process: the flags).
pub(crate) type Any<'a> = dyn FnMut(&[bool]) -> Result<Vec<bool>> + 'a;

/// The constraints of `rows`, as [`constraints`] builds them for the whole
/// graph; `indeg`: the rows' in-degrees when edges are balanced. What
/// depends on every row (which mask values occur, which columns weigh
/// anything) is decided by `any`.
pub(crate) fn constraints_of(
    rows: &Rows<'_>,
    balance_train: Option<&str>,
    indeg: Option<&[i64]>,
    any: &mut Any<'_>,
) -> Result<Constraints> {
    let n = rows.total();
    let (class, names) = classes(rows, balance_train, any)?;
    let mut cols: Vec<(String, Vec<i64>)> = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let col = class
            .par_iter()
            .map(|&c| i64::from(c == k as u32))
            .collect();
        cols.push((name.clone(), col));
    }
    if let Some(indeg) = indeg {
        if names.is_empty() {
            cols.push(("in-degree".into(), indeg.to_vec()));
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
    cols.extend(weight_columns(rows)?);
    // A constraint nothing weighs (no edges, say) constrains nothing.
    let weighs: Vec<bool> = cols
        .iter()
        .map(|(_, c)| c.iter().any(|&w| w != 0))
        .collect();
    let keep = any(&weighs)?;
    let cols: Vec<(String, Vec<i64>)> = cols
        .into_iter()
        .zip(keep)
        .filter_map(|(c, k)| k.then_some(c))
        .collect();
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

/// Each row's balance class and the classes' names; no classes for a
/// homogeneous graph without balanced training nodes.
fn classes(
    rows: &Rows<'_>,
    balance_train: Option<&str>,
    any: &mut Any<'_>,
) -> Result<(Vec<u32>, Vec<String>)> {
    let g = rows.graph;
    let mut class = Vec::with_capacity(rows.total());
    let mut names = Vec::new();
    let Some(feat) = balance_train else {
        if g.ntypes.len() <= 1 {
            return Ok((class, names));
        }
        for (t, ty) in g.ntypes.iter().enumerate().filter(|(_, t)| t.count > 0) {
            class.extend(std::iter::repeat_n(
                names.len() as u32,
                rows.count[t] as usize,
            ));
            names.push(ty.name.clone());
        }
        return Ok((class, names));
    };
    if !g.ntypes.iter().any(|t| t.data.contains_key(feat)) {
        return Err(Error::Config(format!(
            "cannot balance training nodes: no node type has the feature {feat:?}"
        )));
    }
    let masks: Vec<Option<Vec<bool>>> = g
        .ntypes
        .iter()
        .enumerate()
        .map(|(t, ty)| match ty.data.get(feat).filter(|_| ty.count > 0) {
            Some(m) => mask_values(rows, t, feat, m).map(Some),
            None => Ok(None),
        })
        .collect::<Result<_>>()?;
    // DGL numbers only the values present anywhere (np.unique).
    let flags: Vec<bool> = masks
        .iter()
        .flat_map(|m| {
            let m = m.as_deref().unwrap_or(&[]);
            [m.contains(&false), m.contains(&true)]
        })
        .collect();
    let present = any(&flags)?;
    for (t, ty) in g.ntypes.iter().enumerate().filter(|(_, t)| t.count > 0) {
        let Some(train) = &masks[t] else {
            class.extend(std::iter::repeat_n(
                names.len() as u32,
                rows.count[t] as usize,
            ));
            names.push(ty.name.clone());
            continue;
        };
        let has = [present[2 * t], present[2 * t + 1]];
        let base = names.len() as u32;
        let id = |b: bool| if has[0] && b { base + 1 } else { base };
        class.extend(train.iter().map(|&b| id(b)));
        if has[0] {
            names.push(format!("{}/non-{feat}", ty.name));
        }
        if has[1] {
            names.push(format!("{}/{feat}", ty.name));
        }
    }
    Ok((class, names))
}

/// The mask of node type `t` as booleans (non-zero = training node), one
/// per row.
fn mask_values(rows: &Rows<'_>, t: usize, feat: &str, mask: &Tensor) -> Result<Vec<bool>> {
    let (name, count) = (&rows.graph.ntypes[t].name, rows.count[t]);
    let cols: u64 = mask.shape.iter().skip(1).product();
    if mask.rows() != count || cols != 1 {
        let of = if rows.share { " of this share" } else { "" };
        return Err(Error::Config(format!(
            "{name}/{feat}: a balance mask needs one value per node ({count} rows{of}, 1 column), \
             has shape {:?}",
            mask.shape
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
    Ok(mask.data.chunks(size.max(1)).map(nonzero).collect())
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

/// The weight columns of the text format for `rows`; a type without them
/// weighs 0.
fn weight_columns(rows: &Rows<'_>) -> Result<Vec<(String, Vec<i64>)>> {
    let g = rows.graph;
    let k = g
        .ntypes
        .iter()
        .filter_map(|t| t.weights.as_ref())
        .map(|w| w.shape.get(1).copied().unwrap_or(1) as usize)
        .max()
        .unwrap_or(0);
    let mut cols = vec![Vec::with_capacity(rows.total()); k];
    for (t, ty) in g.ntypes.iter().enumerate() {
        let count = rows.count[t];
        let Some(w) = &ty.weights else {
            cols.iter_mut()
                .for_each(|c| c.extend(std::iter::repeat_n(0, count as usize)));
            continue;
        };
        let wk = w.shape.get(1).copied().unwrap_or(1) as usize;
        if w.dtype != DType::I64 || w.rows() != count || wk != k {
            let of = if rows.share {
                " (this share's rows)"
            } else {
                ""
            };
            return Err(Error::Config(format!(
                "{}: node weights must be I64 [{count}, {k}]{of}, are {:?} {:?}",
                ty.name, w.dtype, w.shape
            )));
        }
        for (i, b) in w.data.chunks_exact(8).enumerate() {
            let v = i64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
            if v < 0 {
                return Err(Error::Config(format!(
                    "{}: node {} has the negative weight {v} (column {})",
                    ty.name,
                    rows.first[t] + (i / k) as u64,
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
