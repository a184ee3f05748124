use super::*;
use dgl_api::failure_policy::{FailureFacts, MAX_IGNORED_RESTARTS};
use dgl_api::names::{launcher_name, partitioner_name, worker_name};
use dgl_api::WorkerCreationPolicy;
use dgl_api::{PartitionMode, RunPolicy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

const JOB: &str = "dgl-graphsage";

fn job() -> DGLJob {
    let mut job: DGLJob =
        serde_yaml::from_str(include_str!("../../../../examples/seed-dgljob.yaml")).unwrap();
    job.metadata.uid = Some("uid-1".into());
    job.metadata.generation = Some(1);
    job
}

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn pod(role: ReplicaType, index: i32, epoch: i32, state: PodState) -> ObservedPod {
    let name = match role {
        ReplicaType::Launcher => launcher_name(JOB),
        ReplicaType::Partitioner => partitioner_name(JOB),
        ReplicaType::Worker => worker_name(JOB, index),
    };
    ObservedPod {
        name,
        role,
        index,
        epoch,
        state,
        ip: Some(format!("10.0.0.{}", 10 + index)),
        progress: None,
        facts: Default::default(),
        not_starting: None,
        cache_lookup: None,
    }
}

fn ready() -> PodState {
    PodState::Running { ready: true }
}

fn failed(msg: &str) -> PodState {
    PodState::Failed {
        reason: "ContainerFailed".into(),
        message: msg.into(),
    }
}

/// Runs plan and feeds its status back into the job, as the API would.
fn step(job: &mut DGLJob, pods: &[ObservedPod], now: Timestamp) -> Plan {
    let p = plan(job, Seen::pods(pods), now, &BuildConfig::default(), None);
    job.status = Some(p.status.clone());
    p
}

fn created(p: &Plan) -> Vec<String> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::CreatePod(pod) => Some(pod.name_any()),
            _ => None,
        })
        .collect()
}

fn deleted(p: &Plan) -> Vec<String> {
    p.steps
        .iter()
        .flat_map(Step::deleted_pods)
        .cloned()
        .collect()
}

fn cond(p: &Plan, t: JobPhase) -> Option<&Condition> {
    p.status.conditions.iter().find(|c| c.type_ == t.as_str())
}

fn running_job() -> (DGLJob, Vec<ObservedPod>) {
    let mut j = job();
    let pods = vec![
        pod(ReplicaType::Partitioner, 0, 0, ready()),
        pod(ReplicaType::Worker, 0, 0, ready()),
        pod(ReplicaType::Worker, 1, 0, ready()),
        pod(
            ReplicaType::Launcher,
            0,
            0,
            PodState::Running { ready: false },
        ),
    ];
    step(&mut j, &pods, t(0));
    (j, pods)
}

