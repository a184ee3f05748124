//! Issue #34 item 4, the operator's side, against a real API server: a
//! node that holds a worker and the launcher turns NotReady (its Ready
//! condition Unknown, as the node lifecycle controller sets it when the
//! kubelet stops posting). Within 60 s, not after Kubernetes' 300 s
//! eviction, the job's status names the node and the pods (condition
//! NodeLost, a Warning Event), the lost pods are force-deleted, the run
//! restarts (restartCount 1) and its new pods are created.
//!
//! No kubelet runs: the test registers two Nodes, keeps their Leases
//! fresh (so the node lifecycle controller leaves their Ready condition
//! alone), binds the job's pods to them (pods/binding, as the scheduler
//! does) and plays the kubelet by patching pod status.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::Env;
use dgl_api::names::{LABEL_REPLICA_TYPE, LABEL_RUN};
use dgl_api::{JobPhase, RunPolicy, CONDITION_NODE_LOST, EVENT_NODE_LOST, REASON_NODE_NOT_READY};
use dgl_operator::pure::settings::BuildConfig;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// The bound: the status names the node within 60 s of NotReady.
const NAMED_WITHIN: Duration = Duration::from_secs(60);

fn now() -> String {
    Timestamp::from_second(Timestamp::now().as_second())
        .unwrap()
        .to_string()
}

/// Sets the node's Ready condition (through the status subresource).
async fn set_ready(client: &Client, node: &str, status: &str, reason: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let t = now();
    let patch = json!({"status": {"conditions": [{
        "type": "Ready", "status": status, "reason": reason,
        "message": format!("set by the node_loss test: {reason}"),
        "lastHeartbeatTime": t, "lastTransitionTime": t,
    }]}});
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("patch status of node {node}: {e}"));
}

/// A Node named `name`, Ready, with a fresh Lease.
async fn register(client: &Client, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let _ = nodes.delete(name, &DeleteParams::default()).await; // an earlier run's
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name,
        "labels": {"kubernetes.io/hostname": name}}}))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    set_ready(client, name, "True", "KubeletReady").await;
    renew_lease(client, name).await;
}

/// The kubelet's heartbeat: the node's Lease in kube-node-lease, renewed.
async fn renew_lease(client: &Client, name: &str) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
            "renewTime": MicroTime(Timestamp::now())}});
    leases
        .patch(
            name,
            &PatchParams::apply("node-loss-test").force(),
            &Patch::Apply(lease),
        )
        .await
        .unwrap_or_else(|e| panic!("lease of node {name}: {e}"));
}

/// Binds a pod to a node, as the scheduler does.
async fn bind(env: &Env, pod: &str, node: &str) {
    env.wait_pod(pod).await;
    let body = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    env.pods()
        .create_subresource::<serde_json::Value, serde_json::Value>(
            "binding",
            pod,
            &PostParams::default(),
            &body,
        )
        .await
        .unwrap_or_else(|e| panic!("bind {pod} to {node}: {e}"));
}

