//! Partition mode DistParMETIS with `spec.partitionCache`, on a miss: the
//! ranks' parts are stored in the cache. Part `i` lies only on worker `i`,
//! so each worker uploads its own (worker 0 also the partition JSON and the
//! assignment: `Request::StorePart`), and the launcher writes the entry's
//! manifest last from what they report, after checking each object is in
//! the bucket ([`Cache::commit`]): the entry is a hit only when complete.
//!
//! The key is computed before the ranks read the input and again after
//! they wrote their parts: an object replaced meanwhile changes it, and
//! partitions of a mix would be wrong under either key, so nothing is
//! stored. Any failure is logged, never fatal: the parts serve this job all
//! the same, and the next job partitions again.

use dgl_api::wire::{Request, Response, StoreRequest};
use dgl_partition::cache::{Cache, FileEntry, Key, Owner};
use tokio::task::JoinSet;

use super::{prepare_shard, LaunchConfig};
use crate::net::hosts::Peer;
use crate::roles::cache_lookup::KeyInput;

/// Where the ranks' parts go, and what their key is computed from.
#[derive(Debug, Clone)]
pub struct CacheStore {
    /// The cache, `s3://bucket/prefix`.
    pub url: String,
    pub input: KeyInput,
}

impl CacheStore {
    /// The key before the ranks read the input; `None` (logged) when it
    /// cannot be computed: then nothing is stored.
    pub async fn key_before(&self) -> Option<Key> {
        match self.key_now().await {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::error!("the partitions will not be stored in the partition cache: computing the key: {e:#}");
                None
            }
        }
    }

    async fn key_now(&self) -> anyhow::Result<Key> {
        let input = self.input.clone();
        tokio::task::spawn_blocking(move || input.key())
            .await
            .map_err(|e| anyhow::anyhow!("computing the partition cache key panicked: {e}"))?
    }

    /// Stores every worker's part under `key` (computed before the ranks
    /// ran), if the input still has it; logs what was stored or why not.
    pub async fn store(&self, cfg: &LaunchConfig, key: &Key) {
        match self.try_store(cfg, key).await {
            Ok(line) => tracing::info!("{line}"),
            Err(e) => {
                tracing::error!("the partitions were not stored in the partition cache: {e:#}")
            }
        }
    }

    async fn try_store(&self, cfg: &LaunchConfig, key: &Key) -> anyhow::Result<String> {
        let after = self.key_now().await?;
        if &after != key {
            anyhow::bail!("the input changed while it was partitioned (key {key} before, {after} after); not stored");
        }
        let cache = Cache::new(&self.url)?;
        blocking(&cache, key, |c, k| c.begin(k)).await?;
        let files = self.upload_parts(cfg, key).await?;
        let n = cfg.workers.len() as u32;
        let m = blocking(&cache, key, move |c, k| c.commit(k, n, files)).await?;
        Ok(format!(
            "partition cache {}: stored entry {key}: {} files, {} bytes, {} parts, each uploaded by its worker",
            cache.url(),
            m.files.len(),
            m.total_bytes(),
            m.num_parts
        ))
    }

    /// Asks every worker to upload its part; the files they uploaded.
    async fn upload_parts(&self, cfg: &LaunchConfig, key: &Key) -> anyhow::Result<Vec<FileEntry>> {
        let mut set = JoinSet::new();
        for w in &cfg.workers {
            let req = Request::StorePart(StoreRequest {
                graph_name: cfg.spec.graph_name.clone(),
                part_id: w.index,
                num_parts: cfg.workers.len() as u32,
                url: self.url.clone(),
                key: key.to_string(),
                shared: w.index == 0,
            });
            let (w, token, silent) = (w.clone(), cfg.token.clone(), cfg.peer_timeout);
            set.spawn(async move {
                let r = prepare_shard(w.agent, &token, &req, silent).await;
                (w, r)
            });
        }
        let mut files = Vec::new();
        let mut first_error = None;
        while let Some(joined) = set.join_next().await {
            let (w, r) = joined.expect("store tasks do not panic");
            let reported = match r {
                Ok(Response::Manifest(m)) => owned_files(&w, m.files),
                Ok(Response::Error { message }) => Err(message),
                Ok(other) => Err(format!("unexpected reply {other:?}")),
                Err(e) => Err(e.to_string()),
            };
            match reported {
                Ok(mine) => files.extend(mine),
                Err(e) => {
                    first_error.get_or_insert(format!("{}: {e}", w.describe()));
                }
            }
        }
        match first_error {
            Some(e) => Err(anyhow::anyhow!(e)),
            None => Ok(files),
        }
    }
}

/// Worker `w`'s report as cache entries: only files of its own part (and,
/// from worker 0, the shared ones), each with its SHA-256.
fn owned_files(w: &Peer, files: Vec<dgl_api::wire::FileEntry>) -> Result<Vec<FileEntry>, String> {
    files
        .into_iter()
        .map(|f| {
            let part = Owner::of_path(&f.path).unwrap_or(Owner::Other);
            let own = match part {
                Owner::Part(p) => p == w.index,
                Owner::Shared | Owner::Other => w.index == 0,
            };
            if !own || f.sha256.is_empty() {
                return Err(format!(
                    "reported {:?}, not a file of its own part with its SHA-256",
                    f.path
                ));
            }
            Ok(FileEntry {
                path: f.path,
                size: f.size,
                sha256: f.sha256,
                part,
            })
        })
        .collect()
}

/// Runs a blocking call of the cache library off the runtime.
async fn blocking<T: Send + 'static>(
    cache: &Cache,
    key: &Key,
    f: impl FnOnce(&Cache, &Key) -> dgl_partition::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let (c, k) = (cache.clone(), key.clone());
    tokio::task::spawn_blocking(move || f(&c, &k))
        .await
        .map_err(|e| anyhow::anyhow!("the partition cache call panicked: {e}"))?
        .map_err(anyhow::Error::from)
}
