//! R-MAT edge generator (Chakrabarti, Zhan, Faloutsos 2004) with the
//! Graph500 probabilities a=0.57, b=0.19, c=0.19 (d=0.05): the benchmark
//! graphs. Parallel and deterministic for a seed: edge `i` draws from its
//! own random stream, so the result does not depend on the thread count.

use rayon::prelude::*;

const A: f64 = 0.57;
const B: f64 = 0.19;
const C: f64 = 0.19;

/// `num_edges` directed edges `(src, dst)` over `num_nodes` nodes. The
/// recursive quadrant choice runs on the next power of two; an edge with an
/// endpoint `>= num_nodes` is drawn again from the same stream. Loops and
/// duplicates are kept, as R-MAT makes them.
pub fn rmat(num_nodes: u64, num_edges: u64, seed: u64) -> (Vec<u64>, Vec<u64>) {
    if num_nodes == 0 {
        return (Vec::new(), Vec::new());
    }
    let scale = 64 - (num_nodes - 1).leading_zeros();
    (0..num_edges)
        .into_par_iter()
        .map(|i| edge(num_nodes, scale, seed, i))
        .unzip()
}

// The quadrant thresholds in 1/65536ths: each random u64 gives 4 levels.
const TA: u64 = (A * 65536.0) as u64;
const TB: u64 = ((A + B) * 65536.0) as u64;
const TC: u64 = ((A + B + C) * 65536.0) as u64;

fn edge(n: u64, scale: u32, seed: u64, i: u64) -> (u64, u64) {
    let mut rng = SplitMix(mix(seed ^ mix(i.wrapping_add(0x5851_f42d_4c95_7f2d))));
    loop {
        let (mut s, mut d) = (0u64, 0u64);
        let mut bits = 0u64;
        for level in 0..scale {
            if level % 4 == 0 {
                bits = rng.next_u64();
            }
            let r = bits & 0xffff;
            bits >>= 16;
            let (sb, db) = match r {
                r if r < TA => (0, 0),
                r if r < TB => (0, 1),
                r if r < TC => (1, 0),
                _ => (1, 1),
            };
            s = (s << 1) | sb;
            d = (d << 1) | db;
        }
        if s < n && d < n {
            return (s, d);
        }
    }
}

/// SplitMix64's finaliser: a good 64-bit hash.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64 stream.
pub(crate) struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmat_is_deterministic_in_range_and_skewed() {
        let (s1, d1) = rmat(1000, 20_000, 3);
        let (s2, d2) = rmat(1000, 20_000, 3);
        assert_eq!((&s1, &d1), (&s2, &d2));
        let (s3, _) = rmat(1000, 20_000, 4);
        assert_ne!(s1, s3);
        assert!(s1.iter().chain(&d1).all(|&v| v < 1000));
        // a > d: node 0 is far more frequent than node 999.
        let count = |x: u64| s1.iter().filter(|&&v| v == x).count();
        assert!(count(0) > 10 * count(999).max(1));
    }

    #[test]
    fn rmat_handles_tiny_graphs() {
        assert_eq!(rmat(0, 5, 1), (vec![], vec![]));
        let (s, d) = rmat(1, 3, 1);
        assert_eq!((s, d), (vec![0, 0, 0], vec![0, 0, 0]));
    }
}
