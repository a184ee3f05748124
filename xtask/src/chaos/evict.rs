//! Evictions, as `kubectl drain` makes them (issue #25 item 2): a worker
//! evicted through the Eviction API, worker 0's node drained (cordoned, the
//! job's pods on it evicted, on several nodes their replacements placed on
//! another, uncordoned), and a node that stops answering while the job's
//! pods are being deleted (node 0's kubelet frozen).
//!
//! The Eviction API sets DisruptionTarget on the pod, so a
//! `runPolicy.podFailurePolicy` rule `Ignore` on it makes the restart
//! uncounted; without the rule it counts against backoffLimit. Each eviction
//! fault runs the job both ways, one after the other.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use dgl_api::names::{worker_name, LABEL_JOB_NAME};
use dgl_api::{DGLJob, JobPhase, CONDITION_NODE_LOST};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Preconditions};
use kube::{Client, ResourceExt};
use localkube::{Component, LocalCluster};

use super::fault::Outcome;
use super::infra::{condition_message, during, example, on_node0, restarts, running, truncate};
use crate::stack::jobs::{delete_and_count_left, expect_phase};

/// With or without the rule `Ignore` on DisruptionTarget.
#[derive(Clone, Copy, Debug)]
enum Rule {
    Ignore,
    None,
}

/// The example job: with the Ignore rule and backoffLimit 0 (so a counted
/// restart would fail it), or without a rule and backoffLimit 1.
fn job(name: &str, rule: Rule) -> Result<DGLJob> {
    let mut job = example(name, if matches!(rule, Rule::Ignore) { 0 } else { 1 })?;
    if let Rule::Ignore = rule {
        let policy = serde_json::from_value(serde_json::json!({"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
        ]}))?;
        job.spec
            .run_policy
            .get_or_insert_with(Default::default)
            .pod_failure_policy = Some(policy);
    }
    Ok(job)
}

/// Succeeded after exactly one restart, uncounted under the Ignore rule
/// and counted without it.
fn expect_one_restart(done: &DGLJob, rule: Rule) -> Result<()> {
    expect_phase(done, JobPhase::Succeeded)?;
    let ignored = done
        .status
        .as_ref()
        .and_then(|s| s.ignored_restarts)
        .unwrap_or(0);
    let want = if matches!(rule, Rule::Ignore) { 1 } else { 0 };
    ensure!(
        restarts(done) == 1 && ignored == want,
        "{rule:?}: expected one restart, {want} of them ignored; status says \
         restartCount {}, ignoredRestarts {ignored}",
        restarts(done)
    );
    Ok(())
}

/// POST pods/<pod>/eviction (the pod's own grace period); with `uid`, only
/// that incarnation (not a pod the operator made again under its name).
async fn evict_pod(client: &Client, ns: &str, pod: &str, uid: Option<String>) -> Result<()> {
    let ep = EvictParams {
        delete_options: Some(DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    };
    Api::<Pod>::namespaced(client.clone(), ns)
        .evict(pod, &ep)
        .await
        .with_context(|| format!("evicting pod {ns}/{pod}"))?;
    Ok(())
}

/// Worker 0 evicted while the job trains, with and without the Ignore
/// rule: one restart each, named after worker 0 (not the launcher that
/// lost it), uncounted / counted; the job Succeeds.
pub async fn evict(client: &Client, ns: &str) -> Result<Outcome> {
    let mut notes = Vec::new();
    let mut left = 0;
    let started = Instant::now();
    for (name, rule) in [
        ("chaos-evict-ignore", Rule::Ignore),
        ("chaos-evict-count", Rule::None),
    ] {
        let victim = worker_name(name, 0);
        let (_, done, note) = during(
            client,
            ns,
            job(name, rule)?,
            |j, _| running(j),
            || async {
                evict_pod(client, ns, &victim, None).await?;
                Ok(format!("{victim} evicted while Running"))
            },
        )
        .await?;
        expect_one_restart(&done, rule)?;
        let why = note.split("; restarted: ").nth(1).unwrap_or_default();
        ensure!(
            why.contains(&victim),
            "{rule:?}: the restart does not name the evicted {victim}: {why:?}"
        );
        left += delete_and_count_left(client, ns, name).await?;
        notes.push(format!("{rule:?}: {}", truncate(&note, 240)));
    }
    Ok(Outcome {
        terminal: Some(started.elapsed()),
        left,
        note: notes.join(" / "),
    })
}

/// The node drained while the job trains: worker 0's node cordoned, every
/// pod of the job on it evicted, as `kubectl drain` does. With and without
/// the Ignore rule: one restart each, uncounted / counted; the job
/// Succeeds. On a cluster of several nodes the node stays cordoned until
/// the evicted pods' replacements are placed, which must be on another node.
pub async fn drain(client: &Client, ns: &str) -> Result<Outcome> {
    let mut notes = Vec::new();
    let mut left = 0;
    let started = Instant::now();
    for (name, rule) in [
        ("chaos-drain-ignore", Rule::Ignore),
        ("chaos-drain-count", Rule::None),
    ] {
        let (_, done, note) = during(
            client,
            ns,
            job(name, rule)?,
            |j, _| running(j),
            || drain_job(client, ns, name),
        )
        .await?;
        expect_one_restart(&done, rule)?;
        left += delete_and_count_left(client, ns, name).await?;
        notes.push(format!("{rule:?}: {}", truncate(&note, 240)));
    }
    Ok(Outcome {
        terminal: Some(started.elapsed()),
        left,
        note: notes.join(" / "),
    })
}

/// The pods of job `name`.
async fn job_pods(client: &Client, ns: &str, name: &str) -> Result<Vec<Pod>> {
    let lp = ListParams::default().labels(&format!("{LABEL_JOB_NAME}={name}"));
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items)
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref()?.node_name.clone()
}

