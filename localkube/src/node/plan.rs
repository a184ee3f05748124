//! The layout of a cluster of several nodes, as pure functions of the first
//! node's [`NodeConfig`]: names, IPs, pod CIDRs, links, MAC addresses, the
//! routes on the host and in each node's network namespace, and the NAT
//! exemptions. Nothing here touches the host, so all of it is unit-tested.
//!
//! Node 0 is the node of a single-node cluster, unchanged: in the host's
//! network namespace, node IP [`super::NODE_IP`] on [`super::NODE_INTERFACE`],
//! pods on [`super::CNI_BRIDGE`] in [`super::POD_CIDR`]. Node `i` (1..N) lives
//! in a network namespace of its own, joined to the host by a veth pair
//! (`lkveth<i>` on the host, `eth0` inside), with node IP = node 0's + `i`
//! (10.213.255.2, .3, ...) and pods in the `i`-th /24 after node 0's
//! (10.244.1.0/24, ...). The veth pairs are point-to-point links to the host,
//! so the host is every node's only neighbour: it routes each node's pod CIDR
//! via that node's IP (as kindnetd does between kind nodes), and each node
//! routes the other nodes' pod CIDRs and IPs via node 0's IP, the host.
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::layout::NodePaths;
use crate::error::{Error, Result};
use crate::settings::NodeConfig;
use crate::settings::SERVICE_CIDR;

/// Most nodes a cluster may have (a 2-core machine runs 3 comfortably).
pub const MAX_NODES: usize = 8;
/// The interface name of the node's end of its veth pair, inside its namespace.
pub(crate) const NS_INTERFACE: &str = "eth0";

/// One node beyond the first.
#[derive(Debug, Clone)]
pub(crate) struct ExtraNode {
    /// 1..N (node 0 is the host's node).
    pub index: usize,
    /// Node name, IP and pod CIDR (`nodes` is 1: this node alone).
    pub node: NodeConfig,
    /// The host's end of the veth pair (the node's end is [`NS_INTERFACE`]).
    pub veth: String,
    pub host_mac: String,
    pub ns_mac: String,
    /// `/<cgroup_root>` in every cgroup hierarchy: the kubelet's cgroupRoot.
    pub cgroup_root: String,
    /// CNI network name (names the CNI's cache files and iptables comments).
    pub cni_network: String,
    /// The node's state (`<state>/node/n<i>`) and its own containerd root.
    pub paths: NodePaths,
    /// The bind mount that keeps the network namespace alive.
    pub netns: PathBuf,
    /// Pid files of the node's processes.
    pub run_dir: PathBuf,
    /// Logs of the node's processes.
    pub log_dir: PathBuf,
}

/// A route: `ip route replace <dst> [via <via>] dev <dev> [src <src>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub dst: String,
    pub via: Option<String>,
    pub dev: String,
    pub src: Option<String>,
}

impl Route {
    /// The arguments after `ip route replace`. `onlink`: the gateway is on
    /// the point-to-point link even though no prefix of the link covers it.
    pub fn args(&self) -> Vec<String> {
        let mut a = vec![self.dst.clone()];
        if let Some(v) = &self.via {
            a.extend(["via".into(), v.clone()]);
        }
        a.extend(["dev".into(), self.dev.clone()]);
        if self.via.is_some() {
            a.push("onlink".into());
        } else {
            a.extend(["scope".into(), "link".into()]);
        }
        if let Some(s) = &self.src {
            a.extend(["src".into(), s.clone()]);
        }
        a
    }
}

/// The comment of the NAT rules that keep pod IPs between nodes; teardown
/// finds the host's rules by it.
pub(crate) fn nat_comment(cluster: &str) -> String {
    format!("localkube-{cluster}: pods across nodes keep their IPs")
}

