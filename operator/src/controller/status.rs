//! Pipeline step "status": the job's status, written (server-side apply of
//! the status subresource) only when it changed, and remembered until the
//! job watch shows it (an expectation: only this operator writes the status).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dgl_api::names::FIELD_MANAGER;
use dgl_api::{DGLJob, DGLJobStatus};
use kube::api::{Api, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::{kube_err, Context, Error};
use crate::expectations::Expectations;

/// A status this operator wrote, and the job's resourceVersion after it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Written {
    status: DGLJobStatus,
    resource_version: Option<String>,
}

/// Proof that the status a plan decided was written (or needed no write):
/// the pod steps ask for it (`act`), so a decision (a restart counted, a
/// terminal state) is recorded before the pods that act on it, and a crash
/// between the two cannot repeat it. Zero-size; the private field means
/// only this module makes one.
#[must_use]
pub(super) struct StatusWritten(());

/// Statuses this operator wrote, by job uid, until the job watch shows them.
pub(super) type WrittenStatus = Expectations<String, (), Written>;

/// Forgets a written status once the job watch shows it (or the job is gone).
pub(super) fn prune_written(
    written: &WrittenStatus,
    ev: &watcher::Event<DeserializeGuard<DGLJob>>,
) {
    let job = match ev {
        watcher::Event::Apply(j) | watcher::Event::InitApply(j) | watcher::Event::Delete(j) => j,
        _ => return,
    };
    let Ok(job) = &job.0 else { return };
    let Some(uid) = job.metadata.uid.as_ref() else {
        return;
    };
    let deleted = matches!(ev, watcher::Event::Delete(_));
    written.remove_if(uid, &(), |w, expired| {
        deleted || job.status.as_ref() == Some(&w.status) || expired
    });
}

/// The job with the status this operator last wrote (and the
/// resourceVersion that write made), if the job cache has not caught up
/// with that write yet.
pub(super) fn with_written_status<'a>(ctx: &Context, job: &'a DGLJob) -> Cow<'a, DGLJob> {
    let Some(uid) = job.uid() else {
        return Cow::Borrowed(job);
    };
    match ctx.written.get(&uid, &()) {
        Some(w) if job.status.as_ref() != Some(&w.status) => {
            let mut j = job.clone();
            j.status = Some(w.status);
            j.metadata.resource_version = w.resource_version;
            Cow::Owned(j)
        }
        _ => Cow::Borrowed(job),
    }
}

/// Writes the job's status unless it is what the job already has, and
/// remembers the write until the job watch shows it.
///
/// The write carries the resourceVersion the status was computed from (a
/// precondition of the apply): a status computed from a job cache older
/// than the last write (a restart counted since) is refused with 409
/// Conflict, and the reconcile is retried from a newer cache, instead of
/// rolling the status back (issue #36 item 9).
pub(super) async fn write_status(
    ctx: &Context,
    job: &DGLJob,
    status: &DGLJobStatus,
) -> Result<StatusWritten, Error> {
    if job.status.as_ref() == Some(status) {
        return Ok(StatusWritten(()));
    }
    let name = job.name_any();
    let ns = job.namespace().ok_or(Error::NoNamespace)?;
    let mut patch = serde_json::json!({
        "apiVersion": DGLJob::api_version(&()),
        "kind": DGLJob::kind(&()),
        "status": status,
    });
    if let Some(rv) = job.resource_version() {
        patch["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    ctx.metrics.status_writes.inc();
    let written = Api::<DGLJob>::namespaced(ctx.client.clone(), &ns)
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(kube_err("write status of", DGLJob::kind(&()), &name))?;
    let resource_version = written.metadata.resource_version.clone();
    if let (Some(uid), Some(status)) = (job.uid(), written.status) {
        let w = Written {
            status,
            resource_version,
        };
        ctx.written.expect(&uid, (), w);
    }
    Ok(StatusWritten(()))
}

/// The least time between two status writes of a job that change only its
/// progress: the launcher may report as often as it likes, its job's status
/// is written about once a second (issue #36 item 6).
pub(super) const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// When each job (by uid) last had a progress change written.
#[derive(Default)]
pub struct ProgressWrites(Mutex<HashMap<String, Instant>>);

/// The status to write now, and when to come back: a change of the progress
/// alone waits until [`PROGRESS_EVERY`] after the job's last one (the status
/// keeps the progress it has until then); any other change is written at
/// once, with the progress.
pub(super) fn limit_progress(
    ctx: &Context,
    job: &DGLJob,
    status: &DGLJobStatus,
) -> (DGLJobStatus, Option<Duration>) {
    let current = job.status.clone().unwrap_or_default();
    if current.progress == status.progress {
        return (status.clone(), None);
    }
    let mut held = status.clone();
    held.progress = current.progress.clone();
    let only_progress = held == current;
    let uid = job.uid().unwrap_or_default();
    let mut last = ctx.progress_writes.0.lock().expect("not poisoned");
    if only_progress {
        if let Some(wait) = last
            .get(&uid)
            .and_then(|t| PROGRESS_EVERY.checked_sub(t.elapsed()))
            .filter(|w| !w.is_zero())
        {
            return (held, Some(wait));
        }
    }
    // Bounded: entries older than the interval no longer hold anything back.
    last.retain(|_, t| t.elapsed() < PROGRESS_EVERY);
    last.insert(uid, Instant::now());
    (status.clone(), None)
}
