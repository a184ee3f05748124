//! /metrics needs a bearer token the API server authenticates and authorizes
//! for `get /metrics`; /healthz and /readyz answer the kubelet without one.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use dgl_operator::client::RateLimit;
use dgl_operator::metrics::Metrics;
use dgl_operator::server::{serve_on, MetricsAuth, ServerState, Verdict};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out[9..12].parse().unwrap();
    (code, out)
}

async fn token_for(client: &kube::Client, ns: &str, sa: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let obj: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": sa}})).unwrap();
    sas.create(&PostParams::default(), &obj).await.unwrap();
    let tr = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            ..Default::default()
        },
        ..Default::default()
    };
    sas.create_token_request(sa, &PostParams::default(), &tr)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
}

#[tokio::test]
async fn metrics_require_an_authorized_token() {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let client = cluster.client().await.unwrap();
    let ns = localkube::create_test_namespace(&client, "metrics")
        .await
        .unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = ServerState {
        metrics: Arc::new(Metrics::default()),
        ready: Arc::new(AtomicBool::new(true)),
        auth: Some(Arc::new(MetricsAuth::new(
            client.clone(),
            RateLimit {
                qps: 50.0,
                burst: 50,
            },
            std::time::Duration::from_secs(10),
        ))),
    };
    // Bound already: connections queue until the server accepts them.
    tokio::spawn(serve_on(listener, state));

    assert_eq!(get(addr, "/healthz", None).await.0, 200);
    assert_eq!(get(addr, "/readyz", None).await.0, 200);
    assert_eq!(get(addr, "/metrics", None).await.0, 401);
    assert_eq!(get(addr, "/metrics", Some("not-a-token")).await.0, 403);

    let nobody = token_for(&client, &ns, "nobody").await;
    assert_eq!(get(addr, "/metrics", Some(&nobody)).await.0, 403);

    let scraper = token_for(&client, &ns, "scraper").await;
    let role_name = format!("{ns}-metrics-reader");
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": role_name},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    }))
    .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": role_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": ns}]
    }))
    .unwrap();
    let pp = PatchParams::apply("metrics-test").force();
    Api::<ClusterRole>::all(client.clone())
        .patch(&role_name, &pp, &Patch::Apply(&role))
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&role_name, &pp, &Patch::Apply(&binding))
        .await
        .unwrap();
    // The API server's RBAC authorizer sees a new binding a moment later
    // (through its informers). Asking the server before then would cache a
    // denial for the TTL, so wait until the API server itself allows it.
    allowed_soon(&client, &format!("system:serviceaccount:{ns}:scraper")).await;
    let (code, body) = get(addr, "/metrics", Some(&scraper)).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("dgl_operator_is_leader"), "{body}");
}

/// Waits (up to 30 s) until a SubjectAccessReview allows `user` to get
/// /metrics.
async fn allowed_soon(client: &kube::Client, user: &str) {
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {"user": user, "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    }))
    .unwrap();
    let start = std::time::Instant::now();
    loop {
        let got = reviews
            .create(&PostParams::default(), &review)
            .await
            .unwrap();
        if got.status.is_some_and(|s| s.allowed) {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "RBAC never allowed {user} get /metrics"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Verdicts are cached (a repeated token costs no review), and past the
/// review budget an uncached token gets OverBudget (429), not a queue.
#[tokio::test]
async fn token_checks_are_cached_and_over_budget_is_refused_at_once() {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let client = cluster.client().await.unwrap();
    let ns = localkube::create_test_namespace(&client, "metrics-budget")
        .await
        .unwrap();
    let auth = MetricsAuth::new(
        client.clone(),
        RateLimit {
            qps: 0.01,
            burst: 1,
        },
        std::time::Duration::from_secs(60),
    );
    let nobody = token_for(&client, &ns, "nobody").await;
    assert_eq!(auth.check(&nobody).await.unwrap(), Verdict::Denied);
    // The budget (one review) is spent; the cached verdict still answers.
    for _ in 0..5 {
        assert_eq!(auth.check(&nobody).await.unwrap(), Verdict::Denied);
    }
    let start = std::time::Instant::now();
    assert_eq!(
        auth.check("another-token").await.unwrap(),
        Verdict::OverBudget
    );
    assert!(
        start.elapsed() < std::time::Duration::from_secs(1),
        "refused at once, not queued"
    );
}
