//! The network of the extra nodes on the host: a network namespace per node
//! (bound to a file under the node's state dir, so the generic unmount of
//! the state dir removes it), its veth pair to the host, static neighbour
//! entries, the routes of `plan.rs`, and the NAT exemptions that keep pod
//! IPs between nodes. Every command is one `ip`/`iptables` call, run on the
//! host or, through setns(2) between fork and exec, in the node's namespace.
use std::path::Path;
use std::process::Command;

use super::plan::{self, ExtraNode, Route, NS_INTERFACE};
use crate::error::{Error, Result};
use crate::settings::NodeConfig;
use crate::{host, process, util};

/// `program args...` in the network namespace bound at `ns`; its stdout.
pub(crate) fn ns_run(ns: &Path, program: &str, args: &[&str]) -> Result<String> {
    let mut c = Command::new(program);
    c.args(args);
    process::enter_netns(&mut c, ns)?;
    host::run(&mut c)
}

/// True if a network namespace is bound at `file`.
pub(crate) fn is_bound(file: &Path) -> bool {
    host::mounts_under(file).iter().any(|m| m == file)
}

/// Creates a network namespace bound at `file` (util-linux `unshare
/// --net=<file>`, which bind-mounts the new namespace there); reuses one
/// that is already bound.
pub(crate) fn create(file: &Path) -> Result<()> {
    if is_bound(file) {
        return Ok(());
    }
    if let Some(dir) = file.parent() {
        util::create_dir_all(dir)?;
    }
    // The bind mount needs an existing file as its target.
    std::fs::write(file, b"").map_err(Error::io("creating", file))?;
    host::run(
        Command::new("unshare")
            .arg(format!("--net={}", file.display()))
            .arg("true"),
    )?;
    Ok(())
}

fn route(ns: Option<&Path>, r: &Route) -> Result<()> {
    let args = r.args();
    let mut all: Vec<&str> = vec!["route", "replace"];
    all.extend(args.iter().map(String::as_str));
    match ns {
        Some(ns) => ns_run(ns, "ip", &all).map(|_| ()),
        None => host::cmd("ip", &all).map(|_| ()),
    }
}

/// Adds `rule` (arguments after the chain) at the top of nat POSTROUTING,
/// unless it is there already.
fn nat_rule(ns: Option<&Path>, rule: &[String]) -> Result<()> {
    let run = |args: Vec<&str>| match ns {
        Some(ns) => ns_run(ns, "iptables", &args),
        None => host::cmd("iptables", &args),
    };
    let mut check = vec!["-w", "5", "-t", "nat", "-C", "POSTROUTING"];
    check.extend(rule.iter().map(String::as_str));
    if run(check).is_ok() {
        return Ok(());
    }
    // At the top: the CNI plugin appends a masquerade rule per pod.
    let mut insert = vec!["-w", "5", "-t", "nat", "-I", "POSTROUTING", "1"];
    insert.extend(rule.iter().map(String::as_str));
    run(insert).map(|_| ())
}

/// The veth pair, addresses, neighbours, routes, forwarding and NAT
/// exemptions of node `me`, in its (already created) namespace and on the
/// host. Node 0 (the host's node, holding `node0.node_ip`) must be up.
pub(crate) fn setup_node(
    cluster: &str,
    node0: &NodeConfig,
    extras: &[ExtraNode],
    me: &ExtraNode,
) -> Result<()> {
    let ns = me.netns.as_path();
    ns_run(ns, "ip", &["link", "set", "lo", "up"])?;
    // A pair left by a failed start: deleting one end deletes both.
    host::delete_link(&me.veth)?;
    // Created inside the namespace, the host's end moved out to the
    // namespace of this process (the host's) by pid.
    let pid = std::process::id().to_string();
    ns_run(
        ns,
        "ip",
        &[
            "link",
            "add",
            NS_INTERFACE,
            "address",
            &me.ns_mac,
            "type",
            "veth",
            "peer",
            "name",
            &me.veth,
            "address",
            &me.host_mac,
            "netns",
            &pid,
        ],
    )?;
    host::cmd("ip", &["link", "set", &me.veth, "up"])?;
    // Node 0's IP on the host's end too: kube-proxy's MASQUERADE takes the
    // outgoing link's address, and without one the kernel would pick the
    // host's real address, which no node namespace routes back.
    let host_addr = format!("{}/32", node0.node_ip);
    host::cmd("ip", &["addr", "replace", &host_addr, "dev", &me.veth])?;
    let addr = format!("{}/32", me.node.node_ip);
    ns_run(ns, "ip", &["addr", "replace", &addr, "dev", NS_INTERFACE])?;
    ns_run(ns, "ip", &["link", "set", NS_INTERFACE, "up"])?;
    // Static neighbours: no dependence on the host's ARP sysctls (arp_ignore).
    let neigh = |ip: &str, mac: &str, dev: &str| {
        [
            "neigh",
            "replace",
            ip,
            "lladdr",
            mac,
            "dev",
            dev,
            "nud",
            "permanent",
        ]
        .map(str::to_owned)
    };
    let n = neigh(&me.node.node_ip, &me.ns_mac, &me.veth);
    host::cmd("ip", &n.each_ref().map(String::as_str))?;
    let n = neigh(&node0.node_ip, &me.host_mac, NS_INTERFACE);
    ns_run(ns, "ip", &n.each_ref().map(String::as_str))?;
    for r in plan::host_routes(node0, std::slice::from_ref(me)) {
        route(None, &r)?;
    }
    for r in plan::ns_routes(node0, extras, me) {
        route(Some(ns), &r)?;
    }
    // Pods' traffic to other nodes is forwarded from the CNI bridge to eth0.
    ns_run(ns, "sh", &["-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"])?;
    let cidrs = plan::all_cidrs(node0, extras);
    for rule in plan::nat_exemptions(cluster, &me.node.pod_cidr, &cidrs) {
        nat_rule(Some(ns), &rule)?;
    }
    Ok(())
}

/// The host's (node 0's) NAT exemptions towards every other node's pods.
pub(crate) fn setup_host_nat(
    cluster: &str,
    node0: &NodeConfig,
    extras: &[ExtraNode],
) -> Result<()> {
    let cidrs = plan::all_cidrs(node0, extras);
    for rule in plan::nat_exemptions(cluster, &node0.pod_cidr, &cidrs) {
        nat_rule(None, &rule)?;
    }
    Ok(())
}

/// Deletes the host's NAT exemptions of `cluster`; how many there were.
pub(crate) fn remove_host_nat(cluster: &str) -> Result<usize> {
    host::remove_rules_mentioning("iptables", "nat", &plan::nat_comment(cluster))
}

/// The host's NAT exemptions of `cluster` still present (for leftovers).
pub(crate) fn host_nat_left(cluster: &str) -> usize {
    host::cmd("iptables", &["-w", "5", "-t", "nat", "-S", "POSTROUTING"])
        .map(|s| {
            s.lines()
                .filter(|l| l.contains(&plan::nat_comment(cluster)))
                .count()
        })
        .unwrap_or(0)
}

/// Host links that are the host's end of an extra node's veth pair.
pub(crate) fn host_veths() -> Vec<String> {
    std::fs::read_dir("/sys/class/net")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.strip_prefix("lkveth")
                        .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
                })
                .collect()
        })
        .unwrap_or_default()
}
