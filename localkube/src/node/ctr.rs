//! `ctr` against one node's containerd (each node of a multi-node cluster
//! has its own socket): images, labels, and removing every container.
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::layout::CTR_BIN;
use crate::error::Result;
use crate::handle::LocalCluster;
use crate::host;
use crate::settings::CRI_NAMESPACE;

/// `ctr --address <socket> --namespace k8s.io`, ready for more args.
pub(super) fn ctr_at(socket: &Path) -> Command {
    let mut c = Command::new(CTR_BIN);
    c.arg("--address")
        .arg(socket)
        .args(["--namespace", CRI_NAMESPACE]);
    c
}

pub(super) fn images_at(socket: &Path) -> Result<Vec<String>> {
    let out = host::run(ctr_at(socket).args(["images", "ls", "-q"]))?;
    Ok(out.lines().map(|l| l.trim().to_owned()).collect())
}

pub(super) fn image_labels_at(
    socket: &Path,
    reference: &str,
) -> Result<Option<BTreeMap<String, String>>> {
    let out = host::run(
        ctr_at(socket)
            .args(["images", "ls"])
            .arg(format!("name=={reference}")),
    )?;
    // Columns: REF TYPE DIGEST SIZE PLATFORMS LABELS ("-" when none).
    let Some(line) = out.lines().skip(1).find(|l| l.starts_with(reference)) else {
        return Ok(None);
    };
    let labels = line.split_whitespace().last().unwrap_or("-");
    let mut map = BTreeMap::new();
    if labels != "-" {
        for kv in labels.split(',') {
            if let Some((k, v)) = kv.split_once('=') {
                map.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    Ok(Some(map))
}

/// `ctr images rm --sync`: removes `reference` (if there) and returns only
/// once containerd's garbage collection has run, so no collection of its
/// layers is still pending when the next import unpacks.
pub(super) fn remove_image_at(socket: &Path, reference: &str) -> Result<()> {
    if !images_at(socket)?.iter().any(|r| r == reference) {
        return Ok(());
    }
    host::run(ctr_at(socket).args(["images", "rm", "--sync", reference])).map(|_| ())
}

pub(super) fn label_image_at(socket: &Path, reference: &str, key: &str, value: &str) -> Result<()> {
    host::run(
        ctr_at(socket)
            .args(["images", "label", reference])
            .arg(format!("{key}={value}")),
    )
    .map(|_| ())
}

/// Kills and deletes every task and container in one containerd's CRI namespace.
pub(super) fn remove_all_containers_at(socket: &Path) -> Result<usize> {
    let tasks = host::run(ctr_at(socket).args(["tasks", "ls", "-q"]))?;
    for id in tasks.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let _ = host::run(ctr_at(socket).args(["tasks", "kill", "-s", "SIGKILL", id]));
        // `tasks delete` waits for the exit and makes the shim leave.
        for _ in 0..20 {
            if host::run(ctr_at(socket).args(["tasks", "delete", id])).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    let containers = host::run(ctr_at(socket).args(["containers", "ls", "-q"]))?;
    let ids: Vec<&str> = containers
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    for id in &ids {
        if let Err(e) = host::run(ctr_at(socket).args(["containers", "delete", id])) {
            tracing::warn!(%e, container = id, "could not delete container");
        }
    }
    Ok(ids.len())
}

impl LocalCluster {
    /// `ctr --address <socket> --namespace k8s.io` of node 0, ready for more args.
    pub fn ctr(&self) -> Command {
        ctr_at(&self.containerd_socket())
    }
}
