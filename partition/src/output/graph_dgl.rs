//! A part's `graph.dgl`, written natively in DGL 2.1.0's `dgl.save_graphs`
//! format, byte for byte what DGL itself writes for the same graph (tested
//! against DGL in tests/real_dgl_graph.rs).
//!
//! The graph is what DGL's own pipeline saves per partition
//! (tools/distpartitioning/convert_partition.py): one homogeneous DGLGraph
//! (`_N`, `_E:`), inner nodes first, built by `dgl.graph((src, dst),
//! num_nodes=n, idtype=int64)`, so it holds only the COO form; ndata `_ID`
//! int64, `inner_node` uint8, `_TYPE` int16 (heterographs); edata `_ID`
//! int64, `inner_edge` uint8, `_TYPE` int32 (heterographs), the dtypes of
//! python/dgl/distributed/partition.py's `RESERVED_FIELD_DTYPE`.
//!
//! # The format (derived from DGL v2.1.0's C++ sources)
//! Integers are little-endian. dmlc-core's serializer writes a POD as its
//! bytes, a `bool` as one byte, a string or a vector of PODs as u64 length +
//! the elements, a vector of other things as u64 length + each element, a
//! pair as its two halves, a `shared_ptr` as the object it points to.
//! An NDArray is tensors.rs's (magic `0xDD5E40F096B4A13F`, u64 0, context
//! {i32 1, i32 0}, i32 ndim, dtype {u8 code, u8 bits, u16 lanes}, i64
//! shape[ndim], i64 bytes, the data).
//!
//! The file (src/graph/serialize/heterograph_serialize.cc,
//! `SaveHeteroGraphs`, one graph, no labels, formats left to DGL):
//! 1. a 4096-byte area: u64 magic `0xDD2E4FF046B4A13F`, u64 version 2,
//!    u64 graph type 2 (heterograph), u64 number of graphs (1), zeros;
//! 2. u64 offset of the graph data (4096 + 8 + the labels' bytes);
//! 3. the labels: an empty vector of (string, NDArray): u64 0;
//! 4. the graph data (heterograph_data.h, `HeteroGraphDataObject::Save`):
//!    - the HeteroGraph (src/graph/heterograph.cc `Save`): u64 magic
//!      `0xDD589FBE35224ABF`; its metagraph as an ImmutableGraph; the
//!      relation graphs, a vector of one UnitGraph; the node counts per
//!      type, a vector of one i64;
//!    - node tensors: a vector (one per node type, here 1) of vectors of
//!      (name, NDArray); edge tensors likewise (one edge type);
//!    - the node type names `["_N"]`, the edge type names `["_E"]`;
//! 5. the graphs' offsets: a dmlc string holding a vector of u64 (u64 16,
//!    then u64 1, u64 offset of the graph data), then that string's length
//!    again (u64 16), which `load_graphs` reads from the file's end.
//!
//! - ImmutableGraph (src/graph/immutable_graph.cc `Save`): u64 magic
//!   `0xDD3C5FFE20046ABF`, then its out-CSR as a CSRMatrix. The metagraph
//!   of a homogeneous graph is one node with a self-loop; DGL converts it
//!   from COO on save: 1 x 1, indptr [0, 1], indices [0], data [0],
//!   sorted false (checked against DGL's bytes).
//! - CSRMatrix (include/dgl/aten/csr.h `Save`): u64 magic
//!   `0xDD6CD31205DFF127`, i64 num_cols, i64 num_rows (that order), NDArray
//!   indptr, indices, data, bool sorted.
//! - UnitGraph (src/graph/unit_graph.cc `Save`): u64 magic
//!   `0xDD2E60F0F6B4A127`, i64 formats saved | 2^32 (COO: 1, the one form a
//!   graph made from edges has), i64 formats allowed | 2^32 (all: 7), then
//!   each saved form: the COO (`COO::Save`): its metagraph (an
//!   ImmutableGraph, as above) and a COOMatrix.
//! - COOMatrix (include/dgl/aten/coo.h `Save`): u64 magic
//!   `0xDD61FFD305DFF127`, i64 num_cols, i64 num_rows, NDArray row (the
//!   sources), col (the destinations), data (none: int64 of shape [0]),
//!   bool row_sorted, bool col_sorted (both false).
//!
//! The tensors of a node or edge type come in the order DGL's
//! `std::unordered_map` of names iterates them (its string hash decides,
//! not the insertion order): fixed per set of names, taken from DGL's own
//! output ([`NODE_ORDER`], [`EDGE_ORDER`]).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use super::tensors::{write_ndarray_header, CountingWriter};
use crate::model::DType;
use crate::shuffle::Partition;
use crate::{Error, Result};

