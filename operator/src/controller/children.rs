//! Pipeline step "apply": the job's supporting objects (ConfigMap, Secret,
//! RBAC, NetworkPolicy, PodGroup), each written only when it changed.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dgl_api::names::{
    CONFIG_RUN, FIELD_MANAGER, HOSTFILE, IP_CONFIG, LABEL_RUN, LEADFILE, PARTFILE,
};
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
use crate::cache::SeenChild;
use crate::pure::builders::HASH_ANNOTATION;
pub(super) use crate::pure::desired::ApplyWhen;
use crate::pure::desired::Desired;
use crate::pure::settings::GangScheduler;

/// Proof that the job's children were applied (or that its plan keeps
/// them as they are): the pod steps ask for it (`act`), so no pod is
/// created before the objects it mounts and the status that counts it.
/// Zero-size; the private field means only this module makes one.
#[must_use]
pub(super) struct ChildrenApplied(());

/// Who controls an object of a child's name, as far as the operator knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// No such object (or none the label-selected watches show).
    Absent,
    /// Controlled by this job; its applied hash.
    Ours(Option<String>),
    /// Controlled by an earlier DGLJob of the same name (deleted, its
    /// children not yet garbage-collected): wait for the collector.
    Earlier(String),
    /// Anything else: a user's object, or another controller's. Left alone.
    Foreign(String),
}

/// Who controls `seen`, from the point of view of `job` (pure).
pub(crate) fn ownership(seen: Option<&SeenChild>, job: &DGLJob) -> Ownership {
    let Some(seen) = seen else {
        return Ownership::Absent;
    };
    match &seen.controller {
        Some(c) if job.metadata.uid.as_deref() == Some(c.uid.as_str()) => {
            Ownership::Ours(seen.hash.clone())
        }
        Some(c) if c.kind == DGLJob::kind(&()) && c.name == job.name_any() => {
            Ownership::Earlier(c.uid.clone())
        }
        Some(c) => Ownership::Foreign(format!("it is controlled by {} {}", c.kind, c.name)),
        None => Ownership::Foreign("it has no controller".into()),
    }
}

/// The child as this job's: its hash if it is, else the error that says why not.
pub(super) fn owned(
    kind: &str,
    name: &str,
    seen: Option<&SeenChild>,
    job: &DGLJob,
) -> Result<Option<String>, Error> {
    let kind = Cow::Owned(kind.to_string());
    match ownership(seen, job) {
        Ownership::Ours(hash) => Ok(hash),
        Ownership::Absent => Ok(None),
        Ownership::Earlier(uid) => Err(Error::Earlier {
            kind,
            name: name.into(),
            uid,
        }),
        Ownership::Foreign(why) => Err(Error::NotOwned {
            kind,
            name: name.into(),
            why,
        }),
    }
}

/// A namespaced child object the operator creates and applies.
trait Child:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + k8s_openapi::Resource
    + Serialize
    + DeserializeOwned
    + Clone
    + std::fmt::Debug
{
}

impl<K> Child for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug
{
}

/// What [`ensure_exists`] found or did.
enum Existing {
    /// It did not exist: created now, as built.
    Created,
    /// It exists and is this job's, with this applied hash.
    Ours(Option<String>),
}

/// Creates `obj` (POST) unless it exists; an object of that name that this
/// job does not control is left alone (an error). Never adopts.
async fn ensure_exists<K>(ctx: &Context, job: &DGLJob, ns: &str, obj: &K) -> Result<Existing, Error>
where
    K: Child,
{
    let kind = <K as k8s_openapi::Resource>::KIND;
    let name = obj.name_any();
    let seen = match ctx.children.get(kind, ns, &name) {
        Some(seen) => seen,
        None => match create(ctx, ns, obj).await? {
            None => {
                ctx.children
                    .record(kind, ns, &name, SeenChild::of(obj.meta()));
                return Ok(Existing::Created);
            }
            Some(existing) => existing,
        },
    };
    owned(kind, &name, Some(&seen), job).map(Existing::Ours)
}

/// POSTs `obj`; Some(what exists) when an object of its name already does.
async fn create<K>(ctx: &Context, ns: &str, obj: &K) -> Result<Option<SeenChild>, Error>
where
    K: Child,
{
    let kind = <K as k8s_openapi::Resource>::KIND;
    let name = obj.name_any();
    let api = Api::<K>::namespaced(ctx.client.clone(), ns);
    ctx.metrics.api_writes.inc();
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&pp, obj).await {
        Ok(_) => Ok(None),
        Err(e) if is_status(&e, 409) => {
            let meta = api
                .get_metadata(&name)
                .await
                .map_err(kube_err("read", kind, &name))?;
            Ok(Some(SeenChild::of(&meta.metadata)))
        }
        Err(e) => Err(kube_err("create", kind, &name)(e)),
    }
}

