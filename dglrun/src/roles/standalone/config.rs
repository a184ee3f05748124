//! The settings of a launcher without workers, from the command line.

use anyhow::anyhow;
use dgl_api::duration;

use super::StandaloneConfig;
use crate::cli::Options;
use crate::roles::standalone;
use crate::roles::{check_graphbolt, train_template};

/// A job without workers (--num-partitions 0): the launcher's one local
/// process.
pub fn standalone_config(opts: &Options) -> anyhow::Result<StandaloneConfig> {
    check_graphbolt(opts)?;
    let template = train_template(opts)?;
    let values = standalone::values(
        &opts.runtime.workspace,
        opts.job.graph_name.as_deref(),
        opts.job.num_epochs,
        opts.job.batch_size,
    );
    let spec = standalone::process(
        &opts.runtime.python,
        opts.job.train_entry_point.as_deref(),
        &opts.extra,
        template.as_ref().map(|t| (t, &values)),
    )
    .map_err(|e| anyhow!(e))?;
    Ok(StandaloneConfig {
        spec,
        stop_grace: opts.stop_grace(),
        progress_interval: duration::secs(opts.launch.progress_interval),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::testing::opts;

    #[test]
    fn no_workers_means_the_launcher_trains_alone() {
        // The operator sets DGL_OPERATOR_NUM_WORKERS=0 for a job without workers.
        let o = opts(&[
            "--num-partitions",
            "0",
            "--train-entry-point",
            "code/nc.py",
            "--python",
            "/py",
        ]);
        assert!(o.is_standalone());
        let cfg = standalone_config(&o).unwrap();
        assert_eq!(cfg.spec.program, "/py");
        assert_eq!(
            cfg.spec.args,
            ["code/nc.py"],
            "nothing appended (the seed's dglrun ran `python $TRAIN_ENTRY_POINT`)"
        );
        let o = opts(&[
            "--num-partitions",
            "0",
            "--train-command",
            "python3 nc.py --ip {ip_config}",
        ]);
        let e = standalone_config(&o).unwrap_err().to_string();
        assert!(e.contains("{ip_config} has no value here"), "{e}");
        assert!(!opts(&["--num-partitions", "2"]).is_standalone());
    }
}