const FILE_MAGIC: u64 = 0xDD2E_4FF0_46B4_A13F;
const FILE_VERSION: u64 = 2;
const GRAPH_TYPE_HETERO: u64 = 2;
const META_AREA: u64 = 4096;
const HETEROGRAPH_MAGIC: u64 = 0xDD58_9FBE_3522_4ABF;
const IMMUTABLE_GRAPH_MAGIC: u64 = 0xDD3C_5FFE_2004_6ABF;
const CSR_MAGIC: u64 = 0xDD6C_D312_05DF_F127;
const COO_MAGIC: u64 = 0xDD61_FFD3_05DF_F127;
const UNIT_GRAPH_MAGIC: u64 = 0xDD2E_60F0_F6B4_A127;
/// UnitGraph format codes carry bit 32 to mark the newer encoding.
const FORMAT_FLAG: i64 = 1 << 32;
const COO_CODE: i64 = 1;
const ALL_CODES: i64 = 7;
/// Offset of the graph data: the metadata area, the offset itself and an
/// empty label vector.
const GRAPH_DATA_AT: u64 = META_AREA + 8 + 8;
/// Values converted per write of a column.
const BATCH: usize = 1 << 13;

/// Node tensors in the order DGL saves them (see the module doc).
pub const NODE_ORDER: [&str; 3] = ["_TYPE", "inner_node", "_ID"];
/// Edge tensors in the order DGL saves them.
pub const EDGE_ORDER: [&str; 3] = ["_TYPE", "inner_edge", "_ID"];

/// One stretch of a 1-D array, produced while it is written.
#[derive(Clone, Debug)]
pub enum Piece<'a> {
    /// These values.
    Values(&'a [u64]),
    /// These small values.
    Small(&'a [u16]),
    /// `start, start + 1, ...`, `len` values.
    Range { start: u64, len: u64 },
    /// `value`, `len` times.
    Fill { value: u64, len: u64 },
    /// `i` repeated `counts[i]` times, for every `i`.
    Runs(Vec<u64>),
}

impl Piece<'_> {
    fn len(&self) -> Option<u64> {
        match self {
            Piece::Values(v) => Some(v.len() as u64),
            Piece::Small(v) => Some(v.len() as u64),
            Piece::Range { len, .. } | Piece::Fill { len, .. } => Some(*len),
            Piece::Runs(c) => c.iter().try_fold(0u64, |s, &n| s.checked_add(n)),
        }
    }

    /// The largest value (0 when empty), to check it fits the dtype.
    fn max(&self) -> Option<u64> {
        match *self {
            Piece::Values(v) => Some(v.iter().copied().max().unwrap_or(0)),
            Piece::Small(v) => Some(v.iter().copied().max().unwrap_or(0) as u64),
            Piece::Range { start, len } if len > 0 => start.checked_add(len - 1),
            Piece::Fill { value, len } if len > 0 => Some(value),
            Piece::Range { .. } | Piece::Fill { .. } => Some(0),
            Piece::Runs(ref c) => Some(c.len().saturating_sub(1) as u64),
        }
    }

    /// Calls `f` with the values, in batches of at most [`BATCH`];
    /// generated values go through `scratch`.
    fn for_batches(&self, scratch: &mut Vec<u64>, mut f: impl FnMut(&[u64])) {
        let mut gen = |len: u64, value: &dyn Fn(u64) -> u64| {
            batched(len, |at, n| {
                scratch.clear();
                scratch.extend((at..at + n).map(value));
                f(scratch);
            })
        };
        match *self {
            Piece::Values(v) => v.chunks(BATCH).for_each(f),
            Piece::Small(v) => gen(v.len() as u64, &|i| v[i as usize] as u64),
            Piece::Range { start, len } => gen(len, &|i| start + i),
            Piece::Fill { value, len } => gen(len, &|_| value),
            Piece::Runs(ref counts) => {
                for (t, &c) in counts.iter().enumerate() {
                    gen(c, &|_| t as u64);
                }
            }
        }
    }
}

/// Calls `f(offset, count)` for `len` items in batches of [`BATCH`].
fn batched(len: u64, mut f: impl FnMut(u64, u64)) {
    let mut at = 0;
    while at < len {
        let n = (len - at).min(BATCH as u64);
        f(at, n);
        at += n;
    }
}

