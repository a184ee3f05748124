//! Issue #34 item 4: a pod of the current run on a node whose Ready
//! condition is False or Unknown is lost at once (not after Kubernetes'
//! 300 s eviction): condition NodeLost naming the node and the pods, the
//! lost pods deleted with grace 0, the run restarted within backoffLimit.

use super::*;
use dgl_api::{CONDITION_NODE_LOST, EVENT_NODE_LOST, REASON_NODE_NOT_READY};

const NODE_A: &str = "ghost-a";

/// The Event of condition NodeLost between `old` and `new`, if it is told
/// (the shared path: [`transitions`]).
fn newly_node_lost(old: Option<&DGLJobStatus>, new: &DGLJobStatus) -> Option<Transition> {
    let t = dgl_api::JobConditionType::NodeLost;
    transitions(old, new).into_iter().find(|e| e.type_ == t)
}

fn down(node: &str, ready: &str) -> DownNode {
    DownNode {
        name: node.into(),
        ready: ready.into(),
        reason: Some("NodeStatusUnknown".into()),
    }
}

/// Worker 0 and the launcher on `ghost-a`, which is down.
fn on_down_a() -> PodsOnDownNodes {
    [worker_name(JOB, 0), launcher_name(JOB)]
        .into_iter()
        .map(|p| (p, down(NODE_A, "Unknown")))
        .collect()
}

fn step_on(job: &mut DGLJob, pods: &[ObservedPod], now: Timestamp, d: &PodsOnDownNodes) -> Plan {
    let p = plan(
        job,
        Seen::pods(pods).down(d),
        now,
        &BuildConfig::default(),
        None,
    );
    job.status = Some(p.status.clone());
    p
}

fn node_lost(p: &Plan) -> Option<&Condition> {
    p.status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_NODE_LOST)
}

fn forced(p: &Plan) -> Vec<String> {
    let mut f: Vec<String> = p
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::ForceDeletePod(n) => Some(n.clone()),
            _ => None,
        })
        .collect();
    f.sort();
    f
}

fn backoff(j: &mut DGLJob, limit: i32) {
    j.spec.run_policy = Some(RunPolicy {
        backoff_limit: Some(limit),
        ..Default::default()
    });
}

#[test]
fn pods_on_a_not_ready_node_restart_the_run_naming_the_node_and_pods() {
    let (mut j, pods) = running_job();
    backoff(&mut j, 2);
    let p = step_on(&mut j, &pods, t(10), &on_down_a());
    assert_eq!(p.status.phase, Some(JobPhase::Restarting));
    assert_eq!(p.status.restart_count, Some(1));
    let c = node_lost(&p).expect("condition NodeLost");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", REASON_NODE_NOT_READY)
    );
    assert_eq!(
        c.message,
        format!(
            "node {NODE_A} is NotReady (Ready Unknown: NodeStatusUnknown): pods of run 0 lost: {}, {}",
            launcher_name(JOB),
            worker_name(JOB, 0)
        )
    );
    let r = cond(&p, JobPhase::Restarting).unwrap();
    assert_eq!(r.reason, EVENT_NODE_LOST);
    assert!(r.message.contains(NODE_A), "{}", r.message);
    assert!(r.message.contains("restart 1 of 2"), "{}", r.message);
    // The lost pods go with grace 0; worker 1 as in any restart; the
    // ready partitioner (on a live node) is kept.
    assert_eq!(forced(&p), vec![launcher_name(JOB), worker_name(JOB, 0)]);
    let mut d = deleted(&p);
    d.sort();
    assert_eq!(
        d,
        vec![launcher_name(JOB), worker_name(JOB, 0), worker_name(JOB, 1)]
    );
    assert!(p
        .status
        .replica_statuses
        .get(&ReplicaType::Worker)
        .is_none_or(|s| s.active == 0));

    // The Warning Event's source: NodeLost became True, once.
    let before = j.status.clone();
    assert!(newly_node_lost(None, &p.status).is_some());
    let mut left = pods.clone();
    for q in left.iter_mut().skip(1) {
        q.state = PodState::Terminating;
    }
    let again = step_on(&mut j, &left, t(11), &on_down_a());
    assert!(newly_node_lost(before.as_ref(), &again.status).is_none());
    assert_eq!(again.status.restart_count, Some(1), "no second restart");
    // Still Terminating on the dead node: forced again, not waited for.
    assert_eq!(
        forced(&again),
        vec![launcher_name(JOB), worker_name(JOB, 0)]
    );

    // The next run, on the remaining node, runs: NodeLost turns False.
    let next = vec![
        pod(ReplicaType::Partitioner, 0, 0, ready()),
        pod(ReplicaType::Worker, 0, 1, ready()),
        pod(ReplicaType::Worker, 1, 1, ready()),
        pod(
            ReplicaType::Launcher,
            0,
            1,
            PodState::Running { ready: false },
        ),
    ];
    let p = step_on(&mut j, &next, t(20), &PodsOnDownNodes::new());
    assert_eq!(p.status.phase, Some(JobPhase::Running));
    let c = node_lost(&p).unwrap();
    assert_eq!(c.status, "False");
    assert_eq!(c.last_transition_time, Time(t(20)));
    // Cleared, it still names the node and the pods of the last loss.
    let last = format!("Last loss: node {NODE_A} is NotReady");
    assert!(c.message.contains(&last), "{}", c.message);
    assert!(c.message.contains(&worker_name(JOB, 0)), "{}", c.message);
}

