//! The partitioner's settings from the command line: the partition script
//! or command, the native pipeline's settings, the worker count checked.

use std::path::Path;

use anyhow::{anyhow, bail};
use dgl_api::names;
use dgl_api::PartitionMode;
use dgl_partition::config::{AllParts, Config};

use super::PartitionConfig;
use crate::cli::{required, Options};
use crate::dgl::command::{Template, Value, Values};
use crate::workers::{NumParts, Workers};

/// The native pipeline's settings from the options: input (chunked by
/// default at <workspace>/chunked/metadata.json, or the text format), output
/// <workspace>/dataset, partitioner, balance, threads.
fn native_config(opts: &Options, graph_name: &str, num_parts: u32) -> Config<AllParts> {
    use dgl_partition::input::{Source, TextSource};
    use dgl_partition::model::DType;
    let n = &opts.native;
    let ws = &opts.runtime.workspace;
    let source = match (&n.text_nodes, &n.text_edges) {
        (Some(nodes), Some(edges)) => Source::Text(TextSource {
            nodes: nodes.clone(),
            edges: edges.clone(),
            removed_edges: n.text_removed_edges.clone(),
            schema: n.text_schema.clone(),
            num_node_weights: n.num_node_weights,
            node_attr_dtype: DType::F32,
            edge_attr_dtype: DType::F32,
        }),
        // The default folder may not exist yet: the loader writes it.
        _ => n.pipeline.chunked_source(ws),
    };
    let driver = AllParts { num_parts };
    let mut cfg = n
        .pipeline
        .config(source, ws.join(names::DATASET_DIR), graph_name, driver);
    cfg.balance_train = opts.job.balance_train.then(|| n.train_mask.clone());
    cfg.balance_edges = opts.job.balance_edges;
    cfg
}

/// The partitioner's settings from the options. `job_workers` is the job's
/// worker count as the operator states it in a pod (ENV_NUM_WORKERS), if
/// set: partitions for another count would only fail later, at the launcher.
pub fn partition_config(
    opts: &Options,
    job_workers: Option<u32>,
) -> anyhow::Result<PartitionConfig> {
    match opts.job.partition_mode {
        PartitionMode::Skip => bail!("partition mode Skip has no partitioner: the partitions must already be in each worker's workspace"),
        PartitionMode::DistParMetis => bail!("partition mode DistParMETIS has no partitioner: the launcher runs one partition rank per worker (mpirun)"),
        _ => {}
    }
    let native = opts.job.partition_mode.is_native();
    let user_command = opts.job.partition_command.is_some();
    let entry_point = if native || user_command {
        opts.job.partition_entry_point.clone()
    } else {
        Some(
            required(
                &opts.job.partition_entry_point,
                "--partition-entry-point (or --partition-command)",
                "partitioner",
            )?
            .clone(),
        )
    };
    let graph_name = opts.graph_name().map_err(|e| anyhow!(e))?.to_string();
    let workers = *required(&opts.job.num_partitions, "--num-partitions", "partitioner")?;
    let num_parts = num_parts(workers, job_workers)?.get();
    let command = match &opts.job.partition_command {
        Some(line) => Some(partition_words(opts, line, &graph_name, num_parts)?),
        None => None,
    };
    Ok(PartitionConfig {
        python: opts.runtime.python.clone(),
        entry_point,
        command,
        native: native.then(|| native_config(opts, &graph_name, num_parts)),
        graph_name,
        num_parts,
        balance_train: opts.job.balance_train,
        balance_edges: opts.job.balance_edges,
        workspace: opts.runtime.workspace.clone(),
        extra_args: opts.job.partition_args.clone(),
        stop_grace: opts.stop_grace(),
        use_graphbolt: opts.job.use_graphbolt,
    })
}

/// The placeholders of a partition command and their values.
pub fn partition_values(workspace: &Path, graph_name: &str, num_parts: u32) -> Values {
    let dataset = workspace.join(names::DATASET_DIR);
    vec![
        ("graph_name", Value::of(graph_name)),
        ("workspace", Value::of(workspace.display())),
        ("num_parts", Value::of(num_parts)),
        ("dataset_dir", Value::of(dataset.display())),
        (
            "part_config",
            Value::of(dataset.join(format!("{graph_name}.json")).display()),
        ),
        (
            "chunked_dir",
            Value::of(workspace.join(names::CHUNKED_DIR).display()),
        ),
    ]
}

/// --partition-command, split and filled. In DGL-API mode the balance flags
/// would be silently lost: the user writes them into the command instead.
fn partition_words(
    opts: &Options,
    line: &str,
    graph_name: &str,
    num_parts: u32,
) -> anyhow::Result<Vec<String>> {
    let native = opts.job.partition_mode.is_native();
    if !native && (opts.job.balance_train || opts.job.balance_edges) {
        bail!("--balance-train and --balance-edges add nothing to --partition-command (nothing is appended to it): write the partition script's own flags into the command");
    }
    let template = Template::parse(PARTITION_COMMAND_FLAG, line)?;
    let values = partition_values(&opts.runtime.workspace, graph_name, num_parts);
    Ok(template.fill(&values)?)
}

/// The flag of the launch.py convention's partition command.
pub const PARTITION_COMMAND_FLAG: &str = "--partition-command";

