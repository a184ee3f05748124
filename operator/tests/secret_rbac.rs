//! The operator cannot read the cluster's Secrets (issue #36, item 4): the
//! RBAC of the Helm chart (cluster-wide and single-namespace) and of both
//! kustomize overlays, installed on a real API server and asked with
//! SubjectAccessReviews (what `kubectl auth can-i --as` asks), lets the
//! operator's ServiceAccount create Secrets (the jobs' tokens) and get only
//! its token key Secret by name; never get, list or watch Secrets in a job's
//! namespace, in its own, or cluster-wide.
//!
//! The rendered objects are installed under names of this test's own (a
//! prefix on every role and binding, the overlays' namespace mapped to a
//! test namespace), so they cannot meet another test's or an install's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde::Deserialize;
use serde_json::{json, Value};

/// The token key Secret's default name (`--token-key-secret`).
const TOKEN_KEY: &str = "dgl-operator-token-key";
/// The namespace the kustomize overlays install into.
const KUSTOMIZE_NS: &str = "dgl-operator-system";
const RBAC_KINDS: [&str; 4] = ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];

fn root() -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs a test"),
    )
    .parent()
    .unwrap()
    .to_path_buf()
}

fn run(cmd: &mut Command) -> Vec<Value> {
    let out = cmd.current_dir(root()).output().expect("tool runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml::Deserializer::from_str(&String::from_utf8(out.stdout).unwrap())
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn helm(release: &str, ns: &str, extra: &[&str]) -> Vec<Value> {
    let bin = localkube::ensure_tool(localkube::GoTool::Helm).expect("helm builds");
    run(Command::new(bin)
        .args(["template", release, "charts/dgl-operator", "-n", ns])
        .args(extra))
}

fn kustomize(dir: &str) -> Vec<Value> {
    let bin = localkube::ensure_tool(localkube::GoTool::Kustomize).expect("kustomize builds");
    run(Command::new(bin).args(["build", dir]))
}

/// Installs the RBAC objects of `docs` (server-side apply), each role and
/// binding renamed with `prefix` (and the references to them), namespace
/// `from` mapped to `to`.
async fn install(client: &Client, docs: &[Value], prefix: &str, from: &str, to: &str) {
    let rbac: Vec<&Value> = docs
        .iter()
        .filter(|d| RBAC_KINDS.contains(&d["kind"].as_str().unwrap_or("")))
        .collect();
    let own: Vec<String> = rbac
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let map_ns = |v: &mut Value| {
        if v.as_str() == Some(from) {
            *v = json!(to);
        }
    };
    for doc in rbac {
        let mut d = doc.clone();
        let name = d["metadata"]["name"].as_str().unwrap().to_string();
        d["metadata"]["name"] = json!(format!("{prefix}-{name}"));
        // get_mut, not IndexMut: that would add the keys a kind lacks.
        if let Some(ns) = d.pointer_mut("/metadata/namespace") {
            map_ns(ns);
        }
        if let Some(r) = d.pointer_mut("/roleRef/name") {
            if own.iter().any(|o| r.as_str() == Some(o)) {
                *r = json!(format!("{prefix}-{}", r.as_str().unwrap()));
            }
        }
        if let Some(subjects) = d.get_mut("subjects").and_then(Value::as_array_mut) {
            for s in subjects {
                if let Some(ns) = s.get_mut("namespace") {
                    map_ns(ns);
                }
            }
        }
        let obj: DynamicObject = serde_json::from_value(d).unwrap();
        let types = obj.types.clone().unwrap();
        let ar = ApiResource::from_gvk(&GroupVersionKind::try_from(&types).unwrap());
        let api: Api<DynamicObject> = match obj.namespace() {
            Some(ns) => Api::namespaced_with(client.clone(), &ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        api.patch(
            &obj.name_any(),
            &PatchParams::apply("secret-rbac-test").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap_or_else(|e| panic!("{} {} refused: {e}", types.kind, obj.name_any()));
    }
}

/// What a SubjectAccessReview answers for the ServiceAccount `sa` of `ns`.
async fn can(client: &Client, ns: &str, sa: &str, verb: &str, at: &str, name: &str) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": format!("system:serviceaccount:{ns}:{sa}"),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"),
                       "system:authenticated"],
            "resourceAttributes": {
                "verb": verb, "resource": "secrets", "namespace": at, "name": name
            }
        }
    }))
    .unwrap();
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// One install's facts: the operator's ServiceAccount, where its token key
/// lives, and a namespace its jobs run in.
struct Install<'a> {
    what: &'a str,
    ops: &'a str,
    sa: &'a str,
    key_ns: &'a str,
    job_ns: &'a str,
}

