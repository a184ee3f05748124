//! watcher-loop against the real API server (localkube: etcd +
//! kube-apiserver + kube-controller-manager, no kubelet). The tests play the
//! kubelet: they create pods and patch their status subresource.
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use watcher_loop::{Error, Mode, Options, Outcome, Targets};

/// Generous: only a broken watcher gets near it.
const LONG: Option<Duration> = Some(Duration::from_secs(120));

struct Env {
    cluster: localkube::ClusterInfo,
    client: Client,
    ns: String,
    pods: Api<Pod>,
}

async fn setup(prefix: &str) -> Env {
    let cluster = localkube::ensure_cluster().await.expect("test cluster");
    let client = cluster.client().await.expect("client");
    let ns = localkube::create_test_namespace(&client, prefix)
        .await
        .expect("namespace");
    let pods = Api::namespaced(client.clone(), &ns);
    Env {
        cluster,
        client,
        ns,
        pods,
    }
}

async fn teardown(env: Env) {
    localkube::delete_namespace(&env.client, &env.ns)
        .await
        .expect("delete namespace");
}

fn pod_spec(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "labels": labels },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "containers": [{ "name": "main", "image": "registry.invalid/dgl:test" }]
        }
    }))
    .expect("valid pod")
}

async fn create_pod(pods: &Api<Pod>, name: &str) -> Pod {
    create_labelled_pod(pods, name, json!({})).await
}

async fn create_labelled_pod(pods: &Api<Pod>, name: &str, labels: Value) -> Pod {
    pods.create(&PostParams::default(), &pod_spec(name, labels))
        .await
        .unwrap_or_else(|e| panic!("create pod {name}: {e}"))
}

/// Plays the kubelet: merge-patches the pod's status subresource.
async fn set_status(pods: &Api<Pod>, name: &str, status: Value) {
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap_or_else(|e| panic!("patch status of {name}: {e}"));
}

fn container(state: Value, ready: bool) -> Value {
    json!({
        "name": "main",
        "image": "registry.invalid/dgl:test",
        "imageID": "",
        "ready": ready,
        "restartCount": 0,
        "state": state,
    })
}

fn running_ready() -> Value {
    json!({
        "phase": "Running",
        "conditions": [
            { "type": "Ready", "status": "True" },
            { "type": "ContainersReady", "status": "True" }
        ],
        "containerStatuses": [container(json!({ "running": {} }), true)],
    })
}

fn running_not_ready() -> Value {
    json!({
        "phase": "Running",
        "conditions": [{ "type": "Ready", "status": "False", "reason": "ContainersNotReady" }],
        "containerStatuses": [container(json!({ "running": {} }), false)],
    })
}

fn succeeded() -> Value {
    json!({
        "phase": "Succeeded",
        "conditions": [{ "type": "Ready", "status": "False", "reason": "PodCompleted" }],
        "containerStatuses": [container(json!({ "terminated": { "exitCode": 0, "reason": "Completed" } }), false)],
    })
}

fn failed(exit_code: i32) -> Value {
    json!({
        "phase": "Failed",
        "conditions": [{ "type": "Ready", "status": "False", "reason": "PodFailed" }],
        "containerStatuses": [container(json!({ "terminated": { "exitCode": exit_code, "reason": "Error" } }), false)],
    })
}

fn names(list: &[&str]) -> Targets {
    Targets::pods(list.iter().copied()).expect("valid names")
}

fn spawn_run(
    env: &Env,
    targets: Targets,
    mode: Mode,
    timeout: Option<Duration>,
) -> JoinHandle<Result<Outcome, Error>> {
    let client = env.client.clone();
    let ns = env.ns.clone();
    tokio::spawn(async move { watcher_loop::run(client, &ns, &targets, mode, timeout).await })
}

/// Asserts the run is still waiting a moment after the last change.
async fn assert_still_waiting(handle: &JoinHandle<Result<Outcome, Error>>, what: &str) {
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!handle.is_finished(), "watcher-loop returned early: {what}");
}

