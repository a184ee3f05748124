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
