//! The state machine: from the job and its observed pods to the next status
//! and the pod changes that move the job forward. Pure: no I/O, `now` is an
//! argument, so every transition is unit-tested without a server.
//!
//! ```text
//!  Created ─► Partitioning ─► Partitioned ─► Running ─► Succeeded
//!     │  (Skip: straight to Running)    │          └───► Failed
//!     │                                 └─ pod failed ─► Restarting ─► (new run) ─► ...
//!     └─ suspend ─► Suspended ─ resume ─► Created path again
//! ```
//! Failed comes from a failed pod with no restarts left or the deadline.
//! DistParMETIS is Partitioning while its running launcher is not Ready.
//! cleanPodPolicy is applied on every terminal path. The
//! same diagram, with the triggers, is in docs/architecture.md.
//!
//! [`plan`] reads like that diagram: one function per situation, each
//! ending in the one way a [`Plan`] is built ([`Planner::done`]):
//! finished, refused, suspended, deadline exceeded and succeeded in
//! `lifecycle.rs`, a failed run in `failure.rs`, a run that lost pods with
//! their node in `node_loss.rs` ([`Seen::down`]), moving forward in
//! `forward.rs`; the conditions and counts they write in `status.rs`
//! (each condition through [`crate::pure::conditions`], which also says
//! which Events they lead to).

use std::time::Duration;

use dgl_api::names::launcher_name;
use dgl_api::progress::Progress;
use dgl_api::{CleanPodPolicy, DGLJob, DGLJobStatus, JobPhase, JobProgress, ReplicaType};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::pure::observe::{ObservedPod, PodState};
use crate::pure::settings::BuildConfig;
use crate::pure::validate::ValidJob;

/// A change to the job's pods.
#[derive(Debug, Clone)]
pub enum Step {
    /// Create (server-side apply) a pod that does not exist.
    CreatePod(Box<Pod>),
    /// Delete a pod by name.
    DeletePod(String),
    /// Delete a pod stuck Terminating with grace 0 (see `failure.rs`).
    ForceDeletePod(String),
    /// The job's cleanPodPolicy: delete these pods (named as the cache shows
    /// them), two or more in one request. `running_only`: the pods that are
    /// not Succeeded or Failed (policy Running), else every pod (All).
    CleanPods {
        running_only: bool,
        pods: Vec<String>,
    },
    /// Delete the job itself (ttlSecondsAfterFinished reached).
    DeleteJob,
}

impl Step {
    /// The pods this step deletes, by name.
    pub fn deleted_pods(&self) -> &[String] {
        match self {
            Step::DeletePod(n) | Step::ForceDeletePod(n) => std::slice::from_ref(n),
            Step::CleanPods { pods, .. } => pods,
            _ => &[],
        }
    }
}

/// The outcome of planning one reconcile.
#[derive(Debug, Clone)]
pub struct Plan {
    pub status: DGLJobStatus,
    pub steps: Vec<Step>,
    /// Wake up after this long even without a watch event (deadline, TTL).
    pub requeue_after: Option<Duration>,
    /// Whether the job's supporting objects (ConfigMap, Secret, RBAC,
    /// NetworkPolicy, PodGroup) should be kept up to date: false once the
    /// job is finished.
    pub ensure_children: bool,
    /// The run the job's ConfigMap launches, once that run's workers are
    /// Ready with their IPs and the graph is partitioned: the ConfigMap is
    /// then written with every IP and this run, which the launcher (created
    /// with the workers) waits for. `None`: the ConfigMap is only created.
    pub launch: Option<i32>,
    /// Suspended after its run was launched: the ConfigMap goes back to
    /// its unlaunched content, so that the pods of the resumed run (same
    /// run number) wait for a launch of their own.
    pub reset_launch: bool,
}

/// The longest a plan sleeps without news: a far deadline or TTL is
/// re-planned (and re-armed) daily rather than armed once for years, which
/// the controller's timer could not hold.
pub const MAX_WAKE: Duration = Duration::from_secs(24 * 3600);

/// What the reconcile observed of the job's pods: those in the cache, what
/// the cache kept of disrupted pods gone from it (a worker evicted and
/// deleted before this reconcile is judged by its DisruptionTarget, as if
/// still there), and which of them are on a down node (`node_loss.rs`:
/// those of the current run are lost, and every deletion of one is made
/// with grace 0).
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub pods: &'a [ObservedPod],
    pub gone: &'a [ObservedPod],
    pub down: &'a PodsOnDownNodes,
}

/// No pod on a down node (a [`Seen`] without the node watch).
static NONE_DOWN: PodsOnDownNodes = PodsOnDownNodes::new();

impl<'a> Seen<'a> {
    /// Only the cached pods: nothing gone, no node down.
    pub fn pods(pods: &'a [ObservedPod]) -> Self {
        Seen {
            pods,
            gone: &[],
            down: &NONE_DOWN,
        }
    }

