//! The controller: watches DGLJobs and their children, and reconciles each
//! job as a pipeline: read what exists (from watch caches) → plan (pure:
//! validate, the pods to create, the status) → the desired children (pure,
//! [`crate::pure::desired`]) → apply children and write the status
//! (concurrently) → pod steps (concurrently) and Events (in the background).
//! The order is held by types: the pod steps (`act`) take the tokens the
//! children apply and the status write return.
//! This file holds the wiring; each step has its own file:
//! - [`children`]: applies the desired set: ConfigMap (at a run's launch), Secret (created, never
//!   applied), RBAC, NetworkPolicy, PodGroup: created when absent, never
//!   adopted;
//! - [`status`]: the status write and its expectation;
//! - [`steps`]: pod creations and deletions, the TTL's job deletion;
//! - [`events`]: metrics and an Event per transition (sent in the background).
//!
//! Built to stay cheap with thousands of pods (see docs/benchmarks.md):
//! - caches hold only what plans read, indexed by job ([`crate::cache`]);
//! - a reconcile is triggered by a change the state machine can see: a new
//!   generation of the job (not its status, which only this operator writes),
//!   a pod whose observed state changed, a deleted child, a ConfigMap
//!   written (a run launched);
//! - what this operator just wrote counts as known before its watch event
//!   arrives: the status it wrote, the children it applied, the pods it
//!   created or deleted (expectations, as in Kubernetes' own controllers), so
//!   a reconcile does not repeat a write because a cache lags;
//! - a reconcile's independent requests run concurrently.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dgl_api::names::{config_name, LABEL_MANAGED_BY, MANAGED_BY};
use dgl_api::DGLJob;
use futures::future;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{predicates, watcher, PredicateConfig, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, info, warn};

use crate::cache::nodes::{self, NodeCache};
use crate::cache::{self, ChildCache, JobKey, PodCache, Readiness, SlimPod};
use crate::metrics::Metrics;
use crate::pure::desired;
use crate::pure::plan;
use crate::pure::settings::BuildConfig;

mod children;
mod events;
pub mod failing;
mod kueue;
mod status;
mod steps;
#[cfg(test)]
mod tests;

use children::ChildrenApplied;
use status::{StatusWritten, WrittenStatus};

