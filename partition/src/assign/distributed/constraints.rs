//! The balance constraints of the owned vertices, built by
//! `assign::weights::constraints_of` exactly as for the whole graph; what
//! depends on the whole graph (which mask values occur, which columns weigh
//! anything) is agreed over all ranks.

use crate::assign::weights::{constraints_of, Rows};
use crate::exchange::Exchange;
use crate::input::Share;
use crate::Result;

/// `ncon` weights per owned vertex (local order: type-major: `owned[t]`
/// rows of each node type, as the share holds them), and `ncon`.
pub fn constraints<E: Exchange>(
    ex: &E,
    share: &Share,
    owned: &[u64],
    indeg: &[i64],
    balance_train: Option<&str>,
    balance_edges: bool,
) -> Result<(Vec<i64>, usize)> {
    let rows = Rows {
        graph: &share.graph,
        count: owned.to_vec(),
        first: share.node_first.clone(),
        share: true,
    };
    // A flag holds when it holds on any rank.
    let mut any = |flags: &[bool]| -> Result<Vec<bool>> {
        let mine: Vec<u64> = flags.iter().map(|&f| u64::from(f)).collect();
        let all = ex.allgather(&mine)?;
        let stride = flags.len().max(1);
        Ok((0..flags.len())
            .map(|i| all.iter().skip(i).step_by(stride).any(|&x| x != 0))
            .collect())
    };
    let c = constraints_of(
        &rows,
        balance_train,
        balance_edges.then_some(indeg),
        &mut any,
    )?;
    Ok((c.vwgt, c.ncon))
}
