//! The launcher: waits for the partitioner and the workers, gets every
//! worker its shard, starts the training everywhere, shows the whole job's
//! output with worker prefixes, and ends it: success only if every worker's
//! processes exited 0; on the first failure it stops all the others.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use dgl_api::wire::{
    AgentInfo, ExitInfo, Request, Response, ShardRequest, ShardSource, TrainResult, TrainSpec,
};
use dgl_api::ReplicaType;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::channel::{read_frame, write_frame, Channel, ChannelError, Token};
use crate::hosts::Peer;
use crate::training::{DGLRUN, TRAINER};

/// The launcher's settings.
#[derive(Debug, Clone)]
pub struct LaunchConfig {
    pub workers: Vec<Peer>,
    /// The partitioner's agent; `None` in partition mode Skip.
    pub partitioner: Option<SocketAddr>,
    /// What every worker runs; `machine_rank` is set per worker.
    pub spec: TrainSpec,
    pub token: Token,
    /// How long to wait for the partitioner and the workers to answer.
    pub wait_timeout: Duration,
    /// The workers' SIGTERM→SIGKILL grace period; bounds how long stopping takes.
    pub stop_grace: Duration,
    /// Partition mode DistParMETIS: the workers' ranks partition the graph
    /// (mpirun) before the training; then no shard is shipped.
    pub dist_partition: Option<crate::distpart::DistPartition>,
}

/// How a launch failed. Every message names the worker concerned.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{what} did not answer within {timeout:?}: {last}")]
    Wait {
        what: String,
        timeout: Duration,
        last: String,
    },
    #[error("{what}: {message}")]
    Peer { what: String, message: String },
    #[error("getting {worker} its shard failed: {message}")]
    Shard { worker: String, message: String },
    /// The training failed. `worker` failed first (by the workers' clocks);
    /// `also` lists the other workers that failed on their own meanwhile.
    #[error("training failed: {worker}: {reason}{}", also_text(also))]
    Failed {
        worker: String,
        /// The worker's status when it reported one.
        exit: Option<ExitInfo>,
        reason: String,
        also: Vec<String>,
    },
    /// Partition mode DistParMETIS: the ranks (mpirun) failed; `worker`
    /// names the rank and its worker when known.
    #[error("partitioning failed{}: {message}", worker.as_ref().map(|w| format!(" on {w}")).unwrap_or_default())]
    Partition {
        worker: Option<String>,
        message: String,
    },
    #[error("training interrupted by {signal}; every worker was told to stop")]
    Interrupted { signal: String },
}

fn also_text(also: &[String]) -> String {
    if also.is_empty() {
        String::new()
    } else {
        format!("; also failed: {}", also.join("; "))
    }
}

