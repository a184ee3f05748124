//! Kueue's external-framework contract for a DGLJob, pure (no I/O): the
//! `Workload` the operator owns for a job labelled `kueue.x-k8s.io/queue-name`,
//! what the Workload's state means for the job (wait, run with the admitted
//! flavors, stop after an eviction), the job's `Queued` condition and
//! `status.queue`, and the Workload status writes the job's controller owes
//! Kueue (admission cleared once an evicted job's pods are gone; Finished).
//!
//! Kueue does the same for its in-tree jobs in its Go `jobframework`; an
//! external framework's controller does it itself (see
//! /work/shared/reference/kueue-external-framework.md). The Workload is
//! `kueue.x-k8s.io/v1beta2`, the version Kueue v0.17 stores (v1beta1 is
//! served but deprecated and converted by Kueue's webhook).

use std::collections::BTreeMap;

use dgl_api::{DGLJob, JobConditionType, QueueStatus, ReplicaType};
use k8s_openapi::api::core::v1::{PodTemplateSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::pure::builders::{job_labels, owner_ref};
use crate::pure::conditions::ConditionState;
use crate::pure::observe::{ObservedPod, PodState};

/// The label that puts a job under Kueue, naming its LocalQueue.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The label naming the job's WorkloadPriorityClass.
pub const PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";
/// Kueue's API group.
pub const GROUP: &str = "kueue.x-k8s.io";
/// The Workload version the operator writes and reads.
pub const VERSION: &str = "v1beta2";
/// The job's condition saying whether it waits for Kueue.
pub const CONDITION_QUEUED: &str = JobConditionType::Queued.as_str();

/// The LocalQueue a job is queued in, if it carries the queue label.
pub fn queue_name(job: &DGLJob) -> Option<&str> {
    job.labels()
        .get(QUEUE_LABEL)
        .map(String::as_str)
        .filter(|q| !q.is_empty())
}

/// The name of a job's Workload. A job name is at most 50 characters (the
/// CRD's rule), so this stays a valid name.
pub fn workload_name(job: &str) -> String {
    format!("dgljob-{job}")
}

/// The name of a role's podSet in the Workload.
pub fn pod_set_name(role: ReplicaType) -> &'static str {
    role.label_value()
}

/// What the operator reads of a Workload.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Workload {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: WorkloadStatus,
}

/// A Workload's status, as far as the job's controller reads it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub admission: Option<Admission>,
}

/// Kueue's admission: the ClusterQueue and each podSet's flavors.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    pub cluster_queue: String,
    #[serde(default)]
    pub pod_set_assignments: Vec<PodSetAssignment>,
}

/// One podSet's flavors, by resource.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct PodSetAssignment {
    pub name: String,
    #[serde(default)]
    pub flavors: BTreeMap<String, String>,
}

/// What a ResourceFlavor asks of the pods that use it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Flavor {
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
}

/// A WorkloadPriorityClass the job names, resolved to its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Priority {
    pub class: String,
    pub value: i32,
}

impl Workload {
    fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }

    /// The flavors of every podSet, as Kueue assigned them.
    pub fn flavor_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .status
            .admission
            .iter()
            .flat_map(|a| &a.pod_set_assignments)
            .flat_map(|p| p.flavors.values().cloned())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// Where a queued job stands, read from its Workload.
#[derive(Clone, Debug, PartialEq)]
pub enum State {
    /// No Workload yet: the operator creates it; the job waits.
    NoWorkload,
    /// Waiting for Kueue to admit the Workload.
    Pending,
    /// Admitted: the job runs on the flavors of each podSet.
    Admitted { cluster_queue: String },
    /// Evicted (preempted, waitForPodsReady timeout, deactivated): the job
    /// stops; once its pods are gone its admission is cleared and it waits
    /// again.
    Evicted { reason: String, message: String },
    /// The Workload is Finished: nothing more to do.
    Finished,
}

