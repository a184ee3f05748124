//! A node lost mid-training (issue #34 item 4): the extra node that holds a
//! worker is cut off the network (`LocalCluster::cut_node`: every packet of
//! its veth dropped, as a failed NIC or a partitioned rack does; its
//! kubelet, containerd and containers keep running, unreachable). Expected:
//! the node turns NotReady once its lease is stale; the operator then names
//! the node and the pods on it (condition `NodeLost`, a Warning Event),
//! stops the run and replaces the lost pods on the remaining node; the job
//! restarts once and Succeeds. The node is joined again once the new run's
//! pods are placed; then no process of the old run may be left on it.
//! NodeLossPartitioning: the same for the partitioner's node while it partitions: the
//! launch.py-style example with a Partitioner template that prefers the
//! extra node and a partition command that, on that node only, takes ten
//! minutes (so the cut certainly falls in it); its replacement, on node 0,
//! partitions at once.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use dgl_api::names::{partitioner_name, worker_name, LABEL_JOB_NAME};
use dgl_api::{DGLJob, JobPhase, ReplicaType};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use localkube::LocalCluster;

use super::evict::node_ready;
use super::fault::Outcome;
use super::infra::{condition_message, during, example, pid_in_pod, restarts, running};
use crate::stack::jobs::{delete_and_count_left, expect_phase, job_events};

use dgl_api::{CONDITION_NODE_LOST as NODE_LOST, EVENT_NODE_LOST};
/// How long after NotReady the operator has to name the node (the bound).
const NAME_WITHIN: Duration = Duration::from_secs(60);
/// The control plane's node-monitor grace (40-50 s) and some slack.
const NOT_READY_WITHIN: Duration = Duration::from_secs(120);

/// A worker's node lost while the job trains.
pub async fn training(client: &Client, cluster: &LocalCluster, ns: &str) -> Result<Outcome> {
    let extra = extra_nodes(cluster)?;
    let started = Instant::now();
    let name = "chaos-nodeloss";
    let workers: Vec<String> = (0..2).map(|i| worker_name(name, i)).collect();
    let (note, left) = lose_one(client, cluster, ns, example(name, 2)?, &workers, &extra).await?;
    Ok(Outcome {
        terminal: Some(started.elapsed()),
        left,
        note: format!("training: {note}"),
    })
}

/// The partitioner's node lost while it partitions.
pub async fn partitioning(client: &Client, cluster: &LocalCluster, ns: &str) -> Result<Outcome> {
    let extra = extra_nodes(cluster)?;
    let target = extra.iter().next().cloned().unwrap_or_default();
    let started = Instant::now();
    let name = "chaos-nodeloss-part";
    let job = slow_partitioner_on(name, &target)?;
    let partitioner = vec![partitioner_name(name)];
    let (note, left) = lose_one(client, cluster, ns, job, &partitioner, &extra).await?;
    Ok(Outcome {
        terminal: Some(started.elapsed()),
        left,
        note: format!("partitioning: {note}"),
    })
}

/// The nodes besides node 0 (each in a network namespace of its own).
fn extra_nodes(cluster: &LocalCluster) -> Result<BTreeSet<String>> {
    let extra: BTreeSet<String> = cluster
        .node_summaries()
        .into_iter()
        .filter(|n| !n.host_network)
        .map(|n| n.node_name)
        .collect();
    if extra.is_empty() {
        bail!("NodeLoss needs a cluster of 2 nodes or more (`--nodes 2`)");
    }
    Ok(extra)
}

/// Runs `job` until one of `victims` (pod names) is on an extra node and
/// the job is past Created, cuts that node off, and checks what follows.
async fn lose_one(
    client: &Client,
    cluster: &LocalCluster,
    ns: &str,
    job: DGLJob,
    victims: &[String],
    extra: &BTreeSet<String>,
) -> Result<(String, usize)> {
    let name = job.name_any();
    let mut lost = None;
    let (_, done, note) = during(
        client,
        ns,
        job,
        |j, pods| under_way(j) && pod_on(pods, victims, extra).is_some(),
        || async {
            let r = lose_and_return(client, cluster, ns, &name, victims, extra).await;
            if let Ok((_, node, old, joined)) = &r {
                lost = Some((node.clone(), old.clone(), *joined));
            }
            r.map(|(note, ..)| note)
        },
    )
    .await?;
    expect_phase(&done, JobPhase::Succeeded)?;
    ensure!(restarts(&done) == 1, "restarted {} times", restarts(&done));
    let (node, old, joined) = lost.context("the fault reported no node")?;
    let cleared = old_run_gone(client, &node, &old, joined).await?;
    let left = delete_and_count_left(client, ns, &name).await?;
    Ok((format!("{note}; {cleared}"), left))
}