#[test]
fn the_launchers_progress_reaches_the_status_only_when_it_changed() {
    let (mut j, mut pods) = running_job();
    let report = |p: &Plan| p.status.progress.clone();
    pods[3].progress = Some(r#"{"epoch":3,"epochs":10,"loss":0.41}"#.into());
    let p = step(&mut j, &pods, t(1));
    let first = report(&p).expect("a report");
    assert_eq!(first.summary, "epoch 3/10 (30%)");
    assert_eq!(first.progress_percentage, Some(30));
    assert_eq!((first.epoch, first.loss), (3, Some(0.41)));
    assert_eq!(first.updated_at, Some(Time(t(1))));
    // The same report later: the status stays as it is (no write).
    assert_eq!(report(&step(&mut j, &pods, t(2))), Some(first.clone()));
    // A bad annotation changes nothing.
    pods[3].progress = Some("{not json".into());
    assert_eq!(report(&step(&mut j, &pods, t(3))), Some(first));
    pods[3].progress = Some(r#"{"epoch":10,"epochs":10}"#.into());
    let p = step(&mut j, &pods, t(4));
    assert_eq!(report(&p).unwrap().updated_at, Some(Time(t(4))));
    // Succeeded keeps the last report, also once the launcher is gone.
    pods[3].state = PodState::Succeeded;
    let p = step(&mut j, &pods, t(5));
    assert_eq!(p.status.phase, Some(JobPhase::Succeeded));
    assert_eq!(report(&p).unwrap().summary, "epoch 10/10 (100%)");
    assert_eq!(
        report(&step(&mut j, &[], t(6))).unwrap().summary,
        "epoch 10/10 (100%)"
    );
}

#[test]
fn the_time_left_counts_from_the_runs_first_report_kept_in_the_status() {
    let (mut j, mut pods) = running_job();
    let mut at = |j: &mut DGLJob, epoch: u32, s: i64| {
        pods[3].progress = Some(format!(r#"{{"epoch":{epoch},"epochs":10}}"#));
        step(j, &pods, t(s)).status.progress.unwrap()
    };
    let p = at(&mut j, 2, 10);
    assert_eq!(p.estimated_remaining_seconds, None, "one epoch seen");
    // 2 epochs in 20 s, 6 left.
    let p = at(&mut j, 4, 30);
    assert_eq!(p.estimated_remaining_seconds, Some(60));
    assert_eq!(p.summary, "epoch 4/10 (40%, ~1m00s left)");
    // A new operator reads the status back from the API server (whole
    // seconds): the count still starts at epoch 2, 10 s.
    let text = serde_json::to_string(&j.status).unwrap();
    j.status = serde_json::from_str(&text).unwrap();
    let p = at(&mut j, 6, 50);
    assert_eq!(p.first_report.unwrap().epoch, 2);
    assert_eq!(p.estimated_remaining_seconds, Some(40));
}

#[test]
fn a_restart_clears_the_last_runs_progress() {
    let (mut j, mut pods) = running_job();
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(1),
        ..Default::default()
    });
    pods[3].progress = Some(r#"{"epoch":2}"#.into());
    assert!(step(&mut j, &pods, t(1)).status.progress.is_some());
    pods[1].state = failed("pod w: container c exited with code 3");
    let p = step(&mut j, &pods, t(2));
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));
    assert_eq!(
        p.status.progress, None,
        "the old launcher's report is stale"
    );
}

#[test]
fn after_partitioning_holds_the_workers_until_the_partitioner_serves() {
    let mut j = job();
    j.spec.worker_creation_policy = Some(WorkerCreationPolicy::AfterPartitioning);
    let p = step(&mut j, &[], t(0));
    assert_eq!(
        created(&p),
        vec![partitioner_name(JOB), launcher_name(JOB)],
        "no worker yet"
    );
    assert_eq!(p.status.phase, Some(JobPhase::Partitioning));

    let mut pods = vec![
        pod(
            ReplicaType::Partitioner,
            0,
            0,
            PodState::Running { ready: false },
        ),
        pod(ReplicaType::Launcher, 0, 0, PodState::Pending),
    ];
    let p = step(&mut j, &pods, t(1));
    assert!(created(&p).is_empty(), "still partitioning: no worker");

    pods[0].state = ready();
    let p = step(&mut j, &pods, t(2));
    assert_eq!(
        created(&p),
        vec![worker_name(JOB, 0), worker_name(JOB, 1)],
        "the workers once the partitions are served"
    );
    assert_eq!(p.launch, None, "no launch before the workers are ready");
    assert_eq!(p.status.phase, Some(JobPhase::Partitioned));

    pods.push(pod(ReplicaType::Worker, 0, 0, ready()));
    pods.push(pod(ReplicaType::Worker, 1, 0, ready()));
    let p = step(&mut j, &pods, t(3));
    assert_eq!(p.launch, Some(0));
}

#[test]
fn after_partitioning_changes_nothing_without_a_partitioner() {
    let mut j = job();
    j.spec.partition_mode = PartitionMode::Skip;
    j.spec.worker_creation_policy = Some(WorkerCreationPolicy::AfterPartitioning);
    let p = step(&mut j, &[], t(0));
    assert_eq!(
        created(&p),
        vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)],
        "nothing to wait for in Skip mode"
    );
}