    /// With what the cache kept of gone pods.
    pub fn gone(self, gone: &'a [ObservedPod]) -> Self {
        Seen { gone, ..self }
    }

    /// With the pods on down nodes.
    pub fn down(self, down: &'a PodsOnDownNodes) -> Self {
        Seen { down, ..self }
    }
}

/// Plans one reconcile of `job`. Depends on nothing but its arguments: the
/// job (spec and last status), what was seen of its pods, the time, the
/// operator's build settings and the run the job's ConfigMap has launched
/// (as this operator last wrote it or its watch shows it).
pub fn plan(
    job: &DGLJob,
    seen: Seen<'_>,
    now: Timestamp,
    cfg: &BuildConfig,
    launched: Option<i32>,
) -> Plan {
    plan_job(job, seen, now, cfg, launched).plan
}

/// A plan, and the validated job when validation ran and passed (not for a
/// finished or refused job): what [`crate::pure::desired`] builds from.
#[derive(Debug)]
pub struct Planned<'a> {
    pub plan: Plan,
    pub valid: Option<ValidJob<'a>>,
}

/// [`plan`], keeping the proof of validation for the builders of the
/// job's children.
pub fn plan_job<'a>(
    job: &'a DGLJob,
    seen: Seen<'_>,
    now: Timestamp,
    cfg: &BuildConfig,
    launched: Option<i32>,
) -> Planned<'a> {
    let (mut plan, valid) = plan_inner(job, seen, now, cfg, launched);
    if !seen.down.is_empty() {
        node_loss::force_on_down_nodes(&mut plan.steps, seen.down);
    }
    Planned { plan, valid }
}

/// The order matters: a finished job keeps its outcome and is not
/// validated again (a setting changed since cannot refuse it), a refused
/// job is refused even when suspended, and only a valid job moves on.
fn plan_inner<'a>(
    job: &'a DGLJob,
    seen: Seen<'_>,
    now: Timestamp,
    cfg: &BuildConfig,
    launched: Option<i32>,
) -> (Plan, Option<ValidJob<'a>>) {
    let mut p = Planner::new(job, seen.pods, now);
    p.gone = seen.gone;
    p.launched = launched == Some(p.epoch);
    if p.sb.is_true(JobPhase::Succeeded) || p.sb.is_true(JobPhase::Failed) {
        return (p.finished(), None);
    }
    let valid = match crate::pure::validate::validate(job, cfg) {
        Ok(valid) => valid,
        Err(r) => return (p.refused(r.reason, &r.message), None),
    };
    (plan_valid(p, &valid, seen.down, cfg), Some(valid))
}

/// The plan of a validated job that is not finished: suspended, or on its
/// way (a deadline passed, pods lost with a node, a failed run, success,
/// or forward).
fn plan_valid(
    mut p: Planner<'_>,
    valid: &ValidJob<'_>,
    down: &PodsOnDownNodes,
    cfg: &BuildConfig,
) -> Plan {
    let (job, now) = (valid.job(), p.now);
    if job.spec.suspended() {
        return p.suspended();
    }
    p.resume();
    let current = p.retire_earlier_runs();
    p.force_stuck_deletions();
    p.force_down_terminating(down);
    if p.deadline_passed() {
        return p.deadline_exceeded(&current);
    }
    let launcher_succeeded =
        find(&current, &p.launcher).is_some_and(|l| l.state == PodState::Succeeded);
    let lost = p.lost(&current, down);
    if !lost.is_empty() && !launcher_succeeded {
        // The node is the cause: a pod that failed because its peer went
        // with the node says less.
        return p.node_lost(&current, &lost);
    }
    let mut plan = match p.failure(&current) {
        Some(failure) if !launcher_succeeded => p.failed_run(&current, failure),
        _ if launcher_succeeded => p.succeeded(&current),
        _ => p.forward(&current, valid, cfg),
    };
    node_loss::settle(&mut plan.status, now, job.metadata.generation);
    plan
}

/// Fails the job for a reason found outside the state machine (an object
/// of a child's name that is not the job's, a write the API server refuses):
/// Failed now and cleanPodPolicy applied, as for any other failure. A job
/// already finished keeps its outcome.
pub fn fail(
    job: &DGLJob,
    pods: &[ObservedPod],
    now: Timestamp,
    reason: &str,
    message: &str,
) -> Plan {
    let p = Planner::new(job, pods, now);
    if p.sb.is_true(JobPhase::Succeeded) || p.sb.is_true(JobPhase::Failed) {
        return p.finished();
    }
    p.refused(reason, message)
}

/// The pod named `name` among `pods`.
fn find<'p>(pods: &[&'p ObservedPod], name: &str) -> Option<&'p ObservedPod> {
    pods.iter().find(|p| p.name == name).copied()
}

