//! Edge chunks as delimited text: two non-negative integers per line
//! (source and destination per-type ids). Parsed from the bytes directly,
//! in parallel blocks cut at line ends; empty lines are skipped (as
//! pyarrow's CSV reader does), and line numbers count them.

use std::path::Path;

use rayon::prelude::*;

use super::limits::{quoted, token_kind};
use crate::{Error, Result};

/// The node types an edge type joins, for range checks and messages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ends<'a> {
    pub src_name: &'a str,
    pub src_count: u64,
    pub dst_name: &'a str,
    pub dst_count: u64,
}

impl Ends<'_> {
    /// The error message when `(s, d)` is out of range, if it is.
    pub fn check(&self, s: u64, d: u64) -> Option<String> {
        if s >= self.src_count {
            Some(out_of_range("source", s, self.src_name, self.src_count))
        } else if d >= self.dst_count {
            Some(out_of_range(
                "destination",
                d,
                self.dst_name,
                self.dst_count,
            ))
        } else {
            None
        }
    }
}

fn out_of_range(end: &str, id: u64, ntype: &str, count: u64) -> String {
    format!(
        "{end} id {id} is out of range for node type {}: expected an id below {count} \
         (ids are per-type ids of the {end} type)",
        quoted(ntype)
    )
}

/// Source and destination ids of one chunk.
pub(crate) type Pairs = (Vec<u64>, Vec<u64>);

/// Parses a whole chunk file's bytes.
pub(crate) fn parse_edges(bytes: &[u8], delim: u8, path: &Path, ends: &Ends) -> Result<Pairs> {
    let starts = block_starts(bytes, rayon::current_num_threads() * 4);
    let blocks: Vec<_> = starts
        .par_windows(2)
        .map(|w| parse_block(&bytes[w[0]..w[1]], delim, ends))
        .collect();
    let total: usize = blocks.iter().flatten().map(|(s, _)| s.len()).sum();
    let (mut src, mut dst) = (Vec::with_capacity(total), Vec::with_capacity(total));
    for (b, block) in blocks.into_iter().enumerate() {
        let (s, d) = block.map_err(|(line, message)| {
            let before = bytes[..starts[b]].iter().filter(|&&c| c == b'\n').count() as u64;
            Error::input(path, format!("line {}", before + line), message)
        })?;
        src.extend_from_slice(&s);
        dst.extend_from_slice(&d);
    }
    Ok((src, dst))
}

/// Non-empty lines of `bytes` (to size chunks without parsing them).
#[cfg(test)]
pub(crate) fn count_rows(bytes: &[u8]) -> u64 {
    bytes
        .split(|&c| c == b'\n')
        .filter(|l| !l.is_empty() && *l != b"\r")
        .count() as u64
}

/// Up to `parts` block boundaries, each just after a newline, plus the end;
/// blocks are at least 1 MiB so small files stay one block.
pub(crate) fn block_starts(bytes: &[u8], parts: usize) -> Vec<usize> {
    let step = (bytes.len() / parts.max(1)).max(1 << 20);
    let mut starts = vec![0];
    let mut at = step;
    while at < bytes.len() {
        match bytes[at..].iter().position(|&c| c == b'\n') {
            Some(p) if at + p + 1 < bytes.len() => starts.push(at + p + 1),
            _ => break,
        }
        at = starts[starts.len() - 1] + step;
    }
    starts.push(bytes.len());
    starts
}

/// Parses one block; errors carry the block-relative line (1-based).
fn parse_block(b: &[u8], delim: u8, ends: &Ends) -> Result<Pairs, (u64, String)> {
    let (mut src, mut dst) = (
        Vec::with_capacity(b.len() / 12),
        Vec::with_capacity(b.len() / 12),
    );
    let (mut i, mut line) = (0usize, 0u64);
    while i < b.len() {
        line += 1;
        if let Some(next) = line_end(b, i) {
            i = next;
            continue;
        }
        let (s, j) = number(b, i, delim).map_err(|m| (line, m))?;
        if b.get(j) != Some(&delim) {
            return Err((line, columns(b, i, delim)));
        }
        let (d, k) = number(b, j + 1, delim).map_err(|m| (line, m))?;
        i = line_end(b, k).ok_or_else(|| (line, columns(b, i, delim)))?;
        if let Some(m) = ends.check(s, d) {
            return Err((line, m));
        }
        src.push(s);
        dst.push(d);
    }
    Ok((src, dst))
}

