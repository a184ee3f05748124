//! DGL's chunked graph format: a rank's share of the edge chunks (contiguous,
//! as DGL's `generate_read_list`), of the node rows (whole node chunks when
//! `num_nodes_per_chunk` is given, else an even split of the rows), and of
//! the feature rows that go with them, read by row range whatever the
//! feature files' own chunking. Files are read in parallel.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::ops::Range;
use std::path::Path;

use rayon::prelude::*;

use super::csv::{self, Ends, Pairs};
use super::limits::{self, quoted};
use super::metadata::{self, DataMeta, EdgeMeta, FileFormat, Metadata};
use super::{npy, parquet, split_even, store, Share};
use crate::model::{EdgeType, InputGraph, NodeType, Tensor};
use crate::{Error, Result};

/// What the pipeline holds per node, measured: peak RSS of the real
/// binaries on graphs of 1-8 M nodes without features and 100 k edges
/// (2026-11-28, debug build, `docs/reliability.md` has the table). Every
/// rank holds arrays the size of the whole graph (the assignment, 4 bytes,
/// and the id maps, 8, rounded up); the rest grows with the nodes whose
/// rows the rank read. One process (`run::run`, METIS) held up to 99 bytes
/// per node beyond its base, a rank of 2 up to 61 per node of the graph
/// (half of them its own), a rank of 4 up to 26: 16 + 104 covers each.
/// Counts that pass can still fail on edges and features, which are sized
/// by the files that hold them.
const GRAPH_BYTES_PER_NODE: u64 = 16;
/// See [`GRAPH_BYTES_PER_NODE`]: per node of the rank's own rows.
const SHARE_BYTES_PER_NODE: u64 = 104;
/// What a rank holds before any node (libraries, threads, MPI): 39.5 MB
/// measured with 1,000 nodes and 100 k edges, rounded up.
const BASE_BYTES: u64 = 40 << 20;

pub(crate) fn read_share(path: &Path, rank: u32, world: u32, anywhere: bool) -> Result<Share> {
    let meta = metadata::load(path, anywhere)?;
    check_node_counts(&meta, rank, world, limits::memory_limit())?;
    let mut share = Share {
        graph: InputGraph {
            name: meta.graph_name.clone(),
            ..Default::default()
        },
        ..Default::default()
    };
    for (t, name) in meta.ntypes.iter().enumerate() {
        let rows = node_rows(&meta, t, rank, world);
        let what = format!("node type {name:?}");
        let mut data = BTreeMap::new();
        for d in &meta.node_data[t] {
            data.insert(
                d.name.clone(),
                read_feature(&meta, d, meta.node_counts[t], &rows, &what)?,
            );
        }
        share.node_first.push(rows.start);
        let count = meta.node_counts[t];
        share.graph.ntypes.push(NodeType {
            name: name.clone(),
            count,
            data,
            weights: None,
        });
    }
    for (e, et) in meta.etypes.iter().enumerate() {
        let (first, (src, dst)) = read_edges(&meta, e, rank, world)?;
        // read_edges checked first + len against the type's count.
        let rows = first..first.saturating_add(src.len() as u64);
        let what = format!("edge type {:?}", et.name);
        let mut data = BTreeMap::new();
        for d in &meta.edge_data[e] {
            data.insert(
                d.name.clone(),
                read_feature(&meta, d, et.count, &rows, &what)?,
            );
        }
        share.edge_first.push(first);
        let (src_type, dst_type, rel) = (et.src, et.dst, et.rel.clone());
        share.graph.etypes.push(EdgeType {
            src_type,
            rel,
            dst_type,
            src,
            dst,
            data,
        });
    }
    Ok(share)
}

