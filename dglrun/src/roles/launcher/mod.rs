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
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cli::Options;
use crate::dgl::training::{DGLRUN, TRAINER};
use crate::net::channel::{
    read_frame, write_frame, Channel, ChannelError, ChannelReader, ChannelWriter, Token,
};
use crate::net::hosts::Peer;
use crate::progress::Reporter;
use crate::roles::distpart::{self, DistPartError, DistPartition};

pub mod cache_store;
pub mod config;

/// The launcher role (with workers) from the command line; the training's
/// exit status, 128 + SIGTERM when it was interrupted.
pub async fn main(opts: &Options) -> anyhow::Result<i32> {
    let cfg = config::launch_config(opts)?;
    tracing::info!(
        workers = cfg.workers.len(),
        mode = %opts.job.partition_mode,
        partitioner = ?cfg.partitioner,
        trainers = cfg.spec.num_trainers,
        "launching"
    );
    match run(cfg).await {
        Ok(()) => Ok(0),
        Err(e @ LaunchError::Interrupted { .. }) => {
            tracing::error!("{e}");
            Ok(128 + libc::SIGTERM)
        }
        Err(e) => Err(e.into()),
    }
}

/// The launcher's settings.
#[derive(Debug, Clone)]
pub struct LaunchConfig {
    pub workers: Vec<Peer>,
    /// The partitioner's agent; `None` in partition modes Skip and
    /// DistParMETIS, and when the partitions are reused from the cache.
    pub partitioner: Option<SocketAddr>,
    /// `spec.partitionCache` had the job's partitions (the lookup's
    /// answer): every worker downloads its own part from there (and in
    /// DistParMETIS no rank runs).
    pub from_cache: Option<CacheEntry>,
    /// DistParMETIS with `spec.partitionCache`, on a miss: the ranks' parts
    /// are stored there once made and checked.
    pub store: Option<cache_store::CacheStore>,
    /// What every worker runs; `machine_rank` is set per worker.
    pub spec: TrainSpec,
    pub token: Token,
    /// How long to wait for the partitioner and the workers to answer.
    pub wait_timeout: Duration,
    /// How long a peer may stay silent on an open connection (an answer,
    /// a worker's shard progress) before it counts as failed.
    pub peer_timeout: Duration,
    /// The workers' SIGTERM→SIGKILL grace period; bounds how long stopping takes.
    pub stop_grace: Duration,
    /// Partition mode DistParMETIS: the workers' ranks partition the graph
    /// (mpirun) before the training; then no shard is shipped.
    pub dist_partition: Option<DistPartition>,
    /// How often the trainers' progress lines are published (0: never).
    pub progress_interval: Duration,
}

/// An entry of the partition cache: its `s3://bucket/prefix` and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    pub url: String,
    pub key: String,
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

