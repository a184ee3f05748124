//! Pipeline step "pods": the plan's pod steps (and the TTL's job deletion),
//! each recorded as an expectation in the pod cache once sent.

use dgl_api::names::FIELD_MANAGER;
use dgl_api::DGLJob;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PropagationPolicy};
use kube::{Resource, ResourceExt};
use tracing::{debug, info};

use super::{is_status, kube_err, Context, Error};
use crate::cache::JobKey;
use crate::observe::ObservedPod;
use crate::plan::Step;

const POD: &str = <Pod as k8s_openapi::Resource>::KIND;

pub(super) async fn run_step(ctx: &Context, job: &JobKey, step: &Step) -> Result<(), Error> {
    ctx.metrics.api_writes.inc();
    match step {
        Step::CreatePod(pod) => create_pod(ctx, job, pod).await,
        Step::DeletePod(pod) => delete_pod(ctx, job, pod).await,
        Step::DeleteJob => delete_job(ctx, job).await,
    }
}

/// Creates a pod by server-side apply (one field manager for everything the
/// operator writes; a repeat is harmless).
async fn create_pod(ctx: &Context, job: &JobKey, pod: &Pod) -> Result<(), Error> {
    let name = pod.name_any();
    debug!(job = %job.name, pod = %name, "creating pod");
    Api::<Pod>::namespaced(ctx.client.clone(), &job.namespace)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(pod),
        )
        .await
        .map_err(kube_err("create", POD, &name))?;
    if let Some(o) = ObservedPod::from_pod(pod) {
        ctx.pods.expect_created(job, o);
    }
    Ok(())
}

/// Deletes a pod; one already gone is fine.
async fn delete_pod(ctx: &Context, job: &JobKey, pod: &str) -> Result<(), Error> {
    debug!(job = %job.name, pod = %pod, "deleting pod");
    match Api::<Pod>::namespaced(ctx.client.clone(), &job.namespace)
        .delete(pod, &DeleteParams::background())
        .await
    {
        Ok(_) => {}
        Err(e) if is_status(&e, 404) => {}
        Err(e) => return Err(kube_err("delete", POD, pod)(e)),
    }
    ctx.pods.expect_deleted(job, pod);
    Ok(())
}

/// Deletes the job (ttlSecondsAfterFinished); its children go by garbage
/// collection.
async fn delete_job(ctx: &Context, job: &JobKey) -> Result<(), Error> {
    info!(job = %job.name, "ttlSecondsAfterFinished reached: deleting the job");
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    match Api::<DGLJob>::namespaced(ctx.client.clone(), &job.namespace)
        .delete(&job.name, &dp)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(kube_err("delete", DGLJob::kind(&()), &job.name)(e)),
    }
}