/// One worker's failure, as the launcher saw it.
struct Failure {
    /// The failed process lost a peer first: probably a consequence.
    lost_peer: bool,
    /// Unix ms: the worker's own time of the failure when it reported one,
    /// else when the launcher noticed.
    at: u64,
    worker: String,
    exit: Option<ExitInfo>,
    reason: String,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How long to wait between connection attempts to a peer that is not up yet.
const RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// Each connection attempt, handshake included.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Pings `addr` until it answers as `role` or the deadline passes.
async fn wait_for(
    what: &str,
    addr: SocketAddr,
    role: ReplicaType,
    token: &Token,
    timeout: Duration,
) -> Result<AgentInfo, LaunchError> {
    let deadline = Instant::now() + timeout;
    let mut last_log = Instant::now();
    loop {
        let attempt = async {
            let mut ch = Channel::connect(addr, token, CONNECT_TIMEOUT).await?;
            ch.call::<_, Response>(&Request::Ping).await
        }
        .await;
        let last = match attempt {
            Ok(Response::Pong(info)) if info.role == role => return Ok(info),
            Ok(other) => {
                return Err(LaunchError::Peer {
                    what: what.to_string(),
                    message: format!("expected a {role} agent at {addr}, got {other:?}"),
                })
            }
            // A wrong token or a foreign protocol will not fix itself.
            Err(e) if !e.is_transient() => {
                return Err(LaunchError::Peer {
                    what: what.to_string(),
                    message: format!("{addr}: {e}"),
                })
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() + RETRY_INTERVAL >= deadline {
            return Err(LaunchError::Wait {
                what: what.to_string(),
                timeout,
                last,
            });
        }
        if last_log.elapsed() >= Duration::from_secs(10) {
            tracing::info!(%addr, error = %last, "still waiting for {what}");
            last_log = Instant::now();
        }
        tokio::time::sleep(RETRY_INTERVAL).await;
    }
}

/// One request to a peer on a fresh connection.
async fn call(addr: SocketAddr, token: &Token, req: &Request) -> Result<Response, ChannelError> {
    let mut ch = Channel::connect(addr, token, CONNECT_TIMEOUT).await?;
    ch.call(req).await
}

/// Tells idle workers to exit (best effort), when the job is abandoned before training.
async fn shutdown_workers(cfg: &LaunchConfig, reason: &str) {
    let mut set = JoinSet::new();
    for w in &cfg.workers {
        let (addr, token, reason) = (w.agent, cfg.token.clone(), reason.to_string());
        set.spawn(async move {
            let req = Request::Shutdown { reason };
            let _ = tokio::time::timeout(Duration::from_secs(10), call(addr, &token, &req)).await;
        });
    }
    while set.join_next().await.is_some() {}
}

/// Events from the workers' `Start` connections.
enum Event {
    Msg(Response),
    Closed(Option<String>),
}

/// Runs the whole job. `Ok` only when every worker's training exited 0.
pub async fn run(cfg: LaunchConfig) -> Result<(), LaunchError> {
    let n = cfg.workers.len() as u32;
    // 1. Everyone up?
    if let Some(p) = cfg.partitioner {
        wait_for(
            &format!("the partitioner ({p})"),
            p,
            ReplicaType::Partitioner,
            &cfg.token,
            cfg.wait_timeout,
        )
        .await?;
        match call(p, &cfg.token, &Request::GetManifest).await {
            Ok(Response::Manifest(m)) if m.num_parts == n && m.graph_name == cfg.spec.graph_name => {
                let bytes: u64 = m.files.iter().map(|f| f.size).sum();
                tracing::info!(files = m.files.len(), bytes, "the partitioner serves {n} partitions");
            }
            Ok(Response::Manifest(m)) => {
                return Err(LaunchError::Peer {
                    what: "the partitioner".into(),
                    message: format!(
                        "it serves graph {:?} in {} partitions, but the job has graph {:?} and {n} workers",
                        m.graph_name, m.num_parts, cfg.spec.graph_name
                    ),
                })
            }
            other => {
                return Err(LaunchError::Peer {
                    what: "the partitioner".into(),
                    message: format!("cannot get its manifest: {other:?}"),
                })
            }
        }
    }
    let mut set = JoinSet::new();
    for w in &cfg.workers {
        let (w, token, timeout) = (w.clone(), cfg.token.clone(), cfg.wait_timeout);
        set.spawn(async move {
            let r = wait_for(&w.describe(), w.agent, ReplicaType::Worker, &token, timeout).await;
            (w, r)
        });
    }
    while let Some(joined) = set.join_next().await {
        let (w, r) = joined.expect("wait tasks do not panic");
        let info = r?;
        if let Some(i) = info.index {
            if i != w.index {
                return Err(LaunchError::Peer {
                    what: w.describe(),
                    message: format!(
                        "the agent says it is worker {i}; the hostfile lists it as worker {}",
                        w.index
                    ),
                });
            }
        }
    }
    tracing::info!(workers = n, "every worker answers");

    // 2. Shards: made on the workers themselves (DistParMETIS), pulled from
    // the partitioner, or already there (Skip); checked in place.
    if let Some(d) = &cfg.dist_partition {
        if let Err(e) = crate::distpart::run(d, &cfg.workers).await {
            shutdown_workers(&cfg, &e.to_string()).await;
            return Err(e);
        }
    }
    let source = match cfg.partitioner {
        Some(p) => ShardSource::Partitioner {
            addr: p.to_string(),
        },
        None => ShardSource::Local,
    };
    let mut set = JoinSet::new();
    for w in &cfg.workers {
        let req = Request::PrepareShard(ShardRequest {
            graph_name: cfg.spec.graph_name.clone(),
            part_id: w.index,
            num_parts: n,
            source: source.clone(),
        });
        let (w, token) = (w.clone(), cfg.token.clone());
        set.spawn(async move {
            let r = call(w.agent, &token, &req).await;
            (w, r)
        });
    }
    let mut shard_error = None;
    while let Some(joined) = set.join_next().await {
        let (w, r) = joined.expect("shard tasks do not panic");
        match r {
            Ok(Response::ShardReady(s)) => tracing::info!(
                worker = %w.label(),
                files = s.files,
                bytes = s.bytes,
                transferred = s.transferred_bytes,
                reused = s.reused_files,
                retries = s.retries,
                "shard ready"
            ),
            Ok(Response::Error { message }) => {
                shard_error.get_or_insert(LaunchError::Shard {
                    worker: w.describe(),
                    message,
                });
            }
            Ok(other) => {
                shard_error.get_or_insert(LaunchError::Shard {
                    worker: w.describe(),
                    message: format!("unexpected reply {other:?}"),
                });
            }
            Err(e) => {
                shard_error.get_or_insert(LaunchError::Shard {
                    worker: w.describe(),
                    message: e.to_string(),
                });
            }
        }
    }
    if let Some(e) = shard_error {
        shutdown_workers(&cfg, &e.to_string()).await;
        return Err(e);
    }

    // 3. Start everywhere, then follow.
    let (ev_tx, ev_rx) = mpsc::channel::<(usize, Event)>(4096);
    let mut writers: Vec<Option<OwnedWriteHalf>> = Vec::new();
    for w in &cfg.workers {
        let mut spec = cfg.spec.clone();
        spec.machine_rank = w.index;
        let started = async {
            let mut ch = Channel::connect(w.agent, &cfg.token, CONNECT_TIMEOUT).await?;
            ch.send(&Request::Start(spec)).await?;
            Ok::<_, ChannelError>(ch)
        }
        .await;
        match started {
            Ok(ch) => {
                let Channel {
                    mut reader, writer, ..
                } = ch;
                writers.push(Some(writer));
                let (tx, i) = (ev_tx.clone(), writers.len() - 1);
                tokio::spawn(async move {
                    loop {
                        match read_frame::<_, Response>(&mut reader).await {
                            Ok(Some(m)) => {
                                if tx.send((i, Event::Msg(m))).await.is_err() {
                                    return;
                                }
                            }
                            Ok(None) => {
                                let _ = tx.send((i, Event::Closed(None))).await;
                                return;
                            }
                            Err(e) => {
                                let _ = tx.send((i, Event::Closed(Some(e.to_string())))).await;
                                return;
                            }
                        }
                    }
                });
            }
            Err(e) => {
                // Stop the ones already started; the rest are told to exit.
                let err = LaunchError::Peer {
                    what: w.describe(),
                    message: format!("cannot start the training: {e}"),
                };
                for wr in writers.iter_mut().flatten() {
                    let _ = write_frame(
                        wr,
                        &Request::Stop {
                            reason: err.to_string(),
                        },
                    )
                    .await;
                }
                shutdown_workers(&cfg, &err.to_string()).await;
                return Err(err);
            }
        }
    }
    drop(ev_tx);
    tracing::info!("training started on {n} workers");
    follow(&cfg, writers, ev_rx).await?;

    // 4. Success: the partitioner may go.
    if let Some(p) = cfg.partitioner {
        let req = Request::Shutdown {
            reason: "training succeeded".into(),
        };
        match tokio::time::timeout(Duration::from_secs(10), call(p, &cfg.token, &req)).await {
            Ok(Ok(_)) => tracing::info!("the partitioner was told to exit"),
            _ => {
                tracing::warn!("could not tell the partitioner to exit; it is left to the operator")
            }
        }
    }
    Ok(())
}

fn print_line(worker: usize, process: &str, line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = if process == TRAINER || process == DGLRUN {
        writeln!(out, "[worker-{worker}] {line}")
    } else {
        writeln!(out, "[worker-{worker}] [{process}] {line}")
    };
}

/// Follows the running training until every worker reported.
async fn follow(
    cfg: &LaunchConfig,
    mut writers: Vec<Option<OwnedWriteHalf>>,
    mut ev_rx: mpsc::Receiver<(usize, Event)>,
) -> Result<(), LaunchError> {
    let n = cfg.workers.len();
    let mut results: Vec<Option<TrainResult>> = vec![None; n];
    let mut gone = vec![false; n];
    let mut failures: Vec<Failure> = Vec::new();
    let mut stopping = false;
    let mut interrupted: Option<String> = None;
    let mut deadline: Option<Instant> = None;
    let mut sigterm = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut sigint = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    // Workers finish stopping within their grace period plus the time to
    // report; past that the launcher stops waiting.
    let stop_bound = cfg.stop_grace + Duration::from_secs(20);

    async fn stop_others(
        writers: &mut [Option<OwnedWriteHalf>],
        results: &[Option<TrainResult>],
        reason: &str,
    ) {
        for (j, w) in writers.iter_mut().enumerate() {
            if results[j].is_some() {
                continue;
            }
            if let Some(wr) = w {
                let req = Request::Stop {
                    reason: reason.to_string(),
                };
                if tokio::time::timeout(Duration::from_secs(5), write_frame(wr, &req))
                    .await
                    .is_err()
                {
                    tracing::warn!(worker = j, "could not send Stop");
                }
            }
        }
    }

    while (0..n).any(|i| results[i].is_none() && !gone[i]) {
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let (i, ev) = tokio::select! {
            ev = ev_rx.recv() => match ev {
                Some(ev) => ev,
                None => break,
            },
            _ = timer => {
                let waiting: Vec<String> = (0..n)
                    .filter(|&i| results[i].is_none() && !gone[i])
                    .map(|i| cfg.workers[i].label())
                    .collect();
                tracing::error!(?waiting, "workers did not report within {stop_bound:?} of the stop");
                break;
            }
            _ = sigterm.recv(), if interrupted.is_none() => {
                interrupted = Some("SIGTERM".into());
                stop_others(&mut writers, &results, "the launcher received SIGTERM").await;
                deadline = Some(Instant::now() + stop_bound);
                continue;
            }
            _ = sigint.recv(), if interrupted.is_none() => {
                interrupted = Some("SIGINT".into());
                stop_others(&mut writers, &results, "the launcher received SIGINT").await;
                deadline = Some(Instant::now() + stop_bound);
                continue;
            }
        };
        let label = cfg.workers[i].label();
        match ev {
            Event::Msg(Response::Output(l)) => print_line(i, &l.process, &l.line),
            Event::Msg(Response::Exited(e)) => {
                tracing::info!(worker = %label, process = %e.process, status = %e.exit, "process exited")
            }
            Event::Msg(Response::Finished(r)) => {
                if r.exit.success() {
                    tracing::info!(worker = %label, "{}", r.message);
                } else if r.stopped {
                    tracing::warn!(worker = %label, status = %r.exit, "{}", r.message);
                } else {
                    tracing::error!(worker = %label, status = %r.exit, "{}", r.message);
                }
                // A stop the launcher did not ask for (SIGTERM to the worker,
                // eviction) is a failure of that worker like any other.
                if !r.exit.success() && (!r.stopped || !stopping) && interrupted.is_none() {
                    failures.push(Failure {
                        lost_peer: r.lost_peer,
                        at: r.failed_at_ms.unwrap_or_else(now_ms),
                        worker: cfg.workers[i].describe(),
                        exit: Some(r.exit),
                        reason: format!("{}: {}", r.exit, r.message),
                    });
                }
                results[i] = Some(r);
                if !failures.is_empty() && !stopping {
                    stopping = true;
                    let reason = format!("{} failed", cfg.workers[i].label());
                    stop_others(&mut writers, &results, &reason).await;
                    deadline = Some(Instant::now() + stop_bound);
                }
                // Done with this worker: closing lets it exit at once.
                writers[i] = None;
            }
            Event::Msg(Response::Error { message }) => {
                // A worker that refused Start: it is not training.
                gone[i] = true;
                failures.push(Failure {
                    lost_peer: false,
                    at: now_ms(),
                    worker: cfg.workers[i].describe(),
                    exit: None,
                    reason: format!("refused to start: {message}"),
                });
                if !stopping {
                    stopping = true;
                    let reason = format!("{} refused to start", cfg.workers[i].label());
                    stop_others(&mut writers, &results, &reason).await;
                    deadline = Some(Instant::now() + stop_bound);
                }
            }
            Event::Msg(other) => tracing::warn!(worker = %label, ?other, "unexpected message"),
            Event::Closed(detail) => {
                gone[i] = true;
                if results[i].is_none() && interrupted.is_none() {
                    failures.push(Failure {
                        lost_peer: false,
                        at: now_ms(),
                        worker: cfg.workers[i].describe(),
                        exit: None,
                        reason: format!(
                            "lost the connection to its agent before it reported a result{}",
                            detail.map(|d| format!(" ({d})")).unwrap_or_default()
                        ),
                    });
                    if !stopping {
                        stopping = true;
                        let reason = format!("lost {}", cfg.workers[i].label());
                        stop_others(&mut writers, &results, &reason).await;
                        deadline = Some(Instant::now() + stop_bound);
                    }
                }
            }
        }
    }

    for (i, r) in results.iter().enumerate() {
        let label = cfg.workers[i].label();
        match r {
            Some(r) => tracing::info!(worker = %label, status = %r.exit, "{}", r.message),
            None => tracing::warn!(worker = %label, "no result"),
        }
    }
    if !failures.is_empty() {
        // Timestamps alone cannot order a crash and its echo on the other
        // machines (milliseconds apart, seen through torchrun's polling), so
        // failures that report a lost peer come after those that do not.
        failures.sort_by_key(|f| (f.lost_peer, f.at));
        let first = failures.remove(0);
        return Err(LaunchError::Failed {
            worker: first.worker,
            exit: first.exit,
            reason: first.reason,
            also: failures
                .into_iter()
                .map(|f| {
                    let echo = if f.lost_peer {
                        " (it lost a peer first)"
                    } else {
                        ""
                    };
                    format!("{}: {}{echo}", f.worker, f.reason)
                })
                .collect(),
        });
    }
    if let Some(signal) = interrupted {
        return Err(LaunchError::Interrupted { signal });
    }
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Some(r) if r.exit.success() => {}
            Some(r) => {
                return Err(LaunchError::Failed {
                    worker: cfg.workers[i].describe(),
                    exit: Some(r.exit),
                    reason: format!("{}: {}", r.exit, r.message),
                    also: Vec::new(),
                })
            }
            None => {
                return Err(LaunchError::Failed {
                    worker: cfg.workers[i].describe(),
                    exit: None,
                    reason: "reported no result".into(),
                    also: Vec::new(),
                })
            }
        }
    }
    tracing::info!("training succeeded on every worker");
    Ok(())
}