async fn join(handle: JoinHandle<Result<Outcome, Error>>) -> Result<Outcome, Error> {
    tokio::time::timeout(Duration::from_secs(150), handle)
        .await
        .expect("run returned before the test's own deadline")
        .expect("run did not panic")
}

#[tokio::test]
async fn ready_mode_returns_once_every_pod_is_ready() {
    let env = setup("wl-ready").await;
    create_pod(&env.pods, "j-worker-0").await;
    create_pod(&env.pods, "j-worker-1").await;
    let run = spawn_run(
        &env,
        names(&["j-worker-0", "j-worker-1"]),
        Mode::Ready,
        LONG,
    );
    assert_still_waiting(&run, "both pods Pending").await;

    set_status(&env.pods, "j-worker-0", running_ready()).await;
    set_status(&env.pods, "j-worker-1", running_not_ready()).await;
    assert_still_waiting(&run, "j-worker-1 is Running but not Ready").await;

    set_status(&env.pods, "j-worker-1", running_ready()).await;
    let outcome = join(run).await.expect("all pods ready");
    assert_eq!(outcome.mode, Mode::Ready);
    assert_eq!(outcome.pods, vec!["j-worker-0", "j-worker-1"]);
    teardown(env).await;
}

#[tokio::test]
async fn finished_mode_returns_once_every_pod_succeeded() {
    let env = setup("wl-finished").await;
    create_pod(&env.pods, "j-partitioner").await;
    create_pod(&env.pods, "j-other").await;
    let run = spawn_run(
        &env,
        names(&["j-partitioner", "j-other"]),
        Mode::Finished,
        LONG,
    );

    // Ready is not finished.
    set_status(&env.pods, "j-partitioner", running_ready()).await;
    assert_still_waiting(&run, "j-partitioner is only Running").await;
    set_status(&env.pods, "j-partitioner", succeeded()).await;
    assert_still_waiting(&run, "j-other still Pending").await;
    set_status(&env.pods, "j-other", succeeded()).await;

    let outcome = join(run).await.expect("all pods succeeded");
    assert_eq!(outcome.mode, Mode::Finished);
    assert_eq!(outcome.pods, vec!["j-other", "j-partitioner"]);
    teardown(env).await;
}

#[tokio::test]
async fn failed_pod_ends_the_wait_at_once_naming_it() {
    let env = setup("wl-failed").await;
    create_pod(&env.pods, "j-worker-0").await;
    create_pod(&env.pods, "j-worker-1").await;
    let run = spawn_run(
        &env,
        names(&["j-worker-0", "j-worker-1"]),
        Mode::Ready,
        LONG,
    );
    set_status(&env.pods, "j-worker-0", running_ready()).await;
    assert_still_waiting(&run, "j-worker-1 Pending").await;

    let failed_at = Instant::now();
    set_status(&env.pods, "j-worker-1", failed(3)).await;
    let err = join(run).await.expect_err("a failed pod is an error");
    assert!(
        failed_at.elapsed() < Duration::from_secs(10),
        "took {:?} to notice the failure",
        failed_at.elapsed()
    );
    assert!(
        matches!(&err, Error::PodFailed { pod, .. } if pod == "j-worker-1"),
        "{err}"
    );
    let message = err.to_string();
    assert!(message.contains("pod j-worker-1 failed"), "{message}");
    assert!(message.contains("exit code 3"), "{message}");
    assert_eq!(err.exit_code(), watcher_loop::EXIT_POD_FAILED);
    teardown(env).await;
}

