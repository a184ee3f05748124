//! No job can reach another by relabelling its launcher (issue #25, item
//! 5): the ValidatingAdmissionPolicy shipped in deploy/ and in the chart,
//! on a real API server, lets a launcher's ServiceAccount (impersonated,
//! with the Role the operator gives it) change its pod's progress
//! annotation and nothing else: not its labels, which the jobs'
//! NetworkPolicies admit traffic by.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dgl_api::names::{ANNOTATION_PROGRESS, LABEL_JOB_NAME};
use dgl_api::progress::Progress;
use dgl_api::DGLJob;
use dgl_operator::pure::builders;
use dgl_operator::pure::settings::BuildConfig;
use dgl_operator::pure::validate::{validate, ValidJob};
use dglrun::progress::{PodAnnotation, Sink};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde::Deserialize;
use serde_json::{json, Value};

const POLICY: &str = include_str!("../../deploy/base/launcher-pod-policy.yaml");
const SEED: &str = include_str!("../../examples/seed-dgljob.yaml");

fn docs(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The policy and its binding, server-side applied (cluster-scoped).
async fn install_policy(client: &Client) {
    for doc in docs(POLICY) {
        let obj: DynamicObject = serde_json::from_value(doc).unwrap();
        let types = obj.types.clone().unwrap();
        let gvk = GroupVersionKind::try_from(&types).unwrap();
        let ar = ApiResource::from_gvk(&gvk);
        Api::<DynamicObject>::all_with(client.clone(), &ar)
            .patch(
                &obj.name_any(),
                &PatchParams::apply("launcher-pod-policy-test").force(),
                &Patch::Apply(&obj),
            )
            .await
            .unwrap_or_else(|e| panic!("{} refused: {e}", types.kind));
    }
}

/// `<job>-launcher`'s ServiceAccount, Role and RoleBinding as the operator
/// makes them, and a pod named and labelled as the job's launcher.
async fn launcher_of(client: &Client, ns: &str, name: &str) {
    let mut job: DGLJob = serde_yaml::from_str(SEED).unwrap();
    job.metadata.name = Some(name.into());
    job.metadata.namespace = Some(ns.into());
    // The builders need a uid for the owner reference; no DGLJob exists
    // here, so the references are dropped (the collector would delete them).
    job.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    let (mut sa, mut role, mut binding) = builders::launcher_rbac(&valid(&job));
    sa.metadata.owner_references = None;
    role.metadata.owner_references = None;
    binding.metadata.owner_references = None;
    let pp = PostParams::default();
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(&pp, &sa)
        .await
        .unwrap();
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&pp, &role)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&pp, &binding)
        .await
        .unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": format!("{name}-launcher"),
            "labels": builders::job_labels(&job),
            "annotations": {"team": "a"},
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&pp, &pod)
        .await
        .unwrap();
}

/// A client acting as `<job>-launcher`'s ServiceAccount, as its pod's token would.
async fn as_launcher(ns: &str, job: &str) -> Client {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let mut config = cluster.config().await.unwrap();
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{ns}:{job}-launcher"));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{ns}"),
        "system:authenticated".into(),
    ]);
    Client::try_from(config).unwrap()
}