/// How a plan sets `status.replicaStatuses`.
enum Replicas<'p> {
    /// None: no pods are wanted.
    Cleared,
    /// Counted over these pods, as they will be once the plan's steps ran.
    After(&'p [&'p ObservedPod]),
}

/// One plan in the making: the status so far, the steps, the wake-up.
struct Planner<'a> {
    job: &'a DGLJob,
    name: String,
    launcher: String,
    pods: &'a [ObservedPod],
    now: Timestamp,
    sb: StatusBuilder,
    steps: Vec<Step>,
    requeue: Option<Duration>,
    /// The restart epoch: `status.restartCount`, the run label of the pods
    /// the current run creates.
    epoch: i32,
    /// See [`Plan::launch`].
    launch: Option<i32>,
    /// The ConfigMap has launched the current run: its pods are in use (the
    /// launcher may have read their IPs), so one replaced fails the run.
    launched: bool,
    /// See [`Plan::reset_launch`].
    reset_launch: bool,
    /// What the cache kept of pods gone from it (see [`Seen`]).
    gone: &'a [ObservedPod],
}

impl<'a> Planner<'a> {
    /// Starts from the job's last status, marked Created.
    fn new(job: &'a DGLJob, pods: &'a [ObservedPod], now: Timestamp) -> Self {
        let mut sb = StatusBuilder {
            status: job.status.clone().unwrap_or_default(),
            now: Time(now),
            generation: job.metadata.generation,
        };
        sb.status.observed_generation = job.metadata.generation;
        let name = job.name_any();
        if !sb.is_true(JobPhase::Created) {
            sb.set(
                JobPhase::Created,
                "JobCreated",
                &format!("DGLJob {name} is created."),
            );
        }
        let epoch = sb.status.restart_count.unwrap_or(0);
        Planner {
            job,
            launcher: launcher_name(&name),
            name,
            pods,
            now,
            sb,
            steps: Vec::new(),
            requeue: None,
            epoch,
            launch: None,
            launched: false,
            reset_launch: false,
            gone: &[],
        }
    }

    /// The one way a plan ends: replica counts, the phase, and the plan.
    fn done(mut self, replicas: Replicas<'_>, ensure_children: bool) -> Plan {
        match replicas {
            Replicas::Cleared => self.sb.status.replica_statuses = Default::default(),
            Replicas::After(pods) => {
                self.sb.status.replica_statuses = counts_after(pods, &self.steps)
            }
        }
        self.fold_progress();
        self.sb.derive_phase();
        Plan {
            status: self.sb.status,
            steps: self.steps,
            requeue_after: self.requeue,
            ensure_children,
            launch: self.launch,
            reset_launch: self.reset_launch,
        }
    }

    /// The current run's launcher's progress report, when it parses and
    /// differs from the status' (stamped with `now` only then, so an
    /// unchanged report writes nothing). A bad one is ignored: the launcher
    /// only publishes reports it parsed.
    fn fold_progress(&mut self) {
        let run = self.sb.status.restart_count.unwrap_or(0);
        let Some(raw) = self
            .pods
            .iter()
            .find(|p| p.role == ReplicaType::Launcher && p.epoch == run)
            .and_then(|p| p.progress.as_deref())
        else {
            return;
        };
        let Ok(report) = Progress::from_json(raw) else {
            return;
        };
        let status = &mut self.sb.status;
        if !status.progress.as_ref().is_some_and(|s| s.reports(&report)) {
            let prev = status.progress.as_ref();
            status.progress = Some(JobProgress::next(prev, &report, Time(self.now)));
        }
    }

    /// Wakes up in `secs` (at least 1, at most [`MAX_WAKE`]) unless
    /// something earlier is due.
    fn wake(&mut self, secs: i64) {
        let d = Duration::from_secs(secs.max(1).unsigned_abs()).min(MAX_WAKE);
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }

    /// Wakes up at ttlSecondsAfterFinished from now, or never.
    fn wake_for_ttl(&mut self) {
        self.requeue = self
            .job
            .spec
            .run_policy()
            .ttl_seconds_after_finished
            .map(|t| Duration::from_secs(u64::from(t.max(1).unsigned_abs())).min(MAX_WAKE));
    }

    fn clean_pods(&mut self, policy: CleanPodPolicy) {
        self.steps.extend(clean_pods(policy, self.pods));
    }
}

mod failure;
mod forward;
mod lifecycle;
mod node_loss;
mod starting;
mod status;

pub use crate::pure::conditions::{transitions, Transition};
pub use node_loss::{DownNode, PodsOnDownNodes};
pub use starting::PODS_NOT_STARTING;
use status::{clean_pods, counts_after, StatusBuilder};

#[cfg(test)]
mod tests;
