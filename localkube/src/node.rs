//! The node tier: a real kubelet on this machine, next to the control plane.
//!
//! `ClusterConfig::node = Some(NodeConfig)` adds to the control plane:
//!
//! * containerd (Debian's 1.6) with its own config, root, state and socket
//!   under `<state>/node/containerd/`, the cgroupfs driver
//!   (`SystemdCgroup = false`: no systemd here, and the kubelet must match),
//!   and a pause image built locally from `assets/pause.go`;
//! * the CNI bridge plugin (Debian's containernetworking-plugins): bridge
//!   [`CNI_BRIDGE`], pod subnet [`POD_CIDR`](crate::POD_CIDR), host-local IPAM whose state is
//!   under our state dir, portmap; config in our own directory;
//! * kubelet v1.33 (cgroup v1, cgroupfs, cgroup root `/localkube-<name>`,
//!   swap allowed, image GC off) with a node client certificate
//!   (`CN=system:node:<node>`, `O=system:nodes`), so the apiserver runs with
//!   `--authorization-mode=Node,RBAC` and NodeRestriction;
//! * kube-proxy (iptables mode) with its own `system:kube-proxy`
//!   certificate, so pods reach the apiserver through the `kubernetes`
//!   Service.
//!
//! The node IP ([`NODE_IP`](crate::NODE_IP)) lives on an interface of its own
//! ([`NODE_INTERFACE`]); the apiserver binds and advertises it, which lets
//! the endpoint reconciler publish a valid (non-loopback) `kubernetes`
//! endpoint and pods reach it through their default route.
//!
//! Every host change is recorded in `<state>/node/host.json` *before* it is
//! made, and [`LocalCluster::down`] reverts exactly those: processes, mounts,
//! links, iptables chains created since `up`, the cgroup root, the sysctls
//! the kubelet and the CNI plugin change, and the files they drop outside the
//! state dir. Only one node cluster can run per host (the links, the
//! iptables rules and the cgroup root are host-global); `/run/localkube-node.json`
//! names the owner.
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::Client;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::binaries::{self, Binaries};
use crate::error::{Error, Result};
use crate::handle::{blocking, LocalCluster};
use crate::image::{self, ImageConfig, ImageFile};
use crate::pki::{self, PkiFiles};
use crate::process::{self, ProcSpec};
use crate::settings::{
    NodeConfig, NodePorts, APISERVER, CNI_BRIDGE, CONTAINERD, CRI_NAMESPACE, KUBELET, KUBE_PROXY,
    NODE_COMPONENTS, NODE_INTERFACE, NODE_PACKAGES, PAUSE_REPOSITORY,
};
use crate::util::{self, progress};
use crate::{host, kubeconfig};

mod configs;
mod ctr;
mod cut;
mod extra;
mod images;
mod netns;
mod plan;
mod teardown;
use configs::*;
use ctr::{
    ctr_at, image_labels_at, images_at, label_image_at, remove_all_containers_at, remove_image_at,
};
pub use extra::NodeSummary;
use images::*;
pub use plan::MAX_NODES;
pub use teardown::NodeTeardown;
use teardown::*;

/// Where Debian's containernetworking-plugins installs the plugins.
const CNI_BIN_DIR: &str = "/usr/lib/cni";
const CONTAINERD_BIN: &str = "/usr/bin/containerd";
const CTR_BIN: &str = "/usr/bin/ctr";
const RUNC_BIN: &str = "/usr/sbin/runc";
/// Names the cluster that owns the host-global node resources.
const HOST_MARKER: &str = "/run/localkube-node.json";

/// Sysctls the kubelet (`protectKernelDefaults: false`), the bridge plugin
/// (`ip_forward`) or kube-proxy may change; restored on teardown.
const TRACKED_SYSCTLS: [&str; 12] = [
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
];

/// Netfilter accounting objects kube-proxy (iptables mode) creates for its
/// metrics (`pkg/proxy/metrics`: IPTablesCTStateInvalidDroppedNFAcctCounter,
/// LocalhostNodePortAcceptedNFAcctCounter).
const KUBE_PROXY_NFACCT: [&str; 2] = [
    "ct_state_invalid_dropped_pkts",
    "localhost_nps_accepted_pkts",
];

