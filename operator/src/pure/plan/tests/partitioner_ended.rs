//! Found by chaos KubeletHang (issue #25 item 2): while the node did not
//! answer, the old run's launcher finished training and told the
//! partitioner to exit; the restarted run then waited for a partitioner
//! that had Completed. A partitioner that exited before the current run
//! trained is made again (before the launch) or fails the run (after it).

use super::*;

/// The exact sequence of the chaos fault, up to the new run's pods
/// Pending and the partitioner seen Completed once the kubelet answers.
fn restarted_after_the_partitioner_completed() -> (DGLJob, Vec<ObservedPod>) {
    let (mut j, mut pods) = running_job();
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(1),
        ..Default::default()
    });
    // Worker 0 deleted (grace 30 s) on a frozen node: Terminating.
    pods[1].state = PodState::Terminating;
    pods[1].facts.deletion_due = Some(t(31));
    let p = step(&mut j, &pods, t(2));
    assert_eq!(p.status.restart_count, Some(1));
    assert!(
        !deleted(&p).contains(&partitioner_name(JOB)),
        "a serving partitioner is kept for the next run"
    );
    // Force-deleted a minute past their grace; the new run's pods made.
    pods.truncate(1);
    let p = step(&mut j, &pods, t(100));
    assert_eq!(
        created(&p),
        vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)]
    );
    for (role, i) in [
        (ReplicaType::Worker, 0),
        (ReplicaType::Worker, 1),
        (ReplicaType::Launcher, 0),
    ] {
        pods.push(pod(role, i, 1, PodState::Pending));
    }
    // The kubelet answers: the old launcher had told the partitioner to exit.
    pods[0].state = PodState::Succeeded;
    (j, pods)
}

#[test]
fn a_partitioner_that_completed_before_the_restarted_run_is_made_again() {
    let (mut j, mut pods) = restarted_after_the_partitioner_completed();
    let p = step(&mut j, &pods, t(151));
    assert_eq!(deleted(&p), vec![partitioner_name(JOB)]);
    assert_eq!(
        p.launch, None,
        "no launch with a partitioner that serves no more"
    );
    assert_eq!(p.status.restart_count, Some(1), "not a failure of the run");
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));

    // Deleted: a new one (run 1) is made; the workers get Ready meanwhile.
    pods.remove(0);
    for w in pods.iter_mut().take(2) {
        w.state = ready();
    }
    let p = step(&mut j, &pods, t(152));
    assert_eq!(created(&p), vec![partitioner_name(JOB)]);
    assert_eq!(
        p.launch, None,
        "no launch before the new partitioner serves"
    );
    let mut part = pod(
        ReplicaType::Partitioner,
        0,
        1,
        PodState::Running { ready: false },
    );
    pods.insert(0, part.clone());
    assert_eq!(step(&mut j, &pods, t(160)).launch, None);

    // It serves: run 1 is launched, and Running once its launcher runs.
    part.state = ready();
    pods[0] = part;
    let p = step(&mut j, &pods, t(170));
    assert_eq!(p.launch, Some(1));
    assert!(
        created(&p).is_empty() && deleted(&p).is_empty(),
        "{:?}",
        p.steps
    );
    pods[3].state = PodState::Running { ready: false };
    let p = plan(
        &j,
        Seen::pods(&pods),
        t(171),
        &BuildConfig::default(),
        Some(1),
    );
    assert_eq!(p.status.phase, Some(JobPhase::Running));
}

#[test]
fn a_partitioner_that_completed_after_the_launch_fails_the_run_naming_it() {
    let (mut j, pods) = restarted_after_the_partitioner_completed();
    // Run 1 was launched before the partitioner was seen Completed.
    let p = plan(
        &j,
        Seen::pods(&pods),
        t(151),
        &BuildConfig::default(),
        Some(1),
    );
    j.status = Some(p.status.clone());
    let c = cond(&p, JobPhase::Failed).expect("backoffLimit 1 is used up");
    assert_eq!(c.reason, "PartitionerFailed");
    assert!(
        c.message.contains(&partitioner_name(JOB)) && c.message.contains("Completed"),
        "{}",
        c.message
    );
}

#[test]
fn a_restart_makes_a_new_partitioner_when_the_old_one_exited() {
    let (mut j, mut pods) = running_job();
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(1),
        ..Default::default()
    });
    pods[0].state = PodState::Succeeded;
    pods[2].state = failed("pod w1: container c exited with code 1");
    let p = step(&mut j, &pods, t(10));
    assert_eq!(p.status.restart_count, Some(1));
    assert!(
        deleted(&p).contains(&partitioner_name(JOB)),
        "{:?}",
        p.steps
    );
}

#[test]
fn a_partitioner_that_completes_at_the_end_of_training_is_left_alone() {
    // The launcher tells it to exit once the training succeeded, before
    // its own pod is Succeeded; the workers exit 0 then too.
    let (mut j, mut pods) = running_job();
    for p in pods.iter_mut().take(3) {
        p.state = PodState::Succeeded;
    }
    let p = plan(
        &j,
        Seen::pods(&pods),
        t(20),
        &BuildConfig::default(),
        Some(0),
    );
    j.status = Some(p.status.clone());
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert_eq!(p.status.phase, Some(JobPhase::Running));
    pods[3].state = PodState::Succeeded;
    let p = plan(
        &j,
        Seen::pods(&pods),
        t(21),
        &BuildConfig::default(),
        Some(0),
    );
    assert_eq!(p.status.phase, Some(JobPhase::Succeeded));
}

/// Issue #36 item 2: the partitioner kept across the restart (it served)
/// then fails (OOMKilled, evicted) before the launch. It is of the earlier
/// run's epoch; it must still end the current run, which uses it: a
/// restart under backoffLimit, or the job fails, never Partitioning for
/// ever.
#[test]
fn a_kept_partitioner_that_fails_after_the_restart_ends_the_run() {
    // backoffLimit 1, one restart spent: the job fails.
    let (mut j, mut pods) = restarted_after_the_partitioner_completed();
    pods[0].state = failed("OOMKilled");
    let p = step(&mut j, &pods, t(151));
    assert_eq!(p.status.phase, Some(JobPhase::Failed), "{:?}", p.status);
    let c = p
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Failed")
        .unwrap();
    assert_eq!(c.reason, "PartitionerFailed");

    // backoffLimit 2: run 2 starts, without the failed partitioner.
    let (mut j, mut pods) = restarted_after_the_partitioner_completed();
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(2),
        ..Default::default()
    });
    pods[0].state = failed("OOMKilled");
    let p = step(&mut j, &pods, t(151));
    assert_eq!(p.status.restart_count, Some(2), "{:?}", p.status);
    assert!(deleted(&p).contains(&partitioner_name(JOB)));
}
