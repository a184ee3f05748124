//! Pods that never start, against a real API server (the test plays the
//! kubelet and the scheduler by writing pod status): the job names the pod,
//! container and reason at once in condition PodsNotStarting, with one
//! Warning Event, clears it when the pod starts, and fails after
//! runPolicy.podStartTimeoutSeconds; an OOMKilled worker is named with its
//! memory limit (issue #25 item 1).

mod common;

use std::time::{Duration, Instant};

use common::Env;
use dgl_api::{DGLJob, JobPhase, ReplicaType, RunPolicy};
use dgl_operator::pure::plan::PODS_NOT_STARTING;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams};
use serde_json::json;

fn not_starting(j: &DGLJob) -> Option<&Condition> {
    j.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == PODS_NOT_STARTING)
}

fn waiting(reason: &str, message: &str) -> serde_json::Value {
    json!({
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [{"name": "dgl-graphsage", "image": "no/such:image", "imageID": "",
            "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": reason, "message": message}}}]
    })
}

/// The Warning Events of action PodsNotStarting, waited for up to 10 s to
/// reach `at_least`.
async fn warnings(env: &Env, at_least: usize) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found: Vec<Event> = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.action.as_deref() == Some(PODS_NOT_STARTING)
            })
            .collect();
        if found.len() >= at_least || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_is_named_evented_once_then_fails_the_job() {
    let env = Env::new("never-start-image").await;
    env.create_job("img", |j| {
        j.spec.run_policy = Some(RunPolicy {
            pod_start_timeout_seconds: Some(6),
            ..Default::default()
        });
    })
    .await;
    env.wait_pod("img-worker-1").await;
    let written = Instant::now();
    env.patch_pod_status(
        "img-worker-1",
        waiting(
            "ErrImagePull",
            "failed to pull \"no/such:image\": not found",
        ),
    )
    .await;
    let job = env
        .wait_job("img", "PodsNotStarting True", |j| {
            not_starting(j).is_some_and(|c| c.status == "True")
        })
        .await;
    let named_after = written.elapsed();
    let c = not_starting(&job).unwrap();
    assert_eq!(c.reason, "ErrImagePull");
    assert_eq!(
        c.message,
        "pod img-worker-1: container dgl-graphsage: ErrImagePull: \
         failed to pull \"no/such:image\": not found"
    );
    // The phase stays what it is: still partitioning, not failed.
    assert_eq!(
        job.status.as_ref().unwrap().phase,
        Some(JobPhase::Partitioning)
    );
    // The kubelet's back-off: a new reason, not a new Event.
    env.patch_pod_status("img-worker-1", waiting("ImagePullBackOff", "Back-off"))
        .await;
    env.wait_job("img", "reason ImagePullBackOff", |j| {
        not_starting(j).is_some_and(|c| c.reason == "ImagePullBackOff")
    })
    .await;
    let failed = env.wait_phase("img", JobPhase::Failed).await;
    let f = Env::condition(&failed, JobPhase::Failed).unwrap();
    assert_eq!(f.reason, "PodStartTimeout");
    assert!(
        f.message
            .starts_with("pod img-worker-1: container dgl-graphsage: ImagePullBackOff")
            && f.message
                .ends_with("(not started within runPolicy.podStartTimeoutSeconds, 6s)"),
        "{}",
        f.message
    );
    let w = warnings(&env, 1).await;
    assert_eq!(w.len(), 1, "one Warning Event: {w:#?}");
    assert!(w[0]
        .note
        .as_deref()
        .unwrap()
        .starts_with("pod img-worker-1"));
    eprintln!(
        "named {:.1} s after the kubelet's status, Failed {:.1} s after",
        named_after.as_secs_f64(),
        written.elapsed().as_secs_f64()
    );
}

#[tokio::test]
async fn an_unschedulable_pod_is_named_and_cleared_once_it_starts() {
    let env = Env::new("never-start-sched").await;
    env.create_job("sched", |_| {}).await;
    env.wait_pod("sched-partitioner").await;
    env.patch_pod_status(
        "sched-partitioner",
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient memory."}]}),
    )
    .await;
    let job = env
        .wait_job("sched", "PodsNotStarting True", |j| {
            not_starting(j).is_some_and(|c| c.status == "True")
        })
        .await;
    assert_eq!(
        not_starting(&job).unwrap().message,
        "pod sched-partitioner: Unschedulable: 0/1 nodes are available: 1 Insufficient memory."
    );
    env.kubelet_running("sched-partitioner", "10.244.0.2", false)
        .await;
    let job = env
        .wait_job("sched", "PodsNotStarting False", |j| {
            not_starting(j).is_some_and(|c| c.status == "False")
        })
        .await;
    assert_eq!(not_starting(&job).unwrap().reason, "PodsStarted");
    assert_ne!(job.status.as_ref().unwrap().phase, Some(JobPhase::Failed));
}

#[tokio::test]
async fn an_oom_killed_worker_is_named_with_its_memory_limit() {
    let env = Env::new("never-start-oom").await;
    env.create_job("oom", |j| {
        let worker = j
            .spec
            .dgl_replica_specs
            .get_mut(&ReplicaType::Worker)
            .unwrap();
        let c = &mut worker.template.spec.as_mut().unwrap().containers[0];
        c.resources = Some(serde_json::from_value(json!({"limits": {"memory": "2Gi"}})).unwrap());
    })
    .await;
    env.drive_to_running("oom", 2).await;
    env.patch_pod_status(
        "oom-worker-1",
        json!({
            "phase": "Failed",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "dgl-graphsage", "image": "x", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
        }),
    )
    .await;
    let job = env.wait_phase("oom", JobPhase::Failed).await;
    let f = Env::condition(&job, JobPhase::Failed).unwrap();
    assert!(
        f.message.contains(
            "pod oom-worker-1: container dgl-graphsage OOMKilled (limit 2Gi), exit code 137"
        ),
        "{}",
        f.message
    );
}
