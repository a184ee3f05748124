//! `dglrun rsh HOST CMD...`: mpirun's remote agent in partition mode
//! DistParMETIS, in place of ssh. mpirun (on the launcher) runs it once per
//! worker with the daemon's command line; it asks that worker's agent over
//! the authenticated channel to run the command (`Request::Exec`), relays
//! its output and exits with its status. Killing it (mpirun does, when it
//! ends or fails) closes the connection, and the worker stops the daemon.
//!
//! Like ssh, mpirun hands over words that a remote shell would join and
//! parse (it quotes some values: `-mca ess "env"`). No shell runs anywhere:
//! the words are joined and split with shell quoting rules here, and the
//! worker runs the resulting argument vector, and only if it is MPI's
//! daemon.
//!
//! [`mpirun_args`] builds the launcher's `mpirun` command line that uses it.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::Args;
use dgl_api::logging::{self, LogFormat, Output};
use dgl_api::names;
use dgl_api::wire::{ExecSpec, Request, Response, Stream, EXEC_PROGRAMS};

use crate::net::channel::{Channel, Token};
use crate::net::hosts::{self, Peer};

/// Status when dglrun rsh itself fails (as ssh does), so mpirun reports a
/// failed launch rather than a daemon's exit code.
pub const RSH_FAILED: u8 = 255;

/// `dglrun rsh`'s command line.
#[derive(Args, Debug, Clone)]
pub struct RshArgs {
    /// File holding the job's secret token.
    #[arg(long, env = names::ENV_TOKEN_FILE, value_name = "FILE",
          default_value_t = format!("{}/{}", names::SECRET_DIR, names::SECRET_TOKEN_KEY))]
    pub token_file: String,
    /// The launcher's run of the job, bound into the handshake: the worker
    /// refuses an older run's (mpirun passes it on from the launcher).
    #[arg(long, env = names::ENV_RUN, value_name = "N", default_value = "0")]
    pub run: dgl_api::wire::Run,
    /// Port of the workers' agents (when HOST is an IP the hostfile does not list).
    #[arg(long, env = "DGLRUN_AGENT_PORT", value_name = "PORT", default_value_t = names::AGENT_PORT)]
    pub agent_port: u16,
    /// Workers (the operator's hostfile) to map a HOST name to its agent
    /// [default: <config-dir>/hostfile, when it exists].
    #[arg(long, env = "DGLRUN_RSH_HOSTFILE", value_name = "FILE")]
    pub hostfile: Option<PathBuf>,
    /// Directory of the job's ConfigMap.
    #[arg(long, env = names::ENV_CONFIG_DIR, value_name = "DIR", default_value = names::CONFIG_DIR)]
    pub config_dir: PathBuf,
    /// Pass this variable of dglrun rsh's environment to the command (repeat
    /// for several).
    #[arg(long = "env", value_name = "NAME")]
    pub env: Vec<String>,
    /// Seconds to wait for the worker's agent to accept the connection
    /// (capped at 1 year).
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = dgl_api::duration::parse_secs)]
    pub connect_timeout: u64,
    /// The worker: its IP, or its pod name as the hostfile lists it.
    #[arg(value_name = "HOST")]
    pub host: String,
    /// The command, as words a remote shell would join and parse.
    #[arg(
        value_name = "CMD",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<String>,
}

/// The agent of `host`: an IP (the hostfile's port for it when listed), or
/// a pod name from the hostfile (also as the first label of a DNS name).
pub fn resolve(host: &str, peers: &[Peer], default_port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return Ok(peers
            .iter()
            .find(|p| p.ip == ip)
            .map(|p| p.agent)
            .unwrap_or(SocketAddr::new(ip, default_port)));
    }
    let short = host.split('.').next().unwrap_or(host);
    peers
        .iter()
        .find(|p| {
            p.pod
                .as_deref()
                .is_some_and(|pod| pod == host || pod == short)
        })
        .map(|p| p.agent)
        .ok_or_else(|| {
            if peers.is_empty() {
                format!("{host:?} is not an IP address and there is no hostfile to look it up in")
            } else {
                format!("{host:?} is not an IP address nor a worker pod of the hostfile")
            }
        })
}

/// Turns mpirun's words into the argument vector a remote shell would run,
/// and checks that it is MPI's daemon.
pub fn command_argv(words: &[String], env: BTreeMap<String, String>) -> Result<ExecSpec, String> {
    let line = words.join(" ");
    let mut argv = shlex::split(&line)
        .ok_or_else(|| format!("cannot parse the command (unbalanced quotes): {line}"))?;
    if argv.is_empty() {
        return Err("no command given".into());
    }
    let program = argv.remove(0);
    let spec = ExecSpec {
        program,
        args: argv,
        env,
    };
    if spec.allowed_program().is_none() {
        return Err(format!(
            "dglrun rsh only starts MPI's daemon ({}) on a worker; got {:?}. \
             mpirun must run with --mca plm_rsh_no_tree_spawn 1 and without --prefix",
            EXEC_PROGRAMS.join(" or "),
            spec.program
        ));
    }
    Ok(spec)
}

