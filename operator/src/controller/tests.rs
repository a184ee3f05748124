//! The mocked-API tier: one reconcile against a mock service (tower-test),
//! asserting the exact requests it sends, so a change of request shape shows
//! without a cluster. What the API server does with them is tested against a
//! real one in operator/tests.

use std::sync::Arc;

use http::{Request, Response};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use serde_json::{json, Value};
use tower_test::mock;

use super::*;
use crate::observe::ObservedPod;

type Handle = mock::Handle<Request<Body>, Response<Body>>;

/// How the mock API server answers one request: status code and body.
type Answer = fn(&http::Method, &str, &Value) -> (u16, Value);

fn context(client: Client) -> Context {
    Context {
        client,
        pods: Arc::default(),
        children: Arc::default(),
        ready: Readiness::new(0),
        settings: Settings {
            concurrency: 1,
            namespace: None,
            build: BuildConfig::default(),
            instance: "test".into(),
        },
        metrics: Arc::default(),
        failures: Mutex::default(),
        written: Arc::default(),
    }
}

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn job(status: Option<Value>) -> DGLJob {
    let mut job: DGLJob =
        serde_yaml::from_str(include_str!("../../../examples/seed-dgljob.yaml")).unwrap();
    job.metadata.namespace = Some("ns".into());
    job.metadata.uid = Some("uid-1".into());
    job.metadata.generation = Some(1);
    job.status = status.map(|s| serde_json::from_value(s).unwrap());
    job
}

// t(0) is 2027-01-15T08:00:00Z.

/// Echoes what was written, as the API server would return it; a status
/// write returns the job with that status.
fn echo(method: &http::Method, uri: &str, body: &Value) -> (u16, Value) {
    if uri.contains("/dgljobs/") && uri.contains("/status") {
        let mut j = serde_json::to_value(job(None)).unwrap();
        j["status"] = body["status"].clone();
        return (200, j);
    }
    if method == http::Method::DELETE {
        return (
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        );
    }
    (200, body.clone())
}

/// The ConfigMap's apply is refused; everything else is echoed.
fn refuse_config_map(method: &http::Method, uri: &str, body: &Value) -> (u16, Value) {
    if uri.contains("/configmaps/") {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "configmaps is forbidden", "reason": "Forbidden", "code": 403});
        return (403, status);
    }
    echo(method, uri, body)
}

/// Serves requests until the client is gone; returns them sorted as
/// `METHOD path?query` (a reconcile sends independent requests concurrently,
/// so their order is not part of the contract).
async fn serve(mut handle: Handle, answer: Answer) -> Vec<String> {
    let mut seen = Vec::new();
    while let Some((req, send)) = handle.next_request().await {
        let method = req.method().clone();
        let uri = req.uri().to_string();
        let bytes = req.into_body().collect_bytes().await.unwrap();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let (code, reply) = answer(&method, &uri, &body);
        seen.push(format!("{method} {uri}"));
        let response = Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&reply).unwrap()))
            .unwrap();
        send.send_response(response);
    }
    seen.sort();
    seen
}

/// One reconcile of `job` with `pods` known to the cache, against the mock.
async fn reconcile_once(
    job: DGLJob,
    pods: Vec<ObservedPod>,
    answer: Answer,
) -> (Result<Action, Error>, Vec<String>) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(serve(handle, answer));
    let ctx = context(Client::new(service, "default"));
    let key = JobKey::new("ns", &job.name_any());
    for p in pods {
        ctx.pods.expect_created(&key, p);
    }
    let result = reconcile_job(&DeserializeGuard(Ok(job)), &ctx, t(0)).await;
    drop(ctx);
    (result, server.await.unwrap())
}

const JOBS: &str = "/apis/dgloperator.io/v1alpha1/namespaces/ns/dgljobs";
const APPLY: &str = "?&force=true&fieldManager=dgl-operator";

#[tokio::test]
async fn a_new_job_gets_its_children_status_partitioner_and_events() {
    let (result, requests) = reconcile_once(job(None), Vec::new(), echo).await;
    assert!(result.is_ok(), "{result:?}");
    let expected = [
        format!("PATCH /api/v1/namespaces/ns/configmaps/dgl-graphsage-config{APPLY}"),
        format!("PATCH /api/v1/namespaces/ns/pods/dgl-graphsage-partitioner{APPLY}"),
        format!("PATCH /api/v1/namespaces/ns/serviceaccounts/dgl-graphsage-launcher{APPLY}"),
        format!("PATCH /api/v1/namespaces/ns/services/dgl-graphsage-worker{APPLY}"),
        format!("PATCH {JOBS}/dgl-graphsage/status{APPLY}"),
        format!("PATCH /apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings/dgl-graphsage-launcher{APPLY}"),
        format!("PATCH /apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/dgl-graphsage-launcher{APPLY}"),
        "POST /api/v1/namespaces/ns/secrets?&fieldManager=dgl-operator".to_string(),
        "POST /apis/events.k8s.io/v1/namespaces/ns/events?".to_string(),
        "POST /apis/events.k8s.io/v1/namespaces/ns/events?".to_string(),
    ];
    let mut expected = expected.to_vec();
    expected.sort();
    assert_eq!(requests, expected);
}

#[tokio::test]
async fn a_finished_job_past_its_ttl_is_deleted_and_nothing_else_written() {
    let mut j = job(Some(json!({
        "phase": "Succeeded",
        "completionTime": "2027-01-15T07:00:00Z",
        "observedGeneration": 1,
        "conditions": [
            {"type": "Created", "status": "True", "reason": "JobCreated", "message": "m",
             "lastTransitionTime": "2027-01-15T07:00:00Z", "observedGeneration": 1},
            {"type": "Succeeded", "status": "True", "reason": "JobSucceeded", "message": "m",
             "lastTransitionTime": "2027-01-15T07:00:00Z", "observedGeneration": 1}
        ]
    })));
    j.spec.run_policy = Some(dgl_api::RunPolicy {
        ttl_seconds_after_finished: Some(30),
        ..Default::default()
    });
    let (result, requests) = reconcile_once(j, Vec::new(), echo).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(requests, vec![format!("DELETE {JOBS}/dgl-graphsage?")]);
}

#[tokio::test]
async fn a_failed_apply_fails_the_reconcile_after_the_other_writes_but_before_pods() {
    let (result, requests) = reconcile_once(job(None), Vec::new(), refuse_config_map).await;
    match result {
        Err(Error::Kube { action, kind, .. }) => {
            assert_eq!((action, kind.as_ref()), ("apply", "ConfigMap"))
        }
        other => panic!("expected the ConfigMap's error, got {other:?}"),
    }
    assert!(
        !requests
            .iter()
            .any(|r| r.contains("/pods/") || r.contains("/events")),
        "no pod step and no Event after a failed apply: {requests:?}"
    );
    for written in [
        "/secrets",
        "/serviceaccounts/",
        "/roles/",
        "/rolebindings/",
        "/services/",
        "/status",
    ] {
        assert!(
            requests.iter().any(|r| r.contains(written)),
            "{written} is still written: {requests:?}"
        );
    }
}
