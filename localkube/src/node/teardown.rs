//! The node teardown: stopping the components, then sweeping exactly the
//! host changes the host record lists, and the report of what was done.
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use kube::Client;

use super::ctr::*;
use super::layout::*;
use crate::error::{Error, Result};
use crate::handle::{blocking, LocalCluster};
use crate::process::{self};
use crate::settings::{
    NodeConfig, CNI_BRIDGE, CONTAINERD, KUBELET, KUBE_PROXY, NODE_COMPONENTS, NODE_INTERFACE,
};
use crate::util::{self, progress};
use crate::{host, kubeconfig};

/// What a node teardown did, for the caller's report.
#[derive(Debug, Clone, Default)]
pub struct NodeTeardown {
    pub stopped: Vec<(&'static str, i32)>,
    pub pods_deleted: usize,
    pub containers_removed: usize,
    pub stray_processes_killed: Vec<i32>,
    pub mounts_removed: Vec<PathBuf>,
    pub links_removed: Vec<String>,
    pub chains_removed: Vec<String>,
    pub nfacct_removed: Vec<String>,
    pub sysctls_restored: Vec<(String, String)>,
    pub paths_removed: Vec<PathBuf>,
    pub warnings: Vec<String>,
}

impl NodeTeardown {
    /// One line per kind of host change reverted.
    pub fn summary(&self) -> Vec<String> {
        let mut s = Vec::new();
        if self.pods_deleted > 0 {
            s.push(format!("deleted {} pod(s) on the node", self.pods_deleted));
        }
        if self.containers_removed > 0 {
            s.push(format!(
                "removed {} leftover container(s)",
                self.containers_removed
            ));
        }
        if !self.stray_processes_killed.is_empty() {
            s.push(format!(
                "killed stray processes {:?}",
                self.stray_processes_killed
            ));
        }
        if !self.mounts_removed.is_empty() {
            s.push(format!("unmounted {} mount(s)", self.mounts_removed.len()));
        }
        if !self.links_removed.is_empty() {
            s.push(format!("deleted links {}", self.links_removed.join(", ")));
        }
        if !self.chains_removed.is_empty() {
            s.push(format!(
                "deleted {} iptables chain(s)",
                self.chains_removed.len()
            ));
        }
        if !self.nfacct_removed.is_empty() {
            s.push(format!(
                "deleted nfacct counters {}",
                self.nfacct_removed.join(", ")
            ));
        }
        for (k, v) in &self.sysctls_restored {
            s.push(format!("restored sysctl {k}={v}"));
        }
        for p in &self.paths_removed {
            s.push(format!("removed {}", p.display()));
        }
        for w in &self.warnings {
            s.push(format!("warning: {w}"));
        }
        s
    }
}

impl LocalCluster {
    // ------------------------------------------------------------ down

    /// True if a node was (or may have been) started for this cluster.
    pub(crate) fn has_node_state(&self) -> bool {
        let paths = self.node_paths();
        paths.record().exists()
            || NODE_COMPONENTS
                .iter()
                .any(|c| process::read_pid(&self.run_dir(), c).is_some())
    }

    /// First half of the node teardown, while the control plane still runs:
    /// drains the node and stops kube-proxy, the kubelet, leftover
    /// containers and containerd. Best effort per step: failures become
    /// warnings in the report, so one stuck step does not leave the rest
    /// behind. [`Self::sweep_node_host`] finishes after the control plane
    /// has stopped (its clients talk to the apiserver over the node IP,
    /// which the sweep removes).
    pub(crate) async fn stop_node(&self) -> NodeTeardown {
        // Nodes 1..N first, the same way.
        let mut report = self.stop_extra_nodes().await;
        let paths = self.node_paths();
        let rec = read_record(&paths);
        let node_name = rec
            .as_ref()
            .and_then(|r| r.node.as_ref())
            .map(|n| n.node_name.clone())
            .unwrap_or_else(|| NodeConfig::for_cluster(&self.config().name).node_name);

        // 1. Let the kubelet stop the pods: it runs the CNI DEL, unmounts
        //    the volumes and removes the sandboxes' network namespaces.
        if self.component_running(KUBELET, None) {
            match self.drain(&node_name).await {
                Ok(n) => report.pods_deleted += n,
                Err(e) => report.warnings.push(format!("draining {node_name}: {e}")),
            }
        }
        // 2. kube-proxy, kubelet.
        for name in [KUBE_PROXY, KUBELET] {
            stop_recorded(&self.run_dir(), name, &mut report).await;
        }
        // 3. Containers the kubelet did not get to, then containerd.
        if self.component_running(CONTAINERD, None) {
            let this = self.clone();
            match blocking(move || this.remove_all_containers()).await {
                Ok(n) => report.containers_removed += n,
                Err(e) => report.warnings.push(format!("removing containers: {e}")),
            }
        }
        stop_recorded(&self.run_dir(), CONTAINERD, &mut report).await;
        report
    }