/// Host directories the components write to even though our own state lives
/// elsewhere: the kubelet's `/var/log/containers` symlinks, libcni's result
/// cache, the runc shims' socket dir. Removed on teardown if they did not
/// exist before `up` and are empty by then (only our entries are removed
/// from them otherwise). Not /run/netns: the CRI's network namespaces live
/// under our state dir, and other tools use /run/netns concurrently.
const HOST_DIRS: [&str; 3] = ["/var/log/containers", "/var/lib/cni", "/run/containerd"];

/// Files and directories of the node: per cluster below `<state>/node/`,
/// except the image store.
#[derive(Debug, Clone)]
pub struct NodePaths {
    pub dir: PathBuf,
    /// containerd's root (content store, snapshots, metadata), shared by every
    /// node cluster of this cache: only one runs per host, and the images
    /// (the training image is 5 GB) are then imported once, not per cluster.
    pub images: PathBuf,
}

impl NodePaths {
    fn record(&self) -> PathBuf {
        self.dir.join("host.json")
    }
    pub fn containerd_dir(&self) -> PathBuf {
        self.dir.join("containerd")
    }
    /// containerd's root: content store, snapshots, metadata (kept across
    /// `down` and `--purge`, so images survive; shared by all node clusters).
    pub fn containerd_root(&self) -> PathBuf {
        self.images.clone()
    }
    fn containerd_state(&self) -> PathBuf {
        self.containerd_dir().join("state")
    }
    pub fn containerd_socket(&self) -> PathBuf {
        self.containerd_dir().join("containerd.sock")
    }
    fn containerd_config(&self) -> PathBuf {
        self.containerd_dir().join("config.toml")
    }
    fn runc_root(&self) -> PathBuf {
        self.containerd_dir().join("runc")
    }
    fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni").join("net.d")
    }
    fn cni_ipam_dir(&self) -> PathBuf {
        self.dir.join("cni").join("ipam")
    }
    pub fn kubelet_root(&self) -> PathBuf {
        self.dir.join("kubelet")
    }
    fn kubelet_config(&self) -> PathBuf {
        self.dir.join("kubelet.yaml")
    }
    fn kubelet_kubeconfig(&self) -> PathBuf {
        self.dir.join("kubelet.kubeconfig")
    }
    fn proxy_config(&self) -> PathBuf {
        self.dir.join("kube-proxy.yaml")
    }
    fn proxy_kubeconfig(&self) -> PathBuf {
        self.dir.join("kube-proxy.kubeconfig")
    }
    pub fn pod_logs(&self) -> PathBuf {
        self.dir.join("pod-logs")
    }
    /// Everything that is per run (deleted on `down`); the containerd root is not in it.
    fn per_run_dirs(&self) -> Vec<PathBuf> {
        vec![
            self.containerd_state(),
            self.runc_root(),
            self.dir.join("cni"),
            self.kubelet_root(),
            self.pod_logs(),
        ]
    }
}

/// What `up` changed on the host, written before each change is made.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct HostRecord {
    cluster: String,
    state_dir: PathBuf,
    node: Option<NodeConfig>,
    /// Links we created (and therefore delete).
    links: Vec<String>,
    /// `/localkube-<name>` in every cgroup v1 hierarchy.
    cgroup_root: String,
    /// CNI network name (appears in the CNI plugins' iptables comments and cache files).
    cni_network: String,
    /// Sysctl values before `up`.
    sysctls: BTreeMap<String, String>,
    /// User-defined iptables chains before `up`, per "<binary> <table>".
    chains_before: BTreeMap<String, BTreeSet<String>>,
    /// Host directories of [`HOST_DIRS`] that did not exist before `up`.
    absent_dirs: Vec<PathBuf>,
    /// Debian packages `up` installed (reported, never removed: other tools may rely on them).
    packages_installed: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct HostMarker {
    cluster: String,
    state_dir: PathBuf,
}

