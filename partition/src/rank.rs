//! One rank of partition mode DistParMETIS: `mpirun` starts one per worker,
//! rank `r` of `n` makes partition `r` of `n` on its own disk.
//!
//! 1. every rank reads its share of the chunked input ([`input::read_share`]:
//!    contiguous chunks, global node counts) and the ranks check that they
//!    read the same graph description;
//! 2. the ranks assign together with [`assign::distributed`], each holding
//!    the adjacency of the nodes whose rows it read (with ghosts for their
//!    neighbours elsewhere); rank 0 writes the assignment in DGL's format. With `--gather-structure`
//!    ([`crate::config::OwnPart`]) the structure (per-type src/dst ids of
//!    every edge, plus the balance mask and node weights when the
//!    constraints need them) is gathered on rank 0 instead, which builds
//!    the adjacency and assigns exactly as [`crate::run`] does (same
//!    partitioners, constraints and seed: same assignment);
//! 3. every rank holds the whole assignment (gathered, or broadcast from
//!    rank 0); every rank counts the edges it read per
//!    (edge type, owner), the counts are summed, and every rank builds the
//!    same [`IdMaps`];
//! 4. edges (with their per-type edge ids) and node / edge feature rows go
//!    to their owners in one alltoallv each; shares are contiguous and in
//!    rank order, so what a rank receives is already in original-id order;
//! 5. rank `r` builds and writes `part<r>/` (features and graph.dgl,
//!    natively) through a staging folder, then after a barrier every rank writes the partition JSON
//!    (identical everywhere), last.
//!
//! Every rank holds the assignment and the id maps (12 bytes per node) and
//! its share; only with `--gather-structure` does rank 0 hold the whole
//! structure (16 bytes per edge, plus the adjacency), as the single-process
//! pipeline does.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::time::Instant;

use crate::assign::distributed::log_memory;
use crate::assign::{self, Assignment, Partitioner, Quality, Request};
use crate::config::{Config, OwnPart};
use crate::exchange::{edges_to_owners, Buckets, Exchange, Received};
use crate::input::{self, Share};
use crate::model::{EdgeType, InputGraph, NodeType, Tensor};
use crate::output::files::{dir_bytes, prepare_out, write_assignment, write_json, Staging};
use crate::output::json::{part_dir, PartitionJson};
use crate::output::write_owned_part;
use crate::report::{Report, Written};
use crate::shuffle::part::inner_nodes;
use crate::shuffle::{build_partition, count_owned_edges, IdMaps, OwnedEdges};
use crate::shuffle_write::{self, PartSummary};
use crate::{csr, Error, Result};

/// Runs rank `ex.rank()` of `ex.size()`. Every rank must call it (it is a
/// sequence of collectives); on an error the caller ends the whole job (the
/// other ranks would wait forever).
///
/// The exchange is used from the calling thread only (MPI's `FUNNELED`):
/// the parallel steps run on rayon's global pool (whose size the caller
/// sets) or on pools of `cfg.threads` of their own.
pub fn run<E: Exchange>(ex: &E, cfg: &Config<OwnPart>) -> Result<Report> {
    let (rank, world) = (ex.rank(), ex.size());
    let mut report = Report::default();
    // Before the first collective: no rank can have written the new JSON yet.
    let json = prepare_out(&cfg.out_dir, &cfg.graph_name)?;
    let share = report.stages.timed("read", || {
        input::read_share(&cfg.source, rank, world, cfg.threads)
    })?;
    report.fetched = share.fetched;
    shuffle_write::validate_names(&share.graph, &cfg.graph_name)?;
    let edge_counts = report.stages.timed("check", || check_shares(ex, &share))?;
    report.num_nodes = share.graph.num_nodes();
    report.num_edges = edge_counts.iter().sum();
    let (assignment, quality) = report.stages.timed("assign", || {
        if cfg.driver.gather_structure {
            assign_on_root(ex, cfg, &share)
        } else {
            assign_distributed(ex, cfg, &share)
        }
    })?;
    report.quality = quality;
    let ids = report.stages.timed("ids", || {
        let owned = count_owned_edges(&share.graph, &assignment.parts, world)?;
        let flat: Vec<u64> = owned.concat();
        let all = ex.allgather(&flat)?;
        let mut sum = vec![0u64; flat.len()];
        for chunk in all.chunks(flat.len().max(1)) {
            sum.iter_mut().zip(chunk).for_each(|(s, c)| *s += c);
        }
        let owned: Vec<Vec<u64>> = sum.chunks(world as usize).map(<[u64]>::to_vec).collect();
        let g = &share.graph;
        let counts: Vec<u64> = g.ntypes.iter().map(|t| t.count).collect();
        let ends = g.etypes.iter().map(|e| (e.src_type, e.dst_type)).collect();
        IdMaps::new(&counts, ends, &assignment.parts, world, &owned)
    })?;
    let (local, edges) = report
        .stages
        .timed("exchange", || exchange(ex, share, &assignment.parts, &ids))?;
    log_memory(rank, "exchanged");
    let part = report.stages.timed("write part", || {
        write_own_part(cfg, rank, &local, &ids, &assignment.parts, edges)
    })?;
    log_memory(rank, "part written");
    // Every part is in place on every worker before any JSON exists.
    ex.barrier()?;
    report.stages.timed("write json", || {
        let doc = PartitionJson {
            graph_name: &cfg.graph_name,
            part_method: &assignment.algo_name,
            graph: &local,
            ids: &ids,
        };
        let tmp = cfg
            .out_dir
            .join(format!(".{}.json.rank{rank}.tmp", cfg.graph_name));
        write_json(&tmp, &json, &doc.render())
    })?;
    report.written = Written::Own { world, part, json };
    Ok(report)
}

