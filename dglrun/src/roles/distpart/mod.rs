//! Partition mode DistParMETIS on the launcher: no partitioner pod. Once
//! every worker answers, the launcher runs `mpirun` with one rank per
//! worker in partition order (rank i on worker i), MPI's daemons started
//! through the workers' agents (`dglrun rsh`, see [`crate::mpi::rsh`]), the ranks
//! being `dgl-partition rank`: each reads its share of the chunked graph,
//! the ranks exchange it over MPI, and rank i writes partition i into its
//! own worker's `<workspace>/dataset`. mpirun's output goes into the
//! launcher's log (`[partition] ...`); a failure names the rank and its
//! worker. On success the launcher writes its marker file (the operator's
//! readiness probe `dglrun probe --partitioned` reads it) and the training
//! starts as in partition mode Skip.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::mpi::network::{local_nets, pick_network};
use crate::mpi::rsh::{mpirun_args, MpirunPlan};
use crate::net::channel::Token;
use crate::net::hosts::Peer;

pub mod config;
pub mod guard;
pub mod killed;

/// Why the ranks did not partition the graph.
#[derive(Debug, thiserror::Error)]
pub enum DistPartError {
    /// mpirun or a rank failed; `worker` names the rank and its worker
    /// when known.
    #[error("partitioning failed{}: {message}", worker.as_ref().map(|w| format!(" on {w}")).unwrap_or_default())]
    Failed {
        worker: Option<String>,
        message: String,
    },
    /// The launcher was told to stop; mpirun was stopped.
    #[error("partitioning interrupted by {signal}")]
    Interrupted { signal: String },
}

/// What the launcher runs in partition mode DistParMETIS.
#[derive(Debug, Clone)]
pub struct DistPartition {
    /// The `mpirun` program.
    pub mpirun: String,
    /// The dglrun binary mpirun calls as its remote agent (`<it> rsh`).
    pub dglrun: String,
    /// The rank program and its arguments, as every worker runs it.
    pub program: Vec<String>,
    /// `--mpi-if-include`: a CIDR or interface name, `auto` or `all`.
    pub if_include: String,
    /// The launcher's own IP (the pod IP), for `auto`.
    pub own_ip: Option<IpAddr>,
    /// Environment of mpirun and its `dglrun rsh` agents (token file,
    /// agent port, hostfile).
    pub env: Vec<(String, String)>,
    /// Written when every rank has written its partition.
    pub marker: PathBuf,
    /// SIGTERM→SIGKILL grace period for mpirun when the launcher is stopped.
    pub stop_grace: Duration,
    /// The job's token, to ask a worker whose rank was killed for its
    /// memory limit; `None`: not asked.
    pub token: Option<Token>,
}

/// What mpirun's output told about the ranks.
#[derive(Debug, Default)]
struct Seen {
    /// The first rank that reported its own failure, and its message.
    failed: Option<(u32, String)>,
    /// A rank MPI named (`MPI_ABORT was invoked on rank R`, `Process name:
    /// [[job,1],R]`), when no rank reported.
    named: Option<u32>,
    /// Ranks that reported their partition written.
    done: Vec<u32>,
    /// The first rank mpirun saw killed by a signal.
    killed: Option<killed::Killed>,
    /// The first rank its guard saw killed by a signal: the cause of the
    /// failure (the other ranks' errors follow from it).
    guarded: Option<killed::Killed>,
    last: Vec<String>,
}

impl Seen {
    fn line(&mut self, line: &str) {
        if let Some((rank, rest)) = line
            .find("dgl-partition rank ")
            .and_then(|i| line[i + 19..].split_once(' '))
        {
            if let (Ok(r), Some(msg)) = (rank.parse::<u32>(), rest.split_once("failed: ")) {
                self.failed.get_or_insert((r, msg.1.to_string()));
            }
        }
        if let Some(r) = after(line, "MPI_ABORT was invoked on rank ")
            .or_else(|| after(line, "Process name: [[").and_then(|_| proc_rank(line)))
        {
            self.named.get_or_insert(r);
        }
        // `rank R of N: part R: ...`, the rank's last report line.
        if let Some(rest) = line.strip_prefix("rank ") {
            let mut w = rest.split_whitespace();
            if let (Some(r), Some("of"), Some(_), Some("part")) =
                (w.next(), w.next(), w.next(), w.next())
            {
                if let Ok(r) = r.parse() {
                    self.done.push(r);
                }
            }
        }
        if let Some(k) = killed::killed(line) {
            self.killed.get_or_insert(k);
        }
        if let Some(k) = killed::guarded(line) {
            self.guarded.get_or_insert(k);
        }
        self.last.push(line.to_string());
        if self.last.len() > 20 {
            self.last.remove(0);
        }
    }
}

