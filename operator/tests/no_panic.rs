//! Property test (bounded: a few hundred cases, well under a second each):
//! random DGLJob specs and statuses, random observed pods and a random
//! clock go through validate, every builder and the plan; none may panic,
//! and a plan never sleeps longer than `plan::MAX_WAKE` nor creates a pod
//! that is not the job's. Extremes are drawn on purpose: deadlines and TTLs
//! over their whole range, start times far from `now` either way (skew),
//! restart counts and replica counts at their limits, odd quantities.

use std::collections::BTreeMap;

use dgl_api::names::{launcher_name, partitioner_name, worker_name};
use dgl_api::{
    CleanPodPolicy, DGLJob, DGLJobStatus, PartitionMode, ReplicaType, RunPolicy, SchedulingPolicy,
};
use dgl_operator::pure::observe::{ObservedPod, PodState};
use dgl_operator::pure::plan::{self, Step, MAX_WAKE};
use dgl_operator::pure::settings::{BuildConfig, GangScheduler};
use dgl_operator::pure::{builders, desired, validate};
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use proptest::prelude::*;

const SEED: &str = include_str!("../../examples/seed-dgljob.yaml");

/// Seconds within jiff's Timestamp range.
fn any_second() -> impl Strategy<Value = i64> {
    prop_oneof![
        Timestamp::MIN.as_second()..=Timestamp::MAX.as_second(),
        1_700_000_000i64..1_900_000_000,
        Just(Timestamp::MIN.as_second()),
        Just(Timestamp::MAX.as_second()),
    ]
}

fn time(s: i64) -> Time {
    Time(Timestamp::from_second(s).expect("within range"))
}

fn extreme_i64() -> impl Strategy<Value = i64> {
    prop_oneof![any::<i64>(), Just(i64::MAX), Just(i64::MIN), 1i64..100_000]
}

fn extreme_i32() -> impl Strategy<Value = i32> {
    prop_oneof![any::<i32>(), Just(i32::MAX), Just(i32::MIN), 0i32..200]
}

fn quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("4Gi".to_string()),
        Just("1e308".to_string()),
        Just("NaN".to_string()),
        Just("-1".to_string()),
        Just("99999999999999Ti".to_string()),
        "[0-9a-zA-Z.+-]{0,12}",
    ]
}

#[derive(Debug, Clone)]
struct Spec {
    name: String,
    mode: PartitionMode,
    clean: CleanPodPolicy,
    workers: Option<i32>,
    partitioner: Option<Option<i32>>,
    slots: Option<i32>,
    deadline: Option<i64>,
    ttl: Option<i32>,
    backoff: Option<i32>,
    suspend: Option<bool>,
    min_available: Option<i32>,
    service_account: Option<String>,
    memory: Option<String>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        (
            "[a-z][-a-z0-9]{0,48}[a-z0-9]",
            prop_oneof![
                Just(PartitionMode::DglApi),
                Just(PartitionMode::ParMetis),
                Just(PartitionMode::DistParMetis),
                Just(PartitionMode::Skip),
            ],
            prop_oneof![
                Just(CleanPodPolicy::Running),
                Just(CleanPodPolicy::All),
                Just(CleanPodPolicy::None),
            ],
            proptest::option::of(0i32..=24),
            proptest::option::of(proptest::option::of(0i32..=1)),
            proptest::option::of(extreme_i32()),
        ),
        (
            proptest::option::of(extreme_i64()),
            proptest::option::of(extreme_i32()),
            proptest::option::of(extreme_i32()),
            proptest::option::of(any::<bool>()),
            proptest::option::of(extreme_i32()),
            proptest::option::of(prop_oneof![Just("dgl-operator".to_string()), "[a-z]{1,8}"]),
            proptest::option::of(quantity()),
        ),
    )
        .prop_map(
            |(
                (name, mode, clean, workers, partitioner, slots),
                (deadline, ttl, backoff, suspend, min_available, service_account, memory),
            )| Spec {
                name,
                mode,
                clean,
                workers,
                partitioner,
                slots,
                deadline,
                ttl,
                backoff,
                suspend,
                min_available,
                service_account,
                memory,
            },
        )
}

