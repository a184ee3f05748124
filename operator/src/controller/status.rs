//! Pipeline step "status": the job's status, written (server-side apply of
//! the status subresource) only when it changed, and remembered until the
//! job watch shows it (an expectation: only this operator writes the status).

use std::borrow::Cow;

use dgl_api::names::FIELD_MANAGER;
use dgl_api::{DGLJob, DGLJobStatus};
use kube::api::{Api, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::{kube_err, Context, Error};
use crate::expectations::Expectations;

/// Statuses this operator wrote, by job uid, until the job watch shows them.
pub(super) type WrittenStatus = Expectations<String, (), DGLJobStatus>;

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
    written.remove_if(uid, &(), |status, expired| {
        deleted || job.status.as_ref() == Some(status) || expired
    });
}

/// The job with the status this operator last wrote, if the job cache has
/// not caught up with that write yet.
pub(super) fn with_written_status<'a>(ctx: &Context, job: &'a DGLJob) -> Cow<'a, DGLJob> {
    let Some(uid) = job.uid() else {
        return Cow::Borrowed(job);
    };
    match ctx.written.get(&uid, &()) {
        Some(status) if job.status.as_ref() != Some(&status) => {
            let mut j = job.clone();
            j.status = Some(status);
            Cow::Owned(j)
        }
        _ => Cow::Borrowed(job),
    }
}

/// Writes the job's status unless it is what the job already has, and
/// remembers the write until the job watch shows it.
pub(super) async fn write_status(
    ctx: &Context,
    job: &DGLJob,
    status: &DGLJobStatus,
) -> Result<(), Error> {
    if job.status.as_ref() == Some(status) {
        return Ok(());
    }
    let name = job.name_any();
    let ns = job.namespace().ok_or(Error::NoNamespace)?;
    let patch = serde_json::json!({
        "apiVersion": DGLJob::api_version(&()),
        "kind": DGLJob::kind(&()),
        "status": status,
    });
    ctx.metrics.status_writes.inc();
    let written = Api::<DGLJob>::namespaced(ctx.client.clone(), &ns)
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(kube_err("write status of", DGLJob::kind(&()), &name))?;
    if let (Some(uid), Some(status)) = (job.uid(), written.status) {
        ctx.written.expect(&uid, (), status);
    }
    Ok(())
}
