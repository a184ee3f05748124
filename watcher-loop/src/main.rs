//! `watcher-loop` binary: flags and env in, exit code out. The work is in the lib.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use dgl_api::logging::{self, LogFormat, Output};
use dgl_api::names::{
    ENV_WATCHER_CONFIG_DIR, ENV_WATCHER_CONFIG_MAP, ENV_WATCHER_FILE, ENV_WATCHER_MODE,
    ENV_WATCHER_NAMESPACE, ENV_WATCHER_RUN, ENV_WATCHER_TIMEOUT,
};
use kube::Client;
use tokio::time::Instant;
use watcher_loop::{
    format_duration, parse_duration, resolve_namespace, Mode, Options, Targets, EXIT_API,
    EXIT_USAGE, SERVICE_ACCOUNT_NAMESPACE_FILE,
};

/// Where Kubernetes reads a container's termination message by default.
const TERMINATION_LOG: &str = "/dev/termination-log";

/// Waits until pods are Ready or Succeeded, watching them through the
/// Kubernetes API (no polling, no kubectl).
///
/// Exits 0 once every pod is Ready (`--mode ready`: condition Ready=True) or
/// Succeeded (`--mode finished`). Exits non-zero at once, naming the pod, when
/// a watched pod fails (phase Failed; or a container exited non-zero under
/// restartPolicy Never; or, in ready mode, the pod completed without being
/// Ready) or is deleted. A pod that does not exist yet is waited for.
///
/// With a file listing one job's workers (<job>-worker-<i>), they are
/// watched together, by the labels the operator gives them (one watch
/// however many workers); if the Role does not allow that (list/watch on
/// pods without resourceNames), and for other files, each pod is watched
/// with the field selector metadata.name=<pod>, so a Role granting
/// get/list/watch on pods restricted by resourceNames to those pods is
/// enough.
///
/// With --config-map it first waits until that ConfigMap's key `run` equals
/// --run (the operator has written this run's launch, with every worker's
/// IP), writes each of its keys as a file into --write-config, and only then
/// reads --file (typically <DIR>/hostfile, just written) and waits for the
/// pods. --timeout covers both waits.
#[derive(Debug, Parser)]
#[command(
    name = "watcher-loop",
    version,
    about = "Waits until pods are Ready or Succeeded; fails at once when one fails or is deleted",
    after_help = "Exit codes: 0 all pods ready/finished; 1 a pod failed or was deleted, or \
the --config-map ConfigMap was deleted; 2 bad arguments or pod file; 3 timeout (waiting \
for the pods or for the ConfigMap's run); 4 the API refused the watch (RBAC, bad selector) \
or no client could be built; 5 the ConfigMap's files could not be written (a key that is \
not a file name, a missing or read-only folder); 143 / 130 stopped by SIGTERM / SIGINT \
(a deleted pod), at once.\n\
Logs go to stderr (RUST_LOG sets the filter, default info); the final error is also \
written to /dev/termination-log when that file exists (as in a container)."
)]
struct Cli {
    /// File listing the pods to wait for: the operator's hostfile/partfile
    /// format (`<ip> <port> <pod> [slots=<n>]`, pod name in the third field),
    /// or one pod name per line. Blank lines and `#` comments are skipped.
    /// Use either this or --selector.
    #[arg(long, env = ENV_WATCHER_FILE, value_name = "PATH")]
    file: Option<PathBuf>,

    /// What the pods must reach: `ready` (condition Ready=True) or
    /// `finished` (phase Succeeded).
    #[arg(long, env = ENV_WATCHER_MODE, value_name = "ready|finished")]
    mode: Mode,

    /// Wait for the pods matching this label selector (e.g.
    /// `dgloperator.io/job-name=j,dgloperator.io/replica-type=worker`) instead
    /// of a file; one watch, which needs list/watch on pods without
    /// resourceNames.
    #[arg(long, value_name = "SELECTOR")]
    selector: Option<String>,

    /// With --selector: how many matching pods must exist before the wait can
    /// succeed.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "selector")]
    min_pods: usize,

