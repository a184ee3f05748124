//! Parallel 64-bit coarsening for the multilevel partitioner: size-limited
//! label-propagation clustering (which shrinks power-law graphs far better
//! than matching, whose stars leave most leaves unmatched) followed by
//! contraction into a weighted graph. Deterministic for a seed whatever the
//! thread count: moves are chosen in parallel on a snapshot and applied in
//! vertex order.

use rayon::prelude::*;

use crate::rmat::mix;

/// A weighted graph borrowed from its owner (the input CSR or a level).
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub xadj: &'a [u64],
    pub adj: &'a [u64],
    /// Edge weights; `None` = all 1.
    pub adjw: Option<&'a [u64]>,
    /// `ncon` weights per vertex, row-major.
    pub vwgt: &'a [i64],
    pub ncon: usize,
}

impl<'a> View<'a> {
    pub fn n(&self) -> usize {
        self.xadj.len() - 1
    }

    pub fn edges(&self, v: usize) -> impl Iterator<Item = (u64, u64)> + 'a {
        let (a, b) = (self.xadj[v] as usize, self.xadj[v + 1] as usize);
        let w = self.adjw;
        self.adj[a..b]
            .iter()
            .enumerate()
            .map(move |(i, &u)| (u, w.map_or(1, |w| w[a + i])))
    }

    pub fn w(&self, v: usize) -> &'a [i64] {
        &self.vwgt[v * self.ncon..(v + 1) * self.ncon]
    }
}

/// An owned coarse graph.
#[derive(Default)]
pub struct Level {
    pub xadj: Vec<u64>,
    pub adj: Vec<u64>,
    pub adjw: Vec<u64>,
    pub vwgt: Vec<i64>,
    pub ncon: usize,
}

impl Level {
    pub fn view(&self) -> View<'_> {
        View {
            xadj: &self.xadj,
            adj: &self.adj,
            adjw: Some(&self.adjw),
            vwgt: &self.vwgt,
            ncon: self.ncon,
        }
    }
}

/// Label-propagation rounds per level.
const ROUNDS: usize = 3;
/// Sub-rounds per round: later vertices see earlier ones' moves.
const BATCHES: usize = 8;

/// Coarsens `g` one level: returns the coarse graph and each vertex's
/// coarse vertex. `max_w` caps every cluster's weight per constraint.
pub fn coarsen(g: View<'_>, max_w: &[i64], seed: u64) -> (Level, Vec<u64>) {
    let labels = cluster(g, max_w, seed);
    let (cmap, nc) = number_clusters(&labels);
    drop(labels);
    let level = contract(g, &cmap, nc);
    (level, cmap)
}

/// Cluster id (a vertex id) of every vertex.
fn cluster(g: View<'_>, max_w: &[i64], seed: u64) -> Vec<u64> {
    let n = g.n();
    let mut label: Vec<u64> = (0..n as u64).collect();
    let mut cw = g.vwgt.to_vec();
    let mut size = vec![1u64; n];
    for round in 0..ROUNDS {
        let mut moved = 0usize;
        for b in 0..BATCHES {
            let (lo, hi) = (n * b / BATCHES, n * (b + 1) / BATCHES);
            let wanted = best_clusters(g, &label, &cw, max_w, lo..hi, seed ^ round as u64);
            for (v, to) in wanted {
                moved += usize::from(join(g, v, to, (&mut label, &mut cw, &mut size), max_w));
            }
        }
        if moved < n / 100 {
            break;
        }
    }
    merge_singletons(g, &mut label, &size, max_w);
    label
}

/// Moves `v` into cluster `to` if it still has room and members (joining
/// an emptied cluster would only swap two vertices).
fn join(
    g: View<'_>,
    v: u64,
    to: u64,
    (label, cw, size): (&mut [u64], &mut [i64], &mut [u64]),
    max_w: &[i64],
) -> bool {
    let ncon = g.ncon;
    let (v, to) = (v as usize, to as usize);
    let from = label[v] as usize;
    if size[to] == 0 || !fits(&cw[to * ncon..(to + 1) * ncon], g.w(v), max_w) {
        return false;
    }
    for c in 0..ncon {
        cw[from * ncon + c] -= g.vwgt[v * ncon + c];
        cw[to * ncon + c] += g.vwgt[v * ncon + c];
    }
    size[from] -= 1;
    size[to] += 1;
    label[v] = to as u64;
    true
}

fn fits(cluster: &[i64], add: &[i64], max_w: &[i64]) -> bool {
    cluster
        .iter()
        .zip(add)
        .zip(max_w)
        .all(|((c, a), m)| *a == 0 || c + a <= *m)
}

