//! Pipeline step "apply": the job's supporting objects (ConfigMap, Secret,
//! RBAC, Service, PodGroup), each written only when it changed.

use dgl_api::names::{secret_name, FIELD_MANAGER};
use dgl_api::DGLJob;
use futures::future::{self, BoxFuture};
use futures::FutureExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{is_status, kube_err, Context, Error};
use crate::builders::{self, GangScheduler, HASH_ANNOTATION};
use crate::cache::ChildState;

/// When a child is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyWhen {
    /// Whenever its hash differs from what the operator knows of it.
    Changed,
    /// Only when it does not exist yet.
    Missing,
}

/// Server-side applies `obj` unless the cache (or this operator's own last
/// write) shows it as `when` says it need not be.
async fn apply<K>(ctx: &Context, ns: &str, obj: &K, when: ApplyWhen) -> Result<(), Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let kind = <K as k8s_openapi::Resource>::KIND;
    let name = obj.name_any();
    let want = obj.annotations().get(HASH_ANNOTATION);
    match ctx.children.hash(kind, ns, &name) {
        ChildState::Present(have) if want.is_some() && have.as_ref() == want => return Ok(()),
        ChildState::Present(_) if when == ApplyWhen::Missing => return Ok(()),
        _ => {}
    }
    ctx.metrics.api_writes.inc();
    Api::<K>::namespaced(ctx.client.clone(), ns)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await
        .map_err(kube_err("apply", kind, &name))?;
    ctx.children.record(kind, ns, &name, want.cloned());
    Ok(())
}

/// ConfigMap, Secret, RBAC, Service and PodGroup of a running job, written
/// concurrently (each only when it changed).
///
/// The ConfigMap's files (hostfile, partfile, ip_config, leadfile) are read
/// only by the launcher pod (its watcher-loop and dglrun), which is created
/// once every worker is Ready with an IP and the ConfigMap lists them all.
/// So the ConfigMap is created with the job (every pod mounts it) and
/// rewritten only once it is complete (`config_map_when` is then
/// [`ApplyWhen::Changed`]), not once per pod IP.
pub(super) async fn apply_children(
    ctx: &Context,
    job: &DGLJob,
    ns: &str,
    cm: &ConfigMap,
    config_map_when: ApplyWhen,
) -> Result<(), Error> {
    let (sa, role, binding) = builders::launcher_rbac(job);
    let svc = builders::worker_service(job);
    let mut writes: Vec<BoxFuture<'_, Result<(), Error>>> = Vec::new();

    // The secret is created once (random token) and never rewritten. The
    // operator may create Secrets but not read them (least privilege), so it
    // creates the token together with the job's first ConfigMap.
    let cm_kind = <ConfigMap as k8s_openapi::Resource>::KIND;
    if ctx.children.hash(cm_kind, ns, &cm.name_any()) == ChildState::Absent {
        writes.push(create_secret(ctx, job, ns).boxed());
    }
    writes.push(apply(ctx, ns, cm, config_map_when).boxed());
    writes.push(apply(ctx, ns, &sa, ApplyWhen::Changed).boxed());
    // The Role before its RoleBinding: unless the operator may `bind` roles
    // (it may not: least privilege), the API server checks a new binding
    // against the rules of the Role it names, and answers 404 while that
    // Role does not exist yet.
    writes.push(
        async {
            apply(ctx, ns, &role, ApplyWhen::Changed).await?;
            apply(ctx, ns, &binding, ApplyWhen::Changed).await
        }
        .boxed(),
    );
    // A job without workers has none to put behind a Service.
    if !job.spec.is_standalone() {
        writes.push(apply(ctx, ns, &svc, ApplyWhen::Changed).boxed());
    }
    if let Some(gang) = ctx.settings.build.gang {
        writes.push(apply_pod_group(ctx, job, ns, gang).boxed());
    }
    // Every write runs to its end: with try_join_all, the first error would
    // drop the others mid-flight, and a reconcile that always fails on the
    // same one would never finish the rest.
    future::join_all(writes)
        .await
        .into_iter()
        .collect::<Result<Vec<()>, Error>>()?;
    Ok(())
}

/// Creates (POST, not apply) the job's Secret with a fresh random token; a
/// repeat answered "already exists" is fine: the token is never rewritten.
async fn create_secret(ctx: &Context, job: &DGLJob, ns: &str) -> Result<(), Error> {
    let name = secret_name(&job.name_any());
    let secret = builders::secret(job, &random_token());
    ctx.metrics.api_writes.inc();
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .create(&pp, &secret)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) => Ok(()),
        Err(e) => Err(kube_err(
            "create",
            <Secret as k8s_openapi::Resource>::KIND,
            &name,
        )(e)),
    }
}

/// The job's PodGroup. PodGroups are not cached (their CRDs are optional):
/// read on every reconcile, so an unchanged one is not rewritten.
async fn apply_pod_group(
    ctx: &Context,
    job: &DGLJob,
    ns: &str,
    gang: GangScheduler,
) -> Result<(), Error> {
    let group = builders::pod_group(job, gang);
    let resource = gang.pod_group_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &resource);
    let name = group.name_any();
    let current =
        api.get_opt(&name)
            .await
            .map_err(kube_err("get", resource.kind.clone(), &name))?;
    let want = group.annotations().get(HASH_ANNOTATION);
    if current
        .as_ref()
        .and_then(|c| c.annotations().get(HASH_ANNOTATION))
        == want
    {
        return Ok(());
    }
    ctx.metrics.api_writes.inc();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&group),
    )
    .await
    .map_err(kube_err("apply", resource.kind.clone(), &name))?;
    Ok(())
}

/// 32 random bytes, hex-encoded, from the kernel's CSPRNG.
fn random_token() -> String {
    let mut buf = [0u8; 32];
    getrandom::fill(&mut buf).expect("the kernel's random source is readable");
    hex::encode(buf)
}
