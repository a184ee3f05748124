//! The balance constraints of the owned vertices, exactly as
//! `assign::weights::constraints` builds them for the whole graph: one 0/1
//! column per balance class (node type, or node type x train mask), the
//! in-degree per class with `--balance-edges`, the node weight columns; a
//! column nothing weighs is dropped; none left = unit weights. What depends
//! on the whole graph (which mask values occur, which columns weigh
//! anything) is agreed over all ranks.

use super::stage;
use crate::exchange::Exchange;
use crate::input::Share;
use crate::model::{DType, NodeType, Tensor};
use crate::{Error, Result};

/// `ncon` weights per owned vertex (local order: type-major), and `ncon`.
pub fn constraints<E: Exchange>(
    ex: &E,
    share: &Share,
    owned: &[u64],
    indeg: &[i64],
    balance_train: Option<&str>,
    balance_edges: bool,
) -> Result<(Vec<i64>, usize)> {
    let (class, num_classes) = classes(ex, share, owned, balance_train)?;
    let n = indeg.len();
    let mut cols: Vec<Vec<i64>> = (0..num_classes)
        .map(|k| class.iter().map(|&c| i64::from(c == k)).collect())
        .collect();
    if balance_edges {
        if num_classes == 0 {
            cols.push(indeg.to_vec());
        } else {
            for k in 0..num_classes {
                let col = (0..n).map(|v| if class[v] == k { indeg[v] } else { 0 });
                cols.push(col.collect());
            }
        }
    }
    cols.extend(weight_columns(share, owned)?);
    let weighs: Vec<u64> = cols
        .iter()
        .map(|c| u64::from(c.iter().any(|&w| w != 0)))
        .collect();
    let all = ex.allgather(&weighs)?;
    let keep: Vec<bool> = (0..cols.len())
        .map(|i| {
            all.iter()
                .skip(i)
                .step_by(cols.len().max(1))
                .any(|&x| x != 0)
        })
        .collect();
    let cols: Vec<Vec<i64>> = cols
        .into_iter()
        .zip(keep)
        .filter_map(|(c, k)| k.then_some(c))
        .collect();
    if cols.is_empty() {
        return Ok((vec![1; n], 1));
    }
    let ncon = cols.len();
    let mut vwgt = vec![0i64; n * ncon];
    for (c, col) in cols.iter().enumerate() {
        for (v, &w) in col.iter().enumerate() {
            vwgt[v * ncon + c] = w;
        }
    }
    Ok((vwgt, ncon))
}

/// Each owned vertex's balance class and the number of classes.
fn classes<E: Exchange>(
    ex: &E,
    share: &Share,
    owned: &[u64],
    balance_train: Option<&str>,
) -> Result<(Vec<usize>, usize)> {
    let g = &share.graph;
    let mut class = Vec::new();
    let Some(feat) = balance_train else {
        if g.ntypes.len() <= 1 {
            return Ok((class, 0));
        }
        let mut k = 0;
        for (t, _) in g.ntypes.iter().enumerate().filter(|(_, t)| t.count > 0) {
            class.extend(std::iter::repeat_n(k, owned[t] as usize));
            k += 1;
        }
        return Ok((class, k));
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
        .map(|(t, ty)| {
            ty.data
                .get(feat)
                .map(|m| mask_values(ty, feat, m, owned[t]))
                .transpose()
        })
        .collect::<Result<_>>()?;
    // Which values occur anywhere (DGL numbers only those: np.unique).
    let flags: Vec<u64> = masks
        .iter()
        .flat_map(|m| {
            let m = m.as_deref().unwrap_or(&[]);
            [u64::from(m.contains(&false)), u64::from(m.contains(&true))]
        })
        .collect();
    let all = ex.allgather(&flags)?;
    let nf = flags.len().max(1);
    let any = |i: usize| all.iter().skip(i).step_by(nf).any(|&x| x != 0);
    let mut k = 0usize;
    for (t, _) in g.ntypes.iter().enumerate().filter(|(_, t)| t.count > 0) {
        let Some(train) = &masks[t] else {
            class.extend(std::iter::repeat_n(k, owned[t] as usize));
            k += 1;
            continue;
        };
        let has = [any(2 * t), any(2 * t + 1)];
        class.extend(train.iter().map(|&b| if has[0] && b { k + 1 } else { k }));
        k += usize::from(has[0]) + usize::from(has[1]);
    }
    Ok((class, k))
}

/// The share's rows of a mask as booleans (non-zero = training node).
fn mask_values(t: &NodeType, feat: &str, mask: &Tensor, rows: u64) -> Result<Vec<bool>> {
    let cols: u64 = mask.shape.iter().skip(1).product();
    if mask.rows() != rows || cols != 1 {
        return Err(Error::Config(format!(
            "{}/{feat}: a balance mask needs one value per node ({rows} rows of this share, \
             1 column), has shape {:?}",
            t.name, mask.shape
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

/// The node weight columns of the owned rows; a type without them weighs 0.
fn weight_columns(share: &Share, owned: &[u64]) -> Result<Vec<Vec<i64>>> {
    let g = &share.graph;
    let k = g
        .ntypes
        .iter()
        .filter_map(|t| t.weights.as_ref())
        .map(|w| w.shape.get(1).copied().unwrap_or(1) as usize)
        .max()
        .unwrap_or(0);
    let mut cols = vec![Vec::new(); k];
    for (t, ty) in g.ntypes.iter().enumerate() {
        let Some(w) = &ty.weights else {
            let zeros = std::iter::repeat_n(0, owned[t] as usize);
            cols.iter_mut().for_each(|c| c.extend(zeros.clone()));
            continue;
        };
        let wk = w.shape.get(1).copied().unwrap_or(1) as usize;
        if w.dtype != DType::I64 || w.rows() != owned[t] || wk != k {
            return Err(Error::Config(format!(
                "{}: node weights must be I64 [{}, {k}] (this share's rows), are {:?} {:?}",
                ty.name, owned[t], w.dtype, w.shape
            )));
        }
        for (i, b) in w.data.chunks_exact(8).enumerate() {
            let v = i64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
            if v < 0 {
                return Err(stage(format!(
                    "{}: node {} has the negative weight {v} (column {})",
                    ty.name,
                    share.node_first[t] + (i / k) as u64,
                    i % k
                )));
            }
            cols[i % k].push(v);
        }
    }
    Ok(cols)
}
