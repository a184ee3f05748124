//! A node cut off the network (chaos fault `NodeLoss`): every packet
//! between an extra node's namespace and the rest of the machine (the
//! control plane, node 0, the other nodes) dropped on the host's end of its
//! veth, as a failed NIC or a partitioned rack does. Its kubelet, containerd
//! and containers keep running but reach nothing and nothing reaches them:
//! the control plane marks the node NotReady once its lease is stale.
//! Rules, not `ip link set down`: taking the link down would drop the host's
//! routes through it, which a restore would have to rebuild.

use super::plan::ExtraNode;
use crate::error::{Error, Result};
use crate::handle::LocalCluster;
use crate::host;

/// The comment every rule of a cut carries, followed by the veth's name.
const COMMENT: &str = "localkube-node-cut";

/// The rules that cut `veth` off: (chain, match on the interface).
fn rules(veth: &str) -> [[String; 3]; 4] {
    let (i, o) = ("-i".to_string(), "-o".to_string());
    [
        ["INPUT".into(), i.clone(), veth.into()],
        ["OUTPUT".into(), o.clone(), veth.into()],
        ["FORWARD".into(), i, veth.into()],
        ["FORWARD".into(), o, veth.into()],
    ]
}

impl LocalCluster {
    /// The extra node named `node_name` (node 0 cannot be cut off: it is
    /// the host's own network namespace).
    fn extra_node_named(&self, node_name: &str) -> Result<ExtraNode> {
        self.recorded_extra_nodes()
            .into_iter()
            .find(|e| e.node.node_name == node_name)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{node_name:?} is not an extra node of cluster {:?} (node 0 shares the \
                     host's network and cannot be cut off)",
                    self.config().name
                ))
            })
    }

    /// Cuts node `node_name` off the network (idempotent).
    pub fn cut_node(&self, node_name: &str) -> Result<()> {
        let e = self.extra_node_named(node_name)?;
        let comment = format!("{COMMENT} {}", e.veth);
        for [chain, dir, veth] in rules(&e.veth) {
            let spec = [
                dir.as_str(),
                veth.as_str(),
                "-m",
                "comment",
                "--comment",
                comment.as_str(),
                "-j",
                "DROP",
            ];
            let mut check = vec!["-w", "5", "-t", "filter", "-C", chain.as_str()];
            check.extend(spec);
            if host::cmd("iptables", &check).is_ok() {
                continue;
            }
            // First in the chain: ahead of kube-proxy's and the CNI's accepts.
            let mut insert = vec!["-w", "5", "-t", "filter", "-I", chain.as_str(), "1"];
            insert.extend(spec);
            host::cmd("iptables", &insert)?;
        }
        Ok(())
    }

    /// Joins node `node_name` to the network again; returns how many rules
    /// it removed (0: it was not cut).
    pub fn restore_node(&self, node_name: &str) -> Result<usize> {
        uncut(&self.extra_node_named(node_name)?)
    }
}

/// Removes a cut of `e` (`cluster down` does, before it drains the node).
pub(crate) fn uncut(e: &ExtraNode) -> Result<usize> {
    host::remove_rules_mentioning("iptables", "filter", &format!("{COMMENT} {}", e.veth))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_drops_both_directions_and_forwarded_traffic() {
        let r = rules("lkveth1");
        let chains: Vec<&str> = r.iter().map(|x| x[0].as_str()).collect();
        assert_eq!(chains, ["INPUT", "OUTPUT", "FORWARD", "FORWARD"]);
        assert!(r.iter().all(|x| x[2] == "lkveth1"));
        assert!(r.iter().any(|x| x[0] == "FORWARD" && x[1] == "-i"));
        assert!(r.iter().any(|x| x[0] == "FORWARD" && x[1] == "-o"));
    }
}