#[derive(Debug, Clone)]
struct Status {
    finished: Option<(&'static str, bool)>,
    start: Option<i64>,
    completion: Option<i64>,
    restarts: Option<i32>,
}

fn status() -> impl Strategy<Value = Option<Status>> {
    proptest::option::of(
        (
            proptest::option::of((
                prop_oneof![Just("Succeeded"), Just("Failed"), Just("Running")],
                any::<bool>(),
            )),
            proptest::option::of(any_second()),
            proptest::option::of(any_second()),
            proptest::option::of(extreme_i32()),
        )
            .prop_map(|(finished, start, completion, restarts)| Status {
                finished,
                start,
                completion,
                restarts,
            }),
    )
}

fn pod_state() -> impl Strategy<Value = PodState> {
    prop_oneof![
        Just(PodState::Pending),
        any::<bool>().prop_map(|ready| PodState::Running { ready }),
        Just(PodState::Succeeded),
        Just(PodState::Terminating),
        ".{0,20}".prop_map(|m| PodState::Failed {
            reason: "Error".into(),
            message: m,
        }),
    ]
}

/// Pods named as the job's (any role, index, run), in any state.
fn pods() -> impl Strategy<Value = Vec<(u8, i32, i32, PodState, Option<String>)>> {
    proptest::collection::vec(
        (
            0u8..3,
            prop_oneof![0i32..30, Just(i32::MAX)],
            extreme_i32(),
            pod_state(),
            proptest::option::of(prop_oneof![
                Just("10.0.0.1".to_string()),
                Just("fd00::1".to_string()),
                Just("not-an-ip".to_string()),
            ]),
        ),
        0..12,
    )
}

fn build_job(s: &Spec, st: &Option<Status>) -> DGLJob {
    let mut job: DGLJob = serde_yaml::from_str(SEED).unwrap();
    job.metadata.name = Some(s.name.clone());
    job.metadata.namespace = Some("ns".into());
    job.metadata.uid = Some("uid-1".into());
    job.metadata.generation = Some(1);
    job.spec.partition_mode = s.mode;
    // The cache where the CRD allows it (the native modes), every other name.
    if s.mode.is_native() && s.name.len().is_multiple_of(2) {
        job.spec.partition_cache = Some(dgl_api::PartitionCacheSpec {
            url: "s3://graphs/cache".into(),
            credentials_secret: Some("keys".into()),
        });
    }
    job.spec.clean_pod_policy = s.clean;
    job.spec.slots_per_worker = s.slots;
    let specs = &mut job.spec.dgl_replica_specs;
    let worker = specs.get_mut(&ReplicaType::Worker).unwrap();
    worker.replicas = s.workers;
    let c = &mut worker.template.spec.as_mut().unwrap().containers[0];
    if let Some(m) = &s.memory {
        c.resources = Some(ResourceRequirements {
            limits: Some(BTreeMap::from([("memory".into(), Quantity(m.clone()))])),
            ..Default::default()
        });
    }
    worker.template.spec.as_mut().unwrap().service_account_name = s.service_account.clone();
    if let Some(replicas) = s.partitioner {
        let mut p = specs[&ReplicaType::Launcher].clone();
        p.replicas = replicas;
        specs.insert(ReplicaType::Partitioner, p);
    }
    job.spec.run_policy = Some(RunPolicy {
        active_deadline_seconds: s.deadline,
        ttl_seconds_after_finished: s.ttl,
        backoff_limit: s.backoff,
        suspend: s.suspend,
        scheduling_policy: s.min_available.map(|m| SchedulingPolicy {
            min_available: Some(m),
            ..Default::default()
        }),
        // Every action, so that random failures go through each verdict.
        pod_failure_policy: s.backoff.map(|_| {
            serde_json::from_value(serde_json::json!({"rules": [
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}}
            ]}))
            .expect("a valid policy")
        }),
        // Random, 0 (never) included: pods that cannot start meet every timeout.
        pod_start_timeout_seconds: s.ttl,
    });
    job.status = st.as_ref().map(|st| DGLJobStatus {
        conditions: st
            .finished
            .iter()
            .map(|(t, v)| Condition {
                type_: t.to_string(),
                status: if *v { "True" } else { "False" }.into(),
                reason: "R".into(),
                message: "m".into(),
                last_transition_time: time(st.start.unwrap_or(0)),
                observed_generation: Some(1),
            })
            .collect(),
        start_time: st.start.map(time),
        completion_time: st.completion.map(time),
        restart_count: st.restarts,
        ..Default::default()
    });
    job
}

