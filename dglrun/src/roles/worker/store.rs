//! `StorePart` (partition mode DistParMETIS with `spec.partitionCache`, on
//! a miss): this worker uploads the part its rank wrote into its workspace
//! (worker 0 also the partition JSON and the assignment) to the cache's
//! entry, and reports each file's size and SHA-256 to the launcher, which
//! commits the entry's manifest once every worker did
//! (`roles::launcher::cache_store`).

use std::sync::atomic::AtomicU64;

use dgl_api::wire::{FileEntry, Manifest, Response, StoreRequest};

use super::{reporting, Shared};
use crate::dataset::Layout;
use crate::net::channel::{Channel, ChannelError};

/// Uploads the part, with progress reports meanwhile (a large part takes
/// longer than the launcher lets a worker stay silent).
pub(super) async fn store_reporting(
    shared: &Shared,
    req: &StoreRequest,
    ch: &mut Channel,
) -> Result<Response, ChannelError> {
    let received = AtomicU64::new(0);
    reporting(req.part_id, store_part(shared, req), &received, ch).await
}

/// The upload itself; the files uploaded as a manifest, or why not.
async fn store_part(shared: &Shared, req: &StoreRequest) -> Result<Response, String> {
    // Not while a shard is being written.
    let _one_at_a_time = shared.prepare.lock().await;
    let ctx = &shared.cfg.train;
    if ctx.index.is_some_and(|i| i != req.part_id) {
        return Err(format!(
            "this worker has index {:?} but the launcher asked it to store part {}",
            ctx.index, req.part_id
        ));
    }
    let dir = Layout::new(&ctx.workspace, &req.graph_name).dir;
    let r = req.clone();
    let uploaded = tokio::task::spawn_blocking(move || {
        use dgl_partition::cache::{Cache, Key};
        let cache = Cache::new(&r.url)?;
        let key = Key::from_hex(&r.key)?;
        cache.upload_part(&key, &dir, r.part_id, r.num_parts, r.shared)
    })
    .await
    .map_err(|e| format!("the partition cache upload panicked: {e}"))?
    .map_err(|e| format!("part {}: the partition cache: {e}", req.part_id))?;
    let bytes: u64 = uploaded.iter().map(|f| f.size).sum();
    tracing::info!(
        url = %req.url, key = %req.key, part = req.part_id, files = uploaded.len(), bytes,
        "part uploaded to the partition cache"
    );
    Ok(Response::Manifest(Manifest {
        graph_name: req.graph_name.clone(),
        num_parts: req.num_parts,
        files: uploaded
            .into_iter()
            .map(|f| FileEntry {
                path: f.path,
                size: f.size,
                sha256: f.sha256,
            })
            .collect(),
    }))
}
