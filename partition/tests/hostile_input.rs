//! Hostile input (issue #25, item 6): every reader of the chunked format
//! (metadata.json, npy, parquet, csv) and of the text format refuses what
//! its files cannot back, without a panic, without an allocation sized by
//! an unchecked count, without reading outside the input folder, and
//! without echoing file contents. The proptests run `PROPTEST_CASES` inputs
//! per reader (64 in `cargo test`; `cargo xtask fuzz` runs many more) and
//! print inputs tried, panics and the largest single allocation.

mod input_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use dgl_partition::input::{read, write_chunked, EdgeFormat, Source, TextSource};
use dgl_partition::model::{DType, EdgeType, InputGraph, NodeType};
use input_common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::json;

/// Counts the largest single allocation of this test binary.
struct Counting;

static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        PEAK.fetch_max(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        PEAK.fetch_max(layout.size(), Ordering::Relaxed);
        System.alloc_zeroed(layout)
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

/// No input of these tests (all under 64 KiB) may cause a larger one.
const BOUND: usize = 64 << 20;

fn assert_bounded() {
    let peak = PEAK.load(Ordering::Relaxed);
    assert!(
        peak <= BOUND,
        "an allocation of {peak} bytes (bound {BOUND})"
    );
}

fn chunked(meta: &Path) -> Source {
    Source::Chunked {
        metadata: meta.to_path_buf(),
    }
}

fn anywhere(meta: &Path) -> Source {
    Source::ChunkedAnywhere {
        metadata: meta.to_path_buf(),
    }
}

/// 40 nodes (feature `feat` f32 [40, 3]), 40 edges (feature `w` f64 [40]):
/// as many edges as nodes, so an edge file can stand in as a node feature.
fn small() -> InputGraph {
    let mut rng = Lcg(7);
    let (src, dst) = edges(&mut rng, 40, 40, 40);
    let w: Vec<f64> = (0..40).map(|i| i as f64).collect();
    InputGraph {
        name: "small".into(),
        ntypes: vec![NodeType {
            name: "_N".into(),
            count: 40,
            data: [("feat".to_string(), f32s(&[40, 3], 1))].into(),
            weights: None,
        }],
        etypes: vec![EdgeType {
            src_type: 0,
            rel: "_E".into(),
            dst_type: 0,
            src,
            dst,
            data: [(
                "w".to_string(),
                tensor(DType::F64, &[40], &w, |x| x.to_le_bytes().to_vec()),
            )]
            .into(),
        }],
    }
}

/// The only file listed under `key` (`edges._N:_E:_N`, `node_data._N.feat`).
fn listed(meta: &Path, key: &[&str]) -> PathBuf {
    let mut v = load_json(meta);
    for k in key {
        v = v[k].clone();
    }
    meta.parent().unwrap().join(v["data"][0].as_str().unwrap())
}

/// Everything a reader returned is what its files back: ids in range,
/// tensors as long as their shapes say, one row per node or edge.
fn consistent(g: &InputGraph) -> Result<(), String> {
    let fits = |t: &dgl_partition::model::Tensor, rows: u64| {
        let elems = t.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let bytes = elems.and_then(|e| e.checked_mul(t.dtype.size() as u64));
        t.rows() == rows && bytes == Some(t.data.len() as u64)
    };
    for nt in &g.ntypes {
        let tensors = nt.data.values().chain(nt.weights.iter());
        if let Some(t) = tensors.into_iter().find(|t| !fits(t, nt.count)) {
            return Err(format!("node tensor {:?} of {} rows", t.shape, nt.count));
        }
    }
    for et in &g.etypes {
        let (ns, nd) = (g.ntypes[et.src_type].count, g.ntypes[et.dst_type].count);
        if et.src.len() != et.dst.len() {
            return Err("sources and destinations differ in number".into());
        }
        if et.src.iter().any(|&s| s >= ns) || et.dst.iter().any(|&d| d >= nd) {
            return Err("an id out of range".into());
        }
        if et.data.values().any(|t| !fits(t, et.count())) {
            return Err("an edge tensor of the wrong size".into());
        }
    }
    Ok(())
}

/// Inputs a reader accepted (the rest it refused with an error).
static ACCEPTED: AtomicU64 = AtomicU64::new(0);

/// Reads `source`: an error, or a result consistent with its files.
fn check_read(source: &Source) -> Result<(), String> {
    match read(source, 1) {
        Ok(g) => {
            ACCEPTED.fetch_add(1, Ordering::Relaxed);
            consistent(&g)
        }
        Err(_) => Ok(()),
    }
}

// ---------------------------------------------------------------------
// The regression and one test per class.

fn npy_edges(path: &Path, pairs: &[[i64; 2]]) {
    let mut dict = format!(
        "{{'descr': '<i8', 'fortran_order': False, 'shape': ({}, 2), }}",
        pairs.len()
    );
    dict.push_str(&" ".repeat(63 - (10 + dict.len()) % 64));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    for p in pairs {
        out.extend_from_slice(&p[0].to_le_bytes());
        out.extend_from_slice(&p[1].to_le_bytes());
    }
    std::fs::write(path, out).unwrap();
}

/// Rewrites the shape in an npy header, keeping the header's length (the
/// padding before its newline absorbs the difference).
fn set_npy_shape(path: &Path, old: &str, new: &str) {
    let mut b = std::fs::read(path).unwrap();
    let at = b
        .windows(old.len())
        .position(|w| w == old.as_bytes())
        .unwrap();
    b.splice(at..at + old.len(), new.bytes());
    let nl = at + b[at..].iter().position(|&c| c == b'\n').unwrap();
    if new.len() > old.len() {
        b.drain(nl - (new.len() - old.len())..nl);
    } else {
        b.splice(nl..nl, std::iter::repeat_n(b' ', old.len() - new.len()));
    }
    std::fs::write(path, b).unwrap();
}

/// The case of issue #25: a node count of 1e15 beside a valid 4-edge npy
/// file aborted with "memory allocation of 8000000000000000 bytes failed".
fn node_count_1e15(dir: &Path) -> PathBuf {
    npy_edges(&dir.join("edges.npy"), &[[0, 1], [1, 2], [2, 3], [3, 0]]);
    let meta = dir.join("metadata.json");
    save_json(
        &meta,
        &json!({
            "graph_name": "g",
            "node_type": ["_N"],
            "num_nodes_per_type": [1_000_000_000_000_000u64],
            "edge_type": ["_N:_E:_N"],
            "num_edges_per_type": [4],
            "edges": {"_N:_E:_N": {"format": {"name": "numpy"}, "data": ["edges.npy"]}},
        }),
    );
    meta
}

#[test]
fn a_node_count_of_1e15_is_an_error_naming_the_count_not_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let meta = node_count_1e15(dir.path());
    assert_error(
        read(&chunked(&meta), 1),
        &[
            "metadata.json",
            "num_nodes_per_type[0]",
            "1000000000000000 nodes",
        ],
    );
    assert_bounded();
    // The same through the rank program, as dglrun starts it: exit 1 with
    // the message, not a signal.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dgl-partition"))
        .args(["rank", "--graph-name", "g", "--threads", "1", "--input"])
        .arg(&meta)
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("metadata.json") && err.contains("num_nodes_per_type[0]"),
        "{err}"
    );
}