/// The node counts must fit in 64 bits and what rank `rank` of `world`
/// would hold for them ([`GRAPH_BYTES_PER_NODE`] per node of the graph,
/// [`SHARE_BYTES_PER_NODE`] per node of its share, [`BASE_BYTES`]) in
/// `memory` bytes: nodes without features have no file to check them by,
/// and a count that passes must not be OOM-killed instead of refused.
fn check_node_counts(meta: &Metadata, rank: u32, world: u32, memory: u64) -> Result<()> {
    let (mut total, mut share) = (0u64, 0u64);
    for (t, &count) in meta.node_counts.iter().enumerate() {
        let key = match meta.node_chunks[t] {
            Some(_) => format!("num_nodes_per_chunk[{t}]"),
            None => format!("num_nodes_per_type[{t}]"),
        };
        let rows = node_rows(meta, t, rank, world);
        let sums = total
            .checked_add(count)
            .zip(share.checked_add(rows.end - rows.start));
        let need = sums.and_then(|(n, s)| {
            n.checked_mul(GRAPH_BYTES_PER_NODE)?
                .checked_add(s.checked_mul(SHARE_BYTES_PER_NODE)?)?
                .checked_add(BASE_BYTES)
        });
        match (sums, need) {
            (Some(sums), Some(b)) if b <= memory => (total, share) = sums,
            _ => {
                let need = need.map_or("more than 2^64".into(), |b| b.to_string());
                let m = format!(
                    "node type {} has {count} nodes: rank {rank} of {world} would need {need} \
                     bytes for the graph's nodes ({GRAPH_BYTES_PER_NODE} per node of the graph, \
                     {SHARE_BYTES_PER_NODE} per node of its share, {BASE_BYTES} to start), more \
                     than the {memory} bytes this process may use; expected the graph's real \
                     node count",
                    quoted(&meta.ntypes[t])
                );
                return Err(Error::input(&meta.path, key, m));
            }
        }
    }
    Ok(())
}

/// The per-type node rows of rank's share.
fn node_rows(meta: &Metadata, t: usize, rank: u32, world: u32) -> Range<u64> {
    match &meta.node_chunks[t] {
        Some(chunks) => {
            let r = split_even(chunks.len() as u64, rank, world);
            let first: u64 = chunks[..r.start as usize].iter().sum();
            let len: u64 = chunks[r.start as usize..r.end as usize].iter().sum();
            first..first + len
        }
        None => split_even(meta.node_counts[t], rank, world),
    }
}

/// The share's edges of type `e` and the per-type id of the first.
fn read_edges(meta: &Metadata, e: usize, rank: u32, world: u32) -> Result<(u64, Pairs)> {
    let et = &meta.etypes[e];
    let r = split_even(et.files.len() as u64, rank, world);
    let (lo, hi) = (r.start as usize, r.end as usize);
    let first = match &et.chunks {
        // The whole list's sum was checked to fit.
        Some(chunks) => chunks[..lo].iter().sum(),
        None => {
            let counts: Result<Vec<u64>> =
                (0..lo).into_par_iter().map(|k| rows_of(et, k)).collect();
            limits::sum(&counts?).ok_or_else(|| {
                let m = format!(
                    "{}'s chunks 0..{lo} hold more than 2^64 rows in all; expected a count \
                     that fits 64 bits",
                    quoted(&et.name)
                );
                Error::input(&meta.path, format!("edge_type[{e}]"), m)
            })?
        }
    };
    let ends = Ends {
        src_name: &meta.ntypes[et.src],
        src_count: meta.node_counts[et.src],
        dst_name: &meta.ntypes[et.dst],
        dst_count: meta.node_counts[et.dst],
    };
    let parts: Vec<Result<Pairs>> = (lo..hi)
        .into_par_iter()
        .map(|k| read_chunk(et, e, k, &ends))
        .collect();
    let parts: Vec<Pairs> = parts.into_iter().collect::<Result<_>>()?;
    let (src, dst) = if parts.len() == 1 {
        parts.into_iter().next().unwrap_or_default()
    } else {
        // One allocation of the final size: 100 M edges are 1.6 GB of ids.
        let total = parts.iter().map(|p| p.0.len()).sum();
        let (mut src, mut dst) = (Vec::with_capacity(total), Vec::with_capacity(total));
        for (s, d) in parts {
            src.extend_from_slice(&s);
            dst.extend_from_slice(&d);
        }
        (src, dst)
    };
    let end = first.saturating_add(src.len() as u64);
    let last = rank + 1 == world;
    if end > et.count || (last && end != et.count) {
        let key = format!("num_edges_per_type[{e}]");
        let found = if last {
            format!("{end}")
        } else {
            format!("at least {end}")
        };
        let m = format!(
            "{} has {} edges by metadata.json, but its files hold {found}",
            quoted(&et.name),
            et.count
        );
        return Err(Error::input(&meta.path, key, m));
    }
    Ok((first, (src, dst)))
}

fn missing(path: &Path, what: String) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| match e.kind() {
        ErrorKind::NotFound => Error::input(
            path,
            "",
            format!(
                "missing: metadata.json lists it as {what}{}",
                store::detail(path, &e)
            ),
        ),
        _ => Error::io(path, e),
    }
}