/// For vertices in `range`: the neighbouring cluster each would rather
/// join (strictly more connection than its own, room left), in order.
fn best_clusters(
    g: View<'_>,
    label: &[u64],
    cw: &[i64],
    max_w: &[i64],
    range: std::ops::Range<usize>,
    seed: u64,
) -> Vec<(u64, u64)> {
    let ncon = g.ncon;
    range
        .into_par_iter()
        .map_init(Vec::new, |buf: &mut Vec<(u64, u64)>, v| {
            let own = label[v];
            let best = rate(g, v, label, buf, |l| {
                l != own
                    && fits(
                        &cw[l as usize * ncon..(l as usize + 1) * ncon],
                        g.w(v),
                        max_w,
                    )
            });
            match best {
                Some((l, r)) if r > own_rating(buf, own) || tie(r, own, l, buf, seed) => {
                    Some((v as u64, l))
                }
                _ => None,
            }
        })
        .flatten_iter()
        .collect()
}

/// Ties go to a seeded coin so that equal-weight neighbours still merge
/// (a vertex alone in its cluster has rating 0 for itself).
fn tie(r: u64, own: u64, l: u64, buf: &[(u64, u64)], seed: u64) -> bool {
    r == own_rating(buf, own) && r > 0 && (mix(seed ^ own) < mix(seed ^ l))
}

fn own_rating(buf: &[(u64, u64)], own: u64) -> u64 {
    buf.binary_search_by_key(&own, |e| e.0)
        .map_or(0, |i| buf[i].1)
}

/// Sums the edge weight to each neighbouring cluster into `buf` (sorted by
/// cluster) and returns the heaviest allowed one.
fn rate(
    g: View<'_>,
    v: usize,
    label: &[u64],
    buf: &mut Vec<(u64, u64)>,
    allowed: impl Fn(u64) -> bool,
) -> Option<(u64, u64)> {
    buf.clear();
    buf.extend(g.edges(v).map(|(u, w)| (label[u as usize], w)));
    buf.sort_unstable_by_key(|e| e.0);
    buf.dedup_by(|next, acc| {
        let same = next.0 == acc.0;
        if same {
            acc.1 += next.1;
        }
        same
    });
    buf.iter()
        .filter(|e| allowed(e.0))
        .max_by_key(|e| (e.1, std::cmp::Reverse(e.0)))
        .copied()
}

/// Vertices left alone (stars' leaves whose hub cluster is full, isolated
/// vertices) are grouped by the cluster they like best, up to the limit:
/// two leaves of one hub have the same neighbourhood, so they belong
/// together.
fn merge_singletons(g: View<'_>, label: &mut [u64], size: &[u64], max_w: &[i64]) {
    let n = g.n();
    let ncon = g.ncon;
    let alone: Vec<(u64, u64)> = (0..n)
        .into_par_iter()
        .filter(|&v| label[v] == v as u64 && size[v] == 1)
        .map_init(Vec::new, |buf, v| {
            let fav = rate(g, v, label, buf, |l| l != v as u64).map_or(u64::MAX, |b| b.0);
            (fav, v as u64)
        })
        .collect();
    let mut alone = alone;
    alone.par_sort_unstable();
    let mut group_w = vec![0i64; ncon];
    let mut leader: Option<(u64, u64)> = None;
    for &(fav, v) in &alone {
        let w = g.w(v as usize);
        match leader {
            Some((f, l)) if f == fav && fits(&group_w, w, max_w) => {
                label[v as usize] = l;
                group_w.iter_mut().zip(w).for_each(|(s, x)| *s += x);
            }
            _ => {
                leader = Some((fav, v));
                group_w.copy_from_slice(w);
            }
        }
    }
}

/// Numbers the clusters 0..nc in order of their ids.
fn number_clusters(labels: &[u64]) -> (Vec<u64>, usize) {
    let n = labels.len();
    let mut used = vec![0u64; n];
    for &l in labels {
        used[l as usize] = 1;
    }
    let mut nc = 0u64;
    for u in used.iter_mut() {
        let is = *u;
        *u = nc;
        nc += is;
    }
    let cmap = labels.par_iter().map(|&l| used[l as usize]).collect();
    (cmap, nc as usize)
}

/// Vertices grouped by coarse vertex: (offsets, members).
fn members(cmap: &[u64], nc: usize) -> (Vec<u64>, Vec<u64>) {
    let mut off = vec![0u64; nc + 1];
    for &c in cmap {
        off[c as usize + 1] += 1;
    }
    for i in 0..nc {
        off[i + 1] += off[i];
    }
    let mut at = off.clone();
    let mut mem = vec![0u64; cmap.len()];
    for (v, &c) in cmap.iter().enumerate() {
        mem[at[c as usize] as usize] = v as u64;
        at[c as usize] += 1;
    }
    (off, mem)
}

