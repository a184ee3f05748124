use std::time::Instant;

use dgl_api::names::{CONFIG_RUN, LABEL_JOB_NAME};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::DynamicObject;
use serde_json::json;

use super::metrics::{histogram_quantile, Metrics};
use super::peer;
use super::phase::log_warnings;
use super::spec::{Mode, Subject, STAGES};
use super::times::role_times;
use super::watch::Seen;
use crate::bench::measure::percentile;

#[test]
fn quantiles_and_metrics_parse() {
    let m = Metrics::parse(
        "# HELP x\n\
         dgl_operator_api_requests_total{verb=\"patch\",resource=\"pods\"} 4\n\
         dgl_operator_api_requests_total{verb=\"patch\",resource=\"configmaps\"} 2\n\
         h_bucket{le=\"0.001\"} 0\nh_bucket{le=\"0.01\"} 10\nh_bucket{le=\"+Inf\"} 10\n",
    );
    assert_eq!(m.requests_by_verb()["patch"], 6.0);
    let q = histogram_quantile(0.5, &[], &m.buckets("h")).unwrap();
    assert!((q - 0.0055).abs() < 1e-9, "{q}");
    assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
    assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
}

fn pod(name: &str, job: &str, role: &str, phase: &str, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {peer::JOB_LABEL: job, peer::ROLE_LABEL: role}},
        "status": {"phase": phase, "podIP": "10.0.0.1", "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}
        ]}
    }))
    .unwrap()
}

#[test]
fn watches_count_pods_per_job_and_see_the_cleanup() {
    let mut s = Seen::default();
    let (job, role) = (peer::JOB_LABEL, peer::ROLE_LABEL);
    s.note_pod(
        &pod("a-worker-0", "a", "worker", "Running", true),
        job,
        role,
        2,
    );
    assert!(s.jobs["a"].all_pods.is_none());
    s.note_pod(
        &pod("a-worker-0", "a", "worker", "Running", true),
        job,
        role,
        2,
    );
    assert!(
        s.jobs["a"].all_pods.is_none(),
        "a pod seen twice counts once"
    );
    s.note_pod(
        &pod("a-launcher-x", "a", "launcher", "Running", true),
        job,
        role,
        2,
    );
    assert!(s.jobs["a"].all_pods.is_some());
    assert_eq!(role_times(&s, "a", "worker").count, 1);
    assert!(role_times(&s, "a", "worker").ready.is_some());
    assert_eq!(s.cleanup_done(), None, "a running worker remains");
    s.note_pod(
        &pod("a-launcher-x", "a", "launcher", "Succeeded", false),
        job,
        role,
        2,
    );
    assert_eq!(s.cleanup_done(), None);
    let gone = Instant::now();
    s.pods.get_mut("a-worker-0").unwrap().deleted = Some(gone);
    assert_eq!(s.cleanup_done(), Some(Some(gone)));
}

#[test]
fn a_config_map_launches_its_job_once() {
    let cm = |run: Option<&str>| -> ConfigMap {
        let mut data = serde_json::Map::new();
        data.insert("hostfile".into(), json!("- 30049 a-worker-0 slots=1\n"));
        if let Some(r) = run {
            data.insert(CONFIG_RUN.into(), json!(r));
        }
        serde_json::from_value(json!({
            "metadata": {"name": "a-config", "labels": {LABEL_JOB_NAME: "a"}},
            "data": data,
        }))
        .unwrap()
    };
    let mut s = Seen::default();
    assert!(!s.note_config_map(&cm(None)), "created, not launched");
    assert!(s.jobs["a"].launched.is_none());
    assert!(s.note_config_map(&cm(Some("0"))));
    let at = s.jobs["a"].launched;
    assert!(at.is_some());
    assert!(!s.note_config_map(&cm(Some("0"))), "marked once");
    assert_eq!(s.jobs["a"].launched, at);
}

#[test]
fn job_status_is_read_per_kind() {
    let ours = Subject::Ours(Mode::Skip);
    let mpi = Subject::Mpi(peer::QueueLimit::Default);
    assert_eq!(ours.finished(&json!({"phase": "Succeeded"})), Some(true));
    assert_eq!(ours.finished(&json!({"phase": "Running"})), None);
    assert_eq!(
        mpi.finished(&json!({"conditions": [{"type": "Succeeded", "status": "True"}]})),
        Some(true)
    );
    assert_eq!(ours.pods_per_job(4), 5);
    assert_eq!(mpi.pods_per_job(4), 5);
    assert_eq!(Subject::Ours(Mode::DglApi).pods_per_job(4), 6);
    let j: DynamicObject = serde_json::from_value(ours.job_object("x", "ns", 3)).unwrap();
    assert_eq!(j.data["spec"]["partitionMode"], "Skip");
}

#[test]
fn warnings_of_both_log_formats_are_counted() {
    let dir = std::env::temp_dir().join(format!("bench-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log");
    std::fs::write(
        &log,
        "2024-01-01T00:00:00Z  WARN dgl_operator: slow\n\
         I1123 19:09:00.1 1 x.go:1] fine\n\
         E1123 19:09:00.1 1 x.go:1] failed\n\
         Error is not a klog line\n",
    )
    .unwrap();
    let (n, first) = log_warnings(&log);
    assert_eq!(n, 2, "{first:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stages_parse_as_yaml_documents() {
    let text = STAGES.replace("__LAUNCHER_DELAY_MS__", "3000");
    let docs: Vec<serde_yaml::Value> = text
        .split("\n---\n")
        .map(|d| serde_yaml::from_str(d).unwrap())
        .collect();
    let names: Vec<&str> = docs
        .iter()
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "node-initialize",
            "node-heartbeat-with-lease",
            "pod-ready",
            "pod-delete",
            "dgl-launcher-complete",
            "mpi-launcher-complete"
        ]
    );
}
