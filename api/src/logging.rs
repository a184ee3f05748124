//! The one log setup of the binaries (feature `logging`): `RUST_LOG` sets
//! the filter, text or JSON lines, and colour codes only for a person at a
//! terminal: never in a pod's log (`kubectl logs`), nor with `NO_COLOR` set.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Where log lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Stdout,
    Stderr,
}

impl Output {
    fn is_terminal(self) -> bool {
        match self {
            Output::Stdout => std::io::stdout().is_terminal(),
            Output::Stderr => std::io::stderr().is_terminal(),
        }
    }
}

/// Whether to write colour codes to `output`.
pub fn colours(output: Output) -> bool {
    output.is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Installs the global subscriber; `default_filter` applies when `RUST_LOG`
/// is unset or invalid.
pub fn init(format: LogFormat, default_filter: &str, output: Output) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours(output));
    match (format, output) {
        (LogFormat::Text, Output::Stdout) => builder.init(),
        (LogFormat::Text, Output::Stderr) => builder.with_writer(std::io::stderr).init(),
        (LogFormat::Json, Output::Stdout) => builder.json().flatten_event(true).init(),
        (LogFormat::Json, Output::Stderr) => builder
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .init(),
    }
}
