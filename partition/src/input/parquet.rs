//! Edge chunks as parquet: two integer columns (source, destination per-type
//! ids), any names, INT64 or INT32, required or nullable without nulls, any
//! encoding the `parquet` crate decodes, snappy or uncompressed. Row groups
//! are decoded in parallel.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use parquet::basic::{Compression, Type as Physical};
use parquet::column::reader::ColumnReader;
use parquet::data_type::Int64Type;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use rayon::prelude::*;

use std::ops::Range;

use parquet::file::metadata::KeyValue;

use super::csv::{Ends, Pairs};
use super::limits::{self, quoted};
use super::metadata::{DataMeta, Metadata};
use super::parquet_check::{self, Bounded};
use super::store;
use crate::model::{DType, Tensor};
use crate::{Error, Result};

const BATCH: usize = 64 * 1024;

/// Opens `path` with its footer and page headers checked against it (an
/// object is fetched whole: every row group is decoded).
fn open(path: &Path) -> Result<SerializedFileReader<Bounded>> {
    let file = Bounded::open(path)?;
    let reader = SerializedFileReader::new(file.try_clone(path)?).map_err(not_parquet(path))?;
    parquet_check::check(path, &file, reader.metadata())?;
    Ok(reader)
}

fn not_parquet(path: &Path) -> impl Fn(parquet::errors::ParquetError) -> Error + '_ {
    move |e| Error::input(path, "footer", format!("not a readable parquet file: {e}"))
}

/// The file's length, to bound what is reserved before decoding.
fn file_len(path: &Path) -> Result<u64> {
    store::len(path).map_err(|e| Error::io(path, e))
}

/// Rows of the file, from its footer (of an object, only the footer is
/// fetched; its pages are checked when it is read).
pub(crate) fn count_rows(path: &Path) -> Result<u64> {
    if !store::is_object(path) {
        return Ok(open(path)?.metadata().file_metadata().num_rows().max(0) as u64);
    }
    let file = Bounded::open_ranged(path)?;
    let reader = SerializedFileReader::new(file.try_clone(path)?).map_err(not_parquet(path))?;
    parquet_check::check_footer(path, &file, reader.metadata())?;
    Ok(reader.metadata().file_metadata().num_rows().max(0) as u64)
}

/// Reads chunk `chunk` (for messages) at `path`, checking ids against `ends`.
pub(crate) fn read_edges(path: &Path, chunk: usize, ends: &Ends) -> Result<Pairs> {
    let reader = open(path)?;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    if schema.num_columns() != 2 {
        return Err(Error::input(
            path,
            format!("chunk {chunk}"),
            format!(
                "expected 2 columns (source and destination id), found {}",
                schema.num_columns()
            ),
        ));
    }
    for c in 0..2 {
        let t = schema.column(c).physical_type();
        if !matches!(t, Physical::INT64 | Physical::INT32) {
            return Err(Error::input(
                path,
                format!("column {c} of chunk {chunk}"),
                format!("expected integer ids (INT64 or INT32), found {t}"),
            ));
        }
    }
    let groups = reader.metadata().row_groups();
    let mut first = Vec::with_capacity(groups.len());
    let mut total = 0u64;
    for g in groups {
        first.push(total);
        // Non-negative, summing to the footer's rows: checked at open.
        total += g.num_rows().max(0) as u64;
    }
    // Reserve no more than the file could plainly hold; decoding grows it.
    let cap = total.min(file_len(path)?) as usize;
    let parts: Vec<Result<Pairs>> = (0..groups.len())
        .into_par_iter()
        .map(|g| read_group(&reader, g, first[g], path, chunk, ends))
        .collect();
    let (mut src, mut dst) = (Vec::with_capacity(cap), Vec::with_capacity(cap));
    for part in parts {
        let (s, d) = part?;
        src.extend_from_slice(&s);
        dst.extend_from_slice(&d);
    }
    Ok((src, dst))
}

