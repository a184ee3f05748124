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
        (0..8).map(move |bits| Facts {
            partition_mode,
            use_graphbolt: bits & 1 != 0,
            has_workers: bits & 2 != 0,
            partitioner_spec: bits & 4 != 0,
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
        ];
        for (rule, kept) in cases {
            assert_eq!(rule.kept_by(&f), kept, "{f:?}: {}", rule.message);
        }
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
    ] {
        let found = stated
            .iter()
            .any(|r| r["rule"] == rule.cel() && r["message"] == rule.message);
        assert!(found, "not in the CRD: {}", rule.message);
    }
}
