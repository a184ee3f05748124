//! A local control plane: etcd + kube-apiserver + kube-controller-manager
//! (+ kube-scheduler on request), all on 127.0.0.1, state under
//! `<cache>/cluster/<name>/`. With [`ClusterConfig::node`] it also runs a
//! real node (containerd, kubelet, kube-proxy; see `node.rs`), and the
//! apiserver then serves on the node IP instead of 127.0.0.1.
//!
//! Processes are detached and outlive the caller, so `up` is cheap when the
//! cluster already runs: it checks the recorded pids and `/readyz` and
//! returns. Anything less than a healthy cluster is torn down (only the
//! processes recorded in our pid files) and started fresh with an empty etcd.
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::Api;
use kube::Client;
use serde::{Deserialize, Serialize};

use crate::binaries::{self, Binaries, BuildOptions};
use crate::error::{Error, Result};
use crate::kubeconfig;
use crate::node::{self, NodeConfig};
use crate::pki::{self, PkiFiles};
use crate::process::{self, PidRecord, ProcSpec};
use crate::util::{self, progress, FileLock};

mod health;
mod spec;
use health::*;
pub(crate) use health::{etcd_healthy, health_client, readyz};
use spec::*;

/// Cluster used by `cargo xtask cluster` when no `--name` is given.
pub const DEFAULT_CLUSTER: &str = "dev";
/// Cluster used by [`crate::ensure_cluster`], separate from a developer's "dev".
pub const TEST_CLUSTER: &str = "test";
/// Service ClusterIP range; `10.96.0.1` is the `kubernetes` Service.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// Issuer of service-account tokens (the in-cluster DNS name of the apiserver).
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

pub(crate) const ETCD: &str = "etcd";
pub(crate) const APISERVER: &str = "kube-apiserver";
const CONTROLLER_MANAGER: &str = "kube-controller-manager";
const SCHEDULER: &str = "kube-scheduler";
/// Start order; stop order is the reverse.
const COMPONENTS: [&str; 4] = [ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER];

/// Loopback ports of one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ports {
    pub apiserver: u16,
    pub etcd_client: u16,
    pub etcd_peer: u16,
    pub controller_manager: u16,
    pub scheduler: u16,
}

impl Ports {
    /// Fixed ports per name, so a kubeconfig stays valid across restarts and
    /// two clusters never collide: "dev" gets the Kubernetes defaults (6443,
    /// 2379/2380, 10257, 10259), "test" the same + 10000, any other name the
    /// defaults + 1000..9000 derived from a stable hash of the name.
    pub fn for_name(name: &str) -> Ports {
        let offset: u16 = match name {
            DEFAULT_CLUSTER => 0,
            TEST_CLUSTER => 10_000,
            other => 1000 * (1 + (util::fnv1a(other.as_bytes()) % 9) as u16),
        };
        Ports {
            apiserver: 6443 + offset,
            etcd_client: 2379 + offset,
            etcd_peer: 2380 + offset,
            controller_manager: 10257 + offset,
            scheduler: 10259 + offset,
        }
    }

    fn of(&self, component: &str) -> Vec<u16> {
        match component {
            ETCD => vec![self.etcd_client, self.etcd_peer],
            APISERVER => vec![self.apiserver],
            CONTROLLER_MANAGER => vec![self.controller_manager],
            SCHEDULER => vec![self.scheduler],
            _ => vec![],
        }
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub name: String,
    /// Also run kube-scheduler (needed once pods should be bound to nodes).
    pub scheduler: bool,
    pub ports: Ports,
    /// Extra SANs for the apiserver certificate (IPs or DNS names).
    pub extra_sans: Vec<String>,
    pub cache_dir: PathBuf,
    /// Build missing binaries (slow when cold) instead of failing.
    pub build_if_missing: bool,
    /// Also run a real node (containerd + kubelet + kube-proxy) on this
    /// host; implies the scheduler. Needs root. `None`: control plane only.
    pub node: Option<NodeConfig>,
}

impl ClusterConfig {
    /// Defaults for `name`: its fixed ports, the standard cache dir, no scheduler.
    pub fn new(name: &str) -> Result<ClusterConfig> {
        util::validate_name(name)?;
        Ok(ClusterConfig {
            name: name.to_owned(),
            scheduler: false,
            ports: Ports::for_name(name),
            extra_sans: Vec::new(),
            cache_dir: util::cache_dir()?,
            build_if_missing: true,
            node: None,
        })
    }

    /// Adds the default node for this cluster's name (see [`NodeConfig::for_cluster`]).
    pub fn with_node(mut self) -> ClusterConfig {
        self.node = Some(NodeConfig::for_cluster(&self.name));
        self.scheduler = true;
        self
    }

    /// [`Self::with_node`] with `nodes` nodes in all: node 0 on the host
    /// as in a single-node cluster, the others each in a network namespace of
    /// its own (1 to [`crate::MAX_NODES`]; checked by `up`).
    pub fn with_nodes(self, nodes: usize) -> ClusterConfig {
        let mut c = self.with_node();
        if let Some(n) = c.node.as_mut() {
            n.nodes = nodes;
        }
        c
    }
}

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

/// Handle on a named local cluster (running or not).
#[derive(Debug, Clone)]
pub struct LocalCluster {
    cfg: ClusterConfig,
    state_dir: PathBuf,
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
    fn etcd_dir(&self) -> PathBuf {
        self.state_dir.join("etcd")
    }
    fn state_file(&self) -> PathBuf {
        self.state_dir.join("cluster.json")
    }
    fn pki(&self) -> PkiFiles {
        PkiFiles {
            dir: self.state_dir.join("pki"),
        }
    }
    pub(crate) fn server(&self) -> String {
        self.server_for(self.cfg.node.as_ref())
    }
    /// A node cluster's apiserver serves on the node IP only (see `node.rs`).
    fn server_for(&self, node: Option<&NodeConfig>) -> String {
        let host = node.map(|n| n.node_ip.as_str()).unwrap_or("127.0.0.1");
        format!("https://{host}:{}", self.cfg.ports.apiserver)
    }

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
            .chain(node::NODE_COMPONENTS.iter().filter(|_| with_node))
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

#[cfg(test)]
mod tests;
