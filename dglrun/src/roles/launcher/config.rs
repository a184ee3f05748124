//! The launcher's settings from the command line and the files it names
//! (the job's ConfigMap: hostfile, partfile, ip_config).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use dgl_api::duration;
use dgl_api::names;
use dgl_api::wire::TrainSpec;
use dgl_api::PartitionMode;

use super::super::{check_graphbolt, train_template};
use super::LaunchConfig;
use crate::cli::{required, Options};
use crate::dgl::dglenv;
use crate::net::hosts::{self, Peer};
use crate::roles::distpart::config::dist_partition;

/// The launcher's settings from the options and the files they name: the
/// workers (hostfile), the partitioner, DGL's ip_config, the token and, in
/// partition mode DistParMETIS, mpirun's.
pub fn launch_config(opts: &Options) -> anyhow::Result<LaunchConfig> {
    let graph_name = opts.graph_name().map_err(|e| anyhow!(e))?.to_string();
    let command = train_template(opts)?;
    // The seed's convention passes these to the script; launch.py's only
    // fills them into placeholders, when given (0: not given).
    let (entry_point, num_epochs, batch_size) = match &command {
        Some(_) => (
            String::new(),
            opts.job.num_epochs.unwrap_or(0),
            opts.job.batch_size.unwrap_or(0),
        ),
        None => (
            required(
                &opts.job.train_entry_point,
                "--train-entry-point (or --train-command)",
                "launcher",
            )?
            .clone(),
            *required(&opts.job.num_epochs, "--num-epochs", "launcher")?,
            *required(&opts.job.batch_size, "--batch-size", "launcher")?,
        ),
    };
    let (hostfile, workers) = launch_workers(opts)?;
    let from_cache = launch_cache(opts)?;
    let partitioner = match from_cache {
        Some(_) => None,
        None => launch_partitioner(opts)?,
    };
    let ip_config = launch_ip_config(opts, &workers)?;
    let num_trainers = opts
        .job
        .num_trainers
        .or_else(|| workers[0].slots)
        .unwrap_or(1);
    let dist_partition = (opts.job.partition_mode == PartitionMode::DistParMetis)
        .then(|| dist_partition(opts, &graph_name, &hostfile))
        .transpose()?;
    let store = match (&from_cache, &dist_partition) {
        (None, Some(_)) => cache_store(opts, workers.len() as u32),
        _ => None,
    };
    let spec = TrainSpec {
        graph_name,
        entry_point,
        num_epochs,
        batch_size,
        num_trainers,
        num_samplers: opts.job.num_samplers,
        num_servers: opts.job.num_servers,
        machine_rank: 0,
        ip_config,
        master_port: opts.launch.master_port,
        extra_args: opts.extra.clone(),
        command: command.map(|t| t.words),
        use_graphbolt: opts.job.use_graphbolt,
    };
    check_graphbolt(opts)?;
    check_train_command(opts, &spec, workers.len() as u32)?;
    Ok(LaunchConfig {
        spec,
        workers,
        partitioner,
        from_cache,
        store,
        token: opts.token()?,
        wait_timeout: duration::secs(opts.launch.wait_timeout),
        peer_timeout: opts.timeouts.peer(),
        stop_grace: opts.stop_grace(),
        dist_partition,
        progress_interval: duration::secs(opts.launch.progress_interval),
    })
}

/// Refuses a training command a worker could not fill (an unknown
/// placeholder, {num_epochs} without --num-epochs, no interpreter) before
/// any worker is started, with this launcher's workspace for the paths.
fn check_train_command(opts: &Options, spec: &TrainSpec, machines: u32) -> anyhow::Result<()> {
    if spec.command.is_none() {
        return Ok(());
    }
    let ws = &opts.runtime.workspace;
    let paths = dglenv::Paths {
        workspace: ws,
        ip_config: &ws.join(names::IP_CONFIG),
        part_config: &ws
            .join(names::DATASET_DIR)
            .join(format!("{}.json", spec.graph_name)),
        num_machines: machines,
    };
    dglenv::user_command(spec, &opts.runtime.python, paths)?;
    Ok(())
}

/// The hostfile (--hostfile, else the ConfigMap's) and its workers, as many
/// as --num-partitions says when given.
fn launch_workers(opts: &Options) -> anyhow::Result<(PathBuf, Vec<Peer>)> {
    let hostfile = opts
        .launch
        .hostfile
        .clone()
        .unwrap_or_else(|| opts.runtime.config_dir.join(names::HOSTFILE));
    let workers = hosts::parse_hostfile(
        &hostfile.display().to_string(),
        &read(&hostfile)?,
        opts.runtime.agent_port,
    )?;
    if let Some(p) = opts.job.num_partitions {
        let stated = format!("{} lists {} worker(s)", hostfile.display(), workers.len());
        p.check(workers.len(), &stated).map_err(|e| anyhow!(e))?;
    }
    Ok((hostfile, workers))
}

