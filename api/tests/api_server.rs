//! The DGLJob API against a real kube-apiserver (started or reused by
//! localkube): the seed's YAML is accepted, malformed objects are refused with
//! a message naming the field, and every field round-trips.

use std::collections::BTreeMap;

use dgl_api::*;
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

const SEED: &str = include_str!("../../examples/seed-dgljob.yaml");

async fn setup(prefix: &str) -> (Client, String) {
    let cluster = localkube::ensure_cluster()
        .await
        .expect("test control plane");
    let client = cluster.client().await.expect("client");
    localkube::apply_crds(&client, &crd_yaml())
        .await
        .expect("CRD installs and becomes Established");
    let ns = localkube::create_test_namespace(&client, prefix)
        .await
        .expect("namespace");
    (client, ns)
}

fn dynamic_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<DGLJob>(&()))
}

/// The seed as raw JSON, placed in the test's namespace.
fn seed_json(ns: &str, name: &str) -> Value {
    let mut v: Value = serde_yaml::from_str(SEED).expect("seed YAML parses");
    v["metadata"]["namespace"] = json!(ns);
    v["metadata"]["name"] = json!(name);
    v
}

async fn create_raw(api: &Api<DynamicObject>, v: Value) -> Result<DynamicObject, kube::Error> {
    let obj: DynamicObject = serde_json::from_value(v).expect("a JSON object");
    api.create(&PostParams::default(), &obj).await
}

#[tokio::test]
async fn seed_yaml_is_accepted_as_written() {
    let (client, ns) = setup("api-seed").await;
    let created = create_raw(&dynamic_api(&client, &ns), seed_json(&ns, "dgl-graphsage"))
        .await
        .expect("the seed's DGLJob is accepted");
    assert_eq!(created.name_any(), "dgl-graphsage");

    // Read back through the typed API: defaults and values as the seed says.
    let job = Api::<DGLJob>::namespaced(client, &ns)
        .get("dgl-graphsage")
        .await
        .expect("typed get");
    assert_eq!(job.spec.clean_pod_policy, CleanPodPolicy::Running);
    assert_eq!(job.spec.partition_mode, PartitionMode::DglApi);
    assert_eq!(job.spec.num_workers(), 2);
    let launcher = job.spec.replica_spec(ReplicaType::Launcher).unwrap();
    let c = &launcher.template.spec.as_ref().unwrap().containers[0];
    assert_eq!(c.command.as_deref(), Some(&["dglrun".to_string()][..]));
    assert_eq!(c.args.as_ref().unwrap().len(), 12);
}

/// Each case: what to change in the seed, and a piece of the API server's
/// answer that names the offending field.
/// (what is wrong, how to break the seed, what the refusal must say)
type Case = (&'static str, Box<dyn Fn(&mut Value)>, &'static str);

