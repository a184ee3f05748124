//! What the bench's steps share: its addresses and ports, units, the link
//! a run is shaped to, a row of results and one measured transfer. A leaf
//! the step modules import, so none of them imports `mod.rs`.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

pub(super) const GRAPH: &str = "bench";
/// Both dglrun agents listen on the default agent port in their own namespace.
pub(super) const AGENT_PORT: u16 = dgl_api::names::AGENT_PORT;
/// The plain copy's receivers.
pub(super) const PLAIN_PORT: u16 = 30100;
pub(super) const PARTITIONER_IP: Ipv4Addr = Ipv4Addr::new(10, 213, 1, 1);
/// Read/write buffer of the plain copy (dglrun's receive buffer is also 256 KiB).
pub(super) const PLAIN_BUF: usize = 256 * 1024;
pub(super) const MB: f64 = 1e6;
pub(super) const MIB: u64 = 1 << 20;
/// The partitioner's uplink: unshaped, or a token bucket of this rate.
#[derive(Clone, Copy)]
pub(super) enum Link {
    Unshaped,
    Gbit(f64),
}

impl Link {
    pub(super) fn from_gbit(g: f64) -> Link {
        if g == 0.0 {
            Link::Unshaped
        } else {
            Link::Gbit(g)
        }
    }

    pub(super) fn label(&self) -> String {
        match self {
            Link::Unshaped => "unshaped".into(),
            Link::Gbit(g) => format!("{g} Gbit/s"),
        }
    }

    /// `tc` arguments after `qdisc add dev eth0 root`. The bucket holds 1 ms
    /// of the rate (at least 256 KiB: veth hands over 64 KiB GSO packets, a
    /// smaller bucket would cap the rate below what is asked); the queue
    /// holds 20 ms, so TCP sees a deep NIC queue, not drops.
    pub(super) fn tbf_args(&self) -> Option<Vec<String>> {
        let Link::Gbit(g) = self else { return None };
        let bytes_per_sec = g * 1e9 / 8.0;
        let burst = ((bytes_per_sec / 1000.0) as u64).max(256 * 1024);
        Some(vec![
            "tbf".into(),
            "rate".into(),
            format!("{}kbit", (g * 1e6).round() as u64),
            "burst".into(),
            burst.to_string(),
            "latency".into(),
            "20ms".into(),
        ])
    }
}

/// One worker count's results on one link.
pub(super) struct Row {
    pub(super) workers: u32,
    pub(super) link: Link,
    pub(super) total_bytes: u64,
    /// Partitioner start → it answers (its partition step does nothing).
    pub(super) manifest_secs: f64,
    /// Then: connect, manifest, `Fetch` of the largest file → its first byte.
    pub(super) first_byte_secs: f64,
    pub(super) dglrun: Vec<Run>,
    /// One list per `Plain::ALL` mode.
    pub(super) plain: Vec<Vec<Run>>,
}

/// One measured transfer.
#[derive(Clone, Copy)]
pub(super) struct Run {
    pub(super) secs: f64,
    /// CPU seconds of the sending side (dglrun: the partitioner process).
    pub(super) sender_cpu: f64,
    /// CPU seconds of the receiving side (dglrun: the worker processes).
    pub(super) receiver_cpu: f64,
    /// Busy CPU seconds of the whole machine over the transfer (every
    /// process, kernel threads and softirqs too): shows how close to all
    /// CPUs a path ran, which the per-process figures miss.
    pub(super) machine_cpu: f64,
}

impl Run {
    pub(super) fn mbps(&self, bytes: u64) -> f64 {
        bytes as f64 / MB / self.secs
    }

    pub(super) fn describe(&self, what: &str, bytes: u64) -> String {
        format!(
            "{what}: {:.2}s, {:.0} MB/s, CPU s sender {:.2} + receivers {:.2}, machine {:.2} ({:.2} CPUs busy)",
            self.secs,
            self.mbps(bytes),
            self.sender_cpu,
            self.receiver_cpu,
            self.machine_cpu,
            self.machine_cpu / self.secs
        )
    }
}

pub(super) fn worker_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(
        10,
        213,
        1,
        10 + u8::try_from(i).expect("at most 64 workers"),
    )
}

pub(super) fn plain_dest(root: &Path, i: u32) -> PathBuf {
    root.join(format!("worker-{i}"))
        .join(dgl_api::names::DATASET_DIR)
}

pub(super) fn nanos() -> u128 {
    std::time::UNIX_EPOCH
        .elapsed()
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}
