//! Status writes cannot roll back (issue #36 item 9), on a real API server:
//! a reconcile from a job cache older than the last status write (and
//! without this process's memory of that write: expired, or another
//! process) must not overwrite a newer restart count.

use kube::api::{Api, Patch, PatchParams, PostParams};

use super::{context, t};
use crate::controller::reconcile_job;
use dgl_api::names::FIELD_MANAGER;
use dgl_api::DGLJob;
use kube::core::DeserializeGuard;
use kube::Resource;

#[tokio::test]
async fn a_status_from_a_stale_cache_does_not_roll_back_the_restart_count() {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let client = cluster.client().await.unwrap();
    localkube::apply_crds(&client, &dgl_api::crd_yaml())
        .await
        .unwrap();
    let ns = localkube::create_test_namespace(&client, "stale-status")
        .await
        .unwrap();
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), &ns);
    let mut j: DGLJob =
        serde_yaml::from_str(include_str!("../../../../examples/seed-dgljob.yaml")).unwrap();
    j.metadata.namespace = Some(ns.clone());
    let name = j.metadata.name.clone().unwrap();
    // The job as created: what a cache held stale still shows.
    let stale = jobs.create(&PostParams::default(), &j).await.unwrap();

    // The operator's first reconcile writes the job's first status; a later
    // one (written as the operator writes it) counted two restarts.
    let ctx = context(client.clone());
    reconcile_job(&DeserializeGuard(Ok(stale.clone())), &ctx, t(0))
        .await
        .unwrap();
    let first = jobs.get(&name).await.unwrap();
    let mut later = first.status.clone().expect("a first status");
    later.restart_count = Some(2);
    let patch = serde_json::json!({
        "apiVersion": DGLJob::api_version(&()),
        "kind": DGLJob::kind(&()),
        "status": later,
    });
    jobs.patch_status(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .unwrap();

    // A reconcile from the stale job, with no memory of those writes.
    let ctx = context(client.clone());
    let result = reconcile_job(&DeserializeGuard(Ok(stale)), &ctx, t(60)).await;
    let now = jobs.get(&name).await.unwrap();
    let restarts = now.status.as_ref().and_then(|s| s.restart_count);
    assert_eq!(
        restarts,
        Some(2),
        "the restart count was rolled back by a stale cache (reconcile: {result:?})"
    );
    // The next reconcile, from the job as it is, goes on.
    let ctx = context(client.clone());
    reconcile_job(&DeserializeGuard(Ok(now)), &ctx, t(61))
        .await
        .unwrap();
    let after = jobs.get(&name).await.unwrap();
    assert_eq!(after.status.and_then(|s| s.restart_count), Some(2));
}
