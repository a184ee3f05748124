//! Several nodes on this one machine: bring up a cluster of
//! `LOCALKUBE_SMOKE_NODES` nodes (default 2), check that all are Ready,
//! run a small HTTP server pod pinned (by `nodeName`) to every node with a
//! ClusterIP Service each, and a client pod on every node that reaches the
//! server of every other node by pod IP and by Service, and the apiserver
//! through the `kubernetes` Service. Prints what each extra node costs
//! (start time, RSS of its containerd + kubelet + kube-proxy). Then tears
//! down and checks that the host is as before: no process, link, route,
//! mount, cgroup, iptables chain or NAT rule left.
//!
//! Ignored by default (root, host-global changes, one node cluster per
//! host). Run it with `cargo xtask cluster smoke --nodes 2 --name <name>`
//! (or `LOCALKUBE_SMOKE_NODES=3 cargo test -p localkube --test multinode --
//! --ignored --nocapture`).
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, ListParams, LogParams, PostParams};
use kube::runtime::wait::await_condition;
use localkube::{host, ClusterConfig, LocalCluster};

const NETCHECK_GO: &str = include_str!("assets/netcheck.go");

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

/// Host routes to pod or node addresses of localkube.
fn localkube_routes() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["-4", "route", "show"])
        .output()
        .expect("ip route");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("10.244.") || l.starts_with("10.213."))
        .map(str::to_owned)
        .collect()
}

fn pod(name: &str, node: &str, image: &str, args: Vec<String>) -> Pod {
    let field =
        |path: &str| serde_json::json!({ "valueFrom": { "fieldRef": { "fieldPath": path } } });
    let mut env = vec![];
    for (k, path) in [
        ("POD_NAME", "metadata.name"),
        ("NODE_NAME", "spec.nodeName"),
        ("POD_IP", "status.podIP"),
    ] {
        let mut e = field(path);
        e["name"] = k.into();
        env.push(e);
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "netcheck",
                "image": image,
                "imagePullPolicy": "Never",
                "args": args,
                "env": env,
            }],
        },
    }))
    .expect("valid pod")
}

fn service(name: &str) -> Service {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name },
        "spec": {
            "selector": { "app": name },
            "ports": [{ "port": 80, "targetPort": 8080 }],
        },
    }))
    .expect("valid service")
}

async fn wait_phase(pods: &Api<Pod>, name: &str, phases: &[&str], secs: u64) -> Pod {
    let want: Vec<String> = phases.iter().map(|p| (*p).to_owned()).collect();
    let cond = await_condition(pods.clone(), name, move |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.clone())
            .is_some_and(|ph| want.contains(&ph))
    });
    tokio::time::timeout(Duration::from_secs(secs), cond)
        .await
        .unwrap_or_else(|_| panic!("pod {name} not in {phases:?} after {secs}s"))
        .expect("watch")
        .expect("pod exists")
}

#[tokio::test]
#[ignore = "needs root and changes the host (namespaces, links, routes, iptables, cgroups); one node cluster per host; run with `cargo xtask cluster smoke --nodes 2`"]
async fn pods_reach_each_other_across_nodes_and_down_is_clean() {
    let name = std::env::var("LOCALKUBE_SMOKE_CLUSTER").unwrap_or_else(|_| "multinode".into());
    let n: usize = std::env::var("LOCALKUBE_SMOKE_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    assert!(n >= 2, "LOCALKUBE_SMOKE_NODES must be 2 or more, got {n}");
    let cluster = LocalCluster::new(
        ClusterConfig::new(&name)
            .expect("cluster config")
            .with_nodes(n),
    )
    .expect("cluster");
    let chains_before = chains();
    let routes_before = localkube_routes();

    let t0 = Instant::now();
    let info = cluster.up().await.expect("cluster up --node --nodes N");
    let t_up = t0.elapsed();
    eprintln!(
        "multinode: cluster {name:?} with {n} nodes {} in {:.1}s",
        if info.reused { "reused" } else { "up" },
        t_up.as_secs_f64()
    );
    for s in cluster.node_summaries() {
        eprintln!(
            "multinode: node {} ip {} pods {} host_network={} rss(containerd+kubelet+kube-proxy)={} MiB",
            s.node_name,
            s.node_ip,
            s.pod_cidr,
            s.host_network,
            s.rss_bytes / (1024 * 1024)
        );
        assert!(s.running, "node {} is not fully running", s.node_name);
    }
    let client = info.client().await.expect("client");
    nodes_are_ready_and_distinct(&client, n).await;

    let t1 = Instant::now();
    let image = cluster
        .load_go_image("localhost/localkube/netcheck", NETCHECK_GO)
        .await
        .expect("netcheck image on every node");
    eprintln!(
        "multinode: image {image} on {} node(s) in {:.1}s",
        cluster.node_sockets().len(),
        t1.elapsed().as_secs_f64()
    );
    assert_eq!(cluster.node_sockets().len(), n);

    let ns = localkube::create_test_namespace(&client, "multinode")
        .await
        .expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let node_names: Vec<String> = cluster
        .node_summaries()
        .into_iter()
        .map(|s| s.node_name)
        .collect();
    let targets = start_servers(&client, &ns, &node_names, &image).await;
    let t2 = Instant::now();
    every_client_reaches_every_other_node(&pods, &node_names, &image, &targets).await;
    eprintln!(
        "multinode: every client reached every other node in {:.1}s",
        t2.elapsed().as_secs_f64()
    );

    let t3 = Instant::now();
    cluster.down(false).await.expect("cluster down");
    eprintln!("multinode: down in {:.1}s", t3.elapsed().as_secs_f64());
    nothing_is_left(&cluster, n, &routes_before, &chains_before);
    eprintln!(
        "multinode: total {:.1}s (up {:.1}s)",
        t0.elapsed().as_secs_f64(),
        t_up.as_secs_f64()
    );
}

/// N Ready nodes, with distinct names, IPs and pod CIDRs.
async fn nodes_are_ready_and_distinct(client: &kube::Client, n: usize) {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await.expect("nodes");
    let mut ready = BTreeMap::new();
    for node in &list.items {
        let is_ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let ip = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone())
            .unwrap_or_default();
        if is_ready {
            ready.insert(node.metadata.name.clone().unwrap_or_default(), ip);
        }
    }
    eprintln!("multinode: Ready nodes {ready:?}");
    assert_eq!(ready.len(), n, "{ready:?}");
    let ips: BTreeSet<&String> = ready.values().collect();
    assert_eq!(ips.len(), n, "node IPs not distinct: {ready:?}");
}

