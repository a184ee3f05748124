//! One error type for the crate. Every variant names the file, port, command or
//! component involved, because the person reading it is usually looking at a
//! failed test run and needs to know where to look next.
use std::path::PathBuf;

/// Result alias used throughout localkube.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot determine the cache directory: set DGL_OPERATOR_CACHE or HOME")]
    NoCacheDir,

    #[error(
        "invalid cluster name {name:?}: use 1-40 characters from [a-z0-9-], starting with a letter"
    )]
    InvalidName { name: String },

    #[error("could not run `{program}`: {source} (is it installed and on PATH?)")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },

    #[error("`{command}` failed ({status}); full log: {log}\n--- last lines ---\n{tail}")]
    CommandFailed {
        command: String,
        status: String,
        log: PathBuf,
        tail: String,
    },

    #[error("unexpected output from Go tooling ({context}): {detail}")]
    GoMetadata { context: String, detail: String },

    #[error("binary {path} is missing; run `cargo xtask cluster build` (or delete the stamp file {stamp} to force a rebuild)")]
    MissingBinary { path: PathBuf, stamp: PathBuf },

    #[error("{path} --version printed {got:?}, expected it to contain {expected:?}")]
    VersionMismatch {
        path: PathBuf,
        got: String,
        expected: String,
    },

    #[error("port 127.0.0.1:{port} (needed by {component} of cluster {cluster:?}) is already in use by another process; stop that process or pick another cluster name")]
    PortBusy {
        port: u16,
        component: &'static str,
        cluster: String,
    },

    #[error(
        "{component} exited during startup ({status}); log: {log}\n--- last lines ---\n{tail}"
    )]
    ComponentExited {
        component: &'static str,
        status: String,
        log: PathBuf,
        tail: String,
    },

    #[error("timed out after {seconds}s waiting for {what}{}", hint.as_deref().map(|h| format!("; {h}")).unwrap_or_default())]
    Timeout {
        what: String,
        seconds: u64,
        hint: Option<String>,
    },

    #[error("state file {path} is malformed: {reason}; run `cargo xtask cluster down --purge --name <name>` to reset")]
    BadState { path: PathBuf, reason: String },

    #[error("process {pid} recorded in {pid_file} is {reason}")]
    Signal {
        pid: i32,
        pid_file: PathBuf,
        reason: String,
    },

    #[error("generating certificates: {0}")]
    Pki(#[from] rcgen::Error),

    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },

    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    #[error("YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),

    #[error("`{command}` failed ({status}): {output}")]
    HostCommand {
        command: String,
        status: String,
        output: String,
    },

    #[error("{what} needs root (it changes the host: packages, network interfaces, cgroups, iptables); run it as root or with sudo")]
    NotRoot { what: String },

    #[error("the host's node resources (interfaces {interfaces}, cgroup root, iptables) belong to cluster {owner:?} (state dir {state_dir}); only one node cluster can run per host: stop it with `cargo xtask cluster down --name {owner}`")]
    HostBusy {
        owner: String,
        state_dir: PathBuf,
        interfaces: String,
    },

    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// An unpack that lost a parent snapshot to containerd's garbage
    /// collector mid-import (containerd/containerd#3787): the GC may remove
    /// a snapshot the unpacker has just found to exist when the image that
    /// held it was replaced. A second import unpacks it afresh.
    pub fn is_unpack_race(&self) -> bool {
        matches!(self, Error::HostCommand { output, .. }
            if output.contains("parent snapshot") && output.contains("does not exist"))
    }

    /// Shorthand for `map_err` on filesystem calls: records what we were doing and on which path.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    fn ctr_failed(output: &str) -> Error {
        Error::HostCommand {
            command: "ctr images import -".into(),
            status: "exit status: 1".into(),
            output: output.into(),
        }
    }

    #[test]
    fn only_a_lost_parent_snapshot_is_an_unpack_race() {
        // What the CI run of stop 40 printed.
        assert!(ctr_failed(
            "ctr: failed to prepare extraction snapshot \"extract-977911214-c-6Y sha256:95b3\": \
             parent snapshot sha256:97c2 does not exist: not found"
        )
        .is_unpack_race());
        assert!(!ctr_failed("ctr: write /var/lib: no space left on device").is_unpack_race());
        assert!(!Error::Invalid("parent snapshot x does not exist".into()).is_unpack_race());
    }
}
