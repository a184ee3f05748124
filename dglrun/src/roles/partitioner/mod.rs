//! The partitioner. DGL-API mode runs the user's partition script the way
//! the earlier operator did; ParMETIS mode runs the native pipeline
//! (crate dgl-partition) on all the pod's cores, after an optional loader
//! script that writes the chunked graph. Either way it then checks the
//! output, builds the manifest and serves the shards until the launcher
//! says the job is done.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use dgl_api::names::{CHUNKED_DIR, DATASET_DIR};
use dgl_api::wire::{AgentInfo, Request, Response};
use dgl_api::ReplicaType;
use dgl_partition::config::{AllParts, Config};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::cli::Options;
use crate::dataset::Layout;
use crate::net::agent::{self, Ended};
use crate::net::channel::{Channel, ChannelError, Token};
use crate::procs::{ProcSpec, Supervisor};
use crate::transfer::FileServer;

pub mod config;

/// The partitioner role from the command line: partitions, then serves
/// them (or exits, with --no-serve).
pub async fn main(opts: &Options) -> anyhow::Result<()> {
    let cfg = config::partition_config(opts, crate::workers::stated_by_operator_env())?;
    // Read the token before the (long) partitioning so that a missing Secret
    // fails at once.
    let token = if opts.runtime.no_serve {
        None
    } else {
        Some(opts.token()?)
    };
    let cache = match &opts.native.partition_cache {
        Some(url) => Some((url.clone(), cache_key(&cfg).await?)),
        None => None,
    };
    let server = partition(&cfg).await?;
    if let Some((url, key)) = cache {
        store(&cfg, &url, &key).await;
    }
    let Some(token) = token else {
        tracing::info!("--no-serve: partitions checked, exiting");
        return Ok(());
    };
    let listener = bind(opts.agent_addr()).await?;
    serve(listener, server.with_timeouts(opts.timeouts), token).await
}

/// The job's partition-cache key, computed before the partitioning reads
/// the input (it is computed again after: see [`store`]).
async fn cache_key(cfg: &PartitionConfig) -> anyhow::Result<dgl_partition::cache::Key> {
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || crate::roles::cache_lookup::key(&cfg))
        .await
        .context("computing the partition cache key panicked")?
}

/// Stores the checked partitions in the cache under `key`, if the input
/// still has it: an object replaced while it was partitioned changes the
/// key, and partitions of a mix would be wrong under either. A failure is
/// logged, not fatal: the partitions serve this job all the same, and the
/// next job partitions again.
async fn store(cfg: &PartitionConfig, url: &str, key: &dgl_partition::cache::Key) {
    let (cfg, url, key) = (cfg.clone(), url.to_owned(), key.clone());
    let dir = crate::dataset::Layout::new(&cfg.workspace, &cfg.graph_name).dir;
    let work = tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
        let after = crate::roles::cache_lookup::key(&cfg)?;
        if after != key {
            bail!("the input changed while it was partitioned (key {key} before, {after} after); not stored");
        }
        let cache = dgl_partition::cache::Cache::new(&url)?;
        let m = cache.upload(&key, &dir)?;
        Ok(format!(
            "partition cache {}: stored entry {key}: {} files, {} bytes, {} parts",
            cache.url(),
            m.files.len(),
            m.total_bytes(),
            m.num_parts
        ))
    });
    match work.await {
        Ok(Ok(line)) => tracing::info!("{line}"),
        Ok(Err(e)) => {
            tracing::error!("the partitions were not stored in the partition cache: {e:#}")
        }
        Err(e) => tracing::error!("storing in the partition cache panicked: {e}"),
    }
}

/// The partitioner's settings.
#[derive(Debug, Clone)]
pub struct PartitionConfig {
    pub python: String,
    /// The partition script (DGL-API) or the loader that writes the chunked
    /// graph (ParMETIS, optional).
    pub entry_point: Option<String>,
    /// Instead of the entry point: the user's own command line
    /// (--partition-command), split and filled, run as written.
    pub command: Option<Vec<String>>,
    pub graph_name: String,
    pub num_parts: u32,
    pub balance_train: bool,
    pub balance_edges: bool,
    pub workspace: PathBuf,
    pub extra_args: Vec<String>,
    pub stop_grace: std::time::Duration,
    /// The native pipeline's settings (ParMETIS mode); its output folder is
    /// set from the workspace.
    pub native: Option<Config<AllParts>>,
    /// GraphBolt partitions (`--use-graphbolt`).
    pub use_graphbolt: bool,
}

