//! The launcher of a job without workers (a "standalone" job, the seed's
//! `partitionMode: Skip` jobs with only a Launcher): it runs the training
//! itself, as one local process, and exits with that process's status.
//! No partitions, no agents, no DGL distributed environment: the script is
//! a single-process DGL program (DGL's node-classification tutorial, say).

use std::time::Duration;

use dgl_api::wire::OutputLine;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::cli::Options;
use crate::dgl::command::{Template, Value, Values};
use crate::procs::{ProcSpec, Supervisor};
use crate::progress::Reporter;

pub mod config;

/// The launcher of a job without workers, from the command line; its
/// process's exit status.
pub async fn main(opts: &Options) -> anyhow::Result<i32> {
    let cfg = config::standalone_config(opts)?;
    run(&cfg).await
}

/// What a standalone launcher runs.
#[derive(Debug, Clone)]
pub struct StandaloneConfig {
    pub spec: ProcSpec,
    pub stop_grace: Duration,
    /// How often the script's progress lines are published (0: never).
    pub progress_interval: Duration,
}

/// Why a placeholder of the distributed contract has no value here.
const NO_WORKERS: &str =
    "the job has no workers: its training is one local process without DGL's distributed setup";

/// The placeholders of a standalone training command: the job's own values;
/// the distributed ones are known but have none.
pub fn values(
    workspace: &std::path::Path,
    graph_name: Option<&str>,
    num_epochs: Option<u32>,
    batch_size: Option<u32>,
) -> Values {
    let mut v = vec![
        ("workspace", Value::of(workspace.display())),
        ("graph_name", Value::from_flag(graph_name, "--graph-name")),
        ("num_epochs", Value::from_flag(num_epochs, "--num-epochs")),
        ("batch_size", Value::from_flag(batch_size, "--batch-size")),
    ];
    for name in [
        "ip_config",
        "part_config",
        "num_trainers",
        "num_samplers",
        "num_servers",
        "num_machines",
        "machine_rank",
    ] {
        v.push((name, Value::Missing(NO_WORKERS.into())));
    }
    v
}

/// The process: the seed's convention runs `<python> <entry point>
/// [TRAIN_ARGS...]` (as the seed's dglrun ran `python $TRAIN_ENTRY_POINT`),
/// the launch.py convention the user's command, filled. Nothing else is
/// added, and no DGL_* variable is set.
pub fn process(
    python: &str,
    entry_point: Option<&str>,
    extra: &[String],
    command: Option<(&Template, &Values)>,
) -> Result<ProcSpec, String> {
    let (program, args) = match (command, entry_point) {
        (Some((t, values)), _) => {
            let words = t.fill(values).map_err(|e| e.to_string())?;
            (words[0].clone(), words[1..].to_vec())
        }
        (None, Some(ep)) => {
            let mut a = vec![ep.to_string()];
            a.extend(extra.iter().cloned());
            (python.to_string(), a)
        }
        (None, None) => {
            return Err(
                "--train-entry-point or --train-command is required for the launcher".into(),
            )
        }
    };
    Ok(ProcSpec {
        name: "trainer".into(),
        program,
        args,
        env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
        cwd: None,
    })
}

/// Runs the process to its end and returns the launcher's exit status: the
/// process's (128 + signal when killed); SIGTERM or SIGINT to the launcher
/// stops it and gives 143 or 130.
pub async fn run(cfg: &StandaloneConfig) -> anyhow::Result<i32> {
    let (tx, mut rx) = mpsc::channel::<OutputLine>(1024);
    let mut reporter = Reporter::from_env(cfg.progress_interval);
    let printer = tokio::spawn(async move {
        while let Some(l) = rx.recv().await {
            reporter.observe(&l.line);
            println!("{}", l.line);
        }
        reporter.finish().await;
    });
    // What the script forks (DGL's dataloader workers) is reaped and killed
    // with the rest.
    crate::procs::become_subreaper();
    let mut sup = Supervisor::new(tx);
    tracing::info!(command = %cfg.spec.display(), "running the training in the launcher (no workers)");
    sup.spawn(&cfg.spec)?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let ended = tokio::select! {
        e = sup.next_exit() => Ok(e.map(|e| e.exit)),
        _ = sigterm.recv() => Err(("SIGTERM", libc::SIGTERM)),
        _ = sigint.recv() => Err(("SIGINT", libc::SIGINT)),
    };
    sup.stop_all(cfg.stop_grace).await;
    drop(sup);
    let _ = printer.await;
    match ended {
        Ok(Some(exit)) if exit.success() => {
            tracing::info!("training finished: {exit}");
            Ok(0)
        }
        Ok(Some(exit)) => {
            tracing::error!("training failed: {exit} (command: {})", cfg.spec.display());
            Ok(exit.as_shell_status())
        }
        Ok(None) => anyhow::bail!("the training process was lost without an exit status"),
        Err((name, sig)) => {
            tracing::error!("interrupted by {name}; the training was stopped");
            Ok(128 + sig)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_seed_convention_runs_the_entry_point_alone() {
        let p = process(
            "/venv/bin/python",
            Some("code/1_introduction.py"),
            &[],
            None,
        )
        .unwrap();
        assert_eq!(p.program, "/venv/bin/python");
        assert_eq!(p.args, ["code/1_introduction.py"]);
        assert!(
            p.env.iter().all(|(k, _)| !k.starts_with("DGL_")),
            "no DGL distributed env"
        );
        let p = process(
            "python3",
            Some("t.py"),
            &["--lr".into(), "0.1".into()],
            None,
        )
        .unwrap();
        assert_eq!(p.args, ["t.py", "--lr", "0.1"]);
        let e = process("python3", None, &[], None).unwrap_err();
        assert!(e.contains("--train-entry-point or --train-command"), "{e}");
    }

    #[test]
    fn a_standalone_command_has_only_local_placeholders() {
        let v = values(Path::new("/w"), None, Some(5), None);
        let t = Template::parse(
            "--train-command",
            "python3 nc.py --epochs {num_epochs} --out {workspace}/model.pt",
        )
        .unwrap();
        let p = process("ignored", None, &[], Some((&t, &v))).unwrap();
        assert_eq!(p.program, "python3");
        assert_eq!(p.args, ["nc.py", "--epochs", "5", "--out", "/w/model.pt"]);
        let t = Template::parse("--train-command", "python3 nc.py --ip {ip_config}").unwrap();
        let e = process("python3", None, &[], Some((&t, &v))).unwrap_err();
        assert!(
            e.contains("placeholder {ip_config} has no value here: the job has no workers"),
            "{e}"
        );
        let t = Template::parse("--train-command", "python3 nc.py {graph_name}").unwrap();
        let e = process("python3", None, &[], Some((&t, &v))).unwrap_err();
        assert!(e.contains("--graph-name was not given"), "{e}");
    }
}
