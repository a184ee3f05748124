//! numpy `.npy` files: the header, reading row ranges straight into a
//! caller's buffer (one positioned read, no copy), and writing.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use super::limits::{self, quoted};
use super::store::Input;
use crate::model::DType;
use crate::{Error, Result};

const MAGIC: &[u8] = b"\x93NUMPY";

/// What a `.npy` header says.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Header {
    /// numpy's `descr`, e.g. `<f4`.
    pub descr: String,
    pub fortran_order: bool,
    pub shape: Vec<u64>,
    /// Byte offset of the first element.
    pub data_offset: u64,
}

impl Header {
    pub fn rows(&self) -> u64 {
        self.shape.first().copied().unwrap_or(1)
    }

    /// Elements of one row (1 for a 1-D array).
    pub fn row_elems(&self) -> u64 {
        // Checked against the file when the header was read.
        limits::product(self.shape.iter().skip(1)).unwrap_or(u64::MAX)
    }

    /// Bytes of one row; the header was checked, so it fits.
    pub fn row_bytes(&self) -> u64 {
        let elem = elem_size(&self.descr).unwrap_or(1) as u64;
        self.row_elems().saturating_mul(elem)
    }

    /// The model's element type, or an error naming the file.
    pub fn dtype(&self, path: &Path) -> Result<DType> {
        dtype_of(&self.descr).ok_or_else(|| {
            Error::input(
                path,
                "header",
                format!(
                    "unknown dtype {}; expected one of float16/32/64, int8/16/32/64, uint8, bool \
                     (little-endian)",
                    quoted(&self.descr)
                ),
            )
        })
    }
}

/// The model's type of a numpy `descr` (`<`, `|` or `=` byte order).
pub(crate) fn dtype_of(descr: &str) -> Option<DType> {
    let code = descr.strip_prefix(['<', '|', '=']).unwrap_or(descr);
    Some(match code {
        "f2" => DType::F16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "b1" => DType::Bool,
        _ => return None,
    })
}

/// Reads the header of `path` (a few hundred bytes).
pub(crate) fn read_header(path: &Path) -> Result<Header> {
    let mut file = Input::open(path).map_err(|e| Error::io(path, e))?;
    header_from(&mut file, path)
}

/// Reads the header and checks it against the file: its length, and its
/// shape times its element size against the bytes after it.
fn header_from(file: &mut Input, path: &Path) -> Result<Header> {
    let bad = |m: &str| Error::input(path, "header", m.to_string());
    let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut pre = [0u8; 12];
    read_up_to(file, &mut pre, path)?;
    if &pre[..6] != MAGIC {
        return Err(bad("not a .npy file (no \\x93NUMPY magic)"));
    }
    let (len, start) = match pre[6] {
        1 => (u16::from_le_bytes([pre[8], pre[9]]) as usize, 10),
        2 | 3 => (
            u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]) as usize,
            12,
        ),
        v => {
            return Err(bad(&format!(
                "unsupported .npy version {v}; expected 1, 2 or 3"
            )))
        }
    };
    if (start + len) as u64 > file_len {
        let m = format!("the header claims {len} bytes, but the file has {file_len} bytes in all");
        return Err(bad(&m));
    }
    let mut text = vec![0u8; len];
    file.seek(SeekFrom::Start(start as u64))
        .and_then(|_| file.read_exact(&mut text))
        .map_err(|e| Error::io(path, e))?;
    let text = String::from_utf8_lossy(&text);
    let descr = dict_value(&text, "descr")
        .and_then(|v| v.strip_prefix('\'').and_then(|v| v.split('\'').next()))
        .ok_or_else(|| bad("no 'descr' string (structured dtypes are not supported)"))?;
    let fortran = dict_value(&text, "fortran_order").ok_or_else(|| bad("no 'fortran_order'"))?;
    let shape = dict_value(&text, "shape")
        .and_then(parse_shape)
        .ok_or_else(|| bad("no 'shape' tuple of integers"))?;
    let h = Header {
        descr: descr.to_string(),
        fortran_order: fortran.starts_with("True"),
        shape,
        data_offset: (start + len) as u64,
    };
    check_size(&h, file_len, path)?;
    Ok(h)
}