impl LocalCluster {
    /// The node's file layout (also for a cluster without a node).
    pub fn node_paths(&self) -> NodePaths {
        // The state dir is `<cache>/cluster/<name>`.
        let cache = self
            .state_dir()
            .parent()
            .and_then(Path::parent)
            .unwrap_or_else(|| self.state_dir());
        NodePaths {
            dir: self.state_dir().join("node"),
            images: cache.join("node-images").join("containerd"),
        }
    }

    /// The node's containerd socket (exists while a node cluster runs).
    pub fn containerd_socket(&self) -> PathBuf {
        self.node_paths().containerd_socket()
    }

    /// `ctr --address <socket> --namespace k8s.io` of node 0, ready for more args.
    pub fn ctr(&self) -> Command {
        ctr_at(&self.containerd_socket())
    }

    /// True if the node's containerd is running.
    pub fn node_running(&self) -> bool {
        self.component_running(CONTAINERD, None)
    }

    // ------------------------------------------------------------ up

    /// Prepares the host before any component starts: packages, ownership
    /// marker, the host record (before every change), the node IP link and
    /// the kubelet's cgroup root.
    pub(crate) async fn prepare_host(&self, node: &NodeConfig) -> Result<()> {
        let this = self.clone();
        let node = node.clone();
        blocking(move || this.prepare_host_blocking(&node)).await
    }

    fn prepare_host_blocking(&self, node: &NodeConfig) -> Result<()> {
        let name = &self.config().name;
        if host::cgroup_v2_only() {
            return Err(Error::Invalid(
                "this host has no cgroup v1 hierarchies; localkube's node is set up for cgroup v1 (cgroupfs driver)".into(),
            ));
        }
        let installed = if node.install_packages {
            host::ensure_packages(&NODE_PACKAGES, &self.config().cache_dir.join("logs"))?
        } else {
            Vec::new()
        };
        for bin in [CONTAINERD_BIN, CTR_BIN, RUNC_BIN] {
            if !Path::new(bin).is_file() {
                return Err(Error::Invalid(format!(
                    "{bin} is missing; install the Debian packages {} (or leave NodeConfig::install_packages on)",
                    NODE_PACKAGES.join(" ")
                )));
            }
        }
        host::require_root("running a kubelet node")?;
        // The whole layout of every node, checked before the first change.
        for e in self.extra_nodes_of(node)? {
            check_socket_len(&e.paths.containerd_socket())?;
        }
        node.node_ip.parse::<Ipv4Addr>().map_err(|e| {
            Error::Invalid(format!(
                "node IP {:?} is not an IPv4 address: {e}",
                node.node_ip
            ))
        })?;
        let paths = self.node_paths();
        check_socket_len(&paths.containerd_socket())?;
        self.claim_host()?;

        // Record first, then change: a crash at any point leaves a record
        // that describes at least everything that was changed.
        util::create_dir_all(&paths.dir)?;
        let mut rec = match read_record(&paths) {
            // Our own leftovers (a failed start): keep the original "before"
            // values, they describe the host as it was before us.
            Some(old) => old,
            None => {
                let mut chains_before = BTreeMap::new();
                for bin in host::IPTABLES_BINARIES {
                    for table in host::IPTABLES_TABLES {
                        match host::iptables_chains(bin, table) {
                            Ok(c) => {
                                chains_before.insert(format!("{bin} {table}"), c);
                            }
                            Err(e) => tracing::warn!(%e, "cannot list {bin} {table}"),
                        }
                    }
                }
                HostRecord {
                    cluster: name.clone(),
                    state_dir: self.state_dir().to_owned(),
                    node: Some(node.clone()),
                    links: Vec::new(),
                    cgroup_root: format!("localkube-{name}"),
                    cni_network: format!("localkube-{name}"),
                    sysctls: TRACKED_SYSCTLS
                        .iter()
                        .filter_map(|k| host::sysctl_read(k).map(|v| ((*k).to_owned(), v)))
                        .collect(),
                    chains_before,
                    absent_dirs: HOST_DIRS
                        .iter()
                        .map(PathBuf::from)
                        .filter(|p| !p.exists())
                        .collect(),
                    packages_installed: installed,
                }
            }
        };
        for link in [NODE_INTERFACE, CNI_BRIDGE] {
            if !rec.links.iter().any(|l| l == link) {
                rec.links.push(link.to_owned());
            }
        }
        write_record(&paths, &rec)?;

        // The node IP link. A leftover with the right address is reused.
        if !host::has_address(NODE_INTERFACE, &node.node_ip) {
            host::delete_link(NODE_INTERFACE)?;
            host::create_address_bridge(NODE_INTERFACE, &node.node_ip)?;
        }
        host::create_cgroup_root(&rec.cgroup_root)?;
        Ok(())
    }

