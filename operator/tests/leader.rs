//! Leader election against the real API server: one holder at a time,
//! hand-over on release, take-over after expiry.

use std::time::Duration;

use dgl_operator::leader::{LeaderConfig, LeaderElector};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

fn elector(client: &kube::Client, ns: &str, who: &str) -> LeaderElector {
    LeaderElector::new(
        client.clone(),
        LeaderConfig {
            namespace: ns.into(),
            name: "dgl-operator-leader".into(),
            identity: who.into(),
            duration: Duration::from_secs(2),
            renew_deadline: Duration::from_millis(1500),
            renew: Duration::from_millis(500),
        },
    )
}

#[tokio::test]
async fn one_leader_at_a_time() {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let client = cluster.client().await.unwrap();
    let ns = localkube::create_test_namespace(&client, "leader")
        .await
        .unwrap();
    let a = elector(&client, &ns, "a");
    let b = elector(&client, &ns, "b");

    assert!(a.try_acquire().await.unwrap(), "first comer leads");
    assert!(!b.try_acquire().await.unwrap(), "a live lease is respected");
    assert!(a.try_acquire().await.unwrap(), "the holder renews");

    a.release().await;
    assert!(
        b.try_acquire().await.unwrap(),
        "a released lease is taken at once"
    );
    assert!(!a.try_acquire().await.unwrap());
    let lease = Api::<Lease>::namespaced(client.clone(), &ns)
        .get("dgl-operator-leader")
        .await
        .unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));

    // b stops renewing: after the lease duration a takes over.
    tokio::time::sleep(Duration::from_millis(3200)).await;
    assert!(
        a.try_acquire().await.unwrap(),
        "an expired lease is taken over"
    );
}
