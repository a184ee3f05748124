//! The controller: watches DGLJobs and their children, and reconciles each
//! job as a pipeline: read what exists (from watch caches) → plan (pure:
//! validate, build, derive status) → apply (server-side apply, one field
//! manager) → write status → emit Events.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dgl_api::names::{secret_name, FIELD_MANAGER, LABEL_JOB_NAME, LABEL_MANAGED_BY, MANAGED_BY};
use dgl_api::{DGLJob, JobPhase};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, PartialObjectMeta, Patch, PatchParams,
    PostParams, PropagationPolicy,
};
use kube::core::{DeserializeGuard, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::builders::{self, BuildConfig, GangScheduler, HASH_ANNOTATION};
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
    #[error("a watch cache stopped before it was filled")]
    CacheStopped,
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

/// Metadata-only caches of the children the operator writes, used to skip
/// writes whose content did not change.
struct ChildStores {
    config_maps: Store<PartialObjectMeta<ConfigMap>>,
    services: Store<PartialObjectMeta<Service>>,
    service_accounts: Store<PartialObjectMeta<ServiceAccount>>,
    roles: Store<PartialObjectMeta<Role>>,
    role_bindings: Store<PartialObjectMeta<RoleBinding>>,
}

/// Shared state of reconciles. Holds nothing the cluster does not: caches
/// of watched objects and per-object retry counters only.
pub struct Context {
    pub client: Client,
    pods: Store<Pod>,
    children: ChildStores,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    recorder: Recorder,
    failures: Mutex<HashMap<ObjectRef<DGLJob>, u32>>,
}

impl Context {
    async fn caches_ready(&self) -> Result<(), Error> {
        let c = &self.children;
        let ready = futures::future::try_join_all([
            self.pods.wait_until_ready().boxed(),
            c.config_maps.wait_until_ready().boxed(),
            c.services.wait_until_ready().boxed(),
            c.service_accounts.wait_until_ready().boxed(),
            c.roles.wait_until_ready().boxed(),
            c.role_bindings.wait_until_ready().boxed(),
        ]);
        ready.await.map(|_| ()).map_err(|_| Error::CacheStopped)
    }
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

/// A metadata-only reflector of owned children, driven in the background;
/// its events also trigger the owning job's reconcile.
fn child_store<K>(
    client: &Client,
    ns: &Option<String>,
) -> (
    Store<PartialObjectMeta<K>>,
    impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static,
)
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let wc = watcher::Config::default().labels(&managed_selector());
    let meta_api: Api<PartialObjectMeta<K>> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let stream = watcher(meta_api, wc)
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    (reader, stream)
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.clone();
    let jobs = api::<DGLJob>(&client, &ns);
    let jobs_guarded: Api<DeserializeGuard<DGLJob>> = match &ns {
        Some(n) => Api::namespaced(client.clone(), n),
        None => Api::all(client.clone()),
    };
    drop(jobs);

    let (pods_reader, pods_writer) = reflector::store();
    let pod_stream = watcher(
        api::<Pod>(&client, &ns),
        watcher::Config::default().labels(&managed_selector()),
    )
    .default_backoff()
    .reflect(pods_writer)
    .applied_objects();
    let (config_maps, cm_stream) = child_store::<ConfigMap>(&client, &ns);
    let (services, svc_stream) = child_store::<Service>(&client, &ns);
    let (service_accounts, sa_stream) = child_store::<ServiceAccount>(&client, &ns);
    let (roles, role_stream) = child_store::<Role>(&client, &ns);
    let (role_bindings, rb_stream) = child_store::<RoleBinding>(&client, &ns);

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "dgl-operator".into(),
            instance: Some(settings.instance.clone()),
        },
    );
    let concurrency = settings.concurrency;
    let ctx = Arc::new(Context {
        client: client.clone(),
        pods: pods_reader,
        children: ChildStores {
            config_maps,
            services,
            service_accounts,
            roles,
            role_bindings,
        },
        settings,
        metrics,
        recorder,
        failures: Mutex::default(),
    });

    Controller::new(jobs_guarded, watcher::Config::default())
        .owns_stream(pod_stream)
        .owns_stream(cm_stream)
        .owns_stream(svc_stream)
        .owns_stream(sa_stream)
        .owns_stream(role_stream)
        .owns_stream(rb_stream)
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

/// Server-side applies `obj` unless the cached copy carries the same hash.
async fn apply_if_changed<K>(
    ctx: &Context,
    ns: &str,
    obj: &K,
    observed: Option<Arc<PartialObjectMeta<K>>>,
    kind: &'static str,
) -> Result<(), Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Serialize
        + DeserializeOwned
        + Clone
        + Debug,
{
    let want = obj.annotations().get(HASH_ANNOTATION);
    let have = observed
        .as_ref()
        .and_then(|o| o.annotations().get(HASH_ANNOTATION).cloned());
    if want.is_some() && want == have.as_ref() {
        return Ok(());
    }
    let name = obj.name_any();
    ctx.metrics.api_writes.inc();
    Api::<K>::namespaced(ctx.client.clone(), ns)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await
        .map_err(kube_err("apply", kind, &name))?;
    Ok(())
}

