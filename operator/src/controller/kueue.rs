//! Kueue's external-framework contract, the part that talks to the API
//! server (what it decides is in [`crate::pure::kueue`]): a watch of the
//! operator's Workloads (a change reconciles the owning job), the Workload
//! applied for a queued job, the admitted flavors read, the job's
//! `runPolicy.suspend` kept as Kueue decides, and the Workload status writes
//! the job's controller owes Kueue. On only with `--kueue`: a cluster
//! without Kueue's CRDs never sees a request for them.

use std::collections::BTreeMap;

use dgl_api::names::FIELD_MANAGER;
use dgl_api::{DGLJob, DGLJobStatus, JobPhase};
use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info};

use super::{kube_err, Context, Error};
use crate::cache::JobToReconcile;
use crate::pure::conditions;
use crate::pure::kueue::{self as pk, Flavor, Outcome, Priority, State, Workload};
use crate::pure::observe::ObservedPod;

/// The operator's Workloads, as its watch last saw them.
pub struct Workloads {
    store: Store<DynamicObject>,
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(pk::GROUP, pk::VERSION, kind), plural)
}

fn workload_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &resource("Workload", "workloads"))
}

/// Watches the Workloads carrying the operator's label; yields the owning
/// job of each one that changed (admitted, evicted, finished).
pub fn watch(
    client: &Client,
    ns: &Option<String>,
    config: &watcher::Config,
) -> (Workloads, BoxStream<'static, JobToReconcile>) {
    let ar = resource("Workload", "workloads");
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let writer = reflector::store::Writer::new(ar);
    let store = writer.as_reader();
    let triggers = watcher(api, config.clone())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .filter_map(|o| async move { o.ok().and_then(|w| owner_job(&w)) })
        .boxed();
    (Workloads { store }, triggers)
}

/// The DGLJob that controls a Workload, to reconcile.
fn owner_job(w: &DynamicObject) -> Option<JobToReconcile> {
    let ns = w.namespace()?;
    w.owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == DGLJob::kind(&()))
        .map(|o| ObjectRef::<DeserializeGuard<DGLJob>>::new(&o.name).within(&ns))
}

/// A queued job's Workload state and the job as the plan must see it.
pub(super) struct Gate {
    /// The job, suspended unless admitted, with the admitted flavors.
    pub job: DGLJob,
    state: State,
    workload: Option<Workload>,
}

/// For a job under Kueue (integration on, queue label set): its Workload
/// applied when the watch does not show it, the flavors read once admitted,
/// the job's own `runPolicy.suspend` set as Kueue decides. None: the job
/// is not under Kueue.
pub(super) async fn gate(ctx: &Context, job: &DGLJob, ns: &str) -> Result<Option<Gate>, Error> {
    let (Some(w), Some(_)) = (&ctx.kueue, pk::queue_name(job)) else {
        return Ok(None);
    };
    // A Workload not yet listed would look absent: wait for the first list.
    let _ = w.store.wait_until_ready().await;
    let name = pk::workload_name(&job.name_any());
    let key = ObjectRef::new_with(&name, resource("Workload", "workloads")).within(ns);
    let workload = match w.store.get(&key) {
        Some(o) => Some(parse(&o, &name)?),
        None => None,
    };
    let state = pk::state(workload.as_ref());
    if state == State::NoWorkload && !finished(job.status.as_ref()) {
        apply_workload(ctx, job, ns).await?;
    }
    let flavors = match &workload {
        Some(wl) if matches!(state, State::Admitted { .. }) => read_flavors(ctx, wl).await?,
        _ => BTreeMap::new(),
    };
    let gated = pk::gated_job(job, &state, workload.as_ref(), &flavors);
    if !finished(job.status.as_ref()) && job.spec.suspended() != gated.spec.suspended() {
        set_suspend(ctx, job, ns, gated.spec.suspended()).await?;
    }
    Ok(Some(Gate {
        job: gated,
        state,
        workload,
    }))
}

fn finished(st: Option<&DGLJobStatus>) -> bool {
    st.and_then(|s| s.phase).is_some_and(JobPhase::is_terminal)
}

fn parse(o: &DynamicObject, name: &str) -> Result<Workload, Error> {
    let v = serde_json::to_value(o).expect("a watched object serializes");
    serde_json::from_value(v).map_err(|e| Error::Kube {
        action: "read",
        kind: "Workload".into(),
        name: name.to_string(),
        source: Box::new(kube::Error::SerdeError(e)),
    })
}

