//! Issue #25 item 2: the failure that decides a run is its cause, and pods
//! stuck Terminating do not block the next run forever.

use super::*;

/// A running job whose worker 0 is being evicted (DisruptionTarget, its
/// deletion asked at t(3)) and whose launcher failed at t(5) because it
/// lost that worker.
fn evicted_worker_and_its_launcher() -> (DGLJob, Vec<ObservedPod>) {
    let (j, mut pods) = running_job();
    pods[1].state = PodState::Terminating;
    pods[1].facts = FailureFacts {
        ended_at: Some(t(3)),
        deletion_due: Some(t(33)),
        ..exited(143, true)
    };
    pods[3].state = failed("pod l: container c exited with code 1: launcher: lost worker-0");
    pods[3].facts = FailureFacts {
        ended_at: Some(t(5)),
        ..exited(1, false)
    };
    (j, pods)
}

#[test]
fn an_evicted_worker_decides_under_an_ignore_rule_not_the_launcher_that_lost_it() {
    let (mut j, pods) = evicted_worker_and_its_launcher();
    with_policy(&mut j, 0);
    let p = step(&mut j, &pods, t(6));
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));
    assert_eq!(
        (p.status.restart_count, p.status.ignored_restarts),
        (Some(1), Some(1))
    );
    let c = cond(&p, JobPhase::Restarting).unwrap();
    assert_eq!(c.reason, "PodDeleted");
    assert!(c.message.contains(&worker_name(JOB, 0)), "{}", c.message);
    assert!(
        c.message.contains("rules[1] (Ignore) matched"),
        "{}",
        c.message
    );
    assert!(c.message.contains("not counted against backoffLimit"));

    // The same once the kubelet marked the evicted pod Failed (not yet
    // deleted): the disruption decides, whatever the names' order.
    let (mut j, mut pods) = evicted_worker_and_its_launcher();
    with_policy(&mut j, 0);
    pods[1].state = failed("pod w0: container c exited with code 143");
    pods[1].facts.ended_at = Some(t(9));
    let p = step(&mut j, &pods, t(10));
    assert_eq!(p.status.ignored_restarts, Some(1));
    assert!(cond(&p, JobPhase::Restarting)
        .unwrap()
        .message
        .contains("w0"));
}

#[test]
fn without_an_ignore_rule_an_eviction_restart_is_counted() {
    let (mut j, pods) = evicted_worker_and_its_launcher();
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(1),
        ..Default::default()
    });
    let p = step(&mut j, &pods, t(6));
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));
    assert_eq!(
        (p.status.restart_count, p.status.ignored_restarts),
        (Some(1), None)
    );
    let c = cond(&p, JobPhase::Restarting).unwrap();
    assert!(c.message.contains(&worker_name(JOB, 0)), "{}", c.message);
    assert!(c.message.contains("restart 1 of 1"), "{}", c.message);

    // backoffLimit 0: the eviction fails the job, named as the cause.
    let (mut j, pods) = evicted_worker_and_its_launcher();
    let p = step(&mut j, &pods, t(6));
    let c = cond(&p, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "PodDeleted");
    assert!(c.message.contains(&worker_name(JOB, 0)), "{}", c.message);
}

#[test]
fn the_earliest_failure_decides_before_the_pods_that_failed_because_of_it() {
    let decide = |worker_at: i64, launcher_at: i64| {
        let (mut j, mut pods) = running_job();
        pods[2].state = failed("pod w1: container c exited with code 1");
        pods[2].facts = FailureFacts {
            ended_at: Some(t(worker_at)),
            ..exited(1, false)
        };
        pods[3].state = failed("pod l: container c exited with code 1");
        pods[3].facts = FailureFacts {
            ended_at: Some(t(launcher_at)),
            ..exited(1, false)
        };
        cond(&step(&mut j, &pods, t(20)), JobPhase::Failed)
            .unwrap()
            .reason
            .clone()
    };
    // Name order alone would always pick the launcher.
    assert_eq!(decide(3, 5), "WorkerFailed");
    assert_eq!(decide(5, 3), "LauncherFailed");

    // A worker gone (deleted, nothing left to date it) decides before the
    // launcher that failed because of it.
    let (mut j, mut pods) = running_job();
    pods[3].state = failed("pod l: container c exited with code 1");
    pods[3].facts = FailureFacts {
        ended_at: Some(t(5)),
        ..exited(1, false)
    };
    pods.remove(2);
    let c = cond(&step(&mut j, &pods, t(6)), JobPhase::Failed)
        .cloned()
        .unwrap();
    assert_eq!(c.reason, "PodDeleted");
    assert!(c.message.contains(&worker_name(JOB, 1)), "{}", c.message);
}

