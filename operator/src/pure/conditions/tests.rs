use super::*;
use k8s_openapi::jiff::Timestamp;

use JobConditionType::{ApplyFailed, NodeLost, PodsNotStarting, Queued};

fn t(s: i64) -> Time {
    Time(Timestamp::from_second(1_800_000_000 + s).unwrap())
}

fn applied(conds: &[Condition], s: ConditionState, now: i64) -> Vec<Condition> {
    let mut conds = conds.to_vec();
    apply(&mut conds, s, &t(now), Some(7));
    conds
}

fn status(conds: Vec<Condition>) -> DGLJobStatus {
    DGLJobStatus {
        conditions: conds,
        ..Default::default()
    }
}

#[test]
fn set_writes_a_new_condition_and_keeps_its_time_while_it_stays_true() {
    let c = applied(
        &[],
        ConditionState::set(PodsNotStarting, "Unschedulable", "a"),
        1,
    );
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].type_.as_str(), c[0].status.as_str()),
        ("PodsNotStarting", "True")
    );
    assert_eq!(
        (c[0].reason.as_str(), c[0].message.as_str()),
        ("Unschedulable", "a")
    );
    assert_eq!(
        (c[0].last_transition_time.clone(), c[0].observed_generation),
        (t(1), Some(7))
    );
    // Still True for another reason: reason and message follow, time stays.
    let c = applied(
        &c,
        ConditionState::set(PodsNotStarting, "ErrImagePull", "b"),
        5,
    );
    assert_eq!(
        (c[0].reason.as_str(), c[0].message.as_str()),
        ("ErrImagePull", "b")
    );
    assert_eq!(c[0].last_transition_time, t(1));
}

#[test]
fn again_moves_the_time_of_a_condition_already_true() {
    let c = applied(&[], ConditionState::set(NodeLost, "NodeNotReady", "a"), 1);
    let c = applied(&c, ConditionState::again(NodeLost, "NodeNotReady", "b"), 4);
    assert_eq!((c[0].status.as_str(), c[0].message.as_str()), ("True", "b"));
    assert_eq!(c[0].last_transition_time, t(4));
}

#[test]
fn clear_turns_only_a_true_condition_false_and_writes_no_absent_one() {
    assert!(applied(&[], ConditionState::clear(NodeLost, "RunRecovered", "x"), 1).is_empty());
    let c = applied(
        &[],
        ConditionState::set(NodeLost, "NodeNotReady", "lost"),
        1,
    );
    let c = applied(
        &c,
        ConditionState::clear(NodeLost, "RunRecovered", "back"),
        3,
    );
    assert_eq!(
        (
            c[0].status.as_str(),
            c[0].reason.as_str(),
            c[0].message.as_str()
        ),
        ("False", "RunRecovered", "back")
    );
    assert_eq!(c[0].last_transition_time, t(3));
    // Already False: left as it is (reason, message and time).
    let again = applied(&c, ConditionState::clear(NodeLost, "Other", "other"), 9);
    assert_eq!(again, c);
}

#[test]
fn shown_false_is_written_even_where_the_condition_is_absent() {
    let c = applied(
        &[],
        ConditionState::shown(Queued, false, "Admitted", "in"),
        2,
    );
    assert_eq!(
        (c[0].status.as_str(), c[0].reason.as_str()),
        ("False", "Admitted")
    );
    let c = applied(
        &c,
        ConditionState::shown(Queued, true, "EvictedPreempted", "out"),
        6,
    );
    assert_eq!(
        (c[0].status.as_str(), c[0].last_transition_time.clone()),
        ("True", t(6))
    );
    assert_eq!(c.len(), 1, "one condition per type");
}

#[test]
fn each_type_is_told_as_it_asks() {
    let old = status(Vec::new());
    let mut conds = Vec::new();
    for s in [
        ConditionState::set(PodsNotStarting, "Unschedulable", "pod a"),
        ConditionState::set(NodeLost, "NodeNotReady", "node n"),
        ConditionState::shown(Queued, true, "WaitingForAdmission", "queued"),
        ConditionState::set(JobPhase::Running, "JobRunning", "running"),
    ] {
        apply(&mut conds, s, &t(1), None);
    }
    let told = transitions(Some(&old), &status(conds));
    let got: Vec<(JobConditionType, bool, &str)> = told
        .iter()
        .map(|e| (e.type_, e.warning, e.reason.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (PodsNotStarting, true, "Unschedulable"),
            // NodeLost's Event has a reason of its own.
            (NodeLost, true, "NodeLost"),
            (JobConditionType::Running, false, "JobRunning"),
        ],
        "Queued is told by no Event"
    );
}

#[test]
fn a_true_condition_is_told_again_only_when_its_time_moves_or_its_type_asks() {
    let first = status(applied(
        &[],
        ConditionState::set(NodeLost, "NodeNotReady", "a"),
        1,
    ));
    let same = status(applied(
        &first.conditions,
        ConditionState::set(NodeLost, "NodeNotReady", "b"),
        2,
    ));
    assert!(
        transitions(Some(&first), &same).is_empty(),
        "a new message alone"
    );
    let again = status(applied(
        &first.conditions,
        ConditionState::again(NodeLost, "NodeNotReady", "c"),
        3,
    ));
    assert_eq!(transitions(Some(&first), &again).len(), 1);
    // ApplyFailed tells each new message while True.
    let failing = status(applied(
        &[],
        ConditionState::set(ApplyFailed, "Forbidden", "1"),
        1,
    ));
    let still = status(applied(
        &failing.conditions,
        ConditionState::set(ApplyFailed, "Forbidden", "2"),
        2,
    ));
    let told = transitions(Some(&failing), &still);
    assert_eq!((told.len(), told[0].message.as_str()), (1, "2"));
    assert!(transitions(Some(&still), &still).is_empty());
    // A type this operator does not write is never told.
    let mut other = still.clone();
    other.conditions[0].type_ = "SomeoneElses".into();
    assert!(transitions(None, &other).is_empty());
}

#[test]
fn update_is_none_when_nothing_changes() {
    let old = status(Vec::new());
    let clear = ConditionState::clear(ApplyFailed, "ApplySucceeded", "ok");
    assert_eq!(update(&old, clear, &t(1), None), None);
    let set = ConditionState::set(ApplyFailed, "Forbidden", "quota");
    let u = update(&old, set, &t(1), None).expect("a change");
    assert_eq!(u.transitions.len(), 1);
    assert_eq!(u.status.conditions[0].type_, "ApplyFailed");
}
