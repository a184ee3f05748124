//! Partition mode DistParMETIS's settings from the launcher's command
//! line: mpirun's, and the rank program's arguments.

use std::path::Path;

use anyhow::{anyhow, Context};
use dgl_api::names;

use super::DistPartition;
use crate::cli::Options;

/// Partition mode DistParMETIS: mpirun of `dgl-partition rank` on the
/// workers, through `dglrun rsh` (this binary) with the launcher's token,
/// agent port and hostfile.
pub(crate) fn dist_partition(
    opts: &Options,
    graph_name: &str,
    hostfile: &Path,
) -> anyhow::Result<DistPartition> {
    let rank =
        rank_program(opts, &opts.launch.dgl_partition, graph_name).map_err(|e| anyhow!(e))?;
    let dglrun = std::env::current_exe().context("cannot find the dglrun binary")?;
    // Each rank under its guard (the same image's dglrun), which names it
    // when a signal kills it.
    let mut program = vec![
        dglrun.display().to_string(),
        "rank-guard".into(),
        "--".into(),
    ];
    program.extend(rank);
    let env = [
        (names::ENV_TOKEN_FILE, opts.runtime.token_file.clone()),
        (names::ENV_RUN, opts.runtime.run.to_string()),
        ("DGLRUN_AGENT_PORT", opts.runtime.agent_port.to_string()),
        ("DGLRUN_RSH_HOSTFILE", hostfile.display().to_string()),
    ];
    Ok(DistPartition {
        mpirun: opts.launch.mpirun.clone(),
        dglrun: dglrun.display().to_string(),
        program,
        if_include: opts.launch.mpi_if_include.clone(),
        own_ip: opts.runtime.listen.filter(|ip| !ip.is_unspecified()),
        env: env.map(|(k, v)| (k.to_string(), v)).to_vec(),
        marker: opts.partitioned_marker(),
        stop_grace: opts.stop_grace(),
        token: opts.token().ok(),
    })
}

/// `dgl-partition rank ...` from the launcher's options: the native
/// pipeline's flags, the graph name, the workers' Python. The input and the
/// output default to each worker's own workspace (its agent tells the rank).
pub fn rank_program(
    opts: &Options,
    program: &str,
    graph_name: &str,
) -> Result<Vec<String>, String> {
    let n = &opts.native;
    if n.text_nodes.is_some() {
        return Err(
            "partition mode DistParMETIS reads DGL's chunked format only \
                    (--partition-input), not the text format"
                .into(),
        );
    }
    if opts.job.partition_entry_point.is_some() || opts.job.partition_command.is_some() {
        return Err(
            "partition mode DistParMETIS runs no loader script: put the chunked \
                    graph in the image, on a volume every worker mounts or in a bucket, and \
                    name its metadata.json with --partition-input (a path or \
                    s3://bucket/prefix/metadata.json)"
                .into(),
        );
    }
    let mut a: Vec<String> = vec![program.into(), "rank".into()];
    let mut arg = |k: &str, v: String| a.extend([k.to_string(), v]);
    arg("--graph-name", graph_name.into());
    // The pipeline's own settings, rendered as dgl-partition parses them
    // (`--part-method M` first); --python after the method, as the command
    // line has always read.
    let pipeline = n.pipeline.to_args();
    let (method, rest) = pipeline.split_at(2);
    a.extend_from_slice(method);
    a.extend(["--python".to_string(), opts.runtime.python.clone()]);
    a.extend_from_slice(rest);
    if opts.job.balance_train {
        a.push(format!("--balance-train={}", n.train_mask));
    }
    if opts.job.balance_edges {
        a.push("--balance-edges".into());
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::testing::opts;

    #[test]
    fn the_rank_program_carries_the_pipeline_settings_in_order() {
        let o = opts(&[
            "--partition-mode",
            "DistParMETIS",
            "--num-partitions",
            "2",
            "--partition-input",
            "/in",
            "--allow-input-outside",
            "--part-method",
            "random",
            "--partition-threads",
            "3",
            "--balance-train",
            "--balance-edges",
        ]);
        let a = rank_program(&o, "dgl-partition", "g").unwrap();
        let python = o.runtime.python.as_str();
        assert_eq!(
            a,
            [
                "dgl-partition",
                "rank",
                "--graph-name",
                "g",
                "--part-method",
                "random",
                "--python",
                python,
                "--seed",
                "0",
                "--input",
                "/in",
                "--allow-input-outside",
                "--threads",
                "3",
                "--balance-train=train_mask",
                "--balance-edges",
            ]
        );
        let confined = opts(&["--partition-mode", "DistParMETIS", "--num-partitions", "2"]);
        let a = rank_program(&confined, "dgl-partition", "g").unwrap();
        assert!(!a.iter().any(|x| x == "--allow-input-outside"), "{a:?}");
    }
}