#[tokio::test]
async fn container_exit_under_restart_policy_never_fails_ready_mode() {
    let env = setup("wl-exit").await;
    create_pod(&env.pods, "j-worker-0").await;
    let run = spawn_run(&env, names(&["j-worker-0"]), Mode::Ready, LONG);
    assert_still_waiting(&run, "Pending").await;
    // The kubelet reports the container's exit before the pod phase changes.
    set_status(
        &env.pods,
        "j-worker-0",
        json!({
            "phase": "Running",
            "conditions": [{ "type": "Ready", "status": "False" }],
            "containerStatuses": [container(json!({ "terminated": { "exitCode": 2, "reason": "Error" } }), false)],
        }),
    )
    .await;
    let err = join(run).await.expect_err("a dead container is an error");
    assert!(
        matches!(&err, Error::PodFailed { pod, .. } if pod == "j-worker-0"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("container main terminated with exit code 2"),
        "{err}"
    );
    teardown(env).await;
}

#[tokio::test]
async fn deleted_pod_ends_the_wait_naming_it() {
    let env = setup("wl-deleted").await;
    create_pod(&env.pods, "j-worker-0").await;
    create_pod(&env.pods, "j-worker-1").await;
    let run = spawn_run(
        &env,
        names(&["j-worker-0", "j-worker-1"]),
        Mode::Ready,
        LONG,
    );
    set_status(&env.pods, "j-worker-1", running_ready()).await;
    assert_still_waiting(&run, "j-worker-0 Pending").await;

    let deleted_at = Instant::now();
    env.pods
        .delete("j-worker-0", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    let err = join(run).await.expect_err("a deleted pod is an error");
    assert!(deleted_at.elapsed() < Duration::from_secs(10));
    assert!(
        matches!(&err, Error::PodDeleted { pod, .. } if pod == "j-worker-0"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("pod j-worker-0 was deleted"),
        "{err}"
    );
    teardown(env).await;
}

#[tokio::test]
async fn timeout_lists_the_pods_still_waited_for() {
    let env = setup("wl-timeout").await;
    create_pod(&env.pods, "j-worker-0").await;
    create_pod(&env.pods, "j-worker-1").await;
    set_status(&env.pods, "j-worker-0", running_ready()).await;
    set_status(&env.pods, "j-worker-1", running_not_ready()).await;

    let started = Instant::now();
    let targets = names(&["j-worker-0", "j-worker-1", "j-worker-2"]);
    let err = watcher_loop::run(
        env.client.clone(),
        &env.ns,
        &targets,
        Mode::Ready,
        Some(Duration::from_secs(3)),
    )
    .await
    .expect_err("j-worker-1 never becomes ready, j-worker-2 never exists");
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_secs(3), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(15), "{elapsed:?}");
    let Error::Timeout { waiting, mode, .. } = &err else {
        panic!("expected a timeout, got {err:?}")
    };
    assert_eq!(*mode, Mode::Ready);
    let waited: Vec<&str> = waiting.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(waited, vec!["j-worker-1", "j-worker-2"]);
    let message = err.to_string();
    assert!(message.contains("timed out after 3s"), "{message}");
    assert!(
        message.contains("j-worker-1 (phase Running, Ready=False (ContainersNotReady)"),
        "{message}"
    );
    assert!(message.contains("j-worker-2 (not found yet)"), "{message}");
    assert!(!message.contains("j-worker-0"), "{message}");
    assert_eq!(err.exit_code(), watcher_loop::EXIT_TIMEOUT);
    teardown(env).await;
}

#[tokio::test]
async fn pod_created_after_the_start_is_picked_up() {
    let env = setup("wl-late").await;
    let run = spawn_run(&env, names(&["j-launcher-late"]), Mode::Finished, LONG);
    assert_still_waiting(&run, "the pod does not exist yet").await;
    create_pod(&env.pods, "j-launcher-late").await;
    assert_still_waiting(&run, "the pod is Pending").await;
    set_status(&env.pods, "j-launcher-late", succeeded()).await;
    let outcome = join(run).await.expect("late pod finished");
    assert_eq!(outcome.pods, vec!["j-launcher-late"]);
    teardown(env).await;
}

#[tokio::test]
async fn selector_waits_for_every_matching_pod() {
    let env = setup("wl-selector").await;
    let labels = json!({ "dgloperator.io/job-name": "j", "dgloperator.io/replica-type": "worker" });
    create_labelled_pod(&env.pods, "j-worker-0", labels.clone()).await;
    // Not matched: its failure must not matter.
    create_labelled_pod(&env.pods, "unrelated", json!({ "app": "other" })).await;
    set_status(&env.pods, "unrelated", failed(1)).await;

    let targets = Targets::selector(
        "dgloperator.io/job-name=j,dgloperator.io/replica-type=worker",
        2,
    )
    .expect("selector");
    let run = spawn_run(&env, targets, Mode::Ready, LONG);
    set_status(&env.pods, "j-worker-0", running_ready()).await;
    assert_still_waiting(&run, "only one of the two pods exists").await;
    create_labelled_pod(&env.pods, "j-worker-1", labels).await;
    assert_still_waiting(&run, "j-worker-1 Pending").await;
    set_status(&env.pods, "j-worker-1", running_ready()).await;
    let outcome = join(run).await.expect("both selected pods ready");
    assert_eq!(outcome.pods, vec!["j-worker-0", "j-worker-1"]);

    // A malformed selector is refused by the API server at once.
    let bad = Targets::selector("a in (", 1).expect("non-empty");
    let err = watcher_loop::run(env.client.clone(), &env.ns, &bad, Mode::Ready, LONG)
        .await
        .expect_err("bad selector");
    assert!(matches!(err, Error::Watch { .. }), "{err:?}");
    assert!(err.to_string().contains("HTTP 400"), "{err}");
    teardown(env).await;
}

/// Runs the real binary as the launcher's init container would.
async fn run_binary(
    env: &Env,
    file: &std::path::Path,
    mode: &str,
    timeout: &str,
) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_watcher-loop"))
        .env("WATCHERFILE", file)
        .env("WATCHERMODE", mode)
        .env("KUBECONFIG", &env.cluster.kubeconfig)
        .env("NAMESPACE", &env.ns)
        .env_remove("DGL_OPERATOR_NAMESPACE")
        .env_remove("WATCHERTIMEOUT")
        .env_remove("RUST_LOG")
        .args(["--timeout", timeout])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn watcher-loop")
}

async fn finish(child: tokio::process::Child) -> (i32, String) {
    let out = tokio::time::timeout(Duration::from_secs(150), child.wait_with_output())
        .await
        .expect("binary exits before the test's deadline")
        .expect("wait for binary");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().expect("exited, not killed"), stderr)
}