/// The state of a job whose Workload is `wl` (None: not seen yet).
pub fn state(wl: Option<&Workload>) -> State {
    let Some(wl) = wl else {
        return State::NoWorkload;
    };
    if wl.is_true("Finished") {
        return State::Finished;
    }
    if let Some(c) = wl.condition("Evicted").filter(|c| c.status == "True") {
        return State::Evicted {
            reason: c.reason.clone(),
            message: c.message.clone(),
        };
    }
    match &wl.status.admission {
        Some(a) if wl.is_true("Admitted") => State::Admitted {
            cluster_queue: a.cluster_queue.clone(),
        },
        _ => State::Pending,
    }
}

/// The Workload the operator applies for `job` (server-side apply): owned by
/// the job, one podSet per role with the role's replica count and pod
/// template (the partitioner's only where the job has one, with the
/// workers' template when it has none of its own, as its pod is built), the
/// LocalQueue, and the
/// priority when the job names a WorkloadPriorityClass.
pub fn desired_workload(job: &DGLJob, priority: Option<&Priority>) -> Value {
    let mut spec = json!({
        "queueName": queue_name(job).unwrap_or_default(),
        "podSets": pod_sets(job),
    });
    if let Some(p) = priority {
        spec["priorityClassRef"] =
            json!({"group": GROUP, "kind": "WorkloadPriorityClass", "name": p.class});
        spec["priority"] = json!(p.value);
    }
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "Workload",
        "metadata": {
            "name": workload_name(&job.name_any()),
            "namespace": job.namespace(),
            "labels": job_labels(job),
            "ownerReferences": [owner_ref(job)],
        },
        "spec": spec,
    })
}

/// The job's podSets, in the order Launcher, Worker, Partitioner.
fn pod_sets(job: &DGLJob) -> Vec<Value> {
    let launcher = job.spec.replica_spec(ReplicaType::Launcher);
    let mut sets = Vec::new();
    for role in ReplicaType::ALL {
        let (count, template) = match role {
            ReplicaType::Partitioner if !job.spec.has_partitioner() => continue,
            ReplicaType::Partitioner => {
                // Without a template of its own the pod is built from the
                // workers' (builders::partitioner_pod): count what it asks.
                let own = job.spec.replica_spec(role);
                let worker = job.spec.replica_spec(ReplicaType::Worker);
                (1, own.or(worker).or(launcher).map(|s| &s.template))
            }
            _ => match job.spec.replica_spec(role) {
                Some(s) => (s.replicas(), Some(&s.template)),
                None => continue,
            },
        };
        let template = template.cloned().unwrap_or_default();
        sets.push(json!({
            "name": pod_set_name(role),
            "count": count,
            "template": template_for_kueue(template),
        }));
    }
    sets
}

/// A template as Kueue reads it (requests, node selector, tolerations,
/// affinity): without the metadata Kueue has no use for (and the
/// annotations that may be large).
fn template_for_kueue(mut t: PodTemplateSpec) -> PodTemplateSpec {
    t.metadata = t.metadata.map(|m| ObjectMeta {
        labels: m.labels,
        ..Default::default()
    });
    t
}

/// The job as the plan should see it under Kueue: suspended unless
/// admitted; once admitted, with each role's template given its admitted
/// flavors' node labels (nodeSelector) and tolerations.
pub fn gated_job(
    job: &DGLJob,
    st: &State,
    wl: Option<&Workload>,
    flavors: &BTreeMap<String, Flavor>,
) -> DGLJob {
    let mut job = job.clone();
    let run = matches!(st, State::Admitted { .. });
    job.spec
        .run_policy
        .get_or_insert_with(Default::default)
        .suspend = Some(!run);
    if !run {
        return job;
    }
    let assignments = wl
        .and_then(|w| w.status.admission.as_ref())
        .map(|a| a.pod_set_assignments.as_slice())
        .unwrap_or_default();
    for role in ReplicaType::ALL {
        let Some(a) = assignments.iter().find(|a| a.name == pod_set_name(role)) else {
            continue;
        };
        // The partitioner without a template of its own is built from the
        // workers': then it gets the workers' flavors through that template.
        let Some(spec) = job.spec.dgl_replica_specs.get_mut(&role) else {
            continue;
        };
        for name in a.flavors.values() {
            if let Some(f) = flavors.get(name) {
                inject(&mut spec.template, f);
            }
        }
    }
    job
}

