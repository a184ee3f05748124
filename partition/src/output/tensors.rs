//! DGL's `save_tensors` format (`dgl.data.utils.load_tensors` reads it) and
//! numpy `.npy` files, both written by streaming rows, never gathering a
//! whole tensor in memory.
//!
//! `save_tensors` (DGL v2.1.0 src/graph/serialize/tensor_serialize.cc,
//! `_CAPI_SaveNDArrayDict`): u64 magic `0xDD5A9FBE3FA2443F`, u64 count, then
//! a dmlc `std::vector<std::pair<std::string, NDArray>>`: u64 count, and per
//! entry u64 name length, the name, and the NDArray as
//! include/dgl/runtime/ndarray.h `SaveDGLArray` writes it: u64 magic
//! `0xDD5E40F096B4A13F`, u64 reserved 0, context {i32 1 (CPU), i32 0},
//! i32 ndim, dtype {u8 code, u8 bits, u16 lanes 1}, i64 shape[ndim],
//! i64 byte size, raw little-endian data.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::model::{DType, Tensor};
use crate::{Error, Result};

const TENSORS_MAGIC: u64 = 0xDD5A_9FBE_3FA2_443F;
const NDARRAY_MAGIC: u64 = 0xDD5E_40F0_96B4_A13F;
const BUF: usize = 1 << 20;

