//! A DGLJob may not run a pod as a protected ServiceAccount (the operator's
//! own): against a real API server, the job fails naming the field, with a
//! Warning Event, before any of its pods or objects exists.

mod common;

use std::time::Duration;

use common::Env;
use dgl_api::{JobPhase, ReplicaType};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

#[tokio::test]
async fn a_template_naming_the_operators_service_account_is_refused() {
    // The protected account lives in the job's namespace, known once created.
    let mut env = Env::new("sec-sa").await;
    env.kill_operator().await;
    env.build.protected_service_accounts =
        vec![format!("{}/dgl-operator", env.ns).parse().unwrap()];
    env.start_operator();

    env.create_job("thief", |j| {
        let w = j
            .spec
            .dgl_replica_specs
            .get_mut(&ReplicaType::Worker)
            .unwrap();
        w.template.spec.as_mut().unwrap().service_account_name = Some("dgl-operator".into());
    })
    .await;
    let job = env.wait_phase("thief", JobPhase::Failed).await;
    let c = Env::condition(&job, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "ServiceAccountRefused");
    assert!(
        c.message
            .starts_with("spec.dglReplicaSpecs.Worker.template.spec.serviceAccountName:"),
        "{}",
        c.message
    );

    // A Warning Event says the same.
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let mut warned = false;
    for _ in 0..50 {
        warned = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("ServiceAccountRefused")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("serviceAccountName"))
            });
        if warned {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(warned, "a Warning Event names the field");

    // Nothing was created for it.
    assert!(env.pod_names().await.is_empty());
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    assert!(cms.get_opt("thief-config").await.unwrap().is_none());
}