/// What every rank must agree on: types, counts, feature names, dtypes and
/// row shapes (metadata.json may differ between workers' images).
fn fingerprint(g: &InputGraph) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    let tensor = |h: &mut std::hash::DefaultHasher, x: &Tensor| {
        format!("{:?}", x.dtype).hash(h);
        x.shape.get(1..).hash(h);
    };
    for t in &g.ntypes {
        (&t.name, t.count).hash(&mut h);
        for (name, x) in &t.data {
            name.hash(&mut h);
            tensor(&mut h, x);
        }
        if let Some(w) = &t.weights {
            tensor(&mut h, w);
        }
    }
    for e in &g.etypes {
        (e.src_type, &e.rel, e.dst_type).hash(&mut h);
        for (name, x) in &e.data {
            name.hash(&mut h);
            tensor(&mut h, x);
        }
    }
    h.finish()
}

/// Checks that every rank read the same description and that the shares'
/// edges follow each other; returns the global edge count per type.
fn check_shares<E: Exchange>(ex: &E, share: &Share) -> Result<Vec<u64>> {
    let g = &share.graph;
    let mine = [fingerprint(g), g.etypes.len() as u64];
    let all = ex.allgather(&mine)?;
    if let Some(r) = all.chunks(2).position(|c| c != all[..2].as_ref()) {
        return Err(Error::Config(format!(
            "rank {r} read a different graph description than rank 0 (types, counts or features \
             differ): every worker must see the same metadata.json"
        )));
    }
    let n = g.etypes.len();
    let counts: Vec<u64> = g.etypes.iter().map(EdgeType::count).collect();
    let all = ex.allgather(&counts)?;
    let mut totals = vec![0u64; n];
    for (r, chunk) in all.chunks(n.max(1)).enumerate() {
        for (e, &c) in chunk.iter().enumerate() {
            if r == ex.rank() as usize && share.edge_first[e] != totals[e] {
                return Err(Error::Stage {
                    stage: "input",
                    message: format!(
                        "rank {r}'s edges of type {} start at {}, but the ranks before it read {}",
                        g.canonical_etype(e),
                        share.edge_first[e],
                        totals[e]
                    ),
                });
            }
            totals[e] += c;
        }
    }
    Ok(totals)
}

/// Assigns with every rank holding only its share
/// ([`assign::distributed`]); rank 0 writes the assignment files. The
/// quality is measured across ranks and reported by rank 0.
fn assign_distributed<E: Exchange>(
    ex: &E,
    cfg: &Config<OwnPart>,
    share: &Share,
) -> Result<(Assignment, Option<Quality>)> {
    let opts = assign::distributed::Options {
        method: &cfg.partitioner,
        balance_train: cfg.balance_train.as_deref(),
        balance_edges: cfg.balance_edges,
        seed: cfg.seed,
        coarse_nodes: 0,
        round_edges: 0,
    };
    let out = assign::distributed::assign(ex, share, &opts)?;
    tracing::info!(
        rank = ex.rank(),
        owned = out.owned,
        ghosts = out.ghosts,
        entries = out.entries,
        levels = ?out.levels,
        "distributed assignment"
    );
    if ex.rank() == 0 {
        write_assignment(&cfg.out_dir, &out.assignment, &share.graph)?;
    }
    let quality = (ex.rank() == 0).then_some(out.quality);
    Ok((out.assignment, quality))
}

