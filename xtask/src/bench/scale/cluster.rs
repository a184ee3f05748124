//! The bench's cluster: a fresh control plane with the CRDs, a namespace
//! per phase, the bench's own kube-scheduler and kwok with its fake nodes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::Client;
use localkube::LocalCluster;
use serde_json::json;

use super::peer;
use super::procs::{free_port, Procs};
use super::spec::{ScaleArgs, CLUSTER, KWOK_NODE_ANNOTATION, STAGES};

pub(super) async fn create_nodes(client: &Client, n: u32) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 0..n {
        let name = format!("kwok-node-{i}");
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", "type": "kwok"}
            },
            "spec": {},
            "status": {
                "allocatable": {"cpu": "1000", "memory": "1Ti", "pods": "1000"},
                "capacity": {"cpu": "1000", "memory": "1Ti", "pods": "1000"}
            }
        }))?;
        nodes
            .patch(
                &name,
                &PatchParams::apply("xtask-bench").force(),
                &Patch::Apply(&node),
            )
            .await
            .with_context(|| format!("creating node {name}"))?;
    }
    Ok(())
}

/// Fake nodes whose Ready condition is True.
pub(super) async fn nodes_ready(client: &Client) -> Result<usize> {
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(nodes
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count())
}

pub(super) async fn wait_nodes_ready(client: &Client, n: u32, procs: &mut Procs) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        procs.check_running()?;
        let ready = nodes_ready(client).await?;
        if ready as u32 >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {ready} of {n} kwok nodes became Ready in 60 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Step 1: a fresh bench cluster with the CRDs (ours; the peer's with
/// --peer).
pub(super) async fn start_cluster(
    cluster: &LocalCluster,
    load: &str,
    peer_crd: Option<&Path>,
) -> Result<(localkube::ClusterInfo, Client, PathBuf)> {
    eprintln!("==> cluster {CLUSTER:?} (fresh etcd); load average {load}");
    cluster
        .down(false)
        .await
        .context("stopping an earlier bench cluster")?;
    let info = cluster.up().await.context("starting the bench cluster")?;
    let client = info.client().await?;
    let work = cluster.state_dir().join("bench");
    std::fs::create_dir_all(&work)?;
    localkube::apply_crds(&client, &dgl_api::crd_yaml()).await?;
    if let Some(crd) = peer_crd {
        localkube::apply_crds(&client, &peer::crd_yaml(crd)?).await?;
    }
    Ok((info, client, work))
}

pub(super) async fn create_namespace(client: &Client, ns: &str) -> Result<()> {
    let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    Api::<Namespace>::all(client.clone())
        .patch(ns, &PatchParams::apply("xtask-bench"), &Patch::Apply(&obj))
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    Ok(())
}

/// Deletes a phase's namespace and waits (up to 5 min) until it is gone, so
/// that the next phase starts on an empty cluster; not measured.
pub(super) async fn delete_namespace(client: &Client, ns: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let started = Instant::now();
    api.delete(ns, &DeleteParams::background()).await?;
    while api.get_opt(ns).await?.is_some() {
        if started.elapsed() > Duration::from_secs(300) {
            eprintln!("    warning: namespace {ns} still exists after 300 s; going on");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "    namespace {ns} deleted in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Step 2 (with --scheduler-qps): a kube-scheduler of the bench's own, with
/// that client QPS; its pid.
pub(super) fn start_scheduler(
    args: &ScaleArgs,
    info: &localkube::ClusterInfo,
    work: &Path,
    bins: &localkube::Binaries,
    procs: &mut Procs,
) -> Result<Option<u32>> {
    if args.scheduler_qps <= 0.0 {
        return Ok(None);
    }
    let cfg = work.join("kube-scheduler.yaml");
    let config = json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": info.kubeconfig.display().to_string(),
            "qps": args.scheduler_qps,
            "burst": (args.scheduler_qps * 2.0).ceil() as u32,
        },
        "leaderElection": {"leaderElect": false},
        "enableProfiling": false,
    });
    std::fs::write(&cfg, serde_yaml::to_string(&config)?)?;
    eprintln!("==> kube-scheduler (client QPS {})", args.scheduler_qps);
    let pid = procs.spawn(
        "kube-scheduler",
        Command::new(&bins.kube_scheduler).args([
            format!("--config={}", cfg.display()),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", free_port()?),
        ]),
        &work.join("kube-scheduler.log"),
    )?;
    Ok(Some(pid))
}

/// Step 3: kwok with `--nodes` fake nodes, all Ready; its pid.
pub(super) async fn start_kwok(
    args: &ScaleArgs,
    client: &Client,
    info: &localkube::ClusterInfo,
    work: &Path,
    bins: &localkube::Binaries,
    procs: &mut Procs,
) -> Result<u32> {
    eprintln!("==> kwok with {} fake nodes", args.nodes);
    let kwok_cfg = work.join("kwok.yaml");
    std::fs::write(
        &kwok_cfg,
        STAGES.replace("__LAUNCHER_DELAY_MS__", &args.launcher_ms.to_string()),
    )?;
    create_nodes(client, args.nodes).await?;
    let kwok_pid = procs.spawn(
        "kwok",
        Command::new(&bins.kwok).args([
            format!("--kubeconfig={}", info.kubeconfig.display()),
            format!("--config={}", kwok_cfg.display()),
            "--manage-all-nodes=false".into(),
            format!("--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake"),
            // Room for every pod's IP (the default /24 has 254).
            "--cidr=10.0.0.1/16".into(),
            "--node-ip=10.255.0.1".into(),
            // Heartbeats by node Lease (renewed every 10 s), which is what the
            // node-heartbeat-with-lease Stage above assumes; without it the
            // nodes would turn NotReady after the controller-manager's grace
            // period and it would mark every pod NotReady.
            "--node-lease-duration-seconds=40".into(),
        ]),
        &work.join("kwok.log"),
    )?;
    wait_nodes_ready(client, args.nodes, procs).await?;

    Ok(kwok_pid)
}