/// If a line ends at `i` (newline, CRLF or end of data), where the next
/// line starts.
#[inline]
fn line_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i) {
        None => Some(i),
        Some(b'\n') => Some(i + 1),
        Some(b'\r') if b.get(i + 1) == Some(&b'\n') => Some(i + 2),
        _ => None,
    }
}

/// A non-negative integer at `i` ending at a delimiter or line end.
#[inline]
fn number(b: &[u8], start: usize, delim: u8) -> Result<(u64, usize), String> {
    let mut i = start;
    let mut v = 0u64;
    while let Some(&c) = b.get(i) {
        let digit = c.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        v = match v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit)))
        {
            Some(v) => v,
            None => {
                return Err(format!(
                    "found {}, which does not fit in 64 bits",
                    token_kind(token(b, start, delim))
                ))
            }
        };
        i += 1;
    }
    let ends_well = i > start && (b.get(i) == Some(&delim) || line_end(b, i).is_some());
    if !ends_well {
        return Err(format!(
            "expected a non-negative integer id, found {}",
            token_kind(token(b, start, delim))
        ));
    }
    Ok((v, i))
}

/// The field at `start` (described in messages, never quoted).
fn token(b: &[u8], start: usize, delim: u8) -> &[u8] {
    let rest = &b[start.min(b.len())..];
    let end = rest
        .iter()
        .position(|&c| c == delim || c == b'\n' || c == b'\r')
        .unwrap_or(rest.len());
    &rest[..end]
}

fn columns(b: &[u8], line_start: usize, delim: u8) -> String {
    let rest = &b[line_start..];
    let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
    let line = rest[..end].strip_suffix(b"\r").unwrap_or(&rest[..end]);
    let found = line.iter().filter(|&&c| c == delim).count() + 1;
    format!(
        "expected 2 columns (source and destination id) separated by {:?}, found {found}",
        delim as char
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENDS: Ends = Ends {
        src_name: "a",
        src_count: 100,
        dst_name: "b",
        dst_count: 10,
    };

    fn parse(text: &str) -> Result<Pairs> {
        parse_edges(text.as_bytes(), b' ', Path::new("e.txt"), &ENDS)
    }

    #[test]
    fn parses_lines_crlf_blank_and_no_final_newline() {
        let (s, d) = parse("1 2\r\n\n30 4\n99 9").unwrap();
        assert_eq!((s, d), (vec![1, 30, 99], vec![2, 4, 9]));
        assert_eq!(count_rows(b"1 2\r\n\n30 4\n99 9"), 3);
    }

    #[test]
    fn errors_name_line_and_what_was_expected() {
        let cases = [
            ("1 2\n3 4 5\n", "line 2", "found 3"),
            ("1 2\n\n7\n", "line 3", "found 1"),
            ("1 x\n", "line 1", "1 byte that is not a number"),
            ("1 2.0\n", "line 1", "a number with a fraction"),
            ("-1 2\n", "line 1", "a negative integer"),
            ("1 hunter2\n", "line 1", "7 bytes that are not a number"),
            ("1 2\n100 3\n", "line 2", "source id 100"),
            ("1 10\n", "line 1", "destination id 10"),
            ("99999999999999999999999 1\n", "line 1", "64 bits"),
        ];
        for (text, at, what) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(
                e.contains("e.txt") && e.contains(at) && e.contains(what),
                "{text:?}: {e}"
            );
        }
    }

    #[test]
    fn blocks_in_parallel_keep_order_and_line_numbers() {
        let mut text = String::new();
        for i in 0..300_000u64 {
            text.push_str(&format!("{} {}\n", i % 100, i % 10));
        }
        let (s, d) = parse(&text).unwrap();
        assert_eq!(s.len(), 300_000);
        assert!(s.iter().enumerate().all(|(i, &v)| v == i as u64 % 100));
        assert!(d.iter().enumerate().all(|(i, &v)| v == i as u64 % 10));
        assert!(
            block_starts(text.as_bytes(), 8).len() > 2,
            "test must span blocks"
        );
        text.push_str("1 2 3\n");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("line 300001"), "{e}");
    }
}