fn read_group(
    reader: &SerializedFileReader<Bounded>,
    g: usize,
    first_row: u64,
    path: &Path,
    chunk: usize,
    ends: &Ends,
) -> Result<Pairs> {
    let at = |row: u64| format!("row {row} of chunk {chunk}");
    let fail = |e: parquet::errors::ParquetError| {
        Error::input(
            path,
            at(first_row),
            format!("cannot decode row group {g}: {e}"),
        )
    };
    let group = reader.get_row_group(g).map_err(fail)?;
    let rows = group.metadata().num_rows().max(0) as u64;
    let def = |c: usize| {
        reader
            .metadata()
            .file_metadata()
            .schema_descr()
            .column(c)
            .max_def_level()
    };
    let span = (first_row, rows);
    let src = read_column(
        group.get_column_reader(0).map_err(fail)?,
        def(0),
        span,
        path,
        &at,
    )?;
    let dst = read_column(
        group.get_column_reader(1).map_err(fail)?,
        def(1),
        span,
        path,
        &at,
    )?;
    if src.len() != dst.len() {
        return Err(Error::input(
            path,
            at(first_row),
            format!(
                "row group {g} has {} sources but {} destinations",
                src.len(),
                dst.len()
            ),
        ));
    }
    for (i, (&s, &d)) in src.iter().zip(&dst).enumerate() {
        if let Some(m) = ends.check(s, d) {
            return Err(Error::input(path, at(first_row + i as u64), m));
        }
    }
    Ok((src, dst))
}

/// One column of a group of `rows` rows from `first_row` as non-negative
/// ids; nulls, negatives and more values than rows are errors.
fn read_column(
    col: ColumnReader,
    max_def: i16,
    (first_row, rows): (u64, u64),
    path: &Path,
    at: &dyn Fn(u64) -> String,
) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    let mut defs = Vec::new();
    let fail = |row: u64, e: parquet::errors::ParquetError| {
        Error::input(path, at(row), format!("cannot decode: {e}"))
    };
    macro_rules! drain {
        ($r:expr) => {{
            let mut vals = Vec::with_capacity(BATCH);
            loop {
                let row = first_row + out.len() as u64;
                defs.clear();
                vals.clear();
                let (records, values, _) = $r
                    .read_records(BATCH, Some(&mut defs), None, &mut vals)
                    .map_err(|e| fail(row, e))?;
                if records == 0 {
                    break;
                }
                if (out.len() + records) as u64 > rows {
                    let m = format!("more values than the row group's {rows} rows");
                    return Err(Error::input(path, at(row), m));
                }
                if values < records {
                    let null = defs.iter().position(|&d| d < max_def).unwrap_or(0);
                    return Err(Error::input(
                        path,
                        at(row + null as u64),
                        "expected an id, found null",
                    ));
                }
                for (i, &v) in vals.iter().enumerate() {
                    let v = i64::from(v);
                    if v < 0 {
                        let m = format!("expected a non-negative id, found {v}");
                        return Err(Error::input(path, at(row + i as u64), m));
                    }
                    out.push(v as u64);
                }
            }
        }};
    }
    match col {
        ColumnReader::Int64ColumnReader(mut r) => drain!(r),
        ColumnReader::Int32ColumnReader(mut r) => drain!(r),
        _ => {
            return Err(Error::input(
                path,
                at(first_row),
                "expected an INT64 or INT32 column",
            ))
        }
    }
    Ok(out)
}

/// Writes `src`/`dst` as two required INT64 columns, snappy-compressed,
/// plain-encoded (ids are too varied for dictionaries to pay).
pub(crate) fn write_edges(path: &Path, src: &[u64], dst: &[u64]) -> Result<()> {
    let fail = |e: parquet::errors::ParquetError| Error::Stage {
        stage: "input",
        message: format!("writing {}: {e}", path.display()),
    };
    let schema = parse_message_type("message edges { REQUIRED INT64 src; REQUIRED INT64 dst; }")
        .map_err(fail)?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_dictionary_enabled(false)
        .build();
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut writer =
        SerializedFileWriter::new(file, Arc::new(schema), Arc::new(props)).map_err(fail)?;
    const GROUP: usize = 1 << 20;
    for start in (0..src.len()).step_by(GROUP) {
        let end = (start + GROUP).min(src.len());
        let mut group = writer.next_row_group().map_err(fail)?;
        for ids in [&src[start..end], &dst[start..end]] {
            let values: Vec<i64> = ids.iter().map(|&v| v as i64).collect();
            let mut col = group.next_column().map_err(fail)?.ok_or_else(|| {
                fail(parquet::errors::ParquetError::General(
                    "schema has fewer columns".into(),
                ))
            })?;
            col.typed::<Int64Type>()
                .write_batch(&values, None, None)
                .map_err(fail)?;
            col.close().map_err(fail)?;
        }
        group.close().map_err(fail)?;
    }
    writer.close().map_err(fail)?;
    Ok(())
}

