use super::*;

#[test]
fn expectations_hold_until_seen_or_expired() {
    let e: Expectations<&str, &str, u32> = Expectations::default();
    e.expect(&"job", "pod-a", 1);
    e.expect(&"job", "pod-b", 2);
    assert_eq!(e.get(&"job", &"pod-a"), Some(1));
    assert_eq!(e.remove_if(&"job", &"pod-a", |v, _| *v == 9), None);
    assert_eq!(e.remove_if(&"job", &"pod-a", |v, _| *v == 1), Some(1));
    let old = Instant::now()
        .checked_sub(EXPECTATION_TTL + Duration::from_secs(1))
        .unwrap();
    e.expect_at(&"job", "pod-c", 3, old);
    assert_eq!(e.get(&"job", &"pod-c"), None, "expired");
    let mut visited = Vec::new();
    e.retain(&"job", |k, _| {
        visited.push(*k);
        false
    });
    assert_eq!(visited, vec!["pod-b"]);
    assert!(e.is_empty());
}