/// The shape times the element size must be exactly the bytes after the
/// header, so nothing is ever sized by an unchecked shape.
fn check_size(h: &Header, file_len: u64, path: &Path) -> Result<()> {
    let bad = |m: String| Error::input(path, "header", m);
    let numeric = h.descr.get(1..2).is_some_and(|k| "biufc".contains(k));
    let elem = elem_size(&h.descr).filter(|&e| numeric && (1..=16).contains(&e));
    let Some(elem) = elem else {
        return Err(bad(format!(
            "unknown dtype {}; expected a numeric dtype such as <f4 or <i8",
            quoted(&h.descr)
        )));
    };
    let data = file_len - h.data_offset;
    let need = limits::product(&h.shape).and_then(|n| n.checked_mul(elem as u64));
    match need {
        Some(n) if n == data => Ok(()),
        Some(n) => Err(bad(format!(
            "shape {:?} of {}-byte elements needs {n} bytes after the header, the file has {data}",
            h.shape, elem
        ))),
        None => Err(bad(format!(
            "shape {:?} of {}-byte elements is more than 2^64 bytes; the file has {data}",
            h.shape, elem
        ))),
    }
}

fn read_up_to(file: &mut Input, buf: &mut [u8], path: &Path) -> Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Ok(())
}

/// The text after `'key':` in the header's Python dict literal.
fn dict_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = text.find(&format!("'{key}'"))?;
    let rest = text[at + key.len() + 2..].trim_start();
    Some(rest.strip_prefix(':')?.trim_start())
}

fn parse_shape(v: &str) -> Option<Vec<u64>> {
    let inner = v.strip_prefix('(')?.split(')').next()?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse().ok())
        .collect()
}

/// Bytes of one element of `descr` (`<u4` -> 4), for any numeric descr.
pub(crate) fn elem_size(descr: &str) -> Option<usize> {
    descr.get(2..)?.parse().ok()
}

/// Reads rows from `first_row` on of `path` (whose header is `h`) into
/// `out`; `out.len()` decides how many.
pub(crate) fn read_rows(path: &Path, h: &Header, first_row: u64, out: &mut [u8]) -> Result<()> {
    let row_bytes = h.row_bytes();
    let mut file = Input::open(path).map_err(|e| Error::io(path, e))?;
    let total = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let from = first_row
        .checked_mul(row_bytes)
        .and_then(|b| b.checked_add(h.data_offset));
    let end = from.and_then(|f| f.checked_add(out.len() as u64));
    let (Some(from), Some(end)) = (from, end) else {
        return Err(Error::input(
            path,
            format!("row {first_row}"),
            "rows beyond 2^64 bytes",
        ));
    };
    if end > total {
        return Err(Error::input(
            path,
            format!(
                "row {}",
                total.saturating_sub(h.data_offset) / row_bytes.max(1)
            ),
            format!(
                "the file ends early (it changed while read?): rows up to byte {end} were \
                 expected, it has {total} bytes"
            ),
        ));
    }
    file.seek(SeekFrom::Start(from))
        .and_then(|_| file.read_exact(out))
        .map_err(|e| Error::io(path, e))
}

/// Writes a C-order `.npy` of `descr` and `shape` holding `data`.
pub(crate) fn write(path: &Path, descr: &str, shape: &[u64], data: &[u8]) -> Result<()> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    // Pad so the data starts on a 64-byte boundary, newline-terminated.
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    dict.push('\n');
    let mut out = Vec::with_capacity(10 + dict.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    let mut file = File::create(path).map_err(|e| Error::io(path, e))?;
    file.write_all(&out)
        .and_then(|_| file.write_all(data))
        .map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.npy");
        let data: Vec<u8> = (0u32..12).flat_map(|v| (v as f32).to_le_bytes()).collect();
        write(&path, "<f4", &[3, 2, 2], &data).unwrap();
        let h = read_header(&path).unwrap();
        assert_eq!(h.shape, vec![3, 2, 2]);
        assert_eq!(h.data_offset % 64, 0);
        assert_eq!(h.dtype(&path).unwrap(), DType::F32);
        let mut out = vec![0u8; 16];
        read_rows(&path, &h, 1, &mut out).unwrap();
        assert_eq!(out, data[16..32]);
    }

    #[test]
    fn shapes_of_numpy_headers() {
        assert_eq!(parse_shape("(5,), }"), Some(vec![5]));
        assert_eq!(parse_shape("(), }"), Some(vec![]));
        assert_eq!(parse_shape("(3, 4), }"), Some(vec![3, 4]));
        assert_eq!(parse_shape("(3, x), }"), None);
    }

    #[test]
    fn unknown_dtype_names_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.npy");
        write(&path, "<c8", &[1], &[0; 8]).unwrap();
        let err = read_header(&path).unwrap().dtype(&path).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("c.npy") && text.contains("unknown dtype"),
            "{text}"
        );
    }
}
