//! The seed's text format, read as DGL 0.8's `tools/distpartitioning`
//! (`utils.py`, `convert_partition.py`) and its producer
//! `examples/pytorch/rgcn/experimental/write_mag.py` define it:
//!
//! - `xxx_nodes.txt`: `<node_type_id> <weight1..k> <type_node_id> <attrs...>`.
//!   Line `i` (counting non-empty lines from 0) is node `i` in the
//!   *homogeneous* id space: nodes are grouped by type in type order, and
//!   `type_node_id` must be `i` minus the type's first homogeneous id.
//! - `xxx_edges.txt` (and the optional removed-edges file of self loops and
//!   duplicates, which DGL 0.8 merged back): `<src_id> <dst_id>
//!   <type_edge_id> <edge_type_id> <attrs...>`, src/dst homogeneous ids
//!   ("global_src_id -- ... line # in the graph_nodes.txt"). An edge's
//!   per-type id is `type_edge_id`, so edges may come in any order.
//! - The schema JSON (`--schema mag.json`): `{"nid": {ntype: [start, end]},
//!   "eid": {etype: [start, end]}}`; types are numbered in order of `start`
//!   (ids in the files are these numbers). DGL 0.8 wrote relation names as
//!   `eid` keys; a `src:rel:dst` key names the end types, a plain relation
//!   takes them from its edges. Without a schema, types are named `_N` /
//!   `_E` (one type) or `_N<id>` / `_E<id>`, and counts come from the files.
//! - Weights become `NodeType::weights` (int64 `[count, k]`); attributes
//!   become feature `feat` of the node or edge type, of the given dtype.
//!
//! A share ([`read_share`]) needs the global per-type edge ids, which only
//! the whole edges file gives, so every rank parses the whole input and
//! keeps its slice: fine for this legacy format's sizes.

use std::collections::BTreeMap;
use std::path::Path;

use rayon::prelude::*;
use serde_json::Value;

use super::csv::block_starts;
use super::limits::{kind, quoted, safe, token_kind};
use super::metadata::json_error;
use super::{split_even, Share, TextSource};
use crate::model::{DType, EdgeType, InputGraph, NodeType, Tensor};
use crate::{Error, Result};

pub(crate) fn read_share(src: &TextSource, rank: u32, world: u32) -> Result<Share> {
    let graph = read_all(src)?;
    Ok(slice(graph, rank, world))
}

fn read_all(src: &TextSource) -> Result<InputGraph> {
    let schema = match &src.schema {
        Some(p) => Some(Schema::load(p)?),
        None => None,
    };
    let nodes = Table::parse(&src.nodes, 2 + src.num_node_weights, src.node_attr_dtype)?;
    let ntypes = build_nodes(&nodes, src, schema.as_ref())?;
    let mut edge_tables = vec![Table::parse(&src.edges, 4, src.edge_attr_dtype)?];
    if let Some(p) = &src.removed_edges {
        edge_tables.push(Table::parse(p, 4, src.edge_attr_dtype)?);
    }
    let name = src
        .nodes
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = name
        .trim_end_matches(".txt")
        .trim_end_matches("nodes")
        .trim_end_matches('_');
    let mut g = InputGraph {
        name: name.to_string(),
        ntypes,
        etypes: Vec::new(),
    };
    g.etypes = build_edges(&g, &edge_tables, src, schema.as_ref())?;
    Ok(g)
}

/// `{"nid": {..}, "eid": {..}}`, types in order of their first id.
struct Schema {
    ntypes: Vec<(String, u64, u64)>,
    etypes: Vec<(String, u64, u64)>,
}

impl Schema {
    fn load(path: &Path) -> Result<Schema> {
        let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let v: Value = serde_json::from_slice(&text).map_err(|e| json_error(path, &e))?;
        Ok(Schema {
            ntypes: ranges(path, &v, "nid")?,
            etypes: ranges(path, &v, "eid")?,
        })
    }
}