    /// Namespace of the pods. Default: env NAMESPACE, then env
    /// DGL_OPERATOR_NAMESPACE, then the pod's ServiceAccount namespace file.
    #[arg(long, env = ENV_WATCHER_NAMESPACE, value_name = "NAMESPACE")]
    namespace: Option<String>,

    /// Give up after this long (e.g. `90s`, `10m`, `1h30m`), exiting 3 with
    /// the pods still waited for and where each stands. `0` or unset: no
    /// limit; capped at 1 year.
    #[arg(long, env = ENV_WATCHER_TIMEOUT, value_name = "DURATION", value_parser = parse_duration)]
    timeout: Option<Duration>,

    /// Before the pods: wait until this ConfigMap (the job's `<job>-config`)
    /// holds key `run` = --run, then write its keys as files into
    /// --write-config and only then read --file. Read through the API, not a
    /// volume (a ConfigMap volume lags up to a minute): needs get/list/watch
    /// on configmaps (resourceNames: [NAME] is enough). A ConfigMap that does
    /// not exist yet is waited for; one deleted while waited for exits 1.
    #[arg(
        long,
        env = ENV_WATCHER_CONFIG_MAP,
        value_name = "NAME",
        requires_all = ["run", "write_config"]
    )]
    config_map: Option<String>,

    /// With --config-map: the run (0, then +1 per restart) to wait for. The
    /// ConfigMap's key `run` must equal it exactly; an earlier run's content
    /// is waited past.
    #[arg(long, env = ENV_WATCHER_RUN, value_name = "N", requires = "config_map")]
    run: Option<u32>,

    /// With --config-map: the existing folder to write the ConfigMap's keys
    /// into, one file `DIR/<key>` each (mode 0644, written to a temporary
    /// file and renamed, so a reader never sees half a file). Keys that are
    /// not plain file names are refused.
    #[arg(
        long = "write-config",
        env = ENV_WATCHER_CONFIG_DIR,
        value_name = "DIR",
        requires = "config_map"
    )]
    write_config: Option<PathBuf>,

    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    log_format: LogFormat,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_format, "info", Output::Stderr);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&anyhow::Error::new(e).context("starting the async runtime")),
    };
    match runtime.block_on(until_signal(run(cli))) {
        Ok(Ended::Done) => ExitCode::SUCCESS,
        Ok(Ended::Signal(name, number)) => {
            tracing::info!(signal = name, "{name}: stopping the wait");
            ExitCode::from(128 + number)
        }
        Err(e) => fail(&e),
    }
}

/// How the wait ended, when it did not fail.
enum Ended {
    Done,
    /// A signal asked it to stop: its name and number (exit 128 + number).
    Signal(&'static str, u8),
}

/// Runs the wait until SIGTERM or SIGINT. In a container watcher-loop is
/// PID 1, which the kernel shields from signals it has no handler for: without
/// this a deleted or suspended pod would wait out its whole grace period.
async fn until_signal(wait: impl std::future::Future<Output = Result<()>>) -> Result<Ended> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        r = wait => r.map(|()| Ended::Done),
        _ = term.recv() => Ok(Ended::Signal("SIGTERM", 15)),
        _ = int.recv() => Ok(Ended::Signal("SIGINT", 2)),
    }
}

async fn run(cli: Cli) -> Result<()> {
    let source = PodSource::of(&cli)?;
    // Without a ConfigMap the pod file is read first, as it always was; with
    // one it is read after the ConfigMap's files are written (it is one).
    let early = cli
        .config_map
        .is_none()
        .then(|| source.load())
        .transpose()?;
    let operator_ns = std::env::var(dgl_api::names::ENV_NAMESPACE).ok();
    let namespace = resolve_namespace(
        cli.namespace.as_deref(),
        operator_ns.as_deref(),
        SERVICE_ACCOUNT_NAMESPACE_FILE.as_ref(),
    )?;
    let timeout = cli.timeout.filter(|t| !t.is_zero());
    let client = kube::Client::try_default().await.context(
        "cannot build a Kubernetes client (from KUBECONFIG / ~/.kube/config or the in-cluster service account)",
    )?;
    let options = Options {
        timeout,
        since: Some(Instant::now()),
        ..Options::default()
    };
    if let Some(name) = &cli.config_map {
        fetch_config(&cli, client.clone(), &namespace, name, options).await?;
    }
    let targets = match early {
        Some(targets) => targets,
        None => source.load()?,
    };
    let outcome = watcher_loop::run_with(client, &namespace, &targets, cli.mode, options).await?;
    tracing::info!(
        pods = outcome.pods.len(),
        elapsed = %format_duration(outcome.elapsed),
        "done: every pod is {}",
        outcome.mode
    );
    Ok(())
}

