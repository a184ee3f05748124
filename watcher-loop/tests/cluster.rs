//! watcher-loop against the real API server (localkube: etcd +
//! kube-apiserver + kube-controller-manager, no kubelet). The tests play the
//! kubelet: they create pods and patch their status subresource, and the
//! operator: they write the job's ConfigMap.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
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

/// A pod; one named `<job>-worker-<i>` is labelled as the operator labels
/// its workers (watcher-loop watches one job's workers by these labels).
async fn create_pod(pods: &Api<Pod>, name: &str) -> Pod {
    let labels = match name.rsplit_once("-worker-") {
        Some((job, _)) => json!({
            "dgloperator.io/job-name": job,
            "dgloperator.io/replica-type": "worker",
        }),
        None => json!({}),
    };
    create_labelled_pod(pods, name, labels).await
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
async fn assert_still_waiting<T>(handle: &JoinHandle<T>, what: &str) {
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!handle.is_finished(), "watcher-loop returned early: {what}");
}

async fn join<T>(handle: JoinHandle<T>) -> T {
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

    // SIGTERM (the pod deleted or its job suspended) while waiting: exit
    // 143 at once. Exit code 143 comes only from the handler; without one
    // the process would die by the signal (no code), and as a container's
    // PID 1 it would not die at all until the grace period's SIGKILL.
    let child = run_binary(&env, &missing, "ready", "2m").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let pid = nix::unistd::Pid::from_raw(child.id().expect("running") as i32);
    let sent = std::time::Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let (code, stderr) = finish(child).await;
    assert_eq!(code, 143, "stderr:\n{stderr}");
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "{:?}",
        sent.elapsed()
    );
    assert!(stderr.contains("SIGTERM: stopping the wait"), "{stderr}");

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
    let sa_client = service_account_client(
        &env,
        "j-launcher",
        json!([{
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get", "list", "watch"],
            "resourceNames": allowed,
        }]),
    )
    .await;
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
    assert!(!outcome.shared_watch, "named pods: one watch each");

    // A pod outside resourceNames is refused (after the RBAC grace).
    let outside = names(&["j-secret"]);
    let options = Options {
        timeout: LONG,
        forbidden_grace: Duration::ZERO,
        ..Options::default()
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

/// The launcher Role the operator builds (`launcher_rbac`: pods readable in
/// the namespace, not by name) lets watcher-loop wait on every worker with
/// one label-selected watch (issue #36 item 8).
#[tokio::test]
async fn the_operators_launcher_role_waits_with_one_watch() {
    let env = setup("wl-one-watch").await;
    let workers = ["j-worker-0", "j-worker-1", "j-worker-2"];
    for name in workers {
        create_pod(&env.pods, name).await;
    }
    let sa_client = service_account_client(
        &env,
        "j-launcher",
        json!([
            { "apiGroups": [""], "resources": ["configmaps"],
              "verbs": ["get", "list", "watch"], "resourceNames": [CONFIG] },
            { "apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"] },
            { "apiGroups": [""], "resources": ["pods"], "verbs": ["patch"],
              "resourceNames": ["j-launcher"] },
        ]),
    )
    .await;
    let sa_pods: Api<Pod> = Api::namespaced(sa_client.clone(), &env.ns);
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = sa_pods.list(&ListParams::default()).await {
        assert!(Instant::now() < deadline, "RBAC never allowed the SA: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let targets = names(&workers);
    let ns = env.ns.clone();
    let run = tokio::spawn(async move {
        watcher_loop::run(sa_client, &ns, &targets, Mode::Ready, LONG).await
    });
    assert_still_waiting(&run, "pods Pending").await;
    for name in workers {
        set_status(&env.pods, name, running_ready()).await;
    }
    let outcome = join(run).await.expect("the launcher Role is enough");
    assert_eq!(outcome.pods, workers.to_vec());
    assert!(outcome.shared_watch, "one watch for the job's workers");
    teardown(env).await;
}

/// A client authenticated as a new ServiceAccount `name` whose Role (bound
/// to it) holds `rules`, as the operator sets up the launcher's.
async fn service_account_client(env: &Env, name: &str, rules: Value) -> Client {
    let sa: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), &env.ns);
    sas.create(&PostParams::default(), &sa)
        .await
        .expect("create SA");
    let role: Role =
        serde_json::from_value(json!({ "metadata": { "name": name }, "rules": rules })).unwrap();
    Api::<Role>::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("create Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
        "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": env.ns }]
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
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("token status")
        .token;
    let mut config = env.cluster.config().await.expect("admin config");
    config.auth_info = serde_json::from_value(json!({ "token": token })).unwrap();
    Client::try_from(config).expect("SA client")
}

