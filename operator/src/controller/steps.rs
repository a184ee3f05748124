//! Pipeline step "pods": the plan's pod steps (and the TTL's job deletion),
//! each recorded as an expectation in the pod cache once sent. The pods a
//! finished job's cleanPodPolicy removes go in one request.

use dgl_api::names::{FIELD_MANAGER, LABEL_JOB_NAME, LABEL_MANAGED_BY, MANAGED_BY};
use dgl_api::DGLJob;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams, PropagationPolicy};
use kube::{Resource, ResourceExt};
use tracing::{debug, info};

use super::children::owned;
use super::{is_status, kube_err, Context, Error};
use crate::cache::{JobKey, SeenChild};
use crate::pure::observe::ObservedPod;
use crate::pure::plan::Step;

const POD: &str = <Pod as k8s_openapi::Resource>::KIND;

pub(super) async fn run_step(
    ctx: &Context,
    job: &DGLJob,
    key: &JobKey,
    step: &Step,
) -> Result<(), Error> {
    ctx.metrics.api_writes.inc();
    match step {
        Step::CreatePod(pod) => create_pod(ctx, job, key, pod).await,
        Step::DeletePod(pod) => delete_pod(ctx, key, pod, None).await,
        Step::ForceDeletePod(pod) => delete_pod(ctx, key, pod, Some(0)).await,
        Step::CleanPods { running_only, pods } => clean_pods(ctx, key, *running_only, pods).await,
        Step::DeleteJob => delete_job(ctx, key).await,
    }
}

/// Creates a pod (POST). A pod of that name that exists already is fine
/// when this job controls it (a repeat); any other is left alone (an error).
async fn create_pod(ctx: &Context, job: &DGLJob, key: &JobKey, pod: &Pod) -> Result<(), Error> {
    let name = pod.name_any();
    debug!(job = %key.name, pod = %name, "creating pod");
    let api = Api::<Pod>::namespaced(ctx.client.clone(), &key.namespace);
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&pp, pod).await {
        Ok(_) => {}
        Err(e) if is_status(&e, 409) => {
            let meta = api
                .get_metadata(&name)
                .await
                .map_err(kube_err("read", POD, &name))?;
            owned(POD, &name, Some(&SeenChild::of(&meta.metadata)), job)?;
        }
        Err(e) => return Err(kube_err("create", POD, &name)(e)),
    }
    if let Some(o) = ObservedPod::from_pod(pod) {
        ctx.pods.expect_created(key, o);
    }
    Ok(())
}

/// Deletes a pod (with this grace period, default the pod's); one already
/// gone is fine.
async fn delete_pod(
    ctx: &Context,
    job: &JobKey,
    pod: &str,
    grace: Option<u32>,
) -> Result<(), Error> {
    debug!(job = %job.name, pod = %pod, ?grace, "deleting pod");
    let dp = DeleteParams {
        grace_period_seconds: grace,
        ..DeleteParams::background()
    };
    match Api::<Pod>::namespaced(ctx.client.clone(), &job.namespace)
        .delete(pod, &dp)
        .await
    {
        Ok(_) => {}
        Err(e) if is_status(&e, 404) => {}
        Err(e) => return Err(kube_err("delete", POD, pod)(e)),
    }
    ctx.pods.expect_deleted(job, pod);
    Ok(())
}

/// cleanPodPolicy at the job's end: the pods in one request (deletecollection
/// by the job's label; one pod: a plain delete). Which pods the API server
/// deletes is decided by their phase as it has them now (Running: every pod
/// that is not Succeeded or Failed, as Kubeflow's operators read the policy),
/// so a cache that lags cannot spare a pod; `pods` is what the cache shows,
/// recorded as expected deletions.
async fn clean_pods(
    ctx: &Context,
    job: &JobKey,
    running_only: bool,
    pods: &[String],
) -> Result<(), Error> {
    if let [pod] = pods {
        return delete_pod(ctx, job, pod, None).await;
    }
    debug!(job = %job.name, pods = ?pods, "deleting pods");
    let mut selector = ListParams::default().labels(&format!(
        "{LABEL_JOB_NAME}={},{LABEL_MANAGED_BY}={MANAGED_BY}",
        job.name
    ));
    if running_only {
        selector = selector.fields("status.phase!=Succeeded,status.phase!=Failed");
    }
    Api::<Pod>::namespaced(ctx.client.clone(), &job.namespace)
        .delete_collection(&DeleteParams::background(), &selector)
        .await
        .map_err(kube_err("delete the pods of", DGLJob::kind(&()), &job.name))?;
    for pod in pods {
        ctx.pods.expect_deleted(job, pod);
    }
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
