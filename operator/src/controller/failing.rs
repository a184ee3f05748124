//! Errors that persist without being final (a quota, an admission policy, an
//! API server that keeps failing) are retried with backoff, and shown: from
//! the [`FAILING_AFTER`]th failure in a row, condition `ApplyFailed` is True
//! with the error and each failed attempt is a Warning Event; the first
//! reconcile that succeeds turns the condition False.

use dgl_api::DGLJob;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;

use super::{events, status, Context, Error};

/// The condition type of a job whose reconciles keep failing.
pub const APPLY_FAILED: &str = "ApplyFailed";

/// Failures in a row before they are shown (about 7 s of backoff).
pub const FAILING_AFTER: u32 = 3;

/// Failed reconciles of `job` in a row before the current one.
fn failures(ctx: &Context, job: &DGLJob) -> u32 {
    let failures = ctx.failures.lock().expect("lock");
    failures
        .get(&ObjectRef::from_obj(job))
        .copied()
        .unwrap_or(0)
}

/// `status` with condition [`APPLY_FAILED`] set (pure): a new True (or
/// False) moves its lastTransitionTime, a new message alone does not.
pub fn with_condition(
    mut status: dgl_api::DGLJobStatus,
    failing: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
    generation: Option<i64>,
) -> dgl_api::DGLJobStatus {
    let value = if failing { "True" } else { "False" };
    match status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == APPLY_FAILED)
    {
        Some(c) => {
            if c.status != value {
                c.status = value.into();
                c.last_transition_time = Time(now);
            }
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None if failing => status.conditions.push(Condition {
            type_: APPLY_FAILED.into(),
            status: value.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(now),
            observed_generation: generation,
        }),
        None => {}
    }
    status
}

/// The reason shown for `e`: the API server's (Forbidden, TooManyRequests,
/// ...), else what failed.
fn reason(e: &Error) -> String {
    match e {
        Error::Kube { source, .. } => match source.as_ref() {
            kube::Error::Api(s) if !s.reason.is_empty() => s.reason.clone(),
            _ => "RequestFailed".into(),
        },
        Error::Earlier { .. } => "WaitingForGarbageCollection".into(),
        _ => "ReconcileFailed".into(),
    }
}

/// After a failed reconcile: from the [`FAILING_AFTER`]th in a row, the
/// condition and a Warning Event (each best effort: the error stands).
pub(super) async fn show(ctx: &Context, job: &DGLJob, e: &Error, now: Timestamp) {
    let attempt = failures(ctx, job) + 1;
    if attempt < FAILING_AFTER {
        return;
    }
    let job = status::with_written_status(ctx, job);
    let reason = reason(e);
    let message = format!("{e} (failed {attempt} times in a row; retrying)");
    let current = job.status.clone().unwrap_or_default();
    let new = with_condition(
        current,
        true,
        &reason,
        &message,
        now,
        job.metadata.generation,
    );
    let _ = status::write_status(ctx, &job, &new).await;
    events::publish(ctx, &job, true, &reason, APPLY_FAILED, &message);
}

/// After a reconcile that succeeded: the condition, if True, turns False.
pub(super) async fn clear(ctx: &Context, job: &DGLJob, now: Timestamp) -> Result<(), Error> {
    let job = status::with_written_status(ctx, job);
    let Some(current) = job.status.clone() else {
        return Ok(());
    };
    let failing = current
        .conditions
        .iter()
        .any(|c| c.type_ == APPLY_FAILED && c.status == "True");
    if !failing {
        return Ok(());
    }
    let message = "The job's objects are written again.";
    let new = with_condition(
        current,
        false,
        "ApplySucceeded",
        message,
        now,
        job.metadata.generation,
    );
    status::write_status(ctx, &job, &new).await
}

#[cfg(test)]
mod tests;