/// The job's ConfigMap, as the operator names it.
const CONFIG: &str = "j-config";

fn config_maps(env: &Env) -> Api<ConfigMap> {
    Api::namespaced(env.client.clone(), &env.ns)
}

/// Plays the operator: creates the ConfigMap `name` with `data`.
async fn create_config_map(env: &Env, name: &str, data: Value) {
    let cm: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": name }, "data": data })).unwrap();
    config_maps(env)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_or_else(|e| panic!("create ConfigMap {name}: {e}"));
}

/// Plays the operator: merge-patches the ConfigMap's data.
async fn patch_config_map(env: &Env, name: &str, data: Value) {
    config_maps(env)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": data })),
        )
        .await
        .unwrap_or_else(|e| panic!("patch ConfigMap {name}: {e}"));
}

type ConfigWait = JoinHandle<Result<BTreeMap<String, String>, Error>>;

fn spawn_config_wait(client: &Client, ns: &str, run: u32, options: Options) -> ConfigWait {
    let client = client.clone();
    let ns = ns.to_string();
    tokio::spawn(
        async move { watcher_loop::wait_config_map(client, &ns, CONFIG, run, options).await },
    )
}

fn long() -> Options {
    Options {
        timeout: LONG,
        ..Options::default()
    }
}

fn temp_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(localkube::unique_name(prefix));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read(dir: &Path, key: &str) -> String {
    std::fs::read_to_string(dir.join(key)).unwrap_or_else(|e| panic!("read {key}: {e}"))
}

#[tokio::test]
async fn config_map_wait_returns_once_the_run_is_written() {
    let env = setup("wl-cm").await;
    let started = Instant::now();
    let options = Options {
        timeout: Some(Duration::from_secs(6)),
        since: Some(started),
        ..Options::default()
    };
    let wait = spawn_config_wait(&env.client, &env.ns, 0, options);
    assert_still_waiting(&wait, "the ConfigMap does not exist yet").await;
    // An operator of an earlier release creates it early, before the
    // workers have IPs (this one creates it at the launch, below).
    create_config_map(
        &env,
        CONFIG,
        json!({ "hostfile": "- 30050 j-worker-0 slots=1\n" }),
    )
    .await;
    assert_still_waiting(&wait, "the ConfigMap holds no run").await;

    let hostfile = "10.0.0.1 30050 j-worker-0 slots=1\n";
    patch_config_map(
        &env,
        CONFIG,
        json!({ "run": "0", "hostfile": hostfile, "ip_config": "10.0.0.1 30050\n" }),
    )
    .await;
    let data = join(wait).await.expect("run 0 launched");
    assert_eq!(data["run"], "0");
    assert_eq!(data["hostfile"], hostfile);

    let dir = temp_dir("wl-cm");
    let written = watcher_loop::write_config(&dir, &data).expect("write the files");
    assert_eq!(written.len(), 3, "{written:?}");
    assert_eq!(read(&dir, "hostfile"), hostfile);
    assert_eq!(read(&dir, "ip_config"), "10.0.0.1 30050\n");
    assert_eq!(read(&dir, "run"), "0");

    // The pod wait after it shares the deadline: it times out 6s after
    // `started`, not 6s after its own start.
    let targets = Targets::from_file(&dir.join("hostfile")).expect("written hostfile");
    assert_eq!(targets, names(&["j-worker-0"]));
    let pod_wait = Instant::now();
    let err = watcher_loop::run_with(env.client.clone(), &env.ns, &targets, Mode::Ready, options)
        .await
        .expect_err("j-worker-0 never exists");
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("timed out after 6s"), "{err}");
    let total = started.elapsed();
    assert!(total >= Duration::from_secs(6), "{total:?}");
    assert!(
        pod_wait.elapsed() < Duration::from_secs(6) - Duration::from_millis(1000),
        "the pod wait got a fresh timeout: {:?}",
        pod_wait.elapsed()
    );
    std::fs::remove_dir_all(&dir).unwrap();
    teardown(env).await;
}