/// A feature stored as parquet, as DGL's `ParquetArrayParser` writes it: one
/// column per element of a row (all of one type), the array's shape in the
/// `shape` key-value metadata when it is not 2-D. Reads rows `rows` of all
/// the feature's files.
pub(crate) fn read_feature(
    meta: &Metadata,
    d: &DataMeta,
    count: u64,
    rows: &Range<u64>,
    what: &str,
) -> Result<Tensor> {
    if d.files.is_empty() {
        return Err(d.no_files(meta));
    }
    let counts: Vec<u64> = d
        .files
        .par_iter()
        .map(|p| count_rows(p))
        .collect::<Result<_>>()?;
    d.check_rows(meta, what, count, &counts)?;
    let mut file_first = 0u64;
    let mut jobs = Vec::new();
    for (k, &n) in counts.iter().enumerate() {
        let (lo, hi) = (rows.start.max(file_first), rows.end.min(file_first + n));
        if lo < hi || (k == 0 && rows.is_empty()) {
            jobs.push((k, lo.min(hi) - file_first, hi.max(lo) - file_first));
        }
        file_first += n;
    }
    let parts: Vec<Tensor> = jobs
        .into_par_iter()
        .map(|(k, lo, hi)| Ok(slice_rows(read_table(&d.files[k], k)?, lo, hi)))
        .collect::<Result<_>>()?;
    let mut out = parts[0].clone();
    for (p, part) in parts.iter().enumerate().skip(1) {
        if part.dtype != out.dtype || part.shape[1..] != out.shape[1..] {
            let m = format!(
                "holds {:?} rows of {:?}, expected {:?} of {:?} as chunk 0",
                part.dtype,
                &part.shape[1..],
                out.dtype,
                &out.shape[1..]
            );
            return Err(Error::input(&d.files[p], format!("chunk {p}"), m));
        }
        out.data.extend_from_slice(&part.data);
        out.shape[0] += part.shape[0];
    }
    Ok(out)
}

fn slice_rows(mut t: Tensor, lo: u64, hi: u64) -> Tensor {
    let rb = t.row_bytes();
    t.data = t.data[lo as usize * rb..hi as usize * rb].to_vec();
    t.shape[0] = hi - lo;
    t
}