/// Rows of chunk `k` without parsing it (npy header, parquet footer, lines).
fn rows_of(et: &EdgeMeta, k: usize) -> Result<u64> {
    let path = &et.files[k];
    let what = format!("chunk {k} of edges.{}", limits::safe(&et.name));
    store::len(path).map_err(missing(path, what))?;
    match et.format {
        FileFormat::Csv { .. } => count_csv_rows(path),
        FileFormat::Parquet => parquet::count_rows(path),
        FileFormat::Numpy => npy_edge_rows(&npy::read_header(path)?, path, k),
    }
}

/// Lines of a csv chunk as `csv::count_rows` counts them (non-empty, not a
/// lone `\r`), read in 1 MiB blocks: another rank's chunk is only counted,
/// never held whole.
fn count_csv_rows(path: &Path) -> Result<u64> {
    use std::io::Read;
    let mut file = store::Input::open(path).map_err(|e| Error::io(path, e))?;
    let mut buf = vec![0u8; 1 << 20];
    // Bytes of the current line so far, and whether they are just `\r`.
    let (mut rows, mut len, mut cr) = (0u64, 0u64, false);
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(path, e)),
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                rows += u64::from(len > 0 && !(len == 1 && cr));
                (len, cr) = (0, false);
            } else {
                cr = len == 0 && b == b'\r';
                len += 1;
            }
        }
    }
    Ok(rows + u64::from(len > 0 && !(len == 1 && cr)))
}

/// Rows of an edge chunk's `.npy` header, which must be `[m, 2]`, also
/// when only the header is read (a `(2**63, 0)` header has 0 bytes of data
/// and would count 2^63 edges).
fn npy_edge_rows(h: &npy::Header, path: &Path, k: usize) -> Result<u64> {
    if h.shape.len() != 2 || h.shape[1] != 2 {
        let m = format!(
            "expected shape [m, 2] (source, destination), found {:?}",
            h.shape
        );
        return Err(Error::input(path, format!("header of chunk {k}"), m));
    }
    Ok(h.shape[0])
}

/// Reads and checks chunk `k` of edge type `e`.
fn read_chunk(et: &EdgeMeta, e: usize, k: usize, ends: &Ends) -> Result<Pairs> {
    let path = &et.files[k];
    let what = format!("chunk {k} of edges.{}", limits::safe(&et.name));
    let pairs = match et.format {
        FileFormat::Csv { delimiter } => {
            let bytes = store::read(path).map_err(missing(path, what))?;
            csv::parse_edges(&bytes, delimiter, path, ends)?
        }
        FileFormat::Parquet => {
            store::len(path).map_err(missing(path, what))?;
            parquet::read_edges(path, k, ends)?
        }
        FileFormat::Numpy => {
            store::len(path).map_err(missing(path, what))?;
            read_npy_edges(path, k, ends)?
        }
    };
    if let Some(expected) = et.chunks.as_ref().map(|c| c[k]) {
        let rows = pairs.0.len() as u64;
        if rows != expected {
            let m = format!(
                "holds {rows} edges, but metadata.json's num_edges_per_chunk[{e}][{k}] says {expected}"
            );
            return Err(Error::input(path, format!("chunk {k}"), m));
        }
    }
    Ok(pairs)
}

/// An `[m, 2]` integer `.npy` (C or Fortran order).
fn read_npy_edges(path: &Path, k: usize, ends: &Ends) -> Result<Pairs> {
    let h = npy::read_header(path)?;
    let code = h.descr.get(1..).unwrap_or("");
    if !matches!(code, "i4" | "i8" | "u4" | "u8") || h.descr.starts_with('>') {
        let m = format!(
            "unknown dtype {} for edges; expected int32/int64/uint32/uint64, little-endian",
            quoted(&h.descr)
        );
        return Err(Error::input(path, format!("header of chunk {k}"), m));
    }
    // The header's shape was checked against the file's size.
    let m = npy_edge_rows(&h, path, k)? as usize;
    let mut bytes = vec![0u8; m.saturating_mul(h.row_bytes() as usize)];
    npy::read_rows(path, &h, 0, &mut bytes)?;
    let (mut src, mut dst) = (vec![0u64; m], vec![0u64; m]);
    let f = (h.fortran_order, ends);
    match code {
        "i4" => convert(&bytes, f, &mut src, &mut dst, |b| {
            i64::from(i32::from_le_bytes(b))
        }),
        "u4" => convert(&bytes, f, &mut src, &mut dst, |b| {
            i64::from(u32::from_le_bytes(b))
        }),
        "u8" => convert(&bytes, f, &mut src, &mut dst, |b| {
            i64::try_from(u64::from_le_bytes(b)).unwrap_or(-1)
        }),
        _ => convert(&bytes, f, &mut src, &mut dst, i64::from_le_bytes),
    }
    .map_err(|(row, s, d)| {
        let msg = match ends.check(s as u64, d as u64) {
            Some(m) if s >= 0 && d >= 0 => m,
            _ => format!("expected non-negative ids below 2^63, found {s} {d}"),
        };
        Error::input(path, format!("row {row} of chunk {k}"), msg)
    })?;
    Ok((src, dst))
}

