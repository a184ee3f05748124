//! Nodes 1..N of a multi-node cluster (`NodeConfig::nodes > 1`): each runs
//! its own containerd (own root, state and socket), kubelet (own root dir,
//! cgroup root and node name) and kube-proxy in a network namespace of its
//! own (see `plan.rs` for the layout, `netns.rs` for the links and routes).
//! Node 0 is started, stopped and swept exactly as in a single-node cluster;
//! the functions here run right after (start) or right before (teardown) it.
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::ctr::ctr_at;
use super::ctr::image_labels_at;
use super::ctr::images_at;
use super::ctr::label_image_at;
use super::ctr::remove_all_containers_at;
use super::ctr::remove_image_at;
use super::layout::read_record;
use super::layout::write_record;
use super::layout::CONTAINERD_BIN;
use super::netns;
use super::plan::{self, ExtraNode};
use super::teardown::kill_shims;
use super::teardown::remove_cgroup_and_mounts;
use super::teardown::remove_host_files;
use super::teardown::{stop_recorded, NodeTeardown};
use crate::binaries::Binaries;
use crate::error::{Error, Result};
use crate::handle::{blocking, LocalCluster};
use crate::pki::{self, PkiFiles};
use crate::process::{self, PidRecord, ProcSpec};
use crate::settings::NodeConfig;
use crate::settings::NodePorts;
use crate::settings::CONTAINERD;
use crate::settings::KUBELET;
use crate::settings::KUBE_PROXY;
use crate::util::{self, progress};
use crate::{host, kubeconfig};

/// One node as `status` and the memory report show it.
#[derive(Debug, Clone)]
pub struct NodeSummary {
    pub node_name: String,
    pub node_ip: String,
    pub pod_cidr: String,
    /// True for node 0 (host network namespace), false for nodes in their own.
    pub host_network: bool,
    /// Resident memory of its containerd + kubelet + kube-proxy (bytes);
    /// the containers' shims and processes are not counted.
    pub rss_bytes: u64,
    /// containerd, kubelet and kube-proxy all run.
    pub running: bool,
    /// The node's network namespace (a bind-mounted file, for `nsenter
    /// --net=`); `None` for node 0, which is in the host's.
    pub netns: Option<PathBuf>,
}

fn running_in(run_dir: &Path, name: &str) -> Option<PidRecord> {
    process::read_pid(run_dir, name).filter(process::is_running)
}

/// VmRSS of a process in bytes (0 if it is gone).
fn rss_bytes(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map(|kib| kib.saturating_mul(1024))
        .unwrap_or(0)
}

fn summary(node: &NodeConfig, run_dir: &Path, netns: Option<&Path>) -> NodeSummary {
    let recs: Vec<Option<PidRecord>> = [CONTAINERD, KUBELET, KUBE_PROXY]
        .iter()
        .map(|c| running_in(run_dir, c))
        .collect();
    NodeSummary {
        node_name: node.node_name.clone(),
        node_ip: node.node_ip.clone(),
        pod_cidr: node.pod_cidr.clone(),
        host_network: netns.is_none(),
        rss_bytes: recs.iter().flatten().map(|r| rss_bytes(r.pid)).sum(),
        running: recs.iter().all(Option::is_some),
        netns: netns.map(Path::to_path_buf),
    }
}

impl LocalCluster {
    /// Nodes 1..N of a cluster whose node 0 is `node`.
    pub(crate) fn extra_nodes_of(&self, node: &NodeConfig) -> Result<Vec<ExtraNode>> {
        plan::extra_nodes(
            &self.config().name,
            node,
            self.state_dir(),
            &self.node_paths().images,
        )
    }

    /// Node 0 as recorded by `up` (else as configured, else the default).
    fn recorded_node(&self) -> NodeConfig {
        read_record(&self.node_paths())
            .and_then(|r| r.node)
            .or_else(|| self.config().node.clone())
            .unwrap_or_else(|| NodeConfig::for_cluster(&self.config().name))
    }