/// Adds a flavor's node labels to a template's nodeSelector and its
/// tolerations to the template's (once each).
fn inject(t: &mut PodTemplateSpec, f: &Flavor) {
    let spec = t.spec.get_or_insert_with(Default::default);
    if !f.node_labels.is_empty() {
        let sel = spec.node_selector.get_or_insert_with(Default::default);
        for (k, v) in &f.node_labels {
            sel.insert(k.clone(), v.clone());
        }
    }
    for tol in &f.tolerations {
        let tols = spec.tolerations.get_or_insert_with(Default::default);
        if !tols.contains(tol) {
            tols.push(tol.clone());
        }
    }
}

/// `status.queue` and the `Queued` condition of the job, for state `st`:
/// the condition's detector (True while waiting, False once admitted,
/// written either way).
pub fn queue_status(job: &DGLJob, st: &State) -> (QueueStatus, ConditionState) {
    let lq = queue_name(job).unwrap_or_default().to_string();
    let wl = workload_name(&job.name_any());
    let (admitted, cq) = match st {
        State::Admitted { cluster_queue } => (true, Some(cluster_queue.clone())),
        _ => (false, None),
    };
    let (queued, reason, message) = match st {
        State::NoWorkload | State::Pending => (
            true,
            "WaitingForAdmission".to_string(),
            format!("queued in LocalQueue {lq}: waiting for Kueue to admit Workload {wl}"),
        ),
        State::Admitted { cluster_queue } => (
            false,
            "Admitted".to_string(),
            format!("admitted by ClusterQueue {cluster_queue} via LocalQueue {lq}"),
        ),
        State::Evicted { reason, message } => (
            true,
            format!("Evicted{reason}"),
            format!("evicted by Kueue ({reason}: {message}); its pods are removed and it waits again in LocalQueue {lq}"),
        ),
        State::Finished => (false, "Finished".to_string(), format!("Workload {wl} is finished")),
    };
    let summary = if admitted || matches!(st, State::Finished) {
        format!("admitted via {lq}")
    } else {
        format!("queued in {lq}")
    };
    let status = QueueStatus {
        local_queue: lq,
        workload: wl,
        cluster_queue: cq,
        admitted,
        summary,
    };
    let t = JobConditionType::Queued;
    (status, ConditionState::shown(t, queued, &reason, &message))
}

/// Sets `cond` among the Workload's `conds`, keeping the last transition
/// time when its status did not change (`now` otherwise). The job's own
/// conditions go through [`crate::pure::conditions`].
pub fn set_condition(conds: &mut Vec<Condition>, mut cond: Condition, now: Timestamp) {
    match conds.iter_mut().find(|c| c.type_ == cond.type_) {
        Some(c) => {
            cond.last_transition_time = if c.status == cond.status {
                c.last_transition_time.clone()
            } else {
                Time(now)
            };
            *c = cond;
        }
        None => {
            cond.last_transition_time = Time(now);
            conds.push(cond);
        }
    }
}

/// How the job ended, for the Workload's Finished condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
}

