use super::*;
use dgl_api::names::{launcher_name, partitioner_name, worker_name};
use dgl_api::PartitionMode;
use serde_json::json;

const JOB: &str = "dgl-graphsage";

fn job() -> DGLJob {
    let mut job: DGLJob =
        serde_yaml::from_str(include_str!("../../../../examples/seed-dgljob.yaml")).unwrap();
    job.metadata.uid = Some("uid-1".into());
    job.metadata.generation = Some(1);
    job.labels_mut().insert(QUEUE_LABEL.into(), "team-a".into());
    // Requests on the workers, which Kueue counts against the quota.
    let w = job
        .spec
        .dgl_replica_specs
        .get_mut(&ReplicaType::Worker)
        .unwrap();
    w.template.spec.as_mut().unwrap().containers[0].resources =
        Some(serde_json::from_value(json!({"requests": {"cpu": "2", "memory": "1Gi"}})).unwrap());
    job
}

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn cond(type_: &str, status: bool, reason: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: format!("{type_} {reason}"),
        last_transition_time: Time(t(0)),
        observed_generation: Some(1),
    }
}

/// A Workload with these conditions and, when `admitted`, an admission that
/// puts the workers on flavor `gpu` and the rest on `default`.
fn workload(conds: Vec<Condition>, admitted: bool) -> Workload {
    let admission = admitted.then(|| Admission {
        cluster_queue: "cluster".into(),
        pod_set_assignments: vec![
            PodSetAssignment {
                name: "launcher".into(),
                flavors: BTreeMap::from([("cpu".into(), "default".into())]),
            },
            PodSetAssignment {
                name: "worker".into(),
                flavors: BTreeMap::from([
                    ("cpu".into(), "gpu".into()),
                    ("memory".into(), "gpu".into()),
                ]),
            },
        ],
    });
    Workload {
        metadata: ObjectMeta {
            name: Some(workload_name(JOB)),
            resource_version: Some("42".into()),
            generation: Some(1),
            ..Default::default()
        },
        status: WorkloadStatus {
            conditions: conds,
            admission,
        },
    }
}

fn admitted() -> Workload {
    workload(
        vec![
            cond("QuotaReserved", true, "QuotaReserved"),
            cond("Admitted", true, "Admitted"),
        ],
        true,
    )
}

fn evicted(reason: &str) -> Workload {
    let mut w = admitted();
    w.status.conditions.push(cond("Evicted", true, reason));
    w
}

fn flavors() -> BTreeMap<String, Flavor> {
    BTreeMap::from([
        ("default".into(), Flavor::default()),
        (
            "gpu".into(),
            serde_json::from_value(json!({
                "nodeLabels": {"pool": "gpu"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            }))
            .unwrap(),
        ),
    ])
}

/// An observed pod of `role` in `state` (through `from_pod`, as the cache
/// makes them).
fn pod(role: ReplicaType, index: i32, state: PodState) -> ObservedPod {
    let name = match role {
        ReplicaType::Launcher => launcher_name(JOB),
        ReplicaType::Partitioner => partitioner_name(JOB),
        ReplicaType::Worker => worker_name(JOB, index),
    };
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            dgl_api::names::LABEL_REPLICA_TYPE: role.label_value(),
            dgl_api::names::LABEL_REPLICA_INDEX: index.to_string(),
        }},
    }))
    .unwrap();
    let mut o = ObservedPod::from_pod(&pod).expect("a pod of the job");
    o.state = state;
    o
}

#[test]
fn queue_label_decides_whether_the_job_is_under_kueue() {
    assert_eq!(queue_name(&job()), Some("team-a"));
    let mut j = job();
    j.labels_mut().insert(QUEUE_LABEL.into(), String::new());
    assert_eq!(queue_name(&j), None, "an empty queue name is no queue");
    j.labels_mut().remove(QUEUE_LABEL);
    assert_eq!(queue_name(&j), None);
}

#[test]
fn workload_has_one_pod_set_per_role_with_counts_and_requests() {
    let w = desired_workload(&job(), None);
    assert_eq!(w["apiVersion"], "kueue.x-k8s.io/v1beta2");
    assert_eq!(w["kind"], "Workload");
    assert_eq!(w["metadata"]["name"], "dgljob-dgl-graphsage");
    let owner = &w["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "DGLJob");
    assert_eq!(owner["controller"], true);
    assert_eq!(owner["uid"], "uid-1");
    assert_eq!(w["spec"]["queueName"], "team-a");
    let sets = w["spec"]["podSets"].as_array().unwrap();
    let names: Vec<&str> = sets.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["launcher", "worker", "partitioner"]);
    let counts: Vec<i64> = sets.iter().map(|s| s["count"].as_i64().unwrap()).collect();
    assert_eq!(counts, [1, 2, 1]);
    let req = &sets[1]["template"]["spec"]["containers"][0]["resources"]["requests"];
    assert_eq!(req["cpu"], "2");
    assert_eq!(req["memory"], "1Gi");
    // The partitioner without a template of its own is built from the workers'.
    assert_eq!(sets[2]["template"], sets[1]["template"]);
    assert!(w["spec"].get("priority").is_none());
}

