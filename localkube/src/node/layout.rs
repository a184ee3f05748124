//! The node's layout: the host paths and files it uses, its state files
//! under `<state>/node/` (`NodePaths`), and what `up` records before it
//! changes the host (`HostRecord`). What the other node modules share;
//! imports none of them.
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::Client;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::handle::LocalCluster;
use crate::settings::NodeConfig;
use crate::util;

/// Where Debian's containernetworking-plugins installs the plugins.
pub(super) const CNI_BIN_DIR: &str = "/usr/lib/cni";
pub(super) const CONTAINERD_BIN: &str = "/usr/bin/containerd";
pub(super) const CTR_BIN: &str = "/usr/bin/ctr";
pub(super) const RUNC_BIN: &str = "/usr/sbin/runc";
/// Names the cluster that owns the host-global node resources.
pub(super) const HOST_MARKER: &str = "/run/localkube-node.json";

/// Sysctls the kubelet (`protectKernelDefaults: false`), the bridge plugin
/// (`ip_forward`) or kube-proxy may change; restored on teardown.
pub(super) const TRACKED_SYSCTLS: [&str; 12] = [
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
pub(super) const KUBE_PROXY_NFACCT: [&str; 2] = [
    "ct_state_invalid_dropped_pkts",
    "localhost_nps_accepted_pkts",
];

/// Host directories the components write to even though our own state lives
/// elsewhere: the kubelet's `/var/log/containers` symlinks, libcni's result
/// cache, the runc shims' socket dir. Removed on teardown if they did not
/// exist before `up` and are empty by then (only our entries are removed
/// from them otherwise). Not /run/netns: the CRI's network namespaces live
/// under our state dir, and other tools use /run/netns concurrently.
pub(super) const HOST_DIRS: [&str; 3] = ["/var/log/containers", "/var/lib/cni", "/run/containerd"];

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
    pub(super) fn record(&self) -> PathBuf {
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
    pub(super) fn containerd_state(&self) -> PathBuf {
        self.containerd_dir().join("state")
    }
    pub fn containerd_socket(&self) -> PathBuf {
        self.containerd_dir().join("containerd.sock")
    }
    pub(super) fn containerd_config(&self) -> PathBuf {
        self.containerd_dir().join("config.toml")
    }
    pub(super) fn runc_root(&self) -> PathBuf {
        self.containerd_dir().join("runc")
    }
    pub(super) fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni").join("net.d")
    }
    pub(super) fn cni_ipam_dir(&self) -> PathBuf {
        self.dir.join("cni").join("ipam")
    }
    pub fn kubelet_root(&self) -> PathBuf {
        self.dir.join("kubelet")
    }
    pub(super) fn kubelet_config(&self) -> PathBuf {
        self.dir.join("kubelet.yaml")
    }
    pub(super) fn kubelet_kubeconfig(&self) -> PathBuf {
        self.dir.join("kubelet.kubeconfig")
    }
    pub(super) fn proxy_config(&self) -> PathBuf {
        self.dir.join("kube-proxy.yaml")
    }
    pub(super) fn proxy_kubeconfig(&self) -> PathBuf {
        self.dir.join("kube-proxy.kubeconfig")
    }
    pub fn pod_logs(&self) -> PathBuf {
        self.dir.join("pod-logs")
    }
    /// Everything that is per run (deleted on `down`); the containerd root is not in it.
    pub(super) fn per_run_dirs(&self) -> Vec<PathBuf> {
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
pub(super) struct HostRecord {
    pub(super) cluster: String,
    pub(super) state_dir: PathBuf,
    pub(super) node: Option<NodeConfig>,
    /// Links we created (and therefore delete).
    pub(super) links: Vec<String>,
    /// `/localkube-<name>` in every cgroup v1 hierarchy.
    pub(super) cgroup_root: String,
    /// CNI network name (appears in the CNI plugins' iptables comments and cache files).
    pub(super) cni_network: String,
    /// Sysctl values before `up`.
    pub(super) sysctls: BTreeMap<String, String>,
    /// User-defined iptables chains before `up`, per "<binary> <table>".
    pub(super) chains_before: BTreeMap<String, BTreeSet<String>>,
    /// Host directories of [`HOST_DIRS`] that did not exist before `up`.
    pub(super) absent_dirs: Vec<PathBuf>,
    /// Debian packages `up` installed (reported, never removed: other tools may rely on them).
    pub(super) packages_installed: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct HostMarker {
    pub(super) cluster: String,
    pub(super) state_dir: PathBuf,
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
}

pub(super) fn read_record(paths: &NodePaths) -> Option<HostRecord> {
    let bytes = fs::read(paths.record()).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(file = %paths.record().display(), error = %e, "ignoring malformed host record");
            None
        }
    }
}

pub(super) fn write_record(paths: &NodePaths, rec: &HostRecord) -> Result<()> {
    let json = serde_json::to_vec_pretty(rec).map_err(|e| Error::Invalid(e.to_string()))?;
    util::write_atomic(&paths.record(), &json, 0o644)
}

pub(super) async fn node_ready(client: &Client, name: &str) -> bool {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.get_opt(name).await {
        Ok(Some(n)) => n
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        _ => false,
    }
}