    /// Nodes 1..N that may have been started: as many as the host record
    /// says, or as leftover pid-file folders (`<state>/run/n<i>`) show.
    pub(crate) fn recorded_extra_nodes(&self) -> Vec<ExtraNode> {
        let mut node = self.recorded_node();
        let found = std::fs::read_dir(self.state_dir().join("run"))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .strip_prefix('n')?
                            .parse::<usize>()
                            .ok()
                    })
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        node.nodes = node.nodes.max(found.saturating_add(1)).min(plan::MAX_NODES);
        self.extra_nodes_of(&node).unwrap_or_default()
    }

    /// Every node's name and containerd socket (node 0's first; the others
    /// only while their containerd runs). Image imports loop over these.
    pub fn node_sockets(&self) -> Vec<(String, PathBuf)> {
        let mut out = vec![(self.recorded_node().node_name, self.containerd_socket())];
        for e in self.recorded_extra_nodes() {
            if running_in(&e.run_dir, CONTAINERD).is_some() {
                out.push((e.node.node_name.clone(), e.paths.containerd_socket()));
            }
        }
        out
    }

    /// Every node with its memory (RSS of containerd + kubelet + kube-proxy).
    pub fn node_summaries(&self) -> Vec<NodeSummary> {
        let mut out = vec![summary(&self.recorded_node(), &self.run_dir(), None)];
        for e in self.recorded_extra_nodes() {
            if e.run_dir.is_dir() {
                out.push(summary(&e.node, &e.run_dir, Some(&e.netns)));
            }
        }
        out
    }

    /// Copies `reference` from node 0's containerd into every other node's
    /// that lacks it (or whose `label` differs): `ctr images export` piped
    /// into `ctr images import`, then `label` set there too. Returns each
    /// other node with the time its copy took (`None`: it had the image).
    pub fn sync_node_image(
        &self,
        reference: &str,
        label: Option<(&str, &str)>,
    ) -> Result<Vec<(String, Option<Duration>)>> {
        let source = self.containerd_socket();
        let mut out = Vec::new();
        for (name, socket) in self.node_sockets().into_iter().skip(1) {
            let have = image_labels_at(&socket, reference)?;
            let current = match (&have, label) {
                (Some(l), Some((k, v))) => l.get(k).map(String::as_str) == Some(v),
                (Some(_), None) => true,
                (None, _) => false,
            };
            if current {
                out.push((name, None));
                continue;
            }
            let t = Instant::now();
            // The stale copy goes first and its collection is awaited, so the
            // import cannot race the collector over shared layers.
            if have.is_some() {
                remove_image_at(&socket, reference)?;
            }
            copy_image_retrying(&source, &socket, reference)?;
            if !images_at(&socket)?.iter().any(|r| r == reference) {
                return Err(Error::Invalid(format!(
                    "copying {reference} to node {name}: `ctr images import` did not create it"
                )));
            }
            if let Some((k, v)) = label {
                label_image_at(&socket, reference, k, v)?;
            }
            let took = t.elapsed();
            progress!(
                "image {reference} copied to node {name} in {}",
                util::human(took)
            );
            out.push((name, Some(took)));
        }
        Ok(out)
    }

    /// Whether the processes of every extra node of `node`'s cluster run.
    pub(crate) fn extra_processes_running(&self, node: &NodeConfig) -> bool {
        self.extra_nodes_of(node).is_ok_and(|extras| {
            extras.iter().all(|e| {
                [CONTAINERD, KUBELET, KUBE_PROXY]
                    .iter()
                    .all(|c| running_in(&e.run_dir, c).is_some())
                    && host::link_exists(&e.veth)
            })
        })
    }

    // ------------------------------------------------------------ up

    /// Starts nodes 1..N one after the other, once node 0 is Ready.
    pub(crate) async fn start_extra_nodes(
        &self,
        node0: &NodeConfig,
        bins: &Binaries,
        pki: &PkiFiles,
        server: &str,
        pause: &str,
    ) -> Result<()> {
        let extras = self.extra_nodes_of(node0)?;
        if extras.is_empty() {
            return Ok(());
        }
        let name = self.config().name.clone();
        {
            let (node0, extras, name) = (node0.clone(), extras.clone(), name.clone());
            // The host forwards between the nodes' links (restored on `down`:
            // net.ipv4.ip_forward is among the recorded sysctls).
            blocking(move || {
                host::sysctl_write("net.ipv4.ip_forward", "1")?;
                netns::setup_host_nat(&name, &node0, &extras)
            })
            .await?;
        }
        for e in &extras {
            let started = Instant::now();
            self.prepare_extra_host(node0, &extras, e).await?;
            self.start_extra_node(e, bins, pki, server, pause).await?;
            let s = summary(&e.node, &e.run_dir, Some(&e.netns));
            progress!(
                "node {} Ready in {} (own network namespace, node IP {}, pods on {}; containerd + kubelet + kube-proxy RSS {} MiB)",
                e.node.node_name,
                util::human(started.elapsed()),
                e.node.node_ip,
                e.node.pod_cidr,
                s.rss_bytes / (1024 * 1024)
            );
        }
        Ok(())
    }

    /// Records, then makes, the host changes of node `e`: its veth, its
    /// namespace and routes, its cgroup root.
    async fn prepare_extra_host(
        &self,
        node0: &NodeConfig,
        extras: &[ExtraNode],
        e: &ExtraNode,
    ) -> Result<()> {
        let paths = self.node_paths();
        let mut rec = read_record(&paths).ok_or_else(|| {
            Error::Invalid(format!(
                "host record {} vanished during `up`",
                paths.record().display()
            ))
        })?;
        if !rec.links.contains(&e.veth) {
            rec.links.push(e.veth.clone());
            write_record(&paths, &rec)?;
        }
        let (name, node0, extras, e) = (
            self.config().name.clone(),
            node0.clone(),
            extras.to_vec(),
            e.clone(),
        );
        blocking(move || {
            netns::create(&e.netns)?;
            netns::setup_node(&name, &node0, &extras, &e)?;
            host::create_cgroup_root(&e.cgroup_root)?;
            Ok(())
        })
        .await
    }

    /// containerd, kubelet and kube-proxy of node `e`, in its namespace.
    async fn start_extra_node(
        &self,
        e: &ExtraNode,
        bins: &Binaries,
        pki: &PkiFiles,
        server: &str,
        pause: &str,
    ) -> Result<()> {
        let p = &e.paths;
        for d in p.per_run_dirs() {
            util::create_dir_all(&d)?;
        }
        for d in [p.containerd_root(), p.cni_conf_dir(), p.cni_ipam_dir()] {
            util::create_dir_all(&d)?;
        }
        write_kubeconfigs(e, pki, server, &self.config().name)?;
        util::write_atomic(
            &p.cni_conf_dir().join("10-localkube.conflist"),
            super::configs::cni_conflist(&e.cni_network, &e.node.pod_cidr, &p.cni_ipam_dir())
                .as_bytes(),
            0o644,
        )?;
        util::write_atomic(
            &p.containerd_config(),
            super::configs::containerd_config(p, pause)?.as_bytes(),
            0o644,
        )?;
        let env = vec![("PATH".to_owned(), host::path_env())];
        let spec = ProcSpec {
            name: CONTAINERD,
            binary: CONTAINERD_BIN.into(),
            args: vec![
                "--config".into(),
                p.containerd_config().display().to_string(),
            ],
            env: env.clone(),
        };
        let ctrd = self.spawn_extra(e, &spec)?;
        let socket = p.containerd_socket();
        self.wait_for_in(
            &e.log_dir,
            CONTAINERD,
            &ctrd,
            Duration::from_secs(30),
            || {
                let s = socket.clone();
                async move {
                    blocking(move || Ok(host::run(ctr_at(&s).arg("version")).is_ok()))
                        .await
                        .unwrap_or(false)
                }
            },
        )
        .await?;
        self.ensure_pause_on(&socket, pause).await?;
        self.start_extra_kubelet(e, bins, pki, pause, env.clone())
            .await?;
        self.start_extra_proxy(e, bins, env).await
    }

    fn spawn_extra(&self, e: &ExtraNode, spec: &ProcSpec) -> Result<PidRecord> {
        process::spawn_in(&e.run_dir, &e.log_dir, spec, Some(&e.netns))
    }

    /// The sandbox image in one node's containerd (each has its own root).
    async fn ensure_pause_on(&self, socket: &Path, pause: &str) -> Result<()> {
        let cache = self.config().cache_dir.clone();
        let (socket, pause) = (socket.to_owned(), pause.to_owned());
        blocking(move || {
            if !images_at(&socket)?.contains(&pause) {
                let tag = pause.rsplit(':').next().unwrap_or("x").to_owned();
                let archive = super::images::ensure_go_image_archive(
                    &cache,
                    &pause,
                    include_str!("../../assets/pause.go"),
                    &tag,
                )?;
                host::run(ctr_at(&socket).args(["images", "import"]).arg(&archive))?;
            }
            Ok(())
        })
        .await
    }

    async fn start_extra_kubelet(
        &self,
        e: &ExtraNode,
        bins: &Binaries,
        pki: &PkiFiles,
        pause: &str,
        env: Vec<(String, String)>,
    ) -> Result<()> {
        let np = NodePorts::for_ports(&self.config().ports);
        let doc = kubelet_doc(e, &np, pki, &self.config().name);
        util::write_atomic(
            &e.paths.kubelet_config(),
            serde_yaml::to_string(&doc)?.as_bytes(),
            0o644,
        )?;
        let spec = ProcSpec {
            name: KUBELET,
            binary: bins.kubelet.clone(),
            args: super::configs::kubelet_args(&e.paths, &e.node, pause),
            env,
        };
        let rec = self.spawn_extra(e, &spec)?;
        let client = kubeconfig::client_from_file(&self.kubeconfig_path()).await?;
        let node_name = e.node.node_name.clone();
        self.wait_for_in(&e.log_dir, KUBELET, &rec, Duration::from_secs(120), || {
            super::layout::node_ready(&client, &node_name)
        })
        .await
    }

    async fn start_extra_proxy(
        &self,
        e: &ExtraNode,
        bins: &Binaries,
        env: Vec<(String, String)>,
    ) -> Result<()> {
        let np = NodePorts::for_ports(&self.config().ports);
        let doc = proxy_doc(e, &np);
        let ip = e.node.node_ip.clone();
        util::write_atomic(
            &e.paths.proxy_config(),
            serde_yaml::to_string(&doc)?.as_bytes(),
            0o644,
        )?;
        let spec = ProcSpec {
            name: KUBE_PROXY,
            binary: bins.kube_proxy.clone(),
            args: vec![
                format!("--config={}", e.paths.proxy_config().display()),
                "--v=1".into(),
            ],
            env,
        };
        let rec = self.spawn_extra(e, &spec)?;
        let port = np.proxy_healthz;
        self.wait_for_in(
            &e.log_dir,
            KUBE_PROXY,
            &rec,
            Duration::from_secs(60),
            || {
                let ip = ip.clone();
                async move {
                    let probe = util::http_get_at(&ip, port, "/healthz");
                    matches!(
                        tokio::time::timeout(Duration::from_secs(3), probe).await,
                        Ok(Ok((200, _)))
                    )
                }
            },
        )
        .await
    }

    // ------------------------------------------------------------ down

    /// Drains nodes 1..N and stops their kube-proxy, kubelet, containers and
    /// containerd (best effort, like node 0's `stop_node`).
    pub(crate) async fn stop_extra_nodes(&self) -> NodeTeardown {
        let mut report = NodeTeardown::default();
        for e in self.recorded_extra_nodes() {
            // A node a chaos fault left cut off could not be drained.
            if let Err(err) = super::cut::uncut(&e) {
                report
                    .warnings
                    .push(format!("joining {} again: {err}", e.node.node_name));
            }
            if running_in(&e.run_dir, KUBELET).is_some() {
                match self.drain(&e.node.node_name).await {
                    Ok(n) => report.pods_deleted += n,
                    Err(err) => report
                        .warnings
                        .push(format!("draining {}: {err}", e.node.node_name)),
                }
            }
            for name in [KUBE_PROXY, KUBELET] {
                stop_recorded(&e.run_dir, name, &mut report).await;
            }
            if running_in(&e.run_dir, CONTAINERD).is_some() {
                let socket = e.paths.containerd_socket();
                match blocking(move || remove_all_containers_at(&socket)).await {
                    Ok(n) => report.containers_removed += n,
                    Err(err) => report.warnings.push(format!(
                        "removing containers of {}: {err}",
                        e.node.node_name
                    )),
                }
            }
            stop_recorded(&e.run_dir, CONTAINERD, &mut report).await;
        }
        report
    }

    /// Reverts the host changes of nodes 1..N after their processes have
    /// stopped: shims, cgroups, mounts (the pods' and the node's network
    /// namespaces), veths (and with them the routes), the host's NAT
    /// exemptions, their files outside the state dir, their state.
    pub(crate) fn sweep_extra_nodes(&self, global: bool, report: &mut NodeTeardown) {
        let name = &self.config().name;
        for e in self.recorded_extra_nodes() {
            kill_shims(&e.paths, report);
            remove_cgroup_and_mounts(&e.cgroup_root, &e.paths, report);
            if global {
                match host::delete_link(&e.veth) {
                    Ok(true) => report.links_removed.push(e.veth.clone()),
                    Ok(false) => {}
                    Err(err) => super::teardown::warn(report, "deleting a node's veth", err),
                }
            }
            remove_host_files(None, &e.paths, &e.cni_network, report);
            for d in [&e.paths.dir, &e.run_dir] {
                if let Err(err) = util::remove_dir_all_if_exists(d) {
                    super::teardown::warn(report, "removing a node's state", err);
                }
            }
        }
        if global {
            match netns::remove_host_nat(name) {
                Ok(0) => {}
                Ok(n) => report
                    .chains_removed
                    .push(format!("iptables nat POSTROUTING: {n} rule(s) of {name}")),
                Err(err) => super::teardown::warn(report, "deleting the nodes' NAT rules", err),
            }
        }
    }

    /// What of nodes 1..N is still on the host: their processes, any
    /// `lkveth<i>` link, cgroup roots `localkube-<name>-<i>`, NAT rules.
    pub(crate) fn extra_leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        let name = &self.config().name;
        for e in self.recorded_extra_nodes() {
            for c in [CONTAINERD, KUBELET, KUBE_PROXY] {
                if running_in(&e.run_dir, c).is_some() {
                    left.push(format!("{c} of {} is running", e.node.node_name));
                }
            }
        }
        if !self.host_owned_by_other() {
            for v in netns::host_veths() {
                left.push(format!("link {v}"));
            }
            let n = netns::host_nat_left(name);
            if n > 0 {
                left.push(format!("{n} NAT rule(s) of {name} in nat POSTROUTING"));
            }
        }
        let prefix = format!("localkube-{name}-");
        for h in host::cgroup_hierarchies() {
            for d in std::fs::read_dir(&h).into_iter().flatten().flatten() {
                let f = d.file_name().to_string_lossy().into_owned();
                let ours = f
                    .strip_prefix(&prefix)
                    .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()));
                if ours {
                    left.push(format!("cgroup {}", d.path().display()));
                }
            }
        }
        left
    }
}