/// Where one tensor's rows come from.
pub enum Rows<'a> {
    /// Rows `rows` of `tensor`, in that order.
    Gather { tensor: &'a Tensor, rows: &'a [u64] },
    /// Every row of `tensor`, in order.
    All(&'a Tensor),
    /// A 1-D int64 tensor of ids (all below 2^63).
    Ids(&'a [u64]),
    /// A 1-D int16 tensor.
    I16(&'a [u16]),
}

impl Rows<'_> {
    fn dtype(&self) -> DType {
        match self {
            Rows::Gather { tensor, .. } | Rows::All(tensor) => tensor.dtype,
            Rows::Ids(_) => DType::I64,
            Rows::I16(_) => DType::I16,
        }
    }

    fn shape(&self) -> Vec<u64> {
        match self {
            Rows::Gather { tensor, rows } => {
                let mut s = tensor.shape.clone();
                s[0] = rows.len() as u64;
                s
            }
            Rows::All(tensor) => tensor.shape.clone(),
            Rows::Ids(v) => vec![v.len() as u64],
            Rows::I16(v) => vec![v.len() as u64],
        }
    }

    fn write_data(&self, w: &mut impl Write) -> std::io::Result<()> {
        match self {
            Rows::Gather { tensor, rows } => {
                let rb = tensor.row_bytes();
                for &r in *rows {
                    let at = r as usize * rb;
                    w.write_all(&tensor.data[at..at + rb])?;
                }
            }
            Rows::All(tensor) => w.write_all(&tensor.data)?,
            Rows::Ids(v) => v.iter().try_for_each(|x| w.write_all(&x.to_le_bytes()))?,
            Rows::I16(v) => v.iter().try_for_each(|x| w.write_all(&x.to_le_bytes()))?,
        }
        Ok(())
    }
}

/// Writes `{name: tensor}` as DGL's `save_tensors` does; returns the bytes
/// written.
pub fn write_tensors(path: &Path, entries: &[(String, Rows<'_>)]) -> Result<u64> {
    let io = |e| Error::io(path, e);
    let mut w = CountingWriter::new(File::create(path).map_err(io)?);
    let n = entries.len() as u64;
    for x in [TENSORS_MAGIC, n, n] {
        w.write_all(&x.to_le_bytes()).map_err(io)?;
    }
    for (name, rows) in entries {
        w.write_all(&(name.len() as u64).to_le_bytes())
            .map_err(io)?;
        w.write_all(name.as_bytes()).map_err(io)?;
        write_ndarray(&mut w, rows).map_err(io)?;
    }
    w.finish().map_err(io)
}

fn write_ndarray(w: &mut impl Write, rows: &Rows<'_>) -> std::io::Result<()> {
    // DGL stores booleans as uint8 (its PyTorch backend's
    // zerocopy_to_dgl_ndarray calls `.byte()`): a bool NDArray would load
    // as a torch.bool tensor, which DistGraphServer's shared memory cannot
    // hold ("Do not know how to handle type bool"). Same bytes, 0 or 1.
    let dtype = match rows.dtype() {
        DType::Bool => DType::U8,
        d => d,
    };
    write_ndarray_header(w, dtype, &rows.shape())?;
    rows.write_data(w)
}

/// An NDArray up to its data: magic, reserved, CPU context, ndim, dtype,
/// shape and byte size.
pub(crate) fn write_ndarray_header(
    w: &mut impl Write,
    dtype: DType,
    shape: &[u64],
) -> std::io::Result<()> {
    w.write_all(&NDARRAY_MAGIC.to_le_bytes())?;
    w.write_all(&0u64.to_le_bytes())?;
    w.write_all(&1i32.to_le_bytes())?;
    w.write_all(&0i32.to_le_bytes())?;
    w.write_all(&(shape.len() as i32).to_le_bytes())?;
    let (code, bits) = dtype.dlpack();
    w.write_all(&[code, bits])?;
    w.write_all(&1u16.to_le_bytes())?;
    for d in shape {
        w.write_all(&(*d as i64).to_le_bytes())?;
    }
    let bytes = shape.iter().product::<u64>() * dtype.size() as u64;
    w.write_all(&(bytes as i64).to_le_bytes())
}

/// Writes a 1-D `.npy` file (format 1.0, little-endian, C order); returns
/// the bytes written.
pub fn write_npy(path: &Path, rows: &Rows<'_>) -> Result<u64> {
    let io = |e| Error::io(path, e);
    let shape = rows.shape();
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let dims = if dims.len() == 1 {
        format!("{},", dims[0])
    } else {
        dims.join(", ")
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({dims}), }}",
        rows.dtype().numpy_descr()
    );
    // Magic (6) + version (2) + header length (2) + dict + '\n', padded to 64.
    let unpadded = 10 + dict.len() + 1;
    let header = format!(
        "{dict}{}\n",
        " ".repeat(unpadded.next_multiple_of(64) - unpadded)
    );
    let mut w = CountingWriter::new(File::create(path).map_err(io)?);
    w.write_all(b"\x93NUMPY\x01\x00").map_err(io)?;
    w.write_all(&(header.len() as u16).to_le_bytes())
        .map_err(io)?;
    w.write_all(header.as_bytes()).map_err(io)?;
    rows.write_data(&mut w).map_err(io)?;
    w.finish().map_err(io)
}

/// A buffered file writer that counts bytes and syncs nothing (the final
/// rename publishes the output).
pub(crate) struct CountingWriter {
    inner: BufWriter<File>,
    written: u64,
}

impl CountingWriter {
    pub(crate) fn new(f: File) -> Self {
        CountingWriter {
            inner: BufWriter::with_capacity(BUF, f),
            written: 0,
        }
    }

    pub(crate) fn finish(mut self) -> std::io::Result<u64> {
        self.inner.flush()?;
        Ok(self.written)
    }
}

impl Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_are_stored_as_uint8_like_dgl_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.dgl");
        let mask = Tensor {
            dtype: DType::Bool,
            shape: vec![3],
            data: vec![1, 0, 1],
        };
        write_tensors(&path, &[("m".into(), Rows::All(&mask))]).unwrap();
        let b = std::fs::read(&path).unwrap();
        // 3 u64 + name length + "m" + NDArray magic, reserved, context, ndim.
        let at = 8 * 4 + 1 + 8 + 8 + 8 + 4;
        assert_eq!(&b[at..at + 4], &[1, 8, 1, 0], "dlpack uint8, one lane");
        assert_eq!(&b[b.len() - 3..], &[1, 0, 1]);
    }
}