    /// Takes ownership of the host's node resources (atomically, O_EXCL).
    fn claim_host(&self) -> Result<()> {
        let me = HostMarker {
            cluster: self.config().name.clone(),
            state_dir: self.state_dir().to_owned(),
        };
        let json = serde_json::to_vec_pretty(&me).map_err(|e| Error::Invalid(e.to_string()))?;
        for _ in 0..2 {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(HOST_MARKER)
            {
                Ok(mut f) => {
                    use std::io::Write as _;
                    return f
                        .write_all(&json)
                        .map_err(Error::io("writing", HOST_MARKER));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner: Option<HostMarker> = fs::read(HOST_MARKER)
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok());
                    match owner {
                        Some(o) if o.cluster == me.cluster && o.state_dir == me.state_dir => {
                            return Ok(())
                        }
                        // The owner's state is gone (deleted by hand): nothing
                        // could tear it down any more, so take over.
                        Some(o) if !o.state_dir.join("node").join("host.json").exists() => {
                            tracing::warn!(owner = %o.cluster, "taking over a stale host marker");
                            util::remove_file_if_exists(Path::new(HOST_MARKER))?;
                        }
                        Some(o) => {
                            return Err(Error::HostBusy {
                                owner: o.cluster,
                                state_dir: o.state_dir,
                                interfaces: format!("{NODE_INTERFACE}, {CNI_BRIDGE}"),
                            })
                        }
                        None => util::remove_file_if_exists(Path::new(HOST_MARKER))?,
                    }
                }
                Err(e) => return Err(Error::io("creating", HOST_MARKER)(e)),
            }
        }
        Err(Error::Invalid(format!("could not claim {HOST_MARKER}")))
    }

    /// Starts containerd, the kubelet and kube-proxy (after the control
    /// plane), and waits until the node is Ready and the `kubernetes`
    /// Service has the node IP as its endpoint.
    pub(crate) async fn start_node(
        &self,
        node: &NodeConfig,
        bins: &Binaries,
        pki: &PkiFiles,
        server: &str,
    ) -> Result<()> {
        let started = Instant::now();
        let paths = self.node_paths();
        let np = NodePorts::for_ports(&self.config().ports);
        self.prepare_node_dirs(&paths, node, &np)?;
        self.write_node_kubeconfigs(&paths, node, pki, server)?;
        let pause = self.write_runtime_configs(&paths, node).await?;
        let env = vec![("PATH".to_owned(), host::path_env())];
        self.start_containerd(&paths, env.clone()).await?;
        self.ensure_pause_image(&pause).await?;
        let client = self
            .start_kubelet(&paths, node, &np, pki, bins, &pause, env.clone())
            .await?;
        self.start_kube_proxy(&paths, node, &np, bins, env).await?;
        self.wait_kubernetes_endpoint(&client, &node.node_ip)
            .await?;
        progress!(
            "node {} Ready in {} (containerd, kubelet, kube-proxy; pods on {}, node IP {})",
            node.node_name,
            util::human(started.elapsed()),
            node.pod_cidr,
            node.node_ip
        );
        // Nodes 1..N, each in a network namespace of its own (none for N = 1).
        self.start_extra_nodes(node, bins, pki, server, &pause)
            .await?;
        Ok(())
    }

    /// The node's state folders, and none of its ports taken by another process.
    fn prepare_node_dirs(
        &self,
        paths: &NodePaths,
        node: &NodeConfig,
        np: &NodePorts,
    ) -> Result<()> {
        for p in paths.per_run_dirs() {
            util::create_dir_all(&p)?;
        }
        util::create_dir_all(&paths.containerd_root())?;
        util::create_dir_all(&paths.cni_conf_dir())?;
        util::create_dir_all(&paths.cni_ipam_dir())?;
        let name = &self.config().name;
        check_port(&node.node_ip, np.kubelet, KUBELET, name)?;
        check_port("127.0.0.1", np.kubelet_healthz, KUBELET, name)?;
        check_port("127.0.0.1", np.proxy_healthz, KUBE_PROXY, name)?;
        check_port("127.0.0.1", np.proxy_metrics, KUBE_PROXY, name)?;
        Ok(())
    }

    /// Credentials: the kubelet as system:node:<name> (Node authorizer +
    /// NodeRestriction), kube-proxy as system:kube-proxy (bound to
    /// system:node-proxier by the default RBAC policy).
    fn write_node_kubeconfigs(
        &self,
        paths: &NodePaths,
        node: &NodeConfig,
        pki: &PkiFiles,
        server: &str,
    ) -> Result<()> {
        let ca = util::read_to_string(&pki.ca_cert())?;
        for (stem, cn, org, file) in [
            (
                "kubelet",
                format!("system:node:{}", node.node_name),
                Some("system:nodes"),
                paths.kubelet_kubeconfig(),
            ),
            (
                "kube-proxy",
                "system:kube-proxy".to_owned(),
                None,
                paths.proxy_kubeconfig(),
            ),
        ] {
            let (crt, key) = pki::ensure_client_cert(pki, stem, &cn, org)?;
            let kc = kubeconfig::render(
                &format!("localkube-{}-{stem}", self.config().name),
                server,
                &ca,
                &util::read_to_string(&crt)?,
                &util::read_to_string(&key)?,
            )?;
            util::write_atomic(&file, kc.as_bytes(), 0o600)?;
        }
        Ok(())
    }

    /// The CNI and containerd configurations; returns the sandbox image's
    /// reference (named for the Go version that builds it).
    async fn write_runtime_configs(&self, paths: &NodePaths, node: &NodeConfig) -> Result<String> {
        let cache = self.config().cache_dir.clone();
        let go_ver = blocking(move || go_version(&cache)).await?;
        let pause = pause_reference(&go_ver);
        let network = format!("localkube-{}", self.config().name);
        util::write_atomic(
            &paths.cni_conf_dir().join("10-localkube.conflist"),
            cni_conflist(&network, &node.pod_cidr, &paths.cni_ipam_dir()).as_bytes(),
            0o644,
        )?;
        util::write_atomic(
            &paths.containerd_config(),
            containerd_config(paths, &pause)?.as_bytes(),
            0o644,
        )?;
        Ok(pause)
    }

    /// containerd, waited for until `ctr version` answers.
    async fn start_containerd(&self, paths: &NodePaths, env: Vec<(String, String)>) -> Result<()> {
        let ctrd = process::spawn(
            &self.run_dir(),
            &self.log_dir(),
            &ProcSpec {
                name: CONTAINERD,
                binary: CONTAINERD_BIN.into(),
                args: vec![
                    "--config".into(),
                    paths.containerd_config().display().to_string(),
                ],
                env,
            },
        )?;
        let this = self.clone();
        self.wait_for(CONTAINERD, &ctrd, Duration::from_secs(30), || {
            let this = this.clone();
            async move {
                blocking(move || Ok(host::run(this.ctr().arg("version")).is_ok()))
                    .await
                    .unwrap_or(false)
            }
        })
        .await
    }

    /// The sandbox image, built once per Go version and loaded once per containerd root.
    async fn ensure_pause_image(&self, pause: &str) -> Result<()> {
        let this = self.clone();
        let cache = self.config().cache_dir.clone();
        let pause_ref = pause.to_owned();
        blocking(move || {
            if !this.node_images()?.contains(&pause_ref) {
                let tag = pause_ref.rsplit(':').next().unwrap_or("x").to_owned();
                let archive = ensure_go_image_archive(
                    &cache,
                    &pause_ref,
                    include_str!("../assets/pause.go"),
                    &tag,
                )?;
                this.import_image_archive(&archive, None)?;
            }
            Ok(())
        })
        .await
    }

    /// The kubelet, waited for until its Node is Ready; returns the admin
    /// client the later steps use.
    #[allow(clippy::too_many_arguments)]
    async fn start_kubelet(
        &self,
        paths: &NodePaths,
        node: &NodeConfig,
        np: &NodePorts,
        pki: &PkiFiles,
        bins: &Binaries,
        pause: &str,
        env: Vec<(String, String)>,
    ) -> Result<Client> {
        util::write_atomic(
            &paths.kubelet_config(),
            kubelet_config(paths, node, np, pki, &self.config().name)?.as_bytes(),
            0o644,
        )?;
        let kubelet = process::spawn(
            &self.run_dir(),
            &self.log_dir(),
            &ProcSpec {
                name: KUBELET,
                binary: bins.kubelet.clone(),
                args: kubelet_args(paths, node, pause),
                env,
            },
        )?;
        let client = kubeconfig::client_from_file(&self.kubeconfig_path()).await?;
        let node_name = node.node_name.clone();
        self.wait_for(KUBELET, &kubelet, Duration::from_secs(120), || {
            node_ready(&client, &node_name)
        })
        .await?;
        Ok(client)
    }

    /// kube-proxy, waited for until its /healthz answers.
    async fn start_kube_proxy(
        &self,
        paths: &NodePaths,
        node: &NodeConfig,
        np: &NodePorts,
        bins: &Binaries,
        env: Vec<(String, String)>,
    ) -> Result<()> {
        util::write_atomic(
            &paths.proxy_config(),
            proxy_config(paths, node, np)?.as_bytes(),
            0o644,
        )?;
        let proxy = process::spawn(
            &self.run_dir(),
            &self.log_dir(),
            &ProcSpec {
                name: KUBE_PROXY,
                binary: bins.kube_proxy.clone(),
                args: vec![
                    format!("--config={}", paths.proxy_config().display()),
                    "--v=1".into(),
                ],
                env,
            },
        )?;
        let port = np.proxy_healthz;
        self.wait_for(KUBE_PROXY, &proxy, Duration::from_secs(60), || {
            http_ok(port, "/healthz")
        })
        .await
    }

    /// The lease endpoint reconciler publishes the node IP for the
    /// `kubernetes` Service; pods depend on it.
    async fn wait_kubernetes_endpoint(&self, client: &Client, node_ip: &str) -> Result<()> {
        let apiserver = process::read_pid(&self.run_dir(), APISERVER)
            .ok_or_else(|| Error::Invalid("kube-apiserver pid file vanished".into()))?;
        self.wait_for(APISERVER, &apiserver, Duration::from_secs(30), || {
            kubernetes_endpoint_is(client, node_ip)
        })
        .await
    }

    /// Whether a running node cluster can be reused: its node components run
    /// the expected binaries and the Node is Ready.
    pub(crate) async fn node_healthy(&self, node: &NodeConfig, bins: &Binaries) -> bool {
        let procs = self.component_running(CONTAINERD, Some(Path::new(CONTAINERD_BIN)))
            && self.component_running(KUBELET, Some(&bins.kubelet))
            && self.component_running(KUBE_PROXY, Some(&bins.kube_proxy));
        if !procs || !host::link_exists(NODE_INTERFACE) || !self.extra_processes_running(node) {
            return false;
        }
        let Ok(client) = kubeconfig::client_from_file(&self.kubeconfig_path()).await else {
            return false;
        };
        let mut names = vec![node.node_name.clone()];
        names.extend(
            self.extra_nodes_of(node)
                .unwrap_or_default()
                .into_iter()
                .map(|e| e.node.node_name),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let mut all = true;
            for n in &names {
                all = all && node_ready(&client, n).await;
            }
            if all {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        false
    }
}

fn read_record(paths: &NodePaths) -> Option<HostRecord> {
    let bytes = fs::read(paths.record()).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(file = %paths.record().display(), error = %e, "ignoring malformed host record");
            None
        }
    }
}

