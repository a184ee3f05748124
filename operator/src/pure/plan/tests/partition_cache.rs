//! `spec.partitionCache` (#35 item 4): no partitioner before the launcher's
//! lookup answers; a hit is Partitioned with no partitioner at all; a miss
//! partitions as before.

use super::*;
use dgl_api::partition_cache::Lookup;
use dgl_api::PartitionCacheSpec;

const KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn cached_job() -> DGLJob {
    let mut j = job();
    j.spec.partition_mode = PartitionMode::ParMetis;
    j.spec.partition_cache = Some(PartitionCacheSpec {
        url: "s3://graphs/cache".into(),
        credentials_secret: Some("cache-keys".into()),
    });
    j
}

fn launcher(lookup: Option<bool>) -> ObservedPod {
    let mut l = pod(ReplicaType::Launcher, 0, 0, PodState::Pending);
    l.cache_lookup = lookup.map(|hit| Lookup {
        hit,
        key: KEY.into(),
    });
    l
}

fn workers() -> Vec<ObservedPod> {
    (0..2)
        .map(|i| pod(ReplicaType::Worker, i, 0, ready()))
        .collect()
}

#[test]
fn no_partitioner_is_made_before_the_lookup_answers() {
    let mut j = cached_job();
    let p = step(&mut j, &[], t(0));
    assert!(created(&p).contains(&launcher_name(JOB)));
    assert!(!created(&p).contains(&partitioner_name(JOB)));
    let mut pods = workers();
    pods.push(launcher(None));
    let p = step(&mut j, &pods, t(1));
    assert!(created(&p).is_empty(), "{:?}", created(&p));
    let c = cond(&p, JobPhase::Partitioning).expect("Partitioning");
    assert_eq!(c.reason, "PartitionCacheLookup");
    assert!(c.message.contains("s3://graphs/cache"), "{}", c.message);
    assert_eq!(p.launch, None);
}

#[test]
fn a_hit_is_partitioned_with_no_partitioner_and_names_the_entry() {
    let mut j = cached_job();
    let mut pods = workers();
    pods.push(launcher(Some(true)));
    let p = step(&mut j, &pods, t(0));
    assert!(!created(&p).contains(&partitioner_name(JOB)));
    let c = cond(&p, JobPhase::Partitioned).expect("Partitioned");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "PartitionsReused")
    );
    assert!(c.message.contains(KEY) && c.message.contains("s3://graphs/cache"));
    // Partitioning is written too (False), so the story reads the same.
    let c = cond(&p, JobPhase::Partitioning).expect("Partitioning");
    assert_eq!(c.status, "False");
    // Every worker Ready: the run is launched without a partitioner.
    assert_eq!(p.launch, Some(0));
}

#[test]
fn a_miss_partitions_as_before() {
    let mut j = cached_job();
    let mut pods = workers();
    pods.push(launcher(Some(false)));
    let p = step(&mut j, &pods, t(0));
    assert!(created(&p).contains(&partitioner_name(JOB)));
    assert_eq!(p.launch, None);
    pods.push(pod(ReplicaType::Partitioner, 0, 0, ready()));
    let p = step(&mut j, &pods, t(1));
    let c = cond(&p, JobPhase::Partitioned).expect("Partitioned");
    assert_eq!(c.reason, "JobPartitioned");
    assert_eq!(p.launch, Some(0));
}

#[test]
fn a_job_without_a_cache_never_waits_for_a_lookup() {
    let mut j = job();
    j.spec.partition_mode = PartitionMode::ParMetis;
    let p = step(&mut j, &[], t(0));
    assert!(created(&p).contains(&partitioner_name(JOB)));
}

/// The run launched from the cache has no partitioner: not a pod deleted
/// (what the first e2e run of the scenario found), and Kueue's PodsReady
/// does not wait for one.
#[test]
fn a_launched_run_from_the_cache_misses_no_partitioner() {
    let mut j = cached_job();
    let mut pods = workers();
    pods.push(launcher(Some(true)));
    step(&mut j, &pods, t(0));
    let p = plan(
        &j,
        Seen::pods(&pods),
        t(1),
        &BuildConfig::default(),
        Some(0),
    );
    assert!(
        cond(&p, JobPhase::Failed).is_none(),
        "{:?}",
        p.status.conditions
    );
    assert!(cond(&p, JobPhase::Restarting).is_none());
    pods[2].state = PodState::Running { ready: false };
    assert!(crate::pure::kueue::pods_started(&j, &pods));
    // A miss does wait for the partitioner.
    pods[2].cache_lookup.as_mut().unwrap().hit = false;
    assert!(!crate::pure::kueue::pods_started(&j, &pods));
}
