//! The job's token Secret deleted mid-run (issue #25 item 3): the operator
//! creates it again with the same bytes (the token is derived from the
//! operator's key and the job's UID), so the running pods' token stays
//! valid; the Secret is immutable, so it cannot be changed under them.

mod common;

use common::Env;
use dgl_api::names::{secret_name, SECRET_TOKEN_KEY};
use dgl_api::JobPhase;
use dgl_operator::pure::builders::job_token;
use dgl_operator::pure::settings::{BuildConfig, TokenKey};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::ResourceExt;
use serde_json::json;

fn key(byte: u8) -> TokenKey {
    TokenKey(vec![byte; 32])
}

/// Waits for the job's Secret with another UID than `not_uid`.
async fn secret_other_than(api: &Api<Secret>, name: &str, not_uid: Option<&str>) -> Secret {
    let not_uid = not_uid.map(String::from);
    let unwanted = not_uid.clone();
    let cond = await_condition(api.clone(), name, move |s: Option<&Secret>| {
        s.is_some_and(|s| s.uid() != unwanted)
    });
    match tokio::time::timeout(common::WAIT, cond).await {
        Ok(Ok(Some(s))) => s,
        other => panic!("no Secret {name} (other than uid {not_uid:?}): {other:?}"),
    }
}

fn token_of(s: &Secret) -> Vec<u8> {
    s.data.as_ref().unwrap()[SECRET_TOKEN_KEY].0.clone()
}

#[tokio::test]
async fn a_deleted_token_secret_comes_back_byte_for_byte_and_the_job_runs_on() {
    let build = BuildConfig {
        token_key: Some(key(7)),
        ..Default::default()
    };
    let env = Env::with_build("token", build).await;
    let job = env.create_job("tj", |_| {}).await;
    let name = secret_name("tj");
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let first = secret_other_than(&secrets, &name, None).await;
    assert_eq!(first.immutable, Some(true), "the Secret is immutable");
    let token = token_of(&first);
    assert_eq!(
        Some(String::from_utf8(token.clone()).unwrap()),
        job_token(&key(7), &job),
        "the token is the one derived from the key and the job's UID"
    );
    // An immutable Secret cannot be changed under the pods.
    let patch = json!({"data": {SECRET_TOKEN_KEY: "b3RoZXI="}});
    let refused = secrets
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    assert!(refused.is_err(), "an immutable Secret was changed");

    // Mid-partitioning: the partitioner runs, the workers come up.
    env.wait_pod("tj-partitioner").await;
    env.kubelet_running("tj-partitioner", "10.244.0.2", true)
        .await;
    let pods_before = env.pod_uids().await;
    secrets
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let again = secret_other_than(&secrets, &name, first.uid().as_deref()).await;
    assert_eq!(
        token_of(&again),
        token,
        "the re-created Secret's token differs"
    );
    assert_eq!(again.immutable, Some(true));

    // The job goes on with the same pods: nothing restarted.
    env.drive_to_running("tj", 2).await;
    let job = env.wait_phase("tj", JobPhase::Running).await;
    let restarts = job.status.as_ref().and_then(|s| s.restart_count);
    assert!(matches!(restarts, None | Some(0)), "restarts: {restarts:?}");
    let pods_after = env.pod_uids().await;
    for (pod, uid) in &pods_before {
        assert_eq!(pods_after.get(pod), Some(uid), "pod {pod} was replaced");
    }
}

#[tokio::test]
async fn tokens_differ_by_job_uid_and_by_key() {
    let mut a: dgl_api::DGLJob = serde_yaml::from_str(common::SEED).unwrap();
    assert_eq!(job_token(&key(1), &a), None, "no UID, no derived token");
    a.metadata.uid = Some("0b0e3a4e-1".into());
    let mut b = a.clone();
    b.metadata.uid = Some("0b0e3a4e-2".into());
    let ta = job_token(&key(1), &a).unwrap();
    assert_eq!(ta.len(), 64);
    assert!(ta.bytes().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(job_token(&key(1), &a).unwrap(), ta, "deterministic");
    assert_ne!(job_token(&key(1), &b).unwrap(), ta, "another job (UID)");
    assert_ne!(job_token(&key(2), &a).unwrap(), ta, "another key");
    assert!(
        !format!("{:?}", key(9)).contains('9'),
        "Debug hides the key"
    );
}
