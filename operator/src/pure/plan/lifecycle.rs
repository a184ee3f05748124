//! The plans that stop or pause a job, and the clock: finished, refused,
//! suspended and resumed, the deadline, succeeded.

use dgl_api::{CleanPodPolicy, JobPhase, ReplicaType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::status::{secs_between, IN_PROGRESS};
use super::{Plan, Planner, Replicas, Step};
use crate::pure::observe::{ObservedPod, PodState};

impl<'a> Planner<'a> {
    /// Finished jobs: keep applying cleanPodPolicy, then the TTL.
    pub(super) fn finished(mut self) -> Plan {
        self.clean_pods(self.job.spec.clean_pod_policy);
        let ttl = self.job.spec.run_policy().ttl_seconds_after_finished;
        if let (Some(ttl), Some(done)) = (ttl, self.sb.status.completion_time.clone()) {
            let left = i64::from(ttl).saturating_sub(secs_between(&done, self.now));
            if left <= 0 {
                self.steps.push(Step::DeleteJob);
            } else {
                self.wake(left);
            }
        }
        let epoch = self.epoch;
        let pods = self.pods;
        let current: Vec<&ObservedPod> = pods.iter().filter(|p| p.epoch == epoch).collect();
        self.done(Replicas::After(&current), false)
    }

    /// Failed before or while running, for a reason no pod gave.
    pub(super) fn refused(mut self, reason: &str, message: &str) -> Plan {
        self.sb.finish(JobPhase::Failed, reason, message);
        self.clean_pods(self.job.spec.clean_pod_policy);
        self.wake_for_ttl();
        let epoch = self.epoch;
        let pods = self.pods;
        let current: Vec<&ObservedPod> = pods.iter().filter(|p| p.epoch == epoch).collect();
        self.done(Replicas::After(&current), false)
    }

    /// Suspend: no pods, job kept; resume starts again (deadline from resume).
    pub(super) fn suspended(mut self) -> Plan {
        self.clean_pods(CleanPodPolicy::All);
        let message = format!("DGLJob {} is suspended.", self.name);
        for t in IN_PROGRESS {
            self.sb.clear(t, "JobSuspended", &message);
        }
        self.sb.set(JobPhase::Suspended, "JobSuspended", &message);
        self.sb.status.start_time = None;
        self.reset_launch = self.launched;
        self.done(Replicas::Cleared, true)
    }

    /// A suspended job that is no longer asked to be: Suspended turns False.
    pub(super) fn resume(&mut self) {
        if self.sb.is_true(JobPhase::Suspended) {
            let message = format!("DGLJob {} is resumed.", self.name);
            self.sb.clear(JobPhase::Suspended, "JobResumed", &message);
        }
    }

    /// Deletes the pods of earlier runs (the partitioner is shared by all
    /// runs) and returns the current run's.
    pub(super) fn retire_earlier_runs(&mut self) -> Vec<&'a ObservedPod> {
        let epoch = self.epoch;
        let (current, stale): (Vec<&ObservedPod>, Vec<&ObservedPod>) = self
            .pods
            .iter()
            .partition(|p| p.epoch == epoch || p.role == ReplicaType::Partitioner);
        for p in stale {
            if p.state != PodState::Terminating {
                self.steps.push(Step::DeletePod(p.name.clone()));
            }
        }
        current
    }

    /// Starts the clock if it is not running; true once activeDeadlineSeconds
    /// has passed, else a wake-up for when it will (timer-driven).
    pub(super) fn deadline_passed(&mut self) -> bool {
        if self.sb.status.start_time.is_none() {
            self.sb.status.start_time = Some(Time(self.now));
        }
        let deadline = self.job.spec.run_policy().active_deadline_seconds;
        let (Some(deadline), Some(start)) = (deadline, self.sb.status.start_time.clone()) else {
            return false;
        };
        // Saturating: a deadline near i64::MAX and a start time ahead of this
        // clock (skew) must not overflow.
        let left = deadline.saturating_sub(secs_between(&start, self.now));
        if left > 0 {
            self.wake(left);
        }
        left <= 0
    }

    pub(super) fn deadline_exceeded(mut self, current: &[&ObservedPod]) -> Plan {
        let deadline = self
            .job
            .spec
            .run_policy()
            .active_deadline_seconds
            .unwrap_or_default();
        let message = format!(
            "DGLJob {} was active longer than activeDeadlineSeconds ({deadline}s).",
            self.name
        );
        self.sb
            .finish(JobPhase::Failed, "DeadlineExceeded", &message);
        self.clean_pods(self.job.spec.clean_pod_policy);
        self.wake_for_ttl();
        self.done(Replicas::After(current), false)
    }

    /// The launcher exited 0: the job succeeded.
    pub(super) fn succeeded(mut self, current: &[&ObservedPod]) -> Plan {
        let message = format!("DGLJob {} successfully completed.", self.name);
        self.sb
            .finish(JobPhase::Succeeded, "JobSucceeded", &message);
        self.clean_pods(self.job.spec.clean_pod_policy);
        self.wake_for_ttl();
        self.done(Replicas::After(current), false)
    }
}