/// `iptables -t nat` arguments (after `-I POSTROUTING 1`) of the rules that
/// exempt traffic from `own_cidr` to every other node's pod CIDR from the
/// CNI bridge plugin's masquerade, so a pod sees the other pod's real IP (a
/// NetworkPolicy needs it). Same-node traffic is not matched: kube-proxy's
/// masquerade of hairpin Service traffic must still apply.
pub(crate) fn nat_exemptions(cluster: &str, own_cidr: &str, others: &[&str]) -> Vec<Vec<String>> {
    others
        .iter()
        .filter(|c| **c != own_cidr)
        .map(|other| {
            [
                "-s",
                own_cidr,
                "-d",
                other,
                "-m",
                "comment",
                "--comment",
                &nat_comment(cluster),
                "-j",
                "RETURN",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
        })
        .collect()
}

fn parse_ip(field: &str, v: &str) -> Result<Ipv4Addr> {
    v.parse().map_err(|e| {
        Error::Invalid(format!(
            "{field} {v:?} is not an IPv4 address: {e} (expected e.g. 10.213.255.1)"
        ))
    })
}

/// Node `i`'s IP: node 0's plus `i` in the last octet.
fn nth_ip(base: &str, i: usize) -> Result<String> {
    let ip = parse_ip("node IP", base)?;
    let [a, b, c, d] = ip.octets();
    let last = u8::try_from(i)
        .ok()
        .and_then(|i| d.checked_add(i))
        .filter(|l| *l < 255)
        .ok_or_else(|| {
            Error::Invalid(format!(
                "node IP {base}: node {i}'s IP would leave {a}.{b}.{c}.0/24; use a smaller node IP or fewer nodes"
            ))
        })?;
    Ok(Ipv4Addr::new(a, b, c, last).to_string())
}

/// Node `i`'s pod CIDR: the `i`-th /24 after node 0's, which must be a /24.
fn nth_cidr(base: &str, i: usize) -> Result<String> {
    let (ip, len) = base.split_once('/').ok_or_else(|| {
        Error::Invalid(format!(
            "pod CIDR {base:?} has no prefix length (expected e.g. 10.244.0.0/24)"
        ))
    })?;
    if len != "24" {
        return Err(Error::Invalid(format!(
            "pod CIDR {base:?}: several nodes need a /24 per node (expected e.g. 10.244.0.0/24)"
        )));
    }
    let [a, b, c, d] = parse_ip("pod CIDR", ip)?.octets();
    if d != 0 {
        return Err(Error::Invalid(format!(
            "pod CIDR {base:?}: the address must end in .0"
        )));
    }
    let third = u8::try_from(i)
        .ok()
        .and_then(|i| c.checked_add(i))
        .ok_or_else(|| {
            Error::Invalid(format!(
                "pod CIDR {base}: node {i}'s /24 would leave {a}.{b}.0.0/16"
            ))
        })?;
    Ok(format!("{a}.{b}.{third}.0/24"))
}

/// Checks the node count of `node`.
pub(crate) fn validate_count(nodes: usize) -> Result<()> {
    if (1..=MAX_NODES).contains(&nodes) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "nodes = {nodes}: expected 1 to {MAX_NODES}"
        )))
    }
}

/// The nodes beyond the first of cluster `cluster` whose first node is
/// `node`; `state_dir` is `<cache>/cluster/<name>`, `images` node 0's
/// containerd root (each node gets its own root next to it: one containerd
/// per root).
pub(crate) fn extra_nodes(
    cluster: &str,
    node: &NodeConfig,
    state_dir: &Path,
    images: &Path,
) -> Result<Vec<ExtraNode>> {
    validate_count(node.nodes)?;
    let mut out = Vec::new();
    for i in 1..node.nodes {
        let dir = state_dir.join("node").join(format!("n{i}"));
        let root_name = format!(
            "{}-n{i}",
            images
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "containerd".into())
        );
        out.push(ExtraNode {
            index: i,
            node: NodeConfig {
                node_name: format!("{}-{i}", node.node_name),
                node_ip: nth_ip(&node.node_ip, i)?,
                pod_cidr: nth_cidr(&node.pod_cidr, i)?,
                install_packages: node.install_packages,
                nodes: 1,
            },
            veth: format!("lkveth{i}"),
            // Locally administered, fixed: static neighbour entries need them.
            host_mac: format!("02:6c:6b:00:{i:02x}:01"),
            ns_mac: format!("02:6c:6b:00:{i:02x}:02"),
            cgroup_root: format!("localkube-{cluster}-{i}"),
            cni_network: format!("localkube-{cluster}-{i}"),
            paths: NodePaths {
                dir: dir.clone(),
                images: images.with_file_name(root_name),
            },
            netns: dir.join("netns"),
            run_dir: state_dir.join("run").join(format!("n{i}")),
            log_dir: state_dir.join("logs").join(format!("n{i}")),
        });
    }
    Ok(out)
}

