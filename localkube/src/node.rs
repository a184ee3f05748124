//! The node tier: a real kubelet on this machine, next to the control plane.
//!
//! `ClusterConfig::node = Some(NodeConfig)` adds to the control plane:
//!
//! * containerd (Debian's 1.6) with its own config, root, state and socket
//!   under `<state>/node/containerd/`, the cgroupfs driver
//!   (`SystemdCgroup = false`: no systemd here, and the kubelet must match),
//!   and a pause image built locally from `assets/pause.go`;
//! * the CNI bridge plugin (Debian's containernetworking-plugins): bridge
//!   [`CNI_BRIDGE`], pod subnet [`POD_CIDR`](crate::POD_CIDR), host-local IPAM whose state is
//!   under our state dir, portmap; config in our own directory;
//! * kubelet v1.33 (cgroup v1, cgroupfs, cgroup root `/localkube-<name>`,
//!   swap allowed, image GC off) with a node client certificate
//!   (`CN=system:node:<node>`, `O=system:nodes`), so the apiserver runs with
//!   `--authorization-mode=Node,RBAC` and NodeRestriction;
//! * kube-proxy (iptables mode) with its own `system:kube-proxy`
//!   certificate, so pods reach the apiserver through the `kubernetes`
//!   Service.
//!
//! The node IP ([`NODE_IP`](crate::NODE_IP)) lives on an interface of its own
//! ([`NODE_INTERFACE`]); the apiserver binds and advertises it, which lets
//! the endpoint reconciler publish a valid (non-loopback) `kubernetes`
//! endpoint and pods reach it through their default route.
//!
//! Every host change is recorded in `<state>/node/host.json` *before* it is
//! made, and [`LocalCluster::down`] reverts exactly those: processes, mounts,
//! links, iptables chains created since `up`, the cgroup root, the sysctls
//! the kubelet and the CNI plugin change, and the files they drop outside the
//! state dir. Only one node cluster can run per host (the links, the
//! iptables rules and the cgroup root are host-global); `/run/localkube-node.json`
//! names the owner.
use std::collections::BTreeMap;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Endpoints;
use kube::api::Api;
use kube::Client;

use crate::binaries::Binaries;
use crate::error::{Error, Result};
use crate::handle::{blocking, LocalCluster};
use crate::pki::{self, PkiFiles};
use crate::process::{self, ProcSpec};
use crate::settings::{
    NodeConfig, NodePorts, APISERVER, CNI_BRIDGE, CONTAINERD, KUBELET, KUBE_PROXY, NODE_INTERFACE,
    NODE_PACKAGES,
};
use crate::util::{self, progress};
use crate::{host, kubeconfig};

mod configs;
mod ctr;
mod cut;
mod extra;
mod images;
mod layout;
mod netns;
mod plan;
mod teardown;
use configs::*;
pub use extra::NodeSummary;
use images::*;
pub use layout::NodePaths;
use layout::*;
pub use plan::MAX_NODES;
pub use teardown::NodeTeardown;

impl LocalCluster {
    /// True if the node's containerd is running.
    pub fn node_running(&self) -> bool {
        self.component_running(CONTAINERD, None)
    }

    // ------------------------------------------------------------ up

    /// Prepares the host before any component starts: packages, ownership
    /// marker, the host record (before every change), the node IP link and
    /// the kubelet's cgroup root.
    pub(crate) async fn prepare_host(&self, node: &NodeConfig) -> Result<()> {
        let this = self.clone();
        let node = node.clone();
        blocking(move || this.prepare_host_blocking(&node)).await
    }

