//! [`LocalCluster`], the handle on one named cluster: its state paths, the
//! recorded processes and the waits that the control plane (`cluster`) and
//! the node tier (`node`) both use. Imports neither of them.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::pki::PkiFiles;
use crate::process::{self, PidRecord};
use crate::settings::{ClusterConfig, NodeConfig};
use crate::util;

/// Handle on a named local cluster (running or not).
#[derive(Debug, Clone)]
pub struct LocalCluster {
    pub(crate) cfg: ClusterConfig,
    pub(crate) state_dir: PathBuf,
}

impl LocalCluster {
    pub fn new(cfg: ClusterConfig) -> Result<LocalCluster> {
        util::validate_name(&cfg.name)?;
        let state_dir = cfg.cache_dir.join("cluster").join(&cfg.name);
        Ok(LocalCluster { cfg, state_dir })
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.cfg
    }
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.state_dir.join("kubeconfig")
    }
    /// Directory with one `<component>.log` per process.
    pub fn log_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }
    pub(crate) fn run_dir(&self) -> PathBuf {
        self.state_dir.join("run")
    }
    pub(crate) fn etcd_dir(&self) -> PathBuf {
        self.state_dir.join("etcd")
    }
    pub(crate) fn state_file(&self) -> PathBuf {
        self.state_dir.join("cluster.json")
    }
    pub(crate) fn pki(&self) -> PkiFiles {
        PkiFiles {
            dir: self.state_dir.join("pki"),
        }
    }
    pub(crate) fn server(&self) -> String {
        self.server_for(self.cfg.node.as_ref())
    }
    /// A node cluster's apiserver serves on the node IP only (see `node.rs`).
    pub(crate) fn server_for(&self, node: Option<&NodeConfig>) -> String {
        let host = node.map(|n| n.node_ip.as_str()).unwrap_or("127.0.0.1");
        format!("https://{host}:{}", self.cfg.ports.apiserver)
    }

    /// Is the recorded process alive (and, if given, running that binary)?
    pub(crate) fn component_running(&self, name: &str, binary: Option<&Path>) -> bool {
        let Some(rec) = process::read_pid(&self.run_dir(), name) else {
            return false;
        };
        let same_binary = binary
            .map(|b| {
                std::fs::canonicalize(b)
                    .map(|b| b == rec.binary)
                    .unwrap_or(false)
            })
            .unwrap_or(true);
        same_binary && process::is_running(&rec)
    }

    /// Polls `check` until it succeeds, failing early (with the log tail) if
    /// the process exits, and with a timeout naming the log otherwise.
    pub(crate) async fn wait_for<F, Fut>(
        &self,
        name: &'static str,
        rec: &PidRecord,
        timeout: Duration,
        check: F,
    ) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        self.wait_for_in(&self.log_dir(), name, rec, timeout, check)
            .await
    }

    /// [`Self::wait_for`] for a process that logs to `log_dir` (a node
    /// beyond the first logs to a folder of its own).
    pub(crate) async fn wait_for_in<F, Fut>(
        &self,
        log_dir: &Path,
        name: &'static str,
        rec: &PidRecord,
        timeout: Duration,
        mut check: F,
    ) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        let log = process::log_file(log_dir, name);
        loop {
            if check().await {
                return Ok(());
            }
            if !process::is_running(rec) {
                return Err(Error::ComponentExited {
                    component: name,
                    status: format!("pid {} is gone", rec.pid),
                    tail: util::tail(&log, 25),
                    log,
                });
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("{name} of cluster {:?} to become ready", self.cfg.name),
                    seconds: timeout.as_secs(),
                    hint: Some(format!("see {}", log.display())),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Runs blocking work (flock, process spawning, go builds) off the async executor.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Invalid(format!("background task failed: {e}")))?
}
