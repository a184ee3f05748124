//! The partition cache's lookup (`spec.partitionCache`), the launcher pod's
//! first init container: computes the job's key from the chunked input and
//! the partition settings (as the partitioner, or in partition mode
//! DistParMETIS the launcher, will), asks the cache whether the entry is
//! there, and answers in its termination message (read by the operator,
//! which then makes a partitioner or not) and in the launcher's state
//! folder (read by the launcher, which then ships from the cache or, in
//! DistParMETIS, runs the ranks and stores their parts).

use anyhow::{anyhow, bail, Context};
use dgl_api::names::{self, CACHE_LOOKUP_FILE};
use dgl_api::partition_cache::Lookup;
use dgl_api::PartitionMode;
use dgl_partition::cache::key::KeySettings;
use dgl_partition::cache::{Cache, Key};
use dgl_partition::config::OwnPart;
use dgl_partition::input::Source;

use crate::cli::Options;
use crate::roles::partitioner::{self, PartitionConfig};

/// Looks the job's partitions up; exit 0 with an answer either way, an
/// error (the container fails, and with it the job) when the input or the
/// cache cannot be read.
pub async fn main(opts: &Options) -> anyhow::Result<()> {
    let Some(url) = opts.native.partition_cache.clone() else {
        bail!("the partition cache lookup needs --partition-cache (spec.partitionCache)");
    };
    let input = key_input(opts, None)?;
    let lookup = tokio::task::spawn_blocking(move || look_up(&input, &url))
        .await
        .context("the partition cache lookup panicked")??;
    let line = lookup.render();
    let file = opts.launch.state_dir.join(CACHE_LOOKUP_FILE);
    std::fs::write(&file, &line).with_context(|| format!("cannot write {}", file.display()))?;
    crate::termination::write(&line);
    Ok(())
}

fn look_up(input: &KeyInput, url: &str) -> anyhow::Result<Lookup> {
    let key = input.key()?;
    let cache = Cache::new(url)?;
    let found = cache.lookup(&key)?;
    match &found {
        Some(m) => tracing::info!(
            cache = %cache.url(), %key, files = m.files.len(), bytes = m.total_bytes(),
            "partition cache: entry found; partitioning is skipped and each worker downloads its own part"
        ),
        None => tracing::info!(
            cache = %cache.url(), %key,
            "partition cache: no entry; {} partitions and stores the partitions under this key",
            match input.settings.mode {
                dgl_partition::cache::Mode::ParMetis => "the partitioner",
                dgl_partition::cache::Mode::DistParMetis { .. } => "every worker's rank",
            }
        ),
    }
    Ok(Lookup {
        hit: found.is_some(),
        key: key.to_string(),
    })
}

/// What a job's key is computed from: the input and the settings that
/// change the partitions.
#[derive(Debug, Clone)]
pub struct KeyInput {
    pub source: Source,
    pub settings: KeySettings,
}

impl KeyInput {
    /// The key now (metadata.json read, one HEAD per chunk in a bucket).
    pub fn key(&self) -> anyhow::Result<Key> {
        Ok(dgl_partition::cache::key::key(
            &self.source,
            &self.settings,
        )?)
    }
}

/// The job's key input from the launcher's flags, in either native mode.
/// `workers`: the job's worker count when known (the launcher's hostfile);
/// else as the operator states it.
pub fn key_input(opts: &Options, workers: Option<u32>) -> anyhow::Result<KeyInput> {
    match opts.job.partition_mode {
        PartitionMode::DistParMetis => dist_key_input(opts, workers),
        PartitionMode::ParMetis => {
            let stated = workers.or_else(crate::workers::stated_by_operator_env);
            of_partitioner(&partitioner::config::partition_config(opts, stated)?)
        }
        other => bail!(
            "--partition-cache (spec.partitionCache) needs partition mode ParMETIS or DistParMETIS, not {other}"
        ),
    }
}

/// The job's key: what the lookup asks for and the partitioner stores
/// under. Only the native pipeline reading a given input has one: a loader
/// or a partition script writes its input only once it runs.
pub fn key(cfg: &PartitionConfig) -> anyhow::Result<Key> {
    of_partitioner(cfg)?.key()
}

/// Partition mode ParMETIS: the partitioner's input and settings.
fn of_partitioner(cfg: &PartitionConfig) -> anyhow::Result<KeyInput> {
    let Some(native) = cfg.native.as_ref() else {
        bail!(
            "--partition-cache (spec.partitionCache) needs partition mode ParMETIS or DistParMETIS"
        );
    };
    if cfg.entry_point.is_some() || cfg.command.is_some() {
        bail!("--partition-cache (spec.partitionCache) needs the chunked graph given by --partition-input: a loader (--partition-entry-point or --partition-command) writes its input only when it runs, so no key can name it before");
    }
    let settings = KeySettings::of_run(native, native.driver.num_parts, cfg.use_graphbolt);
    Ok(KeyInput {
        source: native.source.clone(),
        settings,
    })
}

