//! The network of MPI's traffic (`--mpi-if-include`): the launcher's local
//! networks and the one that holds every worker.

use std::net::IpAddr;

/// One local IPv4 network: interface, address, prefix length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalNet {
    pub name: String,
    pub ip: IpAddr,
    pub prefix: u8,
}

fn contains(net: &LocalNet, ip: IpAddr) -> bool {
    match (net.ip, ip) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(net.prefix))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(b) & mask
        }
        _ => false,
    }
}

/// MPI's network for `--mpi-if-include`: `all` lets OpenMPI choose, `auto`
/// takes the network of the interface holding the launcher's IP (else the
/// one reaching worker 0) when every worker is inside it (with /32 pod
/// addresses, or workers on other subnets, OpenMPI chooses), anything else
/// is passed on as it is (a CIDR or an interface name).
pub fn pick_network(
    setting: &str,
    own_ip: Option<IpAddr>,
    nets: &[LocalNet],
    workers: &[IpAddr],
) -> Option<String> {
    match setting {
        "all" => None,
        "auto" => {
            let net = match own_ip {
                Some(ip) => nets.iter().find(|n| n.ip == ip),
                None => nets
                    .iter()
                    .find(|n| workers.first().is_some_and(|&w| contains(n, w))),
            }?;
            if !workers.iter().all(|&w| contains(net, w)) {
                return None;
            }
            let IpAddr::V4(a) = net.ip else { return None };
            let mask = u32::MAX
                .checked_shl(32 - u32::from(net.prefix))
                .unwrap_or(0);
            let base = std::net::Ipv4Addr::from(u32::from(a) & mask);
            Some(format!("{base}/{}", net.prefix))
        }
        other => Some(other.to_string()),
    }
}

/// This machine's IPv4 networks.
pub fn local_nets() -> Vec<LocalNet> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
        .filter_map(|a| {
            let ip = a.address?.as_sockaddr_in()?.ip();
            let mask = a.netmask?.as_sockaddr_in()?.ip();
            Some(LocalNet {
                name: a.interface_name,
                ip: IpAddr::V4(ip),
                prefix: u32::from(mask).count_ones() as u8,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(name: &str, ip: &str, prefix: u8) -> LocalNet {
        LocalNet {
            name: name.into(),
            ip: ip.parse().unwrap(),
            prefix,
        }
    }

    fn ips(v: &[&str]) -> Vec<IpAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn the_network_is_the_launchers_when_it_holds_every_worker() {
        let nets = [net("lo", "127.0.0.1", 8), net("eth0", "10.77.0.1", 24)];
        let w = ips(&["10.77.0.2", "10.77.0.3"]);
        let own = Some("10.77.0.1".parse().unwrap());
        assert_eq!(
            pick_network("auto", own, &nets, &w).as_deref(),
            Some("10.77.0.0/24")
        );
        assert_eq!(
            pick_network("auto", None, &nets, &w).as_deref(),
            Some("10.77.0.0/24")
        );
        // A /32 pod address (Calico) or a worker elsewhere: OpenMPI chooses.
        let nets = [net("eth0", "10.1.2.3", 32)];
        assert_eq!(pick_network("auto", own, &nets, &w), None);
        let nets = [net("eth0", "10.77.0.1", 24)];
        let w = ips(&["10.77.0.2", "10.78.0.3"]);
        assert_eq!(pick_network("auto", own, &nets, &w), None);
        assert_eq!(pick_network("all", own, &nets, &w), None);
        assert_eq!(
            pick_network("eth1", own, &nets, &w).as_deref(),
            Some("eth1")
        );
    }
}
