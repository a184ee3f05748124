//! A local control plane: etcd + kube-apiserver + kube-controller-manager
//! (+ kube-scheduler on request), all on 127.0.0.1, state under
//! `<cache>/cluster/<name>/`. With [`ClusterConfig::node`](crate::ClusterConfig::node) it also runs a
//! real node (containerd, kubelet, kube-proxy; see `node.rs`), and the
//! apiserver then serves on the node IP instead of 127.0.0.1.
//!
//! Processes are detached and outlive the caller, so `up` is cheap when the
//! cluster already runs: it checks the recorded pids and `/readyz` and
//! returns. Anything less than a healthy cluster is torn down (only the
//! processes recorded in our pid files) and started fresh with an empty etcd.
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kube::Client;
use serde::{Deserialize, Serialize};

use crate::binaries::{self, Binaries, BuildOptions};
use crate::error::{Error, Result};
use crate::handle::{blocking, LocalCluster};
use crate::kubeconfig;
use crate::pki::{self, PkiFiles};
use crate::process::{self, PidRecord};
use crate::settings::{
    NodeConfig, Ports, APISERVER, COMPONENTS, CONTROLLER_MANAGER, ETCD, NODE_COMPONENTS, SCHEDULER,
};
use crate::util::{self, progress, FileLock};

mod health;
mod spec;
use health::*;
pub(crate) use health::{etcd_healthy, health_client, readyz};
use spec::*;

/// How to reach a running cluster.
#[derive(Debug, Clone)]
pub struct ClusterInfo {
    pub name: String,
    /// Admin kubeconfig (client certificate in `system:masters`).
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:<port>`, or `https://<node IP>:<port>` for a node
    /// cluster (for an external cluster: its current context's server).
    pub server: String,
    /// `None` when the cluster was provided from outside (`DGL_TEST_KUBECONFIG`).
    pub state_dir: Option<PathBuf>,
    /// True if an already running cluster was reused.
    pub reused: bool,
}

impl ClusterInfo {
    /// A new client for this cluster. Build one per tokio runtime (each
    /// `#[tokio::test]` has its own); a client must not outlive its runtime.
    pub async fn client(&self) -> Result<Client> {
        kubeconfig::client_from_file(&self.kubeconfig).await
    }

    /// The kube `Config`, for callers that tune timeouts or QPS.
    pub async fn config(&self) -> Result<kube::Config> {
        kubeconfig::config_from_file(&self.kubeconfig).await
    }
}

/// State of one component, for `status`.
#[derive(Debug, Clone)]
pub struct ComponentStatus {
    pub name: &'static str,
    pub pid: Option<i32>,
    pub running: bool,
    pub log: PathBuf,
}

/// What `status` reports.
#[derive(Debug, Clone)]
pub struct ClusterStatus {
    pub name: String,
    pub state_dir: PathBuf,
    pub kubeconfig: Option<PathBuf>,
    pub ports: Ports,
    pub components: Vec<ComponentStatus>,
    /// `/readyz` answered OK.
    pub ready: bool,
    pub server_version: Option<String>,
    /// The apiserver URL clients use (from the kubeconfig; 127.0.0.1 or the node IP).
    pub server: String,
    /// The node, for a node cluster.
    pub node: Option<NodeConfig>,
}

/// Recorded after a successful start; lets `up` decide whether to reuse.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    name: String,
    ports: Ports,
    server: String,
    kubernetes_version: String,
    etcd_version: String,
    #[serde(default)]
    scheduler: bool,
    #[serde(default)]
    node: Option<NodeConfig>,
    started_at_unix: u64,
}

impl LocalCluster {
    /// The lock lives next to (not inside) the state dir so `down --purge` can
    /// delete the state dir without pulling the lock file from under a waiter.
    async fn lock(&self) -> Result<FileLock> {
        let path = self
            .cfg
            .cache_dir
            .join("cluster")
            .join(format!("{}.lock", self.cfg.name));
        let purpose = format!("cluster {:?}", self.cfg.name);
        blocking(move || FileLock::acquire(&path, &purpose)).await
    }

    async fn binaries(&self) -> Result<Binaries> {
        let opts = BuildOptions::new(self.cfg.cache_dir.clone());
        let build = self.cfg.build_if_missing;
        blocking(move || {
            if build {
                binaries::ensure_binaries(&opts)
            } else {
                binaries::installed_binaries(&opts.cache_dir)
            }
        })
        .await
    }

