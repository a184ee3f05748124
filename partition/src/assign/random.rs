//! Random assignment, as DGL's `partition_graph(part_method="random")`
//! does it: every node draws its part uniformly and independently
//! (`dgl.random.choice(num_parts, num_nodes)`, with replacement), so parts
//! are only balanced in expectation. Seeded and independent of the thread
//! count: node `v`'s part is a hash of (seed, v).

use rayon::prelude::*;

use super::{with_pool, Assignment, Partitioner, Request};
use crate::rmat::mix;
use crate::settings::Choice;
use crate::{Error, Result};

/// The random partitioner.
#[derive(Clone, Copy, Debug, Default)]
pub struct Random;

impl Partitioner for Random {
    fn assign(&self, req: &Request<'_>) -> Result<Assignment> {
        let n = req.graph.num_nodes();
        with_pool(req.threads, || assignment(n, req.num_parts, req.seed))
    }
}

/// The random assignment of `n` nodes to `k` parts.
pub fn assignment(n: u64, k: u32, seed: u64) -> Result<Assignment> {
    if k == 0 {
        return Err(Error::Config("num_parts must be at least 1".into()));
    }
    Ok(Assignment {
        num_parts: k,
        parts: random_parts(n, k, seed),
        algo_name: Choice::Random.as_str().into(),
    })
}

/// `n` uniform draws from `0..k`.
pub fn random_parts(n: u64, k: u32, seed: u64) -> Vec<u32> {
    let key = mix(seed ^ 0x243f_6a88_85a3_08d3);
    (0..n)
        .into_par_iter()
        .map(|v| {
            // Multiply-shift maps 64 random bits onto 0..k without modulo bias.
            ((u128::from(mix(key ^ mix(v))) * u128::from(k)) >> 64) as u32
        })
        .collect()
}
