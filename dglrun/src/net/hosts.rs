//! Where the peers are: the workers (hostfile), the partitioner (partfile or
//! `--partitioner`) and DGL's ip_config. In a pod these come from the job's
//! ConfigMap (formats in `dgl_api::files`); on plain machines a hostfile may
//! simply list one IP per line.

use std::net::{IpAddr, SocketAddr};

use dgl_api::files::{self, Comments, FileFormatError, Line};

/// One worker as the launcher sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Index = partition id = line in ip_config.
    pub index: u32,
    pub ip: IpAddr,
    /// Its agent.
    pub agent: SocketAddr,
    /// The pod's name when the hostfile has one.
    pub pod: Option<String>,
    /// Trainer slots from the hostfile (`slots=<n>`).
    pub slots: Option<u32>,
}

impl Peer {
    /// `worker-<i>`, the prefix of its lines in the launcher's log.
    pub fn label(&self) -> String {
        format!("worker-{}", self.index)
    }

    /// `worker-<i>` plus the pod name, for error messages.
    pub fn describe(&self) -> String {
        match &self.pod {
            Some(p) => format!("worker-{} (pod {p}, {})", self.index, self.agent),
            None => format!("worker-{} ({})", self.index, self.agent),
        }
    }
}

/// A hostfile, partfile or ip_config that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error(transparent)]
    Format(#[from] FileFormatError),
    #[error("{file} lists no worker")]
    Empty { file: String },
    #[error("{0}")]
    Mismatch(String),
}

/// Parses a hostfile: per line either the operator's `<ip> <port> <pod>
/// [slots=<n>]` (the port is the agent's) or a bare `<ip>` (agent at
/// `default_port`). Comments (`#`) and blank lines are skipped.
pub fn parse_hostfile(
    file: &str,
    content: &str,
    default_port: u16,
) -> Result<Vec<Peer>, HostsError> {
    let peers = files::lines(file, content, Comments::Skipped)
        .zip(0..)
        .map(|(line, index)| parse_peer(&line, index, default_port))
        .collect::<Result<Vec<_>, _>>()?;
    if peers.is_empty() {
        return Err(HostsError::Empty {
            file: file.to_string(),
        });
    }
    Ok(peers)
}

/// Worker `index` from its hostfile line.
fn parse_peer(line: &Line<'_>, index: u32, default_port: u16) -> Result<Peer, FileFormatError> {
    if let [ip] = line.fields[..] {
        let ip: IpAddr = ip
            .parse()
            .map_err(|_| line.error(format!("expected an IP address, found {ip:?}")))?;
        return Ok(Peer {
            index,
            ip,
            agent: SocketAddr::new(ip, default_port),
            pod: None,
            slots: None,
        });
    }
    let h = files::parse_host_line(line)?;
    let ip = h.ip.ok_or_else(|| {
        line.error(format!(
            "pod {} has no IP yet (`-`); the launcher must start only when every worker has one",
            h.pod
        ))
    })?;
    Ok(Peer {
        index,
        ip,
        agent: SocketAddr::new(ip, h.port),
        pod: Some(h.pod),
        slots: h.slots,
    })
}

/// Parses `--partitioner`: `IP` or `IP:PORT`.
pub fn parse_addr(s: &str, default_port: u16) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, default_port))
        .map_err(|_| format!("expected IP or IP:PORT, found {s:?}"))
}

/// The partitioner's agent from a partfile (`<ip> <port> <pod>`).
pub fn parse_partfile(file: &str, content: &str) -> Result<SocketAddr, HostsError> {
    let hosts = files::parse_hosts(file, content)?;
    let h = hosts.first().ok_or_else(|| HostsError::Empty {
        file: file.to_string(),
    })?;
    let ip = h.ip.ok_or_else(|| {
        HostsError::Mismatch(format!(
            "{file}: the partitioner pod {} has no IP yet",
            h.pod
        ))
    })?;
    Ok(SocketAddr::new(ip, h.port))
}

/// Checks an ip_config against the workers: one line per worker, the same
/// IPs in the same order (DGL finds a machine's id by its IP, and the
/// launcher tells worker i that it is machine i).
pub fn check_ip_config(
    file: &str,
    content: &str,
    workers: &[Peer],
) -> Result<Vec<(IpAddr, u16)>, HostsError> {
    let machines = files::parse_ip_config(file, content)?;
    if machines.len() != workers.len() {
        return Err(HostsError::Mismatch(format!(
            "{file} has {} machine(s) but there are {} worker(s)",
            machines.len(),
            workers.len()
        )));
    }
    for (w, (ip, _)) in workers.iter().zip(&machines) {
        if *ip != w.ip {
            return Err(HostsError::Mismatch(format!(
                "{file} line {} is {ip}, but {} is at {}: both must list the workers in partition order",
                w.index + 1,
                w.label(),
                w.ip
            )));
        }
    }
    Ok(machines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ips_and_operator_lines() {
        let peers = parse_hostfile(
            "hosts",
            "# two machines\n10.0.0.1\n10.0.0.2 31000 job-worker-1 slots=2\n",
            30049,
        )
        .unwrap();
        assert_eq!(peers[0].agent, "10.0.0.1:30049".parse().unwrap());
        assert_eq!(peers[1].agent, "10.0.0.2:31000".parse().unwrap());
        assert_eq!(peers[1].slots, Some(2));
        assert_eq!(peers[1].label(), "worker-1");
        assert!(peers[1].describe().contains("job-worker-1"));
    }

    #[test]
    fn bad_hostfiles_name_the_line() {
        let e = parse_hostfile("hosts", "10.0.0.1\nworker-1\n", 1).unwrap_err();
        assert!(e.to_string().starts_with("hosts: line 2:"), "{e}");
        let e = parse_hostfile("hostfile", "- 30049 j-worker-0 slots=1\n", 1).unwrap_err();
        assert!(e.to_string().contains("no IP yet"), "{e}");
        assert!(parse_hostfile("h", "\n# x\n", 1).is_err());
    }

    #[test]
    fn ip_config_must_follow_the_workers() {
        let peers = parse_hostfile("h", "10.0.0.1\n10.0.0.2\n", 1).unwrap();
        check_ip_config("ip_config", "10.0.0.1 30050\n10.0.0.2 30050\n", &peers).unwrap();
        let e = check_ip_config("ip_config", "10.0.0.2\n10.0.0.1\n", &peers).unwrap_err();
        assert!(e.to_string().contains("partition order"), "{e}");
        let e = check_ip_config("ip_config", "10.0.0.1\n", &peers).unwrap_err();
        assert!(e.to_string().contains("1 machine(s)"), "{e}");
    }

    #[test]
    fn partitioner_addresses() {
        assert_eq!(
            parse_addr("10.0.0.3", 7).unwrap(),
            "10.0.0.3:7".parse().unwrap()
        );
        assert_eq!(
            parse_addr("10.0.0.3:9", 7).unwrap(),
            "10.0.0.3:9".parse().unwrap()
        );
        assert!(parse_addr("partitioner", 7).is_err());
        assert_eq!(
            parse_partfile("partfile", "10.0.0.3 30049 j-partitioner\n").unwrap(),
            "10.0.0.3:30049".parse().unwrap()
        );
    }
}
