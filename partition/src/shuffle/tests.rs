//! Properties of the shuffle on random graphs, and the feature files read
//! back byte by byte.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::model::{DType, EdgeType, InputGraph, NodeType, Tensor};
use crate::output::write_part;
use crate::Error;

/// splitmix64: small, seedable, good enough for test graphs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn f32_tensor(rows: u64, cols: u64, f: impl Fn(u64, u64) -> f32) -> Tensor {
    let mut data = Vec::new();
    for r in 0..rows {
        for c in 0..cols {
            data.extend_from_slice(&f(r, c).to_le_bytes());
        }
    }
    Tensor {
        dtype: DType::F32,
        shape: vec![rows, cols],
        data,
    }
}

fn i64_tensor(v: impl Iterator<Item = i64>) -> Tensor {
    let data: Vec<u8> = v.flat_map(|x| x.to_le_bytes()).collect();
    Tensor {
        dtype: DType::I64,
        shape: vec![data.len() as u64 / 8],
        data,
    }
}

/// Node features identify their node: feat[r] = [type, r, 0.5].
fn node_type(name: &str, t: usize, count: u64) -> NodeType {
    let mut data = BTreeMap::new();
    data.insert(
        "feat".into(),
        f32_tensor(count, 3, |r, c| [t as f32, r as f32, 0.5][c as usize]),
    );
    data.insert("label".into(), i64_tensor((0..count as i64).map(|r| r * 7)));
    NodeType {
        name: name.into(),
        count,
        data,
        weights: None,
    }
}

fn edge_type(
    rng: &mut Rng,
    ends: (usize, usize),
    rel: &str,
    counts: (u64, u64),
    max_m: u64,
) -> EdgeType {
    let m = rng.below(max_m);
    let src = (0..m).map(|_| rng.below(counts.0)).collect();
    let dst = (0..m).map(|_| rng.below(counts.1)).collect();
    let mut data = BTreeMap::new();
    data.insert("w".into(), i64_tensor((0..m as i64).map(|e| 1000 + e)));
    EdgeType {
        src_type: ends.0,
        rel: rel.into(),
        dst_type: ends.1,
        src,
        dst,
        data,
    }
}

fn random_graph(seed: u64, hetero: bool) -> InputGraph {
    let mut rng = Rng(seed);
    if !hetero {
        let n = 20 + rng.below(60);
        let e = edge_type(&mut rng, (0, 0), "_E", (n, n), 300);
        return InputGraph {
            name: "g".into(),
            ntypes: vec![node_type("_N", 0, n)],
            etypes: vec![e],
        };
    }
    let counts = [10 + rng.below(40), 1 + rng.below(30), rng.below(3)];
    let ntypes = ["item", "user", "rare"]
        .iter()
        .enumerate()
        .map(|(t, n)| node_type(n, t, counts[t]))
        .collect();
    let mut etypes = vec![
        edge_type(&mut rng, (1, 0), "buys", (counts[1], counts[0]), 200),
        edge_type(&mut rng, (0, 1), "bought-by", (counts[0], counts[1]), 200),
        edge_type(&mut rng, (1, 1), "follows", (counts[1], counts[1]), 100),
    ];
    if counts[2] > 0 {
        etypes.push(edge_type(
            &mut rng,
            (2, 0),
            "tags",
            (counts[2], counts[0]),
            20,
        ));
    }
    InputGraph {
        name: "g".into(),
        ntypes,
        etypes,
    }
}

fn random_parts(seed: u64, n: u64, num_parts: u32) -> Vec<u32> {
    let mut rng = Rng(seed ^ 0xABCD);
    (0..n).map(|_| rng.below(num_parts as u64) as u32).collect()
}

/// (graph, parts, num_parts) over seeds, both kinds, 1 to 5 parts.
fn cases() -> Vec<(InputGraph, Vec<u32>, u32)> {
    let mut out = Vec::new();
    for seed in 0..12u64 {
        let g = random_graph(seed, seed % 2 == 1);
        let num_parts = 1 + (seed % 5) as u32;
        let parts = random_parts(seed, g.num_nodes(), num_parts);
        out.push((g, parts, num_parts));
    }
    out
}