#[test]
fn dgl_api_job_starts_every_pod_then_launches_in_order() {
    let mut j = job();
    // Every pod at once (image pulls, preflights); no launch yet.
    let p = step(&mut j, &[], t(0));
    assert_eq!(
        created(&p),
        vec![
            partitioner_name(JOB),
            worker_name(JOB, 0),
            worker_name(JOB, 1),
            launcher_name(JOB)
        ]
    );
    assert_eq!(p.launch, None);
    assert_eq!(p.status.replica_statuses[&ReplicaType::Launcher].active, 1);
    assert_eq!(p.status.phase, Some(JobPhase::Partitioning));
    assert_eq!(cond(&p, JobPhase::Created).unwrap().reason, "JobCreated");
    assert_eq!(p.status.start_time, Some(Time(t(0))));

    // A launcher Running before its launch skipped its watcher-loop:
    // the job is not running.
    let mut pods = vec![
        pod(
            ReplicaType::Partitioner,
            0,
            0,
            PodState::Running { ready: false },
        ),
        pod(ReplicaType::Worker, 0, 0, ready()),
        pod(ReplicaType::Worker, 1, 0, ready()),
        pod(
            ReplicaType::Launcher,
            0,
            0,
            PodState::Running { ready: false },
        ),
    ];
    let p = step(&mut j, &pods, t(1));
    assert!(created(&p).is_empty());
    assert_eq!(
        p.launch, None,
        "no launch before the partitions are made, workers ready or not"
    );
    assert_eq!(p.status.phase, Some(JobPhase::Partitioning));

    pods[3].state = PodState::Pending;
    pods[0].state = ready();
    pods[2].state = PodState::Pending;
    let p = step(&mut j, &pods, t(2));
    assert_eq!(p.status.phase, Some(JobPhase::Partitioned));
    assert_eq!(cond(&p, JobPhase::Partitioning).unwrap().status, "False");
    let p = step(&mut j, &pods, t(3));
    assert_eq!(p.launch, None, "no launch before every worker is ready");
    pods[2].state = ready();
    pods[2].ip = None;
    assert_eq!(
        step(&mut j, &pods, t(3)).launch,
        None,
        "a worker without an IP is not ready"
    );
    pods[2].ip = Some("10.0.0.11".into());
    let p = step(&mut j, &pods, t(4));
    assert_eq!(p.launch, Some(0));
    assert!(created(&p).is_empty());

    pods[3].state = PodState::Running { ready: false };
    let p = step(&mut j, &pods, t(5));
    assert_eq!(p.status.phase, Some(JobPhase::Running));
    assert_eq!(p.status.replica_statuses[&ReplicaType::Worker].active, 2);

    pods[3].state = PodState::Succeeded;
    let p = step(&mut j, &pods, t(9));
    assert_eq!(p.status.phase, Some(JobPhase::Succeeded));
    assert_eq!(p.status.completion_time, Some(Time(t(9))));
    assert_eq!(cond(&p, JobPhase::Running).unwrap().status, "False");
    // cleanPodPolicy Running: the serving partitioner and workers go.
    let mut d = deleted(&p);
    d.sort();
    assert_eq!(
        d,
        vec![
            partitioner_name(JOB),
            worker_name(JOB, 0),
            worker_name(JOB, 1)
        ]
    );
    assert!(!p.ensure_children);
}

#[test]
fn replanning_without_change_keeps_status_identical() {
    let (mut j, pods) = running_job();
    let before = j.status.clone().unwrap();
    let p = step(&mut j, &pods, t(100));
    assert_eq!(
        p.status, before,
        "a reconcile without news must not write status"
    );
}

#[test]
fn pods_count_when_created_or_deleted_so_their_events_write_nothing() {
    let mut j = job();
    let p = step(&mut j, &[], t(0));
    assert_eq!(
        p.status.replica_statuses[&ReplicaType::Partitioner].active,
        1
    );
    // The partitioner's own watch event changes nothing.
    let before = j.status.clone();
    let pods = vec![pod(ReplicaType::Partitioner, 0, 0, PodState::Pending)];
    assert_eq!(Some(step(&mut j, &pods, t(1)).status), before);

    // Success under cleanPodPolicy Running: the pods it deletes stop
    // counting in the same write; their deletion events write nothing.
    let (mut j, mut pods) = running_job();
    pods[3].state = PodState::Succeeded;
    let p = step(&mut j, &pods, t(5));
    assert!(!p.status.replica_statuses.contains_key(&ReplicaType::Worker));
    assert_eq!(
        p.status.replica_statuses[&ReplicaType::Launcher].succeeded,
        1
    );
    for p in pods.iter_mut().take(3) {
        p.state = PodState::Terminating;
    }
    let before = j.status.clone();
    assert_eq!(Some(step(&mut j, &pods, t(6)).status.clone()), before);
    pods.drain(..3); // gone: only the launcher is left
    assert_eq!(Some(step(&mut j, &pods, t(7)).status), before);
}

