//! The CRD's rules against a real API server (issue #25, item 5): a Worker
//! or Partitioner template naming a launcher's ServiceAccount is refused,
//! naming the field, and the pod counts stay what they were created with,
//! also when a replica spec is added or removed.

use dgl_api::{DGLJob, PartitionMode, ReplicaType};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

const SEED: &str = include_str!("../../examples/seed-dgljob.yaml");

async fn setup(prefix: &str) -> (Api<DGLJob>, String) {
    let cluster = localkube::ensure_cluster().await.unwrap();
    let client: Client = cluster.client().await.unwrap();
    localkube::apply_crds(&client, &dgl_api::crd_yaml())
        .await
        .unwrap();
    let ns = localkube::create_test_namespace(&client, prefix)
        .await
        .unwrap();
    (Api::namespaced(client, &ns), ns)
}

fn seed(name: &str, f: impl FnOnce(&mut DGLJob)) -> DGLJob {
    let mut job: DGLJob = serde_yaml::from_str(SEED).unwrap();
    job.metadata.name = Some(name.into());
    // The seed names a namespace; each test has its own.
    job.metadata.namespace = None;
    f(&mut job);
    job
}

/// The API server's refusal of `job`: its message.
async fn create_refused(jobs: &Api<DGLJob>, job: &DGLJob) -> String {
    match jobs.create(&PostParams::default(), job).await {
        Err(kube::Error::Api(e)) => e.message,
        other => panic!("created: {other:?}"),
    }
}

