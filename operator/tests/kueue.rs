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

async fn install_kueue_crds(env: &Env) {
    let bases = kueue_module().join("config/components/crd/bases");
    for f in ["workloads", "resourceflavors", "workloadpriorityclasses"] {
        let path = bases.join(format!("kueue.x-k8s.io_{f}.yaml"));
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