/// Server-side apply of the job's Workload under the operator's field manager.
async fn apply_workload(ctx: &Context, job: &DGLJob, ns: &str) -> Result<(), Error> {
    let priority = match job.labels().get(pk::PRIORITY_CLASS_LABEL) {
        Some(class) => Some(read_priority(ctx, class).await?),
        None => None,
    };
    let wl = pk::desired_workload(job, priority.as_ref());
    let name = pk::workload_name(&job.name_any());
    info!(job = %job.name_any(), workload = %name, "applying the Kueue Workload");
    ctx.metrics.api_writes.inc();
    workload_api(&ctx.client, ns)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&wl),
        )
        .await
        .map_err(kube_err("apply", "Workload", &name))?;
    Ok(())
}

/// The value of the WorkloadPriorityClass `class` (cluster-scoped).
async fn read_priority(ctx: &Context, class: &str) -> Result<Priority, Error> {
    let ar = resource("WorkloadPriorityClass", "workloadpriorityclasses");
    let o = Api::<DynamicObject>::all_with(ctx.client.clone(), &ar)
        .get(class)
        .await
        .map_err(kube_err("read", "WorkloadPriorityClass", class))?;
    let value = o.data.get("value").and_then(|v| v.as_i64());
    let value = value
        .and_then(|v| i32::try_from(v).ok())
        .ok_or_else(|| Error::Kube {
            action: "read",
            kind: "WorkloadPriorityClass".into(),
            name: class.to_string(),
            source: Box::new(kube::Error::SerdeError(serde::de::Error::custom(
                "field value: expected a 32-bit integer",
            ))),
        })?;
    Ok(Priority {
        class: class.to_string(),
        value,
    })
}

/// The ResourceFlavors the admission assigned, by name.
async fn read_flavors(ctx: &Context, wl: &Workload) -> Result<BTreeMap<String, Flavor>, Error> {
    let ar = resource("ResourceFlavor", "resourceflavors");
    let api = Api::<DynamicObject>::all_with(ctx.client.clone(), &ar);
    let mut out = BTreeMap::new();
    for name in wl.flavor_names() {
        let o = api
            .get(&name)
            .await
            .map_err(kube_err("read", "ResourceFlavor", &name))?;
        // A flavor without a spec (no node labels, no tolerations) is valid.
        let spec = o.data.get("spec").filter(|s| !s.is_null()).cloned();
        let spec = spec.unwrap_or_else(|| serde_json::json!({}));
        let f: Flavor = serde_json::from_value(spec).map_err(|e| Error::Kube {
            action: "read",
            kind: "ResourceFlavor".into(),
            name: name.clone(),
            source: Box::new(kube::Error::SerdeError(e)),
        })?;
        out.insert(name, f);
    }
    Ok(out)
}

/// Sets the job's own `runPolicy.suspend` (a merge patch, as Kueue's
/// jobframework updates its jobs): true while queued, false once admitted,
/// so `kubectl get` and anything reading the job agree with Kueue.
async fn set_suspend(ctx: &Context, job: &DGLJob, ns: &str, suspend: bool) -> Result<(), Error> {
    let name = job.name_any();
    debug!(job = %name, suspend, "setting runPolicy.suspend for Kueue");
    ctx.metrics.api_writes.inc();
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let patch = json!({"spec": {"runPolicy": {"suspend": suspend}}});
    Api::<DGLJob>::namespaced(ctx.client.clone(), ns)
        .patch(&name, &pp, &Patch::Merge(&patch))
        .await
        .map_err(kube_err("suspend", DGLJob::kind(&()), &name))?;
    Ok(())
}

impl Gate {
    /// Adds the `Queued` condition and `status.queue` to the planned status.
    pub fn annotate(&self, status: &mut DGLJobStatus, now: Timestamp) {
        let (queue, cond) = pk::queue_status(&self.job, &self.state);
        let generation = self.job.metadata.generation;
        conditions::apply(&mut status.conditions, cond, &Time(now), generation);
        status.queue = Some(queue);
    }

    /// The Workload status write Kueue is owed after this reconcile (Finished,
    /// admission cleared after an eviction, PodsReady), if any.
    pub async fn report(
        &self,
        ctx: &Context,
        ns: &str,
        status: &DGLJobStatus,
        pods: &[ObservedPod],
        now: Timestamp,
    ) -> Result<(), Error> {
        let Some(wl) = &self.workload else {
            return Ok(());
        };
        let outcome = match status.phase {
            Some(JobPhase::Succeeded) => Some(Outcome::Succeeded),
            Some(JobPhase::Failed) => Some(Outcome::Failed),
            _ => None,
        };
        let started = pk::pods_started(&self.job, pods);
        let Some(patch) = pk::workload_status_patch(wl, outcome, pods.len(), started, now) else {
            return Ok(());
        };
        let name = wl.metadata.name.clone().unwrap_or_default();
        debug!(workload = %name, patch = %patch, "writing the Workload's status");
        ctx.metrics.api_writes.inc();
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        workload_api(&ctx.client, ns)
            .patch_status(&name, &pp, &Patch::Merge(&patch))
            .await
            .map_err(kube_err("write the status of", "Workload", &name))?;
        Ok(())
    }
}