#[test]
fn counts_that_overflow_64_bits_are_errors_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let meta = node_count_1e15(dir.path());
    edit_metadata(&meta, |v| {
        v.as_object_mut().unwrap().remove("num_nodes_per_type");
        v["num_nodes_per_chunk"] = json!([[u64::MAX, 2]]);
    });
    assert_error(
        read(&chunked(&meta), 1),
        &["metadata.json", "num_nodes_per_chunk[0]", "2^64"],
    );
    // An npy shape whose product overflows.
    let npy = dir.path().join("edges.npy");
    set_npy_shape(&npy, "(4, 2)", "(4294967296, 4294967297)");
    edit_metadata(&meta, |v| {
        v.as_object_mut().unwrap().remove("num_nodes_per_chunk");
        v["num_nodes_per_type"] = json!([4]);
    });
    assert_error(
        read(&chunked(&meta), 1),
        &["edges.npy", "header", "more than 2^64 bytes"],
    );
    assert_bounded();
}

#[test]
fn an_npy_header_must_match_the_bytes_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write_chunked(&small(), dir.path(), 1, EdgeFormat::Npy).unwrap();
    let feat = listed(&meta, &["node_data", "_N", "feat"]);
    set_npy_shape(&feat, "(40, 3)", "(90, 3)");
    assert_error(
        read(&chunked(&meta), 1),
        &["feat-0.npy", "header", "needs 1080 bytes", "has 480"],
    );
    // A version-2 header length of 4 GiB in a small file.
    let edges = listed(&meta, &["edges", "_N:_E:_N"]);
    let mut bytes = std::fs::read(&edges).unwrap();
    bytes[6] = 2;
    bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&edges, bytes).unwrap();
    set_npy_shape(&feat, "(90, 3)", "(40, 3)");
    assert_error(
        read(&chunked(&meta), 1),
        &["edge_index", "header claims 4294967295 bytes"],
    );
    assert_bounded();
}

