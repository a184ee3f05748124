//! Every condition type a DGLJob's status carries, in one enum: one per
//! phase, and those that are no phase. Each type says here how it is told
//! (its Event) and whether it ends with the job, so that adding a condition
//! is a variant here and the one place in the operator that detects it
//! (see docs/architecture.md, "Conditions").

use serde::{Deserialize, Serialize};

use crate::JobPhase;

/// A condition type of `status.conditions`. Serialized as its wire string,
/// [`JobConditionType::as_str`], which is its variant's name.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobConditionType {
    /// Phase conditions: the phase shown is the most decisive True one.
    Created,
    Partitioning,
    Partitioned,
    Running,
    Restarting,
    Succeeded,
    Failed,
    Suspended,
    /// True while a pod of the current run cannot start (Unschedulable, an
    /// image that cannot be pulled, a missing ConfigMap or Secret key); its
    /// message names the pod and the cause.
    PodsNotStarting,
    /// True once a pod of the current run was lost with its node (the
    /// node's Ready condition False or Unknown); False again when the next
    /// run is Running. Its message names the node and the pods.
    NodeLost,
    /// Under Kueue: True while the job waits for admission (or again after
    /// an eviction), False once admitted.
    Queued,
    /// True while the job's reconciles keep failing (from the third failure
    /// in a row: a quota, an admission policy, an API server that keeps
    /// failing); False after the first that succeeds.
    ApplyFailed,
}

/// How a condition turning True is told besides the status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionEvent {
    /// No Event: the condition alone says it.
    None,
    /// An Event when the condition turns True, or True again (its
    /// lastTransitionTime moved): a Warning or a Normal one, with `reason`,
    /// or the condition's own reason when `None`. A new reason or message
    /// alone is told by no Event.
    OnTrue {
        warning: bool,
        reason: Option<&'static str>,
    },
    /// A Warning Event for each new message while True (each failed
    /// attempt is told), with the condition's reason.
    EachMessage,
}

impl JobConditionType {
    /// Every condition type: the phases in [`JobPhase::ALL`]'s order, then
    /// the others.
    pub const ALL: [JobConditionType; 12] = [
        JobConditionType::Created,
        JobConditionType::Partitioning,
        JobConditionType::Partitioned,
        JobConditionType::Running,
        JobConditionType::Restarting,
        JobConditionType::Succeeded,
        JobConditionType::Failed,
        JobConditionType::Suspended,
        JobConditionType::PodsNotStarting,
        JobConditionType::NodeLost,
        JobConditionType::Queued,
        JobConditionType::ApplyFailed,
    ];

    /// The type as `status.conditions[].type` spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobConditionType::Created => "Created",
            JobConditionType::Partitioning => "Partitioning",
            JobConditionType::Partitioned => "Partitioned",
            JobConditionType::Running => "Running",
            JobConditionType::Restarting => "Restarting",
            JobConditionType::Succeeded => "Succeeded",
            JobConditionType::Failed => "Failed",
            JobConditionType::Suspended => "Suspended",
            JobConditionType::PodsNotStarting => "PodsNotStarting",
            JobConditionType::NodeLost => "NodeLost",
            JobConditionType::Queued => "Queued",
            JobConditionType::ApplyFailed => "ApplyFailed",
        }
    }

    /// The type spelled `name` (None for a type this operator does not write).
    pub fn from_name(name: &str) -> Option<JobConditionType> {
        JobConditionType::ALL
            .into_iter()
            .find(|t| t.as_str() == name)
    }

    /// The phase this condition is, if it is one.
    pub fn phase(self) -> Option<JobPhase> {
        JobPhase::ALL
            .into_iter()
            .find(|p| JobConditionType::from(*p) == self)
    }

    /// How its turning True is told.
    pub fn event(self) -> ConditionEvent {
        use JobConditionType::*;
        let on_true = |warning| ConditionEvent::OnTrue {
            warning,
            reason: None,
        };
        match self {
            Created | Partitioning | Partitioned | Running | Succeeded | Suspended => {
                on_true(false)
            }
            Failed | Restarting | PodsNotStarting => on_true(true),
            NodeLost => ConditionEvent::OnTrue {
                warning: true,
                reason: Some(EVENT_NODE_LOST),
            },
            Queued => ConditionEvent::None,
            ApplyFailed => ConditionEvent::EachMessage,
        }
    }

    /// Whether it turns False when the job succeeds or fails: the
    /// conditions of a job on its way.
    pub fn cleared_when_job_ends(self) -> bool {
        use JobConditionType::*;
        matches!(self, Partitioning | Running | Restarting | PodsNotStarting)
    }
}

impl From<JobPhase> for JobConditionType {
    fn from(p: JobPhase) -> Self {
        match p {
            JobPhase::Created => JobConditionType::Created,
            JobPhase::Partitioning => JobConditionType::Partitioning,
            JobPhase::Partitioned => JobConditionType::Partitioned,
            JobPhase::Running => JobConditionType::Running,
            JobPhase::Restarting => JobConditionType::Restarting,
            JobPhase::Succeeded => JobConditionType::Succeeded,
            JobPhase::Failed => JobConditionType::Failed,
            JobPhase::Suspended => JobConditionType::Suspended,
        }
    }
}

impl PartialEq<JobPhase> for JobConditionType {
    fn eq(&self, p: &JobPhase) -> bool {
        *self == JobConditionType::from(*p)
    }
}

impl std::fmt::Display for JobConditionType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// [`JobConditionType::NodeLost`] as the status spells it.
pub const CONDITION_NODE_LOST: &str = JobConditionType::NodeLost.as_str();
/// [`CONDITION_NODE_LOST`]'s reason while True.
pub const REASON_NODE_NOT_READY: &str = "NodeNotReady";
/// [`CONDITION_NODE_LOST`]'s reason once the next run is Running.
pub const REASON_NODE_LOST_RECOVERED: &str = "RunRecovered";
/// The Warning Event's reason for a node lost, and the reason of the
/// Restarting (or Failed) condition the loss leads to.
pub const EVENT_NODE_LOST: &str = "NodeLost";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_is_spelled_once_and_serializes_to_that_spelling() {
        for t in JobConditionType::ALL {
            assert_eq!(JobConditionType::from_name(t.as_str()), Some(t));
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
            let back: JobConditionType = serde_json::from_value(t.as_str().into()).unwrap();
            assert_eq!(back, t);
        }
        assert_eq!(JobConditionType::from_name("Ready"), None);
    }

    #[test]
    fn phases_are_the_phase_conditions_with_the_phase_spelling() {
        for p in JobPhase::ALL {
            let t = JobConditionType::from(p);
            assert_eq!(t.as_str(), p.as_str());
            assert_eq!(t.phase(), Some(p));
            assert_eq!(t, p);
        }
        let phases = JobConditionType::ALL.iter().filter(|t| t.phase().is_some());
        assert_eq!(phases.count(), JobPhase::ALL.len());
        assert_eq!(JobConditionType::Queued.phase(), None);
    }
}