fn ranges(path: &Path, v: &Value, key: &str) -> Result<Vec<(String, u64, u64)>> {
    let bad = |k: String, m: String| Error::input(path, k, m);
    let obj = v.get(key).and_then(Value::as_object).ok_or_else(|| {
        bad(
            key.into(),
            "missing: expected an object of type name -> [start, end]".into(),
        )
    })?;
    let mut out = Vec::new();
    for (name, r) in obj {
        // Type names may become file names: each `:` part one component.
        if let Err(e) = name.split(':').try_for_each(crate::names::check) {
            let m = format!("found {e}; {}", crate::names::EXPECTED);
            return Err(bad(format!("{key}.{}", safe(name)), m));
        }
        let pair = r
            .as_array()
            .map(|a| a.iter().map(Value::as_u64).collect::<Vec<_>>());
        match pair.as_deref() {
            Some([Some(a), Some(b)]) if a <= b => out.push((name.clone(), *a, *b)),
            _ => {
                return Err(bad(
                    format!("{key}.{}", safe(name)),
                    format!("expected [start, end], found {}", kind(r)),
                ))
            }
        }
    }
    out.sort_by_key(|t| t.1);
    let mut next = 0;
    for (name, a, b) in &out {
        if *a != next {
            let m = format!("starts at {a}; expected {next} (ranges must tile 0..total in order)");
            return Err(bad(format!("{key}.{}", safe(name)), m));
        }
        next = *b;
    }
    Ok(out)
}

/// A parsed text file: per row, `prefix` integer columns, then attributes.
struct Table {
    path: std::path::PathBuf,
    /// 1-based line of each row.
    lines: Vec<u64>,
    ints: Vec<i64>,
    prefix: usize,
    /// Attribute count of each row, and all attributes as `dtype` bytes.
    attr_len: Vec<u32>,
    attrs: Vec<u8>,
}

impl Table {
    fn parse(path: &Path, prefix: usize, dtype: DType) -> Result<Table> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let starts = block_starts(&bytes, rayon::current_num_threads() * 4);
        let blocks: Vec<Result<Table>> = starts
            .par_windows(2)
            .map(|w| {
                let before = bytes[..w[0]].iter().filter(|&&c| c == b'\n').count() as u64;
                Table::parse_block(&bytes[w[0]..w[1]], before, path, prefix, dtype)
            })
            .collect();
        let mut all = Table::empty(path, prefix);
        for b in blocks {
            let b = b?;
            all.lines.extend_from_slice(&b.lines);
            all.ints.extend_from_slice(&b.ints);
            all.attr_len.extend_from_slice(&b.attr_len);
            all.attrs.extend_from_slice(&b.attrs);
        }
        Ok(all)
    }

    fn empty(path: &Path, prefix: usize) -> Table {
        let path = path.to_path_buf();
        Table {
            path,
            lines: vec![],
            ints: vec![],
            prefix,
            attr_len: vec![],
            attrs: vec![],
        }
    }

    fn parse_block(
        b: &[u8],
        first_line: u64,
        path: &Path,
        prefix: usize,
        dtype: DType,
    ) -> Result<Table> {
        let mut t = Table::empty(path, prefix);
        for (i, line) in b.split(|&c| c == b'\n').enumerate() {
            let line_no = first_line + i as u64 + 1;
            let mut fields = line
                .split(|c| c.is_ascii_whitespace())
                .filter(|f| !f.is_empty());
            let mut n = 0;
            for f in fields.by_ref().take(prefix) {
                let v = parse_int(f).ok_or_else(|| {
                    Error::input(
                        path,
                        format!("line {line_no}"),
                        format!(
                            "column {}: expected an integer, found {}",
                            n + 1,
                            token_kind(f)
                        ),
                    )
                })?;
                t.ints.push(v);
                n += 1;
            }
            if n == 0 {
                continue;
            }
            if n < prefix {
                let m =
                    format!("expected at least {prefix} columns before the attributes, found {n}");
                return Err(Error::input(path, format!("line {line_no}"), m));
            }
            let mut attrs = 0u32;
            for f in fields {
                push_attr(&mut t.attrs, f, dtype).ok_or_else(|| {
                    let m = format!(
                        "column {}: expected a {dtype:?} attribute, found {}",
                        prefix + attrs as usize + 1,
                        token_kind(f)
                    );
                    Error::input(path, format!("line {line_no}"), m)
                })?;
                attrs += 1;
            }
            t.lines.push(line_no);
            t.attr_len.push(attrs);
        }
        Ok(t)
    }

    fn rows(&self) -> usize {
        self.lines.len()
    }

    fn int(&self, row: usize, col: usize) -> i64 {
        self.ints[row * self.prefix + col]
    }

    fn err(&self, row: usize, message: impl Into<String>) -> Error {
        Error::input(&self.path, format!("line {}", self.lines[row]), message)
    }

    /// Column `col` of `row` as an id (non-negative).
    fn id(&self, row: usize, col: usize, what: &str) -> Result<u64> {
        let v = self.int(row, col);
        u64::try_from(v).map_err(|_| {
            self.err(
                row,
                format!("{what}: expected a non-negative id, found {v}"),
            )
        })
    }
}

