//! Rules over a `DGLJob` that span several fields, each defined once: the
//! CRD's CEL rule is generated from it ([`SpecRule::crd_rule`], on
//! `DGLJobSpec`), the operator checks a stored job against the same rule
//! (one stored before the CRD had it), and dglrun checks its flags with
//! [`graphbolt_conflict`].
//!
//! A rule reads "when `when` holds, `then` must hold"; each side is a
//! [`Fact`] or its negation, which has one CEL spelling (over the spec,
//! `self`) and one Rust reading (over [`Facts`]).

use crate::{DGLJobSpec, PartitionMode, ReplicaSpec, ReplicaType};

/// What the rules read of a job: from its spec ([`Facts::of`]) or from
/// dglrun's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    pub partition_mode: PartitionMode,
    pub use_graphbolt: bool,
    /// The job has worker pods (not standalone).
    pub has_workers: bool,
    /// `dglReplicaSpecs.Partitioner` is given.
    pub partitioner_spec: bool,
    /// `spec.partitionCache` is given.
    pub partition_cache: bool,
}

impl Facts {
    /// The facts of a spec, with the API's defaults applied.
    pub fn of(spec: &DGLJobSpec) -> Facts {
        Facts {
            partition_mode: spec.partition_mode,
            use_graphbolt: spec.use_graphbolt(),
            has_workers: !spec.is_standalone(),
            partitioner_spec: spec.replica_spec(ReplicaType::Partitioner).is_some(),
            partition_cache: spec.partition_cache.is_some(),
        }
    }

    /// The facts a pod's process knows from its flags (dglrun): no spec, so
    /// no Partitioner spec either (only the rules on it read that).
    pub fn of_flags(
        partition_mode: PartitionMode,
        use_graphbolt: bool,
        has_workers: bool,
    ) -> Facts {
        Facts {
            partition_mode,
            use_graphbolt,
            has_workers,
            partitioner_spec: false,
            partition_cache: false,
        }
    }
}

/// One fact about a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fact {
    /// `spec.useGraphbolt` is true.
    UsesGraphbolt,
    /// `spec.partitionMode` is this mode (the schema defaults it).
    Mode(PartitionMode),
    /// `spec.dglReplicaSpecs.Worker` is given. The CRD keeps its replicas at
    /// 1 or more, so in Rust this reads "the job has workers".
    HasWorkers,
    /// `spec.dglReplicaSpecs.Partitioner` is given.
    PartitionerSpec,
    /// `spec.partitionCache` is given.
    PartitionCache,
    /// `spec.partitionMode` is one whose native pipeline makes the
    /// partitions (ParMETIS or DistParMETIS: [`PartitionMode::NATIVE`]).
    NativeMode,
}

impl Fact {
    /// The fact (`holds`) or its negation as CEL over the spec.
    fn cel(self, holds: bool) -> String {
        let (yes, no) = match self {
            // Unset means false; spelled out so the negation needs no parentheses.
            Fact::UsesGraphbolt => (
                "has(self.useGraphbolt) && self.useGraphbolt".to_string(),
                "!has(self.useGraphbolt) || !self.useGraphbolt".to_string(),
            ),
            Fact::Mode(m) => (
                format!("self.partitionMode == '{m}'"),
                format!("self.partitionMode != '{m}'"),
            ),
            Fact::HasWorkers => (
                "'Worker' in self.dglReplicaSpecs".to_string(),
                "!('Worker' in self.dglReplicaSpecs)".to_string(),
            ),
            Fact::PartitionerSpec => (
                "'Partitioner' in self.dglReplicaSpecs".to_string(),
                "!('Partitioner' in self.dglReplicaSpecs)".to_string(),
            ),
            Fact::PartitionCache => (
                "has(self.partitionCache)".to_string(),
                "!has(self.partitionCache)".to_string(),
            ),
            Fact::NativeMode => {
                let modes: Vec<String> = PartitionMode::NATIVE
                    .iter()
                    .map(|m| format!("'{m}'"))
                    .collect();
                let within = format!("self.partitionMode in [{}]", modes.join(", "));
                (within.clone(), format!("!({within})"))
            }
        };
        if holds {
            yes
        } else {
            no
        }
    }

    /// Whether the fact holds for `f`.
    fn holds(self, f: &Facts) -> bool {
        match self {
            Fact::UsesGraphbolt => f.use_graphbolt,
            Fact::Mode(m) => f.partition_mode == m,
            Fact::HasWorkers => f.has_workers,
            Fact::PartitionerSpec => f.partitioner_spec,
            Fact::PartitionCache => f.partition_cache,
            Fact::NativeMode => f.partition_mode.is_native(),
        }
    }
}

