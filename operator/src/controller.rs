//! The controller: watches DGLJobs and their children, and reconciles each
//! job as a pipeline: read what exists (from watch caches) → plan (pure:
//! validate, build, derive status) → apply (server-side apply, one field
//! manager) → write status → emit Events.
//!
//! Built to stay cheap with thousands of pods (see docs/benchmarks.md):
//! - caches hold only what plans read, indexed by job ([`crate::cache`]);
//! - a reconcile is triggered by a change the state machine can see: a new
//!   generation of the job (not its status, which only this operator writes),
//!   a pod whose observed state changed, a deleted child, a ConfigMap
//!   written (the launcher waits for it);
//! - what this operator just wrote counts as known before its watch event
//!   arrives: the status it wrote, the children it applied, the pods it
//!   created or deleted (expectations, as in Kubernetes' own controllers), so
//!   a reconcile does not repeat a write because a cache lags;
//! - a reconcile's independent requests run concurrently.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dgl_api::names::{
    config_name, launcher_name, secret_name, FIELD_MANAGER, IP_CONFIG, LABEL_MANAGED_BY, MANAGED_BY,
};
use dgl_api::{DGLJob, DGLJobStatus, JobPhase};
use futures::future::{self, BoxFuture};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams,
    PropagationPolicy,
};
use kube::core::{DeserializeGuard, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{predicates, watcher, PredicateConfig, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::builders::{self, BuildConfig, GangScheduler, HASH_ANNOTATION};
use crate::cache::{self, ChildCache, JobKey, PodCache, Readiness, SlimPod, EXPECTATION_TTL};
use crate::metrics::Metrics;
use crate::observe::{ObservedPod, PodState};
use crate::plan::{self, Step};

/// Errors of one reconcile; the controller retries with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {kind} {name}: {source}")]
    Kube {
        action: &'static str,
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("DGLJob has no namespace")]
    NoNamespace,
}

/// Settings of the controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Reconciles running at once.
    pub concurrency: u16,
    /// Only watch this namespace (single-namespace install); None: all.
    pub namespace: Option<String>,
    pub build: BuildConfig,
    /// Name of this replica, for Events.
    pub instance: String,
}

/// Job uid → when and what status this operator last wrote, until the job
/// watch shows it.
type WrittenStatus = Arc<Mutex<HashMap<String, (Instant, DGLJobStatus)>>>;

/// Shared state of reconciles. Holds nothing the cluster does not: caches
/// of watched objects, what this process wrote but has not seen back yet
/// (expiring), and per-object retry counters.
pub struct Context {
    pub client: Client,
    pods: Arc<PodCache>,
    children: Arc<ChildCache>,
    ready: Arc<Readiness>,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    failures: Mutex<HashMap<ObjectRef<DGLJob>, u32>>,
    written: WrittenStatus,
}

/// Label selector of everything the operator owns.
pub fn managed_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY}")
}

fn api<K>(client: &Client, ns: &Option<String>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Drops what no reconcile reads from a cached job (managed fields).
fn slim_job(job: &mut DeserializeGuard<DGLJob>) {
    match &mut job.0 {
        Ok(j) => j.metadata.managed_fields = None,
        Err(invalid) => invalid.metadata.managed_fields = None,
    }
}

/// Forgets a written status once the job watch shows it (or the job is gone).
fn prune_written(written: &WrittenStatus, ev: &watcher::Event<DeserializeGuard<DGLJob>>) {
    let job = match ev {
        watcher::Event::Apply(j) | watcher::Event::InitApply(j) | watcher::Event::Delete(j) => j,
        _ => return,
    };
    let Ok(job) = &job.0 else { return };
    let Some(uid) = job.metadata.uid.as_ref() else {
        return;
    };
    let mut w = written.lock().expect("written lock");
    let seen = match w.get(uid) {
        Some((at, status)) => {
            matches!(ev, watcher::Event::Delete(_))
                || job.status.as_ref() == Some(status)
                || at.elapsed() > EXPECTATION_TTL
        }
        None => false,
    };
    if seen {
        w.remove(uid);
    }
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.clone();
    let owned = watcher::Config::default().labels(&managed_selector());
    let ready = Readiness::new(6);
    let pods = Arc::new(PodCache::default());
    let children = Arc::new(ChildCache::default());
    let triggers = futures::stream::select_all([
        cache::pod_triggers(
            api::<SlimPod>(&client, &ns),
            owned.clone(),
            pods.clone(),
            ready.clone(),
        )
        .boxed(),
        cache::child_triggers::<ConfigMap>("ConfigMap", &client, &ns, &owned, &children, &ready),
        cache::child_triggers::<Service>("Service", &client, &ns, &owned, &children, &ready),
        cache::child_triggers::<ServiceAccount>(
            "ServiceAccount",
            &client,
            &ns,
            &owned,
            &children,
            &ready,
        ),
        cache::child_triggers::<Role>("Role", &client, &ns, &owned, &children, &ready),
        cache::child_triggers::<RoleBinding>(
            "RoleBinding",
            &client,
            &ns,
            &owned,
            &children,
            &ready,
        ),
    ]);

    // Jobs: a reconcile per new generation (or first sight), not per status
    // write; the cache still takes every version.
    let written: WrittenStatus = Arc::default();
    let (reader, writer) = reflector::store();
    let w = written.clone();
    let jobs = watcher(
        api::<DeserializeGuard<DGLJob>>(&client, &ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(slim_job)
    .reflect(writer)
    .inspect(move |ev| {
        if let Ok(ev) = ev {
            prune_written(&w, ev);
        }
    })
    .applied_objects()
    .predicate_filter(predicates::generation, PredicateConfig::default());

    let concurrency = settings.concurrency;
    let ctx = Arc::new(Context {
        client: client.clone(),
        pods,
        children,
        ready,
        settings,
        metrics,
        failures: Mutex::default(),
        written,
    });

    Controller::for_stream(jobs, reader)
        .reconcile_on(triggers)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => debug!(job = %obj, "reconciled"),
                Err(e) => debug!(error = %e, "reconcile failed"),
            }
        })
        .await;
    info!("controller stopped");
}