/// The first page header of a parquet file starts at byte 4; its field 2 is
/// the uncompressed size (zigzag varint), rewritten in place.
#[test]
fn a_parquet_page_claiming_more_than_its_bytes_can_hold_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write_chunked(&small(), dir.path(), 1, EdgeFormat::Parquet).unwrap();
    let file = listed(&meta, &["edges", "_N:_E:_N"]);
    let mut bytes = std::fs::read(&file).unwrap();
    assert_eq!(&bytes[4..7], &[0x15, 0x00, 0x15], "a data page header");
    let len = bytes[7..].iter().position(|b| b & 0x80 == 0).unwrap() + 1;
    // The largest even varint of the same length: a big positive size.
    for b in &mut bytes[7..7 + len - 1] {
        *b = 0xfe;
    }
    bytes[7 + len - 1] = 0x7f;
    std::fs::write(&file, &bytes).unwrap();
    assert_error(
        read(&chunked(&meta), 1),
        &["edge_index", "uncompressed", "expected at most 24 times"],
    );
    // A footer cut short.
    std::fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
    assert_error(read(&chunked(&meta), 1), &["edge_index", "footer"]);
    assert_bounded();
}

#[test]
fn a_text_schema_count_of_1e15_allocates_nothing_of_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let text = text_files(dir.path());
    std::fs::write(
        text.schema.as_ref().unwrap(),
        json!({"nid": {"_N": [0, 4]}, "eid": {"_N:_E:_N": [0, 1_000_000_000_000_000u64]}})
            .to_string(),
    )
    .unwrap();
    assert_error(
        read(&Source::Text(text.clone()), 1),
        &[
            "schema.json",
            "eid._N:_E:_N",
            "type edge id 4 is in no edges file",
        ],
    );
    // A node type id of 2^62 in the nodes file (without a schema).
    std::fs::write(&text.nodes, "0 5 0 0.5\n4611686018427387904 1 1 0.5\n").unwrap();
    let no_schema = TextSource {
        schema: None,
        ..text.clone()
    };
    assert_error(
        read(&Source::Text(no_schema), 1),
        &["nodes.txt", "line 2", "node type 4611686018427387904"],
    );
    assert_bounded();
}

#[test]
fn errors_do_not_echo_file_contents() {
    const SECRET: &str = "hunter2-secret-token";
    let dir = tempfile::tempdir().unwrap();
    let meta = write_chunked(&small(), dir.path(), 1, EdgeFormat::Csv).unwrap();
    let edges = listed(&meta, &["edges", "_N:_E:_N"]);
    std::fs::write(&edges, format!("1 2\n3 {SECRET}\n")).unwrap();
    let e = read(&chunked(&meta), 1).unwrap_err().to_string();
    assert!(
        e.contains("line 2") && e.contains("20 bytes that are not a number"),
        "{e}"
    );
    assert!(!e.contains(SECRET), "{e}");
    edit_metadata(&meta, |v| v["num_edges_per_type"] = json!([SECRET]));
    let e = read(&chunked(&meta), 1).unwrap_err().to_string();
    assert!(
        e.contains("num_edges_per_type[0]") && e.contains("a string of 20 bytes"),
        "{e}"
    );
    assert!(!e.contains(SECRET), "{e}");
    std::fs::write(&meta, format!("{{\"a\": {SECRET}}}")).unwrap();
    let e = read(&chunked(&meta), 1).unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("not valid JSON"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");

    let text = text_files(dir.path());
    std::fs::write(&text.nodes, format!("0 5 0 0.5\n0 1 {SECRET} 0.5\n")).unwrap();
    let e = read(&Source::Text(text), 1).unwrap_err().to_string();
    assert!(e.contains("nodes.txt") && e.contains("line 2"), "{e}");
    assert!(!e.contains(SECRET), "{e}");
}

#[test]
fn files_outside_the_input_folder_are_refused_unless_allowed() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "0 1\n1 0\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let meta = write_chunked(&small(), dir.path(), 1, EdgeFormat::Csv).unwrap();
    let original = load_json(&meta);
    let link = dir.path().join("link.txt");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let relative = format!(
        "../{}/secret.txt",
        outside.path().file_name().unwrap().to_str().unwrap()
    );
    let cases = [
        (relative.clone(), "contains \"..\""),
        (
            secret.display().to_string(),
            "an absolute path out of the folder",
        ),
        ("link.txt".to_string(), "symlink out of the folder"),
    ];
    for (path, why) in cases {
        let mut v = original.clone();
        v["edges"]["_N:_E:_N"]["data"] = json!([path]);
        v["num_edges_per_type"] = json!([2]);
        v.as_object_mut().unwrap().remove("num_edges_per_chunk");
        v["edge_data"] = json!({});
        save_json(&meta, &v);
        assert_error(
            read(&chunked(&meta), 1),
            &[
                "metadata.json",
                "edges._N:_E:_N.data[0]",
                why,
                "--allow-input-outside",
            ],
        );
        let e = read(&chunked(&meta), 1).unwrap_err().to_string();
        assert!(!e.contains("secret"), "the path is not repeated: {e}");
        let g = read(&anywhere(&meta), 1).unwrap();
        assert_eq!(g.etypes[0].src, vec![0, 1], "{path} read when allowed");
    }
    // A symlink that stays inside is fine.
    save_json(&meta, &original);
    let edges = listed(&meta, &["edges", "_N:_E:_N"]);
    std::fs::rename(&edges, dir.path().join("real.txt")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("real.txt"), &edges).unwrap();
    assert_eq!(read(&chunked(&meta), 1).unwrap(), small());
}

