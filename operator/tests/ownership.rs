//! Who owns the job's supporting objects, against a real API server and
//! controller-manager (garbage collector): the job's Secret is kept in
//! existence, a user's object of a child's name is never adopted (the
//! ConfigMap's is found when the launch would create it), and a job
//! deleted and created again under the same name waits for the collector.

mod common;

use std::time::Duration;

use common::{Env, WAIT};
use dgl_api::names::SECRET_TOKEN_KEY;
use dgl_api::JobPhase;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

fn controlled_by(meta: &kube::api::ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true))
}

/// Polls `f` until it returns Some, for at most [`WAIT`].
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_deleted_secret_is_created_again_owned_by_the_job() {
    let env = Env::new("own-secret").await;
    let job = env.create_job("sec", |_| {}).await;
    let uid = job.uid().unwrap();
    env.wait_pod("sec-partitioner").await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let first = secrets.get("sec-token").await.unwrap();
    assert!(controlled_by(&first.metadata, &uid));

    // Lost (deleted by hand, or its create failed): created again.
    secrets
        .delete("sec-token", &DeleteParams::default())
        .await
        .unwrap();
    let again = eventually("the Secret is created again", || async {
        secrets
            .get_opt("sec-token")
            .await
            .unwrap()
            .filter(|s| s.uid() != first.uid())
    })
    .await;
    assert!(controlled_by(&again.metadata, &uid));
    assert_eq!(again.data.unwrap()[SECRET_TOKEN_KEY].0.len(), 64);
}

#[tokio::test]
async fn a_users_config_map_and_service_account_of_a_childs_name_are_left_alone() {
    let env = Env::new("own-foreign").await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), &env.ns);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "mine-config"},
        "data": {"hostfile": "the user's own"}
    }))
    .unwrap();
    let sa: ServiceAccount = serde_json::from_value(json!({
        "metadata": {"name": "mine-launcher", "labels": {"app": "users"}}
    }))
    .unwrap();
    let cm = cms.create(&PostParams::default(), &cm).await.unwrap();
    let sa = sas.create(&PostParams::default(), &sa).await.unwrap();

    env.create_job("mine", |_| {}).await;
    let job = env.wait_phase("mine", JobPhase::Failed).await;
    let c = Env::condition(&job, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "ObjectExists");
    // The ConfigMap is only written at the launch, which never comes.
    assert!(
        c.message
            .starts_with("ServiceAccount mine-launcher already exists"),
        "{}",
        c.message
    );
    assert!(
        env.pod_names().await.is_empty(),
        "no pod for a job that failed"
    );

    // Untouched, byte for byte, and still there once the job is deleted
    // (never adopted, so never garbage-collected with it).
    let same = |a: &serde_json::Value, b: &serde_json::Value| assert_eq!(a, b);
    same(
        &serde_json::to_value(cms.get("mine-config").await.unwrap()).unwrap(),
        &serde_json::to_value(&cm).unwrap(),
    );
    same(
        &serde_json::to_value(sas.get("mine-launcher").await.unwrap()).unwrap(),
        &serde_json::to_value(&sa).unwrap(),
    );
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    env.jobs()
        .delete("mine", &DeleteParams::background())
        .await
        .unwrap();
    // The job's own children go (the collector ran) ...
    eventually("the job's Secret is collected", || async {
        secrets
            .get_opt("mine-token")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // ... the user's stay as they were.
    let cm_after = cms.get("mine-config").await.unwrap();
    assert_eq!(cm_after.resource_version(), cm.resource_version());
    assert_eq!(cm_after.meta().owner_references, None);
    let sa_after = sas.get("mine-launcher").await.unwrap();
    assert_eq!(sa_after.resource_version(), sa.resource_version());
}

/// The job's ConfigMap is created when its first run is launched: a user's
/// ConfigMap of that name (without the operator's labels, so its watch does
/// not show it) fails the job then, and is left alone.
#[tokio::test]
async fn a_users_config_map_of_the_childs_name_fails_the_job_at_the_launch() {
    let env = Env::new("own-late").await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "late-config"},
        "data": {"hostfile": "the user's own"}
    }))
    .unwrap();
    let cm = cms.create(&PostParams::default(), &cm).await.unwrap();
    env.create_job("late", |_| {}).await;
    env.wait_phase("late", JobPhase::Partitioning).await;
    env.kubelet_running("late-worker-0", "10.244.1.10", true)
        .await;
    env.kubelet_running("late-worker-1", "10.244.1.11", true)
        .await;
    env.kubelet_running("late-partitioner", "10.244.0.2", true)
        .await;
    let job = env.wait_phase("late", JobPhase::Failed).await;
    let c = Env::condition(&job, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "ObjectExists");
    assert!(
        c.message
            .starts_with("ConfigMap late-config already exists and it has no controller"),
        "{}",
        c.message
    );
    let after = cms.get("late-config").await.unwrap();
    assert_eq!(after.resource_version(), cm.resource_version());
    assert_eq!(after.meta().owner_references, None);
}

#[tokio::test]
async fn a_job_created_again_under_its_name_waits_for_the_collector_and_runs() {
    let env = Env::new("own-again").await;
    let old = env.create_job("twice", |_| {}).await;
    env.wait_pod("twice-partitioner").await;
    env.jobs()
        .delete("twice", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the first job is gone", || async {
        env.jobs()
            .get_opt("twice")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let new = env.create_job("twice", |_| {}).await;
    let new_uid = new.uid().unwrap();
    assert_ne!(old.uid(), Some(new_uid.clone()));
    // Every child ends up the new job's (created after the old ones went),
    // and the job moves on.
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), &env.ns);
    eventually("the new job's Secret and ServiceAccount", || async {
        let s = secrets.get_opt("twice-token").await.unwrap()?;
        let c = sas.get_opt("twice-launcher").await.unwrap()?;
        (controlled_by(&s.metadata, &new_uid) && controlled_by(&c.metadata, &new_uid)).then_some(())
    })
    .await;
    env.wait_phase("twice", JobPhase::Partitioning).await;
    let job = env.jobs().get("twice").await.unwrap();
    assert!(Env::condition(&job, JobPhase::Failed).is_none());
}