/// A named 1-D tensor of the graph.
#[derive(Clone, Debug)]
pub struct Column<'a> {
    pub name: &'static str,
    pub dtype: DType,
    pub pieces: Vec<Piece<'a>>,
}

impl Column<'_> {
    fn len(&self) -> Option<u64> {
        self.pieces
            .iter()
            .try_fold(0u64, |s, p| s.checked_add(p.len()?))
    }
}

/// A homogeneous DGLGraph in COO form with node and edge tensors.
#[derive(Clone, Debug)]
pub struct GraphSpec<'a> {
    pub num_nodes: u64,
    pub src: &'a [u64],
    pub dst: &'a [u64],
    pub ndata: Vec<Column<'a>>,
    pub edata: Vec<Column<'a>>,
}

impl<'a> GraphSpec<'a> {
    /// The part-local graph of `part`, with `_TYPE` tensors when the input
    /// graph has several node or edge types.
    pub fn of_partition(part: &'a Partition, hetero: bool) -> Self {
        let num_inner = part.num_inner();
        let halo = part.halo.len() as u64;
        let edges = part.num_edges();
        let i64s = |name, pieces| Column {
            name,
            dtype: DType::I64,
            pieces,
        };
        let mut ndata = vec![
            i64s(
                "_ID",
                vec![
                    Piece::Range {
                        start: part.node_start,
                        len: num_inner,
                    },
                    Piece::Values(&part.halo),
                ],
            ),
            Column {
                name: "inner_node",
                dtype: DType::U8,
                pieces: vec![
                    Piece::Fill {
                        value: 1,
                        len: num_inner,
                    },
                    Piece::Fill {
                        value: 0,
                        len: halo,
                    },
                ],
            },
        ];
        let mut edata = vec![
            i64s(
                "_ID",
                vec![Piece::Range {
                    start: part.edge_start,
                    len: edges,
                }],
            ),
            Column {
                name: "inner_edge",
                dtype: DType::U8,
                pieces: vec![Piece::Fill {
                    value: 1,
                    len: edges,
                }],
            },
        ];
        if hetero {
            ndata.push(Column {
                name: "_TYPE",
                dtype: DType::I16,
                pieces: vec![
                    Piece::Runs(part.inner.iter().map(|v| v.len() as u64).collect()),
                    Piece::Small(&part.halo_types),
                ],
            });
            edata.push(Column {
                name: "_TYPE",
                dtype: DType::I32,
                pieces: vec![Piece::Runs(
                    part.eids.iter().map(|v| v.len() as u64).collect(),
                )],
            });
        }
        GraphSpec {
            num_nodes: num_inner + halo,
            src: &part.src,
            dst: &part.dst,
            ndata,
            edata,
        }
    }
}

/// Writes `g` to `path` as `dgl.save_graphs(path, [g])` does; returns the
/// bytes written.
pub fn write_graph(path: &Path, g: &GraphSpec<'_>) -> Result<u64> {
    check(g).map_err(|m| Error::Stage {
        stage: "graph.dgl",
        message: format!("{}: {m}", path.display()),
    })?;
    let io = |e| Error::io(path, e);
    let mut w = CountingWriter::new(File::create(path).map_err(io)?);
    write_file(&mut w, g).map_err(io)?;
    w.finish().map_err(io)
}

/// What DGL would refuse or what would not fit its dtypes.
fn check(g: &GraphSpec<'_>) -> std::result::Result<(), String> {
    if g.src.len() != g.dst.len() {
        return Err(format!(
            "{} sources but {} destinations",
            g.src.len(),
            g.dst.len()
        ));
    }
    let ends = g.src.iter().chain(g.dst).copied().max();
    if ends.is_some_and(|m| m >= g.num_nodes) || g.num_nodes > i64::MAX as u64 {
        return Err(format!(
            "an edge end {} is not a node id below {}",
            ends.unwrap_or(0),
            g.num_nodes
        ));
    }
    let tensors = g.ndata.iter().map(|c| (c, g.num_nodes));
    let edges = g.src.len() as u64;
    for (c, rows) in tensors.chain(g.edata.iter().map(|c| (c, edges))) {
        check_column(c, rows)?;
    }
    Ok(())
}