/// What the operator needs is allowed (waited for: the authorizer sees new
/// bindings a moment later), then what it must not do is denied.
async fn check(client: &Client, i: &Install<'_>) {
    let needs = [
        ("create", i.job_ns, ""),
        ("create", i.key_ns, ""),
        ("get", i.key_ns, TOKEN_KEY),
    ];
    let start = Instant::now();
    for (verb, at, name) in needs {
        while !can(client, i.ops, i.sa, verb, at, name).await {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{}: the operator may not {verb} secrets {at:?}/{name:?}",
                i.what
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut allowed = BTreeMap::new();
    for verb in ["get", "list", "watch"] {
        for (at, name) in [
            ("", ""),
            (i.job_ns, ""),
            (i.job_ns, "someones-password"),
            (i.key_ns, "someones-password"),
            (i.ops, ""),
        ] {
            if can(client, i.ops, i.sa, verb, at, name).await {
                allowed.insert(format!("{verb} {at:?}/{name:?}"), true);
            }
        }
    }
    for verb in ["list", "watch"] {
        if can(client, i.ops, i.sa, verb, i.key_ns, TOKEN_KEY).await {
            allowed.insert(format!("{verb} {:?}/{TOKEN_KEY:?}", i.key_ns), true);
        }
    }
    assert!(
        allowed.is_empty(),
        "{}: the operator may read Secrets: {:?}",
        i.what,
        allowed.keys().collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn the_operator_cannot_read_secrets_in_any_install() {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let client = cluster.client().await.unwrap();
    let ops = localkube::create_test_namespace(&client, "srbac-ops")
        .await
        .unwrap();
    let jobs = localkube::create_test_namespace(&client, "srbac-jobs")
        .await
        .unwrap();
    // Unique per run: the cluster-scoped roles and bindings carry it.
    let p = ops.clone();

    install(
        &client,
        &helm("dgl-operator", &ops, &[]),
        &format!("{p}-h"),
        "",
        "",
    )
    .await;
    let chart = Install {
        what: "chart, cluster-wide",
        ops: &ops,
        sa: "dgl-operator",
        key_ns: &ops,
        job_ns: &jobs,
    };
    check(&client, &chart).await;

    let single = format!("watchNamespace={jobs}");
    // Another release name: another ServiceAccount than the first's.
    let sa_single = "single-dgl-operator";
    install(
        &client,
        &helm(sa_single, &ops, &["--set", &single]),
        &format!("{p}-s"),
        "",
        "",
    )
    .await;
    let chart_single = Install {
        what: "chart, one namespace",
        ops: &ops,
        sa: sa_single,
        key_ns: &jobs,
        job_ns: &jobs,
    };
    check(&client, &chart_single).await;

    // The overlays' ServiceAccount is dgl-operator in their namespace: each
    // overlay gets a namespace of its own.
    let cw = localkube::create_test_namespace(&client, "srbac-cw")
        .await
        .unwrap();
    install(
        &client,
        &kustomize("deploy/cluster-wide"),
        &format!("{p}-cw"),
        KUSTOMIZE_NS,
        &cw,
    )
    .await;
    let cluster_wide = Install {
        what: "deploy/cluster-wide",
        ops: &cw,
        sa: "dgl-operator",
        key_ns: &cw,
        job_ns: &jobs,
    };
    check(&client, &cluster_wide).await;

    let nsd = localkube::create_test_namespace(&client, "srbac-ns")
        .await
        .unwrap();
    install(
        &client,
        &kustomize("deploy/namespaced"),
        &format!("{p}-ns"),
        KUSTOMIZE_NS,
        &nsd,
    )
    .await;
    let namespaced = Install {
        what: "deploy/namespaced",
        ops: &nsd,
        sa: "dgl-operator",
        key_ns: &nsd,
        job_ns: &nsd,
    };
    check(&client, &namespaced).await;
    remove_cluster_scoped(&client, &p).await;
}

/// Deletes this run's ClusterRoles and ClusterRoleBindings (namespaced
/// objects go with the test namespaces).
async fn remove_cluster_scoped(client: &Client, prefix: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let dp = kube::api::DeleteParams::default();
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for r in roles.list(&Default::default()).await.unwrap() {
        if r.name_any().starts_with(prefix) {
            let _ = roles.delete(&r.name_any(), &dp).await;
        }
    }
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    for b in bindings.list(&Default::default()).await.unwrap() {
        if b.name_any().starts_with(prefix) {
            let _ = bindings.delete(&b.name_any(), &dp).await;
        }
    }
}
