use super::*;
use crate::expectations::EXPECTATION_TTL;
use dgl_api::ReplicaType;
use serde_json::json;
use std::time::{Duration, Instant};

fn slim(v: serde_json::Value) -> SlimPod {
    serde_json::from_value(v).unwrap()
}

fn pod(name: &str, phase: &str, node: Option<&str>) -> SlimPod {
    slim(json!({
        "metadata": {
            "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "labels": {"dgloperator.io/job-name": "j", "dgloperator.io/replica-type": "worker",
                       "dgloperator.io/replica-index": "0", "dgloperator.io/run": "0"},
            "ownerReferences": [{"apiVersion": "dgloperator.io/v1alpha1", "kind": "DGLJob",
                "name": "j", "uid": "job-uid", "controller": true}],
            "managedFields": [{"manager": "x", "operation": "Apply", "fieldsV1": {"f:spec": {}}}],
            "annotations": {"big": "x".repeat(1000)}
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": phase}
    }))
}

fn key() -> JobKey {
    JobKey::new("ns", "j")
}

fn observed(name: &str, state: PodState) -> ObservedPod {
    ObservedPod {
        name: name.into(),
        role: ReplicaType::Worker,
        index: 0,
        epoch: 0,
        state,
        ip: None,
        progress: None,
        facts: Default::default(),
        not_starting: None,
        cache_lookup: None,
    }
}

#[test]
fn slim_pod_keeps_what_the_state_machine_reads_only() {
    let p = pod("j-worker-0", "Pending", None);
    assert!(p.metadata.managed_fields.is_none());
    assert!(p.metadata.annotations.is_none());
    assert_eq!(p.metadata.labels.as_ref().unwrap().len(), 4);
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
}

#[test]
fn pod_events_trigger_only_when_the_observed_state_changes() {
    let cache = PodCache::default();
    let job = Some(key().to_reconcile());
    assert_eq!(cache.apply(pod("j-worker-0", "Pending", None)), job);
    // Bound to a node: nothing the state machine reads changed.
    assert_eq!(cache.apply(pod("j-worker-0", "Pending", Some("n1"))), None);
    assert_eq!(cache.apply(pod("j-worker-0", "Running", Some("n1"))), job);
    let pods = cache.job_pods("ns", "j", Some("job-uid"));
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].state, PodState::Running { ready: false });
    // Another job of the same name (a new uid) sees it as terminating.
    let other = cache.job_pods("ns", "j", Some("new-uid"));
    assert_eq!(other[0].state, PodState::Terminating);
    assert_eq!(cache.delete(&pod("j-worker-0", "Running", None)), job);
    assert!(cache.job_pods("ns", "j", Some("job-uid")).is_empty());
    assert!(cache.is_empty());
}

#[test]
fn the_pods_node_maps_a_node_down_to_its_jobs_and_pods() {
    let cache = PodCache::default();
    cache.apply(pod("j-worker-0", "Running", Some("n1")));
    cache.apply(pod("j-worker-1", "Running", Some("n2")));
    assert_eq!(cache.jobs_on("n1"), vec![key().to_reconcile()]);
    assert!(cache.jobs_on("n3").is_empty());
    let n1 = DownNode {
        name: "n1".into(),
        ready: "Unknown".into(),
        reason: None,
    };
    let down = BTreeMap::from([("n1".to_string(), n1.clone())]);
    let on = cache.job_pods_on("ns", "j", &down);
    assert_eq!(on, BTreeMap::from([("j-worker-0".to_string(), n1)]));
    assert!(cache.job_pods_on("ns", "j", &BTreeMap::new()).is_empty());
}

