//! Kueue v0.17 from the Go module proxy, built like Kubernetes (`go build`
//! of `cmd/kueue` in a wrapper module, the binary cached under
//! `<cache>/bin/kueue-<version>/kueue`), and two places it runs:
//!
//! - `cargo xtask kueue`: the operator's test with Kueue's real manager
//!   (`operator/tests/kueue.rs`, `real_kueue_queues_evicts_and_preempts_dgljobs`)
//!   on the test control plane (no kubelet, no webhooks);
//! - the node cluster ([`NodeKueue`], the e2e scenario `kueue`): the manager
//!   as a host process beside the node's kube-apiserver (log in the
//!   cluster's log dir, `kueue.log`), its CRDs from the module, its webhooks
//!   served on 127.0.0.1 with a self-signed certificate and registered from
//!   the module's `config/components/webhook/manifests.yaml` with
//!   `clientConfig.url` + `caBundle`; and the Helm-installed operator
//!   switched to `kueue.enabled=true` while it runs ([`operator_kueue`]).
//!
//! Only the webhooks of Kueue's own kinds (group `kueue.x-k8s.io`) are
//! registered: the integrations' (Pod, Job, Deployment, StatefulSet, other
//! frameworks' kinds) are served as no-ops when their integration is off, as
//! here (`frameworks: []`), and registering them would send every pod
//! created on the node through a host process.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use kube::{Client, ResourceExt};
use localkube::LocalCluster;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{operator_pods_lp, pod_ready, MANAGER, OPERATOR_NAMESPACE, RELEASE};
use crate::util::{done, repo_root, step};

/// The Kueue release used.
pub(crate) const VERSION: &str = "v0.17.0";
const MODULE: &str = "sigs.k8s.io/kueue";

#[derive(clap::Args)]
pub struct Args {
    /// Only build (or find) the Kueue binary and print its path; do not run the test.
    #[arg(long)]
    pub build_only: bool,
}

/// `go` with the build pinned as localkube pins Kubernetes' (local
/// toolchain, static binary, no workspace, no VCS stamping).
fn go(dir: &Path) -> Command {
    let mut cmd = Command::new("go");
    cmd.current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .env("GOWORK", "off")
        .env("GOFLAGS", "-mod=mod -buildvcs=false")
        .stdin(Stdio::null());
    cmd
}