/// Partition mode DistParMETIS: the ranks' input and settings, as
/// `dgl-partition rank` takes them from the launcher's flags
/// ([`crate::roles::distpart::config::rank_program`]), one part per worker.
/// The launcher pod computes the key, so it must read the input too: a
/// bucket, or a path in its image or on a volume it mounts.
fn dist_key_input(opts: &Options, workers: Option<u32>) -> anyhow::Result<KeyInput> {
    let n = &opts.native;
    if n.pipeline.input.is_none() {
        bail!("--partition-cache (spec.partitionCache) with partition mode DistParMETIS needs --partition-input: the key is computed in the launcher pod, which must read the chunked graph (s3://bucket/prefix/metadata.json, or a path its image or a volume holds) before any rank runs");
    }
    // What the ranks refuse, refused before a key names it.
    let graph_name = opts.graph_name().map_err(|e| anyhow!(e))?.to_string();
    crate::roles::distpart::config::rank_program(opts, "dgl-partition", &graph_name)
        .map_err(|e| anyhow!(e))?;
    let workers = workers
        .or_else(crate::workers::stated_by_operator_env)
        .or_else(|| opts.job.num_partitions.map(|w| w.count()))
        .filter(|w| *w > 0)
        .ok_or_else(|| {
            anyhow!(
                "--partition-cache: the worker count is unknown (neither {} nor --num-partitions)",
                names::ENV_NUM_WORKERS
            )
        })?;
    let ws = &opts.runtime.workspace;
    let mut cfg = n.pipeline.config(
        n.pipeline.chunked_source(ws),
        ws.join(names::DATASET_DIR),
        &graph_name,
        OwnPart {
            // dglrun never asks the ranks to gather the structure.
            gather_structure: false,
        },
    );
    cfg.balance_train = opts.job.balance_train.then(|| n.train_mask.clone());
    cfg.balance_edges = opts.job.balance_edges;
    Ok(KeyInput {
        settings: KeySettings::of_ranks(&cfg, workers, false),
        source: cfg.source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::testing::opts;
    use dgl_partition::cache::Mode;

    fn dist(extra: &[&str]) -> Options {
        let mut a = vec![
            "--partition-mode",
            "DistParMETIS",
            "--graph-name",
            "g",
            "--num-partitions",
            "2",
            "--partition-seed",
            "5",
            "--balance-train",
        ];
        a.extend(extra);
        opts(&a)
    }

    /// DistParMETIS keys the ranks' settings (one part per worker, the
    /// worker count given over the flags'), never ParMETIS's entry.
    #[test]
    fn distparmetis_keys_the_ranks_settings() {
        let o = dist(&["--partition-input", "s3://graphs/g/metadata.json"]);
        let k = key_input(&o, Some(3)).unwrap();
        let s = &k.settings;
        assert_eq!(
            s.mode,
            Mode::DistParMetis {
                gather_structure: false
            }
        );
        assert_eq!((s.workers, s.num_parts, s.seed), (3, 3, 5));
        assert_eq!(s.balance_train.as_deref(), Some("train_mask"));
        assert_eq!(s.graph_name, "g");
        let from_flags = key_input(&o, None).unwrap().settings;
        assert_eq!(
            from_flags.workers, 2,
            "--num-partitions without the operator's count"
        );
        let mut par = vec!["--partition-mode", "ParMETIS", "--graph-name", "g"];
        par.extend([
            "--num-partitions",
            "2",
            "--partition-seed",
            "5",
            "--balance-train",
        ]);
        par.extend(["--partition-input", "s3://graphs/g/metadata.json"]);
        let p = key_input(&opts(&par), None).unwrap().settings;
        assert_eq!(p.mode, Mode::ParMetis);
        assert_ne!(p, from_flags, "the mode is in the key");
    }

    /// The launcher computes the key, so it must be told where the input
    /// is; what the ranks refuse (a loader) is refused before any key.
    #[test]
    fn distparmetis_needs_an_input_the_launcher_reads() {
        let e = key_input(&dist(&[]), Some(2)).unwrap_err().to_string();
        assert!(
            e.contains("needs --partition-input") && e.contains("launcher pod"),
            "{e}"
        );
        let o = dist(&[
            "--partition-input",
            "/in",
            "--partition-entry-point",
            "load.py",
        ]);
        let e = key_input(&o, Some(2)).unwrap_err().to_string();
        assert!(e.contains("runs no loader script"), "{e}");
        let skip = opts(&["--partition-mode", "Skip", "--num-partitions", "2"]);
        let e = key_input(&skip, Some(2)).unwrap_err().to_string();
        assert!(e.contains("ParMETIS or DistParMETIS, not Skip"), "{e}");
    }
}