fn write_record(paths: &NodePaths, rec: &HostRecord) -> Result<()> {
    let json = serde_json::to_vec_pretty(rec).map_err(|e| Error::Invalid(e.to_string()))?;
    util::write_atomic(&paths.record(), &json, 0o644)
}

fn check_port(ip: &str, port: u16, component: &'static str, cluster: &str) -> Result<()> {
    if TcpListener::bind((ip, port)).is_err() {
        return Err(Error::PortBusy {
            port,
            component,
            cluster: cluster.to_owned(),
        });
    }
    Ok(())
}

/// sun_path is 108 bytes; containerd also creates "<socket>.ttrpc".
fn check_socket_len(socket: &Path) -> Result<()> {
    if socket.as_os_str().len() + 6 >= 108 {
        return Err(Error::Invalid(format!(
            "containerd socket path {} is too long for a unix socket; set DGL_OPERATOR_CACHE to a shorter directory",
            socket.display()
        )));
    }
    Ok(())
}

async fn node_ready(client: &Client, name: &str) -> bool {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.get_opt(name).await {
        Ok(Some(n)) => n
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        _ => false,
    }
}

async fn kubernetes_endpoint_is(client: &Client, ip: &str) -> bool {
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    match eps.get_opt("kubernetes").await {
        Ok(Some(e)) => e.subsets.unwrap_or_default().iter().any(|s| {
            s.addresses
                .as_ref()
                .is_some_and(|a| a.iter().any(|a| a.ip == ip))
        }),
        _ => false,
    }
}

