//! `spec.partitionCache` (#35 item 4): no partitioner before the launcher's
//! lookup answers; a hit is Partitioned with no partitioner at all; a miss
//! partitions as before. DistParMETIS: no run launched (no rank) before the
//! answer; a hit runs without the ranks' readiness marker; a miss
//! partitions on the workers as without a cache.

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

/// DistParMETIS with a cache: the job as its launcher's lookup leaves it.
fn cached_dist_job() -> DGLJob {
    let mut j = cached_job();
    j.spec.partition_mode = PartitionMode::DistParMetis;
    j
}

/// DistParMETIS: no run is launched (so no rank can start) before the
/// lookup answers; no partitioner pod in any case.
#[test]
fn distparmetis_launches_nothing_before_the_lookup_answers() {
    let mut j = cached_dist_job();
    let p = step(&mut j, &[], t(0));
    assert_eq!(
        created(&p),
        vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)]
    );
    let mut pods = workers();
    pods.push(launcher(None));
    let p = step(&mut j, &pods, t(1));
    assert!(created(&p).is_empty(), "{:?}", created(&p));
    assert_eq!(p.launch, None);
    let c = cond(&p, JobPhase::Partitioning).expect("Partitioning");
    assert_eq!(c.reason, "PartitionCacheLookup");
}

/// DistParMETIS hit: Partitioned (PartitionsReused, the entry named, no
/// rank said to run) as soon as the lookup answers; the run is launched,
/// and its launcher Running is the job Running without the readiness the
/// ranks' marker gives; nothing is missed by the failure logic or Kueue.
#[test]
fn a_distparmetis_hit_runs_no_rank_and_needs_no_partitioned_marker() {
    let mut j = cached_dist_job();
    let mut pods = workers();
    pods.push(launcher(Some(true)));
    let p = step(&mut j, &pods, t(0));
    assert!(!created(&p).contains(&partitioner_name(JOB)));
    assert_eq!(p.launch, Some(0));
    let c = cond(&p, JobPhase::Partitioned).expect("Partitioned");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "PartitionsReused")
    );
    assert!(c.message.contains(KEY) && c.message.contains("no partition rank ran"));
    // Running, not ready (no mpirun wrote the marker): the job runs.
    pods[2].state = PodState::Running { ready: false };
    let p = plan(
        &j,
        Seen::pods(&pods),
        t(1),
        &BuildConfig::default(),
        Some(0),
    );
    j.status = Some(p.status.clone());
    assert_eq!(p.status.phase, Some(JobPhase::Running));
    let partitioning = cond(&p, JobPhase::Partitioning).expect("Partitioning");
    assert_eq!(
        (partitioning.status.as_str(), partitioning.reason.as_str()),
        ("False", "PartitionsReused"),
        "not the ranks' JobPartitioning"
    );
    assert!(cond(&p, JobPhase::Failed).is_none() && cond(&p, JobPhase::Restarting).is_none());
    assert!(deleted(&p).is_empty(), "{:?}", deleted(&p));
    assert!(crate::pure::kueue::pods_started(&j, &pods));
    pods[2].state = PodState::Succeeded;
    let p = step(&mut j, &pods, t(2));
    assert_eq!(p.status.phase, Some(JobPhase::Succeeded));
}

/// DistParMETIS miss: launched once the lookup answers; the ranks then
/// partition behind the launcher's readiness, as without a cache.
#[test]
fn a_distparmetis_miss_partitions_on_the_workers() {
    let mut j = cached_dist_job();
    let mut pods = workers();
    pods.push(launcher(Some(false)));
    let p = step(&mut j, &pods, t(0));
    assert!(created(&p).is_empty(), "{:?}", created(&p));
    assert_eq!(p.launch, Some(0));
    assert!(cond(&p, JobPhase::Partitioned).is_none());
    pods[2].state = PodState::Running { ready: false };
    let p = plan(
        &j,
        Seen::pods(&pods),
        t(1),
        &BuildConfig::default(),
        Some(0),
    );
    j.status = Some(p.status.clone());
    assert_eq!(p.status.phase, Some(JobPhase::Partitioning));
    let c = cond(&p, JobPhase::Partitioning).expect("Partitioning");
    assert_eq!(c.reason, "JobPartitioning");
    assert!(cond(&p, JobPhase::Failed).is_none());
    pods[2].state = ready();
    let p = plan(
        &j,
        Seen::pods(&pods),
        t(2),
        &BuildConfig::default(),
        Some(0),
    );
    assert_eq!(p.status.phase, Some(JobPhase::Running));
    let c = cond(&p, JobPhase::Partitioned).expect("Partitioned");
    assert_eq!(c.reason, "JobPartitioned");
}