/// With --partition-cache: the entry to ship from when the pod's lookup
/// (its first init container) found it; `None` on a miss (the partitioner
/// made them).
fn launch_cache(opts: &Options) -> anyhow::Result<Option<super::CacheEntry>> {
    let Some(url) = &opts.native.partition_cache else {
        return Ok(None);
    };
    let f = opts.launch.state_dir.join(names::CACHE_LOOKUP_FILE);
    let text = std::fs::read_to_string(&f).with_context(|| {
        format!(
            "--partition-cache: the lookup's answer {} cannot be read (the launcher pod's {} init container writes it)",
            f.display(),
            names::CACHE_LOOKUP_CONTAINER
        )
    })?;
    let lookup = dgl_api::partition_cache::Lookup::parse(&text)
        .map_err(|e| anyhow!("{}: {e}", f.display()))?;
    Ok(lookup.hit.then(|| super::CacheEntry {
        url: url.clone(),
        key: lookup.key,
    }))
}

/// Partition mode DistParMETIS with --partition-cache, on a miss: where
/// the ranks' parts are stored once made, and what their key is computed
/// from. `None` (logged) when the key cannot be: the job goes on uncached.
fn cache_store(opts: &Options, workers: u32) -> Option<super::cache_store::CacheStore> {
    let url = opts.native.partition_cache.clone()?;
    match crate::roles::cache_lookup::key_input(opts, Some(workers)) {
        Ok(input) => Some(super::cache_store::CacheStore { url, input }),
        Err(e) => {
            tracing::error!("the partitions will not be stored in the partition cache: {e:#}");
            None
        }
    }
}

/// The partitioner's agent: --partitioner, else the ConfigMap's partfile;
/// none in partition modes Skip and DistParMETIS.
fn launch_partitioner(opts: &Options) -> anyhow::Result<Option<SocketAddr>> {
    if matches!(
        opts.job.partition_mode,
        PartitionMode::Skip | PartitionMode::DistParMetis
    ) {
        return Ok(None);
    }
    let addr = match &opts.launch.partitioner {
        Some(a) => hosts::parse_addr(a, opts.runtime.agent_port)
            .map_err(|e| anyhow!("--partitioner: {e}"))?,
        None => {
            let f = opts.runtime.config_dir.join(names::PARTFILE);
            hosts::parse_partfile(&f.display().to_string(), &read(&f)?)?
        }
    };
    Ok(Some(addr))
}