#[test]
fn workload_has_no_partitioner_pod_set_where_the_mode_has_none() {
    for mode in [PartitionMode::Skip, PartitionMode::DistParMetis] {
        let mut j = job();
        j.spec.partition_mode = mode;
        let w = desired_workload(&j, None);
        let names: Vec<&str> = w["spec"]["podSets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["launcher", "worker"], "{mode}");
    }
}

#[test]
fn workload_carries_the_priority_class_and_its_value() {
    let p = Priority {
        class: "high".into(),
        value: 1000,
    };
    let w = desired_workload(&job(), Some(&p));
    assert_eq!(
        w["spec"]["priorityClassRef"],
        json!({"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"})
    );
    assert_eq!(w["spec"]["priority"], 1000);
}

#[test]
fn state_follows_the_workload_conditions() {
    assert_eq!(state(None), State::NoWorkload);
    assert_eq!(state(Some(&workload(vec![], false))), State::Pending);
    // Quota reserved but admission checks pending: not admitted yet.
    let reserved = workload(vec![cond("QuotaReserved", true, "QuotaReserved")], true);
    assert_eq!(state(Some(&reserved)), State::Pending);
    assert_eq!(
        state(Some(&admitted())),
        State::Admitted {
            cluster_queue: "cluster".into()
        }
    );
    assert_eq!(
        state(Some(&evicted("PodsReadyTimeout"))),
        State::Evicted {
            reason: "PodsReadyTimeout".into(),
            message: "Evicted PodsReadyTimeout".into()
        }
    );
    let mut done = evicted("Preempted");
    done.status
        .conditions
        .push(cond("Finished", true, "Succeeded"));
    assert_eq!(state(Some(&done)), State::Finished);
}

#[test]
fn a_job_waits_suspended_until_admitted() {
    for st in [
        State::NoWorkload,
        State::Pending,
        State::Finished,
        State::Evicted {
            reason: "Preempted".into(),
            message: "m".into(),
        },
    ] {
        let g = gated_job(&job(), &st, None, &BTreeMap::new());
        assert!(g.spec.suspended(), "{st:?}");
    }
    let mut j = job();
    j.spec
        .run_policy
        .get_or_insert_with(Default::default)
        .suspend = Some(true);
    let wl = admitted();
    let g = gated_job(&j, &state(Some(&wl)), Some(&wl), &flavors());
    assert!(
        !g.spec.suspended(),
        "admitted: runs even if it was suspended"
    );
}

#[test]
fn admitted_flavors_reach_the_roles_templates_once() {
    let wl = admitted();
    let g = gated_job(&job(), &state(Some(&wl)), Some(&wl), &flavors());
    let spec = |r| g.spec.dgl_replica_specs[&r].template.spec.clone().unwrap();
    let w = spec(ReplicaType::Worker);
    assert_eq!(
        w.node_selector,
        Some(BTreeMap::from([("pool".into(), "gpu".into())]))
    );
    // Two resources on flavor gpu: its toleration is added once.
    assert_eq!(w.tolerations.as_ref().map(Vec::len), Some(1));
    assert_eq!(w.tolerations.unwrap()[0].key.as_deref(), Some("gpu"));
    let l = spec(ReplicaType::Launcher);
    assert_eq!(l.node_selector, None, "flavor default has no node labels");
    assert_eq!(l.tolerations, None);
}

#[test]
fn queue_status_names_the_local_queue() {
    let (q, c) = queue_status(&job(), &State::Pending);
    assert_eq!(q.summary, "queued in team-a");
    assert!(!q.admitted);
    assert_eq!(q.workload, "dgljob-dgl-graphsage");
    assert_eq!((c.type_.as_str(), c.status.as_str()), ("Queued", "True"));
    assert_eq!(c.reason, "WaitingForAdmission");
    assert!(c.message.contains("LocalQueue team-a"), "{}", c.message);

    let st = state(Some(&admitted()));
    let (q, c) = queue_status(&job(), &st);
    assert_eq!(q.summary, "admitted via team-a");
    assert_eq!(q.cluster_queue.as_deref(), Some("cluster"));
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "Admitted")
    );

    let st = state(Some(&evicted("PodsReadyTimeout")));
    let (q, c) = queue_status(&job(), &st);
    assert_eq!(q.summary, "queued in team-a");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "EvictedPodsReadyTimeout")
    );
    assert!(
        c.message.contains("waits again in LocalQueue team-a"),
        "{}",
        c.message
    );
}

#[test]
fn set_condition_keeps_the_transition_time_of_an_unchanged_status() {
    let mut conds = vec![cond("Queued", true, "WaitingForAdmission")];
    set_condition(&mut conds, cond("Queued", true, "Other"), t(50));
    assert_eq!(conds[0].last_transition_time, Time(t(0)));
    assert_eq!(conds[0].reason, "Other");
    set_condition(&mut conds, cond("Queued", false, "Admitted"), t(60));
    assert_eq!(conds[0].last_transition_time, Time(t(60)));
    set_condition(&mut conds, cond("Other", true, "X"), t(70));
    assert_eq!(conds.len(), 2);
}