/// Converts `[m, 2]` elements of `N` bytes (C or Fortran order) into
/// `src`/`dst` in parallel; a negative or out-of-range id stops it with
/// (row, s, d).
fn convert<const N: usize>(
    bytes: &[u8],
    (fortran, ends): (bool, &Ends),
    src: &mut [u64],
    dst: &mut [u64],
    get: impl Fn([u8; N]) -> i64 + Sync,
) -> std::result::Result<(), (usize, i64, i64)> {
    const ROWS: usize = 1 << 16;
    let m = src.len();
    let elem = |i: usize| get(bytes[i * N..(i + 1) * N].try_into().unwrap_or([0; N]));
    src.par_chunks_mut(ROWS)
        .zip(dst.par_chunks_mut(ROWS))
        .enumerate()
        .try_for_each(|(c, (s, d))| {
            for (j, (s, d)) in s.iter_mut().zip(d.iter_mut()).enumerate() {
                let row = c * ROWS + j;
                let (a, b) = if fortran {
                    (elem(row), elem(m + row))
                } else {
                    (elem(2 * row), elem(2 * row + 1))
                };
                if a < 0 || b < 0 || ends.check(a as u64, b as u64).is_some() {
                    return Err((row, a, b));
                }
                (*s, *d) = (a as u64, b as u64);
            }
            Ok(())
        })
}

