//! Errors that persist without being final are shown on the job, against a
//! real API server: a ResourceQuota that admits no pod refuses the job's
//! pods (403); the job shows condition ApplyFailed and Warning Events while
//! it lasts, and carries on (the condition False) once the quota is gone.

mod common;

use common::Env;
use dgl_operator::pure::apply_failed::APPLY_FAILED;
use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn a_persistent_refusal_shows_as_a_condition_and_warnings_until_it_ends() {
    let env = Env::new("fault-quota").await;
    let quotas: Api<ResourceQuota> = Api::namespaced(env.client.clone(), &env.ns);
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-pods"},
        "spec": {"hard": {"pods": "0"}}
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();

    env.create_job("q", |_| {}).await;
    let job = env
        .wait_job("q", "condition ApplyFailed True", |j| {
            j.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == APPLY_FAILED && c.status == "True")
            })
        })
        .await;
    let c = job
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == APPLY_FAILED)
        .unwrap();
    assert_eq!(c.reason, "Forbidden");
    assert!(
        c.message.contains("create Pod q-partitioner") && c.message.contains("quota"),
        "{}",
        c.message
    );
    // The Event is written after the condition: wait for it (bounded).
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let warnings = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.type_.as_deref() == Some("Warning") && e.action.as_deref() == Some(APPLY_FAILED)
            })
            .count();
        if warnings >= 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no Warning Event for the failed attempts within 15 s of the condition"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    // The quota goes: the next retry creates the pod and clears the condition.
    quotas
        .delete("no-pods", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_pod("q-partitioner").await;
    env.wait_job("q", "condition ApplyFailed False", |j| {
        j.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == APPLY_FAILED && c.status == "False")
        })
    })
    .await;
}