/// Node `e`'s kubelet configuration: node 0's, with its own paths, node
/// IP, cgroup root `/localkube-<cluster>-<i>`, and health on the node IP
/// (127.0.0.1 in the node's namespace is not the host's).
fn kubelet_doc(e: &ExtraNode, np: &NodePorts, pki: &PkiFiles, cluster: &str) -> serde_json::Value {
    let cgroup_name = format!("{cluster}-{}", e.index);
    let mut doc = super::configs::kubelet_doc(&e.paths, &e.node, np, pki, &cgroup_name);
    doc["healthzBindAddress"] = e.node.node_ip.clone().into();
    doc
}

/// Node `e`'s kube-proxy configuration, health and metrics on the node IP.
fn proxy_doc(e: &ExtraNode, np: &NodePorts) -> serde_json::Value {
    let mut doc = super::configs::proxy_doc(&e.paths, &e.node, np);
    let ip = &e.node.node_ip;
    doc["healthzBindAddress"] = format!("{ip}:{}", np.proxy_healthz).into();
    doc["metricsBindAddress"] = format!("{ip}:{}", np.proxy_metrics).into();
    doc
}

/// The kubelet as `system:node:<its name>` (a certificate per node: the
/// Node authorizer lets each kubelet touch only its own node), kube-proxy
/// as `system:kube-proxy` (the same identity on every node).
fn write_kubeconfigs(e: &ExtraNode, pki: &PkiFiles, server: &str, cluster: &str) -> Result<()> {
    let ca = util::read_to_string(&pki.ca_cert())?;
    let kubelet_stem = format!("kubelet-n{}", e.index);
    for (stem, cn, org, file) in [
        (
            kubelet_stem.as_str(),
            format!("system:node:{}", e.node.node_name),
            Some("system:nodes"),
            e.paths.kubelet_kubeconfig(),
        ),
        (
            "kube-proxy",
            "system:kube-proxy".to_owned(),
            None,
            e.paths.proxy_kubeconfig(),
        ),
    ] {
        let (crt, key) = pki::ensure_client_cert(pki, stem, &cn, org)?;
        let kc = kubeconfig::render(
            &format!("localkube-{cluster}-{stem}"),
            server,
            &ca,
            &util::read_to_string(&crt)?,
            &util::read_to_string(&key)?,
        )?;
        util::write_atomic(&file, kc.as_bytes(), 0o600)?;
    }
    Ok(())
}