/// Routes on the host: each node's IP on its veth, its pod CIDR via its IP.
pub(crate) fn host_routes(node0: &NodeConfig, extras: &[ExtraNode]) -> Vec<Route> {
    let mut r = Vec::new();
    for e in extras {
        r.push(Route {
            dst: format!("{}/32", e.node.node_ip),
            via: None,
            dev: e.veth.clone(),
            src: Some(node0.node_ip.clone()),
        });
        r.push(Route {
            dst: e.node.pod_cidr.clone(),
            via: Some(e.node.node_ip.clone()),
            dev: e.veth.clone(),
            src: Some(node0.node_ip.clone()),
        });
    }
    r
}

/// Routes in node `me`'s namespace: node 0 (the host, which serves the
/// apiserver) on the link, and through it every other node's IP and pod
/// CIDR and the Service CIDR. No default route: nothing in a node's
/// namespace reaches beyond this machine.
pub(crate) fn ns_routes(node0: &NodeConfig, extras: &[ExtraNode], me: &ExtraNode) -> Vec<Route> {
    let host = node0.node_ip.clone();
    let src = Some(me.node.node_ip.clone());
    let via = |dst: String| Route {
        dst,
        via: Some(host.clone()),
        dev: NS_INTERFACE.into(),
        src: src.clone(),
    };
    let mut r = vec![Route {
        dst: format!("{host}/32"),
        via: None,
        dev: NS_INTERFACE.into(),
        src: src.clone(),
    }];
    r.push(via(node0.pod_cidr.clone()));
    for e in extras.iter().filter(|e| e.index != me.index) {
        r.push(via(format!("{}/32", e.node.node_ip)));
        r.push(via(e.node.pod_cidr.clone()));
    }
    r.push(via(SERVICE_CIDR.into()));
    r
}

