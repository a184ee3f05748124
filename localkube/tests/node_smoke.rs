//! End-to-end smoke test of the node tier: bring up a cluster with a real
//! kubelet node on this host, run a pod from a locally built image to
//! completion, read its log through the API, tear down and check that the
//! host is as before.
//!
//! Ignored by default: it needs root, changes host-global state (network
//! links, iptables, a cgroup subtree; only one node cluster per host) and
//! cannot run in parallel with another node cluster. Run it with
//! `cargo xtask cluster smoke` (or `cargo test -p localkube --test node_smoke
//! -- --ignored --nocapture`). `LOCALKUBE_SMOKE_CLUSTER` picks the cluster
//! name (default "smoketest": its ports collide with no other cluster name
//! used in this project); a running node cluster of that name is reused and
//! then torn down.
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use kube::runtime::wait::await_condition;
use localkube::{host, ClusterConfig, LocalCluster};

const PROBE_GO: &str = include_str!("assets/probe.go");

/// User-defined iptables chains of both families and all tables we touch.
fn chains() -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for bin in host::IPTABLES_BINARIES {
        for table in host::IPTABLES_TABLES {
            if let Ok(c) = host::iptables_chains(bin, table) {
                all.extend(c.into_iter().map(|c| format!("{bin} {table} {c}")));
            }
        }
    }
    all
}

fn pod(image: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": "probe" },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "probe",
                "image": image,
                // Imported by hand; there is no registry to pull from.
                "imagePullPolicy": "Never",
            }],
        },
    }))
    .expect("valid pod")
}

#[tokio::test]
#[ignore = "needs root and changes the host (links, iptables, cgroups); one node cluster per host; run with `cargo xtask cluster smoke`"]
async fn node_runs_a_pod_and_tears_down_cleanly() {
    let name = std::env::var("LOCALKUBE_SMOKE_CLUSTER").unwrap_or_else(|_| "smoketest".into());
    let cluster = LocalCluster::new(
        ClusterConfig::new(&name)
            .expect("cluster config")
            .with_node(),
    )
    .expect("cluster");
    // Anything our own components may create must not exist before, or the
    // after-teardown comparison would prove nothing.
    let chains_before = chains();

    let t0 = Instant::now();
    let info = cluster.up().await.expect("cluster up --node");
    let t_up = t0.elapsed();
    eprintln!(
        "smoke: cluster {name:?} {} in {:.1}s at {}",
        if info.reused { "reused" } else { "up" },
        t_up.as_secs_f64(),
        info.server
    );
    let client = info.client().await.expect("client");

    let pods = probe_runs_to_succeeded(&cluster, &client).await;
    second_cluster_is_refused(&name, &pods).await;

    let t3 = Instant::now();
    cluster.down(false).await.expect("cluster down");
    eprintln!("smoke: down in {:.1}s", t3.elapsed().as_secs_f64());
    nothing_is_left(&cluster, &chains_before).await;
    eprintln!(
        "smoke: total {:.1}s (up {:.1}s)",
        t0.elapsed().as_secs_f64(),
        t_up.as_secs_f64()
    );
}

/// Builds the probe image, runs it as a pod to completion and checks what
/// it printed (the server's version, its identity, its IP); returns the
/// pods of its namespace.
async fn probe_runs_to_succeeded(cluster: &LocalCluster, client: &kube::Client) -> Api<Pod> {
    let t1 = Instant::now();
    let image = cluster
        .load_go_image("localhost/localkube/smoke-probe", PROBE_GO)
        .await
        .expect("probe image");
    eprintln!(
        "smoke: image {image} ready in {:.1}s",
        t1.elapsed().as_secs_f64()
    );

    let ns = localkube::create_test_namespace(client, "smoke")
        .await
        .expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let t2 = Instant::now();
    pods.create(&PostParams::default(), &pod(&image))
        .await
        .expect("create pod");
    let done = await_condition(pods.clone(), "probe", |p: Option<&Pod>| {
        matches!(
            p.and_then(|p| p.status.as_ref())
                .and_then(|s| s.phase.as_deref()),
            Some("Succeeded") | Some("Failed")
        )
    });
    let finished = tokio::time::timeout(Duration::from_secs(120), done)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "pod {ns}/probe did not finish in 120s; kubelet log: {}",
                cluster.log_dir().join("kubelet.log").display()
            )
        })
        .expect("watch pod")
        .expect("pod exists");
    eprintln!("smoke: pod finished in {:.1}s", t2.elapsed().as_secs_f64());

    let logs = pods
        .logs("probe", &LogParams::default())
        .await
        .expect("pod log through the API (apiserver -> kubelet)");
    eprintln!("smoke: pod log:\n{logs}");
    let status = finished.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase.as_deref(),
        Some("Succeeded"),
        "probe failed: {logs}\nstatus: {status:?}"
    );
    assert!(
        logs.contains(&format!(
            "server gitVersion {}",
            localkube::KUBERNETES_VERSION
        )),
        "{logs}"
    );
    assert!(
        logs.contains(&format!(
            "authenticated as system:serviceaccount:{ns}:default"
        )),
        "{logs}"
    );
    let pod_ip = status.pod_ip.unwrap_or_default();
    assert!(pod_ip.starts_with("10.244.0."), "pod IP {pod_ip}");
    assert!(logs.contains(&format!("pod IP {pod_ip}")), "{logs}");
    pods
}

/// One node cluster per host: a second one is refused, naming the owner,
/// and its failed start does not disturb the running one.
async fn second_cluster_is_refused(name: &str, pods: &Api<Pod>) {
    let other = LocalCluster::new(
        ClusterConfig::new(&format!("{name}-other"))
            .expect("config")
            .with_node(),
    )
    .expect("cluster");
    match other.up().await {
        Err(localkube::Error::HostBusy { owner, .. }) => assert_eq!(owner, name),
        other => panic!("a second node cluster must be refused, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(other.state_dir());
    let _ = std::fs::remove_file(other.state_dir().with_extension("lock"));
    assert!(
        pods.get("probe").await.is_ok(),
        "the running cluster must survive the refused start"
    );
}

/// Nothing of the node is left on the host after `down`.
async fn nothing_is_left(cluster: &LocalCluster, chains_before: &BTreeSet<String>) {
    let left = cluster.leftovers();
    assert!(left.is_empty(), "left after down: {left:?}");
    for link in [localkube::CNI_BRIDGE, localkube::NODE_INTERFACE] {
        assert!(!host::link_exists(link), "link {link} still exists");
    }
    let state_dir = cluster.state_dir().to_owned();
    let mounts = host::mounts_under(&state_dir);
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    let status = cluster.status().await.expect("status");
    for c in &status.components {
        assert!(!c.running, "{} still running (pid {:?})", c.name, c.pid);
    }
    let chains_after = chains();
    let new: Vec<_> = chains_after.difference(chains_before).collect();
    assert!(new.is_empty(), "iptables chains left: {new:?}");
}