/// Partitioning or Running: the run's pods are up.
fn under_way(j: &DGLJob) -> bool {
    running(j) || j.status.as_ref().and_then(|s| s.phase) == Some(JobPhase::Partitioning)
}

/// The first of `victims` bound to one of `nodes`, with the node.
fn pod_on(pods: &[Pod], victims: &[String], nodes: &BTreeSet<String>) -> Option<(String, String)> {
    pods.iter().find_map(|p| {
        let node = p.spec.as_ref()?.node_name.clone()?;
        let up = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        (up && victims.contains(&p.name_any()) && nodes.contains(&node))
            .then(|| (p.name_any(), node))
    })
}

/// The launch.py-style example with a Partitioner template of its own:
/// preferring node `slow_on`, where its partition command first sleeps ten
/// minutes (anywhere else it partitions at once).
fn slow_partitioner_on(name: &str, slow_on: &str) -> Result<DGLJob> {
    let mut job = crate::stack::jobs::example_job_at(crate::stack::EXAMPLE_LAUNCHPY, name)?;
    job.spec
        .run_policy
        .get_or_insert_with(Default::default)
        .backoff_limit = Some(2);
    let launcher = crate::stack::placement::main_container_mut(&mut job, ReplicaType::Launcher)?;
    let args = launcher.args.get_or_insert_with(Vec::new);
    let i = args
        .iter()
        .position(|a| a == "--partition-command")
        .context("the example has no --partition-command")?;
    let cmd = args
        .get(i + 1)
        .context("--partition-command has no value")?;
    args[i + 1] =
        format!("sh -c 'if [ \"$NODE_NAME\" = {slow_on} ]; then sleep 600; fi; exec {cmd}'");
    let (command, args) = (launcher.command.clone(), launcher.args.clone());
    let mut part = job
        .spec
        .dgl_replica_specs
        .get(&ReplicaType::Worker)
        .context("the example has no Worker")?
        .clone();
    part.replicas = Some(1);
    let spec = part.template.spec.get_or_insert_with(Default::default);
    let c = spec.containers.first_mut().context("no worker container")?;
    c.command = command;
    c.args = args;
    c.env
        .get_or_insert_with(Vec::new)
        .push(serde_json::from_value(serde_json::json!({
            "name": "NODE_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        }))?);
    spec.affinity = Some(serde_json::from_value(serde_json::json!({
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "preference": {"matchExpressions": [{
                "key": "kubernetes.io/hostname", "operator": "In", "values": [slow_on],
            }]},
        }]},
    }))?);
    job.spec
        .dgl_replica_specs
        .insert(ReplicaType::Partitioner, part);
    Ok(job)
}

/// Cuts the worker's node off, waits for NotReady, for the operator to name
/// it and for the new run's pods to be placed elsewhere, then joins it
/// again. Returns the note, the node, the uids of the pods lost on it and
/// when it joined again.
async fn lose_and_return(
    client: &Client,
    cluster: &LocalCluster,
    ns: &str,
    name: &str,
    victims: &[String],
    extra: &BTreeSet<String>,
) -> Result<(String, String, Vec<String>, Instant)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{LABEL_JOB_NAME}={name}"));
    let before = pods.list(&lp).await?.items;
    let (victim, node) = pod_on(&before, victims, extra)
        .with_context(|| format!("none of {victims:?} on an extra node"))?;
    let old: Vec<(String, String)> = before
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect();
    operator_elsewhere(client, &node).await?;
    let cut = Instant::now();
    cluster.cut_node(&node)?;
    let result = async {
        let not_ready = wait_not_ready(client, &node).await?;
        let named = wait_named(client, ns, name, &node, &victim).await?;
        wait_replaced(&pods, &old, &node).await?;
        anyhow::Ok((not_ready, named, cut.elapsed()))
    }
    .await;
    let restored = cluster.restore_node(&node);
    let joined = Instant::now();
    let (not_ready, (named, message), placed) = result?;
    restored.with_context(|| format!("joining {node} again"))?;
    let note = format!(
        "{node} (with {victim}) cut off: NotReady after {:.0}s, named by the operator {:.0}s \
         after NotReady ({}), {} lost pod(s) replaced elsewhere {:.0}s after the cut, node joined again",
        not_ready.as_secs_f64(),
        named.as_secs_f64(),
        super::infra::truncate(&message, 160),
        old.len(),
        placed.as_secs_f64(),
    );
    let uids = old.into_iter().map(|(_, uid)| uid).collect();
    Ok((note, node, uids, joined))
}