fn malformed_cases() -> Vec<Case> {
    vec![
        (
            "no Launcher",
            Box::new(|v| {
                drop(
                    v["spec"]["dglReplicaSpecs"]
                        .as_object_mut()
                        .unwrap()
                        .remove("Launcher"),
                )
            }),
            "spec.dglReplicaSpecs.Launcher: is required",
        ),
        (
            "two Launchers",
            Box::new(|v| v["spec"]["dglReplicaSpecs"]["Launcher"]["replicas"] = json!(2)),
            "spec.dglReplicaSpecs.Launcher.replicas: must be exactly 1",
        ),
        (
            "no Worker",
            Box::new(|v| {
                drop(
                    v["spec"]["dglReplicaSpecs"]
                        .as_object_mut()
                        .unwrap()
                        .remove("Worker"),
                )
            }),
            "spec.dglReplicaSpecs.Worker: is required",
        ),
        (
            "zero Workers",
            Box::new(|v| v["spec"]["dglReplicaSpecs"]["Worker"]["replicas"] = json!(0)),
            "spec.dglReplicaSpecs.Worker.replicas: must be at least 1",
        ),
        (
            "two Partitioners",
            Box::new(|v| {
                let launcher = v["spec"]["dglReplicaSpecs"]["Launcher"].clone();
                v["spec"]["dglReplicaSpecs"]["Partitioner"] = launcher;
                v["spec"]["dglReplicaSpecs"]["Partitioner"]["replicas"] = json!(2);
            }),
            "spec.dglReplicaSpecs.Partitioner.replicas: must be 0 or 1",
        ),
        (
            "unknown role",
            Box::new(|v| {
                let w = v["spec"]["dglReplicaSpecs"]["Worker"].clone();
                v["spec"]["dglReplicaSpecs"]["Server"] = w;
            }),
            "the only allowed keys are Launcher, Worker and Partitioner",
        ),
        (
            "unknown partitionMode",
            Box::new(|v| v["spec"]["partitionMode"] = json!("METIS")),
            "spec.partitionMode: Unsupported value: \"METIS\"",
        ),
        (
            "unknown cleanPodPolicy",
            Box::new(|v| v["spec"]["cleanPodPolicy"] = json!("Sometimes")),
            "spec.cleanPodPolicy: Unsupported value: \"Sometimes\"",
        ),
        (
            "negative backoffLimit",
            Box::new(|v| v["spec"]["runPolicy"] = json!({"backoffLimit": -1})),
            "spec.runPolicy.backoffLimit: Invalid value: -1",
        ),
        (
            "negative ttlSecondsAfterFinished",
            Box::new(|v| v["spec"]["runPolicy"] = json!({"ttlSecondsAfterFinished": -5})),
            "spec.runPolicy.ttlSecondsAfterFinished: Invalid value: -5",
        ),
        (
            "zero activeDeadlineSeconds",
            Box::new(|v| v["spec"]["runPolicy"] = json!({"activeDeadlineSeconds": 0})),
            "spec.runPolicy.activeDeadlineSeconds: Invalid value: 0",
        ),
        (
            "zero slotsPerWorker",
            Box::new(|v| v["spec"]["slotsPerWorker"] = json!(0)),
            "spec.slotsPerWorker: Invalid value: 0",
        ),
        (
            "replicas is not a number",
            Box::new(|v| v["spec"]["dglReplicaSpecs"]["Worker"]["replicas"] = json!("two")),
            "spec.dglReplicaSpecs.Worker.replicas: Invalid value: \"string\"",
        ),
        (
            "no template",
            Box::new(|v| {
                drop(
                    v["spec"]["dglReplicaSpecs"]["Worker"]
                        .as_object_mut()
                        .unwrap()
                        .remove("template"),
                )
            }),
            "spec.dglReplicaSpecs.Worker.template: Required value",
        ),
        (
            "no containers",
            Box::new(|v| {
                v["spec"]["dglReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = json!([])
            }),
            "template.spec.containers: must contain at least one container",
        ),
        (
            "Partitioner in Skip mode",
            Box::new(|v| {
                v["spec"]["partitionMode"] = json!("Skip");
                let launcher = v["spec"]["dglReplicaSpecs"]["Launcher"].clone();
                v["spec"]["dglReplicaSpecs"]["Partitioner"] = launcher;
            }),
            "spec.dglReplicaSpecs.Partitioner: must not be set when spec.partitionMode is Skip",
        ),
        (
            "Partitioner in DistParMETIS mode",
            Box::new(|v| {
                v["spec"]["partitionMode"] = json!("DistParMETIS");
                let launcher = v["spec"]["dglReplicaSpecs"]["Launcher"].clone();
                v["spec"]["dglReplicaSpecs"]["Partitioner"] = launcher;
            }),
            rules::NO_PARTITIONER_WITH_DISTPARMETIS.message,
        ),
        (
            "GraphBolt in DistParMETIS mode",
            Box::new(|v| {
                v["spec"]["partitionMode"] = json!("DistParMETIS");
                v["spec"]["useGraphbolt"] = json!(true);
            }),
            rules::GRAPHBOLT_NOT_WITH_DISTPARMETIS.message,
        ),
        (
            "GraphBolt without workers",
            Box::new(|v| {
                v["spec"]["partitionMode"] = json!("Skip");
                v["spec"]["useGraphbolt"] = json!(true);
                let specs = v["spec"]["dglReplicaSpecs"].as_object_mut().unwrap();
                drop(specs.remove("Worker"));
            }),
            rules::GRAPHBOLT_NEEDS_WORKERS.message,
        ),
        (
            "minAvailable above the job's pod count",
            Box::new(|v| v["spec"]["runPolicy"] = json!({"schedulingPolicy": {"minAvailable": 9}})),
            "spec.runPolicy.schedulingPolicy.minAvailable: must not exceed",
        ),
        (
            "name too long for pod names",
            Box::new(|v| v["metadata"]["name"] = json!("a".repeat(51))),
            "metadata.name: must be at most 50 characters",
        ),
        (
            "no spec",
            Box::new(|v| drop(v.as_object_mut().unwrap().remove("spec"))),
            "spec: Required value",
        ),
        (
            "name starting with a digit (no Service may have it)",
            Box::new(|v| v["metadata"]["name"] = json!("1job")),
            "metadata.name: must be a DNS-1035 label",
        ),
        (
            "name with a dot (no Service may have it)",
            Box::new(|v| v["metadata"]["name"] = json!("a.job")),
            "metadata.name: must be a DNS-1035 label",
        ),
        (
            "more workers than the ConfigMap can list",
            Box::new(|v| v["spec"]["dglReplicaSpecs"]["Worker"]["replicas"] = json!(4097)),
            "spec.dglReplicaSpecs.Worker.replicas in body should be less than or equal to 4096",
        ),
    ]
}

#[tokio::test]
async fn malformed_jobs_are_refused_naming_the_field() {
    let (client, ns) = setup("api-bad").await;
    let api = dynamic_api(&client, &ns);
    let cases = malformed_cases();
    assert!(cases.len() >= 10);
    let mut failures = Vec::new();
    for (i, (what, mutate, expected)) in cases.iter().enumerate() {
        let mut v = seed_json(&ns, &format!("bad-{i}"));
        mutate(&mut v);
        match create_raw(&api, v).await {
            Ok(_) => failures.push(format!("{what}: was accepted")),
            Err(kube::Error::Api(status)) => {
                if status.code != 422 || !status.message.contains(expected) {
                    failures.push(format!(
                        "{what}: expected 422 with {expected:?}, got {}: {}",
                        status.code, status.message
                    ));
                }
            }
            Err(e) => failures.push(format!("{what}: unexpected error {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn template(image: &str, env: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(kube::api::ObjectMeta {
            labels: Some(BTreeMap::from([("team".to_string(), "graph".to_string())])),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some(image.into()),
                command: Some(vec!["dglrun".into()]),
                args: Some(vec!["--graph-name".into(), "g".into()]),
                env: Some(vec![EnvVar {
                    name: "ROLE_HINT".into(),
                    value: Some(env.into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn every_field_round_trips() {
    let (client, ns) = setup("api-roundtrip").await;
    let api = Api::<DGLJob>::namespaced(client, &ns);
    let spec = DGLJobSpec {
        clean_pod_policy: CleanPodPolicy::All,
        partition_mode: PartitionMode::DglApi,
        dgl_replica_specs: BTreeMap::from([
            (
                ReplicaType::Launcher,
                ReplicaSpec {
                    replicas: Some(1),
                    template: template("l:1", "launcher"),
                },
            ),
            (
                ReplicaType::Worker,
                ReplicaSpec {
                    replicas: Some(3),
                    template: template("w:1", "worker"),
                },
            ),
            (
                ReplicaType::Partitioner,
                ReplicaSpec {
                    replicas: Some(1),
                    template: template("p:1", "partitioner"),
                },
            ),
        ]),
        slots_per_worker: Some(2),
        run_policy: Some(RunPolicy {
            ttl_seconds_after_finished: Some(60),
            active_deadline_seconds: Some(3600),
            backoff_limit: Some(3),
            suspend: Some(true),
            scheduling_policy: Some(SchedulingPolicy {
                min_available: Some(4),
                queue: Some("research".into()),
                priority_class: Some("high".into()),
                schedule_timeout_seconds: Some(120),
            }),
            pod_failure_policy: Some(
                serde_json::from_value(serde_json::json!({"rules": [
                    {"action": "FailJob", "onExitCodes":
                        {"containerName": "main", "operator": "In", "values": [1, 42]}},
                    {"action": "Ignore", "onPodConditions":
                        [{"type": "DisruptionTarget", "status": "True"}]},
                    {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0]}}
                ]}))
                .expect("a valid policy"),
            ),
            pod_start_timeout_seconds: Some(120),
        }),
        use_graphbolt: Some(true),
        worker_creation_policy: Some(WorkerCreationPolicy::AfterPartitioning),
        managed_by: Some("kueue.x-k8s.io/multikueue".into()),
        partition_cache: None,
    };
    let job = DGLJob::new("roundtrip", spec.clone());
    let created = api
        .create(&PostParams::default(), &job)
        .await
        .expect("create");
    assert_eq!(created.spec, spec, "spec changed on create");
    let fetched = api.get("roundtrip").await.expect("get");
    assert_eq!(fetched.spec, spec, "spec changed on read");

    // Status goes through the status subresource and comes back intact.
    let now = Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap());
    let status = DGLJobStatus {
        conditions: vec![Condition {
            type_: "Created".into(),
            status: "True".into(),
            reason: "JobCreated".into(),
            message: "DGLJob roundtrip is created.".into(),
            last_transition_time: now.clone(),
            observed_generation: Some(1),
        }],
        replica_statuses: BTreeMap::from([
            (
                ReplicaType::Worker,
                ReplicaStatus {
                    active: 2,
                    succeeded: 1,
                    failed: 0,
                },
            ),
            (
                ReplicaType::Launcher,
                ReplicaStatus {
                    active: 1,
                    succeeded: 0,
                    failed: 0,
                },
            ),
        ]),
        start_time: Some(now.clone()),
        completion_time: Some(now.clone()),
        phase: Some(JobPhase::Running),
        restart_count: Some(1),
        ignored_restarts: Some(1),
        observed_generation: Some(1),
        // Numbers come back bit for bit (else an unchanged report would
        // look changed and be written again and again).
        progress: Some(JobProgress {
            epoch: 3,
            epochs: Some(10),
            loss: Some(0.1 + 0.2),
            throughput: Some(1_234.567_890_123_456_7),
            unit: Some("samples/s".into()),
            progress_percentage: Some(30),
            estimated_remaining_seconds: Some(130),
            first_report: Some(ProgressMark {
                epoch: 1,
                seen_at: now.clone(),
            }),
            summary: "epoch 3/10 (30%, ~2m10s left)".into(),
            updated_at: Some(now),
        }),
        queue: Some(QueueStatus {
            local_queue: "team-a".into(),
            workload: "dgljob-roundtrip".into(),
            cluster_queue: Some("cluster".into()),
            admitted: true,
            summary: "admitted via team-a".into(),
        }),
    };
    let patch =
        json!({"apiVersion": "dgloperator.io/v1alpha1", "kind": "DGLJob", "status": status});
    api.patch_status(
        "roundtrip",
        &PatchParams::apply("roundtrip-test").force(),
        &Patch::Apply(&patch),
    )
    .await
    .expect("status patch");
    let fetched = api.get("roundtrip").await.expect("get");
    assert_eq!(fetched.status.as_ref(), Some(&status));
    assert_eq!(fetched.spec, spec, "status write changed the spec");
}

#[tokio::test]
async fn every_example_job_is_accepted() {
    let (client, ns) = setup("api-examples").await;
    let api = dynamic_api(&client, &ns);
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")
        .expect("cargo sets CARGO_MANIFEST_DIR when it runs a test");
    let root = format!("{manifest_dir}/../examples");
    let mut files = vec![format!("{root}/seed-dgljob.yaml")];
    for entry in std::fs::read_dir(&root).unwrap() {
        let job = entry.unwrap().path().join("dgljob.yaml");
        if job.is_file() {
            files.push(job.display().to_string());
        }
    }
    assert!(files.len() >= 2, "examples/*/dgljob.yaml exist: {files:?}");
    for f in files {
        let mut v: Value = serde_yaml::from_str(&std::fs::read_to_string(&f).unwrap())
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        v["metadata"]["namespace"] = json!(ns);
        create_raw(&api, v)
            .await
            .unwrap_or_else(|e| panic!("{f} refused: {e}"));
    }
}

/// `replicas`, `partitionMode` and `useGraphbolt` cannot change once the job
/// exists: an update is refused with a message naming the field; other edits
/// pass (spelling out a default is no change).
#[tokio::test]
async fn replicas_and_partition_mode_are_immutable() {
    let (client, ns) = setup("api-immutable").await;
    let api = dynamic_api(&client, &ns);
    create_raw(&api, seed_json(&ns, "fixed")).await.unwrap();
    let refused = |patch: Value, expected: &'static str| {
        let api = api.clone();
        async move {
            match api
                .patch("fixed", &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Err(kube::Error::Api(s)) => {
                    assert_eq!(s.code, 422, "{}", s.message);
                    assert!(s.message.contains(expected), "{}", s.message);
                }
                other => panic!("expected a refusal naming {expected}, got {other:?}"),
            }
        }
    };
    refused(
        json!({"spec": {"dglReplicaSpecs": {"Worker": {"replicas": 3}}}}),
        "spec.dglReplicaSpecs.Worker.replicas: is immutable",
    )
    .await;
    // Unset means 1: removing it is a change too.
    refused(
        json!({"spec": {"dglReplicaSpecs": {"Worker": {"replicas": null}}}}),
        "spec.dglReplicaSpecs.Worker.replicas: is immutable",
    )
    .await;
    refused(
        json!({"spec": {"partitionMode": "Skip"}}),
        "spec.partitionMode: is immutable",
    )
    .await;
    // Unset means false: setting it is a change, though the field was absent.
    refused(
        json!({"spec": {"useGraphbolt": true}}),
        "spec.useGraphbolt: is immutable",
    )
    .await;
    // Anything else may change.
    api.patch(
        "fixed",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"runPolicy": {"suspend": true}, "useGraphbolt": false, "dglReplicaSpecs": {"Worker": {"replicas": 2}}}})),
    )
    .await
    .expect("an edit that keeps replicas and partitionMode is accepted");
}