fn parse_int(f: &[u8]) -> Option<i64> {
    std::str::from_utf8(f).ok()?.parse().ok()
}

fn push_attr(out: &mut Vec<u8>, f: &[u8], dtype: DType) -> Option<()> {
    let s = std::str::from_utf8(f).ok()?;
    match dtype {
        DType::F32 => out.extend_from_slice(&s.parse::<f32>().ok()?.to_le_bytes()),
        DType::F64 => out.extend_from_slice(&s.parse::<f64>().ok()?.to_le_bytes()),
        DType::I64 => out.extend_from_slice(&s.parse::<i64>().ok()?.to_le_bytes()),
        DType::I32 => out.extend_from_slice(&s.parse::<i32>().ok()?.to_le_bytes()),
        DType::I16 => out.extend_from_slice(&s.parse::<i16>().ok()?.to_le_bytes()),
        DType::I8 => out.extend_from_slice(&s.parse::<i8>().ok()?.to_le_bytes()),
        DType::U8 => out.push(s.parse::<u8>().ok()?),
        DType::Bool => out.push(match s {
            "0" | "false" | "False" => 0,
            "1" | "true" | "True" => 1,
            _ => return None,
        }),
        // No half-precision parser in std; read such attributes as float32.
        DType::F16 => return None,
    }
    Some(())
}

/// Collects per-type attribute rows, checking each type keeps one width.
struct Attrs {
    width: Vec<Option<u32>>,
    data: Vec<Vec<u8>>,
}

impl Attrs {
    fn new(types: usize) -> Attrs {
        Attrs {
            width: vec![None; types],
            data: vec![Vec::new(); types],
        }
    }

    fn check(&mut self, t: usize, len: u32, table: &Table, row: usize, what: &str) -> Result<()> {
        match self.width[t] {
            Some(w) if w != len => Err(table.err(
                row,
                format!("{len} attributes, but earlier rows of {what} have {w}; expected the same number"),
            )),
            _ => {
                self.width[t] = Some(len);
                Ok(())
            }
        }
    }

    fn tensor(&self, t: usize, rows: u64, dtype: DType) -> Option<Tensor> {
        let w = self.width[t].filter(|&w| w > 0)?;
        Some(Tensor {
            dtype,
            shape: vec![rows, u64::from(w)],
            data: self.data[t].clone(),
        })
    }
}