async fn patch(jobs: &Api<DGLJob>, name: &str, p: Value) -> Result<DGLJob, String> {
    jobs.patch(name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .map_err(|e| e.to_string())
}

fn with_partitioner(job: &mut DGLJob) {
    let launcher = job.spec.dgl_replica_specs[&ReplicaType::Launcher].clone();
    job.spec
        .dgl_replica_specs
        .insert(ReplicaType::Partitioner, launcher);
}

#[tokio::test]
async fn a_template_naming_a_launchers_account_is_refused_by_the_crd() {
    let (jobs, _) = setup("rules-sa").await;
    let job = seed("thief", |j| {
        let w = j.spec.dgl_replica_specs.get_mut(&ReplicaType::Worker);
        w.unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .service_account_name = Some("victim-launcher".into());
    });
    let m = create_refused(&jobs, &job).await;
    assert!(
        m.contains("spec.dglReplicaSpecs.Worker.template.spec.serviceAccountName: must not name a launcher's ServiceAccount"),
        "{m}"
    );
    let job = seed("thief2", |j| {
        with_partitioner(j);
        let p = j.spec.dgl_replica_specs.get_mut(&ReplicaType::Partitioner);
        p.unwrap().template.spec.as_mut().unwrap().service_account = Some("victim-launcher".into());
    });
    let m = create_refused(&jobs, &job).await;
    assert!(
        m.contains("spec.dglReplicaSpecs.Partitioner.template.spec."),
        "{m}"
    );

    // Another account is the user's to choose, also added later.
    let job = seed("honest", |_| {});
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let sa = |name: &str| json!({"spec": {"dglReplicaSpecs": {"Worker": {"template": {"spec": {"serviceAccountName": name}}}}}});
    patch(&jobs, "honest", sa("reader")).await.unwrap();
    let m = patch(&jobs, "honest", sa("honest-launcher"))
        .await
        .unwrap_err();
    assert!(m.contains("serviceAccountName: must not name"), "{m}");
}

#[tokio::test]
async fn replica_counts_are_immutable_also_by_adding_or_removing_a_spec() {
    let (jobs, _) = setup("rules-replicas").await;
    let pp = PostParams::default();
    let immutable = "replicas: is immutable";

    // A standalone-capable mode, so that only the new rule can refuse.
    let job = seed("skip", |j| j.spec.partition_mode = PartitionMode::Skip);
    jobs.create(&pp, &job).await.unwrap();
    let m = patch(
        &jobs,
        "skip",
        json!({"spec": {"dglReplicaSpecs": {"Worker": null}}}),
    )
    .await
    .unwrap_err();
    assert!(
        m.contains(&format!("spec.dglReplicaSpecs.Worker.{immutable}")),
        "{m}"
    );
    let m = patch(
        &jobs,
        "skip",
        json!({"spec": {"dglReplicaSpecs": {"Worker": {"replicas": 3}}}}),
    )
    .await
    .unwrap_err();
    assert!(m.contains(immutable), "{m}");

    // Workers added to a job created without them.
    let job = seed("alone", |j| {
        j.spec.partition_mode = PartitionMode::Skip;
        j.spec.dgl_replica_specs.remove(&ReplicaType::Worker);
    });
    jobs.create(&pp, &job).await.unwrap();
    let worker =
        serde_json::to_value(&seed("x", |_| {}).spec.dgl_replica_specs[&ReplicaType::Worker])
            .unwrap();
    let m = patch(
        &jobs,
        "alone",
        json!({"spec": {"dglReplicaSpecs": {"Worker": worker}}}),
    )
    .await
    .unwrap_err();
    assert!(
        m.contains(&format!("spec.dglReplicaSpecs.Worker.{immutable}")),
        "{m}"
    );

    // A Partitioner spec of 0 replicas added (1 pod → 0), or removed (0 → 1).
    let job = seed("dglapi", |_| {});
    jobs.create(&pp, &job).await.unwrap();
    let mut none =
        seed("x", with_partitioner).spec.dgl_replica_specs[&ReplicaType::Partitioner].clone();
    none.replicas = Some(0);
    let none = serde_json::to_value(&none).unwrap();
    let m = patch(
        &jobs,
        "dglapi",
        json!({"spec": {"dglReplicaSpecs": {"Partitioner": none}}}),
    )
    .await
    .unwrap_err();
    assert!(
        m.contains(&format!("spec.dglReplicaSpecs.Partitioner.{immutable}")),
        "{m}"
    );
    let job = seed("zero", |j| {
        with_partitioner(j);
        j.spec
            .dgl_replica_specs
            .get_mut(&ReplicaType::Partitioner)
            .unwrap()
            .replicas = Some(0);
    });
    jobs.create(&pp, &job).await.unwrap();
    let m = patch(
        &jobs,
        "zero",
        json!({"spec": {"dglReplicaSpecs": {"Partitioner": null}}}),
    )
    .await
    .unwrap_err();
    assert!(m.contains(immutable), "{m}");

    // The same count spelled out is no change: the template may be given.
    let mut one =
        seed("x", with_partitioner).spec.dgl_replica_specs[&ReplicaType::Partitioner].clone();
    one.replicas = Some(1);
    let one = serde_json::to_value(&one).unwrap();
    patch(
        &jobs,
        "dglapi",
        json!({"spec": {"dglReplicaSpecs": {"Partitioner": one}}}),
    )
    .await
    .expect("a Partitioner spec of the job's one partitioner");
}

/// `spec.partitionCache` (#35 item 4): the API server evaluates the
/// generated CEL (a list membership) as the operator reads the rule: the
/// native modes keep it, DGL-API and Skip are refused naming the field and
/// the modes allowed.
#[tokio::test]
async fn a_partition_cache_needs_a_native_partition_mode() {
    let (jobs, _) = setup("rules-cache").await;
    let cached = |name: &str, mode: PartitionMode| {
        seed(name, |j| {
            j.spec.partition_mode = mode;
            j.spec.partition_cache = Some(dgl_api::PartitionCacheSpec {
                url: "s3://graphs/cache".into(),
                credentials_secret: Some("keys".into()),
            });
        })
    };
    for (name, mode) in [
        ("par", PartitionMode::ParMetis),
        ("dist", PartitionMode::DistParMetis),
    ] {
        jobs.create(&PostParams::default(), &cached(name, mode))
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
    }
    let want = dgl_api::rules::PARTITION_CACHE_NEEDS_NATIVE_PARTITIONER.message;
    assert!(want.contains("ParMETIS or DistParMETIS"), "{want}");
    for (name, mode) in [
        ("api", PartitionMode::DglApi),
        ("skip", PartitionMode::Skip),
    ] {
        let m = create_refused(&jobs, &cached(name, mode)).await;
        assert!(m.contains(want), "{mode}: {m}");
    }
}
