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
use crate::pure::observe::{ObservedPod, PodState};

type Handle = mock::Handle<Request<Body>, Response<Body>>;

/// How the mock API server answers one request: status code and body.
trait Answer: Fn(&http::Method, &str, &Value) -> (u16, Value) + Send + 'static {}
impl<F: Fn(&http::Method, &str, &Value) -> (u16, Value) + Send + 'static> Answer for F {}

fn context(client: Client) -> Context {
    Context {
        client,
        pods: Arc::default(),
        children: Arc::default(),
        ready: Readiness::new(0),
        nodes: None,
        settings: Settings {
            concurrency: 1,
            namespace: None,
            build: BuildConfig::default(),
            instance: "test".into(),
        },
        metrics: Arc::default(),
        failures: Mutex::default(),
        written: Arc::default(),
        kueue: None,
        secrets: Default::default(),
        progress_writes: Default::default(),
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

fn failure(code: u16, reason: &str, message: &str) -> (u16, Value) {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": message, "reason": reason, "code": code});
    (code, status)
}

/// The ServiceAccount's create is refused; everything else is echoed.
fn refuse_service_account(method: &http::Method, uri: &str, body: &Value) -> (u16, Value) {
    if uri.contains("/serviceaccounts") {
        return failure(403, "Forbidden", "serviceaccounts is forbidden");
    }
    echo(method, uri, body)
}

/// Serves requests until the client is gone; returns them sorted as
/// `METHOD path?query` (a reconcile sends independent requests concurrently,
/// so their order is not part of the contract).
async fn serve(mut handle: Handle, answer: impl Answer) -> Vec<String> {
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
    answer: impl Answer,
) -> (Result<Action, Error>, Vec<String>) {
    let (service, _) = mock::pair::<Request<Body>, Response<Body>>();
    let mut ctx = context(Client::new(service, "default"));
    let key = JobKey::new("ns", &job.name_any());
    for p in pods {
        ctx.pods.expect_created(&key, p);
    }
    reconcile_with(&mut ctx, &job, answer).await
}

/// One reconcile of `job` with `ctx` (its caches and expectations kept from
/// earlier reconciles), against a fresh mock answering with `answer`.
async fn reconcile_with(
    ctx: &mut Context,
    job: &DGLJob,
    answer: impl Answer,
) -> (Result<Action, Error>, Vec<String>) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(serve(handle, answer));
    ctx.client = Client::new(service, "default");
    let result = reconcile_job(&DeserializeGuard(Ok(job.clone())), ctx, t(0)).await;
    // The mock serves until every client clone is gone.
    let (idle, _) = mock::pair::<Request<Body>, Response<Body>>();
    ctx.client = Client::new(idle, "default");
    (result, server.await.unwrap())
}

const JOBS: &str = "/apis/dgloperator.io/v1alpha1/namespaces/ns/dgljobs";
const APPLY: &str = "?&force=true&fieldManager=dgl-operator";
const CREATE: &str = "?&fieldManager=dgl-operator";

#[tokio::test]
async fn a_new_job_gets_its_children_status_every_pod_and_events() {
    let (result, requests) = reconcile_once(job(None), Vec::new(), echo).await;
    assert!(result.is_ok(), "{result:?}");
    // No ConfigMap yet: it is created when the first run is launched.
    let expected = [
        // The partitioner, both workers and the launcher.
        format!("POST /api/v1/namespaces/ns/pods{CREATE}"),
        format!("POST /api/v1/namespaces/ns/pods{CREATE}"),
        format!("POST /api/v1/namespaces/ns/pods{CREATE}"),
        format!("POST /api/v1/namespaces/ns/pods{CREATE}"),
        format!("POST /api/v1/namespaces/ns/secrets{CREATE}"),
        format!("POST /api/v1/namespaces/ns/serviceaccounts{CREATE}"),
        format!("PATCH {JOBS}/dgl-graphsage/status{APPLY}"),
        format!("POST /apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings{CREATE}"),
        format!("POST /apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles{CREATE}"),
        // One Event: Created, telling that partitioning started with it.
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
    let (result, requests) = reconcile_once(job(None), Vec::new(), refuse_service_account).await;
    match result {
        Err(Error::Kube { action, kind, .. }) => {
            assert_eq!((action, kind.as_ref()), ("create", "ServiceAccount"))
        }
        other => panic!("expected the ServiceAccount's error, got {other:?}"),
    }
    assert!(
        !requests
            .iter()
            .any(|r| r.contains("/pods/") || r.contains("/events")),
        "no pod step and no Event after a failed apply: {requests:?}"
    );
    for written in ["/secrets", "/roles", "/rolebindings", "/status"] {
        assert!(
            requests.iter().any(|r| r.contains(written)),
            "{written} is still written: {requests:?}"
        );
    }
}

/// The Secret's create fails once (503); nothing that mounts it is created,
/// and the next reconcile creates it again although the ConfigMap (with
/// which it used to be created, once) exists by then.
#[tokio::test]
async fn a_secret_whose_create_failed_is_created_again_before_any_pod() {
    let (service, _) = mock::pair::<Request<Body>, Response<Body>>();
    let mut ctx = context(Client::new(service, "default"));
    let j = job(None);
    let unavailable = |method: &http::Method, uri: &str, body: &Value| {
        if uri.contains("/secrets") {
            return failure(503, "ServiceUnavailable", "etcd is busy");
        }
        echo(method, uri, body)
    };
    let (result, requests) = reconcile_with(&mut ctx, &j, unavailable).await;
    assert!(
        matches!(&result, Err(Error::Kube { kind, .. }) if kind == "Secret"),
        "{result:?}"
    );
    assert!(
        !requests.iter().any(|r| r.contains("/pods")),
        "no pod before its Secret exists: {requests:?}"
    );
    assert!(requests.iter().any(|r| r.contains("/serviceaccounts")));

    let (result, requests) = reconcile_with(&mut ctx, &j, echo).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(
        requests.contains(&format!("POST /api/v1/namespaces/ns/secrets{CREATE}")),
        "the missing Secret is created again: {requests:?}"
    );
    assert!(requests.contains(&format!("POST /api/v1/namespaces/ns/pods{CREATE}")));

    // Once created (and recorded), a third reconcile does not create it again.
    let (_, requests) = reconcile_with(&mut ctx, &j, echo).await;
    assert!(
        !requests.iter().any(|r| r.contains("/secrets")),
        "{requests:?}"
    );
}

/// An answer that records the body of every ConfigMap write and replies as
/// the API server would, with the written (merged) object: no nulls.
fn recording_config_maps() -> (Arc<Mutex<Vec<Value>>>, impl Answer) {
    let bodies = Arc::new(Mutex::new(Vec::<Value>::new()));
    let seen = bodies.clone();
    let answer = move |method: &http::Method, uri: &str, body: &Value| {
        if !uri.contains("/configmaps") {
            return echo(method, uri, body);
        }
        seen.lock().unwrap().push(body.clone());
        let mut merged = body.clone();
        for part in ["data", "metadata"] {
            if let Some(m) = merged[part].as_object_mut() {
                m.retain(|_, v| !v.is_null());
            }
        }
        if let Some(l) = merged["metadata"]["labels"].as_object_mut() {
            l.retain(|_, v| !v.is_null());
        }
        (200, merged)
    };
    (bodies, answer)
}

/// The ConfigMap requests among `requests`.
fn config_map_writes(requests: &[String]) -> Vec<&String> {
    requests
        .iter()
        .filter(|r| r.contains("/configmaps"))
        .collect()
}

/// Every pod of the seed job as the cache shows them once the partitions are
/// made and the workers are Ready with IPs; the launcher still in its
/// watcher-loop.
fn ready_to_launch() -> Vec<ObservedPod> {
    use dgl_api::names::{launcher_name, partitioner_name, worker_name};
    use dgl_api::ReplicaType;
    let pod = |role, index, name: String, state| ObservedPod {
        name,
        role,
        index,
        epoch: 0,
        state,
        ip: Some(format!("10.0.0.{}", 10 + index)),
        progress: None,
        facts: Default::default(),
        not_starting: None,
        cache_lookup: None,
    };
    let ready = || PodState::Running { ready: true };
    let job = "dgl-graphsage";
    vec![
        pod(ReplicaType::Partitioner, 0, partitioner_name(job), ready()),
        pod(ReplicaType::Worker, 0, worker_name(job, 0), ready()),
        pod(ReplicaType::Worker, 1, worker_name(job, 1), ready()),
        pod(
            ReplicaType::Launcher,
            0,
            launcher_name(job),
            PodState::Pending,
        ),
    ]
}

/// The launch creates the ConfigMap, in one write, complete: every worker's
/// IP, DGL's ip_config and the run, in the data and in the label.
#[tokio::test]
async fn the_launch_creates_the_config_map_in_one_write_with_every_ip() {
    let (bodies, answer) = recording_config_maps();
    let (result, requests) = reconcile_once(job(None), ready_to_launch(), answer).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        config_map_writes(&requests),
        [&format!("POST /api/v1/namespaces/ns/configmaps{CREATE}")],
        "{requests:?}"
    );
    let cm = &bodies.lock().unwrap()[0];
    assert_eq!(cm["metadata"]["name"], "dgl-graphsage-config");
    assert_eq!(cm["data"]["run"], "0");
    assert_eq!(cm["metadata"]["labels"]["dgloperator.io/run"], "0");
    assert_eq!(
        cm["data"]["ip_config"],
        "10.0.0.10 30050\n10.0.0.11 30050\n"
    );
    assert!(
        !requests.iter().any(|r| r.contains("/pods")),
        "every pod exists: {requests:?}"
    );
}

/// A job suspended after its run was launched takes the launch back: the
/// ConfigMap (created by POST at the launch) is rewritten by a merge patch
/// that deletes the run, its label and the IPs, so that the resumed run
/// (the same number) waits for a launch of its own.
#[tokio::test]
async fn a_suspension_takes_the_launch_back_deleting_the_keys() {
    let (service, _) = mock::pair::<Request<Body>, Response<Body>>();
    let mut ctx = context(Client::new(service, "default"));
    ctx.children.record(
        "ConfigMap",
        "ns",
        "dgl-graphsage-config",
        crate::cache::SeenChild {
            hash: Some("launched".into()),
            controller: Some(crate::cache::Controller {
                kind: "DGLJob".into(),
                name: "dgl-graphsage".into(),
                uid: "uid-1".into(),
            }),
            run: Some(0),
        },
    );
    let mut j = job(None);
    j.spec.run_policy = Some(dgl_api::RunPolicy {
        suspend: Some(true),
        ..Default::default()
    });
    let (bodies, answer) = recording_config_maps();
    let (result, requests) = reconcile_with(&mut ctx, &j, answer).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        config_map_writes(&requests),
        [&"PATCH /api/v1/namespaces/ns/configmaps/dgl-graphsage-config?&fieldManager=dgl-operator".to_string()],
        "{requests:?}"
    );
    let patch = &bodies.lock().unwrap()[0];
    assert_eq!(patch["data"]["run"], Value::Null);
    assert_eq!(patch["data"]["ip_config"], Value::Null);
    assert!(
        patch["data"].as_object().unwrap().contains_key("run"),
        "{patch}"
    );
    assert!(patch["data"]["hostfile"].is_string(), "{patch}");
    let labels = patch["metadata"]["labels"].as_object().unwrap();
    assert_eq!(labels["dgloperator.io/run"], Value::Null);
    assert_eq!(labels["dgloperator.io/job-name"], "dgl-graphsage");
}