#[test]
fn each_run_is_launched_with_its_own_number() {
    let (mut j, mut pods) = running_job();
    assert_eq!(step(&mut j, &pods, t(10)).launch, Some(0));
    // Worker 1 fails: run 1 starts every pod again, launched only once
    // its own workers are Ready (the ConfigMap keeps run 0 until then).
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(1),
        ..Default::default()
    });
    pods[2].state = failed("pod w1: container c exited with code 1");
    let p = step(&mut j, &pods, t(11));
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));
    assert_eq!(p.launch, None);
    let run1 = vec![pod(ReplicaType::Partitioner, 0, 0, ready())];
    let p = step(&mut j, &run1, t(12));
    assert_eq!(
        created(&p),
        vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)]
    );
    assert_eq!(p.launch, None);
    pods = run1;
    pods.push(pod(ReplicaType::Worker, 0, 1, ready()));
    pods.push(pod(ReplicaType::Worker, 1, 1, ready()));
    pods.push(pod(ReplicaType::Launcher, 0, 1, PodState::Pending));
    assert_eq!(step(&mut j, &pods, t(13)).launch, Some(1));
}

#[test]
fn a_worker_missing_before_training_is_created_again() {
    let mut j = job();
    j.spec.partition_mode = PartitionMode::Skip;
    step(&mut j, &[], t(0));
    // The launcher waits in its watcher-loop (Pending): worker 1 is
    // made again, the job does not fail.
    let mut pods = vec![
        pod(ReplicaType::Worker, 0, 0, ready()),
        pod(ReplicaType::Launcher, 0, 0, PodState::Pending),
    ];
    let p = step(&mut j, &pods, t(1));
    assert_eq!(created(&p), vec![worker_name(JOB, 1)]);
    assert!(cond(&p, JobPhase::Failed).is_none());
    // An earlier job's launcher of the same name (shown Terminating)
    // is not this job's training either.
    pods[1].state = PodState::Terminating;
    let p = step(&mut j, &pods, t(2));
    assert_eq!(created(&p), vec![worker_name(JOB, 1)]);
    assert!(cond(&p, JobPhase::Failed).is_none());
    // Once its main container runs, a missing worker fails the run.
    pods[1].state = PodState::Running { ready: false };
    let p = step(&mut j, &pods, t(3));
    assert_eq!(cond(&p, JobPhase::Failed).unwrap().reason, "PodDeleted");
}

#[test]
fn a_pod_replaced_after_the_launch_fails_the_run() {
    let mut j = job();
    step(&mut j, &[], t(0));
    let pods = vec![
        pod(ReplicaType::Partitioner, 0, 0, ready()),
        pod(ReplicaType::Worker, 0, 0, ready()),
        pod(ReplicaType::Worker, 1, 0, ready()),
        pod(ReplicaType::Launcher, 0, 0, PodState::Pending),
    ];
    assert_eq!(step(&mut j, &pods, t(1)).launch, Some(0));
    // The partitioner is deleted while the launcher is still in its
    // watcher-loop. Not launched yet: it is simply made again.
    let gone: Vec<ObservedPod> = pods[1..].to_vec();
    let p = plan(&j, Seen::pods(&gone), t(2), &BuildConfig::default(), None);
    assert_eq!(created(&p), vec![partitioner_name(JOB)]);
    assert!(cond(&p, JobPhase::Failed).is_none());
    // Launched (the ConfigMap holds run 0): the launcher may have its
    // IP, so the run fails (and may restart), naming the pod.
    let p = plan(
        &j,
        Seen::pods(&gone),
        t(2),
        &BuildConfig::default(),
        Some(0),
    );
    let c = cond(&p, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "PodDeleted");
    assert!(c.message.contains("partitioner"), "{}", c.message);
    // A launch of an earlier run does not count for this one.
    j.status.as_mut().unwrap().restart_count = Some(1);
    let p = plan(&j, Seen::pods(&[]), t(3), &BuildConfig::default(), Some(0));
    assert!(cond(&p, JobPhase::Failed).is_none());
}

#[test]
fn a_suspended_launch_is_taken_back_for_the_resumed_run() {
    let (mut j, pods) = running_job();
    j.spec.run_policy = Some(RunPolicy {
        suspend: Some(true),
        ..Default::default()
    });
    let p = plan(
        &j,
        Seen::pods(&pods),
        t(10),
        &BuildConfig::default(),
        Some(0),
    );
    assert_eq!(p.status.phase, Some(JobPhase::Suspended));
    assert!(p.reset_launch, "run 0 resumes under the same number");
    let p = plan(&j, Seen::pods(&pods), t(10), &BuildConfig::default(), None);
    assert!(!p.reset_launch, "nothing to take back");
}

#[test]
fn skip_mode_starts_workers_at_once() {
    let mut j = job();
    j.spec.partition_mode = PartitionMode::Skip;
    let p = step(&mut j, &[], t(0));
    assert_eq!(
        created(&p),
        vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)]
    );
    assert!(cond(&p, JobPhase::Partitioning).is_none());
}