/// The partition script's command line. In the native mode the script is a
/// loader whose `--rel_data_path` is the chunked graph's folder.
pub fn partition_command(cfg: &PartitionConfig, entry_point: &str) -> ProcSpec {
    let rel = if cfg.native.is_some() {
        CHUNKED_DIR
    } else {
        DATASET_DIR
    };
    let mut args = vec![
        entry_point.to_string(),
        "--graph_name".into(),
        cfg.graph_name.clone(),
        "--workspace".into(),
        cfg.workspace.display().to_string(),
        "--rel_data_path".into(),
        rel.into(),
        "--num_parts".into(),
        cfg.num_parts.to_string(),
    ];
    if cfg.balance_train {
        args.push("--balance_train".into());
    }
    if cfg.balance_edges {
        args.push("--balance_edges".into());
    }
    // DGL-API: the script calls partition_graph(..., use_graphbolt=True).
    if cfg.use_graphbolt && cfg.native.is_none() {
        args.push("--use_graphbolt".into());
    }
    args.extend(cfg.extra_args.iter().cloned());
    ProcSpec {
        name: "partition".into(),
        program: cfg.python.clone(),
        args,
        env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
        cwd: None,
    }
}

/// The user's own partition command (filled words), as written.
pub fn user_command(words: &[String]) -> ProcSpec {
    ProcSpec {
        name: "partition".into(),
        program: words[0].clone(),
        args: words[1..].to_vec(),
        env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
        cwd: None,
    }
}

/// Runs the partition script and/or the native pipeline and checks the
/// output; returns the file server for the result.
pub async fn partition(cfg: &PartitionConfig) -> anyhow::Result<FileServer> {
    std::fs::create_dir_all(&cfg.workspace)
        .with_context(|| format!("cannot create the workspace {}", cfg.workspace.display()))?;
    if let Some(words) = &cfg.command {
        run_script(cfg, user_command(words)).await?;
    } else if let Some(entry_point) = &cfg.entry_point {
        run_script(cfg, partition_command(cfg, entry_point)).await?;
    }
    if let Some(native) = &cfg.native {
        run_native(native.clone()).await?;
    }
    let layout = Layout::new(&cfg.workspace, &cfg.graph_name).with_graphbolt(cfg.use_graphbolt);
    // The native pipeline and scripts that do not call partition_graph with
    // use_graphbolt leave DGL's format: DGL's converter makes GraphBolt's.
    if cfg.use_graphbolt && !layout.has_graphbolt_graphs() {
        let spec = crate::dgl::graphbolt::converter(&cfg.python, &layout.json_path());
        run_script(cfg, spec).await?;
    }
    let info = layout
        .check_all(cfg.num_parts)
        .context("the partitioning finished but its output is not usable")?;
    tracing::info!(
        num_parts = info.num_parts,
        files = info.referenced.len(),
        "partition output checked"
    );
    let l = layout.clone();
    let n = cfg.num_parts;
    // Sizes only: the chunks are hashed while serving (and in the
    // background on idle cores), so serving does not wait for a hash pass.
    let manifest = tokio::task::spawn_blocking(move || l.list_manifest(n)).await??;
    let bytes: u64 = manifest.files.iter().map(|f| f.size).sum();
    tracing::info!(files = manifest.files.len(), bytes, "manifest ready");
    let server = FileServer::new(layout.dir, manifest);
    server.hash_in_background();
    Ok(server)
}

/// Runs the native pipeline on a blocking thread; SIGTERM ends the wait (the
/// process then exits, and the pipeline with it).
async fn run_native(native: Config<AllParts>) -> anyhow::Result<()> {
    tracing::info!(
        input = %native.source,
        out = %native.out_dir.display(),
        num_parts = native.driver.num_parts,
        partitioner = %native.partitioner,
        threads = native.threads,
        "native partition pipeline"
    );
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let work = tokio::task::spawn_blocking(move || dgl_partition::run::run(&native));
    let report = tokio::select! {
        r = work => r.context("the partition pipeline panicked")??,
        _ = sigterm.recv() => bail!("interrupted while partitioning"),
        _ = sigint.recv() => bail!("interrupted while partitioning"),
    };
    for line in report.lines() {
        tracing::info!("{line}");
    }
    Ok(())
}