/// "When `when` holds, `then` must": each a fact and whether it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecRule {
    pub when: (Fact, bool),
    pub then: (Fact, bool),
    /// What the user is told: names the field first, as every CRD message does.
    pub message: &'static str,
}

impl SpecRule {
    /// The rule as CEL over the spec: `!when || then`.
    pub fn cel(&self) -> String {
        let (when, holds) = self.when;
        let (then, must) = self.then;
        format!("{} || {}", when.cel(!holds), then.cel(must))
    }

    /// The rule as the CRD states it on `DGLJobSpec`.
    pub fn crd_rule(&self) -> kube::core::Rule {
        kube::core::Rule::new(self.cel()).message(self.message)
    }

    /// Whether `f` keeps the rule.
    pub fn kept_by(&self, f: &Facts) -> bool {
        let (when, holds) = self.when;
        let (then, must) = self.then;
        when.holds(f) != holds || then.holds(f) == must
    }
}

/// Skip mode has no partitioner.
pub const NO_PARTITIONER_WITH_SKIP: SpecRule = SpecRule {
    when: (Fact::Mode(PartitionMode::Skip), true),
    then: (Fact::PartitionerSpec, false),
    message: "spec.dglReplicaSpecs.Partitioner: must not be set when spec.partitionMode is Skip (Skip uses partitions that already exist)",
};

/// DistParMETIS has no partitioner: the workers partition.
pub const NO_PARTITIONER_WITH_DISTPARMETIS: SpecRule = SpecRule {
    when: (Fact::Mode(PartitionMode::DistParMetis), true),
    then: (Fact::PartitionerSpec, false),
    message: "spec.dglReplicaSpecs.Partitioner: must not be set when spec.partitionMode is DistParMETIS (the workers partition the graph themselves)",
};

/// Only Skip may run without workers (standalone).
pub const WORKERS_UNLESS_SKIP: SpecRule = SpecRule {
    when: (Fact::HasWorkers, false),
    then: (Fact::Mode(PartitionMode::Skip), true),
    message: "spec.dglReplicaSpecs.Worker: is required unless spec.partitionMode is Skip (a job without workers runs its training in the launcher pod, as one process)",
};

/// DGL 2.1.0's GraphBolt converter needs every partition in one place.
pub const GRAPHBOLT_NOT_WITH_DISTPARMETIS: SpecRule = SpecRule {
    when: (Fact::UsesGraphbolt, true),
    then: (Fact::Mode(PartitionMode::DistParMetis), false),
    message: "spec.useGraphbolt: is not supported with spec.partitionMode DistParMETIS (each worker holds only its own partition; DGL 2.1.0's converter needs all of them): use ParMETIS, DGL-API or Skip",
};

/// DGL 2.1.0 has no GraphBolt in standalone mode.
pub const GRAPHBOLT_NEEDS_WORKERS: SpecRule = SpecRule {
    when: (Fact::UsesGraphbolt, true),
    then: (Fact::HasWorkers, true),
    message: "spec.useGraphbolt: needs spec.dglReplicaSpecs.Worker (DGL 2.1.0 has no GraphBolt in standalone mode, the training a job without workers runs)",
};

/// The cache is keyed by a chunked input the launcher can read before any
/// partitioning, and stored from the native pipeline's output: the
/// partitioner pod's (ParMETIS) or the workers' ranks' (DistParMETIS).
pub const PARTITION_CACHE_NEEDS_NATIVE_PARTITIONER: SpecRule = SpecRule {
    when: (Fact::PartitionCache, true),
    then: (Fact::NativeMode, true),
    message: "spec.partitionCache: needs spec.partitionMode ParMETIS or DistParMETIS (its key is computed from the chunked --partition-input before partitioning; DGL-API's script and Skip have no such input)",
};

/// What DGL 2.1.0's GraphBolt cannot be given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphBoltConflict {
    /// Partition mode DistParMETIS ([`GRAPHBOLT_NOT_WITH_DISTPARMETIS`]).
    DistParMetis,
    /// No workers ([`GRAPHBOLT_NEEDS_WORKERS`]).
    Standalone,
}

impl GraphBoltConflict {
    /// The rule this conflict breaks.
    pub fn rule(self) -> &'static SpecRule {
        match self {
            GraphBoltConflict::DistParMetis => &GRAPHBOLT_NOT_WITH_DISTPARMETIS,
            GraphBoltConflict::Standalone => &GRAPHBOLT_NEEDS_WORKERS,
        }
    }
}

/// The first GraphBolt rule `f` breaks (DistParMETIS before standalone).
pub fn graphbolt_conflict(f: &Facts) -> Option<GraphBoltConflict> {
    [
        GraphBoltConflict::DistParMetis,
        GraphBoltConflict::Standalone,
    ]
    .into_iter()
    .find(|c| !c.rule().kept_by(f))
}

