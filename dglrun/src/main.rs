//! `dglrun`: the binary edge. Parses the command line, sets up logging,
//! builds each role's settings from flags, environment and the job's
//! ConfigMap, runs the role and turns its outcome into the exit status.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use dgl_api::logging::{self, LogFormat, Output};
use dgl_api::names;
use dgl_api::wire::{Request, Response};
use dglrun::channel::Channel;
use dglrun::cli::{self, Cli, Command, Options, ProbeArgs, Role};
use dglrun::launcher::{self, LaunchError};
use dglrun::partition;
use dglrun::standalone;
use dglrun::worker;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (role, opts, probe) = match cli.command {
        Some(Command::Partition(o)) => (Role::Partitioner, o, None),
        Some(Command::Launch(o)) => (Role::Launcher, o, None),
        Some(Command::Worker(o)) => (Role::Worker, o, None),
        Some(Command::Probe(p)) => (Role::Probe, p.opts.clone(), Some(p)),
        Some(Command::Rsh(a)) => return dglrun::rsh::main(a),
        None => {
            let env = std::env::var(names::ENV_ROLE).ok();
            match cli::role_from_env(env.as_deref()) {
                Ok(r) => (r, cli.opts, None),
                Err(e) => {
                    eprintln!("dglrun: {e}");
                    return ExitCode::from(2);
                }
            }
        }
    };
    init_logging(opts.runtime.log_format, role);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dglrun: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = rt.block_on(async move {
        let res = match role {
            Role::Partitioner => run_partitioner(&opts).await.map(|()| 0),
            Role::Worker => run_worker(&opts).await,
            Role::Launcher => run_launcher(&opts).await,
            Role::Probe => run_probe(&opts, probe.as_ref().expect("probe args"))
                .await
                .map(|()| 0),
        };
        match res {
            Ok(code) => code,
            Err(e) => {
                tracing::error!("{e:#}");
                dglrun::termination::write(&format!("{e:#}"));
                1
            }
        }
    });
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// dglrun's messages go to stderr (stdout carries the processes' output).
fn init_logging(format: LogFormat, role: Role) {
    // A probe runs every few seconds; only its failures are worth a line.
    let default = if role == Role::Probe { "warn" } else { "info" };
    logging::init(format, default, Output::Stderr);
}

async fn run_partitioner(opts: &Options) -> anyhow::Result<()> {
    let job_workers = std::env::var(names::ENV_NUM_WORKERS).ok();
    let cfg = cli::partition_config(opts, job_workers.as_deref())?;
    // Read the token before the (long) partitioning so that a missing Secret
    // fails at once.
    let token = if opts.runtime.no_serve {
        None
    } else {
        Some(opts.token()?)
    };
    let server = partition::partition(&cfg).await?;
    let Some(token) = token else {
        tracing::info!("--no-serve: partitions checked, exiting");
        return Ok(());
    };
    let listener = partition::bind(opts.agent_addr()).await?;
    partition::serve(listener, server.with_timeouts(opts.timeouts), token).await
}

async fn run_worker(opts: &Options) -> anyhow::Result<i32> {
    let cfg = cli::worker_config(opts)?;
    std::fs::create_dir_all(&cfg.train.workspace).with_context(|| {
        format!(
            "cannot create the workspace {}",
            cfg.train.workspace.display()
        )
    })?;
    worker::run(cfg).await
}

async fn run_launcher(opts: &Options) -> anyhow::Result<i32> {
    if cli::is_standalone(opts) {
        let cfg = cli::standalone_config(opts)?;
        return standalone::run(&cfg).await;
    }
    let cfg = cli::launch_config(opts)?;
    tracing::info!(
        workers = cfg.workers.len(),
        mode = %opts.job.partition_mode,
        partitioner = ?cfg.partitioner,
        trainers = cfg.spec.num_trainers,
        "launching"
    );
    match launcher::run(cfg).await {
        Ok(()) => Ok(0),
        Err(e @ LaunchError::Interrupted { .. }) => {
            tracing::error!("{e}");
            Ok(128 + libc::SIGTERM)
        }
        Err(e) => Err(e.into()),
    }
}

async fn run_probe(opts: &Options, p: &ProbeArgs) -> anyhow::Result<()> {
    if p.partitioned {
        let marker = opts.partitioned_marker();
        if !marker.is_file() {
            bail!("not partitioned yet: {} does not exist", marker.display());
        }
        println!("partitioned: {}", marker.display());
        return Ok(());
    }
    let addr = p.addr.unwrap_or_else(|| {
        let ip = opts
            .runtime
            .listen
            .filter(|ip| !ip.is_unspecified())
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        SocketAddr::new(ip, opts.runtime.agent_port)
    });
    let timeout = Duration::from_secs(p.timeout);
    let token = opts.token()?;
    let probe = async {
        let mut ch = Channel::connect(addr, &token, timeout).await?;
        ch.call::<_, Response>(&Request::Ping).await
    };
    match tokio::time::timeout(timeout, probe).await {
        Ok(Ok(Response::Pong(info))) => {
            println!("ready: {} agent at {addr}", info.role);
            Ok(())
        }
        Ok(Ok(other)) => bail!("not ready: unexpected answer from {addr}: {other:?}"),
        Ok(Err(e)) => bail!("not ready: {addr}: {e}"),
        Err(_) => bail!("not ready: {addr} did not answer within {timeout:?}"),
    }
}