#[tokio::test]
async fn binary_follows_the_seeds_env_interface_and_exit_codes() {
    let env = setup("wl-bin").await;
    let dir = std::env::temp_dir().join(localkube::unique_name("wl-bin"));
    std::fs::create_dir_all(&dir).unwrap();
    // The operator's hostfile format: `<ip> <port> <pod> slots=<n>`.
    let hostfile = dir.join("hostfile");
    std::fs::write(
        &hostfile,
        "10.0.0.1 30050 j-worker-0 slots=1\n- 30050 j-worker-1 slots=1\n",
    )
    .unwrap();
    create_pod(&env.pods, "j-worker-0").await;
    create_pod(&env.pods, "j-worker-1").await;

    // Success: exit 0.
    let child = run_binary(&env, &hostfile, "ready", "2m").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    set_status(&env.pods, "j-worker-0", running_ready()).await;
    set_status(&env.pods, "j-worker-1", running_ready()).await;
    let (code, stderr) = finish(child).await;
    assert_eq!(code, 0, "stderr:\n{stderr}");
    assert!(stderr.contains("every pod is ready"), "{stderr}");

    // A failing pod: exit 1, named on stderr.
    let partfile = dir.join("partfile");
    std::fs::write(&partfile, "- 30050 j-partitioner\n").unwrap();
    create_pod(&env.pods, "j-partitioner").await;
    let child = run_binary(&env, &partfile, "finished", "2m").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    set_status(&env.pods, "j-partitioner", failed(7)).await;
    let (code, stderr) = finish(child).await;
    assert_eq!(code, 1, "stderr:\n{stderr}");
    assert!(stderr.contains("pod j-partitioner failed"), "{stderr}");

    // Timeout: exit 3, the missing pod named.
    let missing = dir.join("missing");
    std::fs::write(&missing, "j-never\n").unwrap();
    let (code, stderr) = finish(run_binary(&env, &missing, "ready", "2s").await).await;
    assert_eq!(code, 3, "stderr:\n{stderr}");
    assert!(stderr.contains("j-never (not found yet)"), "{stderr}");

    // A malformed file: exit 2, the file named.
    let bad = dir.join("bad");
    std::fs::write(&bad, "10.0.0.1 j-worker-0\n").unwrap();
    let (code, stderr) = finish(run_binary(&env, &bad, "ready", "2s").await).await;
    assert_eq!(code, 2, "stderr:\n{stderr}");
    assert!(
        stderr.contains(&format!("{}: line 1", bad.display())),
        "{stderr}"
    );

    std::fs::remove_dir_all(&dir).unwrap();
    teardown(env).await;
}

