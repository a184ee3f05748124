//! Pipeline step "Events": metrics, a log line and an Event per transition
//! (`pure::conditions::transitions`: a condition that became True, told as
//! its type asks), after the status write. Events are sent in the background: the reconcile does not wait
//! for them, and the client limiter gives them only tokens nobody else is
//! waiting for (`crate::client`).

use dgl_api::{DGLJob, JobConditionType};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use super::Context;
use crate::metrics::Metrics;
use crate::pure::conditions::Transition;

/// The name Events give as their reporting controller.
const REPORTING_CONTROLLER: &str = "dgl-operator";

/// Metrics, a log line and an Event (events.k8s.io/v1) for one transition.
/// Created directly: each transition is new, so kube's Recorder (which keeps
/// every Event it sent for six minutes to count repeats) would only hold
/// memory. An Event is a courtesy: failing to send one fails nothing.
pub(super) fn transition_event(ctx: &Context, job: &DGLJob, t: Transition) {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    count(&ctx.metrics, &ns, t.type_);
    if t.warning {
        warn!(job = %name, namespace = %ns, condition = %t.type_, reason = %t.reason, "{}", t.message);
    } else {
        info!(job = %name, namespace = %ns, condition = %t.type_, reason = %t.reason, "{}", t.message);
    }
    publish(ctx, job, t.warning, &t.reason, t.type_.as_str(), &t.message);
}

/// Creates one Event on `job` in a task of its own; a failure is logged,
/// never returned. One still waiting when the operator stops is lost, as
/// client-go's would be.
fn publish(ctx: &Context, job: &DGLJob, warning: bool, reason: &str, action: &str, note: &str) {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let now = Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        reason: Some(reason.into()),
        action: Some(action.into()),
        note: Some(note.chars().take(1000).collect()),
        regarding: Some(job.object_ref(&())),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(ctx.settings.instance.clone()),
        ..Default::default()
    };
    let api = Api::<Event>::namespaced(ctx.client.clone(), &ns);
    tokio::spawn(async move {
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            warn!(job = %name, error = %e, "could not publish event");
        }
    });
}

/// The job counters by namespace.
fn count(metrics: &Metrics, ns: &str, t: JobConditionType) {
    let label = Metrics::ns(ns);
    let counter = match t {
        JobConditionType::Created => &metrics.jobs_created,
        JobConditionType::Succeeded => &metrics.jobs_successful,
        JobConditionType::Failed => &metrics.jobs_failed,
        JobConditionType::Restarting => &metrics.jobs_restarted,
        _ => return,
    };
    counter.get_or_create(&label).inc();
}
