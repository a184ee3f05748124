//! runPolicy.schedulingPolicy with a gang scheduler's PodGroup CRD installed.

mod common;

use common::Env;
use dgl_api::{RunPolicy, SchedulingPolicy};
use dgl_operator::pure::settings::{BuildConfig, GangScheduler};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::ResourceExt;

/// Volcano's PodGroup CRD, reduced to what the API server needs to store one.
const VOLCANO_PODGROUP_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: podgroups.scheduling.volcano.sh
spec:
  group: scheduling.volcano.sh
  names: { kind: PodGroup, plural: podgroups, singular: podgroup }
  scope: Namespaced
  versions:
    - name: v1beta1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

#[tokio::test]
async fn volcano_pod_group_and_pod_annotations() {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let client = cluster.client().await.unwrap();
    localkube::apply_crds(&client, VOLCANO_PODGROUP_CRD)
        .await
        .unwrap();
    let env = Env::with_build(
        "op-gang",
        BuildConfig {
            gang: Some(GangScheduler::Volcano),
            ..Default::default()
        },
    )
    .await;
    env.create_job("gang", |j| {
        j.spec.run_policy = Some(RunPolicy {
            scheduling_policy: Some(SchedulingPolicy {
                min_available: Some(3),
                queue: Some("research".into()),
                ..Default::default()
            }),
            ..Default::default()
        })
    })
    .await;
    let pod = env.wait_pod("gang-partitioner").await;
    assert_eq!(pod.annotations()["scheduling.k8s.io/group-name"], "gang");
    assert_eq!(pod.spec.unwrap().scheduler_name.as_deref(), Some("volcano"));

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.volcano.sh", "v1beta1", "PodGroup"),
        "podgroups",
    );
    let groups: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &env.ns, &ar);
    let group = groups
        .get("gang")
        .await
        .expect("a PodGroup named after the job");
    assert_eq!(group.data["spec"]["minMember"], 3);
    assert_eq!(group.data["spec"]["queue"], "research");
    assert!(group
        .owner_references()
        .iter()
        .any(|o| o.kind == "DGLJob" && o.controller == Some(true)));
}