#[test]
fn a_launchers_progress_annotation_is_kept_and_triggers() {
    let launcher = |progress: &str| {
        slim(json!({
            "metadata": {
                "name": "j-launcher", "namespace": "ns", "uid": "uid-l",
                "labels": {"dgloperator.io/job-name": "j",
                           "dgloperator.io/replica-type": "launcher"},
                "annotations": {"other": "x", ANNOTATION_PROGRESS: progress}
            },
            "status": {"phase": "Running"}
        }))
    };
    let cache = PodCache::default();
    let job = Some(key().to_reconcile());
    let p = launcher(r#"{"epoch":1}"#);
    let kept = p.metadata.annotations.as_ref().unwrap();
    assert_eq!(kept.keys().collect::<Vec<_>>(), [ANNOTATION_PROGRESS]);
    assert_eq!(cache.apply(p), job);
    assert_eq!(cache.apply(launcher(r#"{"epoch":1}"#)), None, "unchanged");
    assert_eq!(cache.apply(launcher(r#"{"epoch":2}"#)), job);
    let pods = cache.job_pods("ns", "j", None);
    assert_eq!(pods[0].progress.as_deref(), Some(r#"{"epoch":2}"#));
    // Too large to be a report: not kept at all.
    let huge = "x".repeat(dgl_api::progress::MAX_JSON + 1);
    assert!(launcher(&huge).metadata.annotations.is_none());
}

#[test]
fn a_relist_reports_the_jobs_that_changed() {
    let cache = PodCache::default();
    cache.apply(pod("j-worker-0", "Pending", None));
    let mut fresh = PodIndex::new();
    let (k, c) = CachedPod::from_slim(pod("j-worker-0", "Pending", None)).unwrap();
    fresh.entry(k).or_default().insert("j-worker-0".into(), c);
    assert!(cache.replace(fresh).is_empty(), "same pods: no reconcile");
    assert_eq!(cache.replace(PodIndex::new()).len(), 1, "pod gone");
}

#[test]
fn created_pods_count_until_the_watch_shows_them() {
    let cache = PodCache::default();
    cache.expect_created(&key(), observed("j-worker-0", PodState::Pending));
    assert_eq!(cache.pending_expectations(), 1);
    // Not in the cache yet: the reconcile sees it as created.
    let pods = cache.job_pods("ns", "j", Some("job-uid"));
    assert_eq!(pods, vec![observed("j-worker-0", PodState::Pending)]);
    // Its first event is what the reconcile already planned with: no
    // reconcile for it, and the expectation is satisfied.
    assert_eq!(cache.apply(pod("j-worker-0", "Pending", None)), None);
    assert_eq!(cache.pending_expectations(), 0);
    // Later changes trigger as usual.
    assert!(cache.apply(pod("j-worker-0", "Running", None)).is_some());
}

#[test]
fn a_created_pod_first_seen_in_another_state_triggers() {
    let cache = PodCache::default();
    cache.expect_created(&key(), observed("j-worker-0", PodState::Pending));
    assert!(cache.apply(pod("j-worker-0", "Running", None)).is_some());
    assert_eq!(cache.pending_expectations(), 0);
}

#[test]
fn deleted_pods_are_terminating_until_the_watch_shows_it() {
    let cache = PodCache::default();
    cache.apply(pod("j-worker-0", "Running", None));
    cache.expect_deleted(&key(), "j-worker-0");
    let pods = cache.job_pods("ns", "j", Some("job-uid"));
    assert_eq!(pods[0].state, PodState::Terminating);
    // Still cached as Running (the event is late): still Terminating.
    assert_eq!(cache.apply(pod("j-worker-0", "Running", Some("n"))), None);
    assert_eq!(
        cache.job_pods("ns", "j", Some("job-uid"))[0].state,
        PodState::Terminating
    );
    // Gone: the expectation is satisfied and the job reconciled.
    assert!(cache.delete(&pod("j-worker-0", "Running", None)).is_some());
    assert_eq!(cache.pending_expectations(), 0);
    assert!(cache.job_pods("ns", "j", Some("job-uid")).is_empty());
}

#[test]
fn expectations_expire() {
    let cache = PodCache::default();
    let old = Instant::now()
        .checked_sub(EXPECTATION_TTL + Duration::from_secs(1))
        .unwrap();
    cache.expected.expect_at(
        &key(),
        "j-worker-0".into(),
        Expect::Created(Box::new(observed("j-worker-0", PodState::Pending))),
        old,
    );
    assert!(cache.job_pods("ns", "j", Some("job-uid")).is_empty());
    assert_eq!(cache.pending_expectations(), 0);
}

#[test]
fn a_config_maps_launched_run_is_read_from_its_label() {
    let meta = |labels: serde_json::Value| -> ObjectMeta {
        serde_json::from_value(serde_json::json!({"name": "j-config", "labels": labels})).unwrap()
    };
    let run = |labels| SeenChild::of(&meta(labels)).run;
    assert_eq!(run(serde_json::json!({"dgloperator.io/run": "3"})), Some(3));
    assert_eq!(
        run(serde_json::json!({"dgloperator.io/job-name": "j"})),
        None
    );
    assert_eq!(run(serde_json::json!({"dgloperator.io/run": "x"})), None);
}

#[test]
fn child_hashes_prefer_the_own_write_until_the_watch_shows_it() {
    let c = ChildCache::default();
    assert_eq!(c.hash("ConfigMap", "ns", "j-config"), ChildState::Absent);
    let k = ChildCache::key("ConfigMap", "ns", "j-config");
    let h = |s: &str| SeenChild {
        hash: Some(s.into()),
        controller: None,
        run: None,
    };
    assert!(c.saw(k.clone(), h("a")), "new child");
    assert!(!c.saw(k.clone(), h("a")), "same hash again");
    c.record("ConfigMap", "ns", "j-config", h("b"));
    assert_eq!(
        c.hash("ConfigMap", "ns", "j-config"),
        ChildState::Present(Some("b".into()))
    );
    assert_eq!(
        c.seen_hash("ConfigMap", "ns", "j-config"),
        ChildState::Present(Some("a".into()))
    );
    // An older version shown again keeps the write pending.
    c.saw(k.clone(), h("a"));
    assert_eq!(c.pending_writes(), 1);
    assert!(c.saw(k.clone(), h("b")));
    assert_eq!(c.pending_writes(), 0);
    assert_eq!(
        c.seen_hash("ConfigMap", "ns", "j-config"),
        ChildState::Present(Some("b".into()))
    );
    c.gone(&k);
    assert_eq!(c.hash("ConfigMap", "ns", "j-config"), ChildState::Absent);
    assert!(c.is_empty());
}

/// Issue #36 item 3: an evicted pod's facts outlive its Delete event (for a
/// bounded time and count) so the plan can still judge it.
#[test]
fn a_disrupted_pods_facts_are_kept_after_its_delete_for_a_while() {
    let cache = PodCache::default();
    let mut evicted = pod("j-worker-0", "Failed", Some("n"));
    evicted.status = Some(
        serde_json::from_value(json!({"phase": "Failed",
        "conditions": [{"type": "DisruptionTarget", "status": "True"}]}))
        .unwrap(),
    );
    cache.apply(evicted.clone());
    assert!(cache.delete(&evicted).is_some());
    assert!(cache.job_pods("ns", "j", Some("job-uid")).is_empty());
    let gone = cache.job_gone("ns", "j", Some("job-uid"));
    assert_eq!(gone.len(), 1);
    assert!(gone[0].facts.disrupted());
    // Not another job's of the same name; not a pod that was not disrupted.
    assert!(cache.job_gone("ns", "j", Some("new-uid")).is_empty());
    cache.delete(&pod("j-worker-1", "Failed", Some("n")));
    assert_eq!(cache.job_gone("ns", "j", Some("job-uid")).len(), 1);
    // Bounded: old ones expire, and never more than GONE_MAX are held.
    cache.age_gone(GONE_TTL + Duration::from_secs(1));
    assert!(cache.job_gone("ns", "j", Some("job-uid")).is_empty());
    for i in 0..GONE_MAX + 5 {
        let mut p = evicted.clone();
        p.metadata.name = Some(format!("j-worker-{i}"));
        cache.delete(&p);
    }
    assert_eq!(cache.gone_len(), GONE_MAX);
}

#[test]
/// Deleted at once (grace 0), its last state has no deletionTimestamp.
fn a_running_pod_deleted_at_once_with_disruption_target_is_kept() {
    let cache = PodCache::default();
    let mut p = pod("j-worker-0", "Running", Some("n"));
    p.status = Some(serde_json::from_value(json!({"phase": "Running",
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]})).unwrap());
    cache.delete(&p);
    assert_eq!(cache.job_gone("ns", "j", Some("job-uid")).len(), 1);
}

/// A pod seen Running with DisruptionTarget True, then deleted while the
/// watch was down: the relist brings no Delete event, only its absence.
#[test]
fn a_disrupted_pod_gone_in_a_relist_is_kept_too() {
    let cache = PodCache::default();
    let mut evicted = pod("j-worker-0", "Running", Some("n"));
    evicted.status = Some(
        serde_json::from_value(json!({"phase": "Running",
        "conditions": [{"type": "DisruptionTarget", "status": "True"}]}))
        .unwrap(),
    );
    cache.apply(evicted);
    cache.apply(pod("j-worker-1", "Running", Some("n")));
    let mut fresh = PodIndex::new();
    let (k, c) = CachedPod::from_slim(pod("j-worker-2", "Running", Some("n"))).unwrap();
    fresh.entry(k).or_default().insert("j-worker-2".into(), c);
    assert_eq!(cache.replace(fresh).len(), 1);
    let gone = cache.job_gone("ns", "j", Some("job-uid"));
    assert_eq!(gone.len(), 1, "only the disrupted one: {gone:?}");
    assert_eq!(gone[0].name, "j-worker-0");
    assert_eq!(gone[0].state, PodState::Terminating);
    assert!(gone[0].facts.disrupted());
}
