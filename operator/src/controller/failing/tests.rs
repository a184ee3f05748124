use super::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
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