/// The Warning Event NodeLost naming `node`, waited for (bounded).
async fn node_lost_event(env: &Env, node: &str) -> Event {
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let found = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some(EVENT_NODE_LOST)
                    && e.note.as_deref().is_some_and(|n| n.contains(node))
            });
        if let Some(e) = found {
            return e;
        }
        assert!(
            Instant::now() < deadline,
            "no Warning Event NodeLost naming {node}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_node_turning_not_ready_restarts_the_run_at_once_naming_node_and_pods() {
    let build = BuildConfig {
        network_policy: true,
        ..Default::default()
    };
    let env = Env::with_build("node-loss", build).await;
    let (a, b) = (format!("{}-ghost-a", env.ns), format!("{}-ghost-b", env.ns));
    register(&env.client, &a).await;
    register(&env.client, &b).await;
    // Heartbeats for both until the test ends (ghost-a's do not make it
    // Ready again: only a kubelet sets Ready True).
    let heartbeat = {
        let (client, a, b) = (env.client.clone(), a.clone(), b.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                renew_lease(&client, &a).await;
                renew_lease(&client, &b).await;
            }
        })
    };

    env.create_job("nl", |j| {
        j.spec.run_policy = Some(RunPolicy {
            backoff_limit: Some(3),
            ..Default::default()
        });
    })
    .await;
    // Worker 0 and the launcher on ghost-a, the rest on ghost-b.
    for (pod, node) in [
        ("nl-partitioner", &b),
        ("nl-worker-0", &a),
        ("nl-worker-1", &b),
        ("nl-launcher", &a),
    ] {
        bind(&env, pod, node).await;
    }
    env.drive_to_running("nl", 2).await;
    let before = env.pod_uids().await;

    set_ready(&env.client, &a, "Unknown", "NodeStatusUnknown").await;
    let lost_at = Instant::now();
    let job = env
        .wait_job("nl", "condition NodeLost True", |j| {
            j.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == CONDITION_NODE_LOST && c.status == "True")
            })
        })
        .await;
    let named_after = lost_at.elapsed();
    assert!(named_after < NAMED_WITHIN, "named after {named_after:?}");
    let status = job.status.unwrap();
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_NODE_LOST)
        .unwrap();
    assert_eq!(c.reason, REASON_NODE_NOT_READY);
    for name in [a.as_str(), "nl-worker-0", "nl-launcher"] {
        assert!(c.message.contains(name), "{name} not in {}", c.message);
    }
    assert!(!c.message.contains("nl-worker-1"), "{}", c.message);
    assert_eq!(status.restart_count, Some(1));
    let restarting = status
        .conditions
        .iter()
        .find(|c| c.type_ == JobPhase::Restarting.as_str())
        .unwrap();
    assert_eq!(restarting.reason, EVENT_NODE_LOST);
    assert!(
        restarting.message.contains("restart 1 of 3"),
        "{}",
        restarting.message
    );

    let event = node_lost_event(&env, &a).await;
    assert!(event.note.unwrap().contains("nl-worker-0"));

    // The lost pods were force-deleted (no kubelet would ever confirm a
    // graceful deletion), so their replacements of run 1 exist, unbound.
    let pods: Api<Pod> = env.pods();
    let deadline = Instant::now() + Duration::from_secs(30);
    for name in ["nl-worker-0", "nl-launcher", "nl-worker-1"] {
        loop {
            // Worker 1, on the live node, is deleted gracefully as in any
            // restart: its kubelet (played here) confirms with grace 0.
            if name == "nl-worker-1" {
                let p = pods.get_opt(name).await.unwrap();
                if p.is_some_and(|p| {
                    p.metadata.deletion_timestamp.is_some() && p.uid() == before.get(name).cloned()
                }) {
                    let _ = pods
                        .delete(name, &DeleteParams::default().grace_period(0))
                        .await;
                }
            }
            let p = pods.get_opt(name).await.unwrap();
            let replaced = p.as_ref().is_some_and(|p| {
                p.uid() != before.get(name).cloned()
                    && p.labels().get(LABEL_RUN).map(String::as_str) == Some("1")
            });
            if replaced {
                let node = p.unwrap().spec.unwrap().node_name;
                assert_ne!(node.as_deref(), Some(a.as_str()), "{name}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} not replaced by run 1: {:?}",
                p.map(|p| (p.uid(), p.labels().clone(), p.metadata.deletion_timestamp))
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // The job's NetworkPolicy admits run 1 and the partitioner kept from
    // run 0 (on the live node), no other pod of run 0: a process of the old
    // run still running on a node that lost only its link is refused, DGL's
    // RPC included, where a policy engine enforces it.
    let policy = policy_peers(&env, "nl-network", 2).await;
    assert_eq!(
        policy[0].get(LABEL_RUN).map(String::as_str),
        Some("1"),
        "{policy:?}"
    );
    assert_eq!(policy[0].get(LABEL_REPLICA_TYPE), None, "{policy:?}");
    assert_eq!(
        policy[1].get(LABEL_RUN).map(String::as_str),
        Some("0"),
        "{policy:?}"
    );
    assert_eq!(
        policy[1].get(LABEL_REPLICA_TYPE).map(String::as_str),
        Some("partitioner"),
        "{policy:?}"
    );

    // None of the old run is left on ghost-a, not even Terminating.
    let on_a: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(a.as_str()))
        .map(|p| p.name_any())
        .collect();
    assert!(on_a.is_empty(), "still on {a}: {on_a:?}");

    // The new run, placed on ghost-b, runs: NodeLost turns False.
    for pod in ["nl-worker-0", "nl-worker-1", "nl-launcher"] {
        bind(&env, pod, &b).await;
    }
    for (i, pod) in ["nl-worker-0", "nl-worker-1"].into_iter().enumerate() {
        env.kubelet_running(pod, &format!("10.244.2.{}", 10 + i), true)
            .await;
    }
    env.kubelet_running("nl-launcher", "10.244.2.3", false)
        .await;
    env.wait_job("nl", "NodeLost False once run 1 runs", |j| {
        j.status.as_ref().is_some_and(|s| {
            s.phase == Some(JobPhase::Running)
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == CONDITION_NODE_LOST && c.status == "False")
        })
    })
    .await;

    heartbeat.abort();
    let nodes: Api<Node> = Api::all(env.client.clone());
    for n in [&a, &b] {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
}

/// The `from` peers' labels of the NetworkPolicy `name`, once it has `n`.
async fn policy_peers(env: &Env, name: &str, n: usize) -> Vec<BTreeMap<String, String>> {
    let nps: Api<NetworkPolicy> = Api::namespaced(env.client.clone(), &env.ns);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let np = nps.get_opt(name).await.unwrap();
        let peers: Vec<BTreeMap<String, String>> = np
            .as_ref()
            .and_then(|p| p.spec.as_ref()?.ingress.clone())
            .unwrap_or_default()
            .into_iter()
            .flat_map(|rule| rule.from.unwrap_or_default())
            .filter_map(|peer| peer.pod_selector?.match_labels)
            .collect();
        if peers.len() == n {
            return peers;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: peers {peers:?}, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