// ---------------------------------------------------------------------
// Proptests over raw bytes: arbitrary bytes and mutations of valid files.

/// Tokens spliced into files: counts near the limits, negatives, paths.
const TOKENS: [&str; 12] = [
    "0",
    "-1",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "1000000000000000",
    "1e15",
    "..",
    "/",
    "\"/etc/hostname\"",
    "\u{0}",
];

/// One edit of a file.
#[derive(Clone, Debug)]
enum Edit {
    Set(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
    /// Replace the number (or byte) at a position by a token.
    Splice(usize, usize),
    /// Overwrite 8 bytes with a little-endian u64 (binary headers).
    Word(usize, u64),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Edit::Set(p, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Edit::Insert(p, b)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Truncate),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(p, t)| Edit::Splice(p, t)),
        (
            any::<usize>(),
            prop_oneof![
                Just(u64::MAX),
                Just(1u64 << 31),
                Just(1u64 << 40),
                any::<u64>()
            ]
        )
            .prop_map(|(p, w)| Edit::Word(p, w)),
    ]
}

fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for e in edits {
        let at = |p: usize, b: &Vec<u8>| if b.is_empty() { 0 } else { p % b.len() };
        match *e {
            Edit::Set(p, v) if !b.is_empty() => {
                let i = at(p, &b);
                b[i] = v;
            }
            Edit::Insert(p, v) => {
                let i = at(p, &b);
                b.insert(i, v);
            }
            Edit::Delete(p) if !b.is_empty() => {
                let i = at(p, &b);
                b.remove(i);
            }
            Edit::Truncate(p) => b.truncate(at(p, &b)),
            Edit::Splice(p, t) => {
                let i = at(p, &b);
                let end = (i..b.len())
                    .find(|&j| !b[j].is_ascii_digit())
                    .unwrap_or(b.len())
                    .max((i + 1).min(b.len()));
                b.splice(i..end, TOKENS[t].bytes());
            }
            Edit::Word(p, w) if b.len() >= 8 => {
                let i = at(p, &b).min(b.len() - 8);
                b[i..i + 8].copy_from_slice(&w.to_le_bytes());
            }
            _ => {}
        }
    }
    b
}

/// Arbitrary bytes, or a valid file with a few edits (four times as often).
fn hostile(seed: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..512),
        4 => prop::collection::vec(edit(), 1..6).prop_map(move |e| apply(&seed, &e)),
    ]
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64)
}

/// Runs `check` on `cases()` inputs of `strategy`: a panic, an
/// inconsistent result or an allocation over [`BOUND`] fails it. Prints
/// what `cargo xtask fuzz` reports.
fn fuzz<T: std::fmt::Debug>(
    reader: &str,
    strategy: impl Strategy<Value = T>,
    check: impl Fn(&T) -> Result<(), String>,
) {
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    PEAK.store(0, Ordering::Relaxed);
    ACCEPTED.store(0, Ordering::Relaxed);
    let (tried, panics) = (AtomicU64::new(0), AtomicU64::new(0));
    let outcome = runner.run(&strategy, |input| {
        tried.fetch_add(1, Ordering::Relaxed);
        match catch_unwind(AssertUnwindSafe(|| check(&input))) {
            Err(_) => {
                panics.fetch_add(1, Ordering::Relaxed);
                Err(TestCaseError::fail("the reader panicked"))
            }
            Ok(Err(m)) => Err(TestCaseError::fail(m)),
            Ok(Ok(())) if PEAK.load(Ordering::Relaxed) > BOUND => Err(TestCaseError::fail(
                format!("an allocation of {} bytes", PEAK.load(Ordering::Relaxed)),
            )),
            Ok(Ok(())) => Ok(()),
        }
    });
    // ACCEPTED is per test only when the tests run one at a time (as
    // `cargo xtask fuzz` runs them).
    eprintln!(
        "fuzz {reader}: {} inputs, {} panics, largest allocation {} bytes, {} reads accepted",
        tried.into_inner(),
        panics.into_inner(),
        PEAK.load(Ordering::Relaxed),
        ACCEPTED.load(Ordering::Relaxed)
    );
    if let Err(e) = outcome {
        panic!("{reader}: {e}");
    }
}

