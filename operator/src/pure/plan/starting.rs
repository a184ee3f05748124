//! Pods that cannot start (Unschedulable, an image that cannot be pulled, a
//! ConfigMap or Secret key that does not exist): named at once in condition
//! [`PODS_NOT_STARTING`], and the job failed after
//! runPolicy.podStartTimeoutSeconds of it.

use dgl_api::{JobConditionType, JobPhase};

use super::status::secs_between;
use super::{Plan, Planner, Replicas};
use crate::pure::conditions::ConditionState;
use crate::pure::observe::{ObservedPod, StartFailure};

/// The condition type: True while a pod of the current run cannot start.
pub const PODS_NOT_STARTING: &str = JobConditionType::PodsNotStarting.as_str();

/// How many stuck pods a message names besides the first.
const NAMED_MAX: usize = 3;

/// The detector: [`PODS_NOT_STARTING`] True naming the first pod that
/// cannot start (by name), its cause and the others; cleared once none is
/// left. With the first pod's description while True.
fn detect(job: &str, current: &[&ObservedPod]) -> (ConditionState, Option<String>) {
    let mut stuck: Vec<(&ObservedPod, &StartFailure)> = current
        .iter()
        .filter_map(|p| p.not_starting.as_ref().map(|c| (*p, c)))
        .collect();
    stuck.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    let t = JobConditionType::PodsNotStarting;
    let Some((first, cause)) = stuck.first() else {
        let message = format!("Every pod of DGLJob {job} has started or is starting.");
        return (ConditionState::clear(t, "PodsStarted", &message), None);
    };
    let described = cause.describe(&first.name);
    let others: Vec<&ObservedPod> = stuck[1..].iter().map(|(p, _)| *p).collect();
    let message = with_others(&described, &others);
    let state = ConditionState::set(t, &cause.reason, &message);
    (state, Some(described))
}

impl<'a> Planner<'a> {
    /// Sets [`PODS_NOT_STARTING`] from the pods that cannot start (False
    /// once none is left); `Some(message)` once the first of them has been
    /// stuck for runPolicy.podStartTimeoutSeconds, else a wake-up for then.
    pub(super) fn watch_starts(&mut self, current: &[&ObservedPod]) -> Option<String> {
        let (state, described) = detect(&self.name, current);
        self.sb.apply(state);
        let described = described?;
        let timeout = self.job.spec.run_policy().pod_start_timeout()?;
        let since = self
            .sb
            .condition(JobConditionType::PodsNotStarting)?
            .last_transition_time
            .clone();
        let left = timeout.saturating_sub(secs_between(&since, self.now));
        if left > 0 {
            self.wake(left);
            return None;
        }
        Some(format!(
            "{described} (not started within runPolicy.podStartTimeoutSeconds, {timeout}s)"
        ))
    }

    /// Failed: a pod did not start in time. No restart: a new run's pods
    /// would be the same.
    pub(super) fn start_timed_out(mut self, current: &[&ObservedPod], message: &str) -> Plan {
        self.sb.finish(JobPhase::Failed, "PodStartTimeout", message);
        self.clean_pods(self.job.spec.clean_pod_policy);
        self.wake_for_ttl();
        self.done(Replicas::After(current), false)
    }
}

/// `described`, and the names of up to [`NAMED_MAX`] other stuck pods.
fn with_others(described: &str, others: &[&ObservedPod]) -> String {
    if others.is_empty() {
        return described.to_string();
    }
    let mut names: Vec<&str> = others
        .iter()
        .take(NAMED_MAX)
        .map(|p| p.name.as_str())
        .collect();
    if others.len() > NAMED_MAX {
        names.push("…");
    }
    format!(
        "{described}; {} more pod(s) cannot start: {}",
        others.len(),
        names.join(", ")
    )
}