fn build_nodes(table: &Table, src: &TextSource, schema: Option<&Schema>) -> Result<Vec<NodeType>> {
    let k = src.num_node_weights;
    let mut starts: Vec<u64> =
        schema.map_or_else(Vec::new, |s| s.ntypes.iter().map(|t| t.1).collect());
    let known = schema.map(|s| s.ntypes.len());
    let mut counts: Vec<u64> =
        schema.map_or_else(Vec::new, |s| s.ntypes.iter().map(|t| t.2 - t.1).collect());
    let mut weights: Vec<Vec<i64>> = vec![Vec::new(); counts.len()];
    let mut attrs = Attrs::new(counts.len());
    let mut attr_at = 0usize;
    for row in 0..table.rows() {
        let (hid, t) = (row as u64, table.id(row, 0, "node type")?);
        // Types are numbered densely: more types than lines is no graph.
        if t >= table.rows() as u64 {
            let m = format!(
                "node type {t}; expected a type id below the file's {} node lines",
                table.rows()
            );
            return Err(table.err(row, m));
        }
        let t = t as usize;
        if known.is_none() {
            if t + 1 < starts.len() {
                return Err(table.err(
                    row,
                    format!(
                        "node type {t} after type {}; expected nodes grouped by type in type order",
                        starts.len() - 1
                    ),
                ));
            }
            while starts.len() <= t {
                starts.push(hid);
                counts.push(0);
                weights.push(Vec::new());
                attrs = grow(attrs, starts.len());
            }
            counts[t] += 1;
        } else if t >= starts.len() || hid < starts[t] || hid >= starts[t] + counts[t] {
            let m = format!(
                "node {hid} (this line) has type {t}, but the schema's nid ranges put it elsewhere"
            );
            return Err(table.err(row, m));
        }
        let type_nid = table.id(row, 1 + k, "type node id")?;
        if type_nid != hid - starts[t] {
            let m = format!("type node id {type_nid}; expected {} (line order is homogeneous id order, type {t} starts at node {})", hid - starts[t], starts[t]);
            return Err(table.err(row, m));
        }
        weights[t].extend((0..k).map(|w| table.int(row, 1 + w)));
        let len = table.attr_len[row];
        attrs.check(t, len, table, row, &format!("node type {t}"))?;
        let bytes = len as usize * src.node_attr_dtype.size();
        attrs.data[t].extend_from_slice(&table.attrs[attr_at..attr_at + bytes]);
        attr_at += bytes;
    }
    let total: u64 = counts.iter().sum();
    if table.rows() as u64 != total {
        let m = format!(
            "the schema's nid ranges hold {total} nodes, but the file has {} node lines",
            table.rows()
        );
        return Err(Error::input(&table.path, "", m));
    }
    let names = names(schema.map(|s| &s.ntypes), counts.len(), "_N");
    Ok((0..counts.len())
        .map(|t| {
            let mut data = BTreeMap::new();
            if let Some(f) = attrs.tensor(t, counts[t], src.node_attr_dtype) {
                data.insert("feat".to_string(), f);
            }
            let weights = (k > 0).then(|| Tensor {
                dtype: DType::I64,
                shape: vec![counts[t], k as u64],
                data: weights[t].iter().flat_map(|w| w.to_le_bytes()).collect(),
            });
            NodeType {
                name: names[t].clone(),
                count: counts[t],
                data,
                weights,
            }
        })
        .collect())
}

fn grow(mut a: Attrs, n: usize) -> Attrs {
    a.width.resize(n, None);
    a.data.resize(n, Vec::new());
    a
}

fn names(schema: Option<&Vec<(String, u64, u64)>>, n: usize, base: &str) -> Vec<String> {
    match schema {
        Some(s) => s.iter().map(|t| t.0.clone()).collect(),
        None if n == 1 => vec![base.to_string()],
        None => (0..n).map(|t| format!("{base}{t}")).collect(),
    }
}

/// One edge type while edges are placed.
struct Slot {
    name: String,
    ends: Option<(usize, usize)>,
    count: u64,
    src: Vec<u64>,
    dst: Vec<u64>,
    seen: Vec<bool>,
    attr_rows: Vec<(usize, usize)>,
}