fn peers(args: &RshArgs) -> anyhow::Result<Vec<Peer>> {
    let (file, required) = match &args.hostfile {
        Some(f) => (f.clone(), true),
        None => (args.config_dir.join(names::HOSTFILE), false),
    };
    match std::fs::read_to_string(&file) {
        Ok(text) => Ok(hosts::parse_hostfile(
            &file.display().to_string(),
            &text,
            args.agent_port,
        )?),
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(anyhow!("cannot read {}: {e}", file.display())),
    }
}

/// Runs the command on the worker; returns its shell status.
pub async fn run(args: &RshArgs) -> anyhow::Result<i32> {
    let mut env = BTreeMap::new();
    for name in &args.env {
        let value = std::env::var(name)
            .with_context(|| format!("--env {name}: not set in dglrun rsh's environment"))?;
        env.insert(name.clone(), value);
    }
    let spec = command_argv(&args.command, env).map_err(|e| anyhow!(e))?;
    let agent = resolve(&args.host, &peers(args)?, args.agent_port).map_err(|e| anyhow!(e))?;
    let token = Token::from_file(Path::new(&args.token_file))?.with_run(args.run);
    let timeout = dgl_api::duration::secs(args.connect_timeout);
    let mut ch = Channel::connect(agent, &token, timeout)
        .await
        .with_context(|| format!("cannot reach the agent of {} at {agent}", args.host))?;
    ch.send(&Request::Exec(spec)).await?;
    relay(&mut ch, agent).await
}

async fn relay(ch: &mut Channel, agent: SocketAddr) -> anyhow::Result<i32> {
    use std::io::Write;
    loop {
        match ch.recv::<Response>().await? {
            Some(Response::Output(l)) => {
                // A closed pipe (mpirun gone) must not end the relay early:
                // the daemon's status still decides ours.
                let _ = match l.stream {
                    Stream::Stdout => writeln!(std::io::stdout(), "{}", l.line),
                    Stream::Stderr => writeln!(std::io::stderr(), "{}", l.line),
                };
            }
            Some(Response::Exited(e)) => return Ok(e.exit.as_shell_status()),
            Some(Response::Error { message }) => bail!("the agent at {agent} refused: {message}"),
            Some(other) => bail!("unexpected answer from the agent at {agent}: {other:?}"),
            None => bail!("the agent at {agent} closed the connection before the command ended"),
        }
    }
}

/// The `dglrun rsh` subcommand: its own small runtime; dglrun's messages go
/// to stderr (warnings only), stdout carries the command's output alone.
pub fn main(args: RshArgs) -> ExitCode {
    logging::init(LogFormat::Text, "warn", Output::Stderr);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dglrun rsh: cannot start the async runtime: {e}");
            return ExitCode::from(RSH_FAILED);
        }
    };
    match rt.block_on(run(&args)) {
        Ok(status) => ExitCode::from(u8::try_from(status).unwrap_or(RSH_FAILED)),
        Err(e) => {
            eprintln!("dglrun rsh {}: {e:#}", args.host);
            ExitCode::from(RSH_FAILED)
        }
    }
}

/// What the launcher's `mpirun` needs to start one rank per worker.
#[derive(Debug, Clone)]
pub struct MpirunPlan {
    /// The workers' IPs in partition order: rank i runs on worker i.
    pub hosts: Vec<IpAddr>,
    /// The dglrun binary mpirun calls as its remote agent (`<it> rsh`).
    pub dglrun: String,
    /// Network for MPI's control and data traffic: a CIDR (`10.0.0.0/8`)
    /// or an interface name; `None` lets OpenMPI choose.
    pub network: Option<String>,
    /// The ranks' working directory (must exist on every worker).
    pub workdir: PathBuf,
    /// Variables of the launcher's environment passed to the ranks.
    pub forward_env: Vec<String>,
    /// The rank program and its arguments.
    pub program: Vec<String>,
}

