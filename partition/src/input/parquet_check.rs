//! What the `parquet` crate would trust of a file, checked first: every
//! column chunk lies inside the file (the crate panics on a negative offset
//! and reads whatever length the footer gives), the row groups add up to
//! the footer's rows, and no page header asks for more memory than its
//! bytes can hold (the crate reserves a page's uncompressed size, up to
//! 2 GiB, before it decompresses, and a dictionary's value count before it
//! decodes). Page headers are thrift compact structs, walked here.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use bytes::{Buf, Bytes};
use parquet::basic::{Compression, Type as Physical};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use parquet::file::reader::{ChunkReader, Length};

use super::store::{self, Input};
use crate::{Error, Result};

/// A file whose reads must stay inside its length (taken once, at open):
/// a local file, an object fetched whole, or an object read by range.
pub(crate) struct Bounded {
    data: Data,
    len: u64,
}

enum Data {
    File(File),
    Memory(Bytes),
    /// Ranged GETs (only the footer is read so).
    Object(Input),
}

impl Bounded {
    /// A local file, or a whole object in memory (one GET: the readers
    /// decode every row group of the files they open).
    pub fn open(path: &Path) -> Result<Bounded> {
        if store::is_object(path) {
            let bytes = Bytes::from(store::read(path).map_err(|e| Error::io(path, e))?);
            let len = bytes.len() as u64;
            return Ok(Bounded {
                data: Data::Memory(bytes),
                len,
            });
        }
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        Ok(Bounded {
            data: Data::File(file),
            len,
        })
    }

    /// As [`Bounded::open`], but an object is read by range: for its footer.
    pub fn open_ranged(path: &Path) -> Result<Bounded> {
        if !store::is_object(path) {
            return Bounded::open(path);
        }
        let input = Input::open(path).map_err(|e| Error::io(path, e))?;
        let len = input.metadata().map_err(|e| Error::io(path, e))?.len();
        Ok(Bounded {
            data: Data::Object(input),
            len,
        })
    }

    /// Another handle on the same bytes (an object is not fetched again).
    pub fn try_clone(&self, path: &Path) -> Result<Bounded> {
        let data = match &self.data {
            Data::File(f) => Data::File(f.try_clone().map_err(|e| Error::io(path, e))?),
            Data::Memory(b) => Data::Memory(b.clone()),
            Data::Object(i) => Data::Object(i.try_clone().map_err(|e| Error::io(path, e))?),
        };
        Ok(Bounded {
            data,
            len: self.len,
        })
    }

    /// Exactly `buf.len()` bytes at `at`.
    fn read_at(&self, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
        match &self.data {
            Data::File(f) => {
                use std::os::unix::fs::FileExt;
                f.read_exact_at(buf, at)
            }
            Data::Memory(b) => {
                let start = usize::try_from(at).unwrap_or(usize::MAX);
                let src = start
                    .checked_add(buf.len())
                    .and_then(|end| b.get(start..end))
                    .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
                buf.copy_from_slice(src);
                Ok(())
            }
            Data::Object(i) => i.read_at(at, buf),
        }
    }
}