/// Creates `obj` if absent, else server-side applies it (this job's only)
/// unless the cache (or this operator's own last write) shows it as `when`
/// says it need not be.
async fn apply<K>(
    ctx: &Context,
    job: &DGLJob,
    ns: &str,
    obj: &K,
    when: ApplyWhen,
) -> Result<(), Error>
where
    K: Child,
{
    let kind = <K as k8s_openapi::Resource>::KIND;
    let name = obj.name_any();
    if !needs_write(ensure_exists(ctx, job, ns, obj).await?, obj, when) {
        return Ok(());
    }
    ctx.metrics.api_writes.inc();
    // Force: the fields are this job's (it is the controller); another
    // manager's edits to them are overwritten, as a controller does.
    Api::<K>::namespaced(ctx.client.clone(), ns)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await
        .map_err(kube_err("apply", kind, &name))?;
    ctx.children
        .record(kind, ns, &name, SeenChild::of(obj.meta()));
    Ok(())
}

/// Whether an object [`ensure_exists`] found must be written again.
fn needs_write<K: Child>(existing: Existing, obj: &K, when: ApplyWhen) -> bool {
    let want = obj.annotations().get(HASH_ANNOTATION);
    match existing {
        Existing::Created => false,
        Existing::Ours(have) if want.is_some() && have.as_ref() == want => false,
        Existing::Ours(_) => when == ApplyWhen::Changed,
    }
}

/// The job's ConfigMap: created (POST) when absent, else rewritten when
/// `when` says so by a JSON merge patch that also deletes the keys and the
/// run label the new content lacks (a suspended launch taken back). Not
/// server-side apply: the launch creates the ConfigMap by POST (which never
/// adopts an object of its name), so its fields belong to the operator's
/// Update entry, and an apply could not remove them.
async fn write_config_map(
    ctx: &Context,
    job: &DGLJob,
    ns: &str,
    cm: &ConfigMap,
    when: ApplyWhen,
) -> Result<(), Error> {
    let kind = <ConfigMap as k8s_openapi::Resource>::KIND;
    let name = cm.name_any();
    if !needs_write(ensure_exists(ctx, job, ns, cm).await?, cm, when) {
        return Ok(());
    }
    ctx.metrics.api_writes.inc();
    let mut patch = serde_json::to_value(cm).expect("a ConfigMap serializes");
    let has = |key: &str| cm.data.as_ref().is_some_and(|d| d.contains_key(key));
    for key in [CONFIG_RUN, IP_CONFIG, HOSTFILE, PARTFILE, LEADFILE] {
        if !has(key) {
            patch["data"][key] = serde_json::Value::Null;
        }
    }
    if !cm.labels().contains_key(LABEL_RUN) {
        patch["metadata"]["labels"][LABEL_RUN] = serde_json::Value::Null;
    }
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(ctx.client.clone(), ns)
        .patch(&name, &pp, &Patch::Merge(&patch))
        .await
        .map_err(kube_err("apply", kind, &name))?;
    ctx.children
        .record(kind, ns, &name, SeenChild::of(cm.meta()));
    Ok(())
}

/// Applies what the plan wants of the job's children ([`Desired`]):
/// ConfigMap, Secret, RBAC, NetworkPolicy and PodGroup, written
/// concurrently (each only when it changed). None: the plan keeps them as
/// they are (a finished or refused job), nothing is written.
pub(super) async fn apply_desired(
    ctx: &Context,
    job: &DGLJob,
    ns: &str,
    desired: Option<&Desired<'_>>,
) -> Result<ChildrenApplied, Error> {
    if let Some(desired) = desired {
        apply_children(ctx, job, ns, desired).await?;
    }
    Ok(ChildrenApplied(()))
}