/// The partitions to make: one per worker of the job (as the operator
/// states it, when it does), at least one.
fn num_parts(workers: Workers, job_workers: Option<u32>) -> anyhow::Result<NumParts> {
    if let Some(n) = job_workers {
        let stated = format!("the job has {n} worker(s) ({})", names::ENV_NUM_WORKERS);
        workers.check(n as usize, &stated).map_err(|e| anyhow!(e))?;
    }
    match workers {
        Workers::Partitioned(n) => Ok(n),
        Workers::Standalone => bail!("--num-partitions must be at least 1"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use crate::roles::testing::opts;
    use clap::Parser;

    #[test]
    fn partition_config_checks_mode_flags_and_worker_count() {
        let skip = opts(&["--partition-mode", "Skip", "--num-partitions", "2"]);
        let e = partition_config(&skip, None).unwrap_err().to_string();
        assert!(e.contains("Skip has no partitioner"), "{e}");
        let e = partition_config(&opts(&["--graph-name", "g", "--num-partitions", "2"]), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--partition-entry-point (or --partition-command) is required"),
            "{e}"
        );
        let o = opts(&[
            "--graph-name",
            "g",
            "--partition-entry-point",
            "part.py",
            "--num-partitions",
            "2",
            "--balance-train",
            "--partition-arg",
            "--x",
        ]);
        let e = partition_config(&o, Some(3)).unwrap_err().to_string();
        assert!(e.contains("the job has 3 worker(s)"), "{e}");
        let cfg = partition_config(&o, crate::workers::stated_by_operator(Some(" 2\n"))).unwrap();
        assert_eq!(cfg.entry_point.as_deref(), Some("part.py"));
        assert_eq!((cfg.graph_name.as_str(), cfg.num_parts), ("g", 2));
        assert!(cfg.balance_train && !cfg.balance_edges);
        assert_eq!(cfg.extra_args, ["--x"]);
        assert!(cfg.native.is_none());
        let zero = opts(&[
            "--graph-name",
            "g",
            "--partition-entry-point",
            "p.py",
            "--num-partitions",
            "0",
        ]);
        assert!(partition_config(&zero, None)
            .unwrap_err()
            .to_string()
            .contains("at least 1"));
        // ParMETIS: the entry point is an optional loader.
        let native = opts(&[
            "--partition-mode",
            "ParMETIS",
            "--graph-name",
            "g",
            "--num-partitions",
            "2",
        ]);
        let cfg = partition_config(&native, None).unwrap();
        assert!(cfg.entry_point.is_none());
        assert_eq!(cfg.native.unwrap().driver.num_parts, 2);
    }

    #[test]
    fn an_object_url_input_reaches_the_pipeline_unchanged() {
        use dgl_partition::input::Source;
        let url = "s3://graphs/mag/metadata.json";
        let o = opts(&[
            "--partition-mode",
            "ParMETIS",
            "--graph-name",
            "g",
            "--num-partitions",
            "2",
            "--partition-input",
            url,
        ]);
        let native = partition_config(&o, None).unwrap().native.unwrap();
        assert_eq!(
            native.source,
            Source::Chunked {
                metadata: url.into()
            }
        );
        let dist = opts(&[
            "--partition-mode",
            "DistParMETIS",
            "--num-partitions",
            "2",
            "--partition-input",
            url,
        ]);
        let a = crate::roles::distpart::config::rank_program(&dist, "dgl-partition", "g").unwrap();
        assert!(a.windows(2).any(|w| w == ["--input", url]), "{a:?}");
    }

    #[test]
    fn the_pipelines_folder_names_are_the_apis() {
        use dgl_partition::settings;
        assert_eq!(settings::CHUNKED_DIR, names::CHUNKED_DIR);
        assert_eq!(settings::DATASET_DIR, names::DATASET_DIR);
        assert_eq!(settings::WORKSPACE, names::WORKSPACE);
        assert_eq!(settings::ENV_WORKER_INDEX, names::ENV_WORKER_INDEX);
    }

    /// A job of graph `g` in two parts in workspace /ws running `command`.
    fn with_command(command: &str) -> Options {
        opts(&[
            "--graph-name",
            "g",
            "--num-partitions",
            "2",
            "--workspace",
            "/ws",
            "--partition-command",
            command,
        ])
    }

    #[test]
    fn a_partition_command_is_filled_at_the_partitioner() {
        let o = with_command(
            "python3 partition_graph.py --dataset {graph_name} --num_parts {num_parts} --output {dataset_dir} --balance_train",
        );
        let cfg = partition_config(&o, None).unwrap();
        assert!(cfg.entry_point.is_none());
        let spec = super::super::user_command(cfg.command.as_deref().unwrap());
        assert_eq!(spec.program, "python3");
        assert_eq!(
            spec.args.join(" "),
            "partition_graph.py --dataset g --num_parts 2 --output /ws/dataset --balance_train"
        );
        let all =
            "p {graph_name} {workspace} {num_parts} {dataset_dir} {part_config} {chunked_dir}";
        let o = with_command(all);
        let words = partition_config(&o, None).unwrap().command.unwrap();
        assert_eq!(
            words.join(" "),
            "p g /ws 2 /ws/dataset /ws/dataset/g.json /ws/chunked"
        );
        let bad = opts(&[
            "--graph-name",
            "g",
            "--num-partitions",
            "2",
            "--partition-command",
            "p {output}",
        ]);
        let e = partition_config(&bad, None).unwrap_err().to_string();
        assert!(
            e.starts_with("--partition-command: unknown placeholder {output}"),
            "{e}"
        );
        let balance = opts(&[
            "--graph-name",
            "g",
            "--num-partitions",
            "2",
            "--balance-train",
            "--partition-command",
            "p",
        ]);
        let e = partition_config(&balance, None).unwrap_err().to_string();
        assert!(e.contains("write the partition script's own flags"), "{e}");
        assert!(Cli::try_parse_from([
            "dglrun",
            "--partition-command",
            "p",
            "--partition-entry-point",
            "x.py"
        ])
        .is_err());
    }
}