#[tokio::test]
async fn config_map_of_an_earlier_run_is_waited_past() {
    let env = setup("wl-cm-rerun").await;
    // After a restart the old run's launch stays until the new one is written.
    create_config_map(
        &env,
        CONFIG,
        json!({ "run": "0", "hostfile": "10.0.0.1 30050 j-worker-0 slots=1\n" }),
    )
    .await;
    let wait = spawn_config_wait(&env.client, &env.ns, 1, long());
    assert_still_waiting(&wait, "the ConfigMap holds run 0").await;
    patch_config_map(
        &env,
        CONFIG,
        json!({ "hostfile": "10.0.0.9 30050 j-worker-0 slots=1\n" }),
    )
    .await;
    assert_still_waiting(&wait, "the ConfigMap still holds run 0").await;
    patch_config_map(
        &env,
        CONFIG,
        json!({ "run": "1", "hostfile": "10.0.0.2 30050 j-worker-0 slots=1\n" }),
    )
    .await;
    let data = join(wait).await.expect("run 1 launched");
    assert_eq!(data["run"], "1");
    assert_eq!(data["hostfile"], "10.0.0.2 30050 j-worker-0 slots=1\n");

    // A timeout names the ConfigMap, the run and what it holds.
    let options = Options {
        timeout: Some(Duration::from_secs(2)),
        ..Options::default()
    };
    let err = watcher_loop::wait_config_map(env.client.clone(), &env.ns, CONFIG, 2, options)
        .await
        .expect_err("run 2 is never written");
    assert_eq!(
        err.to_string(),
        "timed out after 2s waiting for ConfigMap j-config to launch run 2; it holds run 1"
    );
    assert_eq!(err.exit_code(), watcher_loop::EXIT_TIMEOUT);
    teardown(env).await;
}

#[tokio::test]
async fn config_map_deleted_while_waited_for_ends_the_wait_naming_it() {
    let env = setup("wl-cm-deleted").await;
    create_config_map(&env, CONFIG, json!({ "run": "0" })).await;
    let wait = spawn_config_wait(&env.client, &env.ns, 1, long());
    assert_still_waiting(&wait, "the ConfigMap holds run 0").await;
    let deleted_at = Instant::now();
    config_maps(&env)
        .delete(CONFIG, &DeleteParams::default())
        .await
        .expect("delete ConfigMap");
    let err = join(wait)
        .await
        .expect_err("a deleted ConfigMap is an error");
    assert!(deleted_at.elapsed() < Duration::from_secs(10));
    assert!(
        matches!(&err, Error::ConfigMapDeleted { name, run: 1 } if name == CONFIG),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("ConfigMap j-config was deleted"),
        "{err}"
    );
    assert_eq!(err.exit_code(), watcher_loop::EXIT_POD_FAILED);
    teardown(env).await;
}