    /// Starts the cluster, or reuses it if it is already healthy. Safe to
    /// call concurrently from several processes (a lock file serializes them).
    pub async fn up(&self) -> Result<ClusterInfo> {
        let _lock = self.lock().await?;
        let bins = self.binaries().await?;
        if let Some(info) = self.try_reuse(&bins).await? {
            return Ok(info);
        }
        // Keep a scheduler that an earlier caller asked for: several test
        // binaries share a cluster and one of them may rely on it.
        let scheduler = self.cfg.scheduler
            || process::read_pid(&self.run_dir(), SCHEDULER).is_some()
            || self.read_state().is_some_and(|s| s.scheduler);
        self.stop_all().await?;
        util::remove_dir_all_if_exists(&self.etcd_dir())?;
        util::remove_file_if_exists(&self.state_file())?;
        match self.start_fresh(&bins, scheduler).await {
            Ok(info) => Ok(info),
            Err(e) => {
                // Leave logs for diagnosis but free the ports for the next try.
                if let Err(stop_err) = self.stop_all().await {
                    tracing::warn!(error = %stop_err, "cleanup after failed start");
                }
                Err(e)
            }
        }
    }

    async fn try_reuse(&self, bins: &Binaries) -> Result<Option<ClusterInfo>> {
        let Some(state) = self.read_state() else {
            return Ok(None);
        };
        if state.ports != self.cfg.ports || !self.kubeconfig_path().is_file() {
            return Ok(None);
        }
        // A node cluster serves every caller; a control-plane-only one (or a
        // different node) must be restarted for a caller that wants a node.
        if self.cfg.node.is_some() && state.node != self.cfg.node {
            return Ok(None);
        }
        for name in [ETCD, APISERVER, CONTROLLER_MANAGER] {
            if !self.component_running(name, Some(binary_for(bins, name))) {
                tracing::info!(component = name, "not running; restarting the cluster");
                return Ok(None);
            }
        }
        // A loaded machine can make /readyz slow for a moment; do not throw
        // away a cluster (and every test namespace in it) on one slow answer.
        let client = health_client(&self.server(), Some(&self.kubeconfig_path())).await?;
        if !poll(Duration::from_secs(20), || readyz(&client)).await {
            tracing::warn!("processes alive but /readyz failing for 20s; restarting the cluster");
            return Ok(None);
        }
        if let Some(node) = &state.node {
            if !self.node_healthy(node, bins).await {
                tracing::info!("node not healthy; restarting the cluster");
                return Ok(None);
            }
        }
        // (Re)start the scheduler if asked for now or earlier (it may have crashed).
        if (self.cfg.scheduler || state.scheduler)
            && !self.component_running(SCHEDULER, Some(binary_for(bins, SCHEDULER)))
        {
            let pki = self.pki();
            let spec = self.spec(SCHEDULER, bins, &pki);
            self.check_ports(SCHEDULER)?;
            let rec = process::spawn(&self.run_dir(), &self.log_dir(), &spec)?;
            self.wait_component_healthz(SCHEDULER, &rec, self.cfg.ports.scheduler)
                .await?;
            self.write_state(&State {
                scheduler: true,
                ..state.clone()
            })?;
        }
        Ok(Some(self.info(true, state.server.clone())))
    }

    fn info(&self, reused: bool, server: String) -> ClusterInfo {
        ClusterInfo {
            name: self.cfg.name.clone(),
            kubeconfig: self.kubeconfig_path(),
            server,
            state_dir: Some(self.state_dir.clone()),
            reused,
        }
    }

    fn write_state(&self, state: &State) -> Result<()> {
        let json = serde_json::to_vec_pretty(state).map_err(|e| Error::Invalid(e.to_string()))?;
        util::write_atomic(&self.state_file(), &json, 0o644)
    }