fn after(line: &str, prefix: &str) -> Option<u32> {
    let rest = &line[line.find(prefix)? + prefix.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The rank of `Process name: [[63045,1],1]`.
fn proc_rank(line: &str) -> Option<u32> {
    let rest = &line[line.find("],")? + 2..];
    rest.split(']').next()?.trim().parse().ok()
}

/// mpirun's output as lines, split and capped as the training's output is
/// (`\r` too, 64 KiB a line), so one long line cannot grow memory.
async fn pump(mut r: impl AsyncRead + Unpin, tx: mpsc::Sender<String>) {
    let mut split = crate::procs::LineSplitter::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for l in split.feed(&buf[..n]) {
            if tx.send(l).await.is_err() {
                return;
            }
        }
    }
    if let Some(l) = split.finish() {
        let _ = tx.send(l).await;
    }
}

/// Runs the ranks; `Ok` once every worker holds its partition and the
/// marker is written.
pub async fn run(cfg: &DistPartition, workers: &[Peer]) -> Result<(), DistPartError> {
    let fail = |message: String| DistPartError::Failed {
        worker: None,
        message,
    };
    match std::fs::remove_file(&cfg.marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(fail(format!("cannot remove {}: {e}", cfg.marker.display())))
        }
        _ => {}
    }
    let hosts: Vec<IpAddr> = workers.iter().map(|w| w.ip).collect();
    let network = pick_network(&cfg.if_include, cfg.own_ip, &local_nets(), &hosts);
    let plan = MpirunPlan {
        hosts,
        dglrun: cfg.dglrun.clone(),
        network: network.clone(),
        // Every path of the ranks is absolute; each worker's workspace
        // comes from its agent.
        workdir: PathBuf::from("/"),
        forward_env: Vec::new(),
        program: cfg.program.clone(),
    };
    let args = mpirun_args(&plan);
    tracing::info!(
        ranks = workers.len(),
        network = network.as_deref().unwrap_or("OpenMPI's choice"),
        "partitioning on the workers: {} {}",
        cfg.mpirun,
        args.join(" ")
    );
    let mut child = Command::new(&cfg.mpirun)
        .args(&args)
        .envs(cfg.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| fail(format!("cannot start {}: {e}", cfg.mpirun)))?;
    let (tx, mut rx) = mpsc::channel::<String>(1024);
    if let Some(o) = child.stdout.take() {
        tokio::spawn(pump(o, tx.clone()));
    }
    if let Some(e) = child.stderr.take() {
        tokio::spawn(pump(e, tx.clone()));
    }
    drop(tx);
    let mut seen = Seen::default();
    let mut sigterm = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut sigint = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    let status = loop {
        tokio::select! {
            Some(line) = rx.recv() => {
                println!("[partition] {line}");
                seen.line(&line);
            }
            s = child.wait() => break s.map_err(|e| fail(format!("waiting for mpirun: {e}")))?,
            _ = sigterm.recv() => return Err(stop(&mut child, cfg.stop_grace, "SIGTERM").await),
            _ = sigint.recv() => return Err(stop(&mut child, cfg.stop_grace, "SIGINT").await),
        }
    };
    // The rest of the output (the pipes close after the exit).
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await {
        println!("[partition] {line}");
        seen.line(&line);
    }
    // Without its guard's report, the worker's agent tells the limit.
    if let (None, Some(k), Some(token)) = (&seen.guarded, &mut seen.killed, &cfg.token) {
        if let Some(w) = workers.get(k.rank as usize) {
            if let Some(b) = killed::ask_limit(w, token).await {
                k.limit = killed::Limit::Bytes(b);
            }
        }
    }
    outcome(cfg, workers, status, &seen)
}

/// Ends mpirun (its process group: the `dglrun rsh` agents, whose workers
/// then stop their daemons) after a signal to the launcher.
async fn stop(child: &mut tokio::process::Child, grace: Duration, signal: &str) -> DistPartError {
    use nix::sys::signal::{killpg, Signal};
    if let Some(pid) = child.id() {
        let pg = nix::unistd::Pid::from_raw(pid as i32);
        let _ = killpg(pg, Signal::SIGTERM);
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            let _ = killpg(pg, Signal::SIGKILL);
            let _ = child.wait().await;
        }
    }
    DistPartError::Interrupted {
        signal: signal.into(),
    }
}