impl Length for Bounded {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for Bounded {
    type T = Box<dyn Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        if start > self.len {
            return Err(ParquetError::EOF(format!(
                "offset {start} is past the file's end ({} bytes)",
                self.len
            )));
        }
        Ok(match &self.data {
            Data::File(f) => {
                let mut f = f.try_clone()?;
                f.seek(SeekFrom::Start(start))?;
                Box::new(BufReader::new(f))
            }
            // `start` is at most the length, so the slice is in bounds.
            Data::Memory(b) => Box::new(b.slice(start as usize..).reader()),
            Data::Object(i) => {
                let mut i = i.try_clone()?;
                i.seek(SeekFrom::Start(start))?;
                Box::new(i)
            }
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        match start.checked_add(length as u64) {
            Some(end) if end <= self.len => match &self.data {
                Data::File(f) => f.get_bytes(start, length),
                Data::Memory(b) => Ok(b.slice(start as usize..end as usize)),
                Data::Object(_) => {
                    let mut buf = vec![0u8; length];
                    self.read_at(start, &mut buf)?;
                    Ok(Bytes::from(buf))
                }
            },
            _ => Err(ParquetError::EOF(format!(
                "{length} bytes at offset {start} are past the file's end ({} bytes)",
                self.len
            ))),
        }
    }
}

/// Largest uncompressed/compressed ratio of a page: snappy's copies give
/// at most 64 bytes per 3 (21.3), plus room for a page's level bytes.
const MAX_RATIO: u64 = 24;
/// Largest page header read (ours are tens of bytes).
const MAX_HEADER: usize = 64 * 1024;

/// Checks the footer and every page header of `path` (open as `file`).
pub(crate) fn check(path: &Path, file: &Bounded, meta: &ParquetMetaData) -> Result<()> {
    check_with(path, file, meta, true)
}

/// Checks the footer only (the row counts and that every column chunk is
/// inside the file): enough to count rows without reading the pages.
pub(crate) fn check_footer(path: &Path, file: &Bounded, meta: &ParquetMetaData) -> Result<()> {
    check_with(path, file, meta, false)
}

fn check_with(path: &Path, file: &Bounded, meta: &ParquetMetaData, pages: bool) -> Result<()> {
    let bad = |at: String, m: String| Error::input(path, at, m);
    let fm = meta.file_metadata();
    let mut rows = 0u64;
    for (g, group) in meta.row_groups().iter().enumerate() {
        let n = u64::try_from(group.num_rows())
            .map_err(|_| bad(format!("row group {g}"), "a negative row count".into()))?;
        rows = rows
            .checked_add(n)
            .ok_or_else(|| bad(format!("row group {g}"), "rows add up past 2^64".into()))?;
        for (c, col) in group.columns().iter().enumerate() {
            let at = format!("footer, row group {g}, column {c}");
            check_column(col, file, n, pages).map_err(|m| bad(at, m))?;
        }
    }
    if u64::try_from(fm.num_rows()).ok() != Some(rows) {
        let m = format!(
            "the footer says {} rows, its row groups hold {rows}; expected them to agree",
            fm.num_rows()
        );
        return Err(bad("footer".into(), m));
    }
    Ok(())
}

/// A column chunk's range is inside the file and its pages are plausible.
fn check_column(
    col: &ColumnChunkMetaData,
    file: &Bounded,
    rows: u64,
    pages: bool,
) -> std::result::Result<(), String> {
    let start = col
        .dictionary_page_offset()
        .unwrap_or(col.data_page_offset());
    let len = col.compressed_size();
    let (Ok(start), Ok(len)) = (u64::try_from(start), u64::try_from(len)) else {
        return Err("a negative offset or size; expected a chunk inside the file".into());
    };
    match start.checked_add(len) {
        Some(end) if end <= file.len => {}
        _ => {
            return Err(format!(
                "{len} bytes at offset {start} reach past the file's end ({} bytes)",
                file.len
            ))
        }
    }
    if u64::try_from(col.num_values()).is_err() {
        return Err("a negative value count".into());
    }
    // Flat columns without nulls hold one value per row.
    if u64::try_from(col.num_values()).ok() != Some(rows) {
        return Err(format!(
            "{} values for {rows} rows; expected one value per row",
            col.num_values()
        ));
    }
    if !pages {
        return Ok(());
    }
    let compressed = col.compression() != Compression::UNCOMPRESSED;
    let bits = value_bits(col.column_type());
    check_pages(file, start, len, compressed, bits)
}

/// Least bits one value of a physical type takes in a plain dictionary.
fn value_bits(t: Physical) -> u64 {
    match t {
        Physical::BOOLEAN => 1,
        Physical::INT64 | Physical::DOUBLE => 64,
        Physical::INT96 => 96,
        _ => 32,
    }
}

/// Walks the page headers of the chunk `[start, start + len)`.
fn check_pages(
    file: &Bounded,
    start: u64,
    len: u64,
    compressed: bool,
    bits: u64,
) -> std::result::Result<(), String> {
    let (mut at, end) = (start, start + len);
    let mut buf = Vec::new();
    while at < end {
        let want = (end - at).min(MAX_HEADER as u64) as usize;
        buf.resize(want, 0);
        file.read_at(at, &mut buf)
            .map_err(|e| format!("cannot read a page header at offset {at}: {e}"))?;
        let mut cur = Cursor { b: &buf, at: 0 };
        let h = page_header(&mut cur, 0)
            .ok_or_else(|| format!("the page header at offset {at} is not readable"))?;
        let body_at = at + cur.at as u64;
        let room = end - body_at;
        let size = |v: i64| u64::try_from(v).ok();
        let (Some(c), Some(u)) = (size(h.compressed), size(h.uncompressed)) else {
            return Err(format!("the page at offset {at} has a negative size"));
        };
        if c > room {
            return Err(format!(
                "the page at offset {at} claims {c} bytes, the chunk has {room} left"
            ));
        }
        if compressed && u > c.saturating_mul(MAX_RATIO).saturating_add(64) {
            return Err(format!(
                "the page at offset {at} claims {u} bytes uncompressed from {c}; expected at \
                 most {MAX_RATIO} times as many"
            ));
        }
        let body = if compressed { u } else { c };
        let values = size(h.dict_values).unwrap_or(u64::MAX);
        if values.saturating_mul(bits) > body.saturating_mul(8) {
            return Err(format!(
                "the dictionary page at offset {at} claims more values than its {body} bytes hold"
            ));
        }
        at = body_at + c;
    }
    Ok(())
}

/// The fields of a page header the checks need.
#[derive(Default)]
struct PageHeader {
    uncompressed: i64,
    compressed: i64,
    /// The dictionary header's value count, 0 without one.
    dict_values: i64,
}

/// Thrift compact protocol, read without allocating.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

/// Deepest nesting of structs and lists skipped.
const MAX_DEPTH: u32 = 32;

impl Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn zigzag(&mut self) -> Option<i64> {
        let v = self.varint()?;
        Some((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn skip_bytes(&mut self, n: u64) -> Option<()> {
        let n = usize::try_from(n).ok()?;
        self.at = self.at.checked_add(n).filter(|&e| e <= self.b.len())?;
        Some(())
    }

    /// Skips one value of compact type `ty`.
    fn skip(&mut self, ty: u8, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match ty {
            1 | 2 => Some(()),
            3 => self.skip_bytes(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.skip_bytes(8),
            8 => {
                let n = self.varint()?;
                self.skip_bytes(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                let n = match h >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                let elem = h & 0x0f;
                (0..n).try_for_each(|_| match elem {
                    // A bool in a list is one byte.
                    1 | 2 => self.skip_bytes(1),
                    t => self.skip(t, depth + 1),
                })
            }
            11 => {
                let n = self.varint()?;
                if n == 0 {
                    return Some(());
                }
                let kv = self.byte()?;
                (0..n).try_for_each(|_| {
                    self.skip(kv >> 4, depth + 1)?;
                    self.skip(kv & 0x0f, depth + 1)
                })
            }
            12 => self.fields(depth + 1, |c, _, t| c.skip(t, depth + 1)),
            _ => None,
        }
    }

    /// Calls `f(self, id, type)` for each field of a struct until its stop.
    fn fields(
        &mut self,
        depth: u32,
        mut f: impl FnMut(&mut Self, i16, u8) -> Option<()>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        let mut last = 0i16;
        loop {
            let h = self.byte()?;
            let ty = h & 0x0f;
            if ty == 0 {
                return Some(());
            }
            let id = match h >> 4 {
                0 => i16::try_from(self.zigzag()?).ok()?,
                d => last.checked_add(i16::from(d))?,
            };
            last = id;
            f(self, id, ty)?;
        }
    }

    /// An i32 field (compact type 5).
    fn int(&mut self, ty: u8) -> Option<i64> {
        (ty == 5).then_some(())?;
        self.zigzag()
    }
}

/// The page header's sizes and, for a dictionary page, its value count.
fn page_header(c: &mut Cursor, depth: u32) -> Option<PageHeader> {
    let mut h = PageHeader::default();
    let (mut has_u, mut has_c) = (false, false);
    c.fields(depth, |c, id, ty| {
        match id {
            2 => (h.uncompressed, has_u) = (c.int(ty)?, true),
            3 => (h.compressed, has_c) = (c.int(ty)?, true),
            7 if ty == 12 => c.fields(depth + 1, |c, id, ty| match id {
                1 => c.int(ty).map(|v| h.dict_values = v),
                _ => c.skip(ty, depth + 1),
            })?,
            _ => c.skip(ty, depth)?,
        }
        Some(())
    })?;
    (has_u && has_c).then_some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_header_is_read_and_garbage_is_refused() {
        // type=0 (i32 delta 1), uncompressed=100, compressed=40, then a
        // dictionary header {num_values=7}, stop.
        let bytes = [
            0x15, 0x00, 0x15, 200, 1, 0x15, 80, 0x4c, 0x15, 14, 0x00, 0x00,
        ];
        let h = page_header(&mut Cursor { b: &bytes, at: 0 }, 0).unwrap();
        assert_eq!((h.uncompressed, h.compressed, h.dict_values), (100, 40, 7));
        for cut in 0..bytes.len() {
            assert!(page_header(
                &mut Cursor {
                    b: &bytes[..cut],
                    at: 0
                },
                0
            )
            .is_none());
        }
        let deep = [0x1c; 200];
        assert!(page_header(&mut Cursor { b: &deep, at: 0 }, 0).is_none());
    }
}