fn all_partitions(g: &InputGraph, parts: &[u32], ids: &IdMaps) -> Vec<Partition> {
    (0..ids.num_parts)
        .map(|p| {
            let inner = part::inner_nodes(ids, parts, p);
            build_partition(g, ids, p, inner, owned_edges(g, parts, p)).unwrap()
        })
        .collect()
}

/// Flattened part-major ranges must tile [0, total) in order.
fn assert_tiles(map: &[Vec<(u64, u64)>], num_parts: u32, total: u64) {
    let mut at = 0;
    for p in 0..num_parts as usize {
        for ranges in map {
            assert_eq!(ranges[p].0, at, "ranges are contiguous and part-major");
            assert!(ranges[p].1 >= ranges[p].0);
            at = ranges[p].1;
        }
    }
    assert_eq!(at, total);
}

#[test]
fn every_node_has_one_shuffled_id_in_its_part_and_type_range() {
    for (g, parts, num_parts) in cases() {
        let ids = IdMaps::for_graph(&g, &parts, num_parts).unwrap();
        assert_tiles(&ids.node_map, num_parts, g.num_nodes());
        assert_tiles(&ids.edge_map, num_parts, g.num_edges());
        let mut seen = vec![false; g.num_nodes() as usize];
        let mut last: BTreeMap<(u32, usize), u64> = BTreeMap::new();
        let offsets = g.node_offsets();
        for orig in 0..g.num_nodes() {
            let s = ids.shuffled_nid(orig);
            assert!(
                !std::mem::replace(&mut seen[s as usize], true),
                "shuffled ids are unique"
            );
            let t = offsets.partition_point(|&o| o <= orig) - 1;
            let p = parts[orig as usize];
            let (lo, hi) = ids.node_map[t][p as usize];
            assert!(
                lo <= s && s < hi,
                "node {orig} lands in its (part, type) range"
            );
            assert_eq!(ids.locate(s), (p, t));
            if let Some(prev) = last.insert((p, t), s) {
                assert!(prev < s, "original order is kept inside (part, type)");
            }
        }
    }
}

#[test]
fn every_edge_is_owned_once_by_its_destinations_part() {
    for (g, parts, num_parts) in cases() {
        let ids = IdMaps::for_graph(&g, &parts, num_parts).unwrap();
        let mut seen = BTreeSet::new();
        for part in all_partitions(&g, &parts, &ids) {
            let p = part.part as usize;
            assert_eq!(part.edge_start, ids.part_edges[p]);
            for (e, eids) in part.eids.iter().enumerate() {
                let (lo, hi) = ids.edge_map[e][p];
                assert_eq!(eids.len() as u64, hi - lo);
                assert!(
                    eids.windows(2).all(|w| w[0] < w[1]),
                    "original order inside (part, etype)"
                );
                for &eid in eids {
                    assert!(seen.insert((e, eid)), "edge ({e}, {eid}) owned twice");
                    let d = g.node_offsets()[g.etypes[e].dst_type] + g.etypes[e].dst[eid as usize];
                    assert_eq!(
                        parts[d as usize], part.part,
                        "owned by its destination's part"
                    );
                }
            }
        }
        assert_eq!(seen.len() as u64, g.num_edges());
    }
}

/// Shuffled id of part-local node `i`.
fn global_of(part: &Partition, i: u64) -> u64 {
    let n = part.num_inner();
    if i < n {
        part.node_start + i
    } else {
        part.halo[(i - n) as usize]
    }
}