/// The seed's Launcher-only jobs (partitionMode Skip, no Worker).
fn standalone_job() -> DGLJob {
    let mut j = job();
    j.spec.partition_mode = PartitionMode::Skip;
    j.spec.dgl_replica_specs.remove(&ReplicaType::Worker);
    j
}

#[test]
fn a_standalone_job_is_its_launcher() {
    let mut j = standalone_job();
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(1),
        active_deadline_seconds: Some(600),
        ..Default::default()
    });
    // At once: no partitioner, no worker, no ConfigMap to wait for.
    let p = plan(&j, Seen::pods(&[]), t(0), &BuildConfig::default(), None);
    assert_eq!(created(&p), vec![launcher_name(JOB)]);
    assert!(cond(&p, JobPhase::Partitioning).is_none());
    assert_eq!(
        p.requeue_after,
        Some(Duration::from_secs(600)),
        "the deadline applies"
    );
    step(&mut j, &[], t(0));
    let mut pods = vec![pod(
        ReplicaType::Launcher,
        0,
        0,
        PodState::Running { ready: false },
    )];
    let p = step(&mut j, &pods, t(1));
    assert_eq!(p.status.phase, Some(JobPhase::Running));
    assert!(!p.status.replica_statuses.contains_key(&ReplicaType::Worker));

    // Its failure is the job's; backoffLimit restarts it.
    pods[0].state = failed("pod l: container c exited with code 3");
    let p = step(&mut j, &pods, t(2));
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));
    assert_eq!(deleted(&p), vec![launcher_name(JOB)]);
    let p = step(&mut j, &[], t(3));
    let launcher = p.steps.iter().find_map(|s| match s {
        Step::CreatePod(pod) => Some(pod.clone()),
        _ => None,
    });
    let labels = launcher.unwrap().metadata.labels.unwrap();
    assert_eq!(labels[dgl_api::names::LABEL_RUN], "1");
    let mut pods = vec![pod(ReplicaType::Launcher, 0, 1, PodState::Succeeded)];
    let p = step(&mut j, &pods, t(4));
    assert_eq!(p.status.phase, Some(JobPhase::Succeeded));

    // No restarts left: the second failure fails the job.
    let mut j = standalone_job();
    step(&mut j, &[], t(0));
    pods[0] = pod(ReplicaType::Launcher, 0, 0, failed("exited with code 2"));
    let p = step(&mut j, &pods, t(1));
    assert_eq!(cond(&p, JobPhase::Failed).unwrap().reason, "LauncherFailed");
}

#[test]
fn worker_failure_fails_the_job_naming_the_pod() {
    let (mut j, mut pods) = running_job();
    pods[2].state = failed("pod dgl-graphsage-worker-1: container main exited with code 3 (Error)");
    let p = step(&mut j, &pods, t(10));
    assert_eq!(p.status.phase, Some(JobPhase::Failed));
    let c = cond(&p, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "WorkerFailed");
    assert!(c.message.contains("dgl-graphsage-worker-1") && c.message.contains("code 3"));
    // cleanPodPolicy Running deletes what is still active, keeps the failed pod.
    let d = deleted(&p);
    assert!(d.contains(&launcher_name(JOB)) && d.contains(&worker_name(JOB, 0)));
    assert!(!d.contains(&worker_name(JOB, 1)));
}

#[test]
fn partitioner_and_launcher_failures_name_their_role() {
    let mut j = job();
    let pods = vec![pod(
        ReplicaType::Partitioner,
        0,
        0,
        failed("pod p: container c exited with code 2"),
    )];
    let p = step(&mut j, &pods, t(1));
    assert_eq!(
        cond(&p, JobPhase::Failed).unwrap().reason,
        "PartitionerFailed"
    );

    let (mut j, mut pods) = running_job();
    pods[3].state = failed("pod l: container c exited with code 1");
    let p = step(&mut j, &pods, t(1));
    assert_eq!(cond(&p, JobPhase::Failed).unwrap().reason, "LauncherFailed");
}

#[test]
fn clean_pod_policies() {
    for (policy, expect) in [
        (CleanPodPolicy::All, 4usize),
        (CleanPodPolicy::Running, 3),
        (CleanPodPolicy::None, 0),
    ] {
        let (mut j, mut pods) = running_job();
        j.spec.clean_pod_policy = policy;
        pods[3].state = PodState::Succeeded;
        let p = step(&mut j, &pods, t(5));
        assert_eq!(deleted(&p).len(), expect, "{policy:?}");
        // One step (one request) for all of them, carrying the policy.
        let cleans: Vec<bool> = p
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::CleanPods { running_only, .. } => Some(*running_only),
                Step::DeletePod(n) => panic!("{policy:?}: {n} deleted on its own"),
                _ => None,
            })
            .collect();
        let want = match policy {
            CleanPodPolicy::None => vec![],
            _ => vec![policy == CleanPodPolicy::Running],
        };
        assert_eq!(cleans, want, "{policy:?}");
    }
}