/// Cordons worker 0's node, evicts every pod of the job on it, waits (at
/// most 120 s) until they are gone, and with another node to go to, until
/// their replacements are placed; uncordons the node, also on an error.
async fn drain_job(client: &Client, ns: &str, name: &str) -> Result<String> {
    let pods = job_pods(client, ns, name).await?;
    let w0 = worker_name(name, 0);
    let node = pods
        .iter()
        .find(|p| p.name_any() == w0)
        .and_then(node_of)
        .with_context(|| format!("{w0} is on no node"))?;
    let nodes: Api<Node> = Api::all(client.clone());
    let others = nodes.list(&ListParams::default()).await?.items.len() > 1;
    nodes
        .cordon(&node)
        .await
        .with_context(|| format!("cordoning {node}"))?;
    let t = Instant::now();
    let on_node: Vec<Pod> = pods
        .into_iter()
        .filter(|p| node_of(p).as_deref() == Some(node.as_str()))
        .collect();
    let moved = async {
        let evicted = evict_all(client, ns, &on_node).await?;
        let moved = if others {
            Some(wait_replaced(client, ns, &on_node, &node).await?)
        } else {
            None
        };
        anyhow::Ok((evicted, moved))
    }
    .await;
    let uncordoned = nodes.uncordon(&node).await;
    let (evicted, moved) = moved?;
    uncordoned.with_context(|| format!("uncordoning {node}"))?;
    let moved = moved.map_or(String::new(), |m| format!(", {m}"));
    Ok(format!(
        "node {node} cordoned, its {evicted} pods of the job evicted{moved}, uncordoned after {:.1}s",
        t.elapsed().as_secs_f64()
    ))
}

