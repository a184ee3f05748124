use super::*;

fn bucket(qps: f32, burst: u32) -> TokenBucket {
    TokenBucket::new(RateLimit { qps, burst }).unwrap()
}

fn c(method: Method, uri: &str) -> (&'static str, String) {
    classify(&method, &uri.parse().unwrap())
}

#[test]
fn classifies_verbs_and_resources() {
    assert_eq!(
        c(
            Method::GET,
            "/api/v1/pods?labelSelector=a%3Db&watch=true&resourceVersion=5"
        ),
        ("watch", "pods".into())
    );
    assert_eq!(
        c(Method::GET, "/api/v1/namespaces/ns/pods?labelSelector=x"),
        ("list", "pods".into())
    );
    assert_eq!(
        c(
            Method::PATCH,
            "/api/v1/namespaces/ns/pods/p?fieldManager=m&force=true"
        ),
        ("patch", "pods".into())
    );
    assert_eq!(
        c(
            Method::PATCH,
            "/apis/dgloperator.io/v1alpha1/namespaces/ns/dgljobs/j/status?fieldManager=m"
        ),
        ("patch", "dgljobs/status".into())
    );
    assert_eq!(
        c(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events"),
        ("create", "events".into())
    );
    assert_eq!(
        c(Method::DELETE, "/api/v1/namespaces/ns/pods/p"),
        ("delete", "pods".into())
    );
    assert_eq!(
        c(Method::GET, "/api/v1/namespaces/ns"),
        ("get", "namespaces".into())
    );
    assert_eq!(
        c(
            Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
        ),
        ("update", "leases".into())
    );
    assert_eq!(c(Method::GET, "/version"), ("get", "nonresource".into()));
}

#[test]
fn status_writes_and_events_are_reports_the_rest_is_work() {
    let stream = |m, u| Stream::of(&c(m, u).1);
    let status = "/apis/dgloperator.io/v1alpha1/namespaces/ns/dgljobs/j/status?fieldManager=m";
    assert_eq!(stream(Method::PATCH, status), Stream::Report);
    let events = "/apis/events.k8s.io/v1/namespaces/ns/events";
    assert_eq!(stream(Method::POST, events), Stream::Report);
    for (m, u) in [
        (Method::POST, "/api/v1/namespaces/ns/pods"),
        (Method::PATCH, "/api/v1/namespaces/ns/configmaps/j-config"),
        (Method::DELETE, "/api/v1/namespaces/ns/pods?labelSelector=x"),
        (
            Method::DELETE,
            "/apis/dgloperator.io/v1alpha1/namespaces/ns/dgljobs/j",
        ),
        (
            Method::GET,
            "/apis/dgloperator.io/v1alpha1/dgljobs?watch=true",
        ),
    ] {
        assert_eq!(stream(m.clone(), u), Stream::Work, "{m} {u}");
    }
}

#[test]
fn token_bucket_allows_the_burst_then_spaces_requests_at_qps() {
    let b = bucket(10.0, 3);
    let t0 = Instant::now();
    for _ in 0..3 {
        assert_eq!(b.reserve_at(t0), None);
    }
    // The 4th and 5th wait 0.1 s and 0.2 s for their tokens.
    let w4 = b.reserve_at(t0).unwrap().as_secs_f64();
    let w5 = b.reserve_at(t0).unwrap().as_secs_f64();
    assert!(
        (w4 - 0.1).abs() < 1e-9 && (w5 - 0.2).abs() < 1e-9,
        "{w4} {w5}"
    );
    // One second later the debt (2 tokens) is paid and 8 more accrued,
    // capped at the burst.
    let t1 = t0 + Duration::from_secs(1);
    for _ in 0..3 {
        assert_eq!(b.reserve_at(t1), None);
    }
    assert!(b.reserve_at(t1).is_some());
    assert!(TokenBucket::new(RateLimit::UNLIMITED).is_none());
    // The smallest qps there is: a wait too long for a Duration, no panic.
    let slow = bucket(f32::from_bits(1), 1);
    assert_eq!(slow.reserve_at(t0), None);
    assert_eq!(slow.reserve_at(t0), Some(Duration::MAX));
    assert_eq!(slow.take_spare_at(t0), Err(Duration::MAX));
}

#[tokio::test]
async fn a_background_request_with_a_tiny_qps_does_not_panic() {
    let slow = bucket(f32::from_bits(1), 1);
    assert!(slow.take_spare_at(Instant::now()).is_ok());
    // No spare token for "ever": it must queue (and wait), not overflow.
    let waiting = tokio::time::timeout(
        Duration::from_millis(50),
        slow.background(Duration::from_millis(10)),
    );
    assert!(waiting.await.is_err());
}

/// An inner service that answers at once.
struct Instant200;

impl Service<Request<()>> for Instant200 {
    type Response = ();
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<(), Self::Error>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::ready(Ok(()))
    }
}