fn with_policy(j: &mut DGLJob, backoff: i32) {
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(backoff),
        pod_failure_policy: Some(
            serde_json::from_value(serde_json::json!({"rules": [
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}}
            ]}))
            .unwrap(),
        ),
        ..Default::default()
    });
}

fn exited(code: i32, disrupted: bool) -> FailureFacts {
    FailureFacts {
        exits: vec![("c".into(), code)],
        conditions: disrupted
            .then(|| ("DisruptionTarget".into(), "True".into()))
            .into_iter()
            .collect(),
        ..FailureFacts::default()
    }
}

#[test]
fn a_fail_job_rule_fails_at_once_whatever_backoff_allows() {
    let (mut j, mut pods) = running_job();
    with_policy(&mut j, 3);
    pods[1].state = failed("pod w0: container c exited with code 42");
    pods[1].facts = exited(42, false);
    let p = step(&mut j, &pods, t(10));
    assert_eq!(p.status.phase, Some(JobPhase::Failed));
    let c = cond(&p, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "PodFailurePolicy");
    assert!(
        c.message
            .contains("runPolicy.podFailurePolicy.rules[0] (FailJob) matched"),
        "{}",
        c.message
    );
    assert_eq!(p.status.restart_count, None);
}

#[test]
fn an_ignore_rule_restarts_without_counting_against_backoff() {
    let (mut j, mut pods) = running_job();
    with_policy(&mut j, 0);
    pods[1].state = failed("pod w0: container c exited with code 137");
    pods[1].facts = exited(137, true);
    let p = step(&mut j, &pods, t(10));
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));
    assert_eq!(p.status.restart_count, Some(1));
    assert_eq!(p.status.ignored_restarts, Some(1));
    let c = cond(&p, JobPhase::Restarting).unwrap();
    assert!(c.message.contains("not counted against backoffLimit"));
    // The next run's failure without a matching rule counts: backoffLimit
    // 0 is reached although one restart happened.
    let mut pods = vec![pods[0].clone()];
    pods.push(pod(ReplicaType::Worker, 0, 1, failed("exited with code 1")));
    pods[1].facts = exited(1, false);
    let p = step(&mut j, &pods, t(20));
    assert_eq!(p.status.phase, Some(JobPhase::Failed));
    assert_eq!(cond(&p, JobPhase::Failed).unwrap().reason, "WorkerFailed");
}

#[test]
fn a_count_rule_counts_and_ignores_beyond_the_cap_count_too() {
    let (mut j, mut pods) = running_job();
    with_policy(&mut j, 1);
    pods[1].state = failed("exited with code 2");
    pods[1].facts = exited(2, false);
    let p = step(&mut j, &pods, t(10));
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));
    assert_eq!(p.status.ignored_restarts, None);
    assert!(cond(&p, JobPhase::Restarting)
        .unwrap()
        .message
        .contains("rules[2] (Count) matched; counted; restarting (restart 1 of 1)"));

    let (mut j, mut pods) = running_job();
    with_policy(&mut j, 0);
    let st = j.status.get_or_insert_with(Default::default);
    st.ignored_restarts = Some(MAX_IGNORED_RESTARTS);
    st.restart_count = Some(MAX_IGNORED_RESTARTS);
    for p in pods.iter_mut() {
        p.epoch = MAX_IGNORED_RESTARTS;
    }
    pods[1].state = failed("evicted");
    pods[1].facts = exited(137, true);
    let p = step(&mut j, &pods, t(10));
    assert_eq!(p.status.phase, Some(JobPhase::Failed));
    assert!(cond(&p, JobPhase::Failed)
        .unwrap()
        .message
        .contains("(Ignore) matched; counted, backoffLimit (0) reached"));
}

