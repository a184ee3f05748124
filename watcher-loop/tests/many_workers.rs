//! watcher-loop waits on a big job's workers with one watch (issue #36,
//! item 8): the real binary, as the launcher's init container runs it
//! (`WATCHERFILE` = the hostfile), against the real API server (localkube),
//! with 1,000 worker pods. While it waits, its open sockets (one per watch:
//! each watch is a long-lived HTTP/1.1 request on a connection of its own)
//! and its resident memory are read from /proc; then the pods turn Ready
//! and it must exit 0. Prints the figures for docs/reliability.md.

use std::time::Duration;

use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const WORKERS: usize = 1000;
const JOB: &str = "big";

fn worker(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{JOB}-worker-{i}"),
            "labels": {
                "dgloperator.io/job-name": JOB,
                "dgloperator.io/replica-type": "worker",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "containers": [{ "name": "main", "image": "registry.invalid/dgl:test" }]
        }
    }))
    .expect("valid pod")
}

fn ready() -> serde_json::Value {
    json!({ "status": {
        "phase": "Running",
        "conditions": [
            { "type": "Ready", "status": "True" },
            { "type": "ContainersReady", "status": "True" }
        ],
    }})
}

/// Sockets among the open files of `pid`.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|l| l.to_string_lossy().starts_with("socket:"))
                .count()
        })
        .unwrap_or(0)
}

/// `VmHWM` (peak resident memory) of `pid`, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmHWM:"));
    let kib = line.and_then(|l| l.split_whitespace().nth(1)?.parse().ok());
    kib.unwrap_or(0)
}

#[tokio::test]
async fn a_thousand_workers_are_waited_for_with_one_watch() {
    let cluster = localkube::ensure_cluster().await.expect("test cluster");
    let client = cluster.client().await.expect("client");
    let ns = localkube::create_test_namespace(&client, "wl-many")
        .await
        .expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let created = stream::iter(0..WORKERS)
        .map(|i| {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &worker(i)).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    assert!(created.iter().all(Result::is_ok), "every pod is created");

    let dir = tempfile::tempdir().unwrap();
    let hostfile = dir.path().join("hostfile");
    let lines: String = (0..WORKERS)
        .map(|i| {
            format!(
                "10.0.{}.{} 30050 {JOB}-worker-{i} slots=1\n",
                i / 250,
                i % 250
            )
        })
        .collect();
    std::fs::write(&hostfile, lines).unwrap();
    let log = dir.path().join("stderr");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_watcher-loop"))
        .env("WATCHERFILE", &hostfile)
        .env("WATCHERMODE", "ready")
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("NAMESPACE", &ns)
        .env_remove("DGL_OPERATOR_NAMESPACE")
        .env_remove("RUST_LOG")
        .args(["--timeout", "5m"])
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn watcher-loop");
    let pid = child.id().expect("running");

    // Waiting: every pod listed (it logs each as Pending), none Ready yet.
    let listed = tokio::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.matches("waiting for pod").count() >= WORKERS {
            break;
        }
        assert!(
            listed.elapsed() < Duration::from_secs(120),
            "not every pod listed in 120 s:\n{}",
            text.lines().rev().take(5).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let open = sockets(pid);
    let rss = peak_rss_kib(pid);
    println!(
        "watcher-loop waiting on {WORKERS} workers: {open} sockets open, peak RSS {rss} KiB, \
         all listed {:.1} s after the start",
        listed.elapsed().as_secs_f64()
    );
    assert!(
        open <= 16,
        "{open} sockets for {WORKERS} workers: one watch each?"
    );

    let patched = stream::iter(0..WORKERS)
        .map(|i| {
            let pods = pods.clone();
            let name = format!("{JOB}-worker-{i}");
            async move {
                let p = PatchParams::default();
                pods.patch_status(&name, &p, &Patch::Merge(ready())).await
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    assert!(patched.iter().all(Result::is_ok), "every status is set");
    let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
        .await
        .expect("watcher-loop exits once every worker is Ready")
        .expect("wait");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        status.code(),
        Some(0),
        "{}",
        &text[text.len().saturating_sub(2000)..]
    );
    localkube::delete_namespace(&client, &ns)
        .await
        .expect("delete namespace");
}
