//! The initial partition: the coarsest graph (small by the stop rule) is
//! gathered on rank 0 in global vertex order, partitioned there by METIS
//! under the same multi-constraint weights, and the parts are broadcast.

use super::graph::LocalGraph;
use super::stage;
use crate::assign::coarsen::View;
use crate::assign::metis::metis_kway;
use crate::exchange::Exchange;
use crate::Result;

/// The part of every vertex of `g` (replicated on every rank). `like_dgl`:
/// METIS with DGL's options, when `g` is the whole input graph (then the
/// result is the single-process `Direct` path's).
pub fn initial<E: Exchange>(
    ex: &E,
    g: &LocalGraph,
    k: u32,
    seed: u64,
    like_dgl: bool,
) -> Result<Vec<u32>> {
    let gid = g.global_ids();
    let (mut deg, mut adj, mut adjw) = (Vec::new(), Vec::new(), Vec::new());
    for v in 0..g.n_own {
        let mut row: Vec<(u64, u64)> = g.edges(v).map(|(u, w)| (gid[u], w)).collect();
        // csr::symmetric's order: neighbours by id.
        row.sort_unstable();
        deg.push(row.len() as u64);
        for (u, w) in row {
            adj.push(u);
            adjw.push(w);
        }
    }
    let vw: Vec<u64> = g.vwgt.iter().map(|&x| x as u64).collect();
    let own: Vec<u64> = gid[..g.n_own].to_vec();
    let deg = ex.gatherv(0, &deg)?;
    let adj = ex.gatherv(0, &adj)?;
    // Coarse levels are weighted; a rank without edges has no weights to
    // show it, so the ranks agree.
    let weighted = ex.all_max(u64::from(!g.adjw.is_empty()))? == 1;
    let adjw = if weighted {
        ex.gatherv(0, &adjw)?
    } else {
        None
    };
    let vw = ex.gatherv(0, &vw)?;
    let own = ex.gatherv(0, &own)?;
    let mut parts = Vec::new();
    if let (Some(deg), Some(adj), Some(vw), Some(own)) = (deg, adj, vw, own) {
        let n = g.n_global() as usize;
        let whole = Whole::new(
            n,
            g.ncon,
            own.data(),
            deg.data(),
            adj.data(),
            adjw.as_ref().map(|b| b.data()),
            vw.data(),
        )?;
        parts = metis_kway(whole.view(), k, seed, like_dgl)?;
        tracing::debug!(
            n = g.n_global(),
            cut = whole.cut(&parts),
            "initial partition"
        );
    }
    ex.broadcast(0, &mut parts)?;
    if parts.len() as u64 != g.n_global() {
        return Err(stage(format!(
            "rank 0 sent {} parts for {} coarse vertices",
            parts.len(),
            g.n_global()
        )));
    }
    Ok(parts)
}

/// The gathered graph in global order.
struct Whole {
    xadj: Vec<u64>,
    adj: Vec<u64>,
    adjw: Option<Vec<u64>>,
    vwgt: Vec<i64>,
    ncon: usize,
}

impl Whole {
    /// Rows arrive rank after rank, each rank's vertices in its local order
    /// (`own` their global ids): put every row in its global place.
    fn new(
        n: usize,
        ncon: usize,
        own: &[u64],
        deg: &[u64],
        adj: &[u64],
        adjw: Option<&[u64]>,
        vw: &[u64],
    ) -> Result<Whole> {
        if own.len() != n || deg.len() != n || vw.len() != n * ncon {
            return Err(stage(format!(
                "the gathered coarse graph is not {n} vertices"
            )));
        }
        let mut start = vec![0u64; n];
        let mut at = 0u64;
        for (&d, &v) in deg.iter().zip(own) {
            *start
                .get_mut(v as usize)
                .ok_or_else(|| stage(format!("vertex {v} of {n}")))? = at;
            at += d;
        }
        let mut gdeg = vec![0u64; n];
        own.iter()
            .zip(deg)
            .for_each(|(&v, &d)| gdeg[v as usize] = d);
        let mut xadj = vec![0u64; n + 1];
        for v in 0..n {
            xadj[v + 1] = xadj[v] + gdeg[v];
        }
        let (mut a, mut w) = (Vec::with_capacity(adj.len()), Vec::new());
        let mut vwgt = vec![0i64; n * ncon];
        for v in 0..n {
            let s = start[v] as usize;
            let e = s + gdeg[v] as usize;
            a.extend_from_slice(
                adj.get(s..e)
                    .ok_or_else(|| stage("short coarse adjacency".into()))?,
            );
            if let Some(x) = adjw {
                w.extend_from_slice(
                    x.get(s..e)
                        .ok_or_else(|| stage("short coarse weights".into()))?,
                );
            }
        }
        for (i, &v) in own.iter().enumerate() {
            for c in 0..ncon {
                vwgt[v as usize * ncon + c] = vw[i * ncon + c] as i64;
            }
        }
        Ok(Whole {
            xadj,
            adj: a,
            adjw: adjw.map(|_| w),
            vwgt,
            ncon,
        })
    }

    /// The weighted undirected cut of `parts`.
    fn cut(&self, parts: &[u32]) -> u64 {
        let v = self.view();
        let cut2: u64 = (0..v.n())
            .map(|x| {
                v.edges(x)
                    .filter(|&(u, _)| parts[u as usize] != parts[x])
                    .map(|(_, w)| w)
                    .sum::<u64>()
            })
            .sum();
        cut2 / 2
    }

    fn view(&self) -> View<'_> {
        View {
            xadj: &self.xadj,
            adj: &self.adj,
            adjw: self.adjw.as_deref(),
            vwgt: &self.vwgt,
            ncon: self.ncon,
        }
    }
}