/// The coarse graph: vertex weights summed, parallel edges merged with
/// their weights summed, edges inside a cluster dropped.
fn contract(g: View<'_>, cmap: &[u64], nc: usize) -> Level {
    let ncon = g.ncon;
    let (off, mem) = members(cmap, nc);
    let chunk = (nc / (rayon::current_num_threads() * 8)).clamp(1, 1 << 16);
    let parts: Vec<(Vec<u64>, Vec<u64>, Vec<u64>, Vec<i64>)> = (0..nc)
        .collect::<Vec<_>>()
        .par_chunks(chunk)
        .map(|cs| {
            let (mut deg, mut adj, mut adjw) = (Vec::new(), Vec::new(), Vec::new());
            let mut vw = vec![0i64; cs.len() * ncon];
            let mut buf: Vec<(u64, u64)> = Vec::new();
            for (i, &c) in cs.iter().enumerate() {
                buf.clear();
                for &v in &mem[off[c] as usize..off[c + 1] as usize] {
                    let v = v as usize;
                    buf.extend(g.edges(v).map(|(u, w)| (cmap[u as usize], w)));
                    let row = &mut vw[i * ncon..(i + 1) * ncon];
                    row.iter_mut().zip(g.w(v)).for_each(|(s, x)| *s += x);
                }
                buf.sort_unstable_by_key(|e| e.0);
                let before = adj.len();
                for &(u, w) in buf.iter().filter(|e| e.0 != c as u64) {
                    if adj.len() > before && *adj.last().unwrap_or(&u64::MAX) == u {
                        *adjw.last_mut().unwrap_or(&mut 0) += w;
                    } else {
                        adj.push(u);
                        adjw.push(w);
                    }
                }
                deg.push((adj.len() - before) as u64);
            }
            (deg, adj, adjw, vw)
        })
        .collect();
    concat(parts, nc, ncon)
}

fn concat(parts: Vec<(Vec<u64>, Vec<u64>, Vec<u64>, Vec<i64>)>, nc: usize, ncon: usize) -> Level {
    let mut xadj = Vec::with_capacity(nc + 1);
    xadj.push(0u64);
    let m: usize = parts.iter().map(|p| p.1.len()).sum();
    let (mut adj, mut adjw) = (Vec::with_capacity(m), Vec::with_capacity(m));
    let mut vwgt = Vec::with_capacity(nc * ncon);
    for (deg, a, w, vw) in parts {
        for d in deg {
            let last = *xadj.last().unwrap_or(&0);
            xadj.push(last + d);
        }
        adj.extend_from_slice(&a);
        adjw.extend_from_slice(&w);
        vwgt.extend_from_slice(&vw);
    }
    Level {
        xadj,
        adj,
        adjw,
        vwgt,
        ncon,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_merges_parallel_edges_and_weights() {
        // Path 0-1-2-3, clusters {0,1} {2,3}: one edge of weight 1.
        let xadj = [0u64, 1, 3, 5, 6];
        let adj = [1u64, 0, 2, 1, 3, 2];
        let vwgt = [1i64, 2, 3, 4];
        let g = View {
            xadj: &xadj,
            adj: &adj,
            adjw: None,
            vwgt: &vwgt,
            ncon: 1,
        };
        let l = contract(g, &[0, 0, 1, 1], 2);
        assert_eq!(l.xadj, vec![0, 1, 2]);
        assert_eq!(l.adj, vec![1, 0]);
        assert_eq!(l.adjw, vec![1, 1]);
        assert_eq!(l.vwgt, vec![3, 7]);
    }

    #[test]
    fn clusters_respect_the_weight_limit_and_shrink() {
        // A star of 100 leaves: the hub's cluster stops at the limit, the
        // rest of the leaves group together.
        let n = 101usize;
        let mut xadj = vec![0u64, 100];
        let mut adj: Vec<u64> = (1..=100).collect();
        for v in 1..n as u64 {
            adj.push(0);
            xadj.push(xadj[v as usize] + 1);
        }
        let vwgt = vec![1i64; n];
        let g = View {
            xadj: &xadj,
            adj: &adj,
            adjw: None,
            vwgt: &vwgt,
            ncon: 1,
        };
        let (level, cmap) = coarsen(g, &[10], 1);
        assert!(level.n_vertices() <= 12, "{} clusters", level.n_vertices());
        assert!(level.vwgt.iter().all(|&w| w <= 10));
        assert_eq!(level.vwgt.iter().sum::<i64>(), 101);
        assert_eq!(cmap.len(), n);
    }

    impl Level {
        fn n_vertices(&self) -> usize {
            self.xadj.len() - 1
        }
    }
}
