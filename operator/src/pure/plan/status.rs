//! The status a plan writes: conditions, the phase, replica counts.

use std::collections::BTreeMap;

use dgl_api::{CleanPodPolicy, DGLJobStatus, JobPhase, ReplicaStatus, ReplicaType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::Step;
use crate::pure::observe::{ObservedPod, PodState};

/// The conditions of a job on its way; cleared when it stops.
pub(super) const IN_PROGRESS: [JobPhase; 3] = [
    JobPhase::Partitioning,
    JobPhase::Running,
    JobPhase::Restarting,
];

pub(super) struct StatusBuilder {
    pub(super) status: DGLJobStatus,
    pub(super) now: Time,
    pub(super) generation: Option<i64>,
}

impl StatusBuilder {
    pub(super) fn is_true(&self, t: JobPhase) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.type_ == t.as_str() && c.status == "True")
    }

    /// Sets a condition, keeping lastTransitionTime when the status does not
    /// change (and the reason/message stay unless given new ones).
    pub(super) fn set(&mut self, t: JobPhase, value: bool, reason: &str, message: &str) {
        self.set_type(t.as_str(), value, reason, message);
    }

    /// [`StatusBuilder::set`] for a condition type that is no phase
    /// (`PodsNotStarting`).
    pub(super) fn set_type(&mut self, type_: &str, value: bool, reason: &str, message: &str) {
        let status = if value { "True" } else { "False" };
        match self.status.conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                if c.status != status {
                    c.status = status.into();
                    c.last_transition_time = self.now.clone();
                }
                c.reason = reason.into();
                c.message = message.into();
                c.observed_generation = self.generation;
            }
            None => {
                if !value {
                    return; // a False condition that never was True says nothing
                }
                self.status.conditions.push(Condition {
                    type_: type_.into(),
                    status: status.into(),
                    reason: reason.into(),
                    message: message.into(),
                    last_transition_time: self.now.clone(),
                    observed_generation: self.generation,
                });
            }
        }
    }

    /// The condition of type `type_`, if the status has one.
    pub(super) fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Turns a condition False if it is True (same reason kept otherwise).
    pub(super) fn clear(&mut self, t: JobPhase, reason: &str, message: &str) {
        self.clear_type(t.as_str(), reason, message);
    }

    /// [`StatusBuilder::clear`] for a condition type that is no phase.
    pub(super) fn clear_type(&mut self, type_: &str, reason: &str, message: &str) {
        if self.condition(type_).is_some_and(|c| c.status == "True") {
            self.set_type(type_, false, reason, message);
        }
    }

    /// Clears the in-progress conditions when the job reaches `terminal`.
    pub(super) fn finish(&mut self, terminal: JobPhase, reason: &str, message: &str) {
        for t in IN_PROGRESS {
            self.clear(t, reason, message);
        }
        self.clear_type(super::PODS_NOT_STARTING, reason, message);
        self.set(terminal, true, reason, message);
        if self.status.completion_time.is_none() {
            self.status.completion_time = Some(self.now.clone());
        }
    }

    /// The phase shown is the most decisive True condition: this is a
    /// priority order, not the list of phases ([`JobPhase::ALL`]).
    pub(super) fn derive_phase(&mut self) {
        use JobPhase::*;
        let priority = [
            Failed,
            Succeeded,
            Suspended,
            Restarting,
            Running,
            Partitioned,
            Partitioning,
            Created,
        ];
        self.status.phase = priority.into_iter().find(|p| self.is_true(*p));
    }
}

pub(super) fn counts(pods: &[&ObservedPod]) -> BTreeMap<ReplicaType, ReplicaStatus> {
    let mut out = BTreeMap::new();
    for p in pods {
        // A pod on its way out is not counted, nor does it keep its role listed.
        if p.state == PodState::Terminating {
            continue;
        }
        let e: &mut ReplicaStatus = out.entry(p.role).or_default();
        match p.state {
            PodState::Pending | PodState::Running { .. } => e.active += 1,
            PodState::Succeeded => e.succeeded += 1,
            PodState::Failed { .. } => e.failed += 1,
            PodState::Terminating => {}
        }
    }
    out
}

/// Replica counts as they will be once this plan's steps are done: a pod it
/// deletes no longer counts, a pod it creates counts as active. The status
/// is written before the steps run, so counting them now saves a second
/// status write when their watch events arrive.
pub(super) fn counts_after(
    pods: &[&ObservedPod],
    steps: &[Step],
) -> BTreeMap<ReplicaType, ReplicaStatus> {
    let deleting: Vec<&str> = steps
        .iter()
        .flat_map(Step::deleted_pods)
        .map(String::as_str)
        .collect();
    let kept: Vec<&ObservedPod> = pods
        .iter()
        .filter(|p| !deleting.contains(&p.name.as_str()))
        .copied()
        .collect();
    let mut out = counts(&kept);
    for s in steps {
        if let Step::CreatePod(pod) = s {
            if let Some(o) = ObservedPod::from_pod(pod) {
                out.entry(o.role).or_default().active += 1;
            }
        }
    }
    out
}

/// The pods to delete under `policy` when the job ends, as one step (none
/// when there is nothing to delete).
pub(super) fn clean_pods(policy: CleanPodPolicy, pods: &[ObservedPod]) -> Option<Step> {
    let names: Vec<String> = pods
        .iter()
        .filter(|p| p.state != PodState::Terminating)
        .filter(|p| match policy {
            CleanPodPolicy::All => true,
            CleanPodPolicy::Running => p.is_active(),
            CleanPodPolicy::None => false,
        })
        .map(|p| p.name.clone())
        .collect();
    (!names.is_empty()).then(|| Step::CleanPods {
        running_only: policy == CleanPodPolicy::Running,
        pods: names,
    })
}

pub(super) fn secs_between(from: &Time, to: Timestamp) -> i64 {
    to.as_second().saturating_sub(from.0.as_second())
}