/// Runs the user's script (partition script or loader) to its end.
async fn run_script(cfg: &PartitionConfig, spec: ProcSpec) -> anyhow::Result<()> {
    let (tx, mut rx) = mpsc::channel::<dgl_api::wire::OutputLine>(1024);
    let printer = tokio::spawn(async move {
        while let Some(l) = rx.recv().await {
            println!("[{}] {}", l.process, l.line);
        }
    });
    // The partition script may fork (DGL's multiprocessing); what it leaves
    // behind is re-parented to us and killed with the rest.
    crate::procs::become_subreaper();
    let mut sup = Supervisor::new(tx);
    sup.spawn(&spec)?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let exit = tokio::select! {
        e = sup.next_exit() => e.map(|e| e.exit),
        _ = sigterm.recv() => None,
        _ = sigint.recv() => None,
    };
    sup.stop_all(cfg.stop_grace).await;
    drop(sup);
    let _ = printer.await;
    match exit {
        None => bail!("interrupted while partitioning; the partition script was stopped"),
        Some(e) if !e.success() => bail!(
            "the partition command exited with {e} (command: {})",
            spec.display()
        ),
        Some(_) => Ok(()),
    }
}

/// Serves the shards until a `Shutdown` arrives (exit 0) or SIGTERM (also
/// exit 0: the partitions were made; being deleted at the end of the job is
/// the normal way out).
pub async fn serve(listener: TcpListener, server: FileServer, token: Token) -> anyhow::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "serving the partitions");
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
    let handler = move |ch| {
        let (server, done) = (server.clone(), done_tx.clone());
        async move { handle(ch, &server, &done).await }
    };
    match agent::accept_until(&listener, Arc::new(token), done_rx.recv(), handler).await? {
        Ended::Done(reason) => {
            tracing::info!(reason = reason.as_deref().unwrap_or(""), "shutting down")
        }
        Ended::Signal(name) => tracing::info!("{name}: stop serving"),
    }
    Ok(())
}

async fn handle(
    mut ch: Channel,
    server: &FileServer,
    done: &mpsc::UnboundedSender<String>,
) -> Result<(), ChannelError> {
    let idle = server.timeouts().session_idle();
    while let Some(req) = agent::next_request(&mut ch, idle).await? {
        match req {
            Request::Ping => {
                ch.send(&Response::Pong(AgentInfo {
                    role: ReplicaType::Partitioner,
                    index: None,
                    version: env!("CARGO_PKG_VERSION").into(),
                    memory_limit: None,
                }))
                .await?
            }
            Request::GetManifest => {
                ch.send(&Response::Manifest(server.manifest().clone()))
                    .await?
            }
            Request::Fetch { path, offset } => {
                tracing::debug!(peer = %ch.peer, path, offset, "fetch");
                server.handle_fetch(&mut ch, &path, offset).await?
            }
            Request::ChunkSums { path } => server.handle_chunk_sums(&mut ch, &path).await?,
            Request::Shutdown { reason } => {
                ch.send(&Response::Ack).await?;
                let _ = done.send(reason);
                return Ok(());
            }
            other => {
                ch.send(&Response::Error {
                    message: format!("the partitioner does not handle {other:?}"),
                })
                .await?
            }
        }
    }
    Ok(())
}

/// Binds the agent port before partitioning would be too early (the
/// readiness probe must fail until the shards are checked), so this is
/// called after [`partition`].
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_matches_the_earlier_operator() {
        let cfg = PartitionConfig {
            python: "python3".into(),
            entry_point: Some("code/part.py".into()),
            command: None,
            graph_name: "g".into(),
            num_parts: 2,
            balance_train: true,
            balance_edges: true,
            workspace: dgl_api::names::WORKSPACE.into(),
            extra_args: vec!["--num_nodes".into(), "100".into()],
            stop_grace: std::time::Duration::from_secs(1),
            native: None,
            use_graphbolt: false,
        };
        let c = partition_command(&cfg, "code/part.py");
        assert_eq!(c.program, "python3");
        assert_eq!(
            c.args.join(" "),
            "code/part.py --graph_name g --workspace /dgl_workspace --rel_data_path dataset --num_parts 2 --balance_train --balance_edges --num_nodes 100"
        );
    }
}