    /// Second half of the node teardown: reverts every recorded host change
    /// (see `sweep_host`). Returns an error only if something is still left
    /// afterwards.
    pub(crate) async fn sweep_node_host(&self, report: NodeTeardown) -> Result<NodeTeardown> {
        let rec = read_record(&self.node_paths());
        let this = self.clone();
        let report = blocking(move || {
            let mut report = report;
            this.sweep_host(rec.as_ref(), &mut report);
            Ok(report)
        })
        .await?;
        for line in report.summary() {
            progress!("node teardown: {line}");
        }
        // Anything left is an error: the caller must not believe the host is clean.
        let left = self.leftovers();
        if !left.is_empty() {
            return Err(Error::Invalid(format!(
                "node teardown of cluster {:?} left: {}",
                self.config().name,
                left.join("; ")
            )));
        }
        Ok(report)
    }

    /// Deletes every pod bound to the node and waits (up to 90 s) until the
    /// kubelet has finished them. Returns how many pods there were.
    pub(super) async fn drain(&self, node_name: &str) -> Result<usize> {
        let mut config = kubeconfig::config_from_file(&self.kubeconfig_path()).await?;
        config.connect_timeout = Some(Duration::from_secs(2));
        config.read_timeout = Some(Duration::from_secs(10));
        let client = Client::try_from(config)?;
        let pods: Api<Pod> = Api::all(client.clone());
        let lp = ListParams::default().fields(&format!("spec.nodeName={node_name}"));
        let list = pods.list(&lp).await?;
        let n = list.items.len();
        if n > 0 {
            progress!("node teardown: deleting {n} pod(s) on {node_name}");
        }
        for p in list.items {
            let (Some(ns), Some(name)) = (p.metadata.namespace, p.metadata.name) else {
                continue;
            };
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let dp = DeleteParams {
                grace_period_seconds: Some(2),
                ..DeleteParams::default()
            };
            match api.delete(&name, &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let left = pods.list(&lp).await.map(|l| l.items.len()).unwrap_or(0);
            if left == 0 {
                return Ok(n);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("{left} pod(s) on {node_name} to terminate"),
                    seconds: 90,
                    hint: Some(format!(
                        "see {}",
                        process::log_file(&self.log_dir(), KUBELET).display()
                    )),
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Kills and deletes every task and container in node 0's CRI namespace.
    pub(super) fn remove_all_containers(&self) -> Result<usize> {
        remove_all_containers_at(&self.containerd_socket())
    }

    /// Reverts the host changes after every node process has been stopped.
    pub(super) fn sweep_host(&self, rec: Option<&HostRecord>, report: &mut NodeTeardown) {
        let paths = self.node_paths();
        let global = !self.host_owned_by_other();
        if !global {
            // Only our own processes, mounts and state; the host-global
            // links, iptables rules and sysctls are the owner's.
            report.warnings.push(format!(
                "{HOST_MARKER} names another cluster; left links, iptables and sysctls alone"
            ));
        }
        self.sweep_extra_nodes(global, report);
        kill_shims(&paths, report);
        let cgroup_root = rec
            .map(|r| r.cgroup_root.clone())
            .unwrap_or_else(|| format!("localkube-{}", self.config().name));
        remove_cgroup_and_mounts(&cgroup_root, &paths, report);
        if global {
            remove_links(rec, report);
        }
        if let Some(rec) = rec.filter(|_| global) {
            remove_iptables(rec, report);
            remove_nfacct(rec, report);
            restore_sysctls(rec, report);
        }
        let network = rec
            .map(|r| r.cni_network.clone())
            .unwrap_or_else(|| format!("localkube-{}", self.config().name));
        remove_host_files(rec, &paths, &network, report);
        self.remove_node_state(&paths, report);
    }

    /// Per-run state (the containerd root with the images stays), then the
    /// host marker, then the record that justified it.
    pub(super) fn remove_node_state(&self, paths: &NodePaths, report: &mut NodeTeardown) {
        for d in paths.per_run_dirs() {
            if let Err(e) = util::remove_dir_all_if_exists(&d) {
                warn(report, "removing node state", e);
            }
        }
        let _ = util::remove_file_if_exists(&paths.containerd_socket());
        let owned = fs::read(HOST_MARKER)
            .ok()
            .and_then(|b| serde_json::from_slice::<HostMarker>(&b).ok())
            .is_some_and(|m| m.state_dir == self.state_dir());
        if owned {
            if let Err(e) = util::remove_file_if_exists(Path::new(HOST_MARKER)) {
                warn(report, "removing the host marker", e);
            }
        }
        if report.warnings.is_empty() {
            let _ = util::remove_file_if_exists(&paths.record());
        }
    }

    /// True if the host marker names another cluster (whose links and
    /// iptables rules must not be touched).
    pub(super) fn host_owned_by_other(&self) -> bool {
        fs::read(HOST_MARKER)
            .ok()
            .and_then(|b| serde_json::from_slice::<HostMarker>(&b).ok())
            .is_some_and(|m| m.state_dir != self.state_dir())
    }

    /// What of this node is still on the host (empty when clean).
    pub fn leftovers(&self) -> Vec<String> {
        let paths = self.node_paths();
        let mut left = Vec::new();
        for c in NODE_COMPONENTS {
            if self.component_running(c, None) {
                left.push(format!("{c} is running"));
            }
        }
        let needle = paths.dir.display().to_string();
        let procs = host::pids_with_cmdline(&needle);
        if !procs.is_empty() {
            left.push(format!("processes naming {needle}: {procs:?}"));
        }
        // The links are host-global: while another cluster owns the host they are its.
        if !self.host_owned_by_other() {
            for link in [NODE_INTERFACE, CNI_BRIDGE] {
                if host::link_exists(link) {
                    left.push(format!("link {link}"));
                }
            }
        }
        let mounts = host::mounts_under(&paths.dir);
        if !mounts.is_empty() {
            left.push(format!("mounts {mounts:?}"));
        }
        let cg = format!("localkube-{}", self.config().name);
        for h in host::cgroup_hierarchies() {
            if h.join(&cg).exists() {
                left.push(format!("cgroup {}", h.join(&cg).display()));
            }
        }
        left.extend(self.extra_leftovers());
        left
    }
}

/// A teardown step that failed: noted, and the teardown goes on.
pub(super) fn warn(report: &mut NodeTeardown, what: &str, e: Error) {
    report.warnings.push(format!("{what}: {e}"));
}

/// Shims of our containerd outlive it by design; they name its socket.
pub(super) fn kill_shims(paths: &NodePaths, report: &mut NodeTeardown) {
    let socket = paths.containerd_socket().display().to_string();
    let shims: Vec<i32> = host::pids_with_cmdline(&socket)
        .into_iter()
        .filter(|pid| {
            fs::read_link(format!("/proc/{pid}/exe"))
                .map(|e| e.to_string_lossy().contains("containerd-shim"))
                .unwrap_or(false)
        })
        .collect();
    if !shims.is_empty() {
        host::kill_and_wait(&shims, Duration::from_secs(10));
        report.stray_processes_killed.extend(&shims);
    }
}

/// Container processes and the cgroup tree itself; then the mounts:
/// volumes under the kubelet dir, container rootfs and netns mounts under
/// the containerd state dir.
pub(super) fn remove_cgroup_and_mounts(
    cgroup_root: &str,
    paths: &NodePaths,
    report: &mut NodeTeardown,
) {
    match host::remove_cgroup_root(cgroup_root) {
        Ok(pids) => report.stray_processes_killed.extend(pids),
        Err(e) => warn(report, "removing the cgroup root", e),
    }
    match host::unmount_all_under(&paths.dir) {
        Ok(m) => report.mounts_removed.extend(m),
        Err(e) => warn(report, "unmounting", e),
    }
}

/// Pod veths first (normally gone with their netns), then the bridges.
pub(super) fn remove_links(rec: Option<&HostRecord>, report: &mut NodeTeardown) {
    for port in host::bridge_ports(CNI_BRIDGE) {
        match host::delete_link(&port) {
            Ok(true) => report.links_removed.push(port),
            Ok(false) => {}
            Err(e) => warn(report, "deleting a pod veth", e),
        }
    }
    let links: Vec<String> = match rec {
        Some(r) => r.links.clone(),
        None => vec![CNI_BRIDGE.into(), NODE_INTERFACE.into()],
    };
    for link in links {
        match host::delete_link(&link) {
            Ok(true) => report.links_removed.push(link),
            Ok(false) => {}
            Err(e) => warn(report, "deleting a link", e),
        }
    }
}

/// iptables: the CNI's rules, and only chains that did not exist before `up`.
pub(super) fn remove_iptables(rec: &HostRecord, report: &mut NodeTeardown) {
    for bin in host::IPTABLES_BINARIES {
        for table in host::IPTABLES_TABLES {
            let Some(before) = rec.chains_before.get(&format!("{bin} {table}")) else {
                continue;
            };
            let network = format!("\\\"{}\\\"", rec.cni_network);
            if let Err(e) = host::remove_rules_mentioning(bin, table, &network) {
                warn(report, "deleting CNI rules", e);
            }
            match host::remove_new_chains(bin, table, before, &["KUBE-", "CNI-"]) {
                Ok(c) => report
                    .chains_removed
                    .extend(c.into_iter().map(|c| format!("{bin} {table} {c}"))),
                Err(e) => warn(report, "deleting iptables chains", e),
            }
        }
    }
}

/// kube-proxy's accounting objects, unless a kube-proxy ran here before us.
pub(super) fn remove_nfacct(rec: &HostRecord, report: &mut NodeTeardown) {
    let kube_before = rec
        .chains_before
        .values()
        .flatten()
        .any(|c| c.starts_with("KUBE-"));
    if kube_before {
        return;
    }
    for counter in KUBE_PROXY_NFACCT {
        match host::nfacct_delete(counter) {
            Ok(true) => report.nfacct_removed.push(counter.to_owned()),
            Ok(false) => {}
            Err(e) => warn(report, "deleting an nfacct counter", e),
        }
    }
}

/// Sysctls, where they still hold what our components set.
pub(super) fn restore_sysctls(rec: &HostRecord, report: &mut NodeTeardown) {
    for (k, before) in &rec.sysctls {
        if host::sysctl_read(k).as_deref() != Some(before.as_str()) {
            match host::sysctl_write(k, before) {
                Ok(()) => report.sysctls_restored.push((k.clone(), before.clone())),
                Err(e) => warn(report, "restoring a sysctl", e),
            }
        }
    }
}

/// Files outside the state dir: the pods' log links, the CNI's results,
/// and the host directories `up` created.
pub(super) fn remove_host_files(
    rec: Option<&HostRecord>,
    paths: &NodePaths,
    network: &str,
    report: &mut NodeTeardown,
) {
    let pod_logs = paths.pod_logs();
    if let Ok(rd) = fs::read_dir("/var/log/containers") {
        for e in rd.flatten() {
            let ours = fs::read_link(e.path())
                .map(|t| t.starts_with(&pod_logs))
                .unwrap_or(false);
            if ours && fs::remove_file(e.path()).is_ok() {
                report.paths_removed.push(e.path());
            }
        }
    }
    if let Ok(rd) = fs::read_dir("/var/lib/cni/results") {
        for e in rd.flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{network}-"))
                && fs::remove_file(e.path()).is_ok()
            {
                report.paths_removed.push(e.path());
            }
        }
    }
    for dir in rec.iter().flat_map(|r| &r.absent_dirs) {
        if dir.exists() {
            match remove_empty_tree(dir) {
                Ok(true) => report.paths_removed.push(dir.clone()),
                Ok(false) => report.warnings.push(format!(
                    "{} did not exist before `up` and is not empty now; left in place",
                    dir.display()
                )),
                Err(e) => warn(report, "removing a host directory", e),
            }
        }
    }
}

/// Removes `dir` if it (recursively) holds only empty directories; true if removed.
pub(super) fn remove_empty_tree(dir: &Path) -> Result<bool> {
    let mut empty = true;
    for e in fs::read_dir(dir)
        .map_err(Error::io("reading", dir))?
        .flatten()
    {
        let p = e.path();
        let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
        if !(is_dir && remove_empty_tree(&p)?) {
            empty = false;
        }
    }
    if empty {
        fs::remove_dir(dir).map_err(Error::io("removing", dir))?;
    }
    Ok(empty)
}

/// Stops the process of a pid file in `run_dir`, noting it in `report`.
pub(super) async fn stop_recorded(run_dir: &Path, name: &'static str, report: &mut NodeTeardown) {
    let Some(rec) = process::read_pid(run_dir, name) else {
        return;
    };
    let running = process::is_running(&rec);
    let r = rec.clone();
    match blocking(move || process::stop(&r, Duration::from_secs(15))).await {
        Ok(()) if running => report.stopped.push((name, rec.pid)),
        Ok(()) => {}
        Err(e) => report.warnings.push(e.to_string()),
    }
}