/// The operator must not be on the node about to be cut (the e2e install
/// holds it on node 0): this fault is about the job's pods, not the
/// operator's own loss, which Kubernetes alone handles after 300 s.
async fn operator_elsewhere(client: &Client, node: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), crate::stack::OPERATOR_NAMESPACE);
    for p in pods.list(&crate::stack::operator_pods_lp()).await?.items {
        let on = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
        ensure!(
            on != Some(node),
            "the operator's pod {} is on {node}, the node to be cut off",
            p.name_any()
        );
    }
    Ok(())
}

/// Waits until `node` is not Ready; how long that took.
async fn wait_not_ready(client: &Client, node: &str) -> Result<Duration> {
    let t = Instant::now();
    while node_ready(client, node).await? {
        ensure!(
            t.elapsed() < NOT_READY_WITHIN,
            "{node} still Ready {}s after it was cut off",
            NOT_READY_WITHIN.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(t.elapsed())
}

/// Waits (at most [`NAME_WITHIN`]) until the job's `NodeLost` condition
/// names `node` and the victim, and a Warning Event says so; returns how
/// long that took and the condition's message.
async fn wait_named(
    client: &Client,
    ns: &str,
    name: &str,
    node: &str,
    victim: &str,
) -> Result<(Duration, String)> {
    let jobs: Api<dgl_api::DGLJob> = Api::namespaced(client.clone(), ns);
    let t = Instant::now();
    loop {
        let job = jobs.get(name).await?;
        if let Some(m) = condition_message(&job, NODE_LOST) {
            ensure!(
                m.contains(node) && m.contains(victim),
                "the {NODE_LOST} condition does not name {node} and {victim}: {m:?}"
            );
            let events = job_events(client, ns, name).await?;
            if events
                .iter()
                .any(|e| e.starts_with(&format!("Warning {EVENT_NODE_LOST}")) && e.contains(node))
            {
                return Ok((t.elapsed(), m));
            }
        }
        if t.elapsed() > NAME_WITHIN {
            bail!(
                "{NODE_LOST} naming {node} not reported within {}s of NotReady; status: {:?}",
                NAME_WITHIN.as_secs(),
                job.status
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits (at most 300 s) until every pod in `old` (name, uid) has a
/// replacement on another node than `node`.
async fn wait_replaced(pods: &Api<Pod>, old: &[(String, String)], node: &str) -> Result<()> {
    let t = Instant::now();
    loop {
        let mut placed = 0;
        for (pod, uid) in old {
            let now = pods.get_opt(pod).await?;
            let elsewhere = now.filter(|p| p.uid().as_deref() != Some(uid.as_str()));
            match elsewhere.and_then(|p| p.spec?.node_name) {
                Some(n) if n == node => bail!("{pod}'s replacement was placed on the lost {node}"),
                Some(_) => placed += 1,
                None => {}
            }
        }
        if placed == old.len() {
            return Ok(());
        }
        ensure!(
            t.elapsed() < Duration::from_secs(300),
            "the lost pods were not replaced on another node within 300 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Once `node` is Ready again, no process of the lost pods (`uids`) is
/// left on the machine (its kubelet, back, kills what the API no longer has).
async fn old_run_gone(
    client: &Client,
    node: &str,
    uids: &[String],
    joined: Instant,
) -> Result<String> {
    let t = Instant::now();
    while !node_ready(client, node).await? {
        ensure!(
            t.elapsed() < Duration::from_secs(120),
            "{node} not Ready within 120 s of joining again"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    loop {
        let alive: Vec<&String> = uids.iter().filter(|u| pid_in_pod(u).is_ok()).collect();
        if alive.is_empty() {
            return Ok(format!(
                "checked once the job ended, {:.0}s after {node} joined again: Ready, \
                 no process of the lost pods left",
                joined.elapsed().as_secs_f64()
            ));
        }
        ensure!(
            t.elapsed() < Duration::from_secs(180),
            "processes of the lost pods {alive:?} still run on {node} 180 s after it joined again"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