/// Plain-HTTP GET on 127.0.0.1 (kubelet/kube-proxy health ports); true on a 200.
async fn http_ok(port: u16, path: &str) -> bool {
    let probe = crate::util::http_get(port, path);
    matches!(
        tokio::time::timeout(Duration::from_secs(3), probe).await,
        Ok(Ok((200, _)))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{Ports, NODE_IP, POD_CIDR};

    fn paths() -> NodePaths {
        NodePaths {
            dir: PathBuf::from("/cache/cluster/unit/node"),
            images: PathBuf::from("/cache/node-images/containerd"),
        }
    }

    #[test]
    fn node_ports_follow_the_cluster_offset_and_do_not_collide() {
        for name in ["dev", "test", "e2e", "smoke"] {
            let p = Ports::for_name(name);
            let n = NodePorts::for_ports(&p);
            let all = [
                p.apiserver,
                p.etcd_client,
                p.etcd_peer,
                p.controller_manager,
                p.scheduler,
                n.kubelet,
                n.kubelet_healthz,
                n.proxy_healthz,
                n.proxy_metrics,
            ];
            let set: BTreeSet<u16> = all.iter().copied().collect();
            assert_eq!(set.len(), all.len(), "{name}: {all:?}");
        }
        assert_eq!(NodePorts::for_ports(&Ports::for_name("dev")).kubelet, 10250);
    }

    #[test]
    fn only_references_no_tag_shares_are_untagged() {
        let ls = "\
REF                                    TYPE                                                 DIGEST         SIZE      PLATFORMS   LABELS
docker.io/dgloperator/graphsage:v0.1.0 application/vnd.docker.distribution.manifest.v2+json sha256:new     5.5 GiB   linux/amd64 io.cri-containerd.image=managed
sha256:53073033                        application/vnd.docker.distribution.manifest.v2+json sha256:new     5.5 GiB   linux/amd64 io.cri-containerd.image=managed
sha256:498669bd                        application/vnd.docker.distribution.manifest.v2+json sha256:old     5.4 GiB   linux/amd64 io.cri-containerd.image=managed
docker.io/dgloperator/graphsage@sha256:old application/vnd.docker.distribution.manifest.v2+json sha256:old 5.4 GiB linux/amd64 -
localhost/localkube/pause:3.10-x       application/vnd.oci.image.manifest.v1+json           sha256:pause   300 KiB   linux/amd64 -
";
        assert_eq!(
            untagged_image_refs(ls),
            vec![
                "sha256:498669bd",
                "docker.io/dgloperator/graphsage@sha256:old"
            ]
        );
        assert!(untagged_image_refs("REF TYPE DIGEST SIZE PLATFORMS LABELS\n").is_empty());
    }

    #[test]
    fn containerd_config_keeps_everything_under_the_state_dir() {
        let cfg = containerd_config(&paths(), "localhost/localkube/pause:3.10-x").unwrap();
        assert!(cfg.contains("SystemdCgroup = false"));
        assert!(cfg.contains(r#"sandbox_image = "localhost/localkube/pause:3.10-x""#));
        assert!(cfg.contains("netns_mounts_under_state_dir = true"));
        // The image store (containerd's root) is the one place shared by
        // every node cluster of the cache; all else is the cluster's own.
        let root = cfg
            .lines()
            .find(|l| l.starts_with("root = "))
            .expect("root missing");
        assert_eq!(root, r#"root = "/cache/node-images/containerd""#);
        for key in [
            "state = ",
            "address = ",
            "conf_dir = ",
            "Root = ",
            "path = ",
        ] {
            let line = cfg
                .lines()
                .find(|l| l.trim_start().starts_with(key))
                .unwrap_or_else(|| panic!("{key} missing"));
            assert!(line.contains("/cache/cluster/unit/node/"), "{line}");
        }
        assert!(toml_path(Path::new("/a\"b")).is_err());
    }

    #[test]
    fn kubelet_and_proxy_configs_match_the_node() {
        let node = NodeConfig::for_cluster("unit");
        let np = NodePorts::for_ports(&Ports::for_name("unit"));
        let pki = PkiFiles {
            dir: PathBuf::from("/cache/cluster/unit/pki"),
        };
        let k: serde_yaml::Value =
            serde_yaml::from_str(&kubelet_config(&paths(), &node, &np, &pki, "unit").unwrap())
                .unwrap();
        assert_eq!(k["cgroupDriver"], "cgroupfs");
        assert_eq!(k["failSwapOn"], false);
        assert_eq!(k["cgroupRoot"], "/localkube-unit");
        assert_eq!(k["address"], NODE_IP);
        assert_eq!(k["imageGCHighThresholdPercent"], 100);
        assert_eq!(k["evictionPressureTransitionPeriod"], "10s");
        assert_eq!(k["authentication"]["anonymous"]["enabled"], false);
        assert!(k["containerRuntimeEndpoint"]
            .as_str()
            .unwrap()
            .starts_with("unix:///cache/cluster/unit/node/containerd/"));
        let p: serde_yaml::Value =
            serde_yaml::from_str(&proxy_config(&paths(), &node, &np).unwrap()).unwrap();
        assert_eq!(p["mode"], "iptables");
        assert_eq!(p["hostnameOverride"], "localkube-unit");
        assert_eq!(p["iptables"]["localhostNodePorts"], false);
        assert_eq!(p["conntrack"]["maxPerCore"], 0);
        let c: serde_json::Value = serde_json::from_str(&cni_conflist(
            "localkube-unit",
            POD_CIDR,
            &paths().cni_ipam_dir(),
        ))
        .unwrap();
        assert_eq!(c["plugins"][0]["bridge"], CNI_BRIDGE);
        assert_eq!(c["plugins"][0]["ipam"]["ranges"][0][0]["subnet"], POD_CIDR);
        assert_eq!(c["plugins"][1]["type"], "portmap");
    }

    #[test]
    fn pause_reference_changes_with_the_go_version() {
        let a = pause_reference("go1.26.0");
        let b = pause_reference("go1.26.1");
        assert!(a.starts_with("localhost/localkube/pause:3.10-"));
        assert_ne!(a, b);
    }
}