/// What every launcher's ServiceAccount is named after its job
/// (`<job>-launcher`, [`crate::names::rbac_name`]): it may patch its pod,
/// so no other pod may run as one.
pub const LAUNCHER_ACCOUNT_SUFFIX: &str = "-launcher";

/// The roles whose templates choose their own ServiceAccount (the
/// operator sets the launcher's).
pub const ACCOUNT_ROLES: [ReplicaType; 2] = [ReplicaType::Worker, ReplicaType::Partitioner];

/// The pod spec fields that name a ServiceAccount (`serviceAccount` is the
/// deprecated alias the API server still honours).
pub const ACCOUNT_FIELDS: [&str; 2] = ["serviceAccountName", "serviceAccount"];

/// "No `role` template runs as a launcher's ServiceAccount" (any job's,
/// its own included): a CEL rule on `DGLJobSpec`.
pub fn no_launcher_account_rule(role: ReplicaType) -> kube::core::Rule {
    let spec = format!("self.dglReplicaSpecs.{role}.template.spec");
    let fields: Vec<String> = ACCOUNT_FIELDS
        .iter()
        .map(|f| format!("(!has({spec}.{f}) || !{spec}.{f}.endsWith('{LAUNCHER_ACCOUNT_SUFFIX}'))"))
        .collect();
    let cel = format!(
        "!('{role}' in self.dglReplicaSpecs) || !has({spec}) || ({})",
        fields.join(" && ")
    );
    kube::core::Rule::new(cel).message(kube::core::Message::Message(launcher_account_message(
        role,
        ACCOUNT_FIELDS[0],
    )))
}

fn launcher_account_message(role: ReplicaType, field: &str) -> String {
    format!(
        "spec.dglReplicaSpecs.{role}.template.spec.{field}: must not name a launcher's ServiceAccount \
         (a name ending in '{LAUNCHER_ACCOUNT_SUFFIX}'): that account may patch a launcher pod"
    )
}

/// The first template (Worker, then Partitioner) that names a launcher's
/// ServiceAccount: the message [`no_launcher_account_rule`] gives, naming
/// the field, for a job stored before the CRD had the rule.
pub fn launcher_account_named(spec: &DGLJobSpec) -> Option<String> {
    ACCOUNT_ROLES.into_iter().find_map(|role| {
        let pod = spec.replica_spec(role)?.template.spec.as_ref()?;
        let named = [
            pod.service_account_name.as_deref(),
            pod.service_account.as_deref(),
        ];
        ACCOUNT_FIELDS
            .into_iter()
            .zip(named)
            .find(|(_, sa)| sa.is_some_and(|sa| sa.ends_with(LAUNCHER_ACCOUNT_SUFFIX)))
            .map(|(field, _)| launcher_account_message(role, field))
    })
}

/// How many pods of `role` a job has, as its replica specs say: a spec
/// without `replicas` has 1, a missing spec `absent` (no workers; the
/// Partitioner defaults to the Launcher's template, so 1).
fn replica_count(role: ReplicaType) -> i32 {
    match role {
        ReplicaType::Worker => 0,
        _ => 1,
    }
}

/// `role`'s pod count as CEL over the replica specs map `map`.
fn replicas_cel(map: &str, role: ReplicaType) -> String {
    format!(
        "('{role}' in {map} ? (has({map}.{role}.replicas) ? {map}.{role}.replicas : 1) : {})",
        replica_count(role)
    )
}

/// `role`'s pod count read the way [`replicas_cel`] reads it.
pub fn replicas_of(spec: &DGLJobSpec, role: ReplicaType) -> i32 {
    spec.replica_spec(role)
        .map(ReplicaSpec::replicas)
        .unwrap_or(replica_count(role))
}

/// "`role`'s pod count never changes": a transition rule on
/// `dglReplicaSpecs`, which counts a spec added or removed after creation
/// as the change of count it is (a rule on `replicas` itself runs only when
/// both the old and the new object have it).
pub fn replicas_fixed_rule(role: ReplicaType) -> kube::core::Rule {
    let cel = format!(
        "{} == {}",
        replicas_cel("self", role),
        replicas_cel("oldSelf", role)
    );
    let why = match role {
        ReplicaType::Worker => " (the partitions and the hostfile are made for it)",
        _ => "",
    };
    kube::core::Rule::new(cel).message(kube::core::Message::Message(format!(
        "spec.dglReplicaSpecs.{role}.replicas: is immutable{why}, also by adding or removing \
         spec.dglReplicaSpecs.{role}; create a new DGLJob to change it"
    )))
}

#[cfg(test)]
mod tests;