    fn read_state(&self) -> Option<State> {
        let path = self.state_file();
        let bytes = std::fs::read(&path).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "ignoring malformed state file");
                None
            }
        }
    }

    fn check_ports(&self, component: &'static str) -> Result<()> {
        let ip = match (&self.cfg.node, component) {
            (Some(n), APISERVER) => n.node_ip.as_str(),
            _ => "127.0.0.1",
        };
        for port in self.cfg.ports.of(component) {
            // std sets SO_REUSEADDR, like the Go servers, so sockets in
            // TIME_WAIT from a previous run do not count as busy.
            if TcpListener::bind((ip, port)).is_err() {
                return Err(Error::PortBusy {
                    port,
                    component,
                    cluster: self.cfg.name.clone(),
                });
            }
        }
        Ok(())
    }

    /// The PKI (the node IP among the apiserver's SANs) and the admin
    /// kubeconfig, written before any component starts.
    async fn ensure_pki_and_kubeconfig(&self, node: Option<&NodeConfig>) -> Result<PkiFiles> {
        let mut extra_sans = self.cfg.extra_sans.clone();
        if let Some(node) = node {
            extra_sans.push(node.node_ip.clone());
        }
        let sans = pki::apiserver_sans(&extra_sans);
        let pki_dir = self.pki().dir;
        let (pki, fresh) = blocking(move || pki::ensure(&pki_dir, &sans)).await?;
        if fresh {
            tracing::info!(dir = %pki.dir.display(), "generated PKI");
        }
        let kubeconfig = kubeconfig::render(
            &format!("localkube-{}", self.cfg.name),
            &self.server(),
            &util::read_to_string(&pki.ca_cert())?,
            &util::read_to_string(&pki.admin_cert())?,
            &util::read_to_string(&pki.admin_key())?,
        )?;
        util::write_atomic(&self.kubeconfig_path(), kubeconfig.as_bytes(), 0o600)?;
        Ok(pki)
    }

    /// etcd, the apiserver, the controller-manager and (if asked) the
    /// scheduler, each started once the one before is healthy.
    async fn start_control_plane(
        &self,
        bins: &Binaries,
        pki: &PkiFiles,
        scheduler: bool,
    ) -> Result<()> {
        let etcd = process::spawn(
            &self.run_dir(),
            &self.log_dir(),
            &self.spec(ETCD, bins, pki),
        )?;
        self.wait_for(ETCD, &etcd, Duration::from_secs(30), || {
            etcd_healthy(self.cfg.ports.etcd_client)
        })
        .await?;

        let apiserver = process::spawn(
            &self.run_dir(),
            &self.log_dir(),
            &self.spec(APISERVER, bins, pki),
        )?;
        let client = health_client(&self.server(), Some(&self.kubeconfig_path())).await?;
        self.wait_for(APISERVER, &apiserver, Duration::from_secs(120), || {
            readyz(&client)
        })
        .await?;

        let kcm = process::spawn(
            &self.run_dir(),
            &self.log_dir(),
            &self.spec(CONTROLLER_MANAGER, bins, pki),
        )?;
        let sched = if scheduler {
            Some(process::spawn(
                &self.run_dir(),
                &self.log_dir(),
                &self.spec(SCHEDULER, bins, pki),
            )?)
        } else {
            None
        };

        // The controller-manager's serviceaccount controller creates the
        // `default` SA; pods cannot be admitted in a namespace without it.
        let api_client = kubeconfig::client_from_file(&self.kubeconfig_path()).await?;
        self.wait_for(CONTROLLER_MANAGER, &kcm, Duration::from_secs(90), || {
            default_sa_exists(&api_client)
        })
        .await?;
        if let Some(sched) = &sched {
            self.wait_component_healthz(SCHEDULER, sched, self.cfg.ports.scheduler)
                .await?;
        }
        Ok(())
    }

    async fn start_fresh(&self, bins: &Binaries, scheduler: bool) -> Result<ClusterInfo> {
        let started = Instant::now();
        let node = self.cfg.node.clone();
        // Pods need a scheduler.
        let scheduler = scheduler || node.is_some();
        if let Some(node) = &node {
            // Before the control plane: the apiserver binds the node IP.
            self.prepare_host(node).await?;
        }
        let mut wanted = vec![ETCD, APISERVER, CONTROLLER_MANAGER];
        if scheduler {
            wanted.push(SCHEDULER);
        }
        for c in &wanted {
            self.check_ports(c)?;
        }
        progress!(
            "starting cluster {:?} (Kubernetes {}, etcd {}) in {}",
            self.cfg.name,
            bins.kubernetes_version,
            bins.etcd_version,
            self.state_dir.display()
        );

        let pki = self.ensure_pki_and_kubeconfig(node.as_ref()).await?;
        self.start_control_plane(bins, &pki, scheduler).await?;
        if let Some(node) = &node {
            self.start_node(node, bins, &pki, &self.server()).await?;
        }

        let state = State {
            name: self.cfg.name.clone(),
            ports: self.cfg.ports,
            server: self.server(),
            kubernetes_version: bins.kubernetes_version.clone(),
            etcd_version: bins.etcd_version.clone(),
            scheduler,
            node: node.clone(),
            started_at_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        };
        self.write_state(&state)?;
        progress!(
            "cluster {:?} ready in {} at {}",
            self.cfg.name,
            util::human(started.elapsed()),
            self.server()
        );
        Ok(self.info(false, self.server()))
    }

    async fn wait_component_healthz(
        &self,
        name: &'static str,
        rec: &PidRecord,
        port: u16,
    ) -> Result<()> {
        // The secure port serves a self-signed certificate; this probe only
        // checks liveness, it sends no credentials.
        let client = health_client(&format!("https://127.0.0.1:{port}"), None).await?;
        self.wait_for(name, rec, Duration::from_secs(60), || healthz(&client))
            .await
    }

    /// Stops every recorded process (reverse start order), after tearing
    /// down the node (if one was started) while the apiserver still runs.
    async fn stop_all(&self) -> Result<Vec<(&'static str, i32)>> {
        let run_dir = self.run_dir();
        let (node, early) = if self.has_node_state() {
            // Nothing may recreate or re-bind pods while the node drains: a
            // Deployment's ReplicaSet replaces every pod the drain deletes,
            // and the drain would wait for the replacements until it times out.
            let dir = run_dir.clone();
            let early = blocking(move || {
                let mut stopped = Vec::new();
                for name in [CONTROLLER_MANAGER, SCHEDULER] {
                    if let Some(rec) = process::read_pid(&dir, name) {
                        let was_running = process::is_running(&rec);
                        process::stop(&rec, Duration::from_secs(15))?;
                        if was_running {
                            stopped.push((name, rec.pid));
                        }
                    }
                }
                Ok(stopped)
            })
            .await?;
            (Some(self.stop_node().await), early)
        } else {
            (None, Vec::new())
        };
        let node_stopped = node.as_ref().map(|n| n.stopped.clone()).unwrap_or_default();
        let stopped = blocking(move || {
            let mut stopped = early;
            stopped.extend(node_stopped);
            for name in COMPONENTS.iter().rev() {
                if let Some(rec) = process::read_pid(&run_dir, name) {
                    let was_running = process::is_running(&rec);
                    process::stop(&rec, Duration::from_secs(15))?;
                    if was_running {
                        stopped.push((*name, rec.pid));
                    }
                }
            }
            Ok(stopped)
        })
        .await?;
        // The host sweep last: it removes the node IP the control plane
        // serves on, which would strand the components' connections.
        if let Some(report) = node {
            self.sweep_node_host(report).await?;
        }
        Ok(stopped)
    }

    /// Stops the processes this cluster started and deletes the etcd data
    /// (and with `purge`, the whole state dir: PKI, kubeconfig, logs).
    /// Returns the components that were running, with their pids.
    pub async fn down(&self, purge: bool) -> Result<Vec<(&'static str, i32)>> {
        let _lock = self.lock().await?;
        let stopped = self.stop_all().await?;
        util::remove_dir_all_if_exists(&self.etcd_dir())?;
        util::remove_file_if_exists(&self.state_file())?;
        if purge {
            util::remove_dir_all_if_exists(&self.state_dir)?;
        }
        Ok(stopped)
    }

    /// Reports recorded processes and whether the apiserver answers. Takes no
    /// lock, so it works while another process is starting the cluster.
    pub async fn status(&self) -> Result<ClusterStatus> {
        let with_node = self.has_node_state();
        let components = COMPONENTS
            .iter()
            .chain(NODE_COMPONENTS.iter().filter(|_| with_node))
            .map(|name| {
                let rec = process::read_pid(&self.run_dir(), name);
                ComponentStatus {
                    name,
                    pid: rec.as_ref().map(|r| r.pid),
                    running: rec.as_ref().is_some_and(process::is_running),
                    log: process::log_file(&self.log_dir(), name),
                }
            })
            .collect();
        let kubeconfig = Some(self.kubeconfig_path()).filter(|p| p.is_file());
        let (mut ready, mut server_version) = (false, None);
        let mut server = self.server();
        if let Some(kc) = &kubeconfig {
            if let Ok(c) = kubeconfig::config_from_file(kc).await {
                server = c.cluster_url.to_string();
            }
        }
        if let Some(kc) = &kubeconfig {
            if let Ok(client) = health_client(&self.server(), Some(kc)).await {
                ready = readyz(&client).await;
                if ready {
                    server_version = client.apiserver_version().await.ok().map(|v| v.git_version);
                }
            }
        }
        Ok(ClusterStatus {
            name: self.cfg.name.clone(),
            state_dir: self.state_dir.clone(),
            kubeconfig,
            ports: self.cfg.ports,
            components,
            ready,
            server_version,
            server,
            node: self.read_state().and_then(|s| s.node).filter(|_| with_node),
        })
    }
}

#[cfg(test)]
mod tests;