/// Whether every pod the job's Workload counts has started (running,
/// Ready or not, or succeeded; the partitioner of an earlier run counts):
/// Kueue's `PodsReady`, which `waitForPodsReady` waits for. A launcher is
/// Pending until its run is launched, i.e. until the graph is partitioned
/// and every worker is Ready.
pub fn pods_started(job: &DGLJob, pods: &[ObservedPod]) -> bool {
    let run = job
        .status
        .as_ref()
        .and_then(|s| s.restart_count)
        .unwrap_or(0);
    let started = pods
        .iter()
        .filter(|p| p.epoch == run || p.role == ReplicaType::Partitioner)
        .filter(|p| matches!(p.state, PodState::Running { .. } | PodState::Succeeded))
        .count();
    // A run whose launcher found its partitions in the cache has none.
    let reused = pods
        .iter()
        .any(|p| p.role == ReplicaType::Launcher && p.epoch == run && p.reuses_partitions());
    let partitioner = usize::from(job.spec.has_partitioner() && !reused);
    let workers = usize::try_from(job.spec.num_workers()).unwrap_or(0);
    started >= 1 + workers + partitioner
}

/// The Workload status write the job's controller owes Kueue now, as a JSON
/// merge patch of the status subresource (conditions whole, guarded by the
/// resourceVersion read), or None when nothing changes:
/// - the job ended: the Workload is marked Finished;
/// - it was evicted and none of its pods is left: Requeued (True after a
///   preemption, as Kueue's jobframework sets it), QuotaReserved and
///   Admitted False, the admission removed; Kueue then queues it again;
/// - admitted: PodsReady True once every pod started, else False.
pub fn workload_status_patch(
    wl: &Workload,
    outcome: Option<Outcome>,
    pods_left: usize,
    started: bool,
    now: Timestamp,
) -> Option<Value> {
    let mut conds = wl.status.conditions.clone();
    let cond = |type_: &str, status: bool, reason: &str, message: &str| Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(now),
        observed_generation: wl.metadata.generation,
    };
    let mut status = json!({});
    match (state(Some(wl)), outcome) {
        (State::Finished, _) => return None,
        (_, Some(o)) => {
            let (reason, msg) = match o {
                Outcome::Succeeded => ("Succeeded", "DGLJob succeeded"),
                Outcome::Failed => ("Failed", "DGLJob failed"),
            };
            set_condition(&mut conds, cond("Finished", true, reason, msg), now);
        }
        (State::Evicted { reason, message }, None)
            if pods_left == 0 && wl.status.admission.is_some() =>
        {
            let requeued = reason == "Preempted" || reason == "NodeFailures";
            let no_res = "The workload has no reservation";
            set_condition(
                &mut conds,
                cond("Requeued", requeued, &reason, &message),
                now,
            );
            set_condition(
                &mut conds,
                cond("QuotaReserved", false, "Pending", &message),
                now,
            );
            set_condition(
                &mut conds,
                cond("Admitted", false, "NoReservation", no_res),
                now,
            );
            status["admission"] = Value::Null;
        }
        (State::Admitted { .. }, None) => {
            let was = wl.condition("PodsReady");
            let c = match (started, was) {
                (true, Some(w)) if w.status == "True" => return None,
                (true, Some(w)) if w.reason == "WaitForRecovery" => {
                    cond("PodsReady", true, "Recovered", READY)
                }
                (true, _) => cond("PodsReady", true, "Started", READY),
                (false, Some(w)) if w.status == "True" || w.reason == "WaitForRecovery" => cond(
                    "PodsReady",
                    false,
                    "WaitForRecovery",
                    "At least one pod has failed, waiting for recovery",
                ),
                (false, Some(_)) => return None,
                (false, None) => cond("PodsReady", false, "WaitForStart", NOT_READY),
            };
            set_condition(&mut conds, c, now);
        }
        _ => return None,
    }
    status["conditions"] = serde_json::to_value(&conds).expect("conditions serialize");
    Some(json!({
        "metadata": { "resourceVersion": wl.metadata.resource_version },
        "status": status,
    }))
}

const READY: &str = "All pods reached readiness and the workload is running";
const NOT_READY: &str = "Not all pods are ready or succeeded";

#[cfg(test)]
mod tests;
