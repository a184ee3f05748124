//! `dglrun`: the binary edge. Parses the command line, sets up logging,
//! builds each role's settings from flags, environment and the job's
//! ConfigMap, runs the role and turns its outcome into the exit status.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use dgl_api::names;
use dgl_api::wire::{Request, Response, TrainSpec};
use dgl_api::PartitionMode;
use dglrun::channel::{Channel, Token};
use dgl_api::logging::{self, LogFormat, Output};
use dglrun::cli::{self, Cli, Command, Options, ProbeArgs, Role};
use dglrun::distpart::{self, DistPartition};
use dglrun::hosts::{self, Peer};
use dglrun::launcher::{self, LaunchConfig, LaunchError};
use dglrun::partition::{self, PartitionConfig};
use dglrun::training::TrainContext;
use dglrun::transfer::RetryPolicy;
use dglrun::worker::{self, WorkerConfig};

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

fn token(opts: &Options) -> anyhow::Result<Token> {
    Ok(Token::from_file(Path::new(&opts.runtime.token_file))?)
}

fn required<'a, T>(v: &'a Option<T>, flag: &str, role: &str) -> anyhow::Result<&'a T> {
    v.as_ref()
        .ok_or_else(|| anyhow!("{flag} is required for the {role}"))
}

fn listen_addr(opts: &Options) -> SocketAddr {
    SocketAddr::new(
        opts.runtime
            .listen
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        opts.runtime.agent_port,
    )
}

async fn run_partitioner(opts: &Options) -> anyhow::Result<()> {
    match opts.job.partition_mode {
        PartitionMode::Skip => bail!("partition mode Skip has no partitioner: the partitions must already be in each worker's workspace"),
        PartitionMode::DistParMetis => bail!("partition mode DistParMETIS has no partitioner: the launcher runs one partition rank per worker (mpirun)"),
        _ => {}
    }
    let native = opts.job.partition_mode.is_native();
    let entry_point = if native {
        opts.job.partition_entry_point.clone()
    } else {
        Some(
            required(
                &opts.job.partition_entry_point,
                "--partition-entry-point",
                "partitioner",
            )?
            .clone(),
        )
    };
    let graph_name = opts.graph_name().map_err(|e| anyhow!(e))?.to_string();
    let num_parts = *required(&opts.job.num_partitions, "--num-partitions", "partitioner")?;
    check_worker_count(num_parts)?;
    let cfg = PartitionConfig {
        python: opts.runtime.python.clone(),
        entry_point,
        native: native.then(|| cli::native_config(opts, &graph_name, num_parts)),
        graph_name,
        num_parts,
        balance_train: opts.job.balance_train,
        balance_edges: opts.job.balance_edges,
        workspace: opts.runtime.workspace.clone(),
        extra_args: opts.job.partition_args.clone(),
        stop_grace: opts.stop_grace(),
    };
    if cfg.num_parts == 0 {
        bail!("--num-partitions must be at least 1");
    }
    // Read the token before the (long) partitioning so that a missing Secret
    // fails at once.
    let token = if opts.runtime.no_serve {
        None
    } else {
        Some(token(opts)?)
    };
    let server = partition::partition(&cfg).await?;
    let Some(token) = token else {
        tracing::info!("--no-serve: partitions checked, exiting");
        return Ok(());
    };
    let listener = partition::bind(listen_addr(opts)).await?;
    partition::serve(listener, server, token).await
}

/// In a pod the operator tells the partitioner how many workers the job has:
/// partitions for another count would only fail later, at the launcher.
fn check_worker_count(num_parts: u32) -> anyhow::Result<()> {
    let Ok(value) = std::env::var(names::ENV_NUM_WORKERS) else {
        return Ok(());
    };
    match value.trim().parse::<u32>() {
        Ok(workers) if workers != num_parts => bail!(
            "--num-partitions is {num_parts} but the job has {workers} worker(s) ({}); DGL needs one partition per worker",
            names::ENV_NUM_WORKERS
        ),
        _ => Ok(()),
    }
}

fn retry_policy(opts: &Options) -> RetryPolicy {
    RetryPolicy {
        max_attempts: opts.launch.transfer_attempts,
        ..RetryPolicy::default()
    }
}