    fn prepare_host_blocking(&self, node: &NodeConfig) -> Result<()> {
        let name = &self.config().name;
        if host::cgroup_v2_only() {
            return Err(Error::Invalid(
                "this host has no cgroup v1 hierarchies; localkube's node is set up for cgroup v1 (cgroupfs driver)".into(),
            ));
        }
        let installed = if node.install_packages {
            host::ensure_packages(&NODE_PACKAGES, &self.config().cache_dir.join("logs"))?
        } else {
            Vec::new()
        };
        for bin in [CONTAINERD_BIN, CTR_BIN, RUNC_BIN] {
            if !Path::new(bin).is_file() {
                return Err(Error::Invalid(format!(
                    "{bin} is missing; install the Debian packages {} (or leave NodeConfig::install_packages on)",
                    NODE_PACKAGES.join(" ")
                )));
            }
        }
        host::require_root("running a kubelet node")?;
        // The whole layout of every node, checked before the first change.
        for e in self.extra_nodes_of(node)? {
            check_socket_len(&e.paths.containerd_socket())?;
        }
        node.node_ip.parse::<Ipv4Addr>().map_err(|e| {
            Error::Invalid(format!(
                "node IP {:?} is not an IPv4 address: {e}",
                node.node_ip
            ))
        })?;
        let paths = self.node_paths();
        check_socket_len(&paths.containerd_socket())?;
        self.claim_host()?;

        // Record first, then change: a crash at any point leaves a record
        // that describes at least everything that was changed.
        util::create_dir_all(&paths.dir)?;
        let mut rec = match read_record(&paths) {
            // Our own leftovers (a failed start): keep the original "before"
            // values, they describe the host as it was before us.
            Some(old) => old,
            None => {
                let mut chains_before = BTreeMap::new();
                for bin in host::IPTABLES_BINARIES {
                    for table in host::IPTABLES_TABLES {
                        match host::iptables_chains(bin, table) {
                            Ok(c) => {
                                chains_before.insert(format!("{bin} {table}"), c);
                            }
                            Err(e) => tracing::warn!(%e, "cannot list {bin} {table}"),
                        }
                    }
                }
                HostRecord {
                    cluster: name.clone(),
                    state_dir: self.state_dir().to_owned(),
                    node: Some(node.clone()),
                    links: Vec::new(),
                    cgroup_root: format!("localkube-{name}"),
                    cni_network: format!("localkube-{name}"),
                    sysctls: TRACKED_SYSCTLS
                        .iter()
                        .filter_map(|k| host::sysctl_read(k).map(|v| ((*k).to_owned(), v)))
                        .collect(),
                    chains_before,
                    absent_dirs: HOST_DIRS
                        .iter()
                        .map(PathBuf::from)
                        .filter(|p| !p.exists())
                        .collect(),
                    packages_installed: installed,
                }
            }
        };
        for link in [NODE_INTERFACE, CNI_BRIDGE] {
            if !rec.links.iter().any(|l| l == link) {
                rec.links.push(link.to_owned());
            }
        }
        write_record(&paths, &rec)?;

        // The node IP link. A leftover with the right address is reused.
        if !host::has_address(NODE_INTERFACE, &node.node_ip) {
            host::delete_link(NODE_INTERFACE)?;
            host::create_address_bridge(NODE_INTERFACE, &node.node_ip)?;
        }
        host::create_cgroup_root(&rec.cgroup_root)?;
        Ok(())
    }

