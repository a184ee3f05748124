//! Kueue's external-framework contract against a real kube-apiserver with
//! Kueue v0.17's own CRDs (from the Kueue module, fetched through the Go
//! module proxy): the Workload the operator applies, the job held
//! suspended, admission (flavors onto the pods), eviction (pods removed,
//! admission released), the Workload finished, `spec.managedBy`. The test
//! plays Kueue (status writes on the Workload) and the kubelet.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{Env, WAIT};
use dgl_api::{DGLJob, JobPhase};
use dgl_operator::pure::settings::BuildConfig;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::ResourceExt;
use serde_json::{json, Value};

const KUEUE: &str = "sigs.k8s.io/kueue@v0.17.0";
const JOB: &str = "queued";

/// The Kueue module's directory, downloaded through the Go module proxy
/// when it is not in the module cache yet.
fn kueue_module() -> PathBuf {
    let out = Command::new("go")
        .args(["mod", "download", "-json", KUEUE])
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .output()
        .expect("go is installed (needed for Kueue's CRDs)");
    assert!(
        out.status.success(),
        "go mod download {KUEUE}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("go mod download -json prints JSON");
    PathBuf::from(v["Dir"].as_str().expect("a module directory"))
}

/// Every CRD of Kueue (the manager needs them all; the operator's part
/// only Workload, ResourceFlavor and WorkloadPriorityClass).
async fn install_kueue_crds(env: &Env) {
    let bases = kueue_module().join("config/components/crd/bases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&bases)
        .unwrap_or_else(|e| panic!("{}: {e}", bases.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for path in files {
        let yaml =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        localkube::apply_crds(&env.client, &yaml)
            .await
            .expect("Kueue CRD");
    }
}

fn ar(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind),
        plural,
    )
}

fn workloads(env: &Env) -> Api<DynamicObject> {
    Api::namespaced_with(env.client.clone(), &env.ns, &ar("Workload", "workloads"))
}

/// Creates (or keeps) a cluster-scoped Kueue object; retried while its CRD
/// is being established.
async fn ensure_cluster_object(env: &Env, kind: &str, plural: &str, obj: Value) {
    let api = Api::<DynamicObject>::all_with(env.client.clone(), &ar(kind, plural));
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    for _ in 0..50 {
        match api.create(&PostParams::default(), &o).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    panic!("cannot create {kind} {}", o.name_any());
}

async fn wait_workload(env: &Env, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let name = format!("dgljob-{JOB}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(Some(o)) = workloads(env).get_opt(&name).await {
            let v = serde_json::to_value(&o).unwrap();
            if f(&v) {
                return v;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for Workload {name}: {what}; now: {v:#}");
            }
        } else if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for Workload {name}: {what}; it does not exist");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn wl_condition<'a>(wl: &'a Value, t: &str) -> Option<&'a Value> {
    wl["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

fn queued(job: &DGLJob) -> Option<(String, String)> {
    let c = job
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Queued")?;
    Some((c.status.clone(), c.reason.clone()))
}

/// Kueue's part: a status write on the Workload.
async fn kueue_writes(env: &Env, status: Value) {
    let patch = json!({"status": status});
    workloads(env)
        .patch_status(
            &format!("dgljob-{JOB}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("Workload status write");
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn cond(t: &str, status: &str, reason: &str) -> Value {
    json!({"type": t, "status": status, "reason": reason, "message": format!("{t} {reason}"),
           "lastTransitionTime": now()})
}

async fn admit(env: &Env, gpu: &str, default: &str) {
    kueue_writes(
        env,
        json!({
            "conditions": [cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted")],
            "admission": {"clusterQueue": "cluster", "podSetAssignments": [
                {"name": "launcher", "flavors": {"cpu": default}, "count": 1},
                {"name": "worker", "flavors": {"cpu": gpu}, "count": 2},
                {"name": "partitioner", "flavors": {"cpu": default}, "count": 1},
            ]},
        }),
    )
    .await;
}

#[tokio::test]
async fn a_queued_job_runs_only_while_its_workload_is_admitted() {
    let build = BuildConfig {
        kueue: true,
        ..Default::default()
    };
    let env = Env::with_build("kueue", build).await;
    install_kueue_crds(&env).await;
    let (gpu, default, high) = (
        format!("{}-gpu", env.ns),
        format!("{}-default", env.ns),
        format!("{}-high", env.ns),
    );
    ensure_cluster_object(
        &env,
        "ResourceFlavor",
        "resourceflavors",
        json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": gpu},
        "spec": {"nodeLabels": {"pool": "gpu"},
                 "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}}),
    )
    .await;
    ensure_cluster_object(&env, "ResourceFlavor", "resourceflavors", json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": default}})).await;
    ensure_cluster_object(
        &env,
        "WorkloadPriorityClass",
        "workloadpriorityclasses",
        json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
        "metadata": {"name": high}, "value": 1000}),
    )
    .await;

    env.create_job(JOB, |j| {
        j.labels_mut()
            .insert("kueue.x-k8s.io/queue-name".into(), "team-a".into());
        j.labels_mut()
            .insert("kueue.x-k8s.io/priority-class".into(), high.clone());
    })
    .await;

    // Queued: suspended (in its own spec too), no pods, the Workload applied.
    let job = env
        .wait_job(JOB, "queued and suspended", |j| {
            queued(j) == Some(("True".into(), "WaitingForAdmission".into())) && j.spec.suspended()
        })
        .await;
    let st = job.status.clone().unwrap();
    assert_eq!(st.phase, Some(JobPhase::Suspended));
    let q = st.queue.expect("status.queue");
    assert_eq!(
        (q.summary.as_str(), q.local_queue.as_str(), q.admitted),
        ("queued in team-a", "team-a", false)
    );
    assert!(env.pod_names().await.is_empty(), "no pod before admission");
    let wl = wait_workload(&env, "exists", |_| true).await;
    assert_eq!(wl["spec"]["queueName"], "team-a");
    assert_eq!(wl["spec"]["priority"], 1000);
    assert_eq!(wl["spec"]["priorityClassRef"]["name"], high.as_str());
    let sets: Vec<(String, i64)> = wl["spec"]["podSets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["count"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        sets,
        [
            ("launcher".to_string(), 1),
            ("worker".to_string(), 2),
            ("partitioner".to_string(), 1)
        ]
    );
    let owner = &wl["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["controller"].as_bool()),
        (Some("DGLJob"), Some(true))
    );
    assert_eq!(owner["uid"].as_str(), job.uid().as_deref());
    let managers: Vec<(&str, &str)> = wl["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap(),
                m["operation"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("dgl-operator", "Apply")),
        "applied server-side by the operator: {managers:?}"
    );

    // Admitted: unsuspended, the pods created with the flavors' node labels and tolerations.
    admit(&env, &gpu, &default).await;
    let job = env
        .wait_job(JOB, "admitted", |j| {
            queued(j) == Some(("False".into(), "Admitted".into()))
        })
        .await;
    assert_eq!(
        job.status.unwrap().queue.unwrap().summary,
        "admitted via team-a"
    );
    let worker = env.wait_pod(&format!("{JOB}-worker-1")).await;
    let spec = worker.spec.unwrap();
    assert_eq!(
        spec.node_selector.unwrap().get("pool").map(String::as_str),
        Some("gpu")
    );
    assert_eq!(
        spec.tolerations
            .unwrap()
            .iter()
            .filter(|t| t.key.as_deref() == Some("gpu"))
            .count(),
        1
    );
    let launcher = env.wait_pod(&format!("{JOB}-launcher")).await;
    assert!(!launcher
        .spec
        .unwrap()
        .node_selector
        .unwrap_or_default()
        .contains_key("pool"));
    env.wait_job(JOB, "unsuspended in its spec", |j| !j.spec.suspended())
        .await;
    wait_workload(&env, "PodsReady WaitForStart", |w| {
        wl_condition(w, "PodsReady")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "WaitForStart")
    })
    .await;

    // Evicted (preempted): pods removed, then the admission released.
    let mut conds = vec![
        cond("QuotaReserved", "True", "QuotaReserved"),
        cond("Admitted", "True", "Admitted"),
    ];
    conds.push(cond("Evicted", "True", "Preempted"));
    kueue_writes(&env, json!({"conditions": conds})).await;
    let job = env
        .wait_job(JOB, "evicted", |j| {
            queued(j) == Some(("True".into(), "EvictedPreempted".into()))
        })
        .await;
    assert_eq!(
        job.status.unwrap().queue.unwrap().summary,
        "queued in team-a"
    );
    let pods: Api<Pod> = env.pods();
    for p in env.pod_names().await {
        env.wait_pod_gone(&p).await;
    }
    assert!(pods
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .is_empty());
    let wl = wait_workload(&env, "admission released", |w| {
        w["status"].get("admission").is_none()
    })
    .await;
    assert_eq!(
        wl_condition(&wl, "QuotaReserved").unwrap()["status"],
        "False"
    );
    assert_eq!(wl_condition(&wl, "Requeued").unwrap()["status"], "True");

    // Admitted again, runs to Succeeded: the Workload is Finished.
    kueue_writes(
        &env,
        json!({"conditions": [cond("Evicted", "False", "Admitted")]}),
    )
    .await;
    admit(&env, &gpu, &default).await;
    env.wait_job(JOB, "admitted again", |j| {
        queued(j) == Some(("False".into(), "Admitted".into()))
    })
    .await;
    env.drive_to_running(JOB, 2).await;
    env.kubelet_succeeded(&format!("{JOB}-launcher")).await;
    env.wait_phase(JOB, JobPhase::Succeeded).await;
    let wl = wait_workload(&env, "Finished", |w| {
        wl_condition(w, "Finished").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(
        wl_condition(&wl, "Finished").unwrap()["reason"],
        "Succeeded"
    );
}

#[tokio::test]
async fn a_job_managed_by_another_controller_is_left_alone() {
    let build = BuildConfig {
        kueue: true,
        ..Default::default()
    };
    let env = Env::with_build("managedby", build).await;
    install_kueue_crds(&env).await;
    env.create_job("elsewhere", |j| {
        j.labels_mut()
            .insert("kueue.x-k8s.io/queue-name".into(), "team-a".into());
        j.spec.managed_by = Some("kueue.x-k8s.io/multikueue".into());
    })
    .await;
    // A job of our own, created after it, is reconciled: once it has a
    // status, the other had its turn too.
    env.create_job("ours", |_| {}).await;
    env.wait_phase("ours", JobPhase::Partitioning).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let other = env.jobs().get("elsewhere").await.unwrap();
    assert_eq!(other.status, None, "no status written");
    assert!(!env
        .pod_names()
        .await
        .iter()
        .any(|p| p.starts_with("elsewhere-")));
    assert!(
        workloads(&env)
            .get_opt("dgljob-elsewhere")
            .await
            .unwrap()
            .is_none(),
        "no Workload"
    );
    // Immutable.
    let patch = json!({"spec": {"managedBy": "dgloperator.io/dgl-operator"}});
    let err = env
        .jobs()
        .patch("elsewhere", &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    let msg = format!("{:?}", err.expect_err("managedBy cannot change"));
    assert!(msg.contains("spec.managedBy: is immutable"), "{msg}");
}

/// Kueue's manager, run on the host against the test control plane; killed
/// (and the metrics certificate it needs removed) when dropped.
struct RealKueue {
    child: std::process::Child,
    dir: PathBuf,
}

impl Drop for RealKueue {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all("/etc/kueue");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn self_signed(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    let ok = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=kueue-test",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(dir.join("tls.key"))
        .arg("-out")
        .arg(dir.join("tls.crt"))
        .output()
        .expect("openssl")
        .status
        .success();
    assert!(ok, "openssl made no certificate in {}", dir.display());
}

/// Starts the Kueue binary `bin`: DGLJob as an external framework,
/// waitForPodsReady after `timeout`, no webhook registered (see
/// xtask/src/stack/kueue.rs), internal cert management off.
async fn start_kueue(bin: &str, kubeconfig: &std::path::Path, timeout: u32) -> RealKueue {
    let dir = std::env::temp_dir().join(format!("kueue-test-{}", std::process::id()));
    self_signed(&dir.join("certs"));
    // Read from this fixed path when internal cert management is off.
    self_signed(std::path::Path::new("/etc/kueue/metrics/certs"));
    let config = format!(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nnamespace: kueue-system\n\
         manageJobsWithoutQueueName: false\nleaderElection: {{leaderElect: false}}\n\
         health: {{healthProbeBindAddress: 127.0.0.1:18081}}\nmetrics: {{bindAddress: 127.0.0.1:18443}}\n\
         webhook: {{host: 127.0.0.1, port: 19443, certDir: {}}}\ninternalCertManagement: {{enable: false}}\n\
         waitForPodsReady: {{timeout: {timeout}s, blockAdmission: true, requeuingStrategy: \
         {{timestamp: Eviction, backoffBaseSeconds: 2, backoffMaxSeconds: 10}}}}\n\
         integrations: {{frameworks: [], externalFrameworks: [DGLJob.v1alpha1.dgloperator.io]}}\n\
         featureGates: {{VisibilityOnDemand: false}}\n",
        dir.join("certs").display()
    );
    std::fs::write(dir.join("config.yaml"), config).unwrap();
    let log = std::fs::File::create(dir.join("kueue.log")).unwrap();
    let child = Command::new(bin)
        .arg(format!("--config={}", dir.join("config.yaml").display()))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
    let k = RealKueue { child, dir };
    for _ in 0..120 {
        let ready = tokio::net::TcpStream::connect("127.0.0.1:18081")
            .await
            .is_ok();
        if ready {
            return k;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!(
        "Kueue not listening after 60 s; see {}",
        k.dir.join("kueue.log").display()
    );
}

fn phase(j: &DGLJob) -> Option<JobPhase> {
    j.status.as_ref().and_then(|s| s.phase)
}

async fn queued_job(env: &Env, name: &str, priority: Option<&str>) {
    env.create_job(name, |j| {
        j.labels_mut()
            .insert("kueue.x-k8s.io/queue-name".into(), "team-a".into());
        if let Some(p) = priority {
            j.labels_mut()
                .insert("kueue.x-k8s.io/priority-class".into(), p.into());
        }
        // 100m launcher + 300m partitioner (the workers' template) + 2 x
        // 300m workers: 1 CPU, so a quota of 1 CPU fits one job.
        for (role, cpu) in [
            (dgl_api::ReplicaType::Launcher, "100m"),
            (dgl_api::ReplicaType::Worker, "300m"),
        ] {
            let spec = j.spec.dgl_replica_specs.get_mut(&role).unwrap();
            spec.template.spec.as_mut().unwrap().containers[0].resources =
                Some(serde_json::from_value(json!({"requests": {"cpu": cpu}})).unwrap());
        }
    })
    .await;
}

async fn admitted(env: &Env, name: &str) -> DGLJob {
    env.wait_job(name, "admitted by Kueue", |j| {
        queued(j) == Some(("False".into(), "Admitted".into()))
    })
    .await
}

async fn runs_to_success(env: &Env, name: &str) {
    env.drive_to_running(name, 2).await;
    env.kubelet_succeeded(&format!("{name}-launcher")).await;
    env.wait_phase(name, JobPhase::Succeeded).await;
}

async fn no_pods_of(env: &Env, name: &str) {
    for p in env
        .pod_names()
        .await
        .into_iter()
        .filter(|p| p.starts_with(&format!("{name}-")))
    {
        env.wait_pod_gone(&p).await;
    }
}

/// With Kueue's real manager: a quota fitting one job, two jobs at once
/// (the second waits, named in its LocalQueue); the admitted one's pods
/// cannot start (no kubelet plays them), so waitForPodsReady evicts it, its
/// pods go and the other is admitted and Succeeds; then a higher priority
/// job preempts the first, which is requeued and Succeeds last.
///
/// Needs Kueue's manager binary in DGL_OPERATOR_KUEUE_BIN, which the test
/// command (`cargo xtask test`) and `cargo xtask kueue` build and set; a
/// plain `cargo test` without it says so and checks nothing here.
#[tokio::test]
async fn real_kueue_queues_evicts_and_preempts_dgljobs() {
    let Some(bin) = std::env::var_os("DGL_OPERATOR_KUEUE_BIN") else {
        eprintln!(
            "skipped: DGL_OPERATOR_KUEUE_BIN is not set (cargo xtask kueue --build-only prints it)"
        );
        return;
    };
    let bin = bin.to_string_lossy().into_owned();
    let build = BuildConfig {
        kueue: true,
        ..Default::default()
    };
    let env = Env::with_build("realkueue", build).await;
    install_kueue_crds(&env).await;
    let kubeconfig = localkube::ensure_cluster().await.unwrap().kubeconfig;
    let _kueue = start_kueue(&bin, &kubeconfig, 15).await;
    let (flavor, cq, high) = (
        format!("{}-f", env.ns),
        format!("{}-cq", env.ns),
        format!("{}-high", env.ns),
    );
    ensure_cluster_object(&env, "ResourceFlavor", "resourceflavors", json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor},
        "spec": {"nodeLabels": {"kueue-test": "yes"}}})).await;
    ensure_cluster_object(
        &env,
        "ClusterQueue",
        "clusterqueues",
        json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                 "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": flavor,
                   "resources": [{"name": "cpu", "nominalQuota": "1"}]}]}]}}),
    )
    .await;
    ensure_cluster_object(
        &env,
        "WorkloadPriorityClass",
        "workloadpriorityclasses",
        json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
        "metadata": {"name": high}, "value": 1000}),
    )
    .await;
    let lq: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "team-a", "namespace": env.ns}, "spec": {"clusterQueue": cq}}))
    .unwrap();
    Api::<DynamicObject>::namespaced_with(
        env.client.clone(),
        &env.ns,
        &ar("LocalQueue", "localqueues"),
    )
    .create(&PostParams::default(), &lq)
    .await
    .expect("LocalQueue");

    // Two jobs at once: one admitted (its pods on the flavor), one waits.
    queued_job(&env, "one", None).await;
    admitted(&env, "one").await;
    let pod = env.wait_pod("one-worker-0").await;
    assert_eq!(
        pod.spec
            .unwrap()
            .node_selector
            .unwrap()
            .get("kueue-test")
            .map(String::as_str),
        Some("yes")
    );
    queued_job(&env, "two", None).await;
    let two = env
        .wait_job("two", "queued", |j| {
            queued(j).is_some_and(|q| q.0 == "True")
        })
        .await;
    assert_eq!(
        two.status.unwrap().queue.unwrap().summary,
        "queued in team-a"
    );
    assert!(!env.pod_names().await.iter().any(|p| p.starts_with("two-")));

    // Nobody starts one's pods: evicted at the PodsReady timeout, no pod left.
    let one = env
        .wait_job("one", "evicted by waitForPodsReady", |j| {
            queued(j) == Some(("True".into(), "EvictedPodsReadyTimeout".into()))
        })
        .await;
    assert_eq!(phase(&one), Some(JobPhase::Suspended));
    no_pods_of(&env, "one").await;
    admitted(&env, "two").await;
    runs_to_success(&env, "two").await;
    wait_workload_named(&env, "two", "Finished", |w| {
        wl_condition(w, "Finished").is_some_and(|c| c["status"] == "True")
    })
    .await;

    // one is readmitted; a higher priority job preempts it.
    admitted(&env, "one").await;
    env.wait_pod("one-worker-0").await;
    queued_job(&env, "urgent", Some(&high)).await;
    admitted(&env, "urgent").await;
    env.wait_job("one", "preempted", |j| {
        queued(j) == Some(("True".into(), "EvictedPreempted".into()))
    })
    .await;
    no_pods_of(&env, "one").await;
    runs_to_success(&env, "urgent").await;
    admitted(&env, "one").await;
    runs_to_success(&env, "one").await;
    for j in ["one", "two", "urgent"] {
        let job = env.jobs().get(j).await.unwrap();
        assert_eq!(phase(&job), Some(JobPhase::Succeeded), "{j}");
    }
}

async fn wait_workload_named(
    env: &Env,
    job: &str,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    let name = format!("dgljob-{job}");
    for _ in 0..150 {
        if let Ok(Some(o)) = workloads(env).get_opt(&name).await {
            let v = serde_json::to_value(&o).unwrap();
            if f(&v) {
                return v;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting for Workload {name}: {what}");
}