fn check_column(c: &Column<'_>, rows: u64) -> std::result::Result<(), String> {
    let len = c
        .len()
        .ok_or_else(|| format!("tensor {}: length overflows", c.name))?;
    if len != rows {
        return Err(format!(
            "tensor {} has {len} values, expected {rows}",
            c.name
        ));
    }
    let limit = match c.dtype {
        DType::I64 => i64::MAX as u64,
        DType::I32 => i32::MAX as u64,
        DType::I16 => i16::MAX as u64,
        DType::U8 => u8::MAX as u64,
        d => return Err(format!("tensor {}: dtype {d:?} is not written", c.name)),
    };
    let max = c
        .pieces
        .iter()
        .map(Piece::max)
        .try_fold(0u64, |m, x| x.map(|x| m.max(x)));
    match max {
        Some(m) if m <= limit => Ok(()),
        _ => Err(format!(
            "tensor {}: a value does not fit {:?}",
            c.name, c.dtype
        )),
    }
}

fn put(w: &mut impl Write, x: u64) -> std::io::Result<()> {
    w.write_all(&x.to_le_bytes())
}

fn put_i64(w: &mut impl Write, x: i64) -> std::io::Result<()> {
    w.write_all(&x.to_le_bytes())
}

/// A dmlc string: u64 length, the bytes.
fn put_str(w: &mut impl Write, s: &str) -> std::io::Result<()> {
    put(w, s.len() as u64)?;
    w.write_all(s.as_bytes())
}

