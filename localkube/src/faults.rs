//! Faults for chaos tests: a component restarted exactly as it was started,
//! or paused (SIGSTOP) for a while, as a crash, an upgrade or a stalled disk
//! would do to a real cluster.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::handle::{blocking, LocalCluster};
use crate::process::{self, PidRecord, ProcSpec};
use crate::settings::{NodePorts, KUBELET};
use crate::settings::{APISERVER, ETCD};

/// A component a chaos test may restart or pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Etcd,
    Apiserver,
    Kubelet,
}

impl Component {
    fn name(self) -> &'static str {
        match self {
            Component::Etcd => ETCD,
            Component::Apiserver => APISERVER,
            Component::Kubelet => KUBELET,
        }
    }
}

/// `/proc/<pid>/<file>` split at NUL bytes.
fn proc_list(pid: i32, file: &str) -> Result<Vec<String>> {
    let path = PathBuf::from(format!("/proc/{pid}/{file}"));
    let raw = std::fs::read(&path).map_err(Error::io("reading", &path))?;
    Ok(raw
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect())
}

impl LocalCluster {
    fn running(&self, c: Component) -> Result<PidRecord> {
        process::read_pid(&self.run_dir(), c.name())
            .filter(process::is_running)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{} of cluster {:?} is not running",
                    c.name(),
                    self.config().name
                ))
            })
    }

    /// Stops `c` (SIGTERM, SIGKILL after 10 s) and starts it again with the
    /// same command line and environment; returns once it serves again and
    /// how long it was away.
    pub async fn restart_component(&self, c: Component) -> Result<Duration> {
        let rec = self.running(c)?;
        let args = proc_list(rec.pid, "cmdline")?.into_iter().skip(1).collect();
        let env = proc_list(rec.pid, "environ")?
            .into_iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.into(), v.into())))
            .collect();
        let spec = ProcSpec {
            name: c.name(),
            binary: rec.binary.clone(),
            args,
            env,
        };
        let started = Instant::now();
        let stopped = rec.clone();
        blocking(move || process::stop(&stopped, Duration::from_secs(10))).await?;
        let rec = process::spawn(&self.run_dir(), &self.log_dir(), &spec)?;
        self.wait_serving(c, &rec).await?;
        Ok(started.elapsed())
    }

    /// Freezes `c` with SIGSTOP for `pause`, then lets it go on (SIGCONT).
    pub async fn pause_component(&self, c: Component, pause: Duration) -> Result<()> {
        let rec = self.running(c)?;
        process::signal(&rec, libc::SIGSTOP)?;
        tokio::time::sleep(pause).await;
        process::signal(&rec, libc::SIGCONT)?;
        self.wait_serving(c, &rec).await
    }

    async fn wait_serving(&self, c: Component, rec: &PidRecord) -> Result<()> {
        let timeout = Duration::from_secs(120);
        match c {
            Component::Etcd => {
                let port = self.config().ports.etcd_client;
                self.wait_for(ETCD, rec, timeout, || crate::cluster::etcd_healthy(port))
                    .await
            }
            Component::Apiserver => {
                let client =
                    crate::cluster::health_client(&self.server(), Some(&self.kubeconfig_path()))
                        .await?;
                self.wait_for(APISERVER, rec, timeout, || crate::cluster::readyz(&client))
                    .await
            }
            Component::Kubelet => {
                let port = NodePorts::for_ports(&self.config().ports).kubelet_healthz;
                self.wait_for(KUBELET, rec, timeout, || async move {
                    let probe = crate::util::http_get(port, "/healthz");
                    matches!(
                        tokio::time::timeout(Duration::from_secs(3), probe).await,
                        Ok(Ok((200, _)))
                    )
                })
                .await
            }
        }
    }
}