/// A whole parquet feature file as a row-major tensor.
fn read_table(path: &Path, k: usize) -> Result<Tensor> {
    let reader = open(path)?;
    let len = file_len(path)?;
    let file_meta = reader.metadata().file_metadata();
    let schema = file_meta.schema_descr_ptr();
    let cols = schema.num_columns();
    let at = format!("chunk {k}");
    let physical = (cols > 0).then(|| schema.column(0).physical_type());
    let dtype = match physical {
        Some(Physical::FLOAT) => DType::F32,
        Some(Physical::DOUBLE) => DType::F64,
        Some(Physical::INT32) => DType::I32,
        Some(Physical::INT64) => DType::I64,
        Some(Physical::BOOLEAN) => DType::Bool,
        other => {
            let m = format!("unknown dtype {other:?}; expected numeric columns (FLOAT, DOUBLE, INT32, INT64, BOOLEAN)");
            return Err(Error::input(path, at, m));
        }
    };
    if let Some(c) = (0..cols).find(|&c| {
        Some(schema.column(c).physical_type()) != physical || schema.column(c).max_rep_level() > 0
    }) {
        let m =
            format!("column {c} differs from column 0; expected {cols} flat columns of one type");
        return Err(Error::input(path, at, m));
    }
    let rows = file_meta.num_rows().max(0) as u64;
    let size = dtype.size();
    let row_bytes = cols.saturating_mul(size);
    // Sized per row group by what was decoded, never by the footer alone.
    let mut data = Vec::with_capacity((rows.saturating_mul(row_bytes as u64)).min(len) as usize);
    let mut first = 0usize;
    for g in 0..reader.num_row_groups() {
        let fail = |e: parquet::errors::ParquetError| {
            Error::input(
                path,
                format!("row {first} of chunk {k}"),
                format!("cannot decode: {e}"),
            )
        };
        let group = reader.get_row_group(g).map_err(fail)?;
        let n = group.metadata().num_rows().max(0) as usize;
        let mut columns = Vec::with_capacity(cols);
        for c in 0..cols {
            let col = group.get_column_reader(c).map_err(fail)?;
            let values = read_values(col, n, size).map_err(fail)?;
            if values.len() != n.saturating_mul(size) {
                return Err(Error::input(
                    path,
                    format!("row {first} of chunk {k}"),
                    format!("column {c} has nulls or missing values; expected {n}"),
                ));
            }
            columns.push(values);
        }
        let base = data.len();
        data.resize(base + n * row_bytes, 0);
        for (c, values) in columns.iter().enumerate() {
            for (r, v) in values.chunks_exact(size).enumerate() {
                let at = base + r * row_bytes + c * size;
                data[at..at + size].copy_from_slice(v);
            }
        }
        first += n;
    }
    let shape = shape_of(file_meta.key_value_metadata(), rows, cols as u64)
        .map_err(|m| Error::input(path, format!("shape metadata of chunk {k}"), m))?;
    Ok(Tensor { dtype, shape, data })
}

/// Reads `n` values of a column as little-endian bytes of `size` each.
fn read_values(col: ColumnReader, n: usize, size: usize) -> parquet::errors::Result<Vec<u8>> {
    let limit = n.saturating_mul(size);
    let mut out = Vec::with_capacity(limit.min(BATCH * size));
    macro_rules! drain {
        ($r:expr, $conv:expr) => {{
            let mut vals = Vec::new();
            let mut defs = Vec::new();
            loop {
                vals.clear();
                let (records, _, _) = $r.read_records(BATCH, Some(&mut defs), None, &mut vals)?;
                if records == 0 {
                    break;
                }
                if out.len() + vals.len() * size > limit {
                    return Err(parquet::errors::ParquetError::General(format!(
                        "more values than the row group's {n} rows"
                    )));
                }
                for v in &vals {
                    out.extend_from_slice(&$conv(v));
                }
            }
        }};
    }
    match col {
        ColumnReader::FloatColumnReader(mut r) => drain!(r, |v: &f32| v.to_le_bytes()),
        ColumnReader::DoubleColumnReader(mut r) => drain!(r, |v: &f64| v.to_le_bytes()),
        ColumnReader::Int32ColumnReader(mut r) => drain!(r, |v: &i32| v.to_le_bytes()),
        ColumnReader::Int64ColumnReader(mut r) => drain!(r, |v: &i64| v.to_le_bytes()),
        ColumnReader::BoolColumnReader(mut r) => drain!(r, |v: &bool| [u8::from(*v)]),
        _ => {}
    }
    Ok(out)
}

/// The array's shape: the `shape` metadata DGL writes (`"(n, a, b)"`), else
/// `[rows, cols]` as DGL reads it.
fn shape_of(
    kv: Option<&Vec<KeyValue>>,
    rows: u64,
    cols: u64,
) -> std::result::Result<Vec<u64>, String> {
    let text = kv
        .and_then(|kv| kv.iter().find(|e| e.key == "shape"))
        .and_then(|e| e.value.clone());
    let Some(text) = text else {
        return Ok(vec![rows, cols]);
    };
    let dims: Option<Vec<u64>> = text
        .trim()
        .trim_start_matches(['(', '['])
        .trim_end_matches([')', ']'])
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect();
    match dims {
        Some(d) if d.first() == Some(&rows) && limits::product(&d[1..]) == Some(cols) => Ok(d),
        _ => Err(format!(
            "the shape {} does not fit {rows} rows of {cols} columns",
            quoted(&text)
        )),
    }
}
