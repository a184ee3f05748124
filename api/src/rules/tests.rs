use super::*;

const MODES: [PartitionMode; 4] = [
    PartitionMode::DglApi,
    PartitionMode::ParMetis,
    PartitionMode::DistParMetis,
    PartitionMode::Skip,
];

/// Every combination of the facts the rules read.
fn all_facts() -> impl Iterator<Item = Facts> {
    MODES.into_iter().flat_map(|partition_mode| {
        (0..16).map(move |bits| Facts {
            partition_mode,
            use_graphbolt: bits & 1 != 0,
            has_workers: bits & 2 != 0,
            partitioner_spec: bits & 4 != 0,
            partition_cache: bits & 8 != 0,
        })
    })
}

/// The generated CEL is the text the CRD carried when each rule was
/// written by hand, so the API server enforces exactly what it did.
#[test]
fn each_rule_generates_the_cel_the_crd_had() {
    let expected = [
        (
            &NO_PARTITIONER_WITH_SKIP,
            "self.partitionMode != 'Skip' || !('Partitioner' in self.dglReplicaSpecs)",
        ),
        (
            &NO_PARTITIONER_WITH_DISTPARMETIS,
            "self.partitionMode != 'DistParMETIS' || !('Partitioner' in self.dglReplicaSpecs)",
        ),
        (
            &WORKERS_UNLESS_SKIP,
            "'Worker' in self.dglReplicaSpecs || self.partitionMode == 'Skip'",
        ),
        (
            &GRAPHBOLT_NOT_WITH_DISTPARMETIS,
            "!has(self.useGraphbolt) || !self.useGraphbolt || self.partitionMode != 'DistParMETIS'",
        ),
        (
            &GRAPHBOLT_NEEDS_WORKERS,
            "!has(self.useGraphbolt) || !self.useGraphbolt || 'Worker' in self.dglReplicaSpecs",
        ),
        (
            &PARTITION_CACHE_NEEDS_NATIVE_PARTITIONER,
            "!has(self.partitionCache) || self.partitionMode in ['ParMETIS', 'DistParMETIS']",
        ),
    ];
    for (rule, cel) in expected {
        assert_eq!(rule.cel(), cel, "{}", rule.message);
    }
}

/// The Rust reading of each rule says what its CEL says, fact by fact.
#[test]
fn each_rule_is_kept_exactly_where_its_cel_holds() {
    for f in all_facts() {
        let m = f.partition_mode;
        let cases = [
            (
                &NO_PARTITIONER_WITH_SKIP,
                m != PartitionMode::Skip || !f.partitioner_spec,
            ),
            (
                &NO_PARTITIONER_WITH_DISTPARMETIS,
                m != PartitionMode::DistParMetis || !f.partitioner_spec,
            ),
            (
                &WORKERS_UNLESS_SKIP,
                f.has_workers || m == PartitionMode::Skip,
            ),
            (
                &GRAPHBOLT_NOT_WITH_DISTPARMETIS,
                !f.use_graphbolt || m != PartitionMode::DistParMetis,
            ),
            (&GRAPHBOLT_NEEDS_WORKERS, !f.use_graphbolt || f.has_workers),
            (
                &PARTITION_CACHE_NEEDS_NATIVE_PARTITIONER,
                !f.partition_cache
                    || m == PartitionMode::ParMetis
                    || m == PartitionMode::DistParMetis,
            ),
        ];
        for (rule, kept) in cases {
            assert_eq!(rule.kept_by(&f), kept, "{f:?}: {}", rule.message);
        }
    }
}

/// The native modes the CEL lists are the ones `is_native` names.
#[test]
fn the_native_modes_are_listed_once() {
    for m in MODES {
        assert_eq!(PartitionMode::NATIVE.contains(&m), m.is_native(), "{m}");
    }
}

#[test]
fn graphbolt_conflicts_name_distparmetis_first() {
    let f = Facts::of_flags;
    let dist = PartitionMode::DistParMetis;
    assert_eq!(graphbolt_conflict(&f(dist, false, false)), None);
    assert_eq!(
        graphbolt_conflict(&f(PartitionMode::Skip, true, true)),
        None
    );
    assert_eq!(
        graphbolt_conflict(&f(dist, true, false)),
        Some(GraphBoltConflict::DistParMetis)
    );
    assert_eq!(
        graphbolt_conflict(&f(PartitionMode::Skip, true, false)),
        Some(GraphBoltConflict::Standalone)
    );
    assert!(GraphBoltConflict::Standalone
        .rule()
        .message
        .starts_with("spec.useGraphbolt:"));
}