fn kube_err<'a>(
    action: &'static str,
    kind: &'static str,
    name: &'a str,
) -> impl FnOnce(kube::Error) -> Error + 'a {
    move |source| Error::Kube {
        action,
        kind,
        name: name.to_string(),
        source,
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Server-side applies `obj` unless the cache (or this operator's own last
/// write) carries the same hash; with `create_only`, only when it is missing.
async fn apply_if_changed<K>(
    ctx: &Context,
    ns: &str,
    obj: &K,
    kind: &'static str,
    create_only: bool,
) -> Result<(), Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let name = obj.name_any();
    let want = obj.annotations().get(HASH_ANNOTATION);
    match ctx.children.hash(kind, ns, &name) {
        Some(have) if want.is_some() && have.as_ref() == want => return Ok(()),
        Some(_) if create_only => return Ok(()),
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
/// rewritten only once it is complete (`fill_config`), not once per pod IP.
async fn ensure_children(
    ctx: &Context,
    job: &DGLJob,
    ns: &str,
    cm: &ConfigMap,
    fill_config: bool,
) -> Result<(), Error> {
    let name = job.name_any();
    let (sa, role, binding) = builders::launcher_rbac(job);
    let svc = builders::worker_service(job);
    let mut writes: Vec<BoxFuture<'_, Result<(), Error>>> = Vec::new();

    // The secret is created once (random token) and never rewritten. The
    // operator may create Secrets but not read them (least privilege), so it
    // creates the token together with the job's first ConfigMap; a repeat
    // answered "already exists" is fine.
    if ctx.children.hash("ConfigMap", ns, &cm.name_any()).is_none() {
        writes.push(
            async move {
                let sname = secret_name(&name);
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
                    Err(e) => Err(kube_err("create", "Secret", &sname)(e)),
                }
            }
            .boxed(),
        );
    }
    writes.push(apply_if_changed(ctx, ns, cm, "ConfigMap", !fill_config).boxed());
    writes.push(apply_if_changed(ctx, ns, &sa, "ServiceAccount", false).boxed());
    // The Role before its RoleBinding: unless the operator may `bind` roles
    // (it may not: least privilege), the API server checks a new binding
    // against the rules of the Role it names, and answers 404 while that
    // Role does not exist yet.
    writes.push(
        async {
            apply_if_changed(ctx, ns, &role, "Role", false).await?;
            apply_if_changed(ctx, ns, &binding, "RoleBinding", false).await
        }
        .boxed(),
    );
    writes.push(apply_if_changed(ctx, ns, &svc, "Service", false).boxed());
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

async fn apply_pod_group(
    ctx: &Context,
    job: &DGLJob,
    ns: &str,
    gang: GangScheduler,
) -> Result<(), Error> {
    let group = builders::pod_group(job, gang);
    let gvk = match gang {
        GangScheduler::Volcano => {
            GroupVersionKind::gvk("scheduling.volcano.sh", "v1beta1", "PodGroup")
        }
        GangScheduler::SchedulerPlugins => {
            GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup")
        }
    };
    let ar = ApiResource::from_gvk_with_plural(&gvk, "podgroups");
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
    let name = group.name_any();
    // PodGroups are not cached; read first so an unchanged one is not rewritten.
    let current = api
        .get_opt(&name)
        .await
        .map_err(kube_err("get", "PodGroup", &name))?;
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
    .map_err(kube_err("apply", "PodGroup", &name))?;
    Ok(())
}

/// 32 random bytes, hex-encoded, from the kernel's CSPRNG.
fn random_token() -> String {
    use std::io::Read;
    let mut buf = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("/dev/urandom is readable");
    builders::hex(&buf)
}

/// The job with the status this operator last wrote, if the job cache has
/// not caught up with that write yet (only this operator writes the status).
fn with_written_status<'a>(ctx: &Context, job: &'a DGLJob) -> Cow<'a, DGLJob> {
    let Some(uid) = job.uid() else {
        return Cow::Borrowed(job);
    };
    let written = ctx.written.lock().expect("written lock");
    match written.get(&uid) {
        Some((at, status))
            if at.elapsed() <= EXPECTATION_TTL && job.status.as_ref() != Some(status) =>
        {
            let mut j = job.clone();
            j.status = Some(status.clone());
            Cow::Owned(j)
        }
        _ => Cow::Borrowed(job),
    }
}

fn now_seconds() -> Timestamp {
    // Whole seconds: the API server stores times at second precision, and a
    // sub-second time would make every status look changed after a round trip.
    Timestamp::from_second(Timestamp::now().as_second()).expect("now is a valid timestamp")
}

async fn reconcile(obj: Arc<DeserializeGuard<DGLJob>>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_job(&obj, &ctx).await;
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    if result.is_ok() {
        if let Ok(job) = &obj.0 {
            ctx.failures
                .lock()
                .expect("lock")
                .remove(&ObjectRef::from_obj(job));
        }
    }
    result
}

async fn reconcile_job(obj: &DeserializeGuard<DGLJob>, ctx: &Context) -> Result<Action, Error> {
    let job = match &obj.0 {
        Ok(job) => job,
        Err(invalid) => {
            // One malformed object must not stop the others: report and wait
            // for the user to fix it.
            warn!(name = %invalid.metadata.name.as_deref().unwrap_or("?"), error = %invalid.error, "DGLJob cannot be read");
            return Ok(Action::await_change());
        }
    };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change()); // children go by garbage collection
    }
    let ns = job.namespace().ok_or(Error::NoNamespace)?;
    let name = job.name_any();
    // Never plan from half-filled caches: right after a (re)start a missing
    // pod would look deleted by hand. Cheap once the first list is in.
    ctx.ready.wait().await;
    let job = with_written_status(ctx, job);
    let job = job.as_ref();
    let pods = ctx.pods.job_pods(&ns, &name, job.uid().as_deref());

    // The ConfigMap as it should be now, and whether the API server already
    // serves it (as the watch shows it): the launcher starts from it.
    let cm = builders::config_map(job, &pods);
    let want = cm.annotations().get(HASH_ANNOTATION).cloned();
    let config_ready = ctx
        .children
        .seen_hash("ConfigMap", &ns, &config_name(&name))
        == Some(want);
    let plan = plan::plan_gated(job, &pods, now_seconds(), &ctx.settings.build, config_ready);

    // Supporting objects and the status (concurrently), both before any pod
    // is created or deleted: decisions (a restart counted, a terminal state)
    // are recorded first, so a crash between the two cannot repeat them.
    let launcher = launcher_name(&name);
    let fill_config = cm.data.as_ref().is_some_and(|d| d.contains_key(IP_CONFIG))
        || pods
            .iter()
            .any(|p| p.name == launcher && p.state != PodState::Terminating);
    let children = async {
        if plan.ensure_children {
            ensure_children(ctx, job, &ns, &cm, fill_config).await
        } else {
            Ok(())
        }
    };
    let (children, status) = futures::join!(children, write_status(ctx, job, &plan.status));
    children?;
    status?;
    let old = job.status.as_ref();

    // Pod steps and Events (after the status write, one per transition) run
    // concurrently; an Event is a courtesy and never fails the reconcile.
    let key: JobKey = (ns.clone(), name.clone());
    let steps = future::join_all(plan.steps.iter().map(|s| run_step(ctx, &key, s)));
    let events = future::join_all(
        plan::transitions(old, &plan.status)
            .into_iter()
            .map(|t| transition_event(ctx, job, t)),
    );
    let (results, _) = futures::join!(steps, events);
    results.into_iter().collect::<Result<Vec<()>, Error>>()?;

    Ok(match plan.requeue_after {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}

/// Writes the job's status (server-side apply) unless it is what the job
/// already has, and remembers the write until the job watch shows it.
async fn write_status(ctx: &Context, job: &DGLJob, status: &DGLJobStatus) -> Result<(), Error> {
    if job.status.as_ref() == Some(status) {
        return Ok(());
    }
    let name = job.name_any();
    let ns = job.namespace().ok_or(Error::NoNamespace)?;
    let patch = serde_json::json!({
        "apiVersion": "dgloperator.io/v1alpha1",
        "kind": "DGLJob",
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
        .map_err(kube_err("write status of", "DGLJob", &name))?;
    if let (Some(uid), Some(status)) = (job.uid(), written.status) {
        ctx.written
            .lock()
            .expect("written lock")
            .insert(uid, (Instant::now(), status));
    }
    Ok(())
}

async fn run_step(ctx: &Context, key: &JobKey, step: &Step) -> Result<(), Error> {
    let (ns, name) = key;
    let pods_api = Api::<Pod>::namespaced(ctx.client.clone(), ns);
    ctx.metrics.api_writes.inc();
    match step {
        Step::CreatePod(pod) => {
            let pname = pod.name_any();
            debug!(job = %name, pod = %pname, "creating pod");
            pods_api
                .patch(
                    &pname,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(pod.as_ref()),
                )
                .await
                .map_err(kube_err("create", "Pod", &pname))?;
            if let Some(o) = ObservedPod::from_pod(pod) {
                ctx.pods.expect_created(key, o);
            }
        }
        Step::DeletePod(pname) => {
            debug!(job = %name, pod = %pname, "deleting pod");
            match pods_api.delete(pname, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(kube_err("delete", "Pod", pname)(e)),
            }
            ctx.pods.expect_deleted(key, pname);
        }
        Step::DeleteJob => {
            info!(job = %name, "ttlSecondsAfterFinished reached: deleting the job");
            let dp = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..Default::default()
            };
            match Api::<DGLJob>::namespaced(ctx.client.clone(), ns)
                .delete(name, &dp)
                .await
            {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(kube_err("delete", "DGLJob", name)(e)),
            }
        }
    }
    Ok(())
}

/// Metrics, a log line and an Event (events.k8s.io/v1) for one transition.
/// Created directly: each transition is new, so kube's Recorder (which keeps
/// every Event it sent for six minutes to count repeats) would only hold memory.
async fn transition_event(ctx: &Context, job: &DGLJob, t: plan::Transition) {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let label = Metrics::ns(&ns);
    let warning = matches!(t.type_, JobPhase::Failed | JobPhase::Restarting);
    match t.type_ {
        JobPhase::Created => drop(ctx.metrics.jobs_created.get_or_create(&label).inc()),
        JobPhase::Succeeded => drop(ctx.metrics.jobs_successful.get_or_create(&label).inc()),
        JobPhase::Failed => drop(ctx.metrics.jobs_failed.get_or_create(&label).inc()),
        JobPhase::Restarting => drop(ctx.metrics.jobs_restarted.get_or_create(&label).inc()),
        _ => {}
    }
    info!(job = %name, namespace = %ns, condition = %t.type_, reason = %t.reason, "{}", t.message);
    let now = Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        reason: Some(t.reason.clone()),
        action: Some(t.type_.as_str().to_string()),
        note: Some(t.message.chars().take(1000).collect()),
        regarding: Some(job.object_ref(&())),
        reporting_controller: Some("dgl-operator".into()),
        reporting_instance: Some(ctx.settings.instance.clone()),
        ..Default::default()
    };
    if let Err(e) = Api::<Event>::namespaced(ctx.client.clone(), &ns)
        .create(&PostParams::default(), &event)
        .await
    {
        warn!(job = %name, error = %e, "could not publish event");
    }
}

/// Per-object exponential backoff: 1 s, 2 s, 4 s … capped at 5 minutes.
fn error_policy(obj: Arc<DeserializeGuard<DGLJob>>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_errors.inc();
    let Ok(job) = &obj.0 else {
        return Action::await_change();
    };
    let mut failures = ctx.failures.lock().expect("lock");
    let n = failures.entry(ObjectRef::from_obj(job)).or_insert(0);
    *n = n.saturating_add(1);
    let delay = Duration::from_secs(1u64 << (*n - 1).min(8)).min(Duration::from_secs(300));
    warn!(job = %job.name_any(), namespace = ?job.namespace(), error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
