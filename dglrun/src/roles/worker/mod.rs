//! The worker's agent: listens on the agent port, answers pings, prepares
//! the shard when the launcher asks, runs the training on `Start` and
//! streams its output back. The process exits with the training's status.
//! In partition mode DistParMETIS it also runs MPI's daemon for `dglrun rsh`
//! (see [`crate::mpi::exec`]), one at a time and never during the training.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dgl_api::wire::{
    AgentInfo, Request, Response, ShardProgress, ShardReport, ShardRequest, ShardSource,
    TrainResult, SHARD_PROGRESS_INTERVAL_SECS,
};
use dgl_api::{PartitionMode, ReplicaType};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Mutex};

use anyhow::Context;

use crate::cli::Options;
use crate::dataset::Layout;
use crate::dgl::training::{self, TrainContext};
use crate::net::agent::{self, Ended};
use crate::net::channel::{read_frame, write_frame, Channel, ChannelError, Timeouts, Token};
use crate::net::hosts::parse_addr;
use crate::transfer::{Fetcher, RetryPolicy};

pub mod config;
mod store;

/// The worker role from the command line; the training's exit status.
pub async fn main(opts: &Options) -> anyhow::Result<i32> {
    let cfg = config::worker_config(opts)?;
    std::fs::create_dir_all(&cfg.train.workspace).with_context(|| {
        format!(
            "cannot create the workspace {}",
            cfg.train.workspace.display()
        )
    })?;
    run(cfg).await
}

/// The worker's settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub listen: IpAddr,
    pub agent_port: u16,
    pub token: Token,
    pub retry: RetryPolicy,
    /// How long a connection may stay silent (see [`Timeouts`]).
    pub timeouts: Timeouts,
    pub train: TrainContext,
    /// The job's partition mode: only DistParMETIS lets `dglrun rsh` start
    /// MPI's daemon here.
    pub partition_mode: PartitionMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Training,
    Done,
}

struct Shared {
    cfg: WorkerConfig,
    phase: Mutex<Phase>,
    /// Serialises shard preparation (two requests must not write the same files).
    prepare: Mutex<()>,
    stop_tx: watch::Sender<Option<String>>,
    /// The process's exit status, sent once when the worker is done.
    exit_tx: mpsc::UnboundedSender<i32>,
    /// Whether a command of `dglrun rsh` runs (at most one; see `exec`).
    exec_busy: watch::Sender<bool>,
}

impl Shared {
    fn stop(&self, reason: &str) {
        self.stop_tx.send_if_modified(|s| {
            if s.is_none() {
                tracing::warn!(reason, "stopping the worker's processes");
                *s = Some(reason.to_string());
                true
            } else {
                false
            }
        });
    }

    /// Stops a running `dglrun rsh` command and waits (bounded) until it ended.
    async fn stop_exec(&self, reason: &str) {
        let mut busy = self.exec_busy.subscribe();
        if !*busy.borrow_and_update() {
            return;
        }
        self.stop(reason);
        let bound = self
            .cfg
            .train
            .stop_grace
            .saturating_add(Duration::from_secs(20));
        if tokio::time::timeout(bound, busy.wait_for(|b| !*b))
            .await
            .is_err()
        {
            tracing::error!("the command of dglrun rsh did not stop within {bound:?}");
        }
    }
}