/// The ranks' failure is the launch's; an interrupted partitioning is an
/// interrupted launch (the same exit status).
impl From<DistPartError> for LaunchError {
    fn from(e: DistPartError) -> LaunchError {
        match e {
            DistPartError::Failed { worker, message } => LaunchError::Partition { worker, message },
            DistPartError::Interrupted { signal } => LaunchError::Interrupted { signal },
        }
    }
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

impl Failure {
    /// A failure the launcher noticed itself, now.
    fn seen_now(worker: &Peer, reason: String) -> Failure {
        Failure {
            lost_peer: false,
            at: now_ms(),
            worker: worker.describe(),
            exit: None,
            reason,
        }
    }
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
    peer_timeout: Duration,
) -> Result<AgentInfo, LaunchError> {
    let deadline = crate::clock::after(timeout);
    let mut last_log = Instant::now();
    loop {
        let attempt = call(addr, token, &Request::Ping, peer_timeout, "a Pong").await;
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
        if crate::clock::after(RETRY_INTERVAL) >= deadline {
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

/// One request to a peer on a fresh connection; its answer (`what`) must
/// come within `within`.
async fn call(
    addr: SocketAddr,
    token: &Token,
    req: &Request,
    within: Duration,
    what: &str,
) -> Result<Response, ChannelError> {
    let mut ch = Channel::connect(addr, token, CONNECT_TIMEOUT).await?;
    ch.call_within(req, within, what).await
}

/// Tells idle workers to exit (best effort), when the job is abandoned before training.
async fn shutdown_workers(cfg: &LaunchConfig, reason: &str) {
    let mut set = JoinSet::new();
    for w in &cfg.workers {
        let (addr, token, reason) = (w.agent, cfg.token.clone(), reason.to_string());
        set.spawn(async move {
            let req = Request::Shutdown { reason };
            let _ = call(addr, &token, &req, Duration::from_secs(10), "an Ack").await;
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
    // 1. Everyone up?
    if let Some(p) = cfg.partitioner {
        wait_for_partitioner(&cfg, p).await?;
    }
    wait_for_workers(&cfg).await?;

    // 2. Shards: made on the workers themselves (DistParMETIS), pulled from
    // the partitioner, or already there (Skip); checked in place.
    if let Err(e) = prepare_shards(&cfg).await {
        shutdown_workers(&cfg, &e.to_string()).await;
        return Err(e);
    }

    // 3. Start everywhere, then follow.
    let (writers, events) = start_training(&cfg).await?;
    tracing::info!("training started on {} workers", cfg.workers.len());
    follow(&cfg, writers, events).await?;

    // 4. Success: the partitioner may go.
    if let Some(p) = cfg.partitioner {
        release_partitioner(&cfg, p).await;
    }
    Ok(())
}

/// Waits until the partitioner answers and serves the job's partitions.
async fn wait_for_partitioner(cfg: &LaunchConfig, p: SocketAddr) -> Result<(), LaunchError> {
    let n = cfg.workers.len() as u32;
    let token = cfg.token.to_kept_partitioner();
    wait_for(
        &format!("the partitioner ({p})"),
        p,
        ReplicaType::Partitioner,
        &token,
        cfg.wait_timeout,
        cfg.peer_timeout,
    )
    .await?;
    let (within, what) = (cfg.peer_timeout, "the manifest");
    match call(p, &token, &Request::GetManifest, within, what).await {
        Ok(Response::Manifest(m)) if m.num_parts == n && m.graph_name == cfg.spec.graph_name => {
            let bytes: u64 = m.files.iter().map(|f| f.size).sum();
            tracing::info!(
                files = m.files.len(),
                bytes,
                "the partitioner serves {n} partitions"
            );
            Ok(())
        }
        Ok(Response::Manifest(m)) => Err(LaunchError::Peer {
            what: "the partitioner".into(),
            message: format!(
                "it serves graph {:?} in {} partitions, but the job has graph {:?} and {n} workers",
                m.graph_name, m.num_parts, cfg.spec.graph_name
            ),
        }),
        other => Err(LaunchError::Peer {
            what: "the partitioner".into(),
            message: format!("cannot get its manifest: {other:?}"),
        }),
    }
}

/// Waits until every worker answers, as the worker the hostfile says it is.
async fn wait_for_workers(cfg: &LaunchConfig) -> Result<(), LaunchError> {
    let mut set = JoinSet::new();
    for w in &cfg.workers {
        let (w, token) = (w.clone(), cfg.token.clone());
        let (timeout, silent) = (cfg.wait_timeout, cfg.peer_timeout);
        set.spawn(async move {
            let kind = ReplicaType::Worker;
            let r = wait_for(&w.describe(), w.agent, kind, &token, timeout, silent).await;
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
    tracing::info!(workers = cfg.workers.len(), "every worker answers");
    Ok(())
}

/// Gets every worker its shard: the ranks partition first (DistParMETIS,
/// unless the partitions are reused from the cache), then every worker
/// pulls its shard from the partitioner or the cache, or checks the one in
/// its workspace; a DistParMETIS miss then stores the parts in the cache.
/// The first error when any failed.
async fn prepare_shards(cfg: &LaunchConfig) -> Result<(), LaunchError> {
    let mut store_key = None;
    if let (Some(d), None) = (&cfg.dist_partition, &cfg.from_cache) {
        // Before the ranks read the input: see cache_store::store.
        if let Some(s) = &cfg.store {
            store_key = s.key_before().await;
        }
        distpart::run(d, &cfg.workers).await?;
    }
    let source = shard_source(cfg);
    let mut set = JoinSet::new();
    for w in &cfg.workers {
        let req = Request::PrepareShard(ShardRequest {
            graph_name: cfg.spec.graph_name.clone(),
            part_id: w.index,
            num_parts: cfg.workers.len() as u32,
            source: source.clone(),
            use_graphbolt: cfg.spec.use_graphbolt,
        });
        let (w, token, silent) = (w.clone(), cfg.token.clone(), cfg.peer_timeout);
        set.spawn(async move {
            let r = prepare_shard(w.agent, &token, &req, silent).await;
            (w, r)
        });
    }
    let mut shard_error = None;
    while let Some(joined) = set.join_next().await {
        let (w, r) = joined.expect("shard tasks do not panic");
        let message = match r {
            Ok(Response::ShardReady(s)) => {
                tracing::info!(
                    worker = %w.label(),
                    files = s.files,
                    bytes = s.bytes,
                    transferred = s.transferred_bytes,
                    reused = s.reused_files,
                    retries = s.retries,
                    "shard ready"
                );
                continue;
            }
            Ok(Response::Error { message }) => message,
            Ok(other) => format!("unexpected reply {other:?}"),
            Err(e) => e.to_string(),
        };
        shard_error.get_or_insert(LaunchError::Shard {
            worker: w.describe(),
            message,
        });
    }
    if let Some(e) = shard_error {
        return Err(e);
    }
    if let (Some(s), Some(key)) = (&cfg.store, store_key) {
        s.store(cfg, &key).await;
    }
    if let (Some(d), Some(c)) = (&cfg.dist_partition, &cfg.from_cache) {
        // The probe's marker: every worker holds its part, none made here.
        let text = format!("reused entry {} of the partition cache {}\n", c.key, c.url);
        distpart::write_marker(&d.marker, &text)?;
    }
    Ok(())
}

/// Where the workers' shards come from: the cache on a hit, else the
/// partitioner, else their own workspace (Skip, DistParMETIS's ranks).
fn shard_source(cfg: &LaunchConfig) -> ShardSource {
    match (&cfg.from_cache, cfg.partitioner) {
        (Some(c), _) => {
            tracing::info!(
                cache = %c.url, key = %c.key,
                "partitions reused from the partition cache: no partitioner ran{}; each worker downloads its own part",
                if cfg.dist_partition.is_some() { " and no rank (mpirun)" } else { "" }
            );
            ShardSource::Cache {
                url: c.url.clone(),
                key: c.key.clone(),
            }
        }
        (None, Some(p)) => ShardSource::Partitioner {
            addr: p.to_string(),
        },
        (None, None) => ShardSource::Local,
    }
}

/// Asks one worker for its shard and waits for the answer, reading its
/// progress reports meanwhile: a worker silent for `silent` has failed.
async fn prepare_shard(
    addr: SocketAddr,
    token: &Token,
    req: &Request,
    silent: Duration,
) -> Result<Response, ChannelError> {
    let mut ch = Channel::connect(addr, token, CONNECT_TIMEOUT).await?;
    ch.send(req).await?;
    loop {
        let what = "its shard (ShardReady or a progress report)";
        match ch.recv_within(silent, what).await? {
            Some(Response::ShardProgress(p)) => {
                tracing::debug!(
                    part = p.part_id,
                    received = p.received_bytes,
                    "shard progress"
                )
            }
            Some(other) => return Ok(other),
            None => return Err(ChannelError::Closed),
        }
    }
}

/// The training's connections: one writer per started worker (`None` once
/// done with it) and the events of all of them, tagged with the worker's
/// position.
type Started = (Vec<Option<ChannelWriter>>, mpsc::Receiver<(usize, Event)>);

/// Sends `Start` to every worker, each as its machine rank. A worker that
/// cannot be started fails the launch: the ones already started are
/// stopped, and every worker is told to exit.
async fn start_training(cfg: &LaunchConfig) -> Result<Started, LaunchError> {
    let (ev_tx, ev_rx) = mpsc::channel::<(usize, Event)>(4096);
    let mut writers: Vec<Option<ChannelWriter>> = Vec::new();
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
            Ok(Channel { reader, writer, .. }) => {
                writers.push(Some(writer));
                tokio::spawn(forward_events(writers.len() - 1, reader, ev_tx.clone()));
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
                shutdown_workers(cfg, &err.to_string()).await;
                return Err(err);
            }
        }
    }
    Ok((writers, ev_rx))
}

/// Passes worker `i`'s messages on, then how its connection ended.
async fn forward_events(i: usize, mut reader: ChannelReader, tx: mpsc::Sender<(usize, Event)>) {
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
}

/// Tells the partitioner to exit after a successful training (best effort:
/// else the operator deletes it).
async fn release_partitioner(cfg: &LaunchConfig, p: SocketAddr) {
    let req = Request::Shutdown {
        reason: "training succeeded".into(),
    };
    let token = cfg.token.to_kept_partitioner();
    match call(p, &token, &req, Duration::from_secs(10), "an Ack").await {
        Ok(_) => tracing::info!("the partitioner was told to exit"),
        _ => {
            tracing::warn!("could not tell the partitioner to exit; it is left to the operator")
        }
    }
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
    writers: Vec<Option<ChannelWriter>>,
    mut ev_rx: mpsc::Receiver<(usize, Event)>,
) -> Result<(), LaunchError> {
    let mut p = Progress::new(cfg, writers);
    p.reporter = Some(Reporter::from_env(cfg.progress_interval));
    let mut sigterm = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut sigint = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    while p.waiting().next().is_some() {
        let deadline = p.deadline;
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
                let waiting: Vec<String> = p.waiting().map(|i| cfg.workers[i].label()).collect();
                tracing::error!(?waiting, "workers did not report within {:?} of the stop", p.stop_bound);
                break;
            }
            _ = sigterm.recv(), if p.interrupted.is_none() => {
                p.interrupt("SIGTERM").await;
                continue;
            }
            _ = sigint.recv(), if p.interrupted.is_none() => {
                p.interrupt("SIGINT").await;
                continue;
            }
        };
        p.on_event(i, ev).await;
    }
    if let Some(r) = p.reporter.take() {
        r.finish().await;
    }
    p.outcome()
}

/// What the launcher knows while the training runs.
struct Progress<'a> {
    workers: &'a [Peer],
    /// The `Start` connections; `None` once done with the worker.
    writers: Vec<Option<ChannelWriter>>,
    results: Vec<Option<TrainResult>>,
    /// Workers that will report nothing more (refused to start, connection lost).
    gone: Vec<bool>,
    failures: Vec<Failure>,
    /// Whether the launcher told the workers to stop after a failure.
    stopping: bool,
    /// The signal that interrupted the launcher.
    interrupted: Option<String>,
    /// When to stop waiting for the workers, once they were told to stop.
    deadline: Option<Instant>,
    /// Workers finish stopping within their grace period plus the time to
    /// report; past that the launcher stops waiting.
    stop_bound: Duration,
    /// The trainers' progress lines, published on the launcher's pod.
    reporter: Option<Reporter>,
}

impl<'a> Progress<'a> {
    fn new(cfg: &'a LaunchConfig, writers: Vec<Option<ChannelWriter>>) -> Progress<'a> {
        let n = cfg.workers.len();
        Progress {
            workers: &cfg.workers,
            writers,
            results: vec![None; n],
            gone: vec![false; n],
            failures: Vec::new(),
            stopping: false,
            interrupted: None,
            deadline: None,
            stop_bound: cfg.stop_grace.saturating_add(Duration::from_secs(20)),
            reporter: None,
        }
    }

    /// The workers still expected to report.
    fn waiting(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.workers.len()).filter(|&i| self.results[i].is_none() && !self.gone[i])
    }

    /// Tells every worker without a result to stop, and from now on waits
    /// at most `stop_bound` for them.
    async fn stop_others(&mut self, reason: &str) {
        for (j, w) in self.writers.iter_mut().enumerate() {
            if self.results[j].is_some() {
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
        self.deadline = Some(crate::clock::after(self.stop_bound));
    }

    /// The first failure stops the others.
    async fn stop_after_failure(&mut self, reason: String) {
        if !self.stopping {
            self.stopping = true;
            self.stop_others(&reason).await;
        }
    }

    async fn interrupt(&mut self, signal: &str) {
        self.interrupted = Some(signal.into());
        self.stop_others(&format!("the launcher received {signal}"))
            .await;
    }

    async fn on_event(&mut self, i: usize, ev: Event) {
        let label = self.workers[i].label();
        match ev {
            Event::Msg(Response::Output(l)) => {
                if let (Some(r), true) = (&mut self.reporter, l.process == TRAINER) {
                    r.observe(&l.line);
                }
                print_line(i, &l.process, &l.line)
            }
            Event::Msg(Response::Exited(e)) => {
                tracing::info!(worker = %label, process = %e.process, status = %e.exit, "process exited")
            }
            Event::Msg(Response::Finished(r)) => self.on_finished(i, r).await,
            Event::Msg(Response::Error { message }) => {
                // A worker that refused Start: it is not training.
                self.gone[i] = true;
                let reason = format!("refused to start: {message}");
                self.failures
                    .push(Failure::seen_now(&self.workers[i], reason));
                self.stop_after_failure(format!("{label} refused to start"))
                    .await;
            }
            Event::Msg(other) => tracing::warn!(worker = %label, ?other, "unexpected message"),
            Event::Closed(detail) => {
                self.gone[i] = true;
                if self.results[i].is_none() && self.interrupted.is_none() {
                    let reason = format!(
                        "lost the connection to its agent before it reported a result{}",
                        detail.map(|d| format!(" ({d})")).unwrap_or_default()
                    );
                    self.failures
                        .push(Failure::seen_now(&self.workers[i], reason));
                    self.stop_after_failure(format!("lost {label}")).await;
                }
            }
        }
    }

    async fn on_finished(&mut self, i: usize, r: TrainResult) {
        let label = self.workers[i].label();
        if r.exit.success() {
            tracing::info!(worker = %label, "{}", r.message);
        } else if r.stopped {
            tracing::warn!(worker = %label, status = %r.exit, "{}", r.message);
        } else {
            tracing::error!(worker = %label, status = %r.exit, "{}", r.message);
        }
        // A stop the launcher did not ask for (SIGTERM to the worker,
        // eviction) is a failure of that worker like any other.
        if !r.exit.success() && (!r.stopped || !self.stopping) && self.interrupted.is_none() {
            self.failures.push(Failure {
                lost_peer: r.lost_peer,
                at: r.failed_at_ms.unwrap_or_else(now_ms),
                worker: self.workers[i].describe(),
                exit: Some(r.exit),
                reason: format!("{}: {}", r.exit, r.message),
            });
        }
        self.results[i] = Some(r);
        if !self.failures.is_empty() {
            self.stop_after_failure(format!("{label} failed")).await;
        }
        // Done with this worker: closing lets it exit at once.
        self.writers[i] = None;
    }

    /// How the training ended: the first failure (naming the others), the
    /// interruption, a worker without a success, or success.
    fn outcome(self) -> Result<(), LaunchError> {
        for (i, r) in self.results.iter().enumerate() {
            let label = self.workers[i].label();
            match r {
                Some(r) => tracing::info!(worker = %label, status = %r.exit, "{}", r.message),
                None => tracing::warn!(worker = %label, "no result"),
            }
        }
        if let Some(failed) = first_failure(self.failures) {
            return Err(failed);
        }
        if let Some(signal) = self.interrupted {
            return Err(LaunchError::Interrupted { signal });
        }
        for (i, r) in self.results.into_iter().enumerate() {
            let (exit, reason) = match r {
                Some(r) if r.exit.success() => continue,
                Some(r) => (Some(r.exit), format!("{}: {}", r.exit, r.message)),
                None => (None, "reported no result".into()),
            };
            return Err(LaunchError::Failed {
                worker: self.workers[i].describe(),
                exit,
                reason,
                also: Vec::new(),
            });
        }
        tracing::info!("training succeeded on every worker");
        Ok(())
    }
}

/// The failure to blame, the others as `also`; `None` without failures.
fn first_failure(mut failures: Vec<Failure>) -> Option<LaunchError> {
    if failures.is_empty() {
        return None;
    }
    // Timestamps alone cannot order a crash and its echo on the other
    // machines (milliseconds apart, seen through torchrun's polling), so
    // failures that report a lost peer come after those that do not.
    failures.sort_by_key(|f| (f.lost_peer, f.at));
    let first = failures.remove(0);
    Some(LaunchError::Failed {
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
    })
}
