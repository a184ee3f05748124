use super::*;
use dgl_api::PartitionMode;

fn job(ns: &str) -> DGLJob {
    let mut job: DGLJob =
        serde_yaml::from_str(include_str!("../../../../examples/seed-dgljob.yaml")).unwrap();
    job.metadata.namespace = Some(ns.into());
    job
}

#[test]
fn graphbolt_is_refused_where_dgl_cannot_use_it() {
    let cfg = cfg(&[]);
    let mut j = job("ns");
    j.spec.use_graphbolt = Some(true);
    assert_eq!(validate(&j, &cfg).map(|_| ()), Ok(()));
    j.spec.partition_mode = PartitionMode::DistParMetis;
    let r = validate(&j, &cfg).unwrap_err();
    assert_eq!(r.reason, "GraphBoltUnsupported");
    assert!(r.message.starts_with("spec.useGraphbolt:"), "{}", r.message);
    assert!(r.message.contains("DistParMETIS"), "{}", r.message);
    j.spec.partition_mode = PartitionMode::Skip;
    j.spec.dgl_replica_specs.remove(&ReplicaType::Worker);
    let r = validate(&j, &cfg).unwrap_err();
    assert!(r.message.contains("standalone"), "{}", r.message);
    j.spec.use_graphbolt = Some(false);
    assert_eq!(validate(&j, &cfg).map(|_| ()), Ok(()));
}

fn set_sa(job: &mut DGLJob, role: ReplicaType, sa: &str) {
    let spec = job.spec.dgl_replica_specs.get_mut(&role).unwrap();
    spec.template.spec.as_mut().unwrap().service_account_name = Some(sa.into());
}

fn cfg(protected: &[&str]) -> BuildConfig {
    BuildConfig {
        protected_service_accounts: protected.iter().map(|s| s.parse().unwrap()).collect(),
        ..Default::default()
    }
}

#[test]
fn the_operators_service_account_is_refused_naming_the_field() {
    let cfg = cfg(&["ops/dgl-operator"]);
    let mut j = job("ops");
    assert_eq!(validate(&j, &cfg).map(|_| ()), Ok(()));
    set_sa(&mut j, ReplicaType::Worker, "dgl-operator");
    let r = validate(&j, &cfg).unwrap_err();
    assert_eq!(r.reason, "ServiceAccountRefused");
    assert!(
        r.message
            .starts_with("spec.dglReplicaSpecs.Worker.template.spec.serviceAccountName: ServiceAccount ops/dgl-operator"),
        "{}",
        r.message
    );
    // The same name in another namespace is another ServiceAccount.
    let mut other = job("team-a");
    set_sa(&mut other, ReplicaType::Worker, "dgl-operator");
    assert_eq!(validate(&other, &cfg).map(|_| ()), Ok(()));
}

#[test]
fn the_deprecated_alias_and_every_role_are_checked() {
    let cfg = cfg(&["admin"]);
    let mut j = job("any");
    let spec = j
        .spec
        .dgl_replica_specs
        .get_mut(&ReplicaType::Launcher)
        .unwrap();
    spec.template.spec.as_mut().unwrap().service_account = Some("admin".into());
    let r = validate(&j, &cfg).unwrap_err();
    assert!(r
        .message
        .starts_with("spec.dglReplicaSpecs.Launcher.template.spec.serviceAccount:"));
}

/// The CRD caps `replicas` so that the largest job it admits (longest
/// name, IPv6 addresses) still fits its ConfigMap under the API
/// server's 1 MiB limit; the operator never meets an oversized one.
#[test]
fn the_largest_job_the_crd_admits_fits_its_config_map() {
    let crd = serde_json::to_value(dgl_api::crd()).unwrap();
    let replicas = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/dglReplicaSpecs/additionalProperties/properties/replicas/maximum")
        .and_then(|m| m.as_f64())
        .unwrap() as i32;
    assert!(replicas >= 1024, "cap {replicas}");
    let mut j = job("a-namespace");
    j.metadata.name = Some(format!("j{}", "x".repeat(49)));
    let w = j
        .spec
        .dgl_replica_specs
        .get_mut(&ReplicaType::Worker)
        .unwrap();
    w.replicas = Some(replicas);
    j.spec.slots_per_worker = Some(1024);
    j.metadata.uid = Some("uid".into());
    let name = j.name_any();
    let pods: Vec<crate::pure::observe::ObservedPod> = (0..replicas)
        .map(|i| crate::pure::observe::ObservedPod {
            name: dgl_api::names::worker_name(&name, i),
            role: ReplicaType::Worker,
            index: i,
            epoch: 0,
            state: crate::pure::observe::PodState::Running { ready: true },
            ip: Some(format!("fd00:1234:5678:9abc:def0:1234:{:04x}:{:04x}", i, i)),
            progress: None,
            facts: Default::default(),
            not_starting: None,
            cache_lookup: None,
        })
        .collect();
    let cm = crate::pure::builders::config_map(&valid(&j), &pods, Some(0));
    let size = serde_json::to_vec(&cm.data).unwrap().len();
    assert!(
        cm.data
            .as_ref()
            .unwrap()
            .contains_key(dgl_api::names::IP_CONFIG),
        "complete"
    );
    assert!(size < 1024 * 1024 * 3 / 4, "ConfigMap data is {size} bytes");
}

#[test]
fn a_launchers_service_account_is_refused_in_a_worker_or_partitioner() {
    let cfg = cfg(&[]);
    let mut j = job("ns");
    set_sa(&mut j, ReplicaType::Worker, "other-job-launcher");
    let r = validate(&j, &cfg).unwrap_err();
    assert_eq!(r.reason, "ServiceAccountRefused");
    assert!(
        r.message
            .starts_with("spec.dglReplicaSpecs.Worker.template.spec.serviceAccountName:"),
        "{}",
        r.message
    );
    set_sa(&mut j, ReplicaType::Worker, "reader");
    assert_eq!(validate(&j, &cfg).map(|_| ()), Ok(()));
    // The seed has no Partitioner spec: give it one (the Launcher's template).
    let launcher = j.spec.dgl_replica_specs[&ReplicaType::Launcher].clone();
    j.spec
        .dgl_replica_specs
        .insert(ReplicaType::Partitioner, launcher);
    set_sa(&mut j, ReplicaType::Partitioner, "thief-launcher");
    let r = validate(&j, &cfg).unwrap_err();
    assert!(
        r.message
            .starts_with("spec.dglReplicaSpecs.Partitioner.template.spec.serviceAccountName:"),
        "{}",
        r.message
    );
}
