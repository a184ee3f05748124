use super::*;
use http::{Request, Response};
use kube::client::Body;
use tower_test::mock;

fn elector(client: Client) -> LeaderElector {
    LeaderElector::new(
        client,
        LeaderConfig {
            namespace: "ns".into(),
            name: "lease".into(),
            identity: "me".into(),
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            renew: Duration::from_secs(3),
        },
    )
}

/// An API server that takes every request and never answers (a slow
/// one, or a rate limiter that never lets the renewal through): the
/// leader steps down at the renew deadline, before the lease expires.
#[tokio::test(start_paused = true)]
async fn a_renewal_that_never_answers_steps_down_at_the_renew_deadline() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    // Hold every request unanswered until the test ends.
    let held = tokio::spawn(async move {
        let mut pending = Vec::new();
        while let Some(r) = handle.next_request().await {
            pending.push(r);
        }
    });
    let e = elector(Client::new(service, "default"));
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(60), e.hold())
        .await
        .expect("hold() still waiting on the renewal a minute later");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(15),
        "stepped down after {took:?}: must be at the renew deadline (10 s), before the lease (15 s) ends"
    );
    held.abort();
}

fn lease(holder: &str, renew: Timestamp, rv: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            resource_version: Some(rv.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(renew)),
            ..Default::default()
        }),
    }
}

/// Expiry is judged by when this process saw the record change, on its
/// own monotonic clock: a renewTime a day ahead or behind changes nothing.
#[tokio::test]
async fn expiry_follows_the_observed_change_not_the_lease_timestamps() {
    let (service, _handle) = mock::pair::<Request<Body>, Response<Body>>();
    let e = elector(Client::new(service, "default"));
    let t0 = Instant::now();
    let day = k8s_openapi::jiff::SignedDuration::from_hours(24);
    let ahead = Timestamp::now().checked_add(day).unwrap();
    let behind = Timestamp::now().checked_sub(day).unwrap();
    for (what, renew) in [("a day ahead", ahead), ("a day behind", behind)] {
        let l = lease("other", renew, what);
        assert!(!e.expired(&l, t0), "{what}: first sight is not expiry");
        let late = t0 + Duration::from_secs(14);
        assert!(!e.expired(&l, late), "{what}: 14 s unchanged");
        // Renewed (a new resourceVersion) at 14 s: counted from there.
        let renewed = lease("other", renew, &format!("{what}-2"));
        assert!(!e.expired(&renewed, late));
        assert!(!e.expired(&renewed, late + Duration::from_secs(14)));
        assert!(
            e.expired(&renewed, late + Duration::from_secs(15)),
            "{what}: 15 s without a change is expiry"
        );
    }
}
