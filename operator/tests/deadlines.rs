//! Every API call has a deadline (issue #25 item 4): a TCP proxy in front of
//! the real test kube-apiserver forwards until told to go silent, then keeps
//! every connection open and answers nothing (a half-open connection, as
//! after a network partition). The reconciles' requests, a lease renewal and
//! a /metrics token review through it must fail within their deadline
//! instead of hanging. /readyz stays false while the watch caches cannot
//! list through it, and turns true once they have.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dgl_operator::client::{self, Deadlines, RateLimit};
use dgl_operator::controller::{self, Settings};
use dgl_operator::leader::{LeaderConfig, LeaderElector};
use dgl_operator::metrics::Metrics;
use dgl_operator::server::{serve_on, MetricsAuth, ServerState};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const DEADLINES: Deadlines = Deadlines {
    connect: Duration::from_secs(2),
    request: Duration::from_secs(2),
};

/// How late past its deadline a failed request may come back (a loaded
/// 2-core machine).
const SLACK: Duration = Duration::from_secs(3);

/// A proxy to `upstream` that forwards until `silent` is set; from then on
/// it neither forwards nor closes anything, on old and new connections.
async fn proxy(upstream: std::net::SocketAddr, silent: Arc<AtomicBool>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((down, _)) = listener.accept().await else {
                return;
            };
            let silent = silent.clone();
            tokio::spawn(async move {
                if silent.load(Ordering::SeqCst) {
                    return hold(down).await;
                }
                let up = TcpStream::connect(upstream).await.unwrap();
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pipe(dr, uw, silent.clone()));
                pipe(ur, dw, silent).await;
            });
        }
    });
    addr
}

/// Copies `from` to `to` until the proxy goes silent, then keeps both open.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    silent: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if silent.load(Ordering::SeqCst) {
            return hold((from, to)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Keeps `what` (open sockets) alive and says nothing, for ever.
async fn hold<T>(what: T) {
    std::future::pending::<()>().await;
    drop(what);
}

/// A kube Config for the test cluster that goes through a proxy, and the
/// proxy's switch.
async fn proxied() -> (kube::Config, Arc<AtomicBool>, kube::Client) {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let direct = cluster.client().await.unwrap();
    let mut config = cluster.config().await.unwrap();
    let host = config.cluster_url.host().unwrap().to_string();
    let port = config.cluster_url.port_u16().unwrap();
    let upstream = tokio::net::lookup_host((host.as_str(), port))
        .await
        .unwrap()
        .next()
        .unwrap();
    let silent = Arc::new(AtomicBool::new(false));
    let addr = proxy(upstream, silent.clone()).await;
    config.cluster_url = format!("https://{addr}").parse().unwrap();
    // The certificate names the API server's address, not the proxy's port;
    // the host is the same (127.0.0.1), so verification still holds.
    (config, silent, direct)
}

/// Runs `f`, asserting it fails within the deadline plus slack.
async fn fails_in_time<T: std::fmt::Debug, E: std::fmt::Display>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> String {
    let started = Instant::now();
    let limit = DEADLINES.request + DEADLINES.connect + SLACK;
    let r = tokio::time::timeout(limit * 3, f).await;
    let took = started.elapsed();
    let err = match r {
        Err(_) => panic!("{what} hung: still waiting after {took:?}"),
        Ok(Ok(v)) => panic!("{what} succeeded through a silent proxy: {v:?}"),
        Ok(Err(e)) => e.to_string(),
    };
    assert!(took <= limit, "{what} failed only after {took:?}: {err}");
    err
}

#[tokio::test]
async fn a_silent_api_server_fails_reconcile_requests_within_the_deadline() {
    let (config, silent, direct) = proxied().await;
    let ns = localkube::create_test_namespace(&direct, "deadline")
        .await
        .unwrap();
    let metrics = Arc::new(Metrics::default());
    let unlimited = RateLimit::UNLIMITED;
    let c = client::build_split(config, unlimited, unlimited, DEADLINES, metrics).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c, &ns);
    let apply = |v: &str| {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "probe"}, "data": {"v": v}});
        let cms = cms.clone();
        async move {
            cms.patch(
                "probe",
                &PatchParams::apply("dgl-operator").force(),
                &Patch::Apply(&cm),
            )
            .await
        }
    };
    // Through the proxy while it forwards: the connection is open and pooled.
    apply("1").await.expect("the proxy forwards at first");
    silent.store(true, Ordering::SeqCst);
    // The reconciles' writes (server-side apply), reads and watches' opening.
    let err = fails_in_time("a server-side apply", apply("2")).await;
    assert!(err.contains("within"), "{err}");
    fails_in_time("a get", cms.get("probe")).await;
    fails_in_time("a list", cms.list(&Default::default())).await;
}

#[tokio::test]
async fn a_silent_api_server_fails_lease_renewal_and_metrics_auth_within_the_deadline() {
    let (config, silent, direct) = proxied().await;
    let ns = localkube::create_test_namespace(&direct, "deadline-side")
        .await
        .unwrap();
    let metrics = Arc::new(Metrics::default());
    let config = client::for_requests_only(config, DEADLINES);
    let side = client::build(config, RateLimit::UNLIMITED, DEADLINES, metrics).unwrap();
    let elector = LeaderElector::new(
        side.clone(),
        LeaderConfig {
            namespace: ns.clone(),
            name: "dgl-operator-leader".into(),
            identity: "a".into(),
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            renew: Duration::from_secs(3),
        },
    );
    assert!(
        elector.try_acquire().await.unwrap(),
        "leads while forwarding"
    );
    silent.store(true, Ordering::SeqCst);
    fails_in_time("a lease renewal", elector.try_acquire()).await;
    let auth = MetricsAuth::new(side, RateLimit::UNLIMITED, Duration::from_secs(10));
    fails_in_time("a /metrics token review", auth.check("any-token")).await;
}

/// The status code of GET `path` on the operator's HTTP server.
async fn status_of(addr: std::net::SocketAddr, path: &str) -> u16 {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn readyz_is_false_while_the_caches_cannot_sync_and_true_after() {
    let (config, silent, direct) = proxied().await;
    localkube::apply_crds(&direct, &dgl_api::crd_yaml())
        .await
        .unwrap();
    let ns = localkube::create_test_namespace(&direct, "readyz")
        .await
        .unwrap();
    silent.store(true, Ordering::SeqCst);
    let metrics = Arc::new(Metrics::default());
    let unlimited = RateLimit::UNLIMITED;
    let c = client::build_split(config, unlimited, unlimited, DEADLINES, metrics.clone()).unwrap();
    let synced = Arc::new(AtomicBool::new(false));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = ServerState {
        metrics: metrics.clone(),
        ready: synced.clone(),
        auth: None,
    };
    tokio::spawn(serve_on(listener, state));
    let settings = Settings {
        concurrency: 1,
        namespace: Some(ns),
        build: Default::default(),
        instance: "readyz".into(),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(controller::run_reporting(
        c,
        settings,
        metrics,
        synced,
        async move {
            let _ = stop_rx.await;
        },
    ));
    // Several list attempts fail (2 s each) while the proxy is silent.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            status_of(addr, "/readyz").await,
            503,
            "ready without caches"
        );
    }
    assert_eq!(status_of(addr, "/healthz").await, 200, "alive all the same");
    silent.store(false, Ordering::SeqCst);
    let started = Instant::now();
    while status_of(addr, "/readyz").await != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "/readyz still not ready 90 s after the API server answered again"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let _ = stop_tx.send(());
    let _ = operator.await;
}