/// Gathers the structure on rank 0, assigns there, and broadcasts the
/// assignment; the quality is rank 0's.
fn assign_on_root<E: Exchange>(
    ex: &E,
    cfg: &Config<OwnPart>,
    share: &Share,
) -> Result<(Assignment, Option<Quality>)> {
    let skeleton = gather_structure(ex, cfg, &share.graph)?;
    let (mut parts, mut name, mut quality) = (Vec::new(), Vec::new(), None);
    if let Some(g) = skeleton {
        let adjacency = csr::symmetric(&g, cfg.threads);
        let req = Request {
            graph: &g,
            csr: &adjacency,
            num_parts: ex.size(),
            balance_train: cfg.balance_train.as_deref(),
            balance_edges: cfg.balance_edges,
            threads: cfg.threads,
            seed: cfg.seed,
        };
        let a = cfg.partitioner.assign(&req)?;
        if a.num_parts != ex.size() || a.parts.len() as u64 != g.num_nodes() {
            return Err(Error::Config(format!(
                "the assignment has {} parts for {} nodes; the job has {} ranks and {} nodes",
                a.num_parts,
                a.parts.len(),
                ex.size(),
                g.num_nodes()
            )));
        }
        quality = Some(req.quality(&a)?);
        drop(adjacency);
        write_assignment(&cfg.out_dir, &a, &g)?;
        (parts, name) = (a.parts, a.algo_name.into_bytes());
    }
    ex.broadcast(0, &mut parts)?;
    ex.broadcast(0, &mut name)?;
    let algo_name = String::from_utf8(name).map_err(|_| Error::Stage {
        stage: "assign",
        message: "rank 0 sent a partition method name that is not UTF-8".into(),
    })?;
    let assignment = Assignment {
        num_parts: ex.size(),
        parts,
        algo_name,
    };
    Ok((assignment, quality))
}

/// Rank 0's copy of the graph without features: every edge, plus what the
/// balance constraints read (the training mask, node weights). `None` on
/// the other ranks.
fn gather_structure<E: Exchange>(
    ex: &E,
    cfg: &Config<OwnPart>,
    g: &InputGraph,
) -> Result<Option<InputGraph>> {
    let root = ex.rank() == 0;
    let mut out = root.then(|| InputGraph {
        name: g.name.clone(),
        ntypes: g
            .ntypes
            .iter()
            .map(|t| NodeType {
                name: t.name.clone(),
                count: t.count,
                ..Default::default()
            })
            .collect(),
        etypes: g
            .etypes
            .iter()
            .map(|e| EdgeType {
                src_type: e.src_type,
                rel: e.rel.clone(),
                dst_type: e.dst_type,
                ..Default::default()
            })
            .collect(),
    });
    for (e, et) in g.etypes.iter().enumerate() {
        let src = ex.gatherv(0, &et.src)?;
        let dst = ex.gatherv(0, &et.dst)?;
        if let (Some(o), Some(src), Some(dst)) = (out.as_mut(), src, dst) {
            (o.etypes[e].src, o.etypes[e].dst) = (src.into_data(), dst.into_data());
        }
    }
    for (t, nt) in g.ntypes.iter().enumerate() {
        let mask = cfg
            .balance_train
            .as_ref()
            .and_then(|f| nt.data.get(f).map(|x| (f, x)));
        if let Some((name, x)) = mask {
            if let (Some(o), Some(x)) = (out.as_mut(), gather_tensor(ex, x, nt.count)?) {
                o.ntypes[t].data.insert(name.clone(), x);
            }
        }
        if let Some(w) = &nt.weights {
            if let (Some(o), Some(w)) = (out.as_mut(), gather_tensor(ex, w, nt.count)?) {
                o.ntypes[t].weights = Some(w);
            }
        }
    }
    Ok(out)
}

/// Every rank's rows of `x`, in rank order, on rank 0.
fn gather_tensor<E: Exchange>(ex: &E, x: &Tensor, count: u64) -> Result<Option<Tensor>> {
    let rb = x.row_bytes() as u64;
    Ok(ex.gatherv(0, &x.data)?.map(|b| {
        let data = b.into_data();
        let mut shape = x.shape.clone();
        // Rows of no bytes: the count is all there is to know.
        shape[0] = (data.len() as u64).checked_div(rb).unwrap_or(count);
        Tensor {
            dtype: x.dtype,
            shape,
            data,
        }
    }))
}

