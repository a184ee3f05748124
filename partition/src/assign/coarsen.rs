//! Parallel 64-bit coarsening for the multilevel partitioner: size-limited
//! label-propagation clustering (which shrinks power-law graphs far better
//! than matching, whose stars leave most leaves unmatched) followed by
//! contraction into a weighted graph. Deterministic for a seed whatever the
//! thread count: moves are chosen in parallel on a snapshot and applied in
//! vertex order. The rules a cluster follows (its weight limit, the best
//! linked cluster, the ties, grouping the vertices left alone) are shared
//! with the ranks' coarsening (`distributed::coarsen`).

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
        self.xadj.len().saturating_sub(1)
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

/// Label-propagation rounds per level: a third round (R-MAT 1M, 4 parts)
/// moved 10% of the vertices again for 1/3 more clustering time and no
/// better cut after refinement.
pub(crate) const ROUNDS: usize = 2;
/// Sub-rounds per round: later vertices see earlier ones' moves.
pub(crate) const BATCHES: usize = 8;

/// Coarsens `g` one level: returns the coarse graph and each vertex's
/// coarse vertex. `max_w` caps every cluster's weight per constraint.
pub fn coarsen(g: View<'_>, max_w: &[i64], seed: u64) -> (Level, Vec<u64>) {
    let t = std::time::Instant::now();
    let labels = cluster(g, max_w, seed);
    let t_cluster = t.elapsed().as_secs_f64();
    let (cmap, nc) = number_clusters(&labels);
    drop(labels);
    let level = contract(g, &cmap, nc);
    tracing::debug!(
        cluster = t_cluster,
        contract = t.elapsed().as_secs_f64() - t_cluster,
        "coarsen"
    );
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
        tracing::debug!(round, moved, "label propagation");
        if moved < n / 100 {
            break;
        }
    }
    let t = std::time::Instant::now();
    merge_singletons(g, &mut label, &size, max_w);
    tracing::debug!(secs = t.elapsed().as_secs_f64(), "merge singletons");
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

/// Whether a cluster of weights `cluster` has room for `add` under `max_w`.
pub(crate) fn fits(cluster: &[i64], add: &[i64], max_w: &[i64]) -> bool {
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
        .filter_map(|v| {
            let own = label[v];
            let room = |l: u64| {
                l != own
                    && fits(
                        &cw[l as usize * ncon..(l as usize + 1) * ncon],
                        g.w(v),
                        max_w,
                    )
            };
            let (best, own_r) = with_acc(label.len(), |acc| rate(g, v, label, acc, own, room));
            let (l, r) = best?;
            prefers(r, own_r, seed, own, l).then_some((v as u64, l))
        })
        .collect()
}

/// Whether a vertex of cluster `own` (connection `own_r`) moves to cluster
/// `to` (connection `r`): when more linked, and on ties by a seeded coin
/// so that equally linked neighbours still merge, one way only.
pub(crate) fn prefers(r: u64, own_r: u64, seed: u64, own: u64, to: u64) -> bool {
    r > own_r || (r == own_r && r > 0 && mix(seed ^ own) < mix(seed ^ to))
}

/// A sparse accumulator over keys `0..n`: the sums and the keys touched.
#[derive(Default)]
pub(crate) struct Acc {
    sum: Vec<u64>,
    touched: Vec<u64>,
}

impl Acc {
    fn add(&mut self, key: u64, w: u64) {
        let s = &mut self.sum[key as usize];
        if *s == 0 {
            self.touched.push(key);
        }
        *s += w;
    }

    /// The (key, sum) pairs in the order first touched; clears the rest.
    fn drain(&mut self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let sum = &mut self.sum;
        self.touched
            .drain(..)
            .map(move |k| (k, std::mem::take(&mut sum[k as usize])))
    }
}

thread_local! {
    static ACC: std::cell::RefCell<Acc> = std::cell::RefCell::default();
}

/// Runs `f` with this thread's accumulator, sized for keys `0..n`.
fn with_acc<R>(n: usize, f: impl FnOnce(&mut Acc) -> R) -> R {
    ACC.with(|a| {
        let mut a = a.borrow_mut();
        if a.sum.len() < n {
            a.sum.resize(n, 0);
        }
        f(&mut a)
    })
}

/// The heaviest linked cluster `allowed` accepts (ties: the lower id) and
/// the link to `own`.
fn rate(
    g: View<'_>,
    v: usize,
    label: &[u64],
    acc: &mut Acc,
    own: u64,
    allowed: impl Fn(u64) -> bool,
) -> (Option<(u64, u64)>, u64) {
    for (u, w) in g.edges(v) {
        acc.add(label[u as usize], w);
    }
    best_linked(acc.drain(), own, allowed)
}