/// Runs the worker until its training ended (or it was told to shut down);
/// returns the process exit status.
pub async fn run(cfg: WorkerConfig) -> anyhow::Result<i32> {
    // Orphans of killed process trees are re-parented to us, so that they
    // can be found and killed (see procs::reap_orphans).
    crate::procs::become_subreaper();
    let addr = SocketAddr::new(cfg.listen, cfg.agent_port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    tracing::info!(%addr, index = ?cfg.train.index, workspace = %cfg.train.workspace.display(), "worker agent listening");
    let (stop_tx, _) = watch::channel(None);
    let (exit_tx, mut exit_rx) = mpsc::unbounded_channel();
    let grace = cfg.train.stop_grace;
    let shared = Arc::new(Shared {
        cfg,
        phase: Mutex::new(Phase::Idle),
        prepare: Mutex::new(()),
        stop_tx,
        exit_tx,
        exec_busy: watch::channel(false).0,
    });
    let token = Arc::new(shared.cfg.token.clone());
    let handler = {
        let shared = shared.clone();
        move |ch| serve(shared.clone(), ch)
    };
    match agent::accept_until(&listener, token, exit_rx.recv(), handler).await? {
        Ended::Done(code) => Ok(code.unwrap_or(1)),
        Ended::Signal(name) => Ok(on_signal(&shared, &mut exit_rx, name, grace).await),
    }
}

async fn on_signal(
    shared: &Shared,
    exit_rx: &mut mpsc::UnboundedReceiver<i32>,
    name: &str,
    grace: Duration,
) -> i32 {
    shared
        .stop_exec(&format!("{name} received by the worker"))
        .await;
    let phase = *shared.phase.lock().await;
    if phase == Phase::Training {
        shared.stop(&format!("{name} received by the worker"));
        // The session stops the processes (SIGTERM, SIGKILL after the grace
        // period) and reports to the launcher before it hands us the status.
        let bound = grace.saturating_add(Duration::from_secs(20));
        if let Ok(Some(code)) = tokio::time::timeout(bound, exit_rx.recv()).await {
            return code;
        }
        tracing::error!("the training did not stop within {bound:?}");
    }
    128 + libc::SIGTERM
}

async fn serve(
    shared: Arc<Shared>,
    mut ch: Channel,
) -> Result<(), crate::net::channel::ChannelError> {
    let idle = shared.cfg.timeouts.session_idle();
    while let Some(req) = agent::next_request(&mut ch, idle).await? {
        match req {
            Request::Ping => {
                ch.send(&Response::Pong(AgentInfo {
                    role: ReplicaType::Worker,
                    index: shared.cfg.train.index,
                    version: env!("CARGO_PKG_VERSION").into(),
                    memory_limit: crate::roles::distpart::killed::memory_limit(
                        std::path::Path::new("/sys/fs/cgroup"),
                    ),
                }))
                .await?
            }
            Request::PrepareShard(req) => {
                let resp = prepare_reporting(&shared, &req, &mut ch).await?;
                ch.send(&resp).await?
            }
            Request::StorePart(req) => {
                let resp = store::store_reporting(&shared, &req, &mut ch).await?;
                ch.send(&resp).await?
            }
            Request::Start(spec) => {
                if let Some(message) = start_refusal(&shared).await {
                    ch.send(&Response::Error { message }).await?;
                    continue;
                }
                // The connection now belongs to the session.
                return session(shared, ch, spec).await;
            }
            Request::Stop { reason } => {
                shared.stop(&format!("launcher: {reason}"));
                ch.send(&Response::Ack).await?
            }
            Request::Exec(spec) => {
                if let Some(message) = exec_refusal(&shared, &spec).await {
                    tracing::warn!(peer = %ch.peer, "refused dglrun rsh: {message}");
                    ch.send(&Response::Error { message }).await?;
                    continue;
                }
                // The connection now belongs to the command.
                return exec(&shared, ch, spec).await;
            }
            Request::Shutdown { reason } => {
                let phase = shut_down(&shared, &reason).await;
                ch.send(&Response::Ack).await?;
                if phase == Phase::Training {
                    continue;
                }
                // Never trained: not a success.
                let _ = shared.exit_tx.send(1);
                return Ok(());
            }
            Request::GetManifest | Request::Fetch { .. } | Request::ChunkSums { .. } => {
                ch.send(&Response::Error {
                    message: "this is a worker; shards are served by the partitioner".into(),
                })
                .await?
            }
        }
    }
    Ok(())
}

/// How long `Start` waits for MPI's daemon of the partitioning to end.
const DAEMON_END_GRACE: Duration = Duration::from_secs(15);

/// Why this worker does not start the training now; `None` when it does,
/// and then it is training.
async fn start_refusal(shared: &Shared) -> Option<String> {
    // mpirun has ended on the launcher before it sends Start, but this
    // worker's daemon may take a moment longer to end: wait briefly rather
    // than refuse (seen in the real-DGL DistParMETIS test under load).
    let mut busy = shared.exec_busy.subscribe();
    let _ = tokio::time::timeout(DAEMON_END_GRACE, busy.wait_for(|b| !*b)).await;
    let mut phase = shared.phase.lock().await;
    if *phase != Phase::Idle {
        return Some(format!("training already {:?} on this worker", *phase));
    }
    if *shared.exec_busy.borrow() {
        return Some("MPI's daemon started by dglrun rsh still runs on this worker (the partitioning has not ended)".to_string());
    }
    *phase = Phase::Training;
    None
}

/// Runs a command of `dglrun rsh` on this connection to its end.
async fn exec(
    shared: &Shared,
    ch: Channel,
    spec: dgl_api::wire::ExecSpec,
) -> Result<(), crate::net::channel::ChannelError> {
    let train = &shared.cfg.train;
    let result = crate::mpi::exec::session(
        ch,
        spec,
        shared.stop_tx.subscribe(),
        train.workspace.clone(),
        crate::mpi::exec::worker_env(&train.workspace, train.index),
        train.stop_grace,
    )
    .await;
    shared.exec_busy.send_replace(false);
    result.map(|_| ())
}

/// The launcher's `Shutdown`: stops what runs. Gives the phase after it:
/// still `Training` (until the training stopped) or `Done` (it never
/// trained).
async fn shut_down(shared: &Shared, reason: &str) -> Phase {
    shared.stop_exec(&format!("launcher: {reason}")).await;
    let mut phase = shared.phase.lock().await;
    if *phase == Phase::Training {
        drop(phase);
        shared.stop(&format!("launcher: {reason}"));
        return Phase::Training;
    }
    tracing::warn!(reason, "shut down by the launcher before training");
    // The pod fails (exit 1): its status says why, which is the launcher's
    // reason (the operator may see this pod fail before the launcher).
    crate::termination::write(&format!(
        "shut down by the launcher before training: {reason}"
    ));
    *phase = Phase::Done;
    Phase::Done
}

/// Why this worker does not run `spec` now; `None` when it does, and then
/// it counts as busy until the command ended.
async fn exec_refusal(shared: &Shared, spec: &dgl_api::wire::ExecSpec) -> Option<String> {
    if let Some(message) = crate::mpi::exec::refusal(spec, shared.cfg.partition_mode) {
        return Some(message);
    }
    // Under the phase lock, so that a `Start` cannot slip in between.
    let phase = shared.phase.lock().await;
    if *phase != Phase::Idle {
        return Some(format!(
            "the worker is past partitioning (training {:?}); it starts no MPI daemon now",
            *phase
        ));
    }
    if shared.stop_tx.borrow().is_some() {
        return Some("the worker is stopping".into());
    }
    let claimed = shared
        .exec_busy
        .send_if_modified(|busy| !std::mem::replace(busy, true));
    (!claimed).then(|| "another command of dglrun rsh still runs on this worker".to_string())
}

/// Prepares the shard, telling the launcher every few seconds that it is
/// still at it, so that it can tell a long transfer from a silent worker.
/// A launcher that went away cancels the preparation (what was received is
/// kept and resumed by the next one).
async fn prepare_reporting(
    shared: &Shared,
    req: &ShardRequest,
    ch: &mut Channel,
) -> Result<Response, ChannelError> {
    let received = Arc::new(AtomicU64::new(0));
    let work = async {
        prepare(shared, req, received.clone())
            .await
            .map(Response::ShardReady)
    };
    reporting(req.part_id, work, &received, ch).await
}

/// Runs `work`, sending a progress report (`received` bytes so far) every
/// few seconds meanwhile; its answer, or its error as `Error` (logged).
async fn reporting(
    part_id: u32,
    work: impl std::future::Future<Output = Result<Response, String>>,
    received: &AtomicU64,
    ch: &mut Channel,
) -> Result<Response, ChannelError> {
    tokio::pin!(work);
    let interval = Duration::from_secs(SHARD_PROGRESS_INTERVAL_SECS);
    let mut tick = tokio::time::interval_at(crate::clock::after(interval), interval);
    loop {
        tokio::select! {
            r = &mut work => {
                return Ok(r.unwrap_or_else(|message| {
                    tracing::error!("{message}");
                    Response::Error { message }
                }));
            }
            _ = tick.tick() => {
                let p = ShardProgress {
                    part_id,
                    received_bytes: received.load(Ordering::Relaxed),
                };
                ch.send(&Response::ShardProgress(p)).await?;
            }
        }
    }
}

/// Gets this machine's shard in place (pulled from the partitioner, or
/// checked in the workspace in Skip mode); `received` counts the bytes
/// that arrive.
async fn prepare(
    shared: &Shared,
    req: &ShardRequest,
    received: Arc<AtomicU64>,
) -> Result<ShardReport, String> {
    let _one_at_a_time = shared.prepare.lock().await;
    let ctx = &shared.cfg.train;
    if let Some(index) = ctx.index {
        if index != req.part_id {
            return Err(format!(
                "this worker has index {index} but the launcher asked it for partition {}; the hostfile order and the worker indexes disagree",
                req.part_id
            ));
        }
    }
    let layout = Layout::new(&ctx.workspace, &req.graph_name).with_graphbolt(req.use_graphbolt);
    let report = match &req.source {
        ShardSource::Local => {
            if req.use_graphbolt {
                // Its progress: the GraphBolt graphs' bytes written so far.
                let (gb, done) = (ctx.graphbolt, received.clone());
                crate::dgl::graphbolt::convert_local(&ctx.python, &layout, req.num_parts, gb, done)
                    .await?;
            }
            let info = layout
                .check_shard(req.part_id, Some(req.num_parts))
                .map_err(|e| {
                    // The ranks wrote it here (DistParMETIS), or it was put here (Skip).
                    let mode = match shared.cfg.partition_mode {
                        PartitionMode::DistParMetis => PartitionMode::DistParMetis,
                        _ => PartitionMode::Skip,
                    };
                    format!("partition mode {mode}: {e}")
                })?;
            ShardReport {
                part_id: req.part_id,
                files: info.referenced.len() as u32 + 1,
                bytes: layout.shard_bytes(req.part_id).unwrap_or(0),
                transferred_bytes: 0,
                reused_files: 0,
                retries: 0,
            }
        }
        ShardSource::Cache { url, key } => from_cache(&layout, req, url, key).await?,
        ShardSource::Partitioner { addr } => {
            let addr = parse_addr(addr, dgl_api::names::AGENT_PORT)?;
            let mut fetcher = Fetcher::new(
                addr,
                shared.cfg.token.to_kept_partitioner(),
                shared.cfg.retry.clone(),
            )
            .counting_into(received);
            let manifest = fetcher.manifest().await.map_err(|e| e.to_string())?;
            if manifest.graph_name != req.graph_name || manifest.num_parts != req.num_parts {
                return Err(format!(
                    "the partitioner serves graph {:?} in {} parts, but the job wants {:?} in {} parts",
                    manifest.graph_name, manifest.num_parts, req.graph_name, req.num_parts
                ));
            }
            let files = manifest.shard_files(req.part_id);
            if files.len() < 2 {
                return Err(format!(
                    "the partitioner's manifest has no files for partition {}",
                    req.part_id
                ));
            }
            tracing::info!(%addr, files = files.len(), bytes = files.iter().map(|f| f.size).sum::<u64>(), "fetching the shard");
            let stats = fetcher
                .fetch_all(&files, &layout.dir)
                .await
                .map_err(|e| format!("fetching partition {} failed: {e}", req.part_id))?;
            layout
                .check_shard(req.part_id, Some(req.num_parts))
                .map_err(|e| format!("after the transfer: {e}"))?;
            tracing::info!(?stats, "shard verified");
            ShardReport {
                part_id: req.part_id,
                files: stats.files,
                bytes: stats.bytes,
                transferred_bytes: stats.transferred,
                reused_files: stats.reused,
                retries: stats.retries,
            }
        }
    };
    Ok(report)
}

/// `spec.partitionCache` had the job's partitions: this worker's part and
/// the shared files of entry `key`, each checked by size and SHA-256 while
/// it streams (a file that does not match is removed and named), then the
/// shard checked as one the partitioner sent.
async fn from_cache(
    layout: &Layout,
    req: &ShardRequest,
    url: &str,
    key: &str,
) -> Result<ShardReport, String> {
    let (dir, part) = (layout.dir.clone(), req.part_id);
    let (u, k) = (url.to_owned(), key.to_owned());
    let fetched = tokio::task::spawn_blocking(move || {
        use dgl_partition::cache::{Cache, Key};
        let cache = Cache::new(&u)?;
        let key = Key::from_hex(&k)?;
        let Some(m) = cache.lookup(&key)? else {
            return Ok(None);
        };
        let bytes = cache.fetch_part(&m, part, &dir)?;
        Ok::<_, dgl_partition::Error>(Some((m.files_of(part).count() as u32, bytes)))
    })
    .await
    .map_err(|e| format!("the partition cache fetch panicked: {e}"))?
    .map_err(|e| format!("partition {}: the partition cache: {e}", req.part_id))?;
    let Some((files, bytes)) = fetched else {
        return Err(format!(
            "partition {}: entry {key} is no longer in the partition cache {url} (its manifest.json is gone)",
            req.part_id
        ));
    };
    layout
        .check_shard(req.part_id, Some(req.num_parts))
        .map_err(|e| format!("the part fetched from the partition cache: {e}"))?;
    tracing::info!(%url, %key, part = req.part_id, files, bytes, "part reused from the partition cache, verified");
    Ok(ShardReport {
        part_id: req.part_id,
        files,
        bytes,
        transferred_bytes: bytes,
        reused_files: 0,
        retries: 0,
    })
}

/// Runs the training for the launcher on this connection: output and exits
/// go out as they happen, `Stop` comes in; a lost launcher stops the training.
async fn session(
    shared: Arc<Shared>,
    ch: Channel,
    spec: dgl_api::wire::TrainSpec,
) -> Result<(), crate::net::channel::ChannelError> {
    let Channel {
        mut reader,
        mut writer,
        peer,
    } = ch;
    tracing::info!(%peer, rank = spec.machine_rank, "training starts");
    let (events_tx, mut events_rx) = mpsc::channel::<Response>(1024);

    let writer_shared = shared.clone();
    let writer_task = tokio::spawn(async move {
        let mut ok = true;
        while let Some(ev) = events_rx.recv().await {
            if ok {
                match write_frame(&mut writer, &ev).await {
                    Ok(()) => {}
                    // One message that cannot be encoded is dropped, never
                    // a reason to stop the training (nothing was sent).
                    Err(ChannelError::Wire(e)) => {
                        tracing::warn!(error = %e, "a message to the launcher was dropped")
                    }
                    Err(e) => {
                        // Keep draining so the training never blocks on us.
                        ok = false;
                        writer_shared.stop(&launcher_lost(&e));
                    }
                }
            }
        }
        writer
    });
    let reader_shared = shared.clone();
    let reader_task = tokio::spawn(async move {
        loop {
            match read_frame::<_, Request>(&mut reader).await {
                Ok(Some(Request::Stop { reason })) => {
                    reader_shared.stop(&format!("launcher: {reason}"))
                }
                Ok(Some(other)) => tracing::warn!(?other, "ignored during training"),
                Ok(None) => {
                    reader_shared.stop("the launcher disconnected");
                    return;
                }
                Err(e) => {
                    reader_shared.stop(&launcher_lost(&e));
                    return;
                }
            }
        }
    });

    let result: TrainResult = training::run(
        &shared.cfg.train,
        spec,
        events_tx.clone(),
        shared.stop_tx.subscribe(),
    )
    .await;
    if result.exit.success() {
        tracing::info!(message = %result.message, "training finished");
    } else {
        tracing::error!(status = %result.exit, message = %result.message, "training failed");
        crate::termination::write(&format!(
            "training failed ({}): {}",
            result.exit, result.message
        ));
    }
    let code = result.exit.as_shell_status();
    let _ = events_tx.send(Response::Finished(result)).await;
    drop(events_tx);
    if let Ok(Ok(mut w)) = tokio::time::timeout(Duration::from_secs(10), writer_task).await {
        let _ = w.shutdown().await;
    }
    // Wait (briefly) for the launcher to read the result and close.
    let _ = tokio::time::timeout(Duration::from_secs(5), reader_task).await;
    *shared.phase.lock().await = Phase::Done;
    let _ = shared.exit_tx.send(code);
    Ok(())
}

/// Why the training stops after the launcher's connection failed. A killed
/// launcher with unread bytes in its socket resets the connection instead
/// of closing it: that too is the launcher gone, not a network fault.
fn launcher_lost(e: &ChannelError) -> String {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    match e {
        ChannelError::Closed => "the launcher disconnected".into(),
        ChannelError::Io(io)
            if matches!(
                io.kind(),
                ConnectionReset | BrokenPipe | ConnectionAborted | UnexpectedEof
            ) =>
        {
            format!("the launcher disconnected ({io})")
        }
        e => format!("the launcher connection failed: {e}"),
    }
}

#[cfg(test)]
mod lost_tests {
    use super::{launcher_lost, ChannelError};
    use std::io::{Error, ErrorKind};

    #[test]
    fn a_reset_or_a_close_is_the_launcher_gone_other_errors_are_named() {
        assert_eq!(
            launcher_lost(&ChannelError::Closed),
            "the launcher disconnected"
        );
        let reset = launcher_lost(&Error::from(ErrorKind::ConnectionReset).into());
        assert!(reset.starts_with("the launcher disconnected ("), "{reset}");
        let other = launcher_lost(&ChannelError::Unauthentic { unit: 3 });
        assert!(
            other.starts_with("the launcher connection failed: frame 3"),
            "{other}"
        );
    }
}