    /// Takes ownership of the host's node resources (atomically, O_EXCL).
    fn claim_host(&self) -> Result<()> {
        let me = HostMarker {
            cluster: self.config().name.clone(),
            state_dir: self.state_dir().to_owned(),
        };
        let json = serde_json::to_vec_pretty(&me).map_err(|e| Error::Invalid(e.to_string()))?;
        for _ in 0..2 {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(HOST_MARKER)
            {
                Ok(mut f) => {
                    use std::io::Write as _;
                    return f
                        .write_all(&json)
                        .map_err(Error::io("writing", HOST_MARKER));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner: Option<HostMarker> = fs::read(HOST_MARKER)
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok());
                    match owner {
                        Some(o) if o.cluster == me.cluster && o.state_dir == me.state_dir => {
                            return Ok(())
                        }
                        // The owner's state is gone (deleted by hand): nothing
                        // could tear it down any more, so take over.
                        Some(o) if !o.state_dir.join("node").join("host.json").exists() => {
                            tracing::warn!(owner = %o.cluster, "taking over a stale host marker");
                            util::remove_file_if_exists(Path::new(HOST_MARKER))?;
                        }
                        Some(o) => {
                            return Err(Error::HostBusy {
                                owner: o.cluster,
                                state_dir: o.state_dir,
                                interfaces: format!("{NODE_INTERFACE}, {CNI_BRIDGE}"),
                            })
                        }
                        None => util::remove_file_if_exists(Path::new(HOST_MARKER))?,
                    }
                }
                Err(e) => return Err(Error::io("creating", HOST_MARKER)(e)),
            }
        }
        Err(Error::Invalid(format!("could not claim {HOST_MARKER}")))
    }

    /// Starts containerd, the kubelet and kube-proxy (after the control
    /// plane), and waits until the node is Ready and the `kubernetes`
    /// Service has the node IP as its endpoint.
    pub(crate) async fn start_node(
        &self,
        node: &NodeConfig,
        bins: &Binaries,
        pki: &PkiFiles,
        server: &str,
    ) -> Result<()> {
        let started = Instant::now();
        let paths = self.node_paths();
        let np = NodePorts::for_ports(&self.config().ports);
        self.prepare_node_dirs(&paths, node, &np)?;
        self.write_node_kubeconfigs(&paths, node, pki, server)?;
        let pause = self.write_runtime_configs(&paths, node).await?;
        let env = vec![("PATH".to_owned(), host::path_env())];
        self.start_containerd(&paths, env.clone()).await?;
        self.ensure_pause_image(&pause).await?;
        let client = self
            .start_kubelet(&paths, node, &np, pki, bins, &pause, env.clone())
            .await?;
        self.start_kube_proxy(&paths, node, &np, bins, env).await?;
        self.wait_kubernetes_endpoint(&client, &node.node_ip)
            .await?;
        progress!(
            "node {} Ready in {} (containerd, kubelet, kube-proxy; pods on {}, node IP {})",
            node.node_name,
            util::human(started.elapsed()),
            node.pod_cidr,
            node.node_ip
        );
        // Nodes 1..N, each in a network namespace of its own (none for N = 1).
        self.start_extra_nodes(node, bins, pki, server, &pause)
            .await?;
        Ok(())
    }

    /// The node's state folders, and none of its ports taken by another process.
    fn prepare_node_dirs(
        &self,
        paths: &NodePaths,
        node: &NodeConfig,
        np: &NodePorts,
    ) -> Result<()> {
        for p in paths.per_run_dirs() {
            util::create_dir_all(&p)?;
        }
        util::create_dir_all(&paths.containerd_root())?;
        util::create_dir_all(&paths.cni_conf_dir())?;
        util::create_dir_all(&paths.cni_ipam_dir())?;
        let name = &self.config().name;
        check_port(&node.node_ip, np.kubelet, KUBELET, name)?;
        check_port("127.0.0.1", np.kubelet_healthz, KUBELET, name)?;
        check_port("127.0.0.1", np.proxy_healthz, KUBE_PROXY, name)?;
        check_port("127.0.0.1", np.proxy_metrics, KUBE_PROXY, name)?;
        Ok(())
    }

    /// Credentials: the kubelet as system:node:<name> (Node authorizer +
    /// NodeRestriction), kube-proxy as system:kube-proxy (bound to
    /// system:node-proxier by the default RBAC policy).
    fn write_node_kubeconfigs(
        &self,
        paths: &NodePaths,
        node: &NodeConfig,
        pki: &PkiFiles,
        server: &str,
    ) -> Result<()> {
        let ca = util::read_to_string(&pki.ca_cert())?;
        for (stem, cn, org, file) in [
            (
                "kubelet",
                format!("system:node:{}", node.node_name),
                Some("system:nodes"),
                paths.kubelet_kubeconfig(),
            ),
            (
                "kube-proxy",
                "system:kube-proxy".to_owned(),
                None,
                paths.proxy_kubeconfig(),
            ),
        ] {
            let (crt, key) = pki::ensure_client_cert(pki, stem, &cn, org)?;
            let kc = kubeconfig::render(
                &format!("localkube-{}-{stem}", self.config().name),
                server,
                &ca,
                &util::read_to_string(&crt)?,
                &util::read_to_string(&key)?,
            )?;
            util::write_atomic(&file, kc.as_bytes(), 0o600)?;
        }
        Ok(())
    }

    /// The CNI and containerd configurations; returns the sandbox image's
    /// reference (named for the Go version that builds it).
    async fn write_runtime_configs(&self, paths: &NodePaths, node: &NodeConfig) -> Result<String> {
        let cache = self.config().cache_dir.clone();
        let go_ver = blocking(move || go_version(&cache)).await?;
        let pause = pause_reference(&go_ver);
        let network = format!("localkube-{}", self.config().name);
        util::write_atomic(
            &paths.cni_conf_dir().join("10-localkube.conflist"),
            cni_conflist(&network, &node.pod_cidr, &paths.cni_ipam_dir()).as_bytes(),
            0o644,
        )?;
        util::write_atomic(
            &paths.containerd_config(),
            containerd_config(paths, &pause)?.as_bytes(),
            0o644,
        )?;
        Ok(pause)
    }

    /// containerd, waited for until `ctr version` answers.
    async fn start_containerd(&self, paths: &NodePaths, env: Vec<(String, String)>) -> Result<()> {
        let ctrd = process::spawn(
            &self.run_dir(),
            &self.log_dir(),
            &ProcSpec {
                name: CONTAINERD,
                binary: CONTAINERD_BIN.into(),
                args: vec![
                    "--config".into(),
                    paths.containerd_config().display().to_string(),
                ],
                env,
            },
        )?;
        let this = self.clone();
        self.wait_for(CONTAINERD, &ctrd, Duration::from_secs(30), || {
            let this = this.clone();
            async move {
                blocking(move || Ok(host::run(this.ctr().arg("version")).is_ok()))
                    .await
                    .unwrap_or(false)
            }
        })
        .await
    }

    /// The sandbox image, built once per Go version and loaded once per containerd root.
    async fn ensure_pause_image(&self, pause: &str) -> Result<()> {
        let this = self.clone();
        let cache = self.config().cache_dir.clone();
        let pause_ref = pause.to_owned();
        blocking(move || {
            if !this.node_images()?.contains(&pause_ref) {
                let tag = pause_ref.rsplit(':').next().unwrap_or("x").to_owned();
                let archive = ensure_go_image_archive(
                    &cache,
                    &pause_ref,
                    include_str!("../assets/pause.go"),
                    &tag,
                )?;
                this.import_image_archive(&archive, None)?;
            }
            Ok(())
        })
        .await
    }

    /// The kubelet, waited for until its Node is Ready; returns the admin
    /// client the later steps use.
    #[allow(clippy::too_many_arguments)]
    async fn start_kubelet(
        &self,
        paths: &NodePaths,
        node: &NodeConfig,
        np: &NodePorts,
        pki: &PkiFiles,
        bins: &Binaries,
        pause: &str,
        env: Vec<(String, String)>,
    ) -> Result<Client> {
        util::write_atomic(
            &paths.kubelet_config(),
            kubelet_config(paths, node, np, pki, &self.config().name)?.as_bytes(),
            0o644,
        )?;
        let kubelet = process::spawn(
            &self.run_dir(),
            &self.log_dir(),
            &ProcSpec {
                name: KUBELET,
                binary: bins.kubelet.clone(),
                args: kubelet_args(paths, node, pause),
                env,
            },
        )?;
        let client = kubeconfig::client_from_file(&self.kubeconfig_path()).await?;
        let node_name = node.node_name.clone();
        self.wait_for(KUBELET, &kubelet, Duration::from_secs(120), || {
            node_ready(&client, &node_name)
        })
        .await?;
        Ok(client)
    }

    /// kube-proxy, waited for until its /healthz answers.
    async fn start_kube_proxy(
        &self,
        paths: &NodePaths,
        node: &NodeConfig,
        np: &NodePorts,
        bins: &Binaries,
        env: Vec<(String, String)>,
    ) -> Result<()> {
        util::write_atomic(
            &paths.proxy_config(),
            proxy_config(paths, node, np)?.as_bytes(),
            0o644,
        )?;
        let proxy = process::spawn(
            &self.run_dir(),
            &self.log_dir(),
            &ProcSpec {
                name: KUBE_PROXY,
                binary: bins.kube_proxy.clone(),
                args: vec![
                    format!("--config={}", paths.proxy_config().display()),
                    "--v=1".into(),
                ],
                env,
            },
        )?;
        let port = np.proxy_healthz;
        self.wait_for(KUBE_PROXY, &proxy, Duration::from_secs(60), || {
            http_ok(port, "/healthz")
        })
        .await
    }

    /// The lease endpoint reconciler publishes the node IP for the
    /// `kubernetes` Service; pods depend on it.
    async fn wait_kubernetes_endpoint(&self, client: &Client, node_ip: &str) -> Result<()> {
        let apiserver = process::read_pid(&self.run_dir(), APISERVER)
            .ok_or_else(|| Error::Invalid("kube-apiserver pid file vanished".into()))?;
        self.wait_for(APISERVER, &apiserver, Duration::from_secs(30), || {
            kubernetes_endpoint_is(client, node_ip)
        })
        .await
    }

    /// Whether a running node cluster can be reused: its node components run
    /// the expected binaries and the Node is Ready.
    pub(crate) async fn node_healthy(&self, node: &NodeConfig, bins: &Binaries) -> bool {
        let procs = self.component_running(CONTAINERD, Some(Path::new(CONTAINERD_BIN)))
            && self.component_running(KUBELET, Some(&bins.kubelet))
            && self.component_running(KUBE_PROXY, Some(&bins.kube_proxy));
        if !procs || !host::link_exists(NODE_INTERFACE) || !self.extra_processes_running(node) {
            return false;
        }
        let Ok(client) = kubeconfig::client_from_file(&self.kubeconfig_path()).await else {
            return false;
        };
        let mut names = vec![node.node_name.clone()];
        names.extend(
            self.extra_nodes_of(node)
                .unwrap_or_default()
                .into_iter()
                .map(|e| e.node.node_name),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let mut all = true;
            for n in &names {
                all = all && node_ready(&client, n).await;
            }
            if all {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        false
    }
}

fn check_port(ip: &str, port: u16, component: &'static str, cluster: &str) -> Result<()> {
    if TcpListener::bind((ip, port)).is_err() {
        return Err(Error::PortBusy {
            port,
            component,
            cluster: cluster.to_owned(),
        });
    }
    Ok(())
}

/// sun_path is 108 bytes; containerd also creates "<socket>.ttrpc".
fn check_socket_len(socket: &Path) -> Result<()> {
    if socket.as_os_str().len() + 6 >= 108 {
        return Err(Error::Invalid(format!(
            "containerd socket path {} is too long for a unix socket; set DGL_OPERATOR_CACHE to a shorter directory",
            socket.display()
        )));
    }
    Ok(())
}

async fn kubernetes_endpoint_is(client: &Client, ip: &str) -> bool {
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    match eps.get_opt("kubernetes").await {
        Ok(Some(e)) => e.subsets.unwrap_or_default().iter().any(|s| {
            s.addresses
                .as_ref()
                .is_some_and(|a| a.iter().any(|a| a.ip == ip))
        }),
        _ => false,
    }
}

/// Plain-HTTP GET on 127.0.0.1 (kubelet/kube-proxy health ports); true on a 200.
async fn http_ok(port: u16, path: &str) -> bool {
    let probe = crate::util::http_get(port, path);
    matches!(
        tokio::time::timeout(Duration::from_secs(3), probe).await,
        Ok(Ok((200, _)))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    use crate::settings::{Ports, NODE_IP, POD_CIDR};

    fn paths() -> NodePaths {
        NodePaths {
            dir: PathBuf::from("/cache/cluster/unit/node"),
            images: PathBuf::from("/cache/node-images/containerd"),
        }
    }

    #[test]
    fn node_ports_follow_the_cluster_offset_and_do_not_collide() {
        for name in ["dev", "test", "e2e", "smoke"] {
            let p = Ports::for_name(name);
            let n = NodePorts::for_ports(&p);
            let all = [
                p.apiserver,
                p.etcd_client,
                p.etcd_peer,
                p.controller_manager,
                p.scheduler,
                n.kubelet,
                n.kubelet_healthz,
                n.proxy_healthz,
                n.proxy_metrics,
            ];
            let set: BTreeSet<u16> = all.iter().copied().collect();
            assert_eq!(set.len(), all.len(), "{name}: {all:?}");
        }
        assert_eq!(NodePorts::for_ports(&Ports::for_name("dev")).kubelet, 10250);
    }

    #[test]
    fn only_references_no_tag_shares_are_untagged() {
        let ls = "\
REF                                    TYPE                                                 DIGEST         SIZE      PLATFORMS   LABELS
docker.io/dgloperator/graphsage:v0.1.0 application/vnd.docker.distribution.manifest.v2+json sha256:new     5.5 GiB   linux/amd64 io.cri-containerd.image=managed
sha256:53073033                        application/vnd.docker.distribution.manifest.v2+json sha256:new     5.5 GiB   linux/amd64 io.cri-containerd.image=managed
sha256:498669bd                        application/vnd.docker.distribution.manifest.v2+json sha256:old     5.4 GiB   linux/amd64 io.cri-containerd.image=managed
docker.io/dgloperator/graphsage@sha256:old application/vnd.docker.distribution.manifest.v2+json sha256:old 5.4 GiB linux/amd64 -
localhost/localkube/pause:3.10-x       application/vnd.oci.image.manifest.v1+json           sha256:pause   300 KiB   linux/amd64 -
";
        assert_eq!(
            untagged_image_refs(ls),
            vec![
                "sha256:498669bd",
                "docker.io/dgloperator/graphsage@sha256:old"
            ]
        );
        assert!(untagged_image_refs("REF TYPE DIGEST SIZE PLATFORMS LABELS\n").is_empty());
    }

    #[test]
    fn containerd_config_keeps_everything_under_the_state_dir() {
        let cfg = containerd_config(&paths(), "localhost/localkube/pause:3.10-x").unwrap();
        assert!(cfg.contains("SystemdCgroup = false"));
        assert!(cfg.contains(r#"sandbox_image = "localhost/localkube/pause:3.10-x""#));
        assert!(cfg.contains("netns_mounts_under_state_dir = true"));
        // The image store (containerd's root) is the one place shared by
        // every node cluster of the cache; all else is the cluster's own.
        let root = cfg
            .lines()
            .find(|l| l.starts_with("root = "))
            .expect("root missing");
        assert_eq!(root, r#"root = "/cache/node-images/containerd""#);
        for key in [
            "state = ",
            "address = ",
            "conf_dir = ",
            "Root = ",
            "path = ",
        ] {
            let line = cfg
                .lines()
                .find(|l| l.trim_start().starts_with(key))
                .unwrap_or_else(|| panic!("{key} missing"));
            assert!(line.contains("/cache/cluster/unit/node/"), "{line}");
        }
        assert!(toml_path(Path::new("/a\"b")).is_err());
    }

    #[test]
    fn kubelet_and_proxy_configs_match_the_node() {
        let node = NodeConfig::for_cluster("unit");
        let np = NodePorts::for_ports(&Ports::for_name("unit"));
        let pki = PkiFiles {
            dir: PathBuf::from("/cache/cluster/unit/pki"),
        };
        let k: serde_yaml::Value =
            serde_yaml::from_str(&kubelet_config(&paths(), &node, &np, &pki, "unit").unwrap())
                .unwrap();
        assert_eq!(k["cgroupDriver"], "cgroupfs");
        assert_eq!(k["failSwapOn"], false);
        assert_eq!(k["cgroupRoot"], "/localkube-unit");
        assert_eq!(k["address"], NODE_IP);
        assert_eq!(k["imageGCHighThresholdPercent"], 100);
        assert_eq!(k["evictionPressureTransitionPeriod"], "10s");
        assert_eq!(k["authentication"]["anonymous"]["enabled"], false);
        assert!(k["containerRuntimeEndpoint"]
            .as_str()
            .unwrap()
            .starts_with("unix:///cache/cluster/unit/node/containerd/"));
        let p: serde_yaml::Value =
            serde_yaml::from_str(&proxy_config(&paths(), &node, &np).unwrap()).unwrap();
        assert_eq!(p["mode"], "iptables");
        assert_eq!(p["hostnameOverride"], "localkube-unit");
        assert_eq!(p["iptables"]["localhostNodePorts"], false);
        assert_eq!(p["conntrack"]["maxPerCore"], 0);
        let c: serde_json::Value = serde_json::from_str(&cni_conflist(
            "localkube-unit",
            POD_CIDR,
            &paths().cni_ipam_dir(),
        ))
        .unwrap();
        assert_eq!(c["plugins"][0]["bridge"], CNI_BRIDGE);
        assert_eq!(c["plugins"][0]["ipam"]["ranges"][0][0]["subnet"], POD_CIDR);
        assert_eq!(c["plugins"][1]["type"], "portmap");
    }

    #[test]
    fn pause_reference_changes_with_the_go_version() {
        let a = pause_reference("go1.26.0");
        let b = pause_reference("go1.26.1");
        assert!(a.starts_with("localhost/localkube/pause:3.10-"));
        assert_ne!(a, b);
    }
}
