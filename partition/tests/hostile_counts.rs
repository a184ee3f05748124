//! Counts from other ranks' chunks (issue #36, item 7): a rank counts the
//! rows of the edge chunks before its share from their headers (npy) or
//! lines (csv). Those counts are checked like its own: an npy edge chunk
//! must be `[m, 2]` even when only its header is read, and the sum of the
//! chunks before a share is checked arithmetic (this binary is built with
//! overflow checks in `cargo test`: an unchecked `+` panics).

mod input_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use dgl_partition::input::{read_share, Source};
use input_common::save_json;
use serde_json::json;

/// Counts the largest single allocation of this test binary.
struct Counting;

static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        PEAK.fetch_max(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        PEAK.fetch_max(new_size, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// An `<i8` npy of `shape` whose data are `data` (little-endian i64s).
fn npy(path: &Path, shape: &str, data: &[i64]) {
    let mut dict = format!("{{'descr': '<i8', 'fortran_order': False, 'shape': {shape}, }}");
    dict.push_str(&" ".repeat(63 - (10 + dict.len()) % 64));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, out).unwrap();
}

/// Three edge chunks, no `num_edges_per_chunk` (so a rank counts the
/// chunks before its share from the files); chunks 0 and 1 as `hostile`
/// writes them, chunk 2 four valid edges.
fn three_chunks(dir: &Path, hostile: impl Fn(&Path)) -> Source {
    hostile(&dir.join("e0.npy"));
    hostile(&dir.join("e1.npy"));
    npy(&dir.join("e2.npy"), "(4, 2)", &[0, 1, 1, 2, 2, 3, 3, 0]);
    let meta = dir.join("metadata.json");
    save_json(
        &meta,
        &json!({
            "graph_name": "g",
            "node_type": ["_N"],
            "num_nodes_per_type": [4],
            "edge_type": ["_N:_E:_N"],
            "num_edges_per_type": [4],
            "edges": {"_N:_E:_N": {
                "format": {"name": "numpy"},
                "data": ["e0.npy", "e1.npy", "e2.npy"],
            }},
        }),
    );
    Source::Chunked { metadata: meta }
}

#[test]
fn a_header_of_2_pow_63_rows_and_no_columns_is_an_error_not_an_overflow() {
    let dir = tempfile::tempdir().unwrap();
    // (2**63, 0): 0 bytes of data, so its size matches the file.
    let source = three_chunks(dir.path(), |p| npy(p, "(9223372036854775808, 0)", &[]));
    // Rank 1 of 2 reads chunk 2 and counts chunks 0 and 1 by their headers.
    let e = read_share(&source, 1, 2, 1).expect_err("refused");
    let m = e.to_string();
    assert!(m.contains("e0.npy") && m.contains("[m, 2]"), "{m}");
    // Rank 0 reads them whole: the same error.
    let m = read_share(&source, 0, 2, 1).unwrap_err().to_string();
    assert!(m.contains("e0.npy") && m.contains("[m, 2]"), "{m}");
}

/// The header alone passed for 2^63 edges: with an empty chunk after it
/// and `num_edges_per_type` 2^63, rank 1 accepted a share of a graph of
/// 2^63 edges that no file holds (its caller then summed such counts).
#[test]
fn a_share_after_a_header_only_chunk_of_2_pow_63_rows_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    npy(&dir.path().join("e0.npy"), "(9223372036854775808, 0)", &[]);
    npy(&dir.path().join("e1.npy"), "(0, 2)", &[]);
    let meta = dir.path().join("metadata.json");
    save_json(
        &meta,
        &json!({
            "node_type": ["_N"],
            "num_nodes_per_type": [4],
            "edge_type": ["_N:_E:_N"],
            "num_edges_per_type": [9223372036854775808u64],
            "edges": {"_N:_E:_N": {"format": {"name": "numpy"}, "data": ["e0.npy", "e1.npy"]}},
        }),
    );
    let source = Source::Chunked { metadata: meta };
    let m = read_share(&source, 1, 2, 1)
        .expect_err("refused")
        .to_string();
    assert!(m.contains("e0.npy") && m.contains("[m, 2]"), "{m}");
}

#[test]
fn chunks_before_a_share_adding_up_past_2_pow_64_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // Two valid-looking [m, 2] headers of 2^62 rows would need 2^66 bytes:
    // refused by the size check. A csv count cannot get there either; so
    // the sum is checked, and a count above the type's total is named.
    let source = three_chunks(dir.path(), |p| npy(p, "(3, 2)", &[0, 1, 1, 2, 2, 3]));
    let m = read_share(&source, 1, 2, 1).unwrap_err().to_string();
    assert!(m.contains("num_edges_per_type[0]"), "{m}");
}

/// Rank 1 counts the lines of chunk 0 (24 MiB of csv) without holding it:
/// before, it read the whole file to count them.
#[test]
fn another_ranks_csv_chunk_is_counted_not_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let line = b"1 2\n";
    let rows = (24usize << 20) / line.len();
    std::fs::write(dir.path().join("e0.txt"), line.repeat(rows)).unwrap();
    std::fs::write(dir.path().join("e1.txt"), "0 1\n").unwrap();
    let meta = dir.path().join("metadata.json");
    save_json(
        &meta,
        &json!({
            "node_type": ["_N"],
            "num_nodes_per_type": [4],
            "edge_type": ["_N:_E:_N"],
            "num_edges_per_type": [rows + 1],
            "edges": {"_N:_E:_N": {"format": {"name": "csv"}, "data": ["e0.txt", "e1.txt"]}},
        }),
    );
    let source = Source::Chunked { metadata: meta };
    PEAK.store(0, Ordering::Relaxed);
    let share = read_share(&source, 1, 2, 1).unwrap();
    let peak = PEAK.load(Ordering::Relaxed);
    assert_eq!(share.edge_first, vec![rows as u64]);
    assert!(peak < 4 << 20, "a single allocation of {peak} bytes");
}