/// Where the pods to wait for come from.
enum PodSource<'a> {
    File(&'a Path),
    Selector(&'a str, usize),
}

impl<'a> PodSource<'a> {
    fn of(cli: &'a Cli) -> Result<Self> {
        match (&cli.file, &cli.selector) {
            (Some(_), Some(_)) => Err(usage(
                "give either --file (or WATCHERFILE) or --selector, not both",
            )),
            (None, None) => Err(usage(
                "no pods to wait for: give --file (or set WATCHERFILE) or --selector",
            )),
            (Some(path), None) => Ok(PodSource::File(path)),
            (None, Some(selector)) => Ok(PodSource::Selector(selector, cli.min_pods)),
        }
    }

    fn load(&self) -> Result<Targets, watcher_loop::Error> {
        match *self {
            PodSource::File(path) => Targets::from_file(path),
            PodSource::Selector(selector, min_pods) => Targets::selector(selector, min_pods),
        }
    }
}

/// The ConfigMap step: waits for this run's launch, writes its files.
async fn fetch_config(
    cli: &Cli,
    client: Client,
    namespace: &str,
    name: &str,
    options: Options,
) -> Result<()> {
    // clap's `requires_all` guarantees both.
    let (Some(run), Some(dir)) = (cli.run, &cli.write_config) else {
        return Err(usage("--config-map needs --run and --write-config"));
    };
    let data = watcher_loop::wait_config_map(client, namespace, name, run, options).await?;
    let written = watcher_loop::write_config(dir, &data)?;
    let files: Vec<_> = written
        .iter()
        .filter_map(|p| p.file_name())
        .map(|f| f.to_string_lossy())
        .collect();
    tracing::info!(
        config_map = name,
        run,
        dir = %dir.display(),
        files = %files.join(","),
        "wrote {} files of ConfigMap {name} into {}",
        files.len(),
        dir.display(),
    );
    Ok(())
}

fn usage(message: &str) -> anyhow::Error {
    anyhow::Error::new(watcher_loop::Error::InvalidTargets(message.to_string()))
}

/// Reports the error and maps it to the exit code.
fn fail(e: &anyhow::Error) -> ExitCode {
    let code = e
        .downcast_ref::<watcher_loop::Error>()
        .map(watcher_loop::Error::exit_code)
        .unwrap_or(EXIT_API);
    let message = render_chain(e);
    tracing::error!(exit_code = code, "{message}");
    if std::path::Path::new(TERMINATION_LOG).exists() {
        // Best effort: the kubelet copies this into the container's status.
        let _ = std::fs::write(TERMINATION_LOG, format!("watcher-loop: {message}\n"));
    }
    ExitCode::from(u8::try_from(code).unwrap_or(EXIT_USAGE as u8))
}

/// The error and its causes, `: `-joined, skipping causes whose text is
/// already shown (kube's errors repeat their source in their own message).
fn render_chain(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent_and_documents_every_flag() {
        Cli::command().debug_assert();
        let help = Cli::command().render_long_help().to_string();
        for flag in [
            "--file",
            "--mode",
            "--selector",
            "--min-pods",
            "--namespace",
            "--timeout",
            "--log-format",
            "--config-map",
            "--run",
            "--write-config",
            "WATCHERFILE",
            "WATCHERMODE",
            "NAMESPACE",
            "WATCHERTIMEOUT",
            "WATCHERCONFIGMAP",
            "WATCHERRUN",
            "WATCHERCONFIGDIR",
            "Exit codes",
            "5 the ConfigMap's files",
        ] {
            assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
        }
    }

    #[test]
    fn error_chain_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(io)
            .context("reading /x: no such file")
            .context("starting");
        assert_eq!(render_chain(&e), "starting: reading /x: no such file");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(render_chain(&e), "outer: inner");
    }

    #[test]
    fn parses_flags() {
        let cli = Cli::try_parse_from([
            "watcher-loop",
            "--file",
            "/etc/dgl/hostfile",
            "--mode",
            "finished",
            "--timeout",
            "10m",
            "--log-format",
            "json",
            "--namespace",
            "ns",
        ])
        .unwrap();
        assert_eq!(cli.mode, Mode::Finished);
        assert_eq!(cli.timeout, Some(Duration::from_secs(600)));
        assert_eq!(cli.log_format, LogFormat::Json);
        assert_eq!(cli.namespace.as_deref(), Some("ns"));
        let e = Cli::try_parse_from(["watcher-loop", "--mode", "done"]).unwrap_err();
        assert!(e.to_string().contains("`ready` or `finished`"), "{e}");
        let e = Cli::try_parse_from(["watcher-loop", "--mode", "ready", "--timeout", "10"])
            .map(|c| c.timeout);
        assert_eq!(e.unwrap(), Some(Duration::from_secs(10)));
        assert!(
            Cli::try_parse_from(["watcher-loop", "--mode", "ready", "--timeout", "ten"]).is_err()
        );
        assert!(
            Cli::try_parse_from(["watcher-loop", "--mode", "ready", "--min-pods", "2"]).is_err()
        );
    }

    #[test]
    fn config_map_flags_require_each_other() {
        let base = [
            "watcher-loop",
            "--mode",
            "ready",
            "--file",
            "/etc/dgl/hostfile",
        ];
        let parse = |extra: &[&str]| Cli::try_parse_from(base.iter().chain(extra));
        let cli = parse(&[
            "--config-map",
            "j-config",
            "--run",
            "1",
            "--write-config",
            "/etc/dgl",
        ])
        .unwrap();
        assert_eq!(cli.config_map.as_deref(), Some("j-config"));
        assert_eq!(cli.run, Some(1));
        assert_eq!(cli.write_config, Some(PathBuf::from("/etc/dgl")));
        let none = parse(&[]).unwrap();
        assert_eq!(
            (none.config_map, none.run, none.write_config),
            (None, None, None)
        );
        for (args, missing) in [
            (
                &["--config-map", "j-config", "--run", "1"][..],
                "--write-config",
            ),
            (
                &["--config-map", "j-config", "--write-config", "/d"][..],
                "--run",
            ),
            (&["--run", "1"][..], "--config-map"),
            (&["--write-config", "/d"][..], "--config-map"),
        ] {
            let e = parse(args).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::MissingRequiredArgument,
                "{args:?}: {e}"
            );
            assert!(e.to_string().contains(missing), "{args:?}: {e}");
        }
        let e = parse(&["--config-map", "c", "--run=-1", "--write-config", "/d"]).unwrap_err();
        assert!(e.to_string().contains("--run"), "{e}");
    }

    proptest::proptest! {
        /// --timeout (and WATCHER_TIMEOUT, read by the same parser) of any
        /// text or any number of any unit: a duration within the cap or a
        /// usage error, and a deadline from it, never a panic.
        #[test]
        fn any_timeout_gives_a_deadline_or_an_error(
            text in "\\PC{0,24}",
            n in proptest::prelude::any::<u64>(),
            unit in "(ms|s|m|h|d)?",
        ) {
            for value in [text, format!("{n}{unit}")] {
                let args = ["watcher-loop", "--mode", "ready", "--timeout", &value];
                if let Ok(cli) = Cli::try_parse_from(args) {
                    let t = cli.timeout.unwrap_or_default();
                    proptest::prop_assert!(t <= dgl_api::duration::MAX);
                    let options = Options { timeout: Some(t), since: Some(Instant::now()), ..Options::default() };
                    proptest::prop_assert!(options.deadline(Instant::now()).is_some());
                }
            }
        }
    }

    #[test]
    fn every_duration_flag_states_its_cap() {
        let cmd = Cli::command();
        let timeout = cmd
            .get_arguments()
            .find(|a| a.get_id() == "timeout")
            .unwrap();
        let help = timeout.get_help().unwrap().to_string();
        assert!(help.contains(dgl_api::duration::CAP_HELP), "{help}");
    }
}
