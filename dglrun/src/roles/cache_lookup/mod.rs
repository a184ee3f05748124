//! The partition cache's lookup (`spec.partitionCache`), the launcher pod's
//! first init container: computes the job's key from the chunked input and
//! the partition settings (as the partitioner will), asks the cache whether
//! the entry is there, and answers in its termination message (read by the
//! operator, which then makes a partitioner or not) and in the launcher's
//! state folder (read by the launcher, which then ships from the cache).

use anyhow::{bail, Context};
use dgl_api::names::CACHE_LOOKUP_FILE;
use dgl_api::partition_cache::Lookup;
use dgl_partition::cache::{Cache, Key};

use crate::cli::Options;
use crate::roles::partitioner::{self, PartitionConfig};

/// Looks the job's partitions up; exit 0 with an answer either way, an
/// error (the container fails, and with it the job) when the input or the
/// cache cannot be read.
pub async fn main(opts: &Options) -> anyhow::Result<()> {
    let Some(url) = opts.native.partition_cache.clone() else {
        bail!("the partition cache lookup needs --partition-cache (spec.partitionCache)");
    };
    let cfg =
        partitioner::config::partition_config(opts, crate::workers::stated_by_operator_env())?;
    let lookup = tokio::task::spawn_blocking(move || look_up(&cfg, &url))
        .await
        .context("the partition cache lookup panicked")??;
    let line = lookup.render();
    let file = opts.launch.state_dir.join(CACHE_LOOKUP_FILE);
    std::fs::write(&file, &line).with_context(|| format!("cannot write {}", file.display()))?;
    crate::termination::write(&line);
    Ok(())
}

fn look_up(cfg: &PartitionConfig, url: &str) -> anyhow::Result<Lookup> {
    let key = key(cfg)?;
    let cache = Cache::new(url)?;
    let found = cache.lookup(&key)?;
    match &found {
        Some(m) => tracing::info!(
            cache = %cache.url(), %key, files = m.files.len(), bytes = m.total_bytes(),
            "partition cache: entry found; partitioning is skipped and each worker downloads its own part"
        ),
        None => tracing::info!(
            cache = %cache.url(), %key,
            "partition cache: no entry; the partitioner partitions and stores the partitions under this key"
        ),
    }
    Ok(Lookup {
        hit: found.is_some(),
        key: key.to_string(),
    })
}

/// The job's key: what the lookup asks for and the partitioner stores
/// under. Only the native pipeline reading a given input has one: a loader
/// or a partition script writes its input only once it runs.
pub fn key(cfg: &PartitionConfig) -> anyhow::Result<Key> {
    let Some(native) = cfg.native.as_ref() else {
        bail!("--partition-cache (spec.partitionCache) needs partition mode ParMETIS");
    };
    if cfg.entry_point.is_some() || cfg.command.is_some() {
        bail!("--partition-cache (spec.partitionCache) needs the chunked graph given by --partition-input: a loader (--partition-entry-point or --partition-command) writes its input only when it runs, so no key can name it before");
    }
    let settings = dgl_partition::cache::key::KeySettings::of_run(
        native,
        native.driver.num_parts,
        cfg.use_graphbolt,
    );
    Ok(dgl_partition::cache::key::key(&native.source, &settings)?)
}
