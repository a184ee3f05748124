//! Readers of the pipeline's inputs: DGL's chunked graph format
//! (metadata.json) and the seed's text format (xxx_nodes.txt /
//! xxx_edges.txt). Every error names the file and the line, or chunk and row.
//!
//! [`read`] loads a whole graph; [`read_share`] loads rank `r`'s share of it
//! for the distributed mode: a contiguous range of each type's chunks, with
//! global node counts but only the share's edges and feature rows.
//! [`write_chunked`] writes the chunked format (tests, benchmarks, users
//! without DGL's `chunk_graph.py`).

mod chunked;
mod csv;
mod limits;
pub(crate) mod metadata;
mod npy;
mod parquet;
mod parquet_check;
pub(crate) mod store;
mod text;
mod write;

use std::ops::Range;
use std::path::PathBuf;

use crate::model::{DType, InputGraph};
use crate::{Error, Result};

pub use store::{Fetched, CA_BUNDLE_VAR};
pub use write::write_chunked;

/// Where the input graph is.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// DGL's chunked graph format: the path of its `metadata.json`, or its
    /// object URL `s3://bucket/prefix/metadata.json`. Every file it lists
    /// must lie in metadata.json's folder (or below; for an object, a key
    /// below its prefix): a path with `..`, an absolute path elsewhere, or
    /// a symlink leading out of the folder is refused.
    Chunked { metadata: PathBuf },
    /// As `Chunked`, but the files it lists may be anywhere this process
    /// can read (`--allow-input-outside`: the input is trusted).
    ChunkedAnywhere { metadata: PathBuf },
    /// The seed's text format (see [`TextSource`]).
    Text(TextSource),
}

/// Whether `path` names an object in S3-compatible storage
/// (`s3://bucket/key`) rather than a local file.
pub fn is_object_url(path: &std::path::Path) -> bool {
    store::is_object(path)
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Chunked { metadata } => write!(f, "chunked {}", metadata.display()),
            Source::ChunkedAnywhere { metadata } => {
                write!(f, "chunked {} (files anywhere)", metadata.display())
            }
            Source::Text(t) => {
                write!(f, "text {} + {}", t.nodes.display(), t.edges.display())
            }
        }
    }
}

/// The seed's text format: one nodes file and one edges file, as DGL 0.8's
/// `tools/distpartitioning` (and its producer `write_mag.py`) define them.
///
/// Our reading: the src/dst ids of the edges file are *homogeneous* ids
/// over all node types, and line `i` of the nodes file (non-empty lines,
/// from 0) is homogeneous node `i`; nodes are grouped by type in type order
/// and `type_node_id` must be `i` minus the type's first id. Type names
/// come from the schema JSON `{"nid": {ntype: [start, end]}, "eid": {etype:
/// [start, end]}}` (type ids in the files number the types in order of
/// `start`); an `eid` key is a relation name (DGL 0.8's `hg.etypes`, end
/// types taken from the edges) or `src:rel:dst`. Without a schema, types are
/// `_N`/`_E` (one type) or `_N<id>`/`_E<id>` and counts come from the
/// files. An edge's per-type id is its `type_edge_id`.
#[derive(Clone, Debug, PartialEq)]
pub struct TextSource {
    /// `<node_type_id> <weight1..k> <type_node_id> <attributes...>` per line.
    pub nodes: PathBuf,
    /// `<src_id> <dst_id> <type_edge_id> <edge_type_id> <attributes...>`.
    pub edges: PathBuf,
    /// Edges the preprocessing set aside (self loops, duplicates), same
    /// format as `edges`; they are part of the graph.
    pub removed_edges: Option<PathBuf>,
    /// `{"nid": {ntype: [start, end]}, "eid": {etype: [start, end]}}`.
    pub schema: Option<PathBuf>,
    /// The `k` weight columns of the nodes file.
    pub num_node_weights: usize,
    /// Element type of the node attributes (feature `feat`).
    pub node_attr_dtype: DType,
    /// Element type of the edge attributes (feature `feat`).
    pub edge_attr_dtype: DType,
}

/// How [`write_chunked`] stores edge chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeFormat {
    /// Space-separated text, as DGL's `chunk_graph.py` writes.
    Csv,
    /// Two INT64 columns, snappy-compressed.
    Parquet,
    /// `.npy` of shape `[m, 2]`, int64 (our extension: DGL's own pipeline
    /// refuses numpy edge files).
    Npy,
}

/// One rank's share of the graph. Node weights (text format) are cut to the
/// share's rows like features.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Share {
    /// Global node counts per type; edges and tensors only of the share.
    pub graph: InputGraph,
    /// Per node type: the per-type id of the share's first node row (its
    /// feature tensors hold rows `node_first[t]..`).
    pub node_first: Vec<u64>,
    /// Per edge type: the per-type id of the share's first edge.
    pub edge_first: Vec<u64>,
    /// What was fetched from object storage (zero for local files).
    pub fetched: Fetched,
}

/// Reads the whole graph with up to `threads` threads.
pub fn read(source: &Source, threads: usize) -> Result<InputGraph> {
    Ok(read_share(source, 0, 1, threads)?.graph)
}

/// Reads rank `rank`'s share of `world` (see [`Share`]).
pub fn read_share(source: &Source, rank: u32, world: u32, threads: usize) -> Result<Share> {
    if world == 0 || rank >= world {
        return Err(Error::Config(format!(
            "rank {rank} is not in a world of {world} ranks"
        )));
    }
    // The pool's threads count what they fetch from object storage into
    // this read's session (ranks may be threads of one process).
    let session = std::sync::Arc::new(store::Session::default());
    let for_threads = session.clone();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .start_handler(move |_| store::enter(for_threads.clone()))
        .build()
        .map_err(|e| Error::Stage {
            stage: "input",
            message: format!("cannot start {threads} threads: {e}"),
        })?;
    let mut share = pool.install(|| match source {
        Source::Chunked { metadata } => chunked::read_share(metadata, rank, world, false),
        Source::ChunkedAnywhere { metadata } => chunked::read_share(metadata, rank, world, true),
        Source::Text(text) => text::read_share(text, rank, world),
    })?;
    share.fetched = session.fetched();
    if share.fetched.requests > 0 {
        tracing::info!(
            rank,
            bytes = share.fetched.bytes,
            requests = share.fetched.requests,
            "input fetched from object storage"
        );
    }
    Ok(share)
}

/// The items `0..n` that rank `rank` of `world` takes: contiguous, sizes
/// differing by at most one, the larger first (numpy's `array_split`, as
/// DGL's `generate_read_list`).
pub(crate) fn split_even(n: u64, rank: u32, world: u32) -> Range<u64> {
    let (w, r) = (u64::from(world), u64::from(rank));
    let (base, extra) = (n / w, n % w);
    let start = r * base + r.min(extra);
    start..start + base + u64::from(r < extra)
}

#[cfg(test)]
mod tests {
    use super::split_even;

    #[test]
    fn split_even_matches_numpy_array_split() {
        // np.array_split(np.arange(10), 4) -> [0,1,2] [3,4,5] [6,7] [8,9]
        let got: Vec<_> = (0..4).map(|r| split_even(10, r, 4)).collect();
        assert_eq!(got, vec![0..3, 3..6, 6..8, 8..10]);
        let got: Vec<_> = (0..3).map(|r| split_even(2, r, 3)).collect();
        assert_eq!(got, vec![0..1, 1..2, 2..2]);
    }
}