fn run_go(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: running go"))?;
    ensure!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// The Kueue manager binary, built on first use and cached.
pub(crate) fn ensure_binary() -> Result<PathBuf> {
    let cache = localkube::cache_dir()?;
    let dir = cache.join("bin").join(format!("kueue-{VERSION}"));
    let bin = dir.join("kueue");
    if bin.is_file() {
        return Ok(bin);
    }
    let t = step(&format!("Kueue {VERSION}: go build of cmd/kueue from the Go module proxy (once, cached; about 20 min on 2 busy cores)"));
    let work = cache.join("gobuild").join(format!("kueue-{VERSION}"));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    std::fs::write(work.join("go.mod"), "module kueuebuild\n\ngo 1.25\n")
        .with_context(|| format!("writing {}/go.mod", work.display()))?;
    run_go(
        go(&work).args(["get", &format!("{MODULE}@{VERSION}")]),
        "go get Kueue",
    )?;
    // Built beside its final place, moved in once complete.
    let tmp = dir.with_file_name(format!("kueue-{VERSION}.partial"));
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let target = format!("{MODULE}/cmd/kueue");
    run_go(
        go(&work)
            .args(["build", "-o"])
            .arg(tmp.join("kueue"))
            .arg(target),
        "go build of Kueue",
    )?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::rename(&tmp, &dir).with_context(|| format!("moving {} into place", dir.display()))?;
    done(t);
    Ok(bin)
}

// ---- Kueue on the node cluster ----

/// Where the node's Kueue listens on 127.0.0.1: not the ports of the
/// operator test's Kueue, which may run at the same time.
const HEALTH_ADDR: &str = "127.0.0.1:28081";
const WEBHOOK_PORT: u16 = 29443;
/// Where Kueue's manager reads its metrics certificate when it manages no
/// certificates itself (a fixed path in its cmd/kueue/main.go).
const METRICS_CERTS: &str = "/etc/kueue/metrics/certs";
/// Kueue's API group: the webhooks of these kinds are registered.
const KUEUE_GROUP: &str = "kueue.x-k8s.io";

/// What the node's Kueue is configured with.
pub(crate) struct NodeOptions {
    /// `waitForPodsReady.timeout`: an admitted job whose pods have not all
    /// started by then is evicted.
    pub pods_ready_timeout_s: u32,
    /// Base of the requeue backoff after such an eviction.
    pub backoff_base_s: u32,
}

/// The Kueue module's directory in the Go module cache (fetched through the
/// module proxy when missing).
pub(crate) fn module_dir() -> Result<PathBuf> {
    let work = localkube::cache_dir()?
        .join("gobuild")
        .join(format!("kueue-{VERSION}"));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let out = go(&work)
        .args(["mod", "download", "-json", &format!("{MODULE}@{VERSION}")])
        .output()
        .context("go mod download: running go")?;
    ensure!(
        out.status.success(),
        "go mod download {MODULE}@{VERSION}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("go mod download -json printed no JSON")?;
    let dir = v["Dir"]
        .as_str()
        .context("go mod download -json: no Dir in its output")?;
    Ok(PathBuf::from(dir))
}

/// Kueue's configuration for the node: DGLJob as its only (external)
/// framework, waitForPodsReady on without blocking other admissions (each
/// ClusterQueue's quota does that), no leader election, its own certificate
/// management off (certificates in `cert_dir`), metrics off.
fn node_config(o: &NodeOptions, cert_dir: &Path) -> String {
    format!(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nnamespace: kueue-system\n\
         manageJobsWithoutQueueName: false\nleaderElection: {{leaderElect: false}}\n\
         health: {{healthProbeBindAddress: \"{HEALTH_ADDR}\"}}\nmetrics: {{bindAddress: \"0\"}}\n\
         webhook: {{host: 127.0.0.1, port: {WEBHOOK_PORT}, certDir: \"{}\"}}\n\
         internalCertManagement: {{enable: false}}\n\
         waitForPodsReady: {{timeout: {}s, blockAdmission: false, requeuingStrategy: \
         {{timestamp: Eviction, backoffBaseSeconds: {}, backoffMaxSeconds: 300}}}}\n\
         integrations: {{frameworks: [], externalFrameworks: [DGLJob.v1alpha1.dgloperator.io]}}\n\
         featureGates: {{VisibilityOnDemand: false}}\n",
        cert_dir.display(),
        o.pods_ready_timeout_s,
        o.backoff_base_s
    )
}

/// Whether every rule of a webhook is about Kueue's own kinds.
fn for_kueue_kinds(hook: &Value) -> bool {
    let Some(rules) = hook["rules"].as_array().filter(|r| !r.is_empty()) else {
        return false;
    };
    rules.iter().all(|r| {
        r["apiGroups"]
            .as_array()
            .is_some_and(|g| !g.is_empty() && g.iter().all(|g| g == KUEUE_GROUP))
    })
}

/// Kueue's webhook configurations (`config/components/webhook/manifests.yaml`)
/// as registered on the node: named as Kueue's install names them
/// (`kueue-` + name), only the webhooks of Kueue's own kinds, each calling
/// `base_url` + its service path, trusting `ca_bundle` (base64 PEM).
fn webhook_configs(manifests: &str, base_url: &str, ca_bundle: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(manifests) {
        let mut v = Value::deserialize(doc).context("parsing Kueue's webhook manifests")?;
        if v.is_null() {
            continue;
        }
        let kind = v["kind"].as_str().unwrap_or_default();
        ensure!(
            kind.ends_with("WebhookConfiguration"),
            "Kueue's webhook manifests: expected a webhook configuration, found kind {kind:?}"
        );
        let name = v["metadata"]["name"]
            .as_str()
            .context("Kueue's webhook manifests: a configuration without metadata.name")?
            .to_owned();
        v["metadata"] = json!({ "name": format!("kueue-{name}") });
        let hooks = v["webhooks"]
            .as_array()
            .context("Kueue's webhook manifests: a configuration without webhooks")?;
        let kept: Vec<Value> = hooks
            .iter()
            .filter(|h| for_kueue_kinds(h))
            .map(|h| with_url(h, base_url, ca_bundle))
            .collect::<Result<_>>()?;
        ensure!(
            !kept.is_empty(),
            "Kueue's webhook manifests: no webhook of kind group {KUEUE_GROUP} in {name}"
        );
        v["webhooks"] = Value::Array(kept);
        out.push(v);
    }
    Ok(out)
}

/// A webhook calling `base_url` + the path of its in-cluster service.
fn with_url(hook: &Value, base_url: &str, ca_bundle: &str) -> Result<Value> {
    let mut hook = hook.clone();
    let path = hook["clientConfig"]["service"]["path"]
        .as_str()
        .with_context(|| {
            format!(
                "Kueue's webhook {}: no clientConfig.service.path",
                hook["name"]
            )
        })?
        .to_owned();
    hook["clientConfig"] = json!({ "url": format!("{base_url}{path}"), "caBundle": ca_bundle });
    Ok(hook)
}

fn webhook_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        &format!("{}s", kind.to_ascii_lowercase()),
    )
}

/// A self-signed certificate for 127.0.0.1 (`tls.crt`, `tls.key` in `dir`).
fn self_signed(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=kueue-node",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(dir.join("tls.key"))
        .arg("-out")
        .arg(dir.join("tls.crt"))
        .stdin(Stdio::null())
        .output()
        .context("running openssl")?;
    ensure!(
        out.status.success(),
        "openssl made no certificate in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Ends a Kueue manager an earlier run left (its pid file in `dir`, the
/// same binary): one killed with xtask would keep its ports.
fn stop_stale(dir: &Path, bin: &Path) {
    let pid_file = dir.join("kueue.pid");
    let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    else {
        return;
    };
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    if exe.as_deref() == Some(bin) {
        tracing::warn!(pid, "stopping the Kueue manager an earlier run left");
        terminate(pid, || !Path::new(&format!("/proc/{pid}")).exists());
    }
    let _ = std::fs::remove_file(pid_file);
}

/// SIGTERM, then SIGKILL if `gone` is not true within 10 s.
fn terminate(pid: i32, mut gone: impl FnMut() -> bool) {
    // SAFETY: kill(2) with a pid this tool started; no memory is shared.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    for _ in 0..100 {
        if gone() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Kueue's manager on the host, serving the node cluster; stop it with
/// [`NodeKueue::stop`] (the process is also killed when dropped).
pub(crate) struct NodeKueue {
    child: Option<Child>,
    dir: PathBuf,
    log: PathBuf,
    /// (kind, name) of the webhook configurations registered.
    webhooks: Vec<(String, String)>,
    /// Whether the metrics certificate was made here (and so is removed).
    made_metrics_certs: bool,
}

impl NodeKueue {
    /// Installs Kueue's CRDs, starts its manager and registers its webhooks.
    pub(crate) async fn start(
        client: &Client,
        cluster: &LocalCluster,
        kubeconfig: &Path,
        opts: &NodeOptions,
    ) -> Result<NodeKueue> {
        let bin = tokio::task::spawn_blocking(ensure_binary).await??;
        let module = tokio::task::spawn_blocking(module_dir).await??;
        let dir = cluster.state_dir().join("kueue");
        stop_stale(&dir, &bin);
        install_crds(client, &module).await?;
        self_signed(&dir.join("certs"))?;
        let made_metrics_certs = !Path::new(METRICS_CERTS).join("tls.crt").is_file();
        if made_metrics_certs {
            self_signed(Path::new(METRICS_CERTS))?;
        }
        let config = dir.join("config.yaml");
        std::fs::write(&config, node_config(opts, &dir.join("certs")))
            .with_context(|| format!("writing {}", config.display()))?;
        let log = cluster.log_dir().join("kueue.log");
        let child = spawn(&bin, &config, kubeconfig, &log)?;
        std::fs::write(dir.join("kueue.pid"), child.id().to_string())
            .with_context(|| format!("writing {}/kueue.pid", dir.display()))?;
        let mut k = NodeKueue {
            child: Some(child),
            dir,
            log,
            webhooks: Vec::new(),
            made_metrics_certs,
        };
        if let Err(e) = k.serve(client, &module).await {
            k.print_log_tail(30);
            if let Err(stop) = k.stop(client).await {
                eprintln!("kueue: stopping after a failed start: {stop:#}");
            }
            return Err(e);
        }
        Ok(k)
    }

    /// Waits until the manager listens, then registers its webhooks.
    async fn serve(&mut self, client: &Client, module: &Path) -> Result<()> {
        self.wait_listening().await?;
        let manifests = module.join("config/components/webhook/manifests.yaml");
        let text = std::fs::read_to_string(&manifests)
            .with_context(|| format!("reading {}", manifests.display()))?;
        let ca = std::fs::read(self.dir.join("certs/tls.crt"))
            .context("reading the webhook certificate")?;
        // A ByteString serializes as base64, the form caBundle takes.
        let ca = serde_json::to_value(k8s_openapi::ByteString(ca))?;
        let ca = ca.as_str().unwrap_or_default();
        let base = format!("https://127.0.0.1:{WEBHOOK_PORT}");
        for cfg in webhook_configs(&text, &base, ca)? {
            let kind = cfg["kind"].as_str().unwrap_or_default().to_owned();
            let name = cfg["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            self.webhooks.push((kind.clone(), name.clone()));
            let obj: DynamicObject = serde_json::from_value(cfg)?;
            Api::<DynamicObject>::all_with(client.clone(), &webhook_resource(&kind))
                .patch(
                    &name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(&obj),
                )
                .await
                .with_context(|| format!("registering {kind} {name}"))?;
        }
        Ok(())
    }

    async fn wait_listening(&mut self) -> Result<()> {
        let webhook = format!("127.0.0.1:{WEBHOOK_PORT}");
        for _ in 0..240 {
            if let Some(child) = self.child.as_mut() {
                if let Some(st) = child.try_wait()? {
                    bail!("Kueue's manager exited ({st}); see {}", self.log.display());
                }
            }
            let health = tokio::net::TcpStream::connect(HEALTH_ADDR).await.is_ok();
            if health && tokio::net::TcpStream::connect(&webhook).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        bail!(
            "Kueue's manager not listening on {HEALTH_ADDR} and {webhook} after 60 s; see {}",
            self.log.display()
        )
    }

    /// The manager's log file.
    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    /// Prints the last `n` lines of the manager's log.
    pub(crate) fn print_log_tail(&self, n: usize) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        println!(
            "\n---- Kueue's manager log ({}), last {n} lines",
            self.log.display()
        );
        for l in &lines[lines.len().saturating_sub(n)..] {
            println!("  | {l}");
        }
    }

    /// Removes the webhook configurations and ends the manager (the CRDs
    /// stay: without the manager nothing acts on them, and a cluster
    /// without a queued DGLJob never uses them).
    pub(crate) async fn stop(mut self, client: &Client) -> Result<()> {
        let mut first_err = None;
        for (kind, name) in std::mem::take(&mut self.webhooks) {
            let api = Api::<DynamicObject>::all_with(client.clone(), &webhook_resource(&kind));
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    first_err.get_or_insert(
                        anyhow::Error::new(e).context(format!("deleting {kind} {name}")),
                    );
                }
            }
        }
        self.end_process();
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn end_process(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.id() as i32;
            terminate(pid, || matches!(child.try_wait(), Ok(Some(_))));
            let _ = child.wait();
            let _ = std::fs::remove_file(self.dir.join("kueue.pid"));
        }
        if std::mem::take(&mut self.made_metrics_certs) {
            let _ = std::fs::remove_dir_all(METRICS_CERTS);
            // Only when empty: the operator test's Kueue may use them.
            let _ = std::fs::remove_dir("/etc/kueue/metrics");
            let _ = std::fs::remove_dir("/etc/kueue");
        }
    }
}

impl Drop for NodeKueue {
    fn drop(&mut self) {
        self.end_process();
    }
}

fn spawn(bin: &Path, config: &Path, kubeconfig: &Path, log: &Path) -> Result<Child> {
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    Command::new(bin)
        .arg(format!("--config={}", config.display()))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))
}

/// Every CRD of Kueue's (its manager needs them all).
async fn install_crds(client: &Client, module: &Path) -> Result<()> {
    let bases = module.join("config/components/crd/bases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&bases)
        .with_context(|| format!("reading {}", bases.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    ensure!(!files.is_empty(), "no CRD in {}", bases.display());
    for path in files {
        let yaml = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        localkube::apply_crds(client, &yaml)
            .await
            .with_context(|| format!("applying {}", path.display()))?;
    }
    Ok(())
}

/// Switches the Helm-installed operator's Kueue integration (`helm upgrade
/// --reset-then-reuse-values --set kueue.enabled=<on>`) and waits until its
/// only pods are Ready ones with (or without) `--kueue`: a pod of the other
/// kind still running would treat queued jobs as it does. Returns how long
/// it took.
pub(crate) async fn operator_kueue(
    client: &Client,
    kubeconfig: &Path,
    on: bool,
) -> Result<Duration> {
    let start = Instant::now();
    let kubeconfig = kubeconfig.to_owned();
    tokio::task::spawn_blocking(move || helm_set_kueue(&kubeconfig, on)).await??;
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    loop {
        let list = pods.list(&operator_pods_lp()).await?.items;
        let settled =
            !list.is_empty() && list.iter().all(|p| pod_ready(p) && has_kueue_flag(p) == on);
        if settled {
            return Ok(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(240) {
            let names: Vec<String> = list.iter().map(|p| p.name_any()).collect();
            bail!("the operator's pods are not all Ready with kueue {on} after 240 s: {names:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn has_kueue_flag(p: &Pod) -> bool {
    p.spec
        .iter()
        .flat_map(|s| &s.containers)
        .any(|c| c.args.iter().flatten().any(|a| a == "--kueue"))
}

fn helm_set_kueue(kubeconfig: &Path, on: bool) -> Result<()> {
    let helm = localkube::ensure_tool(localkube::GoTool::Helm)?;
    let chart = repo_root().join("charts").join("dgl-operator");
    let out = Command::new(&helm)
        .args(["upgrade", RELEASE])
        .arg(&chart)
        .args([
            "--namespace",
            OPERATOR_NAMESPACE,
            "--reset-then-reuse-values",
        ])
        .args(["--set", &format!("kueue.enabled={on}")])
        .args(["--wait", "--timeout", "180s", "--kubeconfig"])
        .arg(kubeconfig)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", helm.display()))?;
    ensure!(
        out.status.success(),
        "helm upgrade --set kueue.enabled={on} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFESTS: &str = "\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- name: mpod.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  rules:
  - {apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [pods]}
- name: mworkload.kb.io
  failurePolicy: Fail
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-workload}
  rules:
  - {apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE], resources: [workloads]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- name: vclusterqueue.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-kueue-x-k8s-io-v1beta2-clusterqueue}
  rules:
  - {apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE, UPDATE], resources: [clusterqueues]}
";

    #[test]
    fn only_kueues_own_webhooks_are_registered_with_a_url() {
        let cfgs = webhook_configs(MANIFESTS, "https://127.0.0.1:29443", "Q0E=").unwrap();
        assert_eq!(cfgs.len(), 2);
        assert_eq!(
            cfgs[0]["metadata"]["name"],
            "kueue-mutating-webhook-configuration"
        );
        let hooks = cfgs[0]["webhooks"].as_array().unwrap();
        assert_eq!(hooks.len(), 1, "the Pod webhook is left out: {hooks:?}");
        assert_eq!(hooks[0]["name"], "mworkload.kb.io");
        assert_eq!(hooks[0]["failurePolicy"], "Fail", "kept as Kueue has it");
        assert_eq!(
            hooks[0]["clientConfig"],
            json!({"url": "https://127.0.0.1:29443/mutate-kueue-x-k8s-io-v1beta2-workload", "caBundle": "Q0E="})
        );
        assert_eq!(cfgs[1]["kind"], "ValidatingWebhookConfiguration");
        assert_eq!(
            cfgs[1]["webhooks"][0]["clientConfig"]["url"],
            "https://127.0.0.1:29443/validate-kueue-x-k8s-io-v1beta2-clusterqueue"
        );
    }

    #[test]
    fn a_webhook_without_a_service_path_is_an_error_naming_it() {
        let bad = MANIFESTS.replace(", path: /mutate-kueue-x-k8s-io-v1beta2-workload", "");
        let e = format!("{:#}", webhook_configs(&bad, "https://x", "").unwrap_err());
        assert!(
            e.contains("mworkload.kb.io") && e.contains("clientConfig.service.path"),
            "{e}"
        );
        let other = "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n";
        let e = format!("{:#}", webhook_configs(other, "https://x", "").unwrap_err());
        assert!(e.contains("\"Service\""), "{e}");
    }

    #[test]
    fn the_node_config_turns_on_the_external_framework_and_the_timeout() {
        let o = NodeOptions {
            pods_ready_timeout_s: 45,
            backoff_base_s: 7,
        };
        let text = node_config(&o, Path::new("/tmp/certs"));
        let v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(v["waitForPodsReady"]["timeout"].as_str(), Some("45s"));
        assert_eq!(
            v["waitForPodsReady"]["requeuingStrategy"]["backoffBaseSeconds"].as_u64(),
            Some(7)
        );
        assert_eq!(
            v["integrations"]["externalFrameworks"][0].as_str(),
            Some("DGLJob.v1alpha1.dgloperator.io")
        );
        assert_eq!(v["webhook"]["certDir"].as_str(), Some("/tmp/certs"));
        assert_eq!(v["webhook"]["port"].as_u64(), Some(u64::from(WEBHOOK_PORT)));
    }
}
