//! The `namespaced` e2e scenario: the single-namespace install
//! (`deploy/namespaced`, built with kustomize) runs the GraphSAGE example
//! under Pod Security "restricted", which that install's namespace enforces.
//!
//! Both installs name their objects `dgl-operator` in `dgl-operator-system`,
//! so the Helm release is uninstalled first; the scenario runs last.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use kube::{Client, ResourceExt};

use crate::images::render;
use crate::stack::jobs::{
    check_losses_fall, delete_and_check_children, example_succeeds, launcher_log, losses_by_worker,
};
use crate::stack::{pod_ready, EXAMPLE, MANAGER, OPERATOR_NAMESPACE, RELEASE};
use crate::util::repo_root;

const OVERLAY: &str = "deploy/namespaced";
const PSA_ENFORCE: &str = "pod-security.kubernetes.io/enforce";

pub async fn namespaced(client: &Client, kubeconfig: &Path) -> Result<String> {
    helm_uninstall(kubeconfig)?;
    let docs = kustomize_build(OVERLAY)?;
    apply_docs(client, &docs).await?;
    let enforce = Api::<Namespace>::all(client.clone())
        .get(OPERATOR_NAMESPACE)
        .await?
        .labels()
        .get(PSA_ENFORCE)
        .cloned();
    ensure!(
        enforce.as_deref() == Some("restricted"),
        "{OVERLAY} left namespace {OPERATOR_NAMESPACE} with {PSA_ENFORCE}={enforce:?}, not restricted"
    );
    let pod = wait_ready(client, Duration::from_secs(180)).await?;
    println!("    {OVERLAY} installed; operator pod {pod} Ready; {PSA_ENFORCE}=restricted");
    let (ns, name) = (OPERATOR_NAMESPACE, "graphsage-restricted");
    let total = example_succeeds(client, ns, name, EXAMPLE, |_, _, _| {}).await?;
    check_losses_fall(&losses_by_worker(&launcher_log(client, ns, name).await?), 2)?;
    let deleted_in = delete_and_check_children(client, ns, name).await?;
    Ok(format!(
        "{OVERLAY} under PSA restricted: Succeeded {:.0}s after apply; children deleted in {:.1}s",
        total.as_secs_f64(),
        deleted_in.as_secs_f64()
    ))
}

fn helm_uninstall(kubeconfig: &Path) -> Result<()> {
    let helm = localkube::ensure_tool(localkube::GoTool::Helm)?;
    let mut cmd = Command::new(&helm);
    cmd.args(["uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--wait", "--timeout", "120s", "--ignore-not-found"])
        .stdin(Stdio::null());
    println!("    {}", render(&cmd));
    let out = cmd
        .output()
        .with_context(|| format!("running {}", helm.display()))?;
    if !out.status.success() {
        bail!(
            "helm uninstall failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// `kustomize build <dir>` as JSON documents.
fn kustomize_build(dir: &str) -> Result<Vec<serde_json::Value>> {
    let kustomize = localkube::ensure_tool(localkube::GoTool::Kustomize)?;
    let mut cmd = Command::new(&kustomize);
    cmd.arg("build").arg(repo_root().join(dir));
    println!("    {}", render(&cmd));
    let out = cmd
        .output()
        .with_context(|| format!("running {}", kustomize.display()))?;
    if !out.status.success() {
        bail!(
            "kustomize build {dir} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout).context("kustomize printed non-UTF-8")?;
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            serde_yaml::from_value::<serde_json::Value>(serde::Deserialize::deserialize(d)?)
                .map_err(anyhow::Error::from)
        })
        .collect::<Result<Vec<_>>>()
        .with_context(|| format!("parsing the output of kustomize build {dir}"))
}

/// Server-side apply of every document, as `kubectl apply --server-side` would.
async fn apply_docs(client: &Client, docs: &[serde_json::Value]) -> Result<()> {
    let discovery = Discovery::new(client.clone()).run().await?;
    for doc in docs {
        let obj: DynamicObject = serde_json::from_value(doc.clone())?;
        let tm = obj
            .types
            .clone()
            .context("a document without apiVersion/kind")?;
        let gvk = kube::core::GroupVersionKind::try_from(&tm)?;
        let (ar, caps) = discovery
            .resolve_gvk(&gvk)
            .with_context(|| format!("the API server does not serve {gvk:?}"))?;
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &ar),
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                obj.namespace().as_deref().unwrap_or(OPERATOR_NAMESPACE),
                &ar,
            ),
        };
        api.patch(
            &obj.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .with_context(|| format!("applying {} {}", tm.kind, obj.name_any()))?;
    }
    Ok(())
}

/// Waits for a Ready pod of the kustomize install (labelled by name, not by Helm release).
async fn wait_ready(client: &Client, timeout: Duration) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let lp = ListParams::default().labels("app.kubernetes.io/name=dgl-operator");
    let start = Instant::now();
    loop {
        let list = pods.list(&lp).await?;
        if let Some(p) = list.items.iter().find(|p| pod_ready(p)) {
            return Ok(p.name_any());
        }
        if start.elapsed() > timeout {
            let seen: Vec<_> = list
                .items
                .iter()
                .map(|p| (p.name_any(), p.status.clone().and_then(|s| s.phase)))
                .collect();
            bail!("the {OVERLAY} operator had no Ready pod within {timeout:?}; pods: {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