/// DGL's ip_config: --ip-config, else the ConfigMap's when it has one
/// (either checked against the workers), else made from the workers' IPs
/// and --dgl-port.
fn launch_ip_config(opts: &Options, workers: &[Peer]) -> anyhow::Result<String> {
    let file = opts.launch.ip_config.clone().or_else(|| {
        let f = opts.runtime.config_dir.join(names::IP_CONFIG);
        f.is_file().then_some(f)
    });
    Ok(match file {
        Some(f) => {
            let content = read(&f)?;
            hosts::check_ip_config(&f.display().to_string(), &content, workers)?;
            content
        }
        None => dgl_api::files::render_ip_config(
            &workers
                .iter()
                .map(|w| (w.ip, opts.launch.dgl_port))
                .collect::<Vec<_>>(),
        ),
    })
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use crate::roles::standalone::config::standalone_config;
    use crate::roles::testing::{launcher_files, launcher_opts, opts};
    use clap::Parser;

    #[test]
    fn launch_config_reads_the_configmaps_files() {
        let dir = launcher_files();
        let cfg = launch_config(&launcher_opts(dir.path(), &["--", "--lr", "0.1"])).unwrap();
        assert_eq!(cfg.workers.len(), 2);
        assert_eq!(cfg.partitioner, Some("10.0.0.9:30049".parse().unwrap()));
        assert_eq!(cfg.spec.ip_config, "10.0.0.1 30050\n10.0.0.2 30050\n");
        assert_eq!(cfg.spec.num_trainers, 3, "the hostfile's slots");
        assert_eq!(cfg.spec.extra_args, ["--lr", "0.1"]);
        assert!(cfg.dist_partition.is_none());
        // An ip_config in the ConfigMap is used, and checked.
        std::fs::write(dir.path().join(names::IP_CONFIG), "10.0.0.2\n10.0.0.1\n").unwrap();
        let e = launch_config(&launcher_opts(dir.path(), &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("partition order"), "{e}");
        std::fs::write(
            dir.path().join(names::IP_CONFIG),
            "10.0.0.1 40000\n10.0.0.2 40000\n",
        )
        .unwrap();
        let cfg = launch_config(&launcher_opts(dir.path(), &[])).unwrap();
        assert_eq!(cfg.spec.ip_config, "10.0.0.1 40000\n10.0.0.2 40000\n");
        let e = launch_config(&launcher_opts(dir.path(), &["--num-partitions", "3"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lists 2 worker(s)"), "{e}");
        // Skip: no partitioner, the partfile is not read.
        std::fs::remove_file(dir.path().join(names::PARTFILE)).unwrap();
        let skip = launcher_opts(
            dir.path(),
            &["--partition-mode", "Skip", "--num-trainers", "1"],
        );
        let cfg = launch_config(&skip).unwrap();
        assert_eq!((cfg.partitioner, cfg.spec.num_trainers), (None, 1));
        let e = launch_config(&launcher_opts(dir.path(), &[])).unwrap_err();
        assert!(format!("{e:#}").contains("cannot read"), "{e:#}");
    }

    /// DistParMETIS with a cache: on a miss the ranks run and their parts
    /// are stored (keyed for the hostfile's workers); on a hit no rank runs
    /// and no store is planned.
    #[test]
    fn a_distparmetis_launcher_stores_on_a_miss_and_ships_on_a_hit() {
        let dir = launcher_files();
        let state = dir.path().display().to_string();
        let key = "ab".repeat(32);
        let cached = |answer: &str| {
            std::fs::write(dir.path().join(names::CACHE_LOOKUP_FILE), answer).unwrap();
            let o = launcher_opts(
                dir.path(),
                &[
                    "--partition-mode",
                    "DistParMETIS",
                    "--partition-input",
                    "s3://graphs/g/metadata.json",
                    "--partition-cache",
                    "s3://graphs/cache",
                    "--state-dir",
                    &state,
                ],
            );
            launch_config(&o).unwrap()
        };
        let miss = cached(&format!("miss {key}\n"));
        assert!(miss.from_cache.is_none() && miss.dist_partition.is_some());
        let store = miss.store.expect("a store on a miss");
        assert_eq!(store.url, "s3://graphs/cache");
        assert_eq!(store.input.settings.workers, 2, "the hostfile's workers");
        let hit = cached(&format!("hit {key}\n"));
        assert_eq!(hit.from_cache.map(|c| c.key), Some(key));
        assert!(hit.store.is_none() && hit.partitioner.is_none());
    }

    #[test]
    fn use_graphbolt_is_sent_to_the_workers_or_refused_naming_the_option() {
        let dir = launcher_files();
        let cfg = launch_config(&launcher_opts(dir.path(), &["--use-graphbolt"])).unwrap();
        assert!(cfg.spec.use_graphbolt);
        let e = launch_config(&launcher_opts(
            dir.path(),
            &["--use-graphbolt", "--partition-mode", "DistParMETIS"],
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("--use-graphbolt is not supported with partition mode DistParMETIS"),
            "{e}"
        );
        let alone = opts(&[
            "--num-partitions",
            "0",
            "--use-graphbolt",
            "--train-entry-point",
            "t.py",
        ]);
        let e = standalone_config(&alone).unwrap_err().to_string();
        assert!(e.starts_with("--use-graphbolt needs workers"), "{e}");
    }

    #[test]
    fn a_train_command_is_checked_at_the_launcher_and_sent_unfilled() {
        let dir = launcher_files();
        let d = dir.path().display().to_string();
        let token = dir.path().join("token").display().to_string();
        let base = [
            "--config-dir",
            &d,
            "--token-file",
            &token,
            "--graph-name",
            "g",
        ];
        let with = |cmd: &str, more: &[&str]| {
            let mut a: Vec<&str> = base.to_vec();
            a.extend(["--train-command", cmd]);
            a.extend(more);
            Cli::try_parse_from(["dglrun"].iter().chain(&a)).map(|c| c.opts)
        };
        // Neither --num-epochs nor --batch-size is needed, nothing appended.
        let line =
            "python3 nc.py --graph_name {graph_name} --ip_config {ip_config} --num_epochs 30";
        let cfg = launch_config(&with(line, &[]).unwrap()).unwrap();
        let words = cfg.spec.command.as_deref().unwrap();
        assert_eq!(words.last().map(String::as_str), Some("30"));
        assert!(
            words.contains(&"{ip_config}".to_string()),
            "filled on the worker"
        );
        assert_eq!((cfg.spec.num_epochs, cfg.spec.batch_size), (0, 0));
        // Refused before any worker is contacted, naming flag and placeholder.
        for (cmd, want) in [
            (
                "python3 nc.py --x {ipconfig}",
                "--train-command: unknown placeholder {ipconfig}",
            ),
            (
                "python3 nc.py --e {num_epochs}",
                "--num-epochs was not given",
            ),
            ("python3 'nc.py", "a quote is not closed"),
            ("./run.sh", "must start with the Python interpreter"),
        ] {
            let e = launch_config(&with(cmd, &[]).unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{cmd}: {e}");
        }
        let o = with("python3 nc.py --e {num_epochs}", &["--num-epochs", "4"]).unwrap();
        assert!(launch_config(&o).is_ok());
        // One convention at a time.
        assert!(with(line, &["--train-entry-point", "t.py"]).is_err());
        assert!(with(line, &["--", "--lr", "0.1"]).is_err());
    }
}