/// A ConfigMap of the job's name that is not the job's fails the job when
/// it starts, not only at the launch that would write it.
#[tokio::test]
async fn a_foreign_config_map_fails_the_job_before_any_pod() {
    let (service, _) = mock::pair::<Request<Body>, Response<Body>>();
    let mut ctx = context(Client::new(service, "default"));
    let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some("dgl-graphsage-config".into()),
        ..Default::default()
    };
    ctx.children.record(
        "ConfigMap",
        "ns",
        "dgl-graphsage-config",
        crate::cache::SeenChild::of(&meta),
    );
    let (result, requests) = reconcile_with(&mut ctx, &job(None), echo).await;
    assert!(
        result.is_ok(),
        "the job fails, the reconcile does not: {result:?}"
    );
    assert!(
        !requests
            .iter()
            .any(|r| r.contains("/pods") || r.contains("/configmaps")),
        "no pod, and the ConfigMap is neither read nor written: {requests:?}"
    );
    let failed = requests
        .iter()
        .filter(|r| r.contains("/dgljobs/dgl-graphsage/status"))
        .count();
    assert_eq!(failed, 2, "the plan's status, then Failed: {requests:?}");
}

/// A Secret of the job's name exists (AlreadyExists on its create): the
/// operator may not read Secrets (least privilege, docs/reliability.md), so
/// it is taken as the job's own: neither read nor rewritten, and the job
/// goes on (its pods mount it).
#[tokio::test]
async fn an_existing_secret_of_the_jobs_name_is_neither_read_nor_rewritten() {
    let existing = |method: &http::Method, uri: &str, body: &Value| {
        if uri.contains("/secrets") && *method == http::Method::POST {
            return failure(
                409,
                "AlreadyExists",
                "secrets \"dgl-graphsage-token\" already exists",
            );
        }
        echo(method, uri, body)
    };
    let (result, requests) = reconcile_once(job(None), Vec::new(), existing).await;
    assert!(result.is_ok(), "{result:?}");
    let secrets: Vec<&String> = requests.iter().filter(|r| r.contains("/secrets")).collect();
    assert_eq!(
        secrets,
        vec![&format!("POST /api/v1/namespaces/ns/secrets{CREATE}")],
        "only its create: {requests:?}"
    );
    assert!(requests.contains(&format!("POST /api/v1/namespaces/ns/pods{CREATE}")));
}

mod stale;
