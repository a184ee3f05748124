//! The stack the node commands share (`e2e`, `demo`, `chaos`, `bench
//! latency`): a node cluster with the images loaded and the operator
//! installed by Helm, and what explains an install that failed. Following
//! DGLJobs on it is `jobs`.

pub(crate) mod jobs;
pub(crate) mod kueue;
pub(crate) mod placement;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, LogParams};
use kube::{Client, ResourceExt};
use localkube::LocalCluster;

use crate::images::render;
use crate::util::node_cluster_n;
use crate::util::{done, repo_root, step};

/// Helm release and namespace of the operator.
pub(crate) const RELEASE: &str = "dgl-operator";
pub(crate) const OPERATOR_NAMESPACE: &str = "dgl-operator-system";
/// The node cluster `cargo xtask e2e` (and so `cargo xtask test`) uses.
pub(crate) const DEFAULT_CLUSTER: &str = "e2e";
/// Field manager of what this tool applies.
pub(crate) const MANAGER: &str = "xtask-e2e";
/// The example the train and fail scenarios run.
pub(crate) const EXAMPLE: &str = "examples/graphsage/dgljob.yaml";
/// The example of partition mode ParMETIS.
pub(crate) const EXAMPLE_PARMETIS: &str = "examples/parmetis/dgljob.yaml";
/// The example of partition mode DistParMETIS.
pub(crate) const EXAMPLE_DISTPARMETIS: &str = "examples/distparmetis/dgljob.yaml";
/// DGL's own convention: launch.py-style command lines.
pub(crate) const EXAMPLE_LAUNCHPY: &str = "examples/launchpy/dgljob.yaml";
/// GraphBolt partitions.
pub(crate) const EXAMPLE_GRAPHBOLT: &str = "examples/graphbolt/dgljob.yaml";
/// A job without workers.
pub(crate) const EXAMPLE_STANDALONE: &str = "examples/standalone/dgljob.yaml";
/// How long one GraphSAGE job may take from apply to a final phase.
pub(crate) const JOB_TIMEOUT: Duration = Duration::from_secs(900);

/// A node cluster with the images loaded and the operator installed.
pub(crate) struct Stack {
    pub cluster: LocalCluster,
    pub kubeconfig: PathBuf,
    pub client: Client,
}

/// The runtime of `e2e` and `demo`: two threads, like the machine.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// Starts (or reuses) the node cluster `name`, builds and loads the images,
/// and installs the operator with Helm; returns when the operator is Ready.
pub(crate) fn prepare(
    rt: &tokio::runtime::Runtime,
    name: &str,
    nodes: usize,
    profile: crate::images::Profile,
) -> Result<Stack> {
    prepare_with(rt, name, nodes, profile, Vec::new(), || Ok(()))
}

/// [`prepare`] with only the images `only` (all when empty), calling
/// `built` once the node cluster is up and before the images step (to wait
/// for a build the caller started beside it).
pub(crate) fn prepare_with(
    rt: &tokio::runtime::Runtime,
    name: &str,
    nodes: usize,
    profile: crate::images::Profile,
    only: Vec<crate::images::Which>,
    built: impl FnOnce() -> Result<()>,
) -> Result<Stack> {
    let t = step(&format!(
        "node cluster {name:?}, {nodes} node(s) (control plane + containerd + kubelet + kube-proxy each)"
    ));
    let cluster = node_cluster_n(name, nodes)?;
    let info = rt
        .block_on(cluster.up())
        .with_context(|| format!("starting node cluster {name:?}"))?;
    println!("    export KUBECONFIG={}", info.kubeconfig.display());
    done(t);
    built()?;

    let t = step(&format!(
        "images: {} (podman, no registry)",
        if only.is_empty() {
            "operator, runtime, GraphSAGE and GraphStorm".to_owned()
        } else {
            format!("{only:?}")
        }
    ));
    crate::images::run(crate::images::Args {
        name: name.to_owned(),
        only,
        no_load: false,
        force: false,
        smoke: false,
        python_env_only: false,
        profile,
    })?;
    done(t);

    let t = step("operator: CRD (server-side apply) and `helm upgrade --install`");
    let client = rt.block_on(localkube::client_from_file(&info.kubeconfig))?;
    rt.block_on(localkube::apply_crds(&client, &dgl_api::crd_yaml()))
        .context("applying the DGLJob CRD")?;
    // The tag stays the same when the image is rebuilt: an annotation with
    // its content hash makes Helm roll the operator's pod onto the new one.
    let image_hash = cluster
        .node_image_labels(&crate::images::reference(crate::images::Which::Operator))?
        .and_then(|l| l.get(crate::images::HASH_LABEL).cloned())
        .context("the operator image in the node's containerd has no content-hash label")?;
    // The operator on node 0, the host's own node: the faults that take a
    // node away (NodeLoss) cut an extra one, and must not take the
    // operator with it (Kubernetes alone would move it only after 300 s).
    let home = placement::node0(&cluster)?;
    let installed = helm_install(&info.kubeconfig, &image_hash, &home).and_then(|()| {
        rt.block_on(wait_operator_ready(&client, Duration::from_secs(180)))
            .map(drop)
    });
    if installed.is_err() {
        rt.block_on(dump_install(&client));
    }
    installed?;
    done(t);
    Ok(Stack {
        cluster,
        kubeconfig: info.kubeconfig,
        client,
    })
}