async fn merge(pods: &Api<Pod>, name: &str, patch: Value) -> Result<Pod, kube::Error> {
    pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// A policy takes effect once the API server's policy source has seen and
/// compiled it (a refresh each second, far later on a loaded machine).
/// Waits for that with dry-run patches, which go through admission and
/// store nothing: a real relabel accepted before the policy took effect
/// would leave the pod relabelled, and the same patch again would then be
/// no change, which the policy rightly allows for ever (the cause of this
/// test's failures in the test command). A 403 from RBAC, whose fresh
/// RoleBinding the authorizer may not have seen yet either, is waited out.
async fn wait_enforced(pods: &Api<Pod>, name: &str, patch: &Value) {
    let dry = PatchParams::default().dry_run();
    for _ in 0..600 {
        match pods.patch(name, &dry, &Patch::Merge(patch)).await {
            Err(kube::Error::Api(e)) if e.message.contains("ValidatingAdmissionPolicy") => return,
            Err(kube::Error::Api(e)) if e.code == 403 => {}
            Err(e) => panic!("dry-run {patch}: {e}"),
            Ok(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the policy did not refuse the dry-run {patch} within 120 s")
}

/// A real patch, once: returns its refusal.
async fn refused(pods: &Api<Pod>, name: &str, patch: Value) -> String {
    match merge(pods, name, patch.clone()).await {
        Err(kube::Error::Api(e)) => format!("{} {}", e.code, e.message),
        Err(e) => panic!("{patch}: {e}"),
        Ok(_) => panic!("{patch} was accepted"),
    }
}

#[tokio::test]
async fn a_launcher_may_change_its_progress_annotation_and_nothing_else() {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let admin = cluster.client().await.unwrap();
    let ns = localkube::create_test_namespace(&admin, "lpp")
        .await
        .unwrap();
    install_policy(&admin).await;
    launcher_of(&admin, &ns, "job-a").await;
    let sa = as_launcher(&ns, "job-a").await;
    let pods: Api<Pod> = Api::namespaced(sa.clone(), &ns);
    let relabel = json!({"metadata": {"labels": {LABEL_JOB_NAME: "job-b"}}});
    wait_enforced(&pods, "job-a-launcher", &relabel).await;

    // Job A's launcher relabels itself into job B: refused by the policy.
    let m = refused(&pods, "job-a-launcher", relabel).await;
    assert!(
        m.contains("metadata.labels: a launcher's ServiceAccount"),
        "{m}"
    );
    // Nor may it add a label, or change another annotation.
    let m = refused(
        &pods,
        "job-a-launcher",
        json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await;
    assert!(m.contains("metadata.labels"), "{m}");
    let m = refused(
        &pods,
        "job-a-launcher",
        json!({"metadata": {"annotations": {"team": "b"}}}),
    )
    .await;
    assert!(m.contains("may change only dgloperator.io/progress"), "{m}");

    // The progress annotation, as dglrun publishes it, is allowed.
    let mut sink = PodAnnotation::new(sa, &ns, "job-a-launcher");
    let report = Progress {
        epoch: 2,
        epochs: Some(5),
        loss: Some(0.5),
        throughput: None,
        unit: None,
    };
    sink.publish(&report).await.expect("progress is allowed");
    let admin_pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let pod = admin_pods.get("job-a-launcher").await.unwrap();
    assert!(pod.annotations().contains_key(ANNOTATION_PROGRESS));
    assert_eq!(pod.labels()[LABEL_JOB_NAME], "job-a", "labels unchanged");

    // The refusal is the policy's, not RBAC's or the pod's: the same label
    // patch by another user goes through.
    merge(
        &admin_pods,
        "job-a-launcher",
        json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await
    .expect("an admin may relabel a pod");
}

fn root() -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs a test"),
    )
    .parent()
    .unwrap()
    .into()
}

fn render(tool: localkube::GoTool, args: &[&str]) -> Vec<Value> {
    let bin = localkube::ensure_tool(tool).expect("tool");
    let out = Command::new(bin)
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    docs(&String::from_utf8(out.stdout).unwrap())
}

/// The spec of each kind in `docs` that the policy file has.
fn policy_specs(docs: &[Value]) -> Vec<(String, Value)> {
    let kinds = [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    let mut specs: Vec<(String, Value)> = docs
        .iter()
        .filter(|d| kinds.iter().any(|k| d["kind"] == *k))
        .map(|d| (d["kind"].as_str().unwrap().to_string(), d["spec"].clone()))
        .collect();
    // The binding names the policy by its installed name.
    for (_, spec) in &mut specs {
        if let Some(p) = spec.get_mut("policyName") {
            *p = json!("<policy>");
        }
    }
    specs.sort_by(|a, b| a.0.cmp(&b.0));
    specs
}

#[test]
fn the_chart_and_both_overlays_ship_the_same_policy() {
    let expected = policy_specs(&docs(POLICY));
    assert_eq!(expected.len(), 2);
    for dir in ["deploy/cluster-wide", "deploy/namespaced"] {
        let got = policy_specs(&render(localkube::GoTool::Kustomize, &["build", dir]));
        assert_eq!(got, expected, "{dir}");
    }
    for extra in [&[][..], &["--set", "watchNamespace=jobs"][..]] {
        let mut args = vec![
            "template",
            "dgl-operator",
            "charts/dgl-operator",
            "-n",
            "ops",
        ];
        args.extend_from_slice(extra);
        let got = policy_specs(&render(localkube::GoTool::Helm, &args));
        assert_eq!(got, expected, "helm template {extra:?}");
    }
}

/// `job` as the operator validates it (the builders take only a valid job).
fn valid(job: &DGLJob) -> ValidJob<'_> {
    validate(job, &BuildConfig::default()).expect("the seed job is valid")
}
