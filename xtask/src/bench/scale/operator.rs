//! The operator under test of a phase (ours or the peer), started as a
//! process of its own and waited for until it is ready.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::metrics::Metrics;
use super::procs::{free_port, http_get, Procs};
use super::spec::{Args2, Subject};
use super::{identity, peer};

/// An operator under test, started and ready.
pub(super) struct Operator {
    pub(super) pid: u32,
    pub(super) log: PathBuf,
    /// Our operator's metrics port (its request counters, reconciles).
    pub(super) metrics_port: Option<u16>,
    /// The arguments it was started with (for the report).
    pub(super) args: Vec<String>,
}

/// Step 4: the operator under test for this phase, ready.
pub(super) async fn start_operator(
    args: &Args2<'_>,
    subject: Subject,
    ns: &str,
    kubeconfig: &Path,
    procs: &mut Procs,
) -> Result<Operator> {
    match subject {
        Subject::Ours(_) => start_ours(args, ns, kubeconfig, procs).await,
        Subject::Mpi(q) => start_peer(args, q, ns, kubeconfig, procs).await,
    }
}

pub(super) async fn start_ours(
    a: &Args2<'_>,
    ns: &str,
    kubeconfig: &Path,
    procs: &mut Procs,
) -> Result<Operator> {
    let operator = &a.bins.operator;
    eprintln!("==> operator {}", operator.display());
    let metrics_port = free_port()?;
    let mut op_args: Vec<String> = vec![
        "run".into(),
        "--leader-elect=false".into(),
        "--metrics-auth=none".into(),
        format!("--metrics-addr=127.0.0.1:{metrics_port}"),
        "--gang-scheduler=none".into(),
        format!("--namespace={ns}"),
    ];
    op_args.extend(a.scale.operator_args.iter().cloned());
    let log = a.work.join(format!("operator-{ns}.log"));
    let mut cmd = Command::new(operator);
    cmd.args(&op_args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1");
    // Its flags' environment variables would change the limits the peer is
    // given (read from --operator-arg).
    for v in [
        "WATCH_NAMESPACE",
        "DGL_OPERATOR_CONCURRENCY",
        "DGL_OPERATOR_KUBE_API_QPS",
        "DGL_OPERATOR_KUBE_API_BURST",
    ] {
        cmd.env_remove(v);
    }
    let pid = procs.spawn("dgl-operator", &mut cmd, &log)?;
    wait_ready(procs, &log, || async move {
        matches!(http_get(metrics_port, "/readyz").await, Ok((200, _)))
    })
    .await?;
    Ok(Operator {
        pid,
        log,
        metrics_port: Some(metrics_port),
        args: op_args,
    })
}

pub(super) async fn start_peer(
    a: &Args2<'_>,
    queue: peer::QueueLimit,
    ns: &str,
    kubeconfig: &Path,
    procs: &mut Procs,
) -> Result<Operator> {
    let Some((bin, _)) = &a.bins.peer else {
        bail!("the peer's binary was not built");
    };
    eprintln!(
        "==> mpi-operator {} (queue limit {})",
        bin.display(),
        queue.name()
    );
    peer::check_health_port()?;
    let metrics_port = free_port()?;
    let limits = peer::ClientLimits::from_operator_args(&a.scale.operator_args)?;
    let mut op_args = peer::args(ns, identity::SYSTEM_NAMESPACE, metrics_port, limits, queue)?;
    op_args.extend(a.scale.peer_args.iter().cloned());
    let log = a.work.join(format!("mpi-operator-{ns}.log"));
    let pid = procs.spawn(
        "mpi-operator",
        Command::new(bin)
            .args(&op_args)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBEFLOW_NAMESPACE"),
        &log,
    )?;
    // Ready once it leads (it starts its informers then).
    wait_ready(procs, &log, || async move {
        match http_get(metrics_port, "/metrics").await {
            Ok((200, body)) => Metrics::parse(&body).get("mpi_operator_is_leader") >= 1.0,
            _ => false,
        }
    })
    .await?;
    Ok(Operator {
        pid,
        log,
        metrics_port: None,
        args: op_args,
    })
}

pub(super) async fn wait_ready<F, Fut>(procs: &mut Procs, log: &Path, ready: F) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        procs.check_running()?;
        if ready().await {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("operator not ready in 60 s; see {}", log.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
