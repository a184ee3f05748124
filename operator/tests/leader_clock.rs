//! Leader election against the real API server with a holder whose clock is
//! far off (issue #25 item 4): a follower judges expiry by watching the
//! lease change on its own monotonic clock, not by the lease's timestamps.

use std::time::{Duration, Instant};

use dgl_operator::leader::{LeaderConfig, LeaderElector};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};

const LEASE: &str = "dgl-operator-leader";

fn elector(client: &kube::Client, ns: &str) -> LeaderElector {
    LeaderElector::new(
        client.clone(),
        LeaderConfig {
            namespace: ns.into(),
            name: LEASE.into(),
            identity: "follower".into(),
            duration: Duration::from_secs(2),
            renew_deadline: Duration::from_millis(1500),
            renew: Duration::from_millis(500),
        },
    )
}

/// Writes the lease as a holder "skewed" whose clock is `skew` off.
async fn renew_as_skewed(api: &Api<Lease>, skew: SignedDuration) {
    let renew = Timestamp::now().checked_add(skew).unwrap();
    let spec = LeaseSpec {
        holder_identity: Some("skewed".into()),
        lease_duration_seconds: Some(2),
        acquire_time: Some(MicroTime(renew)),
        renew_time: Some(MicroTime(renew)),
        ..Default::default()
    };
    match api.get_opt(LEASE).await.unwrap() {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE.into()),
                    ..Default::default()
                },
                spec: Some(spec),
            };
            api.create(&PostParams::default(), &lease).await.unwrap();
        }
        Some(mut lease) => {
            lease.spec = Some(spec);
            api.replace(LEASE, &PostParams::default(), &lease)
                .await
                .unwrap();
        }
    }
}

/// Tries to take the lease every 200 ms for `span`; when it was taken.
async fn taken_within(e: &LeaderElector, span: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < span {
        if e.try_acquire().await.unwrap() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

#[tokio::test]
async fn a_lease_renewed_with_a_clock_an_hour_ahead_expires_when_renewals_stop() {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let client = cluster.client().await.unwrap();
    let ns = localkube::create_test_namespace(&client, "lease-ahead")
        .await
        .unwrap();
    let api: Api<Lease> = Api::namespaced(client.clone(), &ns);
    // The holder's clock is an hour ahead, and it stops renewing at once:
    // trusting renewTime, the follower would wait an hour.
    renew_as_skewed(&api, SignedDuration::from_hours(1)).await;
    let follower = elector(&client, &ns);
    let took = taken_within(&follower, Duration::from_secs(10)).await;
    let took = took.expect("the follower never took a lease no one renews");
    assert!(
        took >= Duration::from_millis(1800),
        "taken after {took:?}: before the lease duration (2 s) had passed unrenewed"
    );
}

#[tokio::test]
async fn a_lease_renewed_with_a_clock_a_day_behind_is_not_taken_while_renewed() {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let client = cluster.client().await.unwrap();
    let ns = localkube::create_test_namespace(&client, "lease-behind")
        .await
        .unwrap();
    let api: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let follower = elector(&client, &ns);
    // The holder renews every 500 ms with renewTime a day in the past:
    // trusting renewTime, the follower would take a live lease at once.
    let behind = -SignedDuration::from_hours(24);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        renew_as_skewed(&api, behind).await;
        assert!(
            !follower.try_acquire().await.unwrap(),
            "the follower took a lease renewed {:?} into the test",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Renewals stop: it expires after the lease duration.
    let took = taken_within(&follower, Duration::from_secs(10)).await;
    assert!(took.is_some(), "not taken after renewals stopped");
}