/// Sends every edge and feature row of `share` to its owner; returns this
/// rank's graph (global counts, only its own feature rows, in part order)
/// and its owned edges per type.
fn exchange<E: Exchange>(
    ex: &E,
    share: Share,
    parts: &[u32],
    ids: &IdMaps,
) -> Result<(InputGraph, Vec<OwnedEdges>)> {
    let (rank, world) = (ex.rank() as usize, ex.size());
    let offsets = share.graph.node_offsets();
    let mut local = InputGraph {
        name: share.graph.name.clone(),
        ..Default::default()
    };
    for (t, mut nt) in share.graph.ntypes.into_iter().enumerate() {
        let data = std::mem::take(&mut nt.data);
        let first = offsets[t] + share.node_first[t];
        let rows = data.values().next().map_or(0, Tensor::rows);
        let dest = &parts[first as usize..(first + rows) as usize];
        let (s, e) = ids.node_map[t][rank];
        nt.data = move_features(ex, data, dest, world, e - s)?;
        nt.weights = None;
        local.ntypes.push(nt);
    }
    let mut owned = Vec::new();
    for (e, mut et) in share.graph.etypes.into_iter().enumerate() {
        let off = offsets[et.dst_type] as usize;
        let dest: Vec<u32> = et.dst.iter().map(|&d| parts[off + d as usize]).collect();
        let (src, dst) = (std::mem::take(&mut et.src), std::mem::take(&mut et.dst));
        // In rounds, the lists released as they go: one copy of the edges.
        let got = edges_to_owners(ex, share.edge_first[e], src, dst, &dest, EDGE_ROUND)?;
        owned.push(split_edges(got, &local, &et)?);
        let (s, end) = ids.edge_map[e][rank];
        let data = std::mem::take(&mut et.data);
        et.data = move_features(ex, data, &dest, world, end - s)?;
        local.etypes.push(et);
    }
    Ok((local, owned))
}

/// Edges per round of the exchange (24 bytes each sent, as many received).
const EDGE_ROUND: usize = 1 << 21;

/// Received `[eid, src, dst]` rows as owned edges, checked to be in edge id
/// order (the feature rows arrive in the same order).
fn split_edges(got: Received, g: &InputGraph, et: &EdgeType) -> Result<OwnedEdges> {
    let o = OwnedEdges {
        eids: got.eids,
        src: got.src,
        dst: got.dst,
    };
    if !o.eids.windows(2).all(|w| w[0] < w[1]) {
        let name = format!(
            "{}:{}:{}",
            g.ntypes[et.src_type].name, et.rel, g.ntypes[et.dst_type].name
        );
        return Err(Error::Stage {
            stage: "exchange",
            message: format!(
                "the edges of type {name} arrived out of id order (overlapping shares)"
            ),
        });
    }
    Ok(o)
}

/// Sends row `i` of every tensor to rank `dest[i]`; the received tensors
/// must have `expect` rows (this rank's part of the type).
fn move_features<E: Exchange>(
    ex: &E,
    data: BTreeMap<String, Tensor>,
    dest: &[u32],
    world: u32,
    expect: u64,
) -> Result<BTreeMap<String, Tensor>> {
    let mut out = BTreeMap::new();
    for (name, x) in data {
        let rb = x.row_bytes();
        let (dtype, mut shape) = (x.dtype, x.shape.clone());
        shape[0] = expect;
        let data = if rb == 0 {
            Vec::new()
        } else {
            let send = Buckets::by_destination(&x.data, rb, dest, world)?;
            drop(x);
            ex.alltoallv(&send)?.into_data()
        };
        if data.len() as u64 != expect * rb as u64 {
            return Err(Error::Stage {
                stage: "exchange",
                message: format!(
                    "feature {name}: received {} bytes, expected {expect} rows of {rb} bytes",
                    data.len()
                ),
            });
        }
        out.insert(name, Tensor { dtype, shape, data });
    }
    Ok(out)
}

/// Builds and writes `part<rank>/` (features and graph.dgl, natively) into
/// a staging folder and moves it into place.
fn write_own_part(
    cfg: &Config<OwnPart>,
    rank: u32,
    local: &InputGraph,
    ids: &IdMaps,
    parts: &[u32],
    edges: Vec<OwnedEdges>,
) -> Result<PartSummary> {
    let t = Instant::now();
    let inner = inner_nodes(ids, parts, rank);
    let part = build_partition(local, ids, rank, inner, edges)?;
    log_memory(rank, "part built");
    let build = t.elapsed();
    let staging = Staging::create(&cfg.out_dir, &format!("{}.rank{rank}", cfg.graph_name))?;
    let dir = staging.dir.join(part_dir(rank));
    write_owned_part(local, &part, &dir, true)?;
    let bytes = dir_bytes(&dir)?;
    staging.move_parts(&cfg.out_dir, &[rank])?;
    staging.finish()?;
    Ok(PartSummary {
        part: rank,
        inner_nodes: part.num_inner(),
        halo_nodes: part.halo.len() as u64,
        edges: part.num_edges(),
        bytes,
        build,
        write: t.elapsed() - build,
    })
}