/// Every rule is in the CRD, on the spec, with its message.
#[test]
fn the_crd_states_every_rule_on_the_spec() {
    let crd = serde_json::to_value(crate::crd()).unwrap();
    let stated = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/x-kubernetes-validations")
        .and_then(|v| v.as_array())
        .unwrap();
    for rule in [
        &NO_PARTITIONER_WITH_SKIP,
        &NO_PARTITIONER_WITH_DISTPARMETIS,
        &WORKERS_UNLESS_SKIP,
        &GRAPHBOLT_NOT_WITH_DISTPARMETIS,
        &GRAPHBOLT_NEEDS_WORKERS,
        &PARTITION_CACHE_NEEDS_NATIVE_PARTITIONER,
    ] {
        let found = stated
            .iter()
            .any(|r| r["rule"] == rule.cel() && r["message"] == rule.message);
        assert!(found, "not in the CRD: {}", rule.message);
    }
}

fn seed() -> DGLJobSpec {
    let job: crate::DGLJob =
        serde_yaml::from_str(include_str!("../../../examples/seed-dgljob.yaml")).unwrap();
    job.spec
}

fn pod_spec(spec: &mut DGLJobSpec, role: ReplicaType) -> &mut k8s_openapi::api::core::v1::PodSpec {
    let launcher = spec.dgl_replica_specs[&ReplicaType::Launcher].clone();
    let replica = spec.dgl_replica_specs.entry(role).or_insert(launcher);
    replica.template.spec.as_mut().unwrap()
}

/// The suffix the rules look for is the one the operator names accounts with.
#[test]
fn the_suffix_is_the_launchers_account_name() {
    let name = crate::names::rbac_name("job-a", ReplicaType::Launcher);
    assert_eq!(name, format!("job-a{LAUNCHER_ACCOUNT_SUFFIX}"));
}

#[test]
fn a_template_naming_a_launchers_account_is_named_by_field() {
    let mut spec = seed();
    assert_eq!(launcher_account_named(&spec), None);
    // A name that merely contains the word is someone's own account.
    pod_spec(&mut spec, ReplicaType::Worker).service_account_name = Some("launcher-reader".into());
    assert_eq!(launcher_account_named(&spec), None);
    pod_spec(&mut spec, ReplicaType::Partitioner).service_account = Some("job-b-launcher".into());
    let m = launcher_account_named(&spec).unwrap();
    assert!(
        m.starts_with("spec.dglReplicaSpecs.Partitioner.template.spec.serviceAccount: must not"),
        "{m}"
    );
    pod_spec(&mut spec, ReplicaType::Worker).service_account_name = Some("job-b-launcher".into());
    let m = launcher_account_named(&spec).unwrap();
    assert!(
        m.starts_with("spec.dglReplicaSpecs.Worker.template.spec.serviceAccountName: must not"),
        "{m}"
    );
}

#[test]
fn the_launcher_account_rule_reads_both_fields_of_its_role() {
    let cel = no_launcher_account_rule(ReplicaType::Worker).rule;
    assert_eq!(
        cel,
        "!('Worker' in self.dglReplicaSpecs) || !has(self.dglReplicaSpecs.Worker.template.spec) || \
         ((!has(self.dglReplicaSpecs.Worker.template.spec.serviceAccountName) || \
         !self.dglReplicaSpecs.Worker.template.spec.serviceAccountName.endsWith('-launcher')) && \
         (!has(self.dglReplicaSpecs.Worker.template.spec.serviceAccount) || \
         !self.dglReplicaSpecs.Worker.template.spec.serviceAccount.endsWith('-launcher')))"
    );
}

/// The count the transition rule compares is the count the job runs with.
#[test]
fn replica_counts_are_the_jobs_pod_counts() {
    let mut spec = seed();
    assert_eq!(replicas_of(&spec, ReplicaType::Worker), spec.num_workers());
    spec.dgl_replica_specs.remove(&ReplicaType::Worker);
    assert_eq!(replicas_of(&spec, ReplicaType::Worker), 0);
    assert_eq!(spec.num_workers(), 0);
    for (replicas, pods) in [(None, 1), (Some(0), 0), (Some(1), 1)] {
        let mut spec = seed();
        if let Some(r) = replicas {
            pod_spec(&mut spec, ReplicaType::Partitioner);
            spec.dgl_replica_specs
                .get_mut(&ReplicaType::Partitioner)
                .unwrap()
                .replicas = Some(r);
        } else {
            spec.dgl_replica_specs.remove(&ReplicaType::Partitioner);
        }
        assert_eq!(replicas_of(&spec, ReplicaType::Partitioner), pods);
        assert_eq!(spec.has_partitioner(), pods == 1);
    }
}

#[test]
fn the_replicas_rule_counts_a_missing_spec() {
    let w = replicas_fixed_rule(ReplicaType::Worker).rule;
    assert_eq!(
        w,
        "('Worker' in self ? (has(self.Worker.replicas) ? self.Worker.replicas : 1) : 0) == \
         ('Worker' in oldSelf ? (has(oldSelf.Worker.replicas) ? oldSelf.Worker.replicas : 1) : 0)"
    );
    let p = replicas_fixed_rule(ReplicaType::Partitioner).rule;
    assert!(p.ends_with(": 1)"), "{p}");
}
