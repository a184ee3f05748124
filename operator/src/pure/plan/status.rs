//! The status a plan writes: conditions, the phase, replica counts.

use std::collections::BTreeMap;

use dgl_api::{
    CleanPodPolicy, DGLJobStatus, JobConditionType, JobPhase, ReplicaStatus, ReplicaType,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::Step;
use crate::pure::conditions::{self, ConditionState};
use crate::pure::observe::{ObservedPod, PodState};

/// The phases of a job on its way; cleared when it is suspended.
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
    pub(super) fn is_true(&self, t: impl Into<JobConditionType>) -> bool {
        self.condition(t.into()).is_some_and(|c| c.status == "True")
    }

    /// Writes a detector's finding ([`conditions::apply`]).
    pub(super) fn apply(&mut self, s: ConditionState) {
        conditions::apply(&mut self.status.conditions, s, &self.now, self.generation);
    }

    /// Sets a condition True, keeping lastTransitionTime while it stays True.
    pub(super) fn set(&mut self, t: impl Into<JobConditionType>, reason: &str, message: &str) {
        self.apply(ConditionState::set(t, reason, message));
    }

    /// Turns a condition False if it is True (left as it is otherwise).
    pub(super) fn clear(&mut self, t: impl Into<JobConditionType>, reason: &str, message: &str) {
        self.apply(ConditionState::clear(t, reason, message));
    }

    /// The condition of type `t`, if the status has one.
    pub(super) fn condition(&self, t: JobConditionType) -> Option<&Condition> {
        let t = t.as_str();
        self.status.conditions.iter().find(|c| c.type_ == t)
    }

    /// Clears the conditions of a job on its way
    /// ([`JobConditionType::cleared_when_job_ends`]) when the job reaches
    /// `terminal`.
    pub(super) fn finish(&mut self, terminal: JobPhase, reason: &str, message: &str) {
        for t in JobConditionType::ALL {
            if t.cleared_when_job_ends() {
                self.clear(t, reason, message);
            }
        }
        self.set(terminal, reason, message);
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