/// `ctr images export` from one containerd piped into `ctr images import`
/// of another: no copy of the archive on disk.
fn copy_image(from: &Path, to: &Path, reference: &str) -> Result<()> {
    let mut export = ctr_at(from)
        .args(["images", "export", "-", reference])
        .env("PATH", host::path_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| Error::Spawn {
            program: super::layout::CTR_BIN.into(),
            source,
        })?;
    let pipe = export
        .stdout
        .take()
        .ok_or_else(|| Error::Invalid("ctr images export has no stdout".into()))?;
    let mut import = ctr_at(to);
    import.args(["images", "import"]);
    // The archive names the image in full; a base name only matters if a
    // ctr version wrote the tag alone.
    if let Some(base) = base_name(reference) {
        import.args(["--base-name", base]);
    }
    let what = format!("copying {reference} to {}", to.display());
    let (stdin, pump) = host::metered(pipe, what, None)?;
    let imported = host::run_with_stdin(import.arg("-"), stdin);
    // The pump's error only says ctr stopped reading; ctr's own is the news.
    let _ = pump.join();
    let status = export
        .wait()
        .map_err(Error::io("waiting for ctr images export of", from))?;
    if !status.success() {
        return Err(Error::Invalid(format!(
            "`ctr --address {} images export - {reference}` failed ({status})",
            from.display()
        )));
    }
    imported.map(|_| ())
}