fn outcome(
    cfg: &DistPartition,
    workers: &[Peer],
    status: std::process::ExitStatus,
    seen: &Seen,
) -> Result<(), DistPartError> {
    let n = workers.len() as u32;
    let missing: Vec<u32> = (0..n).filter(|r| !seen.done.contains(r)).collect();
    if status.success() && missing.is_empty() {
        return write_marker(&cfg.marker, &format!("partitioned by {n} ranks\n"));
    }
    if let Some(k) = seen.guarded.as_ref() {
        return Err(killed_rank(k, workers, status));
    }
    let rank = seen
        .failed
        .as_ref()
        .map(|f| f.0)
        .or(seen.killed.as_ref().map(|k| k.rank))
        .or(seen.named)
        .or(missing.first().copied().filter(|_| status.success()));
    let worker = rank
        .and_then(|r| workers.get(r as usize))
        .map(Peer::describe);
    let why = match (&seen.failed, &seen.killed) {
        (Some((_, m)), _) => m.clone(),
        (None, Some(k)) => return Err(killed_rank(k, workers, status)),
        (None, None) if status.success() => format!("rank(s) {missing:?} reported no partition"),
        (None, None) => format!("its output ends:\n{}", seen.last.join("\n")),
    };
    Err(DistPartError::Failed {
        worker: rank.zip(worker).map(|(r, w)| format!("rank {r} on {w}")),
        message: format!("{why} (mpirun: {status})"),
    })
}

/// Writes the marker the launcher's readiness probe reads (`dglrun probe
/// --partitioned`): every worker holds its partition.
pub fn write_marker(marker: &std::path::Path, text: &str) -> Result<(), DistPartError> {
    let failed = |message: String| DistPartError::Failed {
        worker: None,
        message,
    };
    if let Some(dir) = marker.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| failed(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(marker, text)
        .map_err(|e| failed(format!("cannot write {}: {e}", marker.display())))?;
    tracing::info!(marker = %marker.display(), "every worker holds its partition");
    Ok(())
}

/// A rank killed by a signal, named with its worker and memory limit.
fn killed_rank(
    k: &killed::Killed,
    workers: &[Peer],
    status: std::process::ExitStatus,
) -> DistPartError {
    let w = workers.get(k.rank as usize);
    DistPartError::Failed {
        worker: None,
        message: format!("{} (mpirun: {status})", killed::describe(k, w)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank that prints 4 MiB without a newline, then `\r` updates: the
    /// lines come out capped and split, never as one 4 MiB string.
    #[tokio::test]
    async fn mpirun_output_is_split_at_carriage_returns_and_capped() {
        let mut out = vec![b'x'; 4 << 20];
        out.extend_from_slice(b"\nstep 1\rstep 2\rdone\n");
        let (tx, mut rx) = mpsc::channel(64);
        pump(&out[..], tx).await;
        let mut lines = Vec::new();
        while let Some(l) = rx.recv().await {
            lines.push(l);
        }
        let cap = crate::procs::MAX_LINE + crate::procs::TRUNCATED_MARKER.len();
        assert!(lines.iter().all(|l| l.len() <= cap), "a line over the cap");
        assert!(lines[0].ends_with(crate::procs::TRUNCATED_MARKER));
        assert_eq!(lines[1..], ["step 1", "step 2", "done"]);
    }

    #[test]
    fn mpiruns_output_names_the_failed_rank() {
        let mut s = Seen::default();
        for l in [
            "rank 0 of 2: part 0: 10 inner nodes, 2 halo nodes, 30 edges, 999 bytes in /x",
            "dgl-partition rank 1 of 2 failed: /in/edges1.txt, line 3: 3 columns, expected 2",
            "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD",
        ] {
            s.line(l);
        }
        assert_eq!(s.done, [0]);
        assert_eq!(s.failed.as_ref().unwrap().0, 1);
        assert!(s.failed.as_ref().unwrap().1.contains("line 3"));
        assert_eq!(s.named, Some(0));
        let mut s = Seen::default();
        s.line("  Process name: [[63045,1],1]");
        assert_eq!(s.named, Some(1));
    }
}