/// Writes `bytes` over `path`, reads, and puts the original back.
fn with_file(path: &Path, bytes: &[u8], source: &Source) -> Result<(), String> {
    let original = std::fs::read(path).unwrap();
    std::fs::write(path, bytes).unwrap();
    let r = check_read(source);
    std::fs::write(path, original).unwrap();
    r
}

#[test]
fn fuzz_metadata_json() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write_chunked(&small(), dir.path(), 2, EdgeFormat::Csv).unwrap();
    let seed = std::fs::read(&meta).unwrap();
    fuzz("metadata.json", hostile(seed), |b| {
        with_file(&meta, b, &chunked(&meta))
    });
}

#[test]
fn fuzz_npy() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write_chunked(&small(), dir.path(), 1, EdgeFormat::Npy).unwrap();
    let files = [
        listed(&meta, &["edges", "_N:_E:_N"]),
        listed(&meta, &["node_data", "_N", "feat"]),
    ];
    let seeds: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let strategy = (0..2usize).prop_flat_map(move |i| (Just(i), hostile(seeds[i].clone())));
    fuzz("npy", strategy, |(i, b)| {
        with_file(&files[*i], b, &chunked(&meta))
    });
}

#[test]
fn fuzz_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write_chunked(&small(), dir.path(), 1, EdgeFormat::Parquet).unwrap();
    let file = listed(&meta, &["edges", "_N:_E:_N"]);
    // The same file read as a node feature of two int64 columns.
    let as_feature = dir.path().join("feature.json");
    let mut v = load_json(&meta);
    let rel = file.strip_prefix(dir.path()).unwrap().to_str().unwrap();
    v["node_data"]["_N"]["pq"] = json!({"format": {"name": "parquet"}, "data": [rel]});
    save_json(&as_feature, &v);
    assert_eq!(
        read(&chunked(&as_feature), 1).unwrap().ntypes[0].data["pq"].shape,
        vec![40, 2]
    );
    let seed = std::fs::read(&file).unwrap();
    fuzz("parquet", hostile(seed), |b| {
        with_file(&file, b, &chunked(&meta))?;
        with_file(&file, b, &chunked(&as_feature))
    });
}

#[test]
fn fuzz_csv() {
    let dir = tempfile::tempdir().unwrap();
    let meta = write_chunked(&small(), dir.path(), 1, EdgeFormat::Csv).unwrap();
    let file = listed(&meta, &["edges", "_N:_E:_N"]);
    let seed = std::fs::read(&file).unwrap();
    fuzz("csv", hostile(seed), |b| {
        with_file(&file, b, &chunked(&meta))
    });
}

/// A text-format graph of 4 nodes (one weight, one attribute) and 4 edges.
fn text_files(dir: &Path) -> TextSource {
    let put = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    TextSource {
        nodes: put("nodes.txt", "0 1 0 0.5\n0 2 1 1.5\n0 3 2 2.5\n0 4 3 3.5\n"),
        edges: put("edges.txt", "0 1 0 0 7\n1 2 1 0 8\n2 3 2 0 9\n3 0 3 0 10\n"),
        removed_edges: None,
        schema: Some(put(
            "schema.json",
            r#"{"nid": {"_N": [0, 4]}, "eid": {"_N:_E:_N": [0, 4]}}"#,
        )),
        num_node_weights: 1,
        node_attr_dtype: DType::F32,
        edge_attr_dtype: DType::I64,
    }
}

#[test]
fn fuzz_text_format() {
    let dir = tempfile::tempdir().unwrap();
    let text = text_files(dir.path());
    assert!(read(&Source::Text(text.clone()), 1).is_ok());
    let files = [
        text.nodes.clone(),
        text.edges.clone(),
        text.schema.clone().unwrap(),
    ];
    let seeds: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let strategy = (0..3usize).prop_flat_map(move |i| (Just(i), hostile(seeds[i].clone())));
    let source = Source::Text(text);
    fuzz("text format", strategy, |(i, b)| {
        with_file(&files[*i], b, &source)
    });
}
