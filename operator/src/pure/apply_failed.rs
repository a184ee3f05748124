//! Errors that persist without being final (a quota, an admission policy,
//! an API server that keeps failing) are retried with backoff by the
//! controller, and shown: from the [`FAILING_AFTER`]th failure in a row,
//! condition [`APPLY_FAILED`] is True with the error and each failed
//! attempt is a Warning Event; the first reconcile that succeeds turns the
//! condition False. The controller reports how each reconcile ended
//! ([`Reconciled`]); this is the condition's detector.

use dgl_api::{DGLJobStatus, JobConditionType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::conditions::{self, ConditionState, Update};

/// The condition type of a job whose reconciles keep failing.
pub const APPLY_FAILED: &str = JobConditionType::ApplyFailed.as_str();

/// Failures in a row before they are shown (about 7 s of backoff).
pub const FAILING_AFTER: u32 = 3;

/// How a reconcile ended, as the controller reports it.
#[derive(Debug, Clone, Copy)]
pub enum Reconciled<'e> {
    Succeeded,
    /// The `attempt`th failure in a row; `reason` is the API server's
    /// (Forbidden, TooManyRequests, ...) or what failed.
    Failed {
        attempt: u32,
        reason: &'e str,
        error: &'e str,
    },
}

/// The detector: True from the [`FAILING_AFTER`]th failure in a row,
/// cleared after a success, nothing before.
pub fn detect(r: Reconciled<'_>) -> Option<ConditionState> {
    let t = JobConditionType::ApplyFailed;
    match r {
        Reconciled::Succeeded => Some(ConditionState::clear(
            t,
            "ApplySucceeded",
            "The job's objects are written again.",
        )),
        Reconciled::Failed { attempt, .. } if attempt < FAILING_AFTER => None,
        Reconciled::Failed {
            attempt,
            reason,
            error,
        } => {
            let message = format!("{error} (failed {attempt} times in a row; retrying)");
            Some(ConditionState::set(t, reason, &message))
        }
    }
}

/// `status` after a reconcile that ended as `r`, with its Event (one per
/// failed attempt shown), or None when the status stays as it is.
pub fn after(
    status: &DGLJobStatus,
    r: Reconciled<'_>,
    now: Timestamp,
    generation: Option<i64>,
) -> Option<Update> {
    conditions::update(status, detect(r)?, &Time(now), generation)
}

#[cfg(test)]
mod tests;