/// Rows `rows` of a feature whose files hold `count` rows in all.
fn read_feature(
    meta: &Metadata,
    d: &DataMeta,
    count: u64,
    rows: &Range<u64>,
    what: &str,
) -> Result<Tensor> {
    if d.format != FileFormat::Numpy {
        return parquet::read_feature(meta, d, count, rows, what);
    }
    let headers: Vec<npy::Header> = d
        .files
        .par_iter()
        .enumerate()
        .map(|(k, path)| {
            store::len(path).map_err(missing(path, format!("chunk {k} of {}", d.key)))?;
            npy::read_header(path)
        })
        .collect::<Result<_>>()?;
    let first = headers.first().ok_or_else(|| d.no_files(meta))?;
    let dtype = first.dtype(&d.files[0])?;
    for (k, h) in headers.iter().enumerate() {
        let path = &d.files[k];
        let at = format!("header of chunk {k}");
        if h.dtype(path)? != dtype || h.shape.get(1..) != first.shape.get(1..) || h.shape.is_empty()
        {
            let m = format!(
                "holds {} {:?}, but chunk 0 ({}) holds {} {:?}; expected the same dtype and row shape",
                quoted(&h.descr), h.shape, d.files[0].display(), quoted(&first.descr), first.shape
            );
            return Err(Error::input(path, at, m));
        }
        if h.fortran_order && h.shape.len() > 1 {
            return Err(Error::input(
                path,
                at,
                "expected C order for a multi-dimensional feature",
            ));
        }
    }
    let rows_each: Vec<u64> = headers.iter().map(npy::Header::rows).collect();
    d.check_rows(meta, what, count, &rows_each)?;
    // Every header was checked against its file, and the files hold
    // `count` rows in all: this is at most their size.
    let row_bytes = first.row_bytes() as usize;
    let mut data = vec![0u8; ((rows.end - rows.start) as usize).saturating_mul(row_bytes)];
    let mut jobs = Vec::new();
    let (mut rest, mut file_first) = (data.as_mut_slice(), 0u64);
    for (k, h) in headers.iter().enumerate() {
        let (lo, hi) = (
            rows.start.max(file_first),
            rows.end.min(file_first + h.rows()),
        );
        if lo < hi {
            let (mine, tail) = rest.split_at_mut((hi - lo) as usize * row_bytes);
            jobs.push((k, lo - file_first, mine));
            rest = tail;
        }
        file_first += h.rows();
    }
    jobs.into_par_iter()
        .try_for_each(|(k, from, out)| npy::read_rows(&d.files[k], &headers[k], from, out))?;
    let mut shape = first.shape.clone();
    shape[0] = rows.end - rows.start;
    Ok(Tensor { dtype, shape, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// metadata.json of `nodes` nodes (no features) and one edge.
    fn metadata_of(dir: &Path, nodes: u64) -> Metadata {
        std::fs::write(dir.join("e.txt"), "0 1\n").unwrap();
        let meta = serde_json::json!({
            "graph_name": "g",
            "node_type": ["_N"],
            "num_nodes_per_type": [nodes],
            "edge_type": ["_N:_E:_N"],
            "num_edges_per_type": [1],
            "edges": {"_N:_E:_N": {
                "format": {"name": "csv", "delimiter": " "},
                "data": ["e.txt"],
            }},
        });
        let path = dir.join("metadata.json");
        std::fs::write(&path, meta.to_string()).unwrap();
        metadata::load(&path, false).unwrap()
    }

    /// 100 M nodes under 1 GB passed the old 8 bytes per node (800 MB),
    /// but the pipeline holds about 100 per node: refused, naming
    /// metadata.json, the key and the count.
    #[test]
    fn a_node_count_that_passed_8_bytes_per_node_but_not_the_measured_need_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let meta = metadata_of(dir.path(), 100_000_000);
        let memory = 1_000_000_000;
        assert!(100_000_000 * 8 <= memory, "the old check let it pass");
        let e = check_node_counts(&meta, 0, 1, memory)
            .unwrap_err()
            .to_string();
        for part in [
            "metadata.json",
            "num_nodes_per_type[0]",
            "100000000 nodes",
            "1000000000 bytes",
        ] {
            assert!(e.contains(part), "{part:?} in {e}");
        }
    }

    /// What fits is not refused: exactly the need passes, a byte less does
    /// not; a rank of 4 needs less than one process for the same graph.
    #[test]
    fn a_node_count_just_under_the_limit_is_not_refused() {
        let dir = tempfile::tempdir().unwrap();
        let n = 3_000_001u64;
        let meta = metadata_of(dir.path(), n);
        let one = n * (GRAPH_BYTES_PER_NODE + SHARE_BYTES_PER_NODE) + BASE_BYTES;
        assert!(check_node_counts(&meta, 0, 1, one).is_ok());
        assert!(check_node_counts(&meta, 0, 1, one - 1).is_err());
        // Rank 0 of 4 reads 750,001 of the rows, rank 3 750,000.
        let rank0 = n * GRAPH_BYTES_PER_NODE + 750_001 * SHARE_BYTES_PER_NODE + BASE_BYTES;
        assert!(check_node_counts(&meta, 0, 4, rank0).is_ok());
        assert!(check_node_counts(&meta, 0, 4, rank0 - 1).is_err());
        assert!(check_node_counts(&meta, 3, 4, rank0 - SHARE_BYTES_PER_NODE).is_ok());
        // Counts whose bytes overflow 64 bits are refused, not wrapped.
        let huge = metadata_of(dir.path(), u64::MAX / 8);
        let e = check_node_counts(&huge, 0, 1, u64::MAX).unwrap_err();
        assert!(e.to_string().contains("more than 2^64"), "{e}");
    }

    #[test]
    fn csv_rows_are_counted_in_blocks_as_the_whole_file_would_be() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.txt");
        // Lines straddle the 1 MiB blocks; `\r\n`, lone `\r` and empty
        // lines, and a last line without a newline.
        let mut text = Vec::new();
        let mut i = 0u64;
        while text.len() < (3 << 20) + 7 {
            let line: &[u8] = match i % 5 {
                0 => b"12 34\r\n",
                1 => b"\r\n",
                2 => b"\n",
                3 => b"5 6789012\n",
                _ => b"\r\r\n",
            };
            text.extend_from_slice(line);
            i += 1;
        }
        text.extend_from_slice(b"1 2");
        std::fs::write(&path, &text).unwrap();
        assert_eq!(count_csv_rows(&path).unwrap(), csv::count_rows(&text));
        for small in [&b""[..], b"\r", b"\n\n", b"1 2", b"\r\n1 2\n\r"] {
            std::fs::write(&path, small).unwrap();
            assert_eq!(count_csv_rows(&path).unwrap(), csv::count_rows(small));
        }
    }
}