#[test]
fn pods_on_ready_nodes_change_nothing() {
    let (mut j, pods) = running_job();
    let without = step(&mut j.clone(), &pods, t(10));
    // Another job's pod, or a pod of this job the map does not name: only
    // the pods named as on a down node count.
    let elsewhere: PodsOnDownNodes = [("other-worker-0".to_string(), down(NODE_A, "False"))].into();
    let p = step_on(&mut j, &pods, t(10), &elsewhere);
    assert_eq!(p.status, without.status);
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert!(node_lost(&p).is_none());
    assert_eq!(p.status.phase, Some(JobPhase::Running));
}

#[test]
fn with_backoff_limit_spent_the_job_fails_naming_the_node() {
    let (mut j, pods) = running_job();
    backoff(&mut j, 0);
    let p = step_on(&mut j, &pods, t(10), &on_down_a());
    assert_eq!(p.status.phase, Some(JobPhase::Failed));
    let f = cond(&p, JobPhase::Failed).unwrap();
    assert_eq!(f.reason, EVENT_NODE_LOST);
    assert!(
        f.message.contains(&format!("node {NODE_A} is NotReady")),
        "{}",
        f.message
    );
    assert!(f.message.contains(&worker_name(JOB, 0)), "{}", f.message);
    assert_eq!(node_lost(&p).unwrap().status, "True");
    // cleanPodPolicy applies; the lost pods themselves go with grace 0.
    assert_eq!(forced(&p), vec![launcher_name(JOB), worker_name(JOB, 0)]);
}

#[test]
fn a_lost_partitioner_is_not_kept_and_a_succeeded_pod_is_not_lost() {
    let (mut j, mut pods) = running_job();
    backoff(&mut j, 1);
    let d: PodsOnDownNodes = [
        (partitioner_name(JOB), down("ghost-b", "False")),
        (worker_name(JOB, 1), down("ghost-b", "False")),
    ]
    .into();
    pods[2].state = PodState::Succeeded;
    let p = step_on(&mut j, &pods, t(10), &d);
    let c = node_lost(&p).unwrap();
    assert!(c.message.contains(&partitioner_name(JOB)), "{}", c.message);
    assert!(!c.message.contains(&worker_name(JOB, 1)), "{}", c.message);
    assert!(
        c.message.contains("(Ready False: NodeStatusUnknown)"),
        "{}",
        c.message
    );
    // The partitioner on the dead node is deleted (grace 0), not reused;
    // the succeeded worker's deletion is forced too (its node is down).
    assert_eq!(forced(&p), vec![partitioner_name(JOB), worker_name(JOB, 1)]);
}

#[test]
fn a_down_node_reads_from_its_ready_condition() {
    use k8s_openapi::api::core::v1::NodeCondition;
    let c = |status: &str| NodeCondition {
        type_: "Ready".into(),
        status: status.into(),
        reason: Some("KubeletNotReady".into()),
        ..Default::default()
    };
    assert_eq!(DownNode::of("n", &[c("True")]), None);
    assert_eq!(DownNode::of("n", &[]), None, "not judged before it reports");
    let d = DownNode::of("n", &[c("Unknown")]).unwrap();
    assert_eq!(
        (d.ready.as_str(), d.reason.as_deref()),
        ("Unknown", Some("KubeletNotReady"))
    );
    assert!(DownNode::of("n", &[c("False")]).is_some());
}
