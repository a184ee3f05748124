//! `dglrun`: the binary edge. Parses the command line, sets up logging and
//! the runtime, runs the role (`dglrun::roles`) and turns its outcome into
//! the exit status.

use std::process::ExitCode;

use clap::Parser;
use dgl_api::logging::{self, LogFormat, Output};
use dgl_api::names;
use dglrun::cli::{self, Cli, Command, Role};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (role, opts, probe) = match cli.command {
        Some(Command::Partition(o)) => (Role::Partitioner, o, None),
        Some(Command::Launch(o)) => (Role::Launcher, o, None),
        Some(Command::Worker(o)) => (Role::Worker, o, None),
        Some(Command::Probe(p)) => (Role::Probe, p.opts.clone(), Some(p)),
        Some(Command::Rsh(a)) => return dglrun::mpi::rsh::main(a),
        Some(Command::RankGuard(a)) => return dglrun::roles::distpart::guard::main(a),
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
        match dglrun::roles::run(role, &opts, probe.as_ref()).await {
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
