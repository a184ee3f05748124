//! What a cluster is made of, as data: its name, ports, components and
//! node settings. Both the control plane (`cluster`) and the node tier
//! (`node`) read these; this module imports neither.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::util;

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
pub(crate) const CONTROLLER_MANAGER: &str = "kube-controller-manager";
pub(crate) const SCHEDULER: &str = "kube-scheduler";
/// Start order; stop order is the reverse.
pub(crate) const COMPONENTS: [&str; 4] = [ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER];

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

    pub(crate) fn of(&self, component: &str) -> Vec<u16> {
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

/// The node's IP: not loopback (the `kubernetes` Endpoints must be valid and
/// reachable from pods), and in a range nothing else here uses.
pub const NODE_IP: &str = "10.213.255.1";
/// Pod subnet of the single node (host-local IPAM range).
pub const POD_CIDR: &str = "10.244.0.0/24";
/// The link that holds [`NODE_IP`] (a bridge without ports: this kernel has no `dummy`).
pub const NODE_INTERFACE: &str = "lknode0";
/// The CNI bridge the pods' veths attach to.
pub const CNI_BRIDGE: &str = "lkcni0";
/// containerd namespace the CRI plugin (and so the kubelet) uses.
pub const CRI_NAMESPACE: &str = "k8s.io";
/// Repository of the locally built sandbox image; the tag is a content hash.
pub const PAUSE_REPOSITORY: &str = "localhost/localkube/pause";
/// Debian packages the node needs; installed with apt-get when missing.
pub const NODE_PACKAGES: [&str; 6] = [
    "containerd",
    "runc",
    "containernetworking-plugins",
    "iptables",
    "conntrack",
    "iproute2",
];

pub(crate) const CONTAINERD: &str = "containerd";
pub(crate) const KUBELET: &str = "kubelet";
pub(crate) const KUBE_PROXY: &str = "kube-proxy";
/// Start order; stop order is the reverse.
pub(crate) const NODE_COMPONENTS: [&str; 3] = [CONTAINERD, KUBELET, KUBE_PROXY];

/// The node part of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeConfig {
    /// The Node object's name (`--hostname-override`).
    pub node_name: String,
    /// The node IP (see [`NODE_IP`]).
    pub node_ip: String,
    /// The pod subnet (see [`POD_CIDR`]).
    pub pod_cidr: String,
    /// Install missing Debian packages ([`NODE_PACKAGES`]) with apt-get.
    #[serde(default = "yes")]
    pub install_packages: bool,
    /// How many nodes: this one (node 0, in the host's network namespace)
    /// and `nodes - 1` more, each in a network namespace of its own (see
    /// `node/plan.rs`). 1 to [`crate::MAX_NODES`].
    #[serde(default = "one")]
    pub nodes: usize,
}

fn yes() -> bool {
    true
}

fn one() -> usize {
    1
}

impl NodeConfig {
    /// Defaults for cluster `name`: node `localkube-<name>`, [`NODE_IP`], [`POD_CIDR`].
    pub fn for_cluster(name: &str) -> NodeConfig {
        NodeConfig {
            node_name: format!("localkube-{name}"),
            node_ip: NODE_IP.into(),
            pod_cidr: POD_CIDR.into(),
            install_packages: true,
            nodes: 1,
        }
    }
}

/// Node ports; like [`Ports`], fixed per cluster name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePorts {
    /// kubelet API, on the node IP (the apiserver calls it for logs/exec).
    pub kubelet: u16,
    /// kubelet `/healthz`, on 127.0.0.1.
    pub kubelet_healthz: u16,
    /// kube-proxy `/healthz`, on 127.0.0.1.
    pub proxy_healthz: u16,
    /// kube-proxy `/metrics`, on 127.0.0.1.
    pub proxy_metrics: u16,
}

impl NodePorts {
    /// The Kubernetes defaults (10250, 10248, 10256, 10249) shifted by the
    /// same per-name offset as the control-plane ports.
    pub fn for_ports(p: &Ports) -> NodePorts {
        let offset = p.apiserver.saturating_sub(6443);
        NodePorts {
            kubelet: 10250 + offset,
            kubelet_healthz: 10248 + offset,
            proxy_healthz: 10256 + offset,
            proxy_metrics: 10249 + offset,
        }
    }
}