fn write_file(w: &mut CountingWriter, g: &GraphSpec<'_>) -> std::io::Result<()> {
    let mut meta = [0u8; META_AREA as usize];
    for (i, x) in [FILE_MAGIC, FILE_VERSION, GRAPH_TYPE_HETERO, 1]
        .iter()
        .enumerate()
    {
        meta[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
    }
    w.write_all(&meta)?;
    put(w, GRAPH_DATA_AT)?;
    put(w, 0)?; // no labels
    write_heterograph(w, g)?;
    write_tensor_lists(w, &g.ndata, &NODE_ORDER)?;
    write_tensor_lists(w, &g.edata, &EDGE_ORDER)?;
    for name in ["_N", "_E"] {
        put(w, 1)?;
        put_str(w, name)?;
    }
    // The graph offsets: a string of (u64 count, u64 offset), its length.
    for x in [16, 1, GRAPH_DATA_AT, 16] {
        put(w, x)?;
    }
    Ok(())
}

fn write_heterograph(w: &mut impl Write, g: &GraphSpec<'_>) -> std::io::Result<()> {
    put(w, HETEROGRAPH_MAGIC)?;
    write_metagraph(w)?;
    put(w, 1)?; // one relation graph
    put(w, UNIT_GRAPH_MAGIC)?;
    put_i64(w, COO_CODE | FORMAT_FLAG)?;
    put_i64(w, ALL_CODES | FORMAT_FLAG)?;
    write_metagraph(w)?;
    put(w, COO_MAGIC)?;
    put(w, g.num_nodes)?; // columns
    put(w, g.num_nodes)?; // rows
    write_array(w, DType::I64, &[Piece::Values(g.src)])?;
    write_array(w, DType::I64, &[Piece::Values(g.dst)])?;
    write_array(w, DType::I64, &[])?; // no data array
    w.write_all(&[0, 0])?; // not row- or column-sorted
    put(w, 1)?; // nodes per type: one type
    put(w, g.num_nodes)
}

/// The metagraph of a homogeneous graph (one node type with a self-loop)
/// as an ImmutableGraph with its out-CSR.
fn write_metagraph(w: &mut impl Write) -> std::io::Result<()> {
    put(w, IMMUTABLE_GRAPH_MAGIC)?;
    put(w, CSR_MAGIC)?;
    put(w, 1)?; // columns
    put(w, 1)?; // rows
    let one_edge = |w: &mut _, pieces: &[Piece<'_>]| write_array(w, DType::I64, pieces);
    one_edge(w, &[Piece::Range { start: 0, len: 2 }])?; // indptr
    one_edge(w, &[Piece::Fill { value: 0, len: 1 }])?; // indices
    one_edge(w, &[Piece::Fill { value: 0, len: 1 }])?; // edge ids
    w.write_all(&[0]) // not sorted
}

/// One type's tensors (a vector of one vector of (name, NDArray)), in
/// `order`; names not in `order` follow in the order given.
fn write_tensor_lists(
    w: &mut impl Write,
    cols: &[Column<'_>],
    order: &[&str],
) -> std::io::Result<()> {
    let rank = |c: &Column<'_>| {
        order
            .iter()
            .position(|&n| n == c.name)
            .unwrap_or(order.len())
    };
    let mut sorted: Vec<&Column<'_>> = cols.iter().collect();
    sorted.sort_by_key(|c| rank(c));
    put(w, 1)?;
    put(w, sorted.len() as u64)?;
    for c in sorted {
        put_str(w, c.name)?;
        write_array(w, c.dtype, &c.pieces)?;
    }
    Ok(())
}

/// A 1-D NDArray of `pieces` (checked to fit `dtype` beforehand).
fn write_array(w: &mut impl Write, dtype: DType, pieces: &[Piece<'_>]) -> std::io::Result<()> {
    let len = pieces.iter().filter_map(Piece::len).sum::<u64>();
    write_ndarray_header(w, dtype, &[len])?;
    let (mut buf, mut scratch) = (Vec::new(), Vec::new());
    let mut result = Ok(());
    for p in pieces {
        p.for_batches(&mut scratch, |values| {
            if result.is_ok() {
                encode(&mut buf, values, dtype.size());
                result = w.write_all(&buf);
            }
        });
    }
    result
}

/// `values` as little-endian integers of `size` bytes, into `buf`.
fn encode(buf: &mut Vec<u8>, values: &[u64], size: usize) {
    // One loop per width, so each copies a constant number of bytes.
    fn narrow<const N: usize>(buf: &mut Vec<u8>, values: &[u64]) {
        buf.reserve(values.len() * N);
        for v in values {
            buf.extend_from_slice(&v.to_le_bytes()[..N]);
        }
    }
    buf.clear();
    match size {
        8 => narrow::<8>(buf, values),
        4 => narrow::<4>(buf, values),
        2 => narrow::<2>(buf, values),
        _ => narrow::<1>(buf, values),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An NDArray read back: dtype code, bits, values widened to u64.
    type Array = (u8, u8, Vec<u64>);

    /// A reader of what [`write_graph`] writes, field by field, so the test
    /// states the layout independently of the writer's code.
    struct Reader<'a> {
        b: &'a [u8],
        at: usize,
    }

    impl Reader<'_> {
        fn u64(&mut self) -> u64 {
            let x = u64::from_le_bytes(self.b[self.at..self.at + 8].try_into().unwrap());
            self.at += 8;
            x
        }

        fn bytes(&mut self, n: usize) -> &[u8] {
            self.at += n;
            &self.b[self.at - n..self.at]
        }

        fn string(&mut self) -> String {
            let n = self.u64() as usize;
            String::from_utf8(self.bytes(n).to_vec()).unwrap()
        }

        fn ndarray(&mut self) -> Array {
            assert_eq!(self.u64(), 0xDD5E_40F0_96B4_A13F, "NDArray magic");
            assert_eq!(self.u64(), 0);
            assert_eq!(self.bytes(8), &[1, 0, 0, 0, 0, 0, 0, 0], "CPU context");
            assert_eq!(self.bytes(4), &[1, 0, 0, 0], "1-D");
            let d = self.bytes(4).to_vec();
            let len = self.u64() as usize;
            let nbytes = self.u64() as usize;
            let size = d[1] as usize / 8;
            assert_eq!(nbytes, len * size);
            let data = self.bytes(nbytes).to_vec();
            let values = data
                .chunks(size)
                .map(|c| {
                    let mut x = [0u8; 8];
                    x[..size].copy_from_slice(c);
                    u64::from_le_bytes(x)
                })
                .collect();
            (d[0], d[1], values)
        }

        fn metagraph(&mut self) {
            assert_eq!(self.u64(), IMMUTABLE_GRAPH_MAGIC);
            assert_eq!(self.u64(), CSR_MAGIC);
            assert_eq!((self.u64(), self.u64()), (1, 1));
            assert_eq!(self.ndarray().2, [0, 1]);
            assert_eq!(self.ndarray().2, [0]);
            assert_eq!(self.ndarray().2, [0]);
            assert_eq!(self.bytes(1), &[0]);
        }

        fn tensors(&mut self) -> Vec<(String, Array)> {
            assert_eq!(self.u64(), 1, "one type");
            let n = self.u64();
            (0..n).map(|_| (self.string(), self.ndarray())).collect()
        }
    }

    fn part() -> Partition {
        Partition {
            part: 1,
            node_start: 10,
            inner: vec![vec![5, 6], vec![7]],
            halo: vec![2, 20],
            halo_types: vec![1, 0],
            edge_start: 100,
            eids: vec![vec![0, 1], vec![2]],
            src: vec![3, 0, 4],
            dst: vec![0, 1, 2],
        }
    }

    #[test]
    fn a_heterograph_part_is_laid_out_field_by_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graph.dgl");
        let p = part();
        let bytes = write_graph(&path, &GraphSpec::of_partition(&p, true)).unwrap();
        let b = std::fs::read(&path).unwrap();
        assert_eq!(bytes, b.len() as u64);
        let mut r = Reader { b: &b, at: 0 };
        assert_eq!([r.u64(), r.u64(), r.u64(), r.u64()], [FILE_MAGIC, 2, 2, 1]);
        assert!(r.bytes(4096 - 32).iter().all(|&x| x == 0));
        assert_eq!((r.u64(), r.u64()), (4112, 0), "data offset, no labels");
        assert_eq!(r.u64(), HETEROGRAPH_MAGIC);
        r.metagraph();
        assert_eq!((r.u64(), r.u64()), (1, UNIT_GRAPH_MAGIC));
        assert_eq!((r.u64(), r.u64()), ((1 << 32) | 1, (1 << 32) | 7));
        r.metagraph();
        assert_eq!((r.u64(), r.u64(), r.u64()), (COO_MAGIC, 5, 5));
        assert_eq!(r.ndarray(), (0, 64, vec![3, 0, 4]));
        assert_eq!(r.ndarray(), (0, 64, vec![0, 1, 2]));
        assert_eq!(r.ndarray(), (0, 64, vec![]));
        assert_eq!(r.bytes(2), &[0, 0]);
        assert_eq!((r.u64(), r.u64()), (1, 5), "one node type of 5 nodes");
        let nodes = r.tensors();
        let names: Vec<&str> = nodes.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, NODE_ORDER);
        assert_eq!(nodes[0].1, (0, 16, vec![0, 0, 1, 1, 0]), "_TYPE int16");
        assert_eq!(nodes[1].1, (1, 8, vec![1, 1, 1, 0, 0]), "inner_node uint8");
        assert_eq!(nodes[2].1, (0, 64, vec![10, 11, 12, 2, 20]), "_ID int64");
        let edges = r.tensors();
        assert_eq!(edges[0], ("_TYPE".into(), (0, 32, vec![0, 0, 1])));
        assert_eq!(edges[1], ("inner_edge".into(), (1, 8, vec![1, 1, 1])));
        assert_eq!(edges[2], ("_ID".into(), (0, 64, vec![100, 101, 102])));
        assert_eq!((r.u64(), r.string()), (1, "_N".to_string()));
        assert_eq!((r.u64(), r.string()), (1, "_E".to_string()));
        assert_eq!([r.u64(), r.u64(), r.u64(), r.u64()], [16, 1, 4112, 16]);
        assert_eq!(r.at, b.len(), "nothing after the offsets");
    }

    #[test]
    fn a_homogeneous_part_has_no_type_tensors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graph.dgl");
        let p = part();
        write_graph(&path, &GraphSpec::of_partition(&p, false)).unwrap();
        let b = std::fs::read(&path).unwrap();
        let mut r = Reader { b: &b, at: 0 };
        r.at = b.len() - 32 - 2 * 18;
        assert_eq!((r.u64(), r.string()), (1, "_N".to_string()));
        let text = String::from_utf8_lossy(&b);
        assert!(!text.contains("_TYPE") && text.contains("inner_edge"));
    }

    #[test]
    fn bad_graphs_are_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graph.dgl");
        let mut p = part();
        p.dst[2] = 5;
        let e = write_graph(&path, &GraphSpec::of_partition(&p, true)).unwrap_err();
        assert!(e.to_string().contains("not a node id below 5"), "{e}");
        let mut p = part();
        p.eids[1].push(3);
        let e = write_graph(&path, &GraphSpec::of_partition(&p, true)).unwrap_err();
        assert!(
            e.to_string().contains("_TYPE has 4 values, expected 3"),
            "{e}"
        );
        let mut p = part();
        p.halo_types[0] = 40_000;
        let e = write_graph(&path, &GraphSpec::of_partition(&p, true)).unwrap_err();
        assert!(e.to_string().contains("does not fit I16"), "{e}");
        assert!(!path.exists());
    }
}