fn build_edges(
    g: &InputGraph,
    tables: &[Table],
    src: &TextSource,
    schema: Option<&Schema>,
) -> Result<Vec<EdgeType>> {
    let mut slots = edge_slots(g, tables, src, schema)?;
    let offsets = g.node_offsets();
    let locate = |hid: u64| -> Option<(usize, u64)> {
        let t = offsets.partition_point(|&o| o <= hid).checked_sub(1)?;
        (t < g.ntypes.len()).then(|| (t, hid - offsets[t]))
    };
    let mut attrs = Attrs::new(slots.len());
    for (ti, table) in tables.iter().enumerate() {
        let mut attr_at = 0usize;
        for row in 0..table.rows() {
            let e = table.id(row, 3, "edge type")? as usize;
            let (s, d, eid) = (
                table.id(row, 0, "source")?,
                table.id(row, 1, "destination")?,
                table.id(row, 2, "type edge id")?,
            );
            let total = offsets[offsets.len() - 1];
            let (Some((st, sid)), Some((dt, did))) = (locate(s), locate(d)) else {
                let bad = if locate(s).is_none() { s } else { d };
                return Err(table.err(row, format!("node id {bad} is out of range: expected an id below {total} (the nodes file's lines)")));
            };
            let slot = &mut slots[e];
            let ends = *slot.ends.get_or_insert((st, dt));
            if ends != (st, dt) {
                let m = format!(
                    "edge type {} joins {} -> {}, but this edge joins {} -> {}",
                    quoted(&slot.name),
                    safe(&g.ntypes[ends.0].name),
                    safe(&g.ntypes[ends.1].name),
                    safe(&g.ntypes[st].name),
                    safe(&g.ntypes[dt].name)
                );
                return Err(table.err(row, m));
            }
            let held = slot.seen.len() as u64;
            if eid >= slot.count.min(held) || slot.seen[eid as usize] {
                let m = if eid >= slot.count {
                    format!("expected below {}", slot.count)
                } else if eid >= held {
                    format!(
                        "expected below {held}: the edges files hold {held} edges of this type, \
                         the schema says {}",
                        slot.count
                    )
                } else {
                    "it appears twice".into()
                };
                return Err(table.err(
                    row,
                    format!("type edge id {eid} of {}: {m}", quoted(&slot.name)),
                ));
            }
            slot.seen[eid as usize] = true;
            (slot.src[eid as usize], slot.dst[eid as usize]) = (sid, did);
            let len = table.attr_len[row];
            attrs.check(
                e,
                len,
                table,
                row,
                &format!("edge type {}", quoted(&slot.name)),
            )?;
            slot.attr_rows[eid as usize] = (ti, attr_at);
            attr_at += len as usize * src.edge_attr_dtype.size();
        }
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(e, slot)| finish_edge(e, slot, &attrs, tables, src))
        .collect()
}

/// Per edge type id: name, declared ends, count (schema or counted).
fn edge_slots(
    g: &InputGraph,
    tables: &[Table],
    src: &TextSource,
    schema: Option<&Schema>,
) -> Result<Vec<Slot>> {
    let mut counted: Vec<u64> = Vec::new();
    let lines: usize = tables.iter().map(Table::rows).sum();
    for table in tables {
        for row in 0..table.rows() {
            let e = table.id(row, 3, "edge type")?;
            if e >= lines as u64 {
                let m = format!("edge type {e}; expected a type id below the {lines} edge lines");
                return Err(table.err(row, m));
            }
            let e = e as usize;
            if let Some(s) = schema.filter(|s| e >= s.etypes.len()) {
                return Err(table.err(
                    row,
                    format!(
                        "edge type {e}; the schema's eid lists {} types",
                        s.etypes.len()
                    ),
                ));
            }
            if counted.len() <= e {
                counted.resize(e + 1, 0);
            }
            counted[e] += 1;
        }
    }
    let n = schema.map_or(counted.len(), |s| s.etypes.len());
    let names = names(schema.map(|s| &s.etypes), n, "_E");
    let mut slots = Vec::with_capacity(n);
    for (e, name) in names.into_iter().enumerate() {
        let found = counted.get(e).copied().unwrap_or(0);
        let count = schema.map_or(found, |s| s.etypes[e].2 - s.etypes[e].1);
        let ends = canonical_ends(g, &name, src, e)?;
        // Sized by what the files hold, never by the schema alone.
        let c = count.min(found) as usize;
        slots.push(Slot {
            name,
            ends,
            count,
            src: vec![0; c],
            dst: vec![0; c],
            seen: vec![false; c],
            attr_rows: vec![(0, 0); c],
        });
    }
    Ok(slots)
}