/// `helm upgrade --install` of the chart, with the locally loaded image,
/// the operator's pod held on `node`.
fn helm_install(kubeconfig: &Path, image_hash: &str, node: &str) -> Result<()> {
    let helm = localkube::ensure_tool(localkube::GoTool::Helm)?;
    let chart = repo_root().join("charts").join("dgl-operator");
    let mut cmd = Command::new(&helm);
    cmd.arg("upgrade")
        .arg("--install")
        .arg(RELEASE)
        .arg(&chart)
        .args(["--namespace", OPERATOR_NAMESPACE, "--create-namespace"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        // The image was imported into containerd; never try a registry.
        .args(["--set", "image.pullPolicy=Never"])
        .args(["--set", "logFormat=text"])
        .arg("--set-string")
        .arg(format!(
            "podAnnotations.dgl-operator-image-hash={image_hash}"
        ))
        .arg("--set-string")
        .arg(format!("nodeSelector.kubernetes\\.io/hostname={node}"))
        .args(["--wait", "--timeout", "180s"])
        .stdin(Stdio::null());
    println!("    {}", render(&cmd));
    let out = cmd
        .output()
        .with_context(|| format!("could not run {}", helm.display()))?;
    if !out.status.success() {
        bail!(
            "helm upgrade --install failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for line in String::from_utf8_lossy(&out.stdout).lines().take(6) {
        println!("    | {line}");
    }
    Ok(())
}

pub(crate) fn operator_pods_lp() -> ListParams {
    ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"))
}

pub(crate) fn pod_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until the operator's Deployment has a Ready pod; returns its name.
pub(crate) async fn wait_operator_ready(client: &Client, timeout: Duration) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let start = Instant::now();
    loop {
        let list = pods.list(&operator_pods_lp()).await?;
        if let Some(p) = list.items.iter().find(|p| pod_ready(p)) {
            return Ok(p.name_any());
        }
        if start.elapsed() > timeout {
            let deploys: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
            let status = deploys
                .list(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .map(|d| format!("{}: {:?}", d.name_any(), d.status))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default();
            bail!(
                "the operator had no Ready pod within {timeout:?}; pods: {:?}\n{status}",
                list.items
                    .iter()
                    .map(|p| (
                        p.name_any(),
                        p.status.as_ref().and_then(|s| s.phase.clone())
                    ))
                    .collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Prints the Events of namespace `ns`, one line each.
pub(crate) async fn print_events(client: &Client, ns: &str) {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = events.list(&ListParams::default()).await {
        for e in list.items {
            println!(
                "event {} {} {}: {}",
                e.involved_object.name.as_deref().unwrap_or("-"),
                e.type_.as_deref().unwrap_or("-"),
                e.reason.as_deref().unwrap_or("-"),
                e.message.as_deref().unwrap_or("")
            );
        }
    }
}

/// Prints why the operator's pod may not be Ready: the node's conditions
/// and taints (disk pressure keeps pods Pending), the pods and the Events.
async fn dump_install(client: &Client) {
    println!("\n---- diagnostics for the operator's install");
    let nodes: Api<Node> = Api::all(client.clone());
    if let Ok(list) = nodes.list(&ListParams::default()).await {
        for n in list.items {
            let conditions: Vec<String> = n
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .map(|c| {
                    format!(
                        "{}={} ({})",
                        c.type_,
                        c.status,
                        c.message.as_deref().unwrap_or("")
                    )
                })
                .collect();
            let taints: Vec<String> = n
                .spec
                .iter()
                .flat_map(|s| s.taints.iter().flatten())
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect();
            println!("node {}: {conditions:?} taints {taints:?}", n.name_any());
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    if let Ok(list) = pods.list(&ListParams::default()).await {
        for p in list.items {
            let status = p
                .status
                .as_ref()
                .map(|s| serde_json::to_string(&(&s.phase, &s.conditions, &s.container_statuses)))
                .transpose()
                .unwrap_or_default()
                .unwrap_or_default();
            println!("pod {}: {status}", p.name_any());
        }
    }
    print_events(client, OPERATOR_NAMESPACE).await;
    dump_operator(client).await;
}

pub(crate) async fn dump_operator(client: &Client) {
    println!("\n---- operator logs (last 80 lines)");
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    if let Ok(list) = pods.list(&operator_pods_lp()).await {
        for p in list.items {
            let log = pods
                .logs(
                    &p.name_any(),
                    &LogParams {
                        tail_lines: Some(80),
                        ..LogParams::default()
                    },
                )
                .await
                .unwrap_or_else(|e| format!("(no log: {e})"));
            println!("pod {}:", p.name_any());
            for l in log.lines() {
                println!("  | {l}");
            }
        }
    }
}