#[test]
fn local_endpoints_halo_nodes_and_edge_order_are_right() {
    for (g, parts, num_parts) in cases() {
        let ids = IdMaps::for_graph(&g, &parts, num_parts).unwrap();
        let offsets = g.node_offsets();
        for part in all_partitions(&g, &parts, &ids) {
            let mut j = 0;
            let mut want_halo = BTreeSet::new();
            for (e, eids) in part.eids.iter().enumerate() {
                let et = &g.etypes[e];
                for &eid in eids {
                    let s = ids.shuffled_nid(offsets[et.src_type] + et.src[eid as usize]);
                    let d = ids.shuffled_nid(offsets[et.dst_type] + et.dst[eid as usize]);
                    assert_eq!(global_of(&part, part.src[j]), s);
                    assert_eq!(global_of(&part, part.dst[j]), d);
                    assert!(part.dst[j] < part.num_inner(), "destinations are inner");
                    if ids.locate(s).0 != part.part {
                        want_halo.insert(s);
                    }
                    j += 1;
                }
            }
            assert_eq!(j as u64, part.num_edges(), "edges are etype-major");
            assert_eq!(part.halo, want_halo.into_iter().collect::<Vec<_>>());
            for (h, &t) in part.halo.iter().zip(&part.halo_types) {
                assert_eq!(ids.locate(*h).1, t as usize);
            }
        }
    }
}

#[test]
fn edges_given_in_any_order_build_the_same_partition() {
    let g = random_graph(5, true);
    let parts = random_parts(5, g.num_nodes(), 3);
    let ids = IdMaps::for_graph(&g, &parts, 3).unwrap();
    for p in 0..3 {
        let inner = part::inner_nodes(&ids, &parts, p);
        let want = build_partition(&g, &ids, p, inner.clone(), owned_edges(&g, &parts, p)).unwrap();
        let reversed = owned_edges(&g, &parts, p)
            .into_iter()
            .map(|mut o| {
                o.eids.reverse();
                o.src.reverse();
                o.dst.reverse();
                o
            })
            .collect();
        assert_eq!(build_partition(&g, &ids, p, inner, reversed).unwrap(), want);
    }
}

#[test]
fn bad_assignments_and_endpoints_are_errors() {
    let g = random_graph(3, true);
    let mut parts = random_parts(3, g.num_nodes(), 2);
    let err = IdMaps::for_graph(&g, &parts[1..], 2).unwrap_err();
    assert!(
        matches!(err, Error::Config(ref m) if m.contains("entries")),
        "{err}"
    );
    parts[4] = 7;
    let err = IdMaps::for_graph(&g, &parts, 2).unwrap_err();
    assert!(
        err.to_string().contains("node 4 is assigned to part 7"),
        "{err}"
    );
    assert!(IdMaps::for_graph(&g, &parts, 0).is_err());
    let mut g2 = g.clone();
    g2.etypes[0].dst[0] = 1_000_000;
    let err = IdMaps::for_graph(&g2, &random_parts(3, g.num_nodes(), 2), 2).unwrap_err();
    assert!(err.to_string().contains("destination 1000000"), "{err}");
    let mut g3 = g.clone();
    g3.etypes[0].src[0] = 1_000_000;
    let parts = random_parts(3, g.num_nodes(), 2);
    let ids = IdMaps::for_graph(&g3, &parts, 2).unwrap();
    let errs: Vec<_> = (0..2)
        .filter_map(|p| {
            let inner = part::inner_nodes(&ids, &parts, p);
            build_partition(&g3, &ids, p, inner, owned_edges(&g3, &parts, p)).err()
        })
        .collect();
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0]
            .to_string()
            .contains("edge 0 of type user:buys:item: source 1000000"),
        "{}",
        errs[0]
    );
}

#[test]
fn empty_parts_and_edge_types_get_empty_ranges() {
    let mut g = random_graph(1, true);
    g.etypes[2].src.clear();
    g.etypes[2].dst.clear();
    g.etypes[2].data.clear();
    let parts: Vec<u32> = (0..g.num_nodes())
        .map(|i| if i % 2 == 0 { 0 } else { 2 })
        .collect();
    let ids = IdMaps::for_graph(&g, &parts, 3).unwrap();
    assert_tiles(&ids.node_map, 3, g.num_nodes());
    assert!(
        ids.node_map.iter().all(|r| r[1].0 == r[1].1),
        "part 1 is empty"
    );
    let p1 = &all_partitions(&g, &parts, &ids)[1];
    assert_eq!((p1.num_nodes(), p1.num_edges()), (0, 0));
}