fn observed(job: &str, raw: Vec<(u8, i32, i32, PodState, Option<String>)>) -> Vec<ObservedPod> {
    raw.into_iter()
        .map(|(role, index, epoch, state, ip)| {
            let (role, name) = match role {
                0 => (ReplicaType::Launcher, launcher_name(job)),
                1 => (ReplicaType::Partitioner, partitioner_name(job)),
                _ => (ReplicaType::Worker, worker_name(job, index)),
            };
            ObservedPod {
                name,
                role,
                index,
                epoch,
                state,
                ip,
                progress: None,
                // Derived from the index so that every rule gets matched.
                facts: dgl_api::failure_policy::FailureFacts {
                    exits: vec![("main".into(), index.rem_euclid(5))],
                    conditions: (index % 2 == 0)
                        .then(|| ("DisruptionTarget".into(), "True".into()))
                        .into_iter()
                        .collect(),
                    ..Default::default()
                },
                // Every third pod cannot start (a scheduler's reason).
                not_starting: (index % 3 == 0).then(|| dgl_operator::pure::observe::StartFailure {
                    container: None,
                    reason: "Unschedulable".into(),
                    message: String::new(),
                }),
                // Some launchers answered a cache lookup, hit or miss.
                cache_lookup: (index % 4 == 1).then(|| dgl_api::partition_cache::Lookup {
                    hit: epoch % 2 == 0,
                    key: "0".repeat(64),
                }),
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_specs_go_through_validate_build_and_plan_without_panic(
        s in spec(),
        st in status(),
        raw_pods in pods(),
        now in any_second(),
        gang in 0u8..3,
        launch in any::<Option<i32>>(),
    ) {
        let job = build_job(&s, &st);
        let cfg = BuildConfig {
            gang: match gang {
                0 => None,
                1 => Some(GangScheduler::Volcano),
                _ => Some(GangScheduler::SchedulerPlugins),
            },
            protected_service_accounts: vec!["ns/dgl-operator".parse().unwrap()],
            ..Default::default()
        };
        let pods = observed(&job.name_any(), raw_pods);
        let now = Timestamp::from_second(now).unwrap();

        // The builders take a validated job (a refused one is never built).
        if let Ok(valid) = validate::validate(&job, &cfg) {
            let _ = builders::config_map(&valid, &pods, launch);
            let _ = builders::secret(&valid, "token");
            let _ = builders::launcher_rbac(&valid);
            let _ = builders::pod_group(&valid, GangScheduler::Volcano);
            let _ = builders::pod_group(&valid, GangScheduler::SchedulerPlugins);
            let _ = builders::partitioner_pod(&valid, 0, &cfg);
            let _ = builders::worker_pod(&valid, 0, i32::MAX, &cfg);
            let _ = builders::launcher_pod(&valid, 0, &cfg);
        }

        let planned = plan::plan_job(&job, plan::Seen::pods(&pods), now, &cfg, launch);
        let _ = desired::wanted(&planned, &pods, &cfg);
        if let Some(valid) = &planned.valid {
            let _ = builders::config_map(valid, &pods, planned.plan.launch);
        }
        let p = planned.plan;
        prop_assert!(p.requeue_after.is_none_or(|d| d <= MAX_WAKE), "{:?}", p.requeue_after);
        let prefix = format!("{}-", job.name_any());
        for step in &p.steps {
            if let Step::CreatePod(pod) = step {
                prop_assert!(pod.name_any().starts_with(&prefix), "{}", pod.name_any());
            }
        }
        let _ = plan::transitions(job.status.as_ref(), &p.status);
        let failed = plan::fail(&job, &pods, now, "ObjectExists", "m");
        prop_assert!(failed.requeue_after.is_none_or(|d| d <= MAX_WAKE));
    }
}

/// The case the issue names: activeDeadlineSeconds at i64::MAX with a start
/// time ahead of this clock (skew). The deadline is far: the plan sleeps
/// at most MAX_WAKE and the job is not failed.
#[test]
fn a_deadline_at_i64_max_with_clock_skew_neither_panics_nor_fails_the_job() {
    let s = Spec {
        name: "skew".into(),
        mode: PartitionMode::DglApi,
        clean: CleanPodPolicy::Running,
        workers: Some(2),
        partitioner: None,
        slots: None,
        deadline: Some(i64::MAX),
        ttl: Some(i32::MAX),
        backoff: None,
        suspend: None,
        min_available: None,
        service_account: None,
        memory: None,
    };
    let now = 1_800_000_000;
    for start in [
        now + 3_600,
        Timestamp::MAX.as_second(),
        Timestamp::MIN.as_second(),
    ] {
        let st = Some(Status {
            finished: None,
            start: Some(start),
            completion: None,
            restarts: None,
        });
        let job = build_job(&s, &st);
        let now = Timestamp::from_second(now).unwrap();
        let p = plan::plan(
            &job,
            plan::Seen::pods(&[]),
            now,
            &BuildConfig::default(),
            None,
        );
        assert_eq!(p.requeue_after, Some(MAX_WAKE), "start {start}");
        assert_ne!(
            p.status.phase,
            Some(dgl_api::JobPhase::Failed),
            "start {start}"
        );
    }
}