/// [`copy_image`], once more after an unpack lost a parent snapshot to a
/// garbage collection that something else set off (see
/// [`Error::is_unpack_race`]); any other error is returned at once.
fn copy_image_retrying(from: &Path, to: &Path, reference: &str) -> Result<()> {
    const ATTEMPTS: u32 = 3;
    let mut attempt = 1;
    loop {
        match copy_image(from, to, reference) {
            Err(e) if e.is_unpack_race() && attempt < ATTEMPTS => {
                progress!("image {reference}: unpack raced containerd's GC ({e}); importing again");
                std::thread::sleep(Duration::from_secs(2));
                attempt += 1;
            }
            r => return r,
        }
    }
}

/// `repo` of `repo:tag` (a registry port's colon is before the last `/`).
fn base_name(reference: &str) -> Option<&str> {
    let slash = reference.rfind('/').map(|i| i + 1).unwrap_or(0);
    let colon = reference[slash..].rfind(':')? + slash;
    (!reference.contains('@')).then(|| &reference[..colon])
}

#[cfg(test)]
mod tests {
    #[test]
    fn base_names_strip_only_the_tag() {
        assert_eq!(
            super::base_name("localhost/localkube/netcheck:abc"),
            Some("localhost/localkube/netcheck")
        );
        assert_eq!(super::base_name("host:5000/a/b:v1"), Some("host:5000/a/b"));
        assert_eq!(super::base_name("host:5000/a/b"), None);
        assert_eq!(super::base_name("a/b@sha256:00"), None);
    }