/// A `save_tensors` file read back: name -> (dlpack code, bits, shape, data).
type Tensors = BTreeMap<String, (u8, u8, Vec<u64>, Vec<u8>)>;

fn read_tensors(path: &std::path::Path) -> Tensors {
    let b = std::fs::read(path).unwrap();
    let mut at = 0;
    let mut take = |n: usize| {
        at += n;
        &b[at - n..at]
    };
    let u64_ = |s: &[u8]| u64::from_le_bytes(s.try_into().unwrap());
    assert_eq!(u64_(take(8)), 0xDD5A_9FBE_3FA2_443F);
    let n = u64_(take(8));
    assert_eq!(u64_(take(8)), n);
    let mut out = Tensors::new();
    for _ in 0..n {
        let len = u64_(take(8)) as usize;
        let name = String::from_utf8(take(len).to_vec()).unwrap();
        assert_eq!(u64_(take(8)), 0xDD5E_40F0_96B4_A13F);
        assert_eq!(take(16), [0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        let ndim = u32::from_le_bytes(take(4).try_into().unwrap()) as usize;
        let dt = take(4).to_vec();
        assert_eq!(&dt[2..], [1, 0], "one lane");
        let shape: Vec<u64> = (0..ndim).map(|_| u64_(take(8))).collect();
        let bytes = u64_(take(8)) as usize;
        assert_eq!(
            bytes as u64,
            shape.iter().product::<u64>() * dt[1] as u64 / 8
        );
        out.insert(name, (dt[0], dt[1], shape, take(bytes).to_vec()));
    }
    assert_eq!(at, b.len(), "nothing after the last tensor");
    out
}

fn ids_of(t: &(u8, u8, Vec<u64>, Vec<u8>)) -> Vec<u64> {
    assert_eq!((t.0, t.1), (0, 64), "int64");
    t.3.chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn feature_rows_and_original_ids_follow_their_node_and_edge() {
    let dir = tempfile::tempdir().unwrap();
    for (g, parts, num_parts) in cases() {
        let ids = IdMaps::for_graph(&g, &parts, num_parts).unwrap();
        for part in all_partitions(&g, &parts, &ids) {
            let pd = dir.path().join(format!("part{}", part.part));
            write_part(&g, &part, &pd, true).unwrap();
            let (nf, ef) = (
                read_tensors(&pd.join("node_feat.dgl")),
                read_tensors(&pd.join("edge_feat.dgl")),
            );
            let (on, oe) = (
                read_tensors(&pd.join("orig_nids.dgl")),
                read_tensors(&pd.join("orig_eids.dgl")),
            );
            assert_eq!(nf.len(), 2 * g.ntypes.len());
            for (t, nt) in g.ntypes.iter().enumerate() {
                assert_eq!(ids_of(&on[&nt.name]), part.inner[t]);
                for (f, x) in &nt.data {
                    let got = &nf[&format!("{}/{f}", nt.name)];
                    assert_eq!((got.0, got.1), x.dtype.dlpack());
                    assert_eq!(
                        got.3,
                        x.gather(&part.inner[t]).data,
                        "{}/{f} rows follow their node",
                        nt.name
                    );
                }
            }
            for e in 0..g.etypes.len() {
                let name = g.canonical_etype(e);
                assert_eq!(ids_of(&oe[&name]), part.eids[e]);
                assert_eq!(
                    ids_of(&ef[&format!("{name}/w")]),
                    part.eids[e].iter().map(|x| 1000 + x).collect::<Vec<_>>()
                );
            }
        }
    }
}

#[test]
fn npy_headers_are_aligned_and_describe_the_array() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.npy");
    let ids = [1u64, 2, 3];
    crate::output::tensors::write_npy(&path, &crate::output::tensors::Rows::Ids(&ids)).unwrap();
    let b = std::fs::read(&path).unwrap();
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    assert_eq!((10 + hlen) % 64, 0);
    let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
    assert!(
        header.starts_with("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }"),
        "{header}"
    );
    assert_eq!(b.len(), 10 + hlen + 24);
    assert_eq!(&b[10 + hlen..10 + hlen + 8], 1u64.to_le_bytes());
}