/// The writes of [`apply_desired`].
///
/// The ConfigMap's files (hostfile, partfile, ip_config, leadfile) are read
/// only by the launcher pod (its watcher-loop, through the API, and
/// dglrun), which trains once the ConfigMap launches its run: the desired
/// ConfigMap is the write the plan needs (see `pure::desired`), None while
/// there is nothing to launch. Then an object of its name that is not this
/// job's is still an error now, not only at the launch.
async fn apply_children(
    ctx: &Context,
    job: &DGLJob,
    ns: &str,
    desired: &Desired<'_>,
) -> Result<(), Error> {
    let mut writes: Vec<BoxFuture<'_, Result<(), Error>>> = Vec::new();

    // The Secret is created (its token derived from the key and the job's
    // UID) and never rewritten; a missing one (deleted, or a create that
    // failed) is created again within SECRET_RECHECK.
    writes.push(ensure_secret(ctx, job, ns, desired).boxed());
    match &desired.config_map {
        Some((cm, when)) => writes.push(write_config_map(ctx, job, ns, cm, *when).boxed()),
        None => {
            let kind = <ConfigMap as k8s_openapi::Resource>::KIND;
            let name = dgl_api::names::config_name(&job.name_any());
            owned(kind, &name, ctx.children.get(kind, ns, &name).as_ref(), job)?;
        }
    }
    let (sa, role, binding) = (
        &desired.service_account,
        &desired.role,
        &desired.role_binding,
    );
    writes.push(apply(ctx, job, ns, sa, ApplyWhen::Changed).boxed());
    // The Role before its RoleBinding: unless the operator may `bind` roles
    // (it may not: least privilege), the API server checks a new binding
    // against the rules of the Role it names, and answers 404 while that
    // Role does not exist yet.
    writes.push(
        async {
            apply(ctx, job, ns, role, ApplyWhen::Changed).await?;
            apply(ctx, job, ns, binding, ApplyWhen::Changed).await
        }
        .boxed(),
    );
    if let Some(np) = &desired.network_policy {
        writes.push(apply(ctx, job, ns, np, ApplyWhen::Changed).boxed());
    }
    if let Some((group, gang)) = &desired.pod_group {
        writes.push(apply_pod_group(ctx, job, ns, group, *gang).boxed());
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

/// How long a job's token Secret, once created or found, is taken to
/// exist without asking again; also the longest an active job waits
/// between reconciles (Secrets are not watched).
pub(super) const SECRET_RECHECK: Duration = Duration::from_secs(15);

/// When each job's token Secret (by namespace, name and job UID) was last
/// created or found present.
#[derive(Default)]
pub struct SecretsSeen(Mutex<HashMap<(String, String, String), Instant>>);

impl SecretsSeen {
    fn fresh(&self, key: &(String, String, String)) -> bool {
        let seen = self.0.lock().expect("not poisoned");
        seen.get(key).is_some_and(|t| t.elapsed() < SECRET_RECHECK)
    }

    fn record(&self, key: (String, String, String)) {
        let mut seen = self.0.lock().expect("not poisoned");
        // Bounded: entries past the recheck are worthless.
        seen.retain(|_, t| t.elapsed() < SECRET_RECHECK);
        seen.insert(key, Instant::now());
    }
}

/// The job's Secret exists: created (POST) now, with the token derived
/// from the operator's key and the job's UID (deleted mid-run, it comes
/// back with the token the running pods hold), unless it was created or
/// found within [`SECRET_RECHECK`]. Never rewritten, never read: the
/// operator may create Secrets but not get, list or watch them, so an
/// AlreadyExists answer is taken as the job's own Secret (a Secret of that
/// name made by someone else before the job is mounted as it is, and left
/// alone: docs/reliability.md).
async fn ensure_secret(
    ctx: &Context,
    job: &DGLJob,
    ns: &str,
    desired: &Desired<'_>,
) -> Result<(), Error> {
    let name = dgl_api::names::secret_name(&job.name_any());
    let key = (ns.to_string(), name.clone(), job.uid().unwrap_or_default());
    if ctx.secrets.fresh(&key) {
        return Ok(());
    }
    let secret = desired.secret(random_token);
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    ctx.metrics.api_writes.inc();
    match Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .create(&pp, &secret)
        .await
    {
        Ok(_) => {}
        Err(e) if is_status(&e, 409) => {}
        Err(e) => return Err(kube_err("create", "Secret", &name)(e)),
    }
    ctx.secrets.record(key);
    Ok(())
}

/// The job's PodGroup. PodGroups are not cached (their CRDs are optional):
/// read on every reconcile, so an unchanged one is not rewritten.
async fn apply_pod_group(
    ctx: &Context,
    job: &DGLJob,
    ns: &str,
    group: &DynamicObject,
    gang: GangScheduler,
) -> Result<(), Error> {
    let resource = gang.pod_group_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &resource);
    let name = group.name_any();
    let current =
        api.get_opt(&name)
            .await
            .map_err(kube_err("get", resource.kind.clone(), &name))?;
    let want = group.annotations().get(HASH_ANNOTATION);
    let Some(current) = current else {
        ctx.metrics.api_writes.inc();
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        api.create(&pp, group)
            .await
            .map_err(kube_err("create", resource.kind.clone(), &name))?;
        return Ok(());
    };
    let have = owned(
        &resource.kind,
        &name,
        Some(&SeenChild::of(&current.metadata)),
        job,
    )?;
    if have.as_ref() == want {
        return Ok(());
    }
    ctx.metrics.api_writes.inc();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(group),
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
