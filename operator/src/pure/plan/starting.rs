//! Pods that cannot start (Unschedulable, an image that cannot be pulled, a
//! ConfigMap or Secret key that does not exist): named at once in condition
//! [`PODS_NOT_STARTING`], and the job failed after
//! runPolicy.podStartTimeoutSeconds of it.

use dgl_api::{DGLJobStatus, JobPhase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::status::secs_between;
use super::{Plan, Planner, Replicas};
use crate::pure::observe::ObservedPod;

/// The condition type: True while a pod of the current run cannot start.
pub const PODS_NOT_STARTING: &str = "PodsNotStarting";

/// How many stuck pods a message names besides the first.
const NAMED_MAX: usize = 3;

impl<'a> Planner<'a> {
    /// Sets [`PODS_NOT_STARTING`] from the pods that cannot start (False
    /// once none is left); `Some(message)` once the first of them has been
    /// stuck for runPolicy.podStartTimeoutSeconds, else a wake-up for then.
    pub(super) fn watch_starts(&mut self, current: &[&ObservedPod]) -> Option<String> {
        let mut stuck: Vec<&ObservedPod> = current
            .iter()
            .filter(|p| p.not_starting.is_some())
            .copied()
            .collect();
        stuck.sort_by(|a, b| a.name.cmp(&b.name));
        let Some(first) = stuck.first() else {
            let message = format!(
                "Every pod of DGLJob {} has started or is starting.",
                self.name
            );
            self.sb
                .clear_type(PODS_NOT_STARTING, "PodsStarted", &message);
            return None;
        };
        let cause = first.not_starting.as_ref()?;
        let described = cause.describe(&first.name);
        let message = with_others(&described, &stuck[1..]);
        self.sb
            .set_type(PODS_NOT_STARTING, true, &cause.reason, &message);
        let timeout = self.job.spec.run_policy().pod_start_timeout()?;
        let since = self
            .sb
            .condition(PODS_NOT_STARTING)?
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

/// The [`PODS_NOT_STARTING`] condition when it became True between `old`
/// and `new` (a Warning Event, once per episode: a new reason or message
/// alone is none).
pub fn newly_not_starting<'s>(
    old: Option<&DGLJobStatus>,
    new: &'s DGLJobStatus,
) -> Option<&'s Condition> {
    let now = find(new, PODS_NOT_STARTING).filter(|c| c.status == "True")?;
    let before = old.and_then(|o| find(o, PODS_NOT_STARTING));
    before
        .is_none_or(|b| b.status != "True" || b.last_transition_time != now.last_transition_time)
        .then_some(now)
}

fn find<'s>(s: &'s DGLJobStatus, type_: &str) -> Option<&'s Condition> {
    s.conditions.iter().find(|c| c.type_ == type_)
}