#[test]
fn backoff_restarts_reuse_the_partitioner_then_fail() {
    let (mut j, mut pods) = running_job();
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(1),
        ..Default::default()
    });
    pods[1].state = failed("pod w0: container c exited with code 1");
    let p = step(&mut j, &pods, t(10));
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));
    assert_eq!(p.status.restart_count, Some(1));
    let d = deleted(&p);
    assert!(
        !d.contains(&partitioner_name(JOB)),
        "a ready partitioner is reused"
    );
    assert_eq!(d.len(), 3);

    // Old pods still terminating block the new run's names.
    for p in pods.iter_mut().skip(1) {
        p.state = PodState::Terminating;
    }
    let p = step(&mut j, &pods, t(11));
    assert!(created(&p).is_empty());
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));

    // Gone: run 1 starts with new workers.
    pods.truncate(1);
    let p = step(&mut j, &pods, t(12));
    assert_eq!(
        created(&p),
        vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)]
    );
    let run_label = |p: &Plan| match &p.steps[0] {
        Step::CreatePod(pod) => pod.labels()[dgl_api::names::LABEL_RUN].clone(),
        _ => unreachable!(),
    };
    assert_eq!(run_label(&p), "1");

    pods.push(pod(
        ReplicaType::Worker,
        0,
        1,
        failed("pod w0: container c exited with code 1"),
    ));
    let p = step(&mut j, &pods, t(13));
    assert_eq!(p.status.phase, Some(JobPhase::Failed));
    assert!(cond(&p, JobPhase::Failed)
        .unwrap()
        .message
        .contains("backoffLimit (1) reached"));
    assert_eq!(p.status.restart_count, Some(1));
}

#[test]
fn deadline_requeues_then_fails() {
    let mut j = job();
    j.spec.run_policy = Some(RunPolicy {
        active_deadline_seconds: Some(60),
        ..Default::default()
    });
    let p = step(&mut j, &[], t(0));
    assert_eq!(p.requeue_after, Some(Duration::from_secs(60)));
    let pods = vec![pod(
        ReplicaType::Partitioner,
        0,
        0,
        PodState::Running { ready: false },
    )];
    let p = step(&mut j, &pods, t(45));
    assert_eq!(p.requeue_after, Some(Duration::from_secs(15)));
    let p = step(&mut j, &pods, t(60));
    assert_eq!(p.status.phase, Some(JobPhase::Failed));
    assert_eq!(
        cond(&p, JobPhase::Failed).unwrap().reason,
        "DeadlineExceeded"
    );
    assert_eq!(deleted(&p), vec![partitioner_name(JOB)]);
}

#[test]
fn ttl_deletes_the_finished_job() {
    let (mut j, mut pods) = running_job();
    j.spec.run_policy = Some(RunPolicy {
        ttl_seconds_after_finished: Some(30),
        ..Default::default()
    });
    pods[3].state = PodState::Succeeded;
    step(&mut j, &pods, t(100));
    let p = step(&mut j, &pods, t(110));
    assert_eq!(p.requeue_after, Some(Duration::from_secs(20)));
    assert!(!p.steps.iter().any(|s| matches!(s, Step::DeleteJob)));
    let p = step(&mut j, &pods, t(130));
    assert!(p.steps.iter().any(|s| matches!(s, Step::DeleteJob)));
}

#[test]
fn suspend_deletes_pods_and_resume_starts_again() {
    let (mut j, pods) = running_job();
    j.spec.run_policy = Some(RunPolicy {
        suspend: Some(true),
        ..Default::default()
    });
    let p = step(&mut j, &pods, t(10));
    assert_eq!(p.status.phase, Some(JobPhase::Suspended));
    assert_eq!(deleted(&p).len(), 4);
    assert_eq!(cond(&p, JobPhase::Running).unwrap().status, "False");
    j.spec.run_policy = None;
    let p = step(&mut j, &[], t(20));
    assert_eq!(cond(&p, JobPhase::Suspended).unwrap().status, "False");
    assert_eq!(cond(&p, JobPhase::Suspended).unwrap().reason, "JobResumed");
    assert_eq!(
        created(&p),
        vec![
            partitioner_name(JOB),
            worker_name(JOB, 0),
            worker_name(JOB, 1),
            launcher_name(JOB)
        ]
    );
    assert_eq!(p.status.start_time, Some(Time(t(20))));
}

