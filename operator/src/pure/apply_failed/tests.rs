use super::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

/// `status` with condition ApplyFailed True (`failing`) or cleared, through
/// the shared path.
fn with_condition(
    mut status: DGLJobStatus,
    failing: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
    generation: Option<i64>,
) -> DGLJobStatus {
    let t = JobConditionType::ApplyFailed;
    let s = if failing {
        ConditionState::set(t, reason, message)
    } else {
        ConditionState::clear(t, reason, message)
    };
    conditions::apply(&mut status.conditions, s, &Time(now), generation);
    status
}

#[test]
fn the_condition_turns_true_then_false_and_keeps_its_time_meanwhile() {
    let s = with_condition(Default::default(), false, "R", "m", t(0), Some(1));
    assert!(s.conditions.is_empty(), "a False never True says nothing");
    let s = with_condition(s, true, "Forbidden", "quota", t(1), Some(1));
    assert_eq!(s.conditions[0].status, "True");
    let s = with_condition(s, true, "Forbidden", "quota again", t(5), Some(1));
    assert_eq!(s.conditions[0].last_transition_time, Time(t(1)));
    assert_eq!(s.conditions[0].message, "quota again");
    let s = with_condition(s, false, "ApplySucceeded", "ok", t(9), Some(1));
    assert_eq!(s.conditions[0].status, "False");
    assert_eq!(s.conditions[0].last_transition_time, Time(t(9)));
}

fn failed(attempt: u32) -> Reconciled<'static> {
    Reconciled::Failed {
        attempt,
        reason: "Forbidden",
        error: "create Pod q-partitioner: exceeded quota",
    }
}

#[test]
fn failures_are_shown_from_the_third_each_with_a_warning_and_a_success_clears_them() {
    let none = DGLJobStatus::default();
    assert_eq!(after(&none, failed(1), t(0), Some(1)), None);
    assert_eq!(after(&none, failed(FAILING_AFTER - 1), t(0), Some(1)), None);
    assert_eq!(after(&none, Reconciled::Succeeded, t(0), Some(1)), None);

    let third = after(&none, failed(3), t(3), Some(1)).expect("shown");
    let c = &third.status.conditions[0];
    assert_eq!(
        (c.type_.as_str(), c.status.as_str()),
        (APPLY_FAILED, "True")
    );
    assert_eq!(c.reason, "Forbidden");
    assert_eq!(
        c.message,
        "create Pod q-partitioner: exceeded quota (failed 3 times in a row; retrying)"
    );
    assert_eq!(third.transitions.len(), 1);
    let e = &third.transitions[0];
    assert!(e.warning);
    assert_eq!(
        (e.type_, e.reason.as_str()),
        (JobConditionType::ApplyFailed, "Forbidden")
    );
    assert_eq!(e.message, c.message);

    // The fourth: the same episode (time kept), told again.
    let fourth = after(&third.status, failed(4), t(7), Some(1)).expect("a new message");
    let c = &fourth.status.conditions[0];
    assert_eq!(c.last_transition_time, Time(t(3)));
    assert!(c.message.contains("failed 4 times"), "{}", c.message);
    assert_eq!(fourth.transitions.len(), 1);

    // A success: False, no Event; a second success changes nothing.
    let ok = after(&fourth.status, Reconciled::Succeeded, t(9), Some(1)).expect("cleared");
    let c = &ok.status.conditions[0];
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ApplySucceeded")
    );
    assert_eq!(c.last_transition_time, Time(t(9)));
    assert!(ok.transitions.is_empty());
    assert_eq!(
        after(&ok.status, Reconciled::Succeeded, t(12), Some(1)),
        None
    );
}
