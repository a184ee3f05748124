//! `--network-policy` against a real API server and controller-manager
//! (issue #15, item 8): every job gets `<job>-network`, owned by it and
//! created again when deleted; a user's NetworkPolicy (of a child's name or
//! not) is never adopted, changed or deleted.

mod common;

use std::time::Duration;

use common::{Env, WAIT};
use dgl_api::JobPhase;
use dgl_operator::pure::builders;
use dgl_operator::pure::settings::BuildConfig;
use dgl_operator::pure::validate::validate;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

fn controlled_by(np: &NetworkPolicy, uid: &str) -> bool {
    np.owner_references()
        .iter()
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

/// A user's policy: everything in the namespace may reach `app=users`.
fn users_policy(name: &str) -> NetworkPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "podSelector": {"matchLabels": {"app": "users"}},
            "ingress": [{"from": [{"podSelector": {}}]}],
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn each_job_gets_its_own_network_policy_and_a_users_is_left_alone() {
    let build = BuildConfig {
        network_policy: true,
        ..Default::default()
    };
    let env = Env::with_build("netpol", build).await;
    let nps: Api<NetworkPolicy> = Api::namespaced(env.client.clone(), &env.ns);
    let pp = PostParams::default();
    let users = nps.create(&pp, &users_policy("users")).await.unwrap();
    let taken = nps
        .create(&pp, &users_policy("taken-network"))
        .await
        .unwrap();

    // The job's policy: exactly what the builder makes, controlled by the job.
    let job = env.create_job("np", |_| {}).await;
    let uid = job.uid().unwrap();
    let np = eventually("the job's NetworkPolicy", || async {
        nps.get_opt("np-network").await.unwrap()
    })
    .await;
    assert!(controlled_by(&np, &uid), "{:?}", np.owner_references());
    let first = builders::AdmittedRuns {
        current: 0,
        kept_partitioner: None,
    };
    let valid = validate(&job, &BuildConfig::default()).expect("the job is valid");
    assert_eq!(np.spec, builders::network_policy(&valid, first).spec);
    env.wait_pod("np-partitioner").await;

    // Deleted (by hand): created again.
    nps.delete("np-network", &DeleteParams::default())
        .await
        .unwrap();
    let again = eventually("the NetworkPolicy is created again", || async {
        nps.get_opt("np-network")
            .await
            .unwrap()
            .filter(|p| p.uid() != np.uid())
    })
    .await;
    assert!(controlled_by(&again, &uid));

    // A user's policy of a child's name: the job fails, the policy stays.
    env.create_job("taken", |_| {}).await;
    let failed = env.wait_phase("taken", JobPhase::Failed).await;
    let c = Env::condition(&failed, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "ObjectExists");
    assert!(
        c.message
            .starts_with("NetworkPolicy taken-network already exists"),
        "{}",
        c.message
    );

    // Both jobs deleted: the job's own policy is collected, the user's stay
    // as they were (never adopted, never written).
    for name in ["np", "taken"] {
        env.jobs()
            .delete(name, &DeleteParams::background())
            .await
            .unwrap();
    }
    eventually("the job's NetworkPolicy is collected", || async {
        nps.get_opt("np-network")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    for before in [users, taken] {
        let after = nps.get(&before.name_any()).await.unwrap();
        assert_eq!(after.resource_version(), before.resource_version());
        assert!(after.owner_references().is_empty());
    }
}