fn find<'a>(patch: &'a Value, type_: &str) -> &'a Value {
    patch["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no condition {type_} in {patch}"))
}

#[test]
fn evicted_workload_is_released_only_once_its_pods_are_gone() {
    let wl = evicted("PodsReadyTimeout");
    assert_eq!(workload_status_patch(&wl, None, 2, false, t(5)), None);
    let p = workload_status_patch(&wl, None, 0, false, t(5)).expect("a patch");
    assert_eq!(p["metadata"]["resourceVersion"], "42");
    assert!(p["status"]["admission"].is_null());
    assert!(p["status"].as_object().unwrap().contains_key("admission"));
    assert_eq!(find(&p, "QuotaReserved")["status"], "False");
    assert_eq!(find(&p, "Admitted")["status"], "False");
    assert_eq!(
        find(&p, "Requeued")["status"],
        "False",
        "a timeout: not requeued at once"
    );
    assert_eq!(
        find(&p, "Evicted")["status"],
        "True",
        "other conditions kept"
    );
    let p = workload_status_patch(&evicted("Preempted"), None, 0, false, t(5)).unwrap();
    assert_eq!(find(&p, "Requeued")["status"], "True");
}

#[test]
fn finished_job_finishes_its_workload_once() {
    let p = workload_status_patch(&admitted(), Some(Outcome::Succeeded), 3, true, t(9)).unwrap();
    let f = find(&p, "Finished");
    assert_eq!(
        (f["status"].as_str(), f["reason"].as_str()),
        (Some("True"), Some("Succeeded"))
    );
    assert!(p["status"].get("admission").is_none(), "admission kept");
    let mut done = admitted();
    done.status
        .conditions
        .push(cond("Finished", true, "Succeeded"));
    assert_eq!(
        workload_status_patch(&done, Some(Outcome::Succeeded), 0, true, t(9)),
        None
    );
    let p = workload_status_patch(
        &workload(vec![], false),
        Some(Outcome::Failed),
        0,
        false,
        t(9),
    );
    assert_eq!(find(&p.unwrap(), "Finished")["reason"], "Failed");
}

#[test]
fn pods_ready_reported_as_the_pods_start() {
    let wl = admitted();
    let p = workload_status_patch(&wl, None, 0, false, t(1)).unwrap();
    assert_eq!(find(&p, "PodsReady")["reason"], "WaitForStart");
    let mut waiting = admitted();
    waiting
        .status
        .conditions
        .push(cond("PodsReady", false, "WaitForStart"));
    assert_eq!(workload_status_patch(&waiting, None, 4, false, t(2)), None);
    let p = workload_status_patch(&waiting, None, 4, true, t(3)).unwrap();
    let r = find(&p, "PodsReady");
    assert_eq!(
        (r["status"].as_str(), r["reason"].as_str()),
        (Some("True"), Some("Started"))
    );
    let mut ready = admitted();
    ready
        .status
        .conditions
        .push(cond("PodsReady", true, "Started"));
    assert_eq!(workload_status_patch(&ready, None, 4, true, t(4)), None);
    let p = workload_status_patch(&ready, None, 4, false, t(5)).unwrap();
    assert_eq!(find(&p, "PodsReady")["reason"], "WaitForRecovery");
}

#[test]
fn pods_started_needs_every_pod_running_or_done() {
    let j = job(); // launcher, 2 workers, partitioner
    let running = PodState::Running { ready: false };
    let mut pods = vec![
        pod(ReplicaType::Partitioner, 0, PodState::Succeeded),
        pod(ReplicaType::Worker, 0, running.clone()),
        pod(ReplicaType::Worker, 1, PodState::Running { ready: true }),
        pod(ReplicaType::Launcher, 0, PodState::Pending),
    ];
    assert!(!pods_started(&j, &pods), "launcher pending");
    pods[3].state = running;
    assert!(pods_started(&j, &pods));
    pods.remove(1);
    assert!(!pods_started(&j, &pods), "a worker missing");
}

/// Found when sizing the node scenario's quota: the partitioner's podSet
/// counted the launcher's requests while its pod is built from the workers'
/// template, so Kueue reserved less than the pods ask for.
#[test]
fn the_partitioner_pod_set_counts_what_its_pod_requests() {
    let j = job();
    let w = desired_workload(&j, None);
    let set = w["spec"]["podSets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "partitioner")
        .unwrap()
        .clone();
    let pod = crate::pure::builders::partitioner_pod(
        &crate::pure::validate::valid(&j),
        0,
        &crate::pure::settings::BuildConfig::default(),
    );
    let asked = serde_json::to_value(&pod.spec.unwrap().containers[0].resources).unwrap();
    assert_eq!(set["template"]["spec"]["containers"][0]["resources"], asked);
    assert_eq!(asked["requests"]["cpu"], "2", "the workers' requests");
}
