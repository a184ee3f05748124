//! The pipeline's errors. Every error about the input names the file and the
//! line (or chunk and row) and says what was expected.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file failed. The cause is in the message, not
    /// a chained source, so that `{:#}` does not print it twice.
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// The input is malformed. `at` is "line N", "row N of chunk K", a JSON
    /// key, or empty when the whole file is meant.
    #[error("{path}{}: {message}", if at.is_empty() { String::new() } else { format!(", {at}") })]
    Input {
        path: PathBuf,
        at: String,
        message: String,
    },
    /// The options contradict each other or the input (e.g. num_parts).
    #[error("{0}")]
    Config(String),
    /// A stage failed for a reason that is not the input's fault.
    #[error("{stage}: {message}")]
    Stage {
        stage: &'static str,
        message: String,
    },
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            cause: source,
        }
    }

    pub fn input(
        path: impl Into<PathBuf>,
        at: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::Input {
            path: path.into(),
            at: at.into(),
            message: message.into(),
        }
    }
}