/// Waits (at most 300 s) until every pod of `gone` has a replacement (the
/// same name, another uid) on a node, and checks that none is on `drained`.
async fn wait_replaced(client: &Client, ns: &str, gone: &[Pod], drained: &str) -> Result<String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut placed = Vec::new();
        for p in gone {
            let now = api.get_opt(&p.name_any()).await?;
            if let Some(n) = now.filter(|n| n.uid() != p.uid()).and_then(|n| node_of(&n)) {
                placed.push((p.name_any(), n));
            }
        }
        if placed.len() == gone.len() {
            let wrong: Vec<_> = placed.iter().filter(|(_, n)| n == drained).collect();
            ensure!(
                wrong.is_empty(),
                "replacements placed on the cordoned node {drained}: {wrong:?}"
            );
            let shown: Vec<String> = placed.iter().map(|(p, n)| format!("{p} -> {n}")).collect();
            return Ok(format!("rescheduled {}", shown.join(", ")));
        }
        ensure!(
            Instant::now() < deadline,
            "the evicted pods were not all replaced on another node within 300 s (placed: {placed:?})"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Evicts `pods` and waits until none of them (by uid) is left.
async fn evict_all(client: &Client, ns: &str, pods: &[Pod]) -> Result<usize> {
    for p in pods {
        evict_pod(client, ns, &p.name_any(), p.uid()).await?;
    }
    let uids: Vec<String> = pods.iter().filter_map(|p| p.uid()).collect();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut alive = 0;
        for p in pods {
            if api
                .get_opt(&p.name_any())
                .await?
                .is_some_and(|now| now.uid().is_some_and(|u| uids.contains(&u)))
            {
                alive += 1;
            }
        }
        if alive == 0 {
            return Ok(pods.len());
        }
        ensure!(
            Instant::now() < deadline,
            "{alive} evicted pods still there after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How long the kubelet is frozen: long enough for the control plane to
/// mark the node NotReady (its node-monitor grace, 40-50 s here) with
/// margin, so the operator's node watch certainly sees it.
const HANG: Duration = Duration::from_secs(100);

/// The node stops answering (its kubelet frozen with SIGSTOP for [`HANG`])
/// while the job trains, and worker 0 is deleted (default grace 30 s): the
/// delete restarts the run (restart 1), and its pod stays Terminating, as on
/// a dead node. Once the node turns NotReady the operator's node watch takes
/// over: the stuck pod is deleted with grace 0, and the partitioner serving
/// the shards from that node is lost, so the run restarts again (restart 2,
/// condition `NodeLost` naming the node). Worker 0's old uid must be gone
/// before the kubelet answers again; the job (backoffLimit 2, held on node
/// 0) then Succeeds once the kubelet is back.
pub async fn kubelet_hang(client: &Client, cluster: &LocalCluster, ns: &str) -> Result<Outcome> {
    let name = "chaos-hang";
    let (terminal, done, note) = during(
        client,
        ns,
        on_node0(example(name, 2)?, cluster)?,
        |j, _| running(j),
        || hang_and_delete(client, cluster, ns, name),
    )
    .await?;
    expect_phase(&done, JobPhase::Succeeded)?;
    ensure!(restarts(&done) == 2, "restarted {} times", restarts(&done));
    let node = crate::stack::placement::node0(cluster)?;
    let lost = condition_message(&done, CONDITION_NODE_LOST).unwrap_or_default();
    ensure!(
        lost.contains(&node),
        "the {CONDITION_NODE_LOST} condition does not name {node}: {lost:?}"
    );
    let left = delete_and_count_left(client, ns, name).await?;
    Ok(Outcome {
        terminal: Some(terminal),
        left,
        note,
    })
}

async fn hang_and_delete(
    client: &Client,
    cluster: &LocalCluster,
    ns: &str,
    name: &str,
) -> Result<String> {
    let victim = worker_name(name, 0);
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let uid = api.get(&victim).await?.uid().unwrap_or_default();
    let node = api
        .get(&victim)
        .await?
        .spec
        .and_then(|s| s.node_name)
        .unwrap_or_default();
    let frozen = Instant::now();
    let watch = async {
        // Give the kubelet's freeze a moment to take.
        tokio::time::sleep(Duration::from_secs(1)).await;
        api.delete(&victim, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting {victim}"))?;
        let deleted = Instant::now();
        let mut not_ready = None;
        loop {
            if not_ready.is_none() && !node_ready(client, &node).await? {
                not_ready = Some(frozen.elapsed());
            }
            let gone = api
                .get_opt(&victim)
                .await?
                .is_none_or(|p| p.uid().as_deref() != Some(uid.as_str()));
            if gone {
                return Ok::<_, anyhow::Error>((deleted.elapsed(), not_ready));
            }
            ensure!(
                frozen.elapsed() < HANG,
                "{victim} (uid {uid}) still Terminating after the kubelet was frozen {}s",
                HANG.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let (paused, watched) = tokio::join!(cluster.pause_component(Component::Kubelet, HANG), watch);
    paused.context("freezing the kubelet")?;
    let (gone_after, not_ready) = watched?;
    let not_ready = not_ready.map_or("not seen".into(), |d| {
        format!("after {:.0}s", d.as_secs_f64())
    });
    Ok(format!(
        "kubelet frozen {}s, {victim} deleted: its old pod gone {:.0}s after the delete \
         (node NotReady {not_ready})",
        HANG.as_secs(),
        gone_after.as_secs_f64()
    ))
}

/// Whether `node`'s Ready condition is True.
pub(super) async fn node_ready(client: &Client, node: &str) -> Result<bool> {
    let n = Api::<Node>::all(client.clone()).get(node).await?;
    Ok(n.status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True"))
}
