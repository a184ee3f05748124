//! runPolicy.podFailurePolicy against a real API server (the CRD's schema and
//! CEL rules) and the operator; the test plays the kubelet.

mod common;

use common::Env;
use dgl_api::{DGLJob, JobPhase, RunPolicy};
use kube::api::{EvictParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn policy() -> serde_json::Value {
    json!({"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "dgl-graphsage", "operator": "In", "values": [42]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    ]})
}

fn with_policy(j: &mut DGLJob, backoff: i32) {
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(backoff),
        pod_failure_policy: Some(serde_json::from_value(policy()).unwrap()),
        ..Default::default()
    });
}

#[tokio::test]
async fn a_fail_job_exit_code_fails_at_once_and_an_eviction_restarts_uncounted() {
    let env = Env::new("op-fpol").await;

    // Exit code 42 fails the job although backoffLimit allows 3 restarts.
    env.create_job("fj", |j| with_policy(j, 3)).await;
    env.drive_to_running("fj", 2).await;
    env.kubelet_failed("fj-worker-1", 42).await;
    let job = env.wait_phase("fj", JobPhase::Failed).await;
    let c = Env::condition(&job, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "PodFailurePolicy");
    assert!(
        c.message.contains("rules[0] (FailJob) matched"),
        "{}",
        c.message
    );
    assert_eq!(job.status.as_ref().unwrap().restart_count, None);

    // An evicted worker (DisruptionTarget) restarts the run without counting:
    // with backoffLimit 0 the job would otherwise fail.
    env.create_job("ig", |j| with_policy(j, 0)).await;
    env.drive_to_running("ig", 2).await;
    env.pods()
        .patch_status(
            "ig-worker-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Failed",
                "reason": "Evicted",
                "conditions": [{"type": "DisruptionTarget", "status": "True",
                    "reason": "EvictionByEvictionAPI"}],
                "containerStatuses": [{"name": "dgl-graphsage", "image": "x", "imageID": "",
                    "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}]
            }})),
        )
        .await
        .unwrap();
    let job = env
        .wait_job("ig", "an uncounted restart", |j| {
            j.status.as_ref().and_then(|s| s.restart_count) == Some(1)
        })
        .await;
    let s = job.status.as_ref().unwrap();
    assert_eq!(s.ignored_restarts, Some(1));
    let c = Env::condition(&job, JobPhase::Restarting).unwrap();
    assert!(
        c.message.contains("not counted against backoffLimit"),
        "{}",
        c.message
    );
}

#[tokio::test]
async fn the_crd_refuses_malformed_rules_naming_the_field() {
    let env = Env::new("op-fpol-crd").await;
    let cases = [
        (
            "both matchers",
            json!({"action": "Count", "onExitCodes": {"operator": "In", "values": [1]},
                "onPodConditions": [{"type": "DisruptionTarget"}]}),
            "exactly one of onExitCodes and onPodConditions",
        ),
        (
            "zero with In",
            json!({"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0, 3]}}),
            "must not contain 0 with operator In",
        ),
        (
            "unknown action",
            json!({"action": "Retry", "onExitCodes": {"operator": "In", "values": [3]}}),
            "Unsupported value",
        ),
    ];
    for (i, (what, rule, expected)) in cases.into_iter().enumerate() {
        let mut job: serde_json::Value =
            serde_yaml::from_str(include_str!("../../examples/seed-dgljob.yaml")).unwrap();
        job["metadata"] = json!({"name": format!("bad-{i}"), "namespace": env.ns});
        job["spec"]["runPolicy"] = json!({"podFailurePolicy": {"rules": [rule]}});
        let api: kube::Api<kube::core::DynamicObject> = kube::Api::namespaced_with(
            env.client.clone(),
            &env.ns,
            &kube::discovery::ApiResource::erase::<DGLJob>(&()),
        );
        let obj: kube::core::DynamicObject = serde_json::from_value(job).unwrap();
        let err = api
            .create(&PostParams::default(), &obj)
            .await
            .expect_err(what)
            .to_string();
        assert!(err.contains(expected), "{what}: {err}");
        assert!(err.contains("podFailurePolicy"), "{what}: {err}");
    }
}

/// Issue #36 item 3: a worker evicted through the Eviction API (the API
/// server adds DisruptionTarget and deletes it; unbound, it is gone at
/// once) matches the Ignore rule although it is gone from the operator's
/// cache when the operator decides.
#[tokio::test]
async fn a_worker_evicted_through_the_eviction_api_restarts_uncounted() {
    let env = Env::new("op-fpol-evict").await;
    env.create_job("ev", |j| with_policy(j, 0)).await;
    env.drive_to_running("ev", 2).await;
    env.pods()
        .evict("ev-worker-0", &EvictParams::default())
        .await
        .expect("eviction of ev-worker-0");
    let job = env
        .wait_job("ev", "an uncounted restart", |j| {
            let s = j.status.as_ref();
            s.and_then(|s| s.restart_count) == Some(1)
                || s.and_then(|s| s.phase) == Some(JobPhase::Failed)
        })
        .await;
    let s = job.status.as_ref().unwrap();
    assert_eq!(s.phase, Some(JobPhase::Restarting), "{s:#?}");
    assert_eq!(s.ignored_restarts, Some(1), "{s:#?}");
    let c = Env::condition(&job, JobPhase::Restarting).unwrap();
    assert!(
        c.message.contains("rules[1] (Ignore) matched"),
        "{}",
        c.message
    );
}