#[tokio::test]
async fn service_account_with_resource_names_role_is_enough() {
    let env = setup("wl-rbac").await;
    let allowed = ["j-worker-0", "j-worker-1"];
    for name in allowed.iter().chain(&["j-secret"]) {
        create_pod(&env.pods, name).await;
    }
    let sa_name = "j-launcher";
    let sa: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": sa_name } })).unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), &env.ns);
    sas.create(&PostParams::default(), &sa)
        .await
        .expect("create SA");
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": sa_name },
        "rules": [{
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get", "list", "watch"],
            "resourceNames": allowed,
        }]
    }))
    .unwrap();
    Api::<Role>::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("create Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": sa_name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa_name },
        "subjects": [{ "kind": "ServiceAccount", "name": sa_name, "namespace": env.ns }]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("create RoleBinding");

    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = sas
        .create_token_request(sa_name, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("token status")
        .token;
    let mut config = env.cluster.config().await.expect("admin config");
    config.auth_info = serde_json::from_value(json!({ "token": token })).unwrap();
    let sa_client = Client::try_from(config).expect("SA client");
    let sa_pods: Api<Pod> = Api::namespaced(sa_client.clone(), &env.ns);

    // The Role really is narrow: no plain list, no other pod.
    let deadline = Instant::now() + Duration::from_secs(30);
    let by_name = ListParams::default().fields("metadata.name=j-worker-0");
    while let Err(e) = sa_pods.list(&by_name).await {
        assert!(Instant::now() < deadline, "RBAC never allowed the SA: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match sa_pods.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("an unrestricted list must be forbidden: {other:?}"),
    }

    // The watcher with only that token.
    let targets = names(&allowed);
    let ns = env.ns.clone();
    let client = sa_client.clone();
    let run =
        tokio::spawn(
            async move { watcher_loop::run(client, &ns, &targets, Mode::Ready, LONG).await },
        );
    assert_still_waiting(&run, "pods Pending").await;
    for name in allowed {
        set_status(&env.pods, name, running_ready()).await;
    }
    let outcome = join(run).await.expect("the narrow Role is enough");
    assert_eq!(outcome.pods, allowed.to_vec());

    // A pod outside resourceNames is refused (after the RBAC grace).
    let outside = names(&["j-secret"]);
    let options = Options {
        timeout: LONG,
        forbidden_grace: Duration::ZERO,
    };
    let err = watcher_loop::run_with(sa_client, &env.ns, &outside, Mode::Ready, options)
        .await
        .expect_err("j-secret is not in resourceNames");
    assert!(matches!(err, Error::Watch { .. }), "{err:?}");
    assert!(err.to_string().contains("pod j-secret"), "{err}");
    assert!(err.to_string().contains("HTTP 403"), "{err}");
    assert_eq!(err.exit_code(), watcher_loop::EXIT_API);
    teardown(env).await;
}
