//! What building one part costs in memory beyond the edges it is given:
//! `shuffle::build_partition` turns the owned edges' lists into the part's
//! in place, so a DistParMETIS rank holds its received edges (24 bytes
//! each) and not a second and third copy while it builds its part. Counted
//! with a global allocator that tracks the bytes live.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use dgl_partition::model::{EdgeType, InputGraph, NodeType};
use dgl_partition::shuffle::part::inner_nodes;
use dgl_partition::shuffle::{build_partition, owned_edges, IdMaps};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

struct Counting;

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::SeqCst) + by;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Counted as the size change: a large block grows in place (mremap).
        if new_size >= layout.size() {
            grew(new_size - layout.size());
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::SeqCst);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn etype(rng: &mut Lcg, ends: (usize, usize), counts: (u64, u64), m: usize) -> EdgeType {
    EdgeType {
        src_type: ends.0,
        rel: format!("r{}{}", ends.0, ends.1),
        dst_type: ends.1,
        src: (0..m).map(|_| rng.below(counts.0)).collect(),
        dst: (0..m).map(|_| rng.below(counts.1)).collect(),
        ..Default::default()
    }
}

/// 200 k nodes and 2 M edges: one type, or two node and three edge types.
fn graph(hetero: bool) -> InputGraph {
    let mut rng = Lcg(11);
    let node = |name: &str, count| NodeType {
        name: name.into(),
        count,
        ..Default::default()
    };
    if !hetero {
        return InputGraph {
            name: "g".into(),
            ntypes: vec![node("_N", 200_000)],
            etypes: vec![etype(&mut rng, (0, 0), (200_000, 200_000), 2_000_000)],
        };
    }
    let (a, b) = (150_000, 50_000);
    InputGraph {
        name: "g".into(),
        ntypes: vec![node("item", a), node("user", b)],
        etypes: vec![
            etype(&mut rng, (1, 0), (b, a), 1_000_000),
            etype(&mut rng, (0, 1), (a, b), 700_000),
            etype(&mut rng, (1, 1), (b, b), 300_000),
        ],
    }
}

/// Part 0 of 4 is built with at most 2 bytes per owned edge, 12 per node
/// (the halo bitmap, ids and types) and one later edge type's list (8 per
/// edge of it, held twice while it is appended) beyond the edges given;
/// building beside the given lists (two more endpoint lists and a
/// transient one, as before) would take about 40 per edge.
#[test]
fn a_part_is_built_in_place_of_its_owned_edges() {
    for hetero in [false, true] {
        let g = graph(hetero);
        let mut rng = Lcg(5);
        let parts: Vec<u32> = (0..g.num_nodes()).map(|_| rng.below(4) as u32).collect();
        let ids = IdMaps::for_graph(&g, &parts, 4).unwrap();
        let inner = inner_nodes(&ids, &parts, 0);
        let edges = owned_edges(&g, &parts, 0);
        let owned: usize = edges.iter().map(|o| o.eids.len()).sum();
        // A later edge type's list is held twice while it is appended.
        let later = edges
            .iter()
            .skip(1)
            .map(|o| o.eids.len())
            .max()
            .unwrap_or(0);
        PEAK.store(LIVE.load(Ordering::SeqCst), Ordering::SeqCst);
        let before = LIVE.load(Ordering::SeqCst);
        let part = build_partition(&g, &ids, 0, inner, edges).unwrap();
        let extra = PEAK.load(Ordering::SeqCst) - before;
        assert_eq!(part.num_edges() as usize, owned);
        eprintln!(
            "hetero {hetero}: {extra} bytes beyond the {owned} edges given ({:.2} per edge)",
            extra as f64 / owned as f64
        );
        let bound = 2 * owned + 8 * later + 12 * g.num_nodes() as usize;
        assert!(
            extra <= bound,
            "hetero {hetero}: building part 0 took {extra} bytes beyond its {owned} edges \
             ({:.1} per edge; bound {bound})",
            extra as f64 / owned as f64
        );
    }
}