#[test]
fn an_eviction_before_training_decides_when_another_pod_failed_of_it() {
    // The launcher is still in its watcher-loop: a worker being deleted is
    // made again, not a failure, unless another pod failed meanwhile.
    let mut j = job();
    with_policy(&mut j, 0);
    let mut pods = vec![
        pod(ReplicaType::Partitioner, 0, 0, PodState::Pending),
        pod(ReplicaType::Worker, 0, 0, PodState::Terminating),
        pod(ReplicaType::Worker, 1, 0, ready()),
        pod(ReplicaType::Launcher, 0, 0, PodState::Pending),
    ];
    pods[1].facts = FailureFacts {
        ended_at: Some(t(3)),
        deletion_due: Some(t(33)),
        ..exited(143, true)
    };
    let p = step(&mut j, &pods, t(4));
    assert!(cond(&p, JobPhase::Restarting).is_none());
    assert!(cond(&p, JobPhase::Failed).is_none());
    pods[2].state = failed("pod w1: container c exited with code 1");
    pods[2].facts = FailureFacts {
        ended_at: Some(t(5)),
        ..exited(1, false)
    };
    let p = step(&mut j, &pods, t(6));
    assert_eq!(p.status.ignored_restarts, Some(1));
    let c = cond(&p, JobPhase::Restarting).unwrap();
    assert!(c.message.contains(&worker_name(JOB, 0)), "{}", c.message);
}

fn force_deleted(p: &Plan) -> Vec<String> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::ForceDeletePod(n) => Some(n.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_pod_stuck_terminating_is_deleted_with_grace_0_a_minute_past_its_grace() {
    // Run 0 failed and was deleted at t(10) with the default grace (due at
    // t(40)); the node stopped answering, so its pods stay Terminating.
    let (mut j, mut pods) = running_job();
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(1),
        ..Default::default()
    });
    pods[1].state = failed("pod w0: container c exited with code 1");
    assert_eq!(step(&mut j, &pods, t(10)).status.restart_count, Some(1));
    for p in pods.iter_mut().skip(1) {
        p.state = PodState::Terminating;
        p.facts.deletion_due = Some(t(40));
    }
    // A pod without a deletion time (none seen) is never forced.
    pods[2].facts.deletion_due = None;

    let p = step(&mut j, &pods, t(99));
    assert!(force_deleted(&p).is_empty(), "{:?}", p.steps);
    assert!(created(&p).is_empty(), "the names are still taken");
    assert_eq!(p.requeue_after, Some(std::time::Duration::from_secs(1)));

    let p = step(&mut j, &pods, t(100));
    assert_eq!(
        force_deleted(&p),
        vec![worker_name(JOB, 0), launcher_name(JOB)]
    );
    // Gone: the next run takes the names.
    pods.retain(|p| p.name == partitioner_name(JOB) || p.name == worker_name(JOB, 1));
    pods[1].facts.deletion_due = Some(t(40));
    let p = step(&mut j, &pods, t(101));
    assert_eq!(created(&p), vec![worker_name(JOB, 0), launcher_name(JOB)]);
    assert_eq!(force_deleted(&p), vec![worker_name(JOB, 1)]);
}

#[test]
fn a_terminating_pod_within_its_grace_is_waited_for() {
    // A long grace period (an hour) is the user's: no force before it ends.
    let (mut j, mut pods) = running_job();
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(1),
        ..Default::default()
    });
    pods[3].state = PodState::Terminating;
    pods[3].facts.deletion_due = Some(t(3600));
    let p = step(&mut j, &pods, t(1000));
    assert!(force_deleted(&p).is_empty());
    assert!(p.requeue_after.is_some_and(|d| d.as_secs() <= 2660));
    let p = step(&mut j, &pods, t(3660));
    assert_eq!(force_deleted(&p), vec![launcher_name(JOB)]);
}

/// Issue #36 item 3: a worker evicted and already gone from the cache when
/// the operator decides still matches the Ignore rule through the facts the
/// cache kept of it.
#[test]
fn an_evicted_worker_gone_before_the_decision_still_matches_the_ignore_rule() {
    let (mut j, mut pods) = running_job();
    with_policy(&mut j, 0);
    let mut gone = pods.remove(1);
    gone.state = PodState::Terminating;
    gone.facts = FailureFacts {
        ended_at: Some(t(3)),
        ..exited(143, true)
    };
    let p = plan_with_gone(
        &j,
        &pods,
        std::slice::from_ref(&gone),
        t(6),
        &BuildConfig::default(),
        None,
    );
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));
    assert_eq!(
        (p.status.restart_count, p.status.ignored_restarts),
        (Some(1), Some(1))
    );
    let c = cond(&p, JobPhase::Restarting).unwrap();
    assert!(
        c.message.contains("rules[1] (Ignore) matched"),
        "{}",
        c.message
    );

    // A gone pod of an earlier run says nothing about this one.
    gone.epoch = -1;
    let p = plan_with_gone(
        &j,
        &pods,
        std::slice::from_ref(&gone),
        t(6),
        &BuildConfig::default(),
        None,
    );
    assert_eq!(p.status.phase, Some(JobPhase::Failed));
}
