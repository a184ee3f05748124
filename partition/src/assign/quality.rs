//! How good an assignment is: the edge cut and the balance per constraint.

use rayon::prelude::*;

use super::weights::{constraints, Constraints};
use super::{Assignment, Request};
use crate::csr::Csr;
use crate::Result;

/// Edge cut and balance of an assignment.
#[derive(Clone, Debug, PartialEq)]
pub struct Quality {
    /// Undirected edges of the symmetric adjacency whose ends lie in
    /// different parts: the number METIS reports. DGL's `partition_graph`
    /// prints the directed count of the bidirected graph, twice this.
    pub edge_cut: u64,
    /// `part_weights[c][p]`: weight of constraint `c` in part `p`.
    pub part_weights: Vec<Vec<i64>>,
    /// Per constraint: heaviest part / average part (1.0 = perfect).
    pub balance: Vec<f64>,
}

impl Quality {
    /// An assignment's quality from its cut and its part weights (the
    /// balance follows from them).
    pub(crate) fn new(edge_cut: u64, part_weights: Vec<Vec<i64>>) -> Quality {
        let balance = part_weights
            .iter()
            .map(|w| {
                let total: i64 = w.iter().sum();
                let max = w.iter().copied().max().unwrap_or(0);
                if total == 0 {
                    1.0
                } else {
                    max as f64 * w.len() as f64 / total as f64
                }
            })
            .collect();
        Quality {
            edge_cut,
            part_weights,
            balance,
        }
    }

    /// The worst balance over all constraints.
    pub fn max_balance(&self) -> f64 {
        self.balance.iter().copied().fold(1.0, f64::max)
    }
}

impl std::fmt::Display for Quality {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "edge cut {} (undirected), balance", self.edge_cut)?;
        for b in &self.balance {
            write!(f, " {b:.3}")?;
        }
        Ok(())
    }
}

impl Request<'_> {
    /// The quality of `a` against the constraints this request implies.
    pub fn quality(&self, a: &Assignment) -> Result<Quality> {
        let c = constraints(self.graph, self.balance_train, self.balance_edges)?;
        Ok(quality(self.csr, a, &c))
    }
}

/// Measures `a` on `csr` against the constraints `c`.
pub fn quality(csr: &Csr, a: &Assignment, c: &Constraints) -> Quality {
    let parts = &a.parts;
    let cut2: u64 = (0..csr.num_nodes())
        .into_par_iter()
        .map(|v| {
            let p = parts[v as usize];
            csr.neighbors_of(v)
                .iter()
                .filter(|&&u| parts[u as usize] != p)
                .count() as u64
        })
        .sum();
    let part_weights = part_weights(parts, a.num_parts as usize, c);
    Quality::new(cut2 / 2, part_weights)
}

/// `[constraint][part]` weight sums.
pub fn part_weights(parts: &[u32], k: usize, c: &Constraints) -> Vec<Vec<i64>> {
    let ncon = c.ncon;
    let flat = parts
        .par_iter()
        .zip(c.vwgt.par_chunks(ncon))
        .fold(
            || vec![0i64; k * ncon],
            |mut acc, (&p, row)| {
                for (j, w) in row.iter().enumerate() {
                    acc[p as usize * ncon + j] += w;
                }
                acc
            },
        )
        .reduce(
            || vec![0i64; k * ncon],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            },
        );
    (0..ncon)
        .map(|j| (0..k).map(|p| flat[p * ncon + j]).collect())
        .collect()
}
