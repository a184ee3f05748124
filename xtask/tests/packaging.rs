//! The packaging (Helm chart, kustomize overlays) is linted, rendered and
//! then accepted by a real API server (server-side dry-run apply).

use std::path::{Path, PathBuf};
use std::process::Command;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use kube::ResourceExt;
use serde::Deserialize;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs a test"),
    )
    .parent()
    .unwrap()
    .to_path_buf()
}

fn tool(t: localkube::GoTool) -> PathBuf {
    localkube::ensure_tool(t).expect("tool builds from the Go module proxy")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.current_dir(root()).output().expect("tool runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn docs(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn helm_template(args: &[&str]) -> Vec<Value> {
    docs(&run(Command::new(tool(localkube::GoTool::Helm))
        .args([
            "template",
            "dgl-operator",
            "charts/dgl-operator",
            "--include-crds",
        ])
        .args(args)))
}

fn kustomize(dir: &str) -> Vec<Value> {
    docs(&run(
        Command::new(tool(localkube::GoTool::Kustomize)).args(["build", dir])
    ))
}

fn find<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

#[test]
fn chart_crd_is_the_generated_crd() {
    let chart =
        std::fs::read_to_string(root().join("charts/dgl-operator/crds/dgljobs.yaml")).unwrap();
    assert!(
        chart == dgl_api::crd_yaml(),
        "charts/dgl-operator/crds/dgljobs.yaml is out of date: cp crds/dgljobs.yaml charts/dgl-operator/crds/"
    );
}

#[test]
fn helm_lint_passes() {
    run(Command::new(tool(localkube::GoTool::Helm)).args([
        "lint",
        "--strict",
        "charts/dgl-operator",
    ]));
}

#[test]
fn chart_defaults_are_secure_and_cluster_wide() {
    let d = helm_template(&["-n", "ops"]);
    let dep = find(&d, "Deployment")[0];
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--leader-elect=true") && args.contains(&"--metrics-auth=token"));
    assert_eq!(
        find(&d, "ClusterRole").len(),
        2,
        "operator + metrics-reader"
    );
    assert!(find(&d, "ServiceMonitor").is_empty());
    assert_eq!(find(&d, "CustomResourceDefinition").len(), 1);
}

#[test]
fn chart_single_namespace_mode_uses_a_role() {
    let d = helm_template(&[
        "-n",
        "ops",
        "--set",
        "watchNamespace=jobs",
        "--set",
        "metrics.serviceMonitor.enabled=true",
    ]);
    let roles = find(&d, "Role");
    assert!(roles.iter().any(|r| r["metadata"]["namespace"] == "jobs"));
    let cluster_roles: Vec<_> = find(&d, "ClusterRole")
        .into_iter()
        .filter(|r| {
            r["rules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|rule| rule.get("resources").is_some())
        })
        .collect();
    assert!(
        cluster_roles.is_empty(),
        "no cluster-wide resource rights in single-namespace mode"
    );
    let env = &find(&d, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(env
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "WATCH_NAMESPACE" && e["value"] == "jobs"));
    assert_eq!(find(&d, "ServiceMonitor").len(), 1);
}

/// The operator container's arguments.
fn operator_args(docs: &[Value]) -> Vec<String> {
    find(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// Whether the operator's (Cluster)Role may write NetworkPolicies.
fn may_write_network_policies(docs: &[Value], kind: &str) -> bool {
    find(docs, kind).iter().any(|r| {
        r["rules"].as_array().unwrap().iter().any(|rule| {
            rule["apiGroups"][0] == "networking.k8s.io"
                && rule["resources"][0] == "networkpolicies"
                && rule["verbs"].as_array().unwrap().contains(&"create".into())
        })
    })
}

#[test]
fn network_policy_value_toggles_the_flag_and_its_rule() {
    let on = helm_template(&["-n", "ops"]);
    assert!(operator_args(&on).contains(&"--network-policy".to_string()));
    assert!(may_write_network_policies(&on, "ClusterRole"));
    let off = helm_template(&["-n", "ops", "--set", "networkPolicy.enabled=false"]);
    assert!(!operator_args(&off)
        .iter()
        .any(|a| a.contains("network-policy")));
    assert!(!may_write_network_policies(&off, "ClusterRole"));
    let single = helm_template(&["-n", "ops", "--set", "watchNamespace=jobs"]);
    assert!(may_write_network_policies(&single, "Role"));
    // deploy/ runs with the policy, and both installs grant the rule.
    for dir in ["deploy/cluster-wide", "deploy/namespaced"] {
        let d = kustomize(dir);
        assert!(
            operator_args(&d).contains(&"--network-policy".to_string()),
            "{dir}"
        );
    }
    assert!(may_write_network_policies(
        &kustomize("deploy/namespaced"),
        "Role"
    ));
}

#[test]
fn helm_and_kustomize_grant_the_same_rules() {
    let helm = helm_template(&["-n", "ops"]);
    let kust = kustomize("deploy/cluster-wide");
    let rules = |docs: &[Value]| {
        find(docs, "ClusterRole")
            .into_iter()
            .find(|r| {
                r["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .ends_with("dgl-operator")
            })
            .unwrap()["rules"]
            .clone()
    };
    assert_eq!(rules(&helm), rules(&kust));
    let ns_role = find(&kustomize("deploy/namespaced"), "Role")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "dgl-operator")
        .unwrap()["rules"]
        .clone();
    let mut cluster_rules = rules(&kust).as_array().unwrap().clone();
    // Nodes (read only, for node loss) are cluster-scoped: only the
    // cluster-wide install reads them; the namespaced one runs without.
    let nodes = serde_json::json!({"apiGroups": [""], "resources": ["nodes"],
        "verbs": ["get", "list", "watch"]});
    assert!(cluster_rules.contains(&nodes), "{cluster_rules:?}");
    cluster_rules.retain(|r| r["apiGroups"][0] != "apiextensions.k8s.io" && *r != nodes);
    assert_eq!(ns_role, Value::Array(cluster_rules));
}

async fn dry_run_apply(
    client: &kube::Client,
    discovery: &Discovery,
    docs: &[Value],
    default_ns: &str,
) {
    for doc in docs {
        let obj: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
        let tm = obj.types.clone().unwrap();
        let gvk = kube::core::GroupVersionKind::try_from(&tm).unwrap();
        let (ar, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("the API server does not know {gvk:?}"));
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &ar),
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                obj.namespace().as_deref().unwrap_or(default_ns),
                &ar,
            ),
        };
        api.patch(
            &obj.name_any(),
            &PatchParams::apply("packaging-test").dry_run().force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap_or_else(|e| panic!("{} {} refused: {e}", tm.kind, obj.name_any()));
    }
}

#[tokio::test]
async fn rendered_manifests_are_accepted_by_the_api_server() {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let client = cluster.client().await.unwrap();
    let ops = localkube::create_test_namespace(&client, "pkg-ops")
        .await
        .unwrap();
    let jobs = localkube::create_test_namespace(&client, "pkg-jobs")
        .await
        .unwrap();
    let discovery = Discovery::new(client.clone()).run().await.unwrap();

    // kustomize overlays target dgl-operator-system: make it real so the
    // namespaced objects can be checked in it.
    let kust_cw = kustomize("deploy/cluster-wide");
    let ns_doc: Vec<Value> = find(&kust_cw, "Namespace").into_iter().cloned().collect();
    let ns_obj: DynamicObject = serde_json::from_value(ns_doc[0].clone()).unwrap();
    Api::<DynamicObject>::all_with(
        client.clone(),
        &discovery
            .resolve_gvk(&kube::core::GroupVersionKind::gvk("", "v1", "Namespace"))
            .unwrap()
            .0,
    )
    .patch(
        "dgl-operator-system",
        &PatchParams::apply("packaging-test").force(),
        &Patch::Apply(&ns_obj),
    )
    .await
    .unwrap();
    dry_run_apply(&client, &discovery, &kust_cw, "dgl-operator-system").await;
    dry_run_apply(
        &client,
        &discovery,
        &kustomize("deploy/namespaced"),
        "dgl-operator-system",
    )
    .await;
    dry_run_apply(&client, &discovery, &helm_template(&["-n", &ops]), &ops).await;
    dry_run_apply(
        &client,
        &discovery,
        &helm_template(&["-n", &ops, "--set", &format!("watchNamespace={jobs}")]),
        &ops,
    )
    .await;
}
