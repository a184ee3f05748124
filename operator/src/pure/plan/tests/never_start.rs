//! Issue #25 item 1: pods that never start are named at once and fail the
//! job after runPolicy.podStartTimeoutSeconds.

use super::*;

/// The Event of condition PodsNotStarting between `old` and `new`, if it is told
/// (the shared path: [`transitions`]).
fn newly_not_starting(old: Option<&DGLJobStatus>, new: &DGLJobStatus) -> Option<Transition> {
    let t = dgl_api::JobConditionType::PodsNotStarting;
    transitions(old, new).into_iter().find(|e| e.type_ == t)
}

fn stuck(role: ReplicaType, index: i32, container: Option<&str>, reason: &str) -> ObservedPod {
    let mut p = pod(role, index, 0, PodState::Pending);
    p.ip = None;
    p.not_starting = Some(crate::pure::observe::StartFailure {
        container: container.map(str::to_string),
        reason: reason.into(),
        message: "the kubelet's words".into(),
    });
    p
}

fn not_starting(p: &Plan) -> Option<&Condition> {
    p.status
        .conditions
        .iter()
        .find(|c| c.type_ == PODS_NOT_STARTING)
}

#[test]
fn a_pod_that_cannot_start_is_named_at_once_once_evented_and_cleared_when_it_starts() {
    let mut j = job();
    let mut pods = vec![
        pod(ReplicaType::Partitioner, 0, 0, PodState::Pending),
        stuck(ReplicaType::Worker, 1, Some("graphsage"), "ErrImagePull"),
        stuck(ReplicaType::Worker, 0, None, "Unschedulable"),
    ];
    let p = step(&mut j, &[], t(0));
    let old = j.status.clone();
    let p2 = step(&mut j, &pods, t(1));
    let c = not_starting(&p2).expect("the condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "Unschedulable")
    );
    assert_eq!(
        c.message,
        format!(
            "pod {}: Unschedulable: the kubelet's words; 1 more pod(s) cannot start: {}",
            worker_name(JOB, 0),
            worker_name(JOB, 1)
        )
    );
    assert!(not_starting(&p).is_none());
    assert!(newly_not_starting(old.as_ref(), &p2.status).is_some());
    // The phase stays truthful: the job is partitioning, not failed.
    assert_eq!(p2.status.phase, Some(JobPhase::Partitioning));
    // The default timeout (300 s) is armed: wake up then.
    assert_eq!(p2.requeue_after, Some(Duration::from_secs(300)));
    // Still stuck, for another reason: no second Event, the clock kept.
    let old = j.status.clone();
    pods[1].not_starting.as_mut().unwrap().reason = "ImagePullBackOff".into();
    pods.truncate(2);
    let p3 = step(&mut j, &pods, t(20));
    assert_eq!(not_starting(&p3).unwrap().reason, "ImagePullBackOff");
    assert!(newly_not_starting(old.as_ref(), &p3.status).is_none());
    assert_eq!(p3.requeue_after, Some(Duration::from_secs(281)));
    // Started: False again.
    pods[1].not_starting = None;
    let p4 = step(&mut j, &pods, t(30));
    let c = not_starting(&p4).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "PodsStarted")
    );
}

#[test]
fn a_pod_stuck_past_the_start_timeout_fails_the_job_naming_it() {
    let mut j = job();
    j.spec.run_policy = Some(RunPolicy {
        pod_start_timeout_seconds: Some(20),
        ..Default::default()
    });
    let pods = vec![
        pod(ReplicaType::Partitioner, 0, 0, ready()),
        stuck(
            ReplicaType::Worker,
            1,
            Some("graphsage"),
            "CreateContainerConfigError",
        ),
    ];
    let p = step(&mut j, &pods, t(0));
    assert_eq!(p.requeue_after, Some(Duration::from_secs(20)));
    assert!(cond(&p, JobPhase::Failed).is_none());
    let p = step(&mut j, &pods, t(19));
    assert!(cond(&p, JobPhase::Failed).is_none());
    let p = step(&mut j, &pods, t(20));
    let f = cond(&p, JobPhase::Failed).expect("failed");
    assert_eq!(f.reason, "PodStartTimeout");
    assert_eq!(
        f.message,
        format!(
            "pod {}: container graphsage: CreateContainerConfigError: the kubelet's words \
             (not started within runPolicy.podStartTimeoutSeconds, 20s)",
            worker_name(JOB, 1)
        )
    );
    assert_eq!(p.status.phase, Some(JobPhase::Failed));
    assert_eq!(not_starting(&p).unwrap().status, "False");
    // cleanPodPolicy Running (the default) removes the stuck pod.
    assert!(deleted(&p).contains(&worker_name(JOB, 1)));
}

#[test]
fn a_start_timeout_of_0_never_fails_the_job() {
    let mut j = job();
    j.spec.run_policy = Some(RunPolicy {
        pod_start_timeout_seconds: Some(0),
        ..Default::default()
    });
    let pods = vec![stuck(
        ReplicaType::Launcher,
        0,
        Some("x"),
        "ImagePullBackOff",
    )];
    step(&mut j, &pods, t(0));
    let p = step(&mut j, &pods, t(1_000_000));
    assert!(cond(&p, JobPhase::Failed).is_none());
    assert_eq!(not_starting(&p).unwrap().status, "True");
}