    use super::*;
    use crate::settings::Ports;

    #[test]
    fn extra_node_configs_are_its_own() {
        let mut n = NodeConfig::for_cluster("mn");
        n.nodes = 2;
        let e = plan::extra_nodes(
            "mn",
            &n,
            Path::new("/c/cluster/mn"),
            Path::new("/c/node-images/containerd"),
        )
        .unwrap()
        .remove(0);
        let np = NodePorts::for_ports(&Ports::for_name("mn"));
        let pki = PkiFiles {
            dir: PathBuf::from("/c/cluster/mn/pki"),
        };
        let k = kubelet_doc(&e, &np, &pki, "mn");
        assert_eq!(k["cgroupRoot"], format!("/{}", e.cgroup_root));
        assert_eq!(k["address"], "10.213.255.2");
        assert_eq!(k["healthzBindAddress"], "10.213.255.2");
        assert!(k["containerRuntimeEndpoint"]
            .as_str()
            .unwrap()
            .starts_with("unix:///c/cluster/mn/node/n1/containerd/"));
        let args = super::super::configs::kubelet_args(&e.paths, &e.node, "pause:x");
        assert!(args.contains(&"--hostname-override=localkube-mn-1".to_string()));
        assert!(args.contains(&"--node-ip=10.213.255.2".to_string()));
        assert!(args
            .iter()
            .any(|a| a == "--root-dir=/c/cluster/mn/node/n1/kubelet"));
        let p = proxy_doc(&e, &np);
        assert_eq!(p["hostnameOverride"], "localkube-mn-1");
        assert_eq!(p["clusterCIDR"], "10.244.1.0/24");
        assert!(p["healthzBindAddress"]
            .as_str()
            .unwrap()
            .starts_with("10.213.255.2:"));
        assert!(p["metricsBindAddress"]
            .as_str()
            .unwrap()
            .starts_with("10.213.255.2:"));
        let c = super::super::configs::containerd_config(&e.paths, "pause:x").unwrap();
        assert!(
            c.contains(r#"root = "/c/node-images/containerd-n1""#),
            "{c}"
        );
        assert!(c.contains(r#"address = "/c/cluster/mn/node/n1/containerd/containerd.sock""#));
        let cni: serde_json::Value = serde_json::from_str(&super::super::configs::cni_conflist(
            &e.cni_network,
            &e.node.pod_cidr,
            &e.paths.cni_ipam_dir(),
        ))
        .unwrap();
        assert_eq!(cni["name"], "localkube-mn-1");
        assert_eq!(
            cni["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "10.244.1.0/24"
        );
    }
}