#[test]
fn distparmetis_partitions_on_the_workers_behind_the_launchers_readiness() {
    let mut j = job();
    j.spec.partition_mode = PartitionMode::DistParMetis;
    // Workers and launcher at once, no partitioner.
    let p = step(&mut j, &[], t(0));
    assert_eq!(
        created(&p),
        vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)]
    );
    let mut pods = vec![
        pod(ReplicaType::Worker, 0, 0, ready()),
        pod(ReplicaType::Worker, 1, 0, PodState::Pending),
        pod(ReplicaType::Launcher, 0, 0, PodState::Pending),
    ];
    assert_eq!(step(&mut j, &pods, t(1)).launch, None);
    pods[1].state = ready();
    assert_eq!(step(&mut j, &pods, t(1)).launch, Some(0));
    // The launcher runs mpirun: Partitioning, not yet Running.
    pods[2].state = PodState::Running { ready: false };
    let p = step(&mut j, &pods, t(2));
    assert_eq!(p.status.phase, Some(JobPhase::Partitioning));
    assert!(cond(&p, JobPhase::Running).is_none());
    assert!(cond(&p, JobPhase::Partitioning)
        .unwrap()
        .message
        .contains("DistParMETIS"));
    // Ready (the marker exists): Partitioned and Running.
    pods[2].state = ready();
    let p = step(&mut j, &pods, t(3));
    assert_eq!(p.status.phase, Some(JobPhase::Running));
    assert_eq!(cond(&p, JobPhase::Partitioned).unwrap().status, "True");
    assert_eq!(cond(&p, JobPhase::Partitioning).unwrap().status, "False");
    pods[2].state = PodState::Succeeded;
    let p = step(&mut j, &pods, t(4));
    assert_eq!(p.status.phase, Some(JobPhase::Succeeded));
}

#[test]
fn a_partition_step_no_reconcile_saw_running_is_still_recorded() {
    let mut j = job();
    j.spec.partition_mode = PartitionMode::DistParMetis;
    step(&mut j, &[], t(0));
    let mut pods = vec![
        pod(ReplicaType::Worker, 0, 0, ready()),
        pod(ReplicaType::Worker, 1, 0, ready()),
        pod(ReplicaType::Launcher, 0, 0, PodState::Pending),
    ];
    assert_eq!(step(&mut j, &pods, t(1)).launch, Some(0));
    // The ranks finished before the next reconcile: the launcher is
    // Ready at its first sight Running.
    pods[2].state = ready();
    let p = step(&mut j, &pods, t(2));
    assert_eq!(p.status.phase, Some(JobPhase::Running));
    assert_eq!(cond(&p, JobPhase::Partitioned).unwrap().status, "True");
    let partitioning = cond(&p, JobPhase::Partitioning).expect("Partitioning recorded");
    assert_eq!(partitioning.status, "False");
    assert_eq!(partitioning.reason, "JobPartitioned");
}

#[test]
fn only_a_distparmetis_launcher_waits_for_partitioning() {
    let mut j = job();
    j.spec.partition_mode = PartitionMode::Skip;
    let pods = vec![
        pod(ReplicaType::Worker, 0, 0, ready()),
        pod(ReplicaType::Worker, 1, 0, ready()),
        pod(
            ReplicaType::Launcher,
            0,
            0,
            PodState::Running { ready: false },
        ),
    ];
    let p = step(&mut j, &pods, t(0));
    assert_eq!(p.status.phase, Some(JobPhase::Running));
    assert!(cond(&p, JobPhase::Partitioning).is_none());
}

#[test]
fn a_worker_deleted_mid_run_fails_the_run() {
    let (mut j, mut pods) = running_job();
    pods.remove(2);
    let p = step(&mut j, &pods, t(10));
    let c = cond(&p, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "PodDeleted");
    assert!(c.message.contains("dgl-graphsage-worker-1"));
}

#[test]
fn transitions_report_each_new_true_condition_once() {
    let mut j = job();
    let p1 = plan(&j, Seen::pods(&[]), t(0), &BuildConfig::default(), None);
    let tr = transitions(None, &p1.status);
    // Created and Partitioning at once: one Event telling both.
    assert_eq!(
        tr.iter().map(|t| t.type_).collect::<Vec<_>>(),
        vec![JobPhase::Created]
    );
    assert_eq!(tr[0].reason, "JobCreated");
    assert!(
        tr[0].message.contains("is created") && tr[0].message.contains("is partitioning the graph"),
        "{}",
        tr[0].message
    );
    // Partitioning later than Created (DistParMETIS, a restart): its own Event.
    let mut before = p1.status.clone();
    before.conditions.retain(|c| c.type_ != "Partitioning");
    let later = transitions(Some(&before), &p1.status);
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].reason, "JobPartitioning");
    j.status = Some(p1.status.clone());
    let p2 = plan(&j, Seen::pods(&[]), t(5), &BuildConfig::default(), None);
    assert!(transitions(Some(&p1.status), &p2.status).is_empty());
}

mod eviction;
mod never_start;
mod node_loss;
mod partition_cache;
mod partitioner_ended;
