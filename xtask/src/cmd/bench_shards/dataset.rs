//! The synthetic dataset in DGL's layout: random, incompressible files.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::common::*;

/// One file of a worker's shard, relative to the dataset folder.
#[derive(Clone, Debug)]
pub(super) struct ShardFile {
    pub(super) rel: String,
    pub(super) size: u64,
}

/// Writes `<ws>/dataset/bench.json` and `part<i>/{graph,node_feat,edge_feat}.dgl`
/// (`total` bytes in all, random) and returns every worker's file list: the
/// JSON and its part's files, as `Manifest::shard_files` selects them.
pub(super) fn generate_dataset(ws: &Path, parts: u32, total: u64) -> Result<Vec<Vec<ShardFile>>> {
    let dir = ws.join(dgl_api::names::DATASET_DIR);
    let json_name = dgl_api::wire::partition_json_name(GRAPH);
    let mut json = serde_json::json!({
        "graph_name": GRAPH,
        "part_method": "random",
        "num_parts": parts,
        "halo_hops": 1,
    });
    let per_part = total / u64::from(parts);
    let mut rng = Rng(0x5EED ^ nanos() as u64);
    let mut buf = vec![0u8; 4 << 20];
    let mut shards = Vec::new();
    let started = Instant::now();
    for i in 0..parts {
        let part_dir = dgl_api::wire::part_dir_name(i);
        std::fs::create_dir_all(dir.join(&part_dir))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // Roughly DGL's proportions: node features dominate.
        let graph = per_part / 4;
        let node = per_part * 3 / 5;
        let edge = per_part - graph - node;
        let mut files = Vec::new();
        for (name, size) in [
            ("graph.dgl", graph),
            ("node_feat.dgl", node),
            ("edge_feat.dgl", edge),
        ] {
            let rel = format!("{part_dir}/{name}");
            let path = dir.join(&rel);
            let mut f =
                File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut left = size;
            while left > 0 {
                let k = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                rng.fill(&mut buf[..k]);
                f.write_all(&buf[..k])
                    .with_context(|| format!("cannot write {}", path.display()))?;
                left -= k as u64;
            }
            files.push(ShardFile { rel, size });
        }
        json[format!("part-{i}")] = serde_json::json!({
            "part_graph": format!("{part_dir}/graph.dgl"),
            "node_feats": format!("{part_dir}/node_feat.dgl"),
            "edge_feats": format!("{part_dir}/edge_feat.dgl"),
        });
        shards.push(files);
    }
    let text = serde_json::to_string_pretty(&json)?;
    std::fs::write(dir.join(&json_name), &text)?;
    for files in &mut shards {
        files.insert(
            0,
            ShardFile {
                rel: json_name.clone(),
                size: text.len() as u64,
            },
        );
    }
    eprintln!(
        "    dataset: {parts} parts x {} MiB in {} ({:.1}s)",
        per_part / MIB,
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(shards)
}

/// splitmix64: fast, and its output does not compress.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next().to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }
}

/// Every file is there with its size (the content was checked by the
/// receiver: sha256 for dglrun, byte counts for the plain copy).
pub(super) fn check_sizes(dataset: &Path, files: &[ShardFile]) -> Result<()> {
    for f in files {
        let p = dataset.join(&f.rel);
        let len = std::fs::metadata(&p)
            .with_context(|| format!("{} is missing after the transfer", p.display()))?
            .len();
        if len != f.size {
            bail!("{} has {len} bytes, expected {}", p.display(), f.size);
        }
    }
    Ok(())
}