/// mpirun's arguments (OpenMPI 4) for `plan`: daemons started only by
/// mpirun itself through `dglrun rsh` (no tree spawn: workers have no
/// hostfile), kept attached to their agent session (no `--daemonize`, so
/// the worker supervises them), TCP only (as between pods: no shared
/// memory, UCX or InfiniBand probing), no CPU binding (containers).
pub fn mpirun_args(plan: &MpirunPlan) -> Vec<String> {
    let hosts: Vec<String> = plan.hosts.iter().map(|ip| format!("{ip}:1")).collect();
    let mut a: Vec<String> = vec![
        "--allow-run-as-root".into(),
        "-n".into(),
        plan.hosts.len().to_string(),
        "--host".into(),
        hosts.join(","),
        "--wdir".into(),
        plan.workdir.display().to_string(),
        "--bind-to".into(),
        "none".into(),
    ];
    let mut mca = |k: &str, v: &str| a.extend(["--mca".into(), k.into(), v.into()]);
    mca("plm", "rsh");
    mca("plm_rsh_agent", &format!("{} rsh", plan.dglrun));
    mca("plm_rsh_no_tree_spawn", "1");
    mca("orte_leave_session_attached", "1");
    mca("pml", "ob1");
    mca("btl", "tcp,self");
    if let Some(net) = &plan.network {
        mca("oob_tcp_if_include", net);
        mca("btl_tcp_if_include", net);
    }
    for name in &plan.forward_env {
        a.extend(["-x".into(), name.clone()]);
    }
    a.extend(plan.program.iter().cloned());
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn mpiruns_quoted_words_become_the_daemons_argv() {
        // As OpenMPI 4.1 calls its agent (leading space and quotes included).
        let w = words(&[
            " orted",
            "-mca",
            "ess",
            "\"env\"",
            "-mca",
            "orte_hnp_uri",
            "\"715522048.0;tcp://10.0.0.1:50669;tcp6://[fd00::2]:49053\"",
            "-mca",
            "plm_rsh_agent",
            "\"/usr/bin/dglrun rsh\"",
        ]);
        let spec = command_argv(&w, BTreeMap::new()).unwrap();
        assert_eq!(spec.program, "orted");
        assert_eq!(
            spec.args,
            [
                "-mca",
                "ess",
                "env",
                "-mca",
                "orte_hnp_uri",
                "715522048.0;tcp://10.0.0.1:50669;tcp6://[fd00::2]:49053",
                "-mca",
                "plm_rsh_agent",
                "/usr/bin/dglrun rsh"
            ]
        );
    }

    #[test]
    fn anything_but_the_daemon_is_refused() {
        for bad in [
            &["sh", "-c", "'id'"][..],
            &["PATH=/opt/bin:$PATH", ";", "export", "PATH", ";", "orted"],
            &["orted", "\"unbalanced"],
        ] {
            let e = command_argv(&words(bad), BTreeMap::new()).unwrap_err();
            assert!(e.contains("orted"), "{e}");
        }
    }

    #[test]
    fn hosts_map_to_agents() {
        let peers = hosts::parse_hostfile(
            "hostfile",
            "10.0.0.5 30049 job-worker-0\n10.0.0.6 31000 job-worker-1\n",
            30049,
        )
        .unwrap();
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(resolve("10.0.0.6", &peers, 1), Ok(at("10.0.0.6:31000")));
        assert_eq!(resolve("10.0.0.9", &peers, 1), Ok(at("10.0.0.9:1")));
        assert_eq!(resolve("job-worker-1", &peers, 1), Ok(at("10.0.0.6:31000")));
        assert_eq!(
            resolve("job-worker-0.job-worker.ns.svc", &peers, 1),
            Ok(at("10.0.0.5:30049"))
        );
        assert_eq!(resolve("fd00::7", &[], 5), Ok(at("[fd00::7]:5")));
        assert!(resolve("job-worker-2", &peers, 1)
            .unwrap_err()
            .contains("hostfile"));
        assert!(resolve("node", &[], 1).unwrap_err().contains("no hostfile"));
    }

    #[test]
    fn mpirun_uses_dglrun_rsh_and_tcp_only() {
        let plan = MpirunPlan {
            hosts: vec!["10.0.0.5".parse().unwrap(), "10.0.0.6".parse().unwrap()],
            dglrun: "/usr/local/bin/dglrun".into(),
            network: Some("10.0.0.0/24".into()),
            workdir: "/dgl_workspace".into(),
            forward_env: vec!["RUST_LOG".into()],
            program: words(&["dgl-partition", "selftest"]),
        };
        let a = mpirun_args(&plan).join(" ");
        for want in [
            "-n 2 --host 10.0.0.5:1,10.0.0.6:1",
            "--mca plm_rsh_agent /usr/local/bin/dglrun rsh",
            "--mca plm_rsh_no_tree_spawn 1",
            "--mca orte_leave_session_attached 1",
            "--mca btl tcp,self",
            "--mca oob_tcp_if_include 10.0.0.0/24 --mca btl_tcp_if_include 10.0.0.0/24",
            "-x RUST_LOG dgl-partition selftest",
        ] {
            assert!(a.contains(want), "{want:?} missing in {a}");
        }
        assert!(a.ends_with("dgl-partition selftest"));
    }
}