fn cached<K: Resource<DynamicType = ()> + Clone>(
    store: &Store<PartialObjectMeta<K>>,
    ns: &str,
    name: &str,
) -> Option<Arc<PartialObjectMeta<K>>>
where
    PartialObjectMeta<K>: Resource<DynamicType = ()>,
{
    store.get(&ObjectRef::new(name).within(ns))
}

/// ConfigMap, Secret, RBAC, Service and PodGroup of a running job.
async fn ensure_children(
    ctx: &Context,
    job: &DGLJob,
    ns: &str,
    pods: &[ObservedPod],
) -> Result<(), Error> {
    let name = job.name_any();
    let c = &ctx.children;

    // The secret is created once (random token) and never rewritten. The
    // operator may create Secrets but not read them (least privilege), so it
    // creates the token together with the job's first ConfigMap; a repeat
    // answered "already exists" is fine.
    let cm = builders::config_map(job, pods);
    let observed_cm = cached(&c.config_maps, ns, &cm.name_any());
    if observed_cm.is_none() {
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
            Ok(_) => {}
            Err(e) if is_status(&e, 409) => {}
            Err(e) => return Err(kube_err("create", "Secret", &sname)(e)),
        }
    }
    apply_if_changed(ctx, ns, &cm, observed_cm, "ConfigMap").await?;

    let (sa, role, binding) = builders::launcher_rbac(job);
    let observed = cached(&c.service_accounts, ns, &sa.name_any());
    apply_if_changed(ctx, ns, &sa, observed, "ServiceAccount").await?;
    let observed = cached(&c.roles, ns, &role.name_any());
    apply_if_changed(ctx, ns, &role, observed, "Role").await?;
    let observed = cached(&c.role_bindings, ns, &binding.name_any());
    apply_if_changed(ctx, ns, &binding, observed, "RoleBinding").await?;

    let svc = builders::worker_service(job);
    let observed = cached(&c.services, ns, &svc.name_any());
    apply_if_changed(ctx, ns, &svc, observed, "Service").await?;

    if let Some(gang) = ctx.settings.build.gang {
        apply_pod_group(ctx, job, ns, gang).await?;
    }
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

/// The job's pods from the cache. Pods owned by an earlier job of the same
/// name (being garbage-collected) count as terminating: they block their
/// names but say nothing about this job.
fn observed_pods(ctx: &Context, job: &DGLJob, ns: &str) -> Vec<ObservedPod> {
    let name = job.name_any();
    let uid = job.uid();
    ctx.pods
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(ns))
        .filter(|p| p.labels().get(LABEL_JOB_NAME) == Some(&name))
        .filter_map(|p| {
            let mut o = ObservedPod::from_pod(p)?;
            let ours = p
                .owner_references()
                .iter()
                .any(|r| r.controller == Some(true) && Some(&r.uid) == uid.as_ref());
            if !ours {
                o.state = PodState::Terminating;
            }
            Some(o)
        })
        .collect()
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
    ctx.caches_ready().await?;
    let pods = observed_pods(ctx, job, &ns);
    let plan = plan::plan(job, &pods, now_seconds(), &ctx.settings.build);

    if plan.ensure_children {
        ensure_children(ctx, job, &ns, &pods).await?;
    }

    // Status before acting: decisions (a restart counted, a terminal state)
    // are recorded first, so a crash between the two cannot repeat them.
    let old = job.status.as_ref();
    if old != Some(&plan.status) {
        let patch = serde_json::json!({
            "apiVersion": "dgloperator.io/v1alpha1",
            "kind": "DGLJob",
            "status": plan.status,
        });
        ctx.metrics.status_writes.inc();
        Api::<DGLJob>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(kube_err("write status of", "DGLJob", &name))?;
    }

    let pods_api = Api::<Pod>::namespaced(ctx.client.clone(), &ns);
    for step in &plan.steps {
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
            }
            Step::DeletePod(pname) => {
                debug!(job = %name, pod = %pname, "deleting pod");
                match pods_api.delete(pname, &DeleteParams::background()).await {
                    Ok(_) => {}
                    Err(e) if is_status(&e, 404) => {}
                    Err(e) => return Err(kube_err("delete", "Pod", pname)(e)),
                }
            }
            Step::DeleteJob => {
                info!(job = %name, "ttlSecondsAfterFinished reached: deleting the job");
                let dp = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    ..Default::default()
                };
                match Api::<DGLJob>::namespaced(ctx.client.clone(), &ns)
                    .delete(&name, &dp)
                    .await
                {
                    Ok(_) => {}
                    Err(e) if is_status(&e, 404) => {}
                    Err(e) => return Err(kube_err("delete", "DGLJob", &name)(e)),
                }
            }
        }
    }

    // Events and metrics after the status write, one per transition.
    for t in plan::transitions(old, &plan.status) {
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
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: t.reason.clone(),
            note: Some(t.message.chars().take(1000).collect()),
            action: t.type_.as_str().to_string(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &job.object_ref(&())).await {
            // An Event is a courtesy; its failure must not fail the reconcile.
            warn!(job = %name, error = %e, "could not publish event");
        }
    }

    Ok(match plan.requeue_after {
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