async fn run_worker(opts: &Options) -> anyhow::Result<i32> {
    let cfg = WorkerConfig {
        listen: opts
            .runtime
            .listen
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        agent_port: opts.runtime.agent_port,
        token: token(opts)?,
        retry: retry_policy(opts),
        train: TrainContext {
            python: opts.runtime.python.clone(),
            workspace: opts.runtime.workspace.clone(),
            shm_path: opts.worker.shm_path.clone(),
            index: opts.worker.index,
            stop_grace: opts.stop_grace(),
            server_start_timeout: Duration::from_secs(opts.worker.server_start_timeout),
            server_exit_timeout: Duration::from_secs(120),
            omp_threads: opts.worker.num_omp_threads,
        },
        partition_mode: opts.job.partition_mode,
    };
    std::fs::create_dir_all(&cfg.train.workspace).with_context(|| {
        format!(
            "cannot create the workspace {}",
            cfg.train.workspace.display()
        )
    })?;
    worker::run(cfg).await
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

async fn run_launcher(opts: &Options) -> anyhow::Result<i32> {
    let graph_name = opts.graph_name().map_err(|e| anyhow!(e))?.to_string();
    let entry_point = required(
        &opts.job.train_entry_point,
        "--train-entry-point",
        "launcher",
    )?
    .clone();
    let num_epochs = *required(&opts.job.num_epochs, "--num-epochs", "launcher")?;
    let batch_size = *required(&opts.job.batch_size, "--batch-size", "launcher")?;

    let hostfile = opts
        .launch
        .hostfile
        .clone()
        .unwrap_or_else(|| opts.runtime.config_dir.join(names::HOSTFILE));
    let workers: Vec<Peer> = hosts::parse_hostfile(
        &hostfile.display().to_string(),
        &read(&hostfile)?,
        opts.runtime.agent_port,
    )?;
    if let Some(p) = opts.job.num_partitions {
        if p as usize != workers.len() {
            bail!(
                "--num-partitions is {p} but {} lists {} worker(s); DGL needs one partition per worker",
                hostfile.display(),
                workers.len()
            );
        }
    }
    let partitioner = match opts.job.partition_mode {
        PartitionMode::Skip | PartitionMode::DistParMetis => None,
        _ => Some(match &opts.launch.partitioner {
            Some(a) => hosts::parse_addr(a, opts.runtime.agent_port)
                .map_err(|e| anyhow!("--partitioner: {e}"))?,
            None => {
                let f = opts.runtime.config_dir.join(names::PARTFILE);
                hosts::parse_partfile(&f.display().to_string(), &read(&f)?)?
            }
        }),
    };
    let ip_config_file = opts.launch.ip_config.clone().or_else(|| {
        let f = opts.runtime.config_dir.join(names::IP_CONFIG);
        f.is_file().then_some(f)
    });
    let ip_config = match ip_config_file {
        Some(f) => {
            let content = read(&f)?;
            hosts::check_ip_config(&f.display().to_string(), &content, &workers)?;
            content
        }
        None => dgl_api::files::render_ip_config(
            &workers
                .iter()
                .map(|w| (w.ip, opts.launch.dgl_port))
                .collect::<Vec<_>>(),
        ),
    };
    let num_trainers = opts
        .job
        .num_trainers
        .or_else(|| workers[0].slots)
        .unwrap_or(1);
    let dist_partition = (opts.job.partition_mode == PartitionMode::DistParMetis)
        .then(|| dist_partition(opts, &graph_name, &hostfile))
        .transpose()?;
    let cfg = LaunchConfig {
        spec: TrainSpec {
            graph_name,
            entry_point,
            num_epochs,
            batch_size,
            num_trainers,
            num_samplers: opts.job.num_samplers,
            num_servers: opts.job.num_servers,
            machine_rank: 0,
            ip_config,
            master_port: opts.launch.master_port,
            extra_args: opts.extra.clone(),
        },
        workers,
        partitioner,
        token: token(opts)?,
        wait_timeout: Duration::from_secs(opts.launch.wait_timeout),
        stop_grace: opts.stop_grace(),
        dist_partition,
    };
    tracing::info!(
        workers = cfg.workers.len(),
        mode = %opts.job.partition_mode,
        partitioner = ?cfg.partitioner,
        trainers = num_trainers,
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

/// Partition mode DistParMETIS: mpirun of `dgl-partition rank` on the
/// workers, through `dglrun rsh` (this binary) with the launcher's token,
/// agent port and hostfile.
fn dist_partition(
    opts: &Options,
    graph_name: &str,
    hostfile: &Path,
) -> anyhow::Result<DistPartition> {
    let program = distpart::rank_program(opts, &opts.launch.dgl_partition, graph_name)
        .map_err(|e| anyhow!(e))?;
    let dglrun = std::env::current_exe().context("cannot find the dglrun binary")?;
    let env = [
        (names::ENV_TOKEN_FILE, opts.runtime.token_file.clone()),
        ("DGLRUN_AGENT_PORT", opts.runtime.agent_port.to_string()),
        ("DGLRUN_RSH_HOSTFILE", hostfile.display().to_string()),
    ];
    Ok(DistPartition {
        mpirun: opts.launch.mpirun.clone(),
        dglrun: dglrun.display().to_string(),
        program,
        if_include: opts.launch.mpi_if_include.clone(),
        own_ip: opts.runtime.listen.filter(|ip| !ip.is_unspecified()),
        env: env.map(|(k, v)| (k.to_string(), v)).to_vec(),
        marker: opts.partitioned_marker(),
        stop_grace: opts.stop_grace(),
    })
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
    let token = token(opts)?;
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
