//! After each reconcile, its outcome reported to the `ApplyFailed`
//! condition's detector ([`crate::pure::apply_failed`]): the status it
//! yields written and its Events sent (each best effort: the error stands).

use dgl_api::DGLJob;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;

use super::{events, status, Context, Error};
use crate::pure::apply_failed::{self, Reconciled};

/// Failed reconciles of `job` in a row before the current one.
fn failures(ctx: &Context, job: &DGLJob) -> u32 {
    let failures = ctx.failures.lock().expect("lock");
    failures
        .get(&ObjectRef::from_obj(job))
        .copied()
        .unwrap_or(0)
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

/// After a failed reconcile: from the
/// [`FAILING_AFTER`](apply_failed::FAILING_AFTER)th in a row, the condition
/// and a Warning Event.
pub(super) async fn show(ctx: &Context, job: &DGLJob, e: &Error, now: Timestamp) {
    let attempt = failures(ctx, job).saturating_add(1);
    let job = status::with_written_status(ctx, job);
    let (reason, error) = (reason(e), e.to_string());
    let r = Reconciled::Failed {
        attempt,
        reason: &reason,
        error: &error,
    };
    let current = job.status.clone().unwrap_or_default();
    let Some(update) = apply_failed::after(&current, r, now, job.metadata.generation) else {
        return;
    };
    let _ = status::write_status(ctx, &job, &update.status).await;
    for t in update.transitions {
        events::transition_event(ctx, &job, t);
    }
}

/// After a reconcile that succeeded: the condition, if True, turns False.
pub(super) async fn clear(ctx: &Context, job: &DGLJob, now: Timestamp) -> Result<(), Error> {
    let job = status::with_written_status(ctx, job);
    let Some(current) = job.status.clone() else {
        return Ok(());
    };
    let r = Reconciled::Succeeded;
    let Some(update) = apply_failed::after(&current, r, now, job.metadata.generation) else {
        return Ok(());
    };
    // No pod step follows: the token is not needed.
    let _ = status::write_status(ctx, &job, &update.status).await?;
    for t in update.transitions {
        events::transition_event(ctx, &job, t);
    }
    Ok(())
}