/// A server pod and its Service on each node, Running: (index, node, pod
/// IP, ClusterIP) each.
async fn start_servers(
    client: &kube::Client,
    ns: &str,
    node_names: &[String],
    image: &str,
) -> Vec<(usize, String, String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let svcs: Api<Service> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    for (k, node) in node_names.iter().enumerate() {
        let s = format!("server-{k}");
        pods.create(&pp, &pod(&s, node, image, vec!["serve".into()]))
            .await
            .expect("server pod");
        svcs.create(&pp, &service(&s)).await.expect("service");
    }
    let mut targets = Vec::new();
    for (k, node) in node_names.iter().enumerate() {
        let s = format!("server-{k}");
        let p = wait_phase(&pods, &s, &["Running"], 120).await;
        let ip = p.status.and_then(|s| s.pod_ip).expect("server pod IP");
        let cluster_ip = svcs
            .get(&s)
            .await
            .expect("service")
            .spec
            .and_then(|s| s.cluster_ip)
            .expect("ClusterIP");
        eprintln!("multinode: {s} on {node}: pod IP {ip}, Service {cluster_ip}");
        targets.push((k, node.clone(), ip, cluster_ip));
    }
    targets
}

/// A client pod on each node probes every other node's server, by pod IP
/// and by Service, and the API server.
async fn every_client_reaches_every_other_node(
    pods: &Api<Pod>,
    node_names: &[String],
    image: &str,
    targets: &[(usize, String, String, String)],
) {
    let pp = PostParams::default();
    for (k, node) in node_names.iter().enumerate() {
        let mut args = vec!["probe".to_string()];
        for (j, _, ip, cip) in targets {
            if *j != k {
                args.push(format!("http://{ip}:8080/"));
                args.push(format!("http://{cip}/"));
            }
        }
        pods.create(&pp, &pod(&format!("client-{k}"), node, image, args))
            .await
            .expect("client pod");
    }
    for (k, node) in node_names.iter().enumerate() {
        let c = format!("client-{k}");
        let done = wait_phase(pods, &c, &["Succeeded", "Failed"], 240).await;
        let logs = pods
            .logs(&c, &LogParams::default())
            .await
            .expect("client log");
        eprintln!("multinode: {c} on {node}:\n{logs}");
        let status = done.status.unwrap_or_default();
        assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{c}: {logs}");
        let my_ip = status.pod_ip.unwrap_or_default();
        for (j, server_node, ip, cip) in targets {
            if *j == k {
                continue;
            }
            // By pod IP: the server sees the client's own pod IP (no
            // masquerade between nodes).
            let want =
                format!("ok http://{ip}:8080/ hello from server-{j} on {server_node} to {my_ip}");
            assert!(logs.contains(&want), "{c}: missing {want:?} in\n{logs}");
            let want = format!("ok http://{cip}/ hello from server-{j} on {server_node}");
            assert!(logs.contains(&want), "{c}: missing {want:?} in\n{logs}");
        }
        assert!(logs.contains("ok apiserver"), "{c}: {logs}");
    }
}

/// Nothing of the nodes is left on the host after `down`: links, mounts,
/// routes, iptables chains.
fn nothing_is_left(
    cluster: &LocalCluster,
    n: usize,
    routes_before: &[String],
    chains_before: &BTreeSet<String>,
) {
    let left = cluster.leftovers();
    assert!(left.is_empty(), "left after down: {left:?}");
    for link in [localkube::CNI_BRIDGE, localkube::NODE_INTERFACE] {
        assert!(!host::link_exists(link), "link {link} still exists");
    }
    for i in 1..n {
        assert!(!host::link_exists(&format!("lkveth{i}")), "lkveth{i} left");
    }
    let mounts = host::mounts_under(cluster.state_dir());
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    assert_eq!(localkube_routes(), routes_before, "routes left");
    let new: Vec<_> = chains().difference(chains_before).cloned().collect();
    assert!(new.is_empty(), "iptables chains left: {new:?}");
}
