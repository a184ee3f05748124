//! The worker's settings from the command line.

use std::time::Duration;

use dgl_api::duration;

use super::WorkerConfig;
use crate::cli::Options;
use crate::dgl::training::TrainContext;
use crate::transfer::RetryPolicy;

/// The worker's settings from the options (reads the token).
pub fn worker_config(opts: &Options) -> anyhow::Result<WorkerConfig> {
    Ok(WorkerConfig {
        listen: opts.agent_addr().ip(),
        agent_port: opts.runtime.agent_port,
        token: opts.token()?,
        retry: retry_policy(opts),
        timeouts: opts.timeouts,
        train: TrainContext {
            python: opts.runtime.python.clone(),
            workspace: opts.runtime.workspace.clone(),
            shm_path: opts.worker.shm_path.clone(),
            index: opts.worker.index,
            stop_grace: opts.stop_grace(),
            server_start_timeout: duration::secs(opts.worker.server_start_timeout),
            server_exit_timeout: Duration::from_secs(120),
            omp_threads: opts.worker.num_omp_threads,
            graphbolt: crate::dgl::graphbolt::Limits {
                lock_wait: duration::secs(opts.worker.graphbolt_lock_timeout),
                convert: duration::secs(opts.worker.graphbolt_convert_timeout),
            },
        },
        partition_mode: opts.job.partition_mode,
    })
}

/// How hard the worker tries to fetch its shard.
fn retry_policy(opts: &Options) -> RetryPolicy {
    RetryPolicy {
        max_attempts: opts.launch.transfer_attempts,
        idle_timeout: opts.timeouts.peer(),
        ..RetryPolicy::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    use dgl_api::names;

    use crate::roles::testing::{launcher_files, opts};

    #[test]
    fn worker_config_from_the_options() {
        let dir = launcher_files();
        let token = dir.path().join("token").display().to_string();
        let o = opts(&[
            "--token-file",
            &token,
            "--listen",
            "10.0.0.1",
            "--index",
            "1",
            "--transfer-attempts",
            "2",
        ]);
        let cfg = worker_config(&o).unwrap();
        assert_eq!(
            o.agent_addr(),
            SocketAddr::new(cfg.listen, names::AGENT_PORT)
        );
        assert_eq!(cfg.train.index, Some(1));
        assert_eq!(cfg.retry.max_attempts, 2);
        let e = worker_config(&opts(&["--token-file", "/nonexistent/token"])).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/token"), "{e}");
    }
}
