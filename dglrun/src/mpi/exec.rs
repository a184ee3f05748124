//! The worker's side of `dglrun rsh`: in partition mode DistParMETIS the
//! launcher's `mpirun` starts its daemon (`orted`) on every worker through
//! this agent instead of ssh. The daemon runs as a supervised child of the
//! worker in its own process group; it is stopped (SIGTERM, SIGKILL after
//! the grace period, leftovers reaped) when the `dglrun rsh` connection
//! drops, when the worker is told to stop, or on SIGTERM.

use std::time::Duration;

use dgl_api::wire::{ExecSpec, ExitInfo, OutputLine, ProcessExit, Request, Response};
use dgl_api::PartitionMode;
use tokio::sync::{mpsc, oneshot};

use crate::dgl::training::{stopped, StopSignal};
use crate::net::channel::{read_frame, write_frame, Channel, ChannelError};
use crate::procs::{ProcSpec, Supervisor};

/// Why a worker refuses an `Exec`, or `None` when it runs it.
pub fn refusal(spec: &ExecSpec, mode: PartitionMode) -> Option<String> {
    if mode != PartitionMode::DistParMetis {
        return Some(format!(
            "this worker runs partition mode {mode}; it starts MPI daemons for dglrun rsh only in partition mode {}",
            PartitionMode::DistParMetis
        ));
    }
    if spec.allowed_program().is_none() {
        return Some(format!(
            "dglrun rsh may only start MPI's daemon ({}), not {:?}",
            dgl_api::wire::EXEC_PROGRAMS.join(" or "),
            spec.program
        ));
    }
    None
}

/// What the worker adds to the daemon's environment (and so to the ranks'):
/// its workspace and its index, which the rank program takes as defaults
/// (`dgl-partition rank`: output in `<workspace>/dataset`, rank = index).
pub fn worker_env(workspace: &std::path::Path, index: Option<u32>) -> Vec<(String, String)> {
    let mut env = vec![("DGLRUN_WORKSPACE".into(), workspace.display().to_string())];
    if let Some(i) = index {
        env.push((dgl_api::names::ENV_WORKER_INDEX.into(), i.to_string()));
    }
    env
}

/// Runs `spec` for the client on `ch` until it ends, the client goes, or a
/// stop is requested; its output goes out as `Output` lines, its status as
/// the final `Exited`. `env` (the worker's own) comes after the client's.
pub async fn session(
    ch: Channel,
    spec: ExecSpec,
    mut stop: StopSignal,
    cwd: std::path::PathBuf,
    env: Vec<(String, String)>,
    grace: Duration,
) -> Result<ExitInfo, ChannelError> {
    let Channel {
        mut reader,
        mut writer,
        peer,
    } = ch;
    let name = spec.allowed_program().unwrap_or("command").to_string();
    let (lines_tx, mut lines) = mpsc::channel::<OutputLine>(1024);
    let mut sup = Supervisor::new(lines_tx);
    let proc = ProcSpec {
        name: name.clone(),
        program: spec.program,
        args: spec.args,
        env: spec.env.into_iter().chain(env).collect(),
        cwd: Some(cwd),
    };
    if let Err(e) = sup.spawn(&proc) {
        let message = e.to_string();
        write_frame(&mut writer, &Response::Error { message }).await?;
        return Ok(ExitInfo::code(127));
    }
    tracing::info!(%peer, process = %name, "started for dglrun rsh");
    // The client sends nothing more; its close is what we watch for.
    let (gone_tx, mut gone) = oneshot::channel::<String>();
    let watch_client = tokio::spawn(async move {
        let why = loop {
            match read_frame::<_, Request>(&mut reader).await {
                Ok(Some(other)) => tracing::warn!(?other, "ignored while a command runs"),
                Ok(None) => break "dglrun rsh disconnected".to_string(),
                Err(e) => break format!("the dglrun rsh connection failed: {e}"),
            }
        };
        let _ = gone_tx.send(why);
    });
    let mut client_ok = true;
    let exit = loop {
        tokio::select! {
            Some(line) = lines.recv(), if client_ok => {
                if let Err(e) = write_frame(&mut writer, &Response::Output(line)).await {
                    client_ok = false;
                    break stop_all(&mut sup, &format!("the dglrun rsh connection failed: {e}"), grace).await;
                }
            }
            e = sup.next_exit() => break e.map(|e| e.exit).unwrap_or(ExitInfo::code(1)),
            why = &mut gone => {
                client_ok = false;
                break stop_all(&mut sup, &why.unwrap_or_default(), grace).await;
            }
            why = stopped(&mut stop) => break stop_all(&mut sup, &why, grace).await,
        }
    };
    // Whatever the daemon left behind (ranks of a crashed daemon) goes too.
    sup.stop_all(grace).await;
    watch_client.abort();
    if client_ok {
        while let Ok(line) = lines.try_recv() {
            write_frame(&mut writer, &Response::Output(line)).await?;
        }
        let exited = ProcessExit {
            process: name.clone(),
            exit,
        };
        write_frame(&mut writer, &Response::Exited(exited)).await?;
    }
    tracing::info!(%peer, process = %name, status = %exit, "ended");
    Ok(exit)
}

async fn stop_all(sup: &mut Supervisor, why: &str, grace: Duration) -> ExitInfo {
    tracing::warn!(reason = why, "stopping the command started by dglrun rsh");
    sup.stop_all(grace)
        .await
        .into_iter()
        .next()
        .map(|e| e.exit)
        .unwrap_or(ExitInfo::signal(libc::SIGTERM))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(p: &str) -> ExecSpec {
        ExecSpec {
            program: p.into(),
            args: vec![],
            env: Default::default(),
        }
    }

    #[test]
    fn only_distparmetis_workers_run_only_the_mpi_daemon() {
        assert_eq!(
            refusal(&spec("/usr/bin/orted"), PartitionMode::DistParMetis),
            None
        );
        for mode in [
            PartitionMode::DglApi,
            PartitionMode::Skip,
            PartitionMode::ParMetis,
        ] {
            let e = refusal(&spec("orted"), mode).unwrap();
            assert!(e.contains("only in partition mode DistParMETIS"), "{e}");
        }
        let e = refusal(&spec("/bin/sh"), PartitionMode::DistParMetis).unwrap();
        assert!(
            e.contains("only start MPI's daemon (orted or prted)"),
            "{e}"
        );
    }
}