/// Of the (cluster, connection) pairs `links`, the heaviest that `allowed`
/// accepts (ties: the lower id) and the connection to `own`.
pub(crate) fn best_linked(
    links: impl Iterator<Item = (u64, u64)>,
    own: u64,
    allowed: impl Fn(u64) -> bool,
) -> (Option<(u64, u64)>, u64) {
    let mut best: Option<(u64, u64)> = None;
    let mut own_r = 0;
    for (l, r) in links {
        if l == own {
            own_r = r;
        }
        let better = best.is_none_or(|(bl, br)| r > br || (r == br && l < bl));
        if better && allowed(l) {
            best = Some((l, r));
        }
    }
    (best, own_r)
}

/// Vertices left alone (stars' leaves whose hub cluster is full, isolated
/// vertices) are grouped by the cluster they like best, up to the limit:
/// two leaves of one hub have the same neighbourhood, so they belong
/// together.
fn merge_singletons(g: View<'_>, label: &mut [u64], size: &[u64], max_w: &[i64]) {
    let n = g.n();
    let mut alone: Vec<(u64, usize)> = (0..n)
        .into_par_iter()
        .filter(|&v| label[v] == v as u64 && size[v] == 1)
        .map(|v| {
            let own = v as u64;
            let (best, _) = with_acc(n, |acc| rate(g, v, label, acc, own, |l| l != own));
            (best.map_or(u64::MAX, |b| b.0), v)
        })
        .collect();
    alone.par_sort_unstable();
    group_alone(
        &alone,
        g.ncon,
        max_w,
        |v| g.w(v),
        |v| v as u64,
        |v, l| label[v] = l,
    );
}

/// Groups the vertices left alone, `alone` = (favourite cluster, vertex)
/// sorted: each run of one favourite joins its first vertex (cluster
/// `id(v)`) while the group has room; `join(v, l)` puts `v` in cluster `l`.
pub(crate) fn group_alone<'w>(
    alone: &[(u64, usize)],
    ncon: usize,
    max_w: &[i64],
    w: impl Fn(usize) -> &'w [i64],
    id: impl Fn(usize) -> u64,
    mut join: impl FnMut(usize, u64),
) {
    let mut group_w = vec![0i64; ncon];
    let mut leader: Option<(u64, u64)> = None;
    for &(fav, v) in alone {
        let w = w(v);
        match leader {
            Some((f, l)) if f == fav && fits(&group_w, w, max_w) => {
                join(v, l);
                group_w.iter_mut().zip(w).for_each(|(s, x)| *s += x);
            }
            _ => {
                leader = Some((fav, id(v)));
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
    let parts: Vec<Piece> = (0..nc)
        .collect::<Vec<_>>()
        .par_chunks(chunk)
        .map(|cs| {
            let (mut deg, mut adj, mut adjw) = (Vec::new(), Vec::new(), Vec::new());
            let mut vw = vec![0i64; cs.len() * ncon];
            for (i, &c) in cs.iter().enumerate() {
                let before = adj.len();
                with_acc(nc, |acc| {
                    for &v in &mem[off[c] as usize..off[c + 1] as usize] {
                        let v = v as usize;
                        for (u, w) in g.edges(v) {
                            acc.add(cmap[u as usize], w);
                        }
                        let row = &mut vw[i * ncon..(i + 1) * ncon];
                        row.iter_mut().zip(g.w(v)).for_each(|(s, x)| *s += x);
                    }
                    for (u, w) in acc.drain().filter(|e| e.0 != c as u64) {
                        adj.push(u);
                        adjw.push(w);
                    }
                });
                deg.push((adj.len() - before) as u64);
            }
            Piece { deg, adj, adjw, vw }
        })
        .collect();
    concat(parts, nc, ncon)
}

/// The coarse vertices of one chunk: degrees, edges, vertex weights.
struct Piece {
    deg: Vec<u64>,
    adj: Vec<u64>,
    adjw: Vec<u64>,
    vw: Vec<i64>,
}

fn concat(parts: Vec<Piece>, nc: usize, ncon: usize) -> Level {
    let mut xadj = Vec::with_capacity(nc + 1);
    xadj.push(0u64);
    let m: usize = parts.iter().map(|p| p.adj.len()).sum();
    let (mut adj, mut adjw) = (Vec::with_capacity(m), Vec::with_capacity(m));
    let mut vwgt = Vec::with_capacity(nc * ncon);
    for Piece {
        deg,
        adj: a,
        adjw: w,
        vw,
    } in parts
    {
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

    /// A graph of unit edges and one constraint.
    fn unweighted<'a>(xadj: &'a [u64], adj: &'a [u64], vwgt: &'a [i64]) -> View<'a> {
        View {
            xadj,
            adj,
            adjw: None,
            vwgt,
            ncon: 1,
        }
    }

    #[test]
    fn contract_merges_parallel_edges_and_weights() {
        // Path 0-1-2-3, clusters {0,1} {2,3}: one edge of weight 1.
        let xadj = [0u64, 1, 3, 5, 6];
        let adj = [1u64, 0, 2, 1, 3, 2];
        let vwgt = [1i64, 2, 3, 4];
        let g = unweighted(&xadj, &adj, &vwgt);
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
        let g = unweighted(&xadj, &adj, &vwgt);
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
