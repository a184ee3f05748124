//! Integration tests against the real local control plane (etcd +
//! kube-apiserver + kube-controller-manager). The first run on a machine
//! builds the binaries (20-30 min); later runs reuse the running "test"
//! cluster and take seconds. `DGL_TEST_KUBECONFIG` points them elsewhere.
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::await_condition;

#[tokio::test]
async fn lists_namespaces_and_reports_v1_33() {
    let cluster = localkube::ensure_cluster().await.expect("cluster");
    let client = cluster.client().await.expect("client");

    let version = client.apiserver_version().await.expect("/version");
    assert_eq!(version.major, "1");
    assert_eq!(version.minor, "33");
    if cluster.state_dir.is_some() {
        // Our own build: the ldflags stamped the exact release.
        assert_eq!(version.git_version, localkube::KUBERNETES_VERSION);
    } else {
        assert!(version.git_version.starts_with("v1.33."), "{version:?}");
    }

    let names: Vec<String> = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .expect("list namespaces")
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect();
    for ns in ["default", "kube-system", "kube-public"] {
        assert!(names.iter().any(|n| n == ns), "{ns} missing from {names:?}");
    }
}

fn config_map(name: &str, owner: Option<&ConfigMap>) -> ConfigMap {
    let mut value = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name },
        "data": { "k": "v" },
    });
    if let Some(owner) = owner {
        value["metadata"]["ownerReferences"] = serde_json::json!([{
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner.metadata.name,
            "uid": owner.metadata.uid,
        }]);
    }
    serde_json::from_value(value).expect("valid ConfigMap")
}

#[tokio::test]
async fn garbage_collector_deletes_dependents() {
    let client = localkube::test_client().await.expect("client");
    let ns = localkube::create_test_namespace(&client, "gc")
        .await
        .expect("namespace");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    let owner = cms
        .create(&PostParams::default(), &config_map("owner", None))
        .await
        .expect("owner");
    cms.create(&PostParams::default(), &config_map("child", Some(&owner)))
        .await
        .expect("child");

    cms.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    // Only kube-controller-manager's garbage collector deletes the child.
    let gone = await_condition(cms.clone(), "child", |o: Option<&ConfigMap>| o.is_none());
    tokio::time::timeout(Duration::from_secs(60), gone)
        .await
        .expect("child ConfigMap was not garbage collected within 60s")
        .expect("watch");

    localkube::delete_namespace(&client, &ns)
        .await
        .expect("cleanup");
}

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.localkube.test.dgl-operator.io
spec:
  group: localkube.test.dgl-operator.io
  scope: Namespaced
  names: { plural: widgets, singular: widget, kind: Widget }
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: { type: integer, minimum: 1 }
---
"#;

#[tokio::test]
async fn applies_crds_and_validates_against_the_schema() {
    let client = localkube::test_client().await.expect("client");
    let names = localkube::apply_crds(&client, WIDGET_CRD)
        .await
        .expect("apply CRD");
    assert_eq!(names, vec!["widgets.localkube.test.dgl-operator.io"]);
    // Applying again is a no-op, not an error (tests share one cluster).
    localkube::apply_crds(&client, WIDGET_CRD)
        .await
        .expect("re-apply CRD");

    let ns = localkube::create_test_namespace(&client, "crd")
        .await
        .expect("namespace");
    let gvk = GroupVersionKind::gvk("localkube.test.dgl-operator.io", "v1", "Widget");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk(&gvk));
    let widget = |size: i64| {
        serde_json::from_value::<DynamicObject>(serde_json::json!({
            "apiVersion": "localkube.test.dgl-operator.io/v1",
            "kind": "Widget",
            "metadata": { "name": format!("w{size}") },
            "spec": { "size": size },
        }))
        .expect("valid object")
    };
    api.create(&PostParams::default(), &widget(3))
        .await
        .expect("valid widget accepted");
    let err = api
        .create(&PostParams::default(), &widget(0))
        .await
        .expect_err("size 0 must be refused by the schema");
    assert!(err.to_string().contains("spec.size"), "{err}");

    localkube::delete_namespace(&client, &ns)
        .await
        .expect("cleanup");
}

#[test]
fn apply_crds_refuses_other_kinds() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(async {
        // A client for a server that is never contacted: the kind check comes first.
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    });
    let err = rt
        .block_on(localkube::apply_crds(
            &client,
            "apiVersion: v1\nkind: ConfigMap\n",
        ))
        .unwrap_err();
    assert!(err.to_string().contains("ConfigMap"), "{err}");
}