/// Every node's pod CIDR, node 0's first.
pub(crate) fn all_cidrs<'a>(node0: &'a NodeConfig, extras: &'a [ExtraNode]) -> Vec<&'a str> {
    std::iter::once(node0.pod_cidr.as_str())
        .chain(extras.iter().map(|e| e.node.pod_cidr.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> (NodeConfig, Vec<ExtraNode>) {
        let mut n = NodeConfig::for_cluster("mn");
        n.nodes = 3;
        let e = extra_nodes(
            "mn",
            &n,
            Path::new("/c/cluster/mn"),
            Path::new("/c/node-images/containerd"),
        )
        .unwrap();
        (n, e)
    }

    #[test]
    fn extra_nodes_are_distinct_and_derived_from_node_0() {
        let (n, e) = three();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].node.node_name, "localkube-mn-1");
        assert_eq!(e[1].node.node_name, "localkube-mn-2");
        assert_eq!(e[0].node.node_ip, "10.213.255.2");
        assert_eq!(e[1].node.node_ip, "10.213.255.3");
        assert_eq!(e[0].node.pod_cidr, "10.244.1.0/24");
        assert_eq!(e[1].node.pod_cidr, "10.244.2.0/24");
        assert_eq!(e[1].veth, "lkveth2");
        assert_eq!(e[1].cgroup_root, "localkube-mn-2");
        assert_ne!(e[0].host_mac, e[0].ns_mac);
        assert_ne!(e[0].host_mac, e[1].host_mac);
        assert_eq!(
            e[0].paths.containerd_root(),
            Path::new("/c/node-images/containerd-n1")
        );
        assert!(e[0].netns.starts_with("/c/cluster/mn/node/n1"));
        assert_eq!(e[0].run_dir, Path::new("/c/cluster/mn/run/n1"));
        // Every link name fits IFNAMSIZ (15 characters).
        assert!(e.iter().all(|e| e.veth.len() <= 15));
        // One node: no extras, and the first node is unchanged.
        let one = NodeConfig::for_cluster("mn");
        assert!(extra_nodes("mn", &one, Path::new("/s"), Path::new("/i"))
            .unwrap()
            .is_empty());
        assert_eq!(n.node_ip, crate::settings::NODE_IP);
    }

    #[test]
    fn bad_counts_and_layouts_are_errors_naming_the_field() {
        let mut n = NodeConfig::for_cluster("mn");
        n.nodes = 0;
        let err = extra_nodes("mn", &n, Path::new("/s"), Path::new("/i")).unwrap_err();
        assert!(err.to_string().contains("nodes = 0"), "{err}");
        n.nodes = MAX_NODES + 1;
        assert!(extra_nodes("mn", &n, Path::new("/s"), Path::new("/i")).is_err());
        n.nodes = 2;
        n.pod_cidr = "10.244.0.0/16".into();
        let err = extra_nodes("mn", &n, Path::new("/s"), Path::new("/i")).unwrap_err();
        assert!(err.to_string().contains("pod CIDR"), "{err}");
        n.pod_cidr = "10.244.255.0/24".into();
        assert!(extra_nodes("mn", &n, Path::new("/s"), Path::new("/i")).is_err());
        n.pod_cidr = crate::settings::POD_CIDR.into();
        n.node_ip = "10.213.255.254".into();
        let err = extra_nodes("mn", &n, Path::new("/s"), Path::new("/i")).unwrap_err();
        assert!(err.to_string().contains("node IP"), "{err}");
        n.node_ip = "not-an-ip".into();
        assert!(extra_nodes("mn", &n, Path::new("/s"), Path::new("/i")).is_err());
    }

    #[test]
    fn routes_connect_every_pair_of_nodes_through_the_host() {
        let (n, e) = three();
        let host = host_routes(&n, &e);
        assert_eq!(
            host[1].args().join(" "),
            "10.244.1.0/24 via 10.213.255.2 dev lkveth1 onlink src 10.213.255.1"
        );
        assert_eq!(
            host[0].args().join(" "),
            "10.213.255.2/32 dev lkveth1 scope link src 10.213.255.1"
        );
        for me in &e {
            let r = ns_routes(&n, &e, me);
            let dsts: Vec<&str> = r.iter().map(|r| r.dst.as_str()).collect();
            // The host on the link, then everything else via it.
            assert_eq!(r[0].dst, "10.213.255.1/32");
            assert_eq!(r[0].via, None);
            assert!(r[1..]
                .iter()
                .all(|r| r.via.as_deref() == Some("10.213.255.1") && r.dev == NS_INTERFACE));
            assert!(dsts.contains(&"10.244.0.0/24"));
            assert!(dsts.contains(&SERVICE_CIDR));
            assert!(
                !dsts.contains(&me.node.pod_cidr.as_str()),
                "own CIDR is local"
            );
            assert!(!dsts.contains(&"0.0.0.0/0") && !dsts.contains(&"default"));
            for other in e.iter().filter(|o| o.index != me.index) {
                assert!(dsts.contains(&other.node.pod_cidr.as_str()));
                assert!(dsts.contains(&format!("{}/32", other.node.node_ip).as_str()));
            }
        }
    }

    #[test]
    fn nat_exemptions_skip_the_own_cidr() {
        let (n, e) = three();
        let cidrs = all_cidrs(&n, &e);
        let rules = nat_exemptions("mn", "10.244.1.0/24", &cidrs);
        assert_eq!(rules.len(), 2);
        assert!(rules.iter().all(|r| r[1] == "10.244.1.0/24"));
        let dsts: Vec<&str> = rules.iter().map(|r| r[3].as_str()).collect();
        assert_eq!(dsts, ["10.244.0.0/24", "10.244.2.0/24"]);
        assert!(rules[0].contains(&nat_comment("mn")));
        assert_eq!(rules[0].last().unwrap(), "RETURN");
    }
}