fn request(method: Method, uri: &str) -> Request<()> {
    Request::builder().method(method).uri(uri).body(()).unwrap()
}

#[tokio::test]
async fn a_status_write_does_not_wait_behind_the_work() {
    let limit = RateLimit { qps: 2.0, burst: 1 };
    let layer = ApiLayer {
        work: TokenBucket::new(limit).map(Arc::new),
        report: TokenBucket::new(limit).map(Arc::new),
        deadline: None,
        metrics: Arc::default(),
    };
    let mut svc = layer.layer(Instant200);
    let pods = "/api/v1/namespaces/ns/pods";
    // The work bucket's one token, then two creations owed: 1 s of work.
    let _ = svc.call(request(Method::POST, pods)).await;
    let queued = [
        svc.call(request(Method::POST, pods)),
        svc.call(request(Method::POST, pods)),
    ];
    let status = "/apis/dgloperator.io/v1alpha1/namespaces/ns/dgljobs/j/status";
    let started = Instant::now();
    let _ = svc.call(request(Method::PATCH, status)).await;
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "the status write waited {:?} behind the pods",
        started.elapsed()
    );
    // The pods still wait their turn in their own bucket.
    let started = Instant::now();
    for q in queued {
        let _ = q.await;
    }
    assert!(started.elapsed() >= Duration::from_millis(900));
    // A client with one bucket makes the status write wait behind them.
    let shared = TokenBucket::new(limit).map(Arc::new);
    let layer = ApiLayer {
        work: shared.clone(),
        report: shared,
        deadline: None,
        metrics: Arc::default(),
    };
    let mut svc = layer.layer(Instant200);
    let _ = svc.call(request(Method::POST, pods)).await;
    let _queued = svc.call(request(Method::POST, pods));
    let started = Instant::now();
    let _ = svc.call(request(Method::PATCH, status)).await;
    assert!(started.elapsed() >= Duration::from_millis(900));
}

#[test]
fn a_spare_token_is_one_no_reservation_is_owed() {
    let b = bucket(10.0, 2);
    let t0 = Instant::now();
    assert_eq!(b.take_spare_at(t0), Ok(()));
    assert_eq!(b.take_spare_at(t0), Ok(()));
    let ms = |r: Result<(), Duration>| (r.unwrap_err().as_secs_f64() * 1e3).round();
    assert_eq!(ms(b.take_spare_at(t0)), 100.0);
    // A request reserves the next token: the spare one is two tokens away.
    assert!(b.reserve_at(t0).is_some());
    assert_eq!(ms(b.take_spare_at(t0)), 200.0);
    let t1 = t0 + Duration::from_millis(100);
    assert_eq!(ms(b.take_spare_at(t1)), 100.0);
    assert_eq!(b.take_spare_at(t1 + Duration::from_millis(101)), Ok(()));
}

#[tokio::test]
async fn a_background_request_queues_after_its_longest_wait() {
    let b = bucket(100.0, 1);
    // A spare token: no wait.
    assert!(b.background(Duration::from_millis(20)).await < Duration::from_millis(20));
    // Half a second of reservations ahead of it: no spare token comes
    // within 20 ms, so it reserves one behind them and waits its turn.
    for _ in 0..50 {
        b.reserve();
    }
    let waited = b.background(Duration::from_millis(20)).await;
    assert!(waited >= Duration::from_millis(500), "{waited:?}");
}

#[test]
fn try_take_refuses_without_running_into_debt() {
    let b = bucket(2.0, 2);
    let t0 = Instant::now();
    assert!(b.try_take_at(t0) && b.try_take_at(t0));
    // Refusals take nothing: half a second later exactly one token is back.
    assert!(!b.try_take_at(t0) && !b.try_take_at(t0));
    let t1 = t0 + Duration::from_millis(500);
    assert!(b.try_take_at(t1));
    assert!(!b.try_take_at(t1));
}

/// An inner service that never answers (a half-open connection).
struct Never;

impl Service<Request<()>> for Never {
    type Response = ();
    type Error = std::convert::Infallible;
    type Future = std::future::Pending<Result<(), Self::Error>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::pending()
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_without_an_answer_fails_at_its_deadline_naming_it() {
    let layer = ApiLayer {
        work: None,
        report: None,
        deadline: Some(Duration::from_secs(30)),
        metrics: Arc::default(),
    };
    let mut svc = layer.layer(Never);
    let started = tokio::time::Instant::now();
    let pod = request(Method::GET, "/api/v1/namespaces/ns/pods/p");
    let err = svc.call(pod).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    assert!(err.to_string().contains("get pods within 30s"), "{err}");
}