/// The end types a `src:rel:dst` schema key names; `None` for a relation.
fn canonical_ends(
    g: &InputGraph,
    name: &str,
    src: &TextSource,
    e: usize,
) -> Result<Option<(usize, usize)>> {
    let parts: Vec<&str> = name.split(':').collect();
    let schema = src.schema.as_deref().unwrap_or(Path::new("schema"));
    let key = format!("eid.{}", safe(name));
    match parts[..] {
        [_] => Ok(None),
        [s, _, d] => {
            let find = |t: &str| g.ntypes.iter().position(|n| n.name == t);
            match (find(s), find(d)) {
                (Some(s), Some(d)) => Ok(Some((s, d))),
                _ => Err(Error::input(
                    schema,
                    key,
                    format!(
                        "edge type {e} {} names a node type the nid ranges do not list",
                        quoted(name)
                    ),
                )),
            }
        }
        _ => Err(Error::input(
            schema,
            key,
            format!("{}: expected a relation name or src:rel:dst", quoted(name)),
        )),
    }
}

fn finish_edge(
    e: usize,
    slot: Slot,
    attrs: &Attrs,
    tables: &[Table],
    src: &TextSource,
) -> Result<EdgeType> {
    let unseen = slot.seen.iter().position(|s| !s);
    let beyond = (slot.count > slot.seen.len() as u64).then_some(slot.seen.len());
    if let Some(missing) = unseen.or(beyond) {
        let path = src.schema.as_deref().unwrap_or(&src.edges);
        let m = format!(
            "edge type {} has {} edges, but type edge id {missing} is in no edges file",
            quoted(&slot.name),
            slot.count
        );
        return Err(Error::input(path, format!("eid.{}", safe(&slot.name)), m));
    }
    let Some((src_type, dst_type)) = slot.ends else {
        let m = format!("edge type {e} {} has no edges to tell its end types; name it src:rel:dst in the schema", quoted(&slot.name));
        return Err(Error::input(
            src.schema.as_deref().unwrap_or(&src.edges),
            format!("eid.{}", safe(&slot.name)),
            m,
        ));
    };
    let rel = match slot.name.split(':').collect::<Vec<_>>()[..] {
        [_, rel, _] => rel.to_string(),
        _ => slot.name.clone(),
    };
    let mut data = BTreeMap::new();
    if let Some(w) = attrs.width[e].filter(|&w| w > 0) {
        let bytes = w as usize * src.edge_attr_dtype.size();
        let mut buf = Vec::with_capacity(slot.attr_rows.len() * bytes);
        for &(t, at) in &slot.attr_rows {
            buf.extend_from_slice(&tables[t].attrs[at..at + bytes]);
        }
        let shape = vec![slot.count, u64::from(w)];
        data.insert(
            "feat".to_string(),
            Tensor {
                dtype: src.edge_attr_dtype,
                shape,
                data: buf,
            },
        );
    }
    Ok(EdgeType {
        src_type,
        rel,
        dst_type,
        src: slot.src,
        dst: slot.dst,
        data,
    })
}

/// Rank's slice of a whole graph: an even split of each type's rows.
fn slice(mut g: InputGraph, rank: u32, world: u32) -> Share {
    let mut share = Share::default();
    for t in &mut g.ntypes {
        let r = split_even(t.count, rank, world);
        share.node_first.push(r.start);
        let rows: Vec<u64> = r.collect();
        for tensor in t.data.values_mut() {
            *tensor = tensor.gather(&rows);
        }
        t.weights = t.weights.as_ref().map(|w| w.gather(&rows));
    }
    for et in &mut g.etypes {
        let r = split_even(et.count(), rank, world);
        share.edge_first.push(r.start);
        let rows: Vec<u64> = r.clone().collect();
        et.src = et.src[r.start as usize..r.end as usize].to_vec();
        et.dst = et.dst[r.start as usize..r.end as usize].to_vec();
        for tensor in et.data.values_mut() {
            *tensor = tensor.gather(&rows);
        }
    }
    share.graph = g;
    share
}