/// Errors of one reconcile; the controller retries with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {kind} {name}: {source}")]
    Kube {
        action: &'static str,
        kind: Cow<'static, str>,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("DGLJob has no namespace")]
    NoNamespace,
    /// An object of a child's name exists that this job does not control:
    /// it is left alone (never adopted) and the job fails.
    #[error("{kind} {name} already exists and {why}; it is left alone (delete or rename it, or give the DGLJob another name)")]
    NotOwned {
        kind: Cow<'static, str>,
        name: String,
        why: String,
    },
    /// An object of a child's name still belongs to an earlier DGLJob of the
    /// same name: retried until the garbage collector has removed it.
    #[error("{kind} {name} still belongs to an earlier DGLJob of this name (uid {uid}); waiting for the garbage collector")]
    Earlier {
        kind: Cow<'static, str>,
        name: String,
        uid: String,
    },
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

/// Shared state of reconciles. Holds nothing the cluster does not: caches
/// of watched objects, what this process wrote but has not seen back yet
/// (expiring), and per-object retry counters.
pub struct Context {
    pub client: Client,
    pods: Arc<PodCache>,
    children: Arc<ChildCache>,
    ready: Arc<Readiness>,
    /// The nodes that are down; `None` when the install may not read Nodes.
    nodes: Option<Arc<NodeCache>>,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    failures: Mutex<HashMap<ObjectRef<DGLJob>, u32>>,
    written: Arc<WrittenStatus>,
    /// The Workloads' watch, with `--kueue` (pure::kueue).
    kueue: Option<kueue::Workloads>,
    /// When each job's token Secret was last known to exist (no watch).
    secrets: children::SecretsSeen,
    /// When each job last had a progress change written (rate limit).
    progress_writes: status::ProgressWrites,
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

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    run_reporting(client, settings, metrics, Arc::default(), shutdown).await
}

/// [`run`], setting `synced` once every watch cache has listed once (what
/// /readyz reports).
pub async fn run_reporting(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    synced: Arc<std::sync::atomic::AtomicBool>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.clone();
    let owned = watcher::Config::default().labels(&managed_selector());
    let network_policy = settings.build.network_policy;
    let ready = Readiness::new(if network_policy { 6 } else { 5 });
    let r = ready.clone();
    let waiter = tokio::spawn(async move {
        r.wait().await;
        synced.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let pods = Arc::new(PodCache::default());
    let children = Arc::new(ChildCache::default());
    let (triggers, node_cache, kueue) =
        watches(&client, &ns, &settings, &owned, &pods, &children, &ready).await;
    let triggers = futures::stream::select_all(triggers);

    // Jobs: a reconcile per new generation (or first sight), not per status
    // write; the cache still takes every version.
    let written: Arc<WrittenStatus> = Arc::default();
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
            status::prune_written(&w, ev);
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
        nodes: node_cache,
        settings,
        metrics,
        failures: Mutex::default(),
        written,
        kueue,
        secrets: Default::default(),
        progress_writes: Default::default(),
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
    waiter.abort();
    info!("controller stopped");
}

/// The watches besides the jobs' own, as reconcile triggers: pods, the
/// children the operator applies, nodes when readable, Kueue's Workloads
/// with `--kueue`; with the caches they fill.
async fn watches(
    client: &Client,
    ns: &Option<String>,
    settings: &Settings,
    owned: &watcher::Config,
    pods: &Arc<PodCache>,
    children: &Arc<ChildCache>,
    ready: &Arc<Readiness>,
) -> (
    Vec<futures::stream::BoxStream<'static, crate::cache::JobToReconcile>>,
    Option<Arc<NodeCache>>,
    Option<kueue::Workloads>,
) {
    let mut triggers = vec![
        cache::pod_triggers(
            api::<SlimPod>(client, ns),
            owned.clone(),
            pods.clone(),
            ready.clone(),
        )
        .boxed(),
        cache::child_triggers::<ConfigMap>(client, ns, owned, children, ready),
        cache::child_triggers::<ServiceAccount>(client, ns, owned, children, ready),
        cache::child_triggers::<Role>(client, ns, owned, children, ready),
        cache::child_triggers::<RoleBinding>(client, ns, owned, children, ready),
        // No Secret watch: the operator may not read Secrets (least
        // privilege); a running job's token Secret is created again on
        // reconcile (children::ensure_secret, SECRET_RECHECK).
    ];
    if settings.build.network_policy {
        triggers.push(cache::child_triggers::<NetworkPolicy>(
            client, ns, owned, children, ready,
        ));
    }
    // Nodes: optional (the namespaced install may not read them); not
    // awaited before planning: a node not yet listed is taken as up, and
    // the first list triggers the jobs on the nodes down then.
    let node_cache = if nodes::readable(client).await {
        let cache = Arc::new(NodeCache::default());
        triggers.push(nodes::node_triggers(client, cache.clone(), pods.clone()).boxed());
        Some(cache)
    } else {
        None
    };
    let kueue = settings.build.kueue.then(|| {
        let (workloads, t) = kueue::watch(client, ns, owned);
        triggers.push(t);
        workloads
    });
    (triggers, node_cache, kueue)
}

fn kube_err<'a>(
    action: &'static str,
    kind: impl Into<Cow<'static, str>>,
    name: &'a str,
) -> impl FnOnce(kube::Error) -> Error + 'a {
    let kind = kind.into();
    move |source| Error::Kube {
        action,
        kind,
        name: name.to_string(),
        source: Box::new(source),
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn now_seconds() -> Timestamp {
    // Whole seconds: the API server stores times at second precision, and a
    // sub-second time would make every status look changed after a round trip.
    Timestamp::from_second(Timestamp::now().as_second()).expect("now is a valid timestamp")
}

async fn reconcile(obj: Arc<DeserializeGuard<DGLJob>>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let now = now_seconds();
    let mut result = reconcile_job(&obj, &ctx, now).await;
    if let Ok(job) = &obj.0 {
        // Errors that persist are shown on the job; the first success clears them.
        match &result {
            Err(e) => failing::show(&ctx, job, e, now).await,
            Ok(_) => {
                if let Err(e) = failing::clear(&ctx, job, now).await {
                    result = Err(e);
                }
            }
        }
    }
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

/// One reconcile of one job, at `now`.
async fn reconcile_job(
    obj: &DeserializeGuard<DGLJob>,
    ctx: &Context,
    now: Timestamp,
) -> Result<Action, Error> {
    let Some(job) = to_reconcile(obj) else {
        return Ok(Action::await_change());
    };
    let key = JobKey::new(&job.namespace().ok_or(Error::NoNamespace)?, &job.name_any());
    // Never plan from half-filled caches: right after a (re)start a missing
    // pod would look deleted by hand. Cheap once the first list is in.
    ctx.ready.wait().await;
    let job = status::with_written_status(ctx, job);
    let job = job.as_ref();
    let pods = ctx
        .pods
        .job_pods(&key.namespace, &key.name, job.uid().as_deref());
    // The run the ConfigMap launched, as this operator last wrote it or the
    // watch shows it.
    let cm_kind = <ConfigMap as k8s_openapi::Resource>::KIND;
    let launched = ctx
        .children
        .get(cm_kind, &key.namespace, &config_name(&key.name))
        .and_then(|c| c.run);
    let gate = kueue::gate(ctx, job, &key.namespace).await?;
    let job = gate.as_ref().map_or(job, |g| &g.job);
    let gone = ctx
        .pods
        .job_gone(&key.namespace, &key.name, job.uid().as_deref());
    let down = match &ctx.nodes {
        Some(nodes) => ctx
            .pods
            .job_pods_on(&key.namespace, &key.name, &nodes.down()),
        None => Default::default(),
    };
    let build = &ctx.settings.build;
    let seen = plan::Seen::pods(&pods).gone(&gone).down(&down);
    let mut planned = plan::plan_job(job, seen, now, build, launched);
    if let Some(g) = &gate {
        g.annotate(&mut planned.plan.status, now);
    }
    let desired = desired::wanted(&planned, &pods, build);
    let plan = &planned.plan;
    let progress_wait = match apply_then_act(ctx, job, &key, plan, desired, &pods, now).await? {
        Applied::Done(wait) => wait,
        Applied::Failed(action) => return Ok(action),
    };
    if let Some(g) = &gate {
        g.report(ctx, &key.namespace, &plan.status, &pods, now)
            .await?;
    }
    Ok(next_wake(plan, progress_wait))
}

/// The job in `obj` when it is one to reconcile: not one that cannot be
/// read, is being deleted, or is another controller's.
fn to_reconcile(obj: &DeserializeGuard<DGLJob>) -> Option<&DGLJob> {
    let job = match &obj.0 {
        Ok(job) => job,
        Err(invalid) => {
            // One malformed object must not stop the others: report and wait
            // for the user to fix it.
            warn!(name = %invalid.metadata.name.as_deref().unwrap_or("?"), error = %invalid.error, "DGLJob cannot be read");
            return None;
        }
    };
    if job.metadata.deletion_timestamp.is_some() {
        return None; // children go by garbage collection
    }
    if job.spec.managed_by_other() {
        return None; // spec.managedBy: another controller's job
    }
    Some(job)
}

/// How [`apply_then_act`] ended.
enum Applied {
    /// The plan is carried out; a progress report held back is due after
    /// this long.
    Done(Option<Duration>),
    /// A final error failed the job instead (see [`fail_if_final`]).
    Failed(Action),
}

/// Carries out `plan`: the desired children and the status
/// (concurrently), both before any pod is created or deleted, because
/// `act` takes the proof of both (the tokens).
async fn apply_then_act(
    ctx: &Context,
    job: &DGLJob,
    key: &JobKey,
    plan: &plan::Plan,
    desired: Option<desired::Desired<'_>>,
    pods: &[crate::pure::observe::ObservedPod],
    now: Timestamp,
) -> Result<Applied, Error> {
    let children = children::apply_desired(ctx, job, &key.namespace, desired.as_ref());
    let (status_now, progress_wait) = status::limit_progress(ctx, job, &plan.status);
    let (children, status) = futures::join!(children, status::write_status(ctx, job, &status_now));
    let applied = match children {
        Ok(applied) => applied,
        Err(e) => {
            return fail_if_final(ctx, job, key, pods, now, e)
                .await
                .map(Applied::Failed)
        }
    };
    let written = status?;
    if let Err(e) = act(ctx, job, key, plan, applied, written).await {
        return fail_if_final(ctx, job, key, pods, now, e)
            .await
            .map(Applied::Failed);
    }
    Ok(Applied::Done(progress_wait))
}

/// When the job is reconciled again without news: the plan's wake-up,
/// [`children::SECRET_RECHECK`] while its children are kept (Secrets are
/// not watched: a deleted token Secret is created again), and a progress
/// report the rate limit held back (written when due), whichever is first.
fn next_wake(plan: &plan::Plan, progress_wait: Option<Duration>) -> Action {
    let requeue = match (plan.requeue_after, plan.ensure_children) {
        (Some(d), true) => Some(d.min(children::SECRET_RECHECK)),
        (None, true) => Some(children::SECRET_RECHECK),
        (d, false) => d,
    };
    let requeue = match (requeue, progress_wait) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match requeue {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    }
}

/// Pod steps (concurrently) and Events (after the status write, one per
/// transition since the job's last status; sent in the background: an Event
/// is a courtesy, never waited for and never failing the reconcile). The
/// tokens prove the children were applied and the status written first.
async fn act(
    ctx: &Context,
    job: &DGLJob,
    key: &JobKey,
    plan: &plan::Plan,
    _applied: ChildrenApplied,
    _written: StatusWritten,
) -> Result<(), Error> {
    for t in plan::transitions(job.status.as_ref(), &plan.status) {
        events::transition_event(ctx, job, t);
    }
    let steps = future::join_all(plan.steps.iter().map(|s| steps::run_step(ctx, job, key, s)));
    steps
        .await
        .into_iter()
        .collect::<Result<Vec<()>, Error>>()?;
    Ok(())
}

impl Error {
    /// The Failed condition's reason when this error cannot go away by
    /// retrying: an object of a child's name that is not the job's, or a
    /// write the API server refuses as invalid (a name an object may not have,
    /// a ConfigMap over the size limit). None: retried with backoff.
    pub fn final_reason(&self) -> Option<&'static str> {
        match self {
            Error::NotOwned { .. } => Some("ObjectExists"),
            Error::Kube { source, .. } => match source.as_ref() {
                kube::Error::Api(s) if matches!(s.code, 400 | 413 | 422) => Some("ApplyRefused"),
                _ => None,
            },
            _ => None,
        }
    }
}

/// A final error fails the job (status, cleanPodPolicy, a Warning Event),
/// ending its reconciles; any other is returned for a retry.
async fn fail_if_final(
    ctx: &Context,
    job: &DGLJob,
    key: &JobKey,
    pods: &[crate::pure::observe::ObservedPod],
    now: Timestamp,
    e: Error,
) -> Result<Action, Error> {
    let Some(reason) = e.final_reason() else {
        return Err(e);
    };
    warn!(job = %key.name, namespace = %key.namespace, error = %e, "failing the job");
    let failed = plan::fail(job, pods, now, reason, &e.to_string());
    // A failed job keeps its children as they are: nothing to apply.
    let applied = children::apply_desired(ctx, job, &key.namespace, None).await?;
    let written = status::write_status(ctx, job, &failed.status).await?;
    act(ctx, job, key, &failed, applied, written).await?;
    Ok(match failed.requeue_after {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
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