#[tokio::test]
async fn service_account_with_resource_names_role_can_wait_for_the_config_map() {
    let env = setup("wl-cm-rbac").await;
    // The job's ConfigMap does not exist yet: the operator creates it when
    // it launches the first run.
    create_config_map(&env, "other-config", json!({ "run": "1" })).await;
    create_pod(&env.pods, "j-worker-0").await;
    // What the operator grants the launcher: its ConfigMap and its workers.
    let sa_client = service_account_client(
        &env,
        "j-launcher",
        json!([
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get", "list", "watch"],
                "resourceNames": [CONFIG],
            },
            {
                "apiGroups": [""],
                "resources": ["pods"],
                "verbs": ["get", "list", "watch"],
                "resourceNames": ["j-worker-0"],
            }
        ]),
    )
    .await;
    let sa_maps: Api<ConfigMap> = Api::namespaced(sa_client.clone(), &env.ns);
    let deadline = Instant::now() + Duration::from_secs(30);
    let by_name = ListParams::default().fields(&format!("metadata.name={CONFIG}"));
    while let Err(e) = sa_maps.list(&by_name).await {
        assert!(Instant::now() < deadline, "RBAC never allowed the SA: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The launcher's whole init step with only that token.
    let started = Instant::now();
    let options = Options {
        timeout: LONG,
        since: Some(started),
        ..Options::default()
    };
    let wait = spawn_config_wait(&sa_client, &env.ns, 1, options);
    assert_still_waiting(&wait, "the ConfigMap does not exist yet").await;
    create_config_map(
        &env,
        CONFIG,
        json!({ "run": "1", "hostfile": "10.0.0.1 30050 j-worker-0 slots=1\n" }),
    )
    .await;
    let data = join(wait).await.expect("the narrow Role is enough");
    let dir = temp_dir("wl-cm-rbac");
    watcher_loop::write_config(&dir, &data).expect("write the files");
    let targets = Targets::from_file(&dir.join("hostfile")).expect("written hostfile");
    set_status(&env.pods, "j-worker-0", running_ready()).await;
    let outcome =
        watcher_loop::run_with(sa_client.clone(), &env.ns, &targets, Mode::Ready, options)
            .await
            .expect("the worker is ready");
    assert_eq!(outcome.pods, vec!["j-worker-0"]);
    std::fs::remove_dir_all(&dir).unwrap();

    // Another ConfigMap is refused (after the RBAC grace).
    let options = Options {
        timeout: LONG,
        forbidden_grace: Duration::ZERO,
        ..Options::default()
    };
    let err = watcher_loop::wait_config_map(sa_client, &env.ns, "other-config", 1, options)
        .await
        .expect_err("other-config is not in resourceNames");
    assert!(matches!(err, Error::Watch { .. }), "{err:?}");
    assert!(err.to_string().contains("ConfigMap other-config"), "{err}");
    assert!(err.to_string().contains("HTTP 403"), "{err}");
    teardown(env).await;
}

/// Runs the real binary with the ConfigMap step, as the operator configures
/// the launcher's init container (env only).
async fn run_binary_with_config(
    env: &Env,
    dir: &Path,
    run: &str,
    timeout: &str,
) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_watcher-loop"))
        .env("WATCHERCONFIGMAP", CONFIG)
        .env("WATCHERRUN", run)
        .env("WATCHERCONFIGDIR", dir)
        .env("WATCHERFILE", dir.join("hostfile"))
        .env("WATCHERMODE", "ready")
        .env("WATCHERTIMEOUT", timeout)
        .env("KUBECONFIG", &env.cluster.kubeconfig)
        .env("NAMESPACE", &env.ns)
        .env_remove("DGL_OPERATOR_NAMESPACE")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn watcher-loop")
}

#[tokio::test]
async fn binary_writes_the_config_map_then_waits_for_its_hostfile() {
    let env = setup("wl-cm-bin").await;
    let dir = temp_dir("wl-cm-bin");
    create_config_map(&env, CONFIG, json!({ "run": "0" })).await;
    create_pod(&env.pods, "j-worker-0").await;
    set_status(&env.pods, "j-worker-0", running_ready()).await;

    // The hostfile does not exist when it starts: it is the ConfigMap's.
    let child = run_binary_with_config(&env, &dir, "1", "2m").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !dir.join("hostfile").exists(),
        "written before run 1 launched"
    );
    patch_config_map(
        &env,
        CONFIG,
        json!({ "run": "1", "hostfile": "10.0.0.1 30050 j-worker-0 slots=1\n" }),
    )
    .await;
    let (code, stderr) = finish(child).await;
    assert_eq!(code, 0, "stderr:\n{stderr}");
    assert!(
        stderr.contains("wrote 2 files of ConfigMap j-config"),
        "{stderr}"
    );
    assert!(stderr.contains("every pod is ready"), "{stderr}");
    assert_eq!(
        read(&dir, "hostfile"),
        "10.0.0.1 30050 j-worker-0 slots=1\n"
    );
    assert_eq!(read(&dir, "run"), "1");

    // A timeout in the ConfigMap step: exit 3, the ConfigMap and run named.
    let (code, stderr) = finish(run_binary_with_config(&env, &dir, "2", "2s").await).await;
    assert_eq!(code, 3, "stderr:\n{stderr}");
    assert!(
        stderr.contains("waiting for ConfigMap j-config to launch run 2; it holds run 1"),
        "{stderr}"
    );

    // An unwritable folder: exit 5, the file named.
    let missing = dir.join("absent");
    let (code, stderr) = finish(run_binary_with_config(&env, &missing, "1", "1m").await).await;
    assert_eq!(code, watcher_loop::EXIT_WRITE, "stderr:\n{stderr}");
    assert!(
        stderr.contains(&missing.join("hostfile").display().to_string()),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    teardown(env).await;
}
