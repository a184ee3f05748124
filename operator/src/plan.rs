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
//! [`plan`] reads like that diagram: one function per situation (finished,
//! suspended, deadline exceeded, a failed run, succeeded, moving
//! forward), each ending in the one way a [`Plan`] is built
//! ([`Planner::done`]).

use std::collections::BTreeMap;
use std::time::Duration;

use dgl_api::failure_policy::{FailureFacts, PodFailurePolicyAction, MAX_IGNORED_RESTARTS};
use dgl_api::names::{launcher_name, partitioner_name, worker_name};
use dgl_api::progress::Progress;
use dgl_api::{
    CleanPodPolicy, DGLJob, DGLJobStatus, JobPhase, JobProgress, PartitionMode, ReplicaStatus,
    ReplicaType, WorkerCreationPolicy,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::builders::{self, BuildConfig};
use crate::observe::{ObservedPod, PodState};

/// A change to the job's pods.
#[derive(Debug, Clone)]
pub enum Step {
    /// Create (server-side apply) a pod that does not exist.
    CreatePod(Box<Pod>),
    /// Delete a pod by name.
    DeletePod(String),
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
            Step::DeletePod(n) => std::slice::from_ref(n),
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
    /// Service) should be kept up to date: false once the job is finished.
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

/// A condition that became True in this plan, for Events and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub type_: JobPhase,
    pub reason: String,
    pub message: String,
}

/// Conditions that became True between two statuses, one Event each, but
/// for a job that starts partitioning as it is created: its Partitioning is
/// told in the Created Event's message (same instant, one Event fewer).
pub fn transitions(old: Option<&DGLJobStatus>, new: &DGLJobStatus) -> Vec<Transition> {
    let mut all = new_true_conditions(old, new);
    let is_created = |t: &Transition| t.type_ == JobPhase::Created;
    let partitioning = all.iter().position(|t| t.type_ == JobPhase::Partitioning);
    if let Some(p) = partitioning.filter(|_| all.iter().any(is_created)) {
        let partitioning = all.remove(p);
        for created in all.iter_mut().filter(|t| is_created(t)) {
            created.message = format!("{} {}", created.message, partitioning.message);
        }
    }
    all
}

fn new_true_conditions(old: Option<&DGLJobStatus>, new: &DGLJobStatus) -> Vec<Transition> {
    new.conditions
        .iter()
        .filter(|c| c.status == "True")
        .filter(|c| {
            let before = old.and_then(|o| o.conditions.iter().find(|x| x.type_ == c.type_));
            // A new True, or a True that turned True again since `old` (its
            // lastTransitionTime moved: another restart). A new reason or
            // message alone is no transition.
            before.is_none_or(|b| {
                b.status != "True" || b.last_transition_time != c.last_transition_time
            })
        })
        .filter_map(|c| {
            Some(Transition {
                type_: JobPhase::from_name(&c.type_)?,
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
        })
        .collect()
}

/// Plans one reconcile of `job`. Depends on nothing but its arguments: the
/// job (spec and last status), its observed pods, the time, the operator's
/// build settings and the run the job's ConfigMap has launched (as this
/// operator last wrote it or its watch shows it).
pub fn plan(
    job: &DGLJob,
    pods: &[ObservedPod],
    now: Timestamp,
    cfg: &BuildConfig,
    launched: Option<i32>,
) -> Plan {
    let mut p = Planner::new(job, pods, now);
    p.launched = launched == Some(p.epoch);
    if p.sb.is_true(JobPhase::Succeeded) || p.sb.is_true(JobPhase::Failed) {
        return p.finished();
    }
    if let Err(r) = crate::validate::validate(job, cfg) {
        return p.refused(r.reason, &r.message);
    }
    if job.spec.suspended() {
        return p.suspended();
    }
    p.resume();
    let current = p.retire_earlier_runs();
    if p.deadline_passed() {
        return p.deadline_exceeded(&current);
    }
    let launcher_succeeded =
        find(&current, &p.launcher).is_some_and(|l| l.state == PodState::Succeeded);
    match p.failure(&current) {
        Some(failure) if !launcher_succeeded => p.failed_run(&current, failure),
        _ if launcher_succeeded => p.succeeded(&current),
        _ => p.forward(&current, cfg),
    }
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

/// A pod failure that ends the current run.
struct Failure {
    role: ReplicaType,
    reason: String,
    message: String,
    /// What runPolicy.podFailurePolicy's rules match (empty for a pod gone).
    facts: FailureFacts,
}

/// What a failure leads to.
enum Verdict {
    /// Restart; `counted` against backoffLimit or not (an Ignore rule).
    Restart {
        counted: bool,
    },
    Fail,
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
                true,
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
            status.progress = Some(JobProgress::new(&report, Time(self.now)));
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

    /// Finished jobs: keep applying cleanPodPolicy, then the TTL.
    fn finished(mut self) -> Plan {
        self.clean_pods(self.job.spec.clean_pod_policy);
        let ttl = self.job.spec.run_policy().ttl_seconds_after_finished;
        if let (Some(ttl), Some(done)) = (ttl, self.sb.status.completion_time.clone()) {
            let left = i64::from(ttl).saturating_sub(secs_between(&done, self.now));
            if left <= 0 {
                self.steps.push(Step::DeleteJob);
            } else {
                self.wake(left);
            }
        }
        let epoch = self.epoch;
        let pods = self.pods;
        let current: Vec<&ObservedPod> = pods.iter().filter(|p| p.epoch == epoch).collect();
        self.done(Replicas::After(&current), false)
    }

    /// Failed before or while running, for a reason no pod gave.
    fn refused(mut self, reason: &str, message: &str) -> Plan {
        self.sb.finish(JobPhase::Failed, reason, message);
        self.clean_pods(self.job.spec.clean_pod_policy);
        self.wake_for_ttl();
        let epoch = self.epoch;
        let pods = self.pods;
        let current: Vec<&ObservedPod> = pods.iter().filter(|p| p.epoch == epoch).collect();
        self.done(Replicas::After(&current), false)
    }

    /// Suspend: no pods, job kept; resume starts again (deadline from resume).
    fn suspended(mut self) -> Plan {
        self.clean_pods(CleanPodPolicy::All);
        let message = format!("DGLJob {} is suspended.", self.name);
        for t in IN_PROGRESS {
            self.sb.clear(t, "JobSuspended", &message);
        }
        self.sb
            .set(JobPhase::Suspended, true, "JobSuspended", &message);
        self.sb.status.start_time = None;
        self.reset_launch = self.launched;
        self.done(Replicas::Cleared, true)
    }

    /// A suspended job that is no longer asked to be: Suspended turns False.
    fn resume(&mut self) {
        if self.sb.is_true(JobPhase::Suspended) {
            let message = format!("DGLJob {} is resumed.", self.name);
            self.sb
                .set(JobPhase::Suspended, false, "JobResumed", &message);
        }
    }

    /// Deletes the pods of earlier runs (the partitioner is shared by all
    /// runs) and returns the current run's.
    fn retire_earlier_runs(&mut self) -> Vec<&'a ObservedPod> {
        let epoch = self.epoch;
        let (current, stale): (Vec<&ObservedPod>, Vec<&ObservedPod>) = self
            .pods
            .iter()
            .partition(|p| p.epoch == epoch || p.role == ReplicaType::Partitioner);
        for p in stale {
            if p.state != PodState::Terminating {
                self.steps.push(Step::DeletePod(p.name.clone()));
            }
        }
        current
    }

    /// Starts the clock if it is not running; true once activeDeadlineSeconds
    /// has passed, else a wake-up for when it will (timer-driven).
    fn deadline_passed(&mut self) -> bool {
        if self.sb.status.start_time.is_none() {
            self.sb.status.start_time = Some(Time(self.now));
        }
        let deadline = self.job.spec.run_policy().active_deadline_seconds;
        let (Some(deadline), Some(start)) = (deadline, self.sb.status.start_time.clone()) else {
            return false;
        };
        // Saturating: a deadline near i64::MAX and a start time ahead of this
        // clock (skew) must not overflow.
        let left = deadline.saturating_sub(secs_between(&start, self.now));
        if left > 0 {
            self.wake(left);
        }
        left <= 0
    }

    fn deadline_exceeded(mut self, current: &[&ObservedPod]) -> Plan {
        let deadline = self
            .job
            .spec
            .run_policy()
            .active_deadline_seconds
            .unwrap_or_default();
        let message = format!(
            "DGLJob {} was active longer than activeDeadlineSeconds ({deadline}s).",
            self.name
        );
        self.sb
            .finish(JobPhase::Failed, "DeadlineExceeded", &message);
        self.clean_pods(self.job.spec.clean_pod_policy);
        self.wake_for_ttl();
        self.done(Replicas::After(current), false)
    }

    /// A failure in the current run: a failed pod of this run, or (once
    /// training started) a worker or the launcher gone or being deleted by
    /// someone else.
    fn failure(&self, current: &[&ObservedPod]) -> Option<Failure> {
        // Only pods created by this run count: a failed pod of an earlier run
        // that the cache still shows must not trigger a second restart.
        let failed = current
            .iter()
            .filter(|p| p.epoch == self.epoch)
            .find_map(|p| match &p.state {
                PodState::Failed { reason, message } => Some(Failure {
                    role: p.role,
                    reason: reason.clone(),
                    message: message.clone(),
                    facts: p.facts.clone(),
                }),
                _ => None,
            });
        let running = self.sb.is_true(JobPhase::Running);
        // A Pending launcher is still in its watcher-loop (it exists from
        // the job's start): a worker missing then is created again, not a
        // failure. Once its main container ran, its workers are in use. (A
        // Terminating one may be an earlier job's of the same name.)
        let launcher_started = find(current, &self.launcher).is_some_and(|l| {
            matches!(
                l.state,
                PodState::Running { .. } | PodState::Succeeded | PodState::Failed { .. }
            )
        });
        let training_started = launcher_started || running || self.launched;
        if failed.is_some() || !training_started {
            return failed;
        }
        // Launched and not yet training, the run needs its partitioner too:
        // the launcher has its IP and will have the workers fetch their
        // shards from it. (Once training runs, a partitioner gone is made
        // again, as it always was.)
        let partitioner = self.launched && !running && self.job.spec.has_partitioner();
        let expected = (0..self.job.spec.num_workers())
            .map(|i| (ReplicaType::Worker, worker_name(&self.name, i)))
            .chain(partitioner.then(|| (ReplicaType::Partitioner, partitioner_name(&self.name))))
            .chain(running.then(|| (ReplicaType::Launcher, self.launcher.clone())));
        expected.into_iter().find_map(|(role, pod)| {
            let (message, facts) = match find(current, &pod) {
                None => (
                    format!("pod {pod} was deleted while the job was running"),
                    FailureFacts::default(),
                ),
                Some(p) if p.state == PodState::Terminating => (
                    format!("pod {pod} is being deleted while the job was running"),
                    p.facts.clone(),
                ),
                Some(_) => return None,
            };
            Some(Failure {
                role,
                reason: "PodDeleted".into(),
                message,
                facts,
            })
        })
    }

    /// Restarts the run (reusing the partitions) while backoffLimit allows,
    /// else fails the job.
    fn failed_run(mut self, current: &[&ObservedPod], failure: Failure) -> Plan {
        let limit = self.job.spec.run_policy().backoff_limit.unwrap_or(0);
        let Failure {
            role,
            reason,
            message,
            facts,
        } = failure;
        let mut reason = if reason == "PodDeleted" || reason == "Evicted" {
            reason
        } else {
            format!("{role}Failed")
        };
        let (verdict, rule) = self.verdict(&facts, limit);
        let message = match &rule {
            Some(r) => format!("{message}; {r}"),
            None => message,
        };
        if let (Verdict::Fail, Some(_)) = (&verdict, &rule) {
            reason = "PodFailurePolicy".into();
        }
        if let Verdict::Restart { counted } = verdict {
            // Saturating: status fields are anyone's to edit.
            let next = self.epoch.saturating_add(1);
            let msg = if counted {
                let n = next.saturating_sub(self.ignored());
                format!("{message}; restarting (restart {n} of {limit})")
            } else {
                format!("{message}; restarting, not counted against backoffLimit")
            };
            self.sb.clear(JobPhase::Running, &reason, &msg);
            self.sb.set(JobPhase::Restarting, true, &reason, &msg);
            self.sb.status.restart_count = Some(next);
            if !counted {
                self.sb.status.ignored_restarts = Some(self.ignored().saturating_add(1));
            }
            // The next run trains from its start: the last run's report is stale.
            self.sb.status.progress = None;
            // Keep a partitioner that finished its work: the next run reuses it.
            for p in current {
                let keep = p.role == ReplicaType::Partitioner
                    && matches!(
                        p.state,
                        PodState::Succeeded | PodState::Running { ready: true }
                    );
                if !keep && p.state != PodState::Terminating {
                    self.steps.push(Step::DeletePod(p.name.clone()));
                }
            }
        } else {
            let msg = if limit > 0 && rule.is_none() {
                format!("{message}; backoffLimit ({limit}) reached")
            } else {
                message
            };
            self.sb.finish(JobPhase::Failed, &reason, &msg);
            self.clean_pods(self.job.spec.clean_pod_policy);
        }
        let ensure_children = !self.sb.is_true(JobPhase::Failed);
        self.done(Replicas::After(current), ensure_children)
    }

    /// Restarts so far that an Ignore rule made (not counted).
    fn ignored(&self) -> i32 {
        self.sb.status.ignored_restarts.unwrap_or(0)
    }

    /// What runPolicy.podFailurePolicy (first matching rule) and
    /// backoffLimit make of a failure; the rule that decided, described.
    fn verdict(&self, facts: &FailureFacts, limit: i32) -> (Verdict, Option<String>) {
        let run_policy = self.job.spec.run_policy();
        let decided = run_policy
            .pod_failure_policy
            .as_ref()
            .and_then(|p| p.decide(facts));
        let counted_left = self.epoch.saturating_sub(self.ignored()) < limit;
        let describe = |i: usize, a: PodFailurePolicyAction| {
            format!("runPolicy.podFailurePolicy.rules[{i}] ({a:?}) matched")
        };
        match decided {
            Some((i, PodFailurePolicyAction::FailJob)) => (
                Verdict::Fail,
                Some(describe(i, PodFailurePolicyAction::FailJob)),
            ),
            Some((i, PodFailurePolicyAction::Ignore)) if self.ignored() < MAX_IGNORED_RESTARTS => {
                let r = describe(i, PodFailurePolicyAction::Ignore);
                (Verdict::Restart { counted: false }, Some(r))
            }
            Some((i, a)) => {
                let r = Some(format!("{}; counted", describe(i, a)));
                if counted_left {
                    (Verdict::Restart { counted: true }, r)
                } else {
                    let r = r.map(|r| format!("{r}, backoffLimit ({limit}) reached"));
                    (Verdict::Fail, r)
                }
            }
            None if counted_left => (Verdict::Restart { counted: true }, None),
            None => (Verdict::Fail, None),
        }
    }

    /// The launcher exited 0: the job succeeded.
    fn succeeded(mut self, current: &[&ObservedPod]) -> Plan {
        let message = format!("DGLJob {} successfully completed.", self.name);
        self.sb
            .finish(JobPhase::Succeeded, "JobSucceeded", &message);
        self.clean_pods(self.job.spec.clean_pod_policy);
        self.wake_for_ttl();
        self.done(Replicas::After(current), false)
    }

    /// Forward: the partitioner, the workers and the launcher at once (the
    /// workers once the partitions are made under `AfterPartitioning`); the
    /// launch once the partitions are made and every worker is Ready with
    /// an IP.
    fn forward(mut self, current: &[&ObservedPod], cfg: &BuildConfig) -> Plan {
        // Every pod starts at once: images pull and preflights run while
        // the graph is partitioned. None reads a shard before the launcher
        // asks, and the launcher trains only once the ConfigMap launches
        // its run (written below), which needs the partitions made and
        // every worker Ready with its IP.
        let partitioned = self.partition(current, cfg);
        let early = self.job.spec.worker_creation_policy() == WorkerCreationPolicy::AtStartup;
        // `workers` creates the missing ones: not while AfterPartitioning waits.
        let workers_ready = (early || partitioned) && self.workers(current, cfg);
        let launch = workers_ready && partitioned;
        match find(current, &self.launcher) {
            None => self.create(builders::launcher_pod(self.job, self.epoch, cfg)),
            // Running before the launch would be a pod that skipped its
            // watcher-loop: not the job running.
            Some(p) if launch && matches!(p.state, PodState::Running { .. }) => {
                self.launcher_running(p)
            }
            _ => {}
        }
        // Without workers the launcher trains alone: nothing to launch.
        if launch && !self.job.spec.is_standalone() {
            self.launch = Some(self.epoch);
        }
        self.done(Replicas::After(current), true)
    }

    /// The launcher runs: so does the job, once the graph is partitioned.
    fn launcher_running(&mut self, launcher: &ObservedPod) {
        if self.workers_partitioned(launcher) {
            let message = format!("DGLJob {} is running.", self.name);
            self.sb.clear(JobPhase::Restarting, "JobRunning", &message);
            self.sb.set(JobPhase::Running, true, "JobRunning", &message);
        }
    }

    /// DistParMETIS: the running launcher drives the workers' partitioning
    /// and turns Ready when it is done (`dglrun probe --partitioned`); until
    /// then the job is Partitioning, not Running. Other modes: always true.
    fn workers_partitioned(&mut self, launcher: &ObservedPod) -> bool {
        if self.job.spec.partition_mode != PartitionMode::DistParMetis {
            return true;
        }
        if launcher.is_ready() {
            self.mark_partitioned();
            return true;
        }
        if !self.sb.is_true(JobPhase::Partitioned) {
            let message = format!(
                "The worker pods of DGLJob {} are partitioning the graph (DistParMETIS).",
                self.name
            );
            self.sb
                .set(JobPhase::Partitioning, true, "JobPartitioning", &message);
        }
        false
    }

    fn mark_partitioned(&mut self) {
        let message = "The graph is partitioned.";
        self.sb
            .clear(JobPhase::Partitioning, "JobPartitioned", message);
        self.sb
            .set(JobPhase::Partitioned, true, "JobPartitioned", message);
    }

    /// Creates the partitioner if missing; true once it serves the shards
    /// (Ready) or finished, and always in a mode without one.
    fn partition(&mut self, current: &[&ObservedPod], cfg: &BuildConfig) -> bool {
        if !self.job.spec.has_partitioner() {
            return true;
        }
        let partitioned = match find(current, &partitioner_name(&self.name)) {
            Some(p) => p.is_ready() || p.state == PodState::Succeeded,
            None => {
                self.create(builders::partitioner_pod(self.job, self.epoch, cfg));
                false
            }
        };
        if partitioned {
            self.mark_partitioned();
        } else if !self.sb.is_true(JobPhase::Partitioned) {
            let message = format!(
                "The partitioner pod of DGLJob {} is partitioning the graph.",
                self.name
            );
            self.sb
                .set(JobPhase::Partitioning, true, "JobPartitioning", &message);
        }
        partitioned
    }

    /// Creates missing workers; true when every worker is Ready with an IP.
    fn workers(&mut self, current: &[&ObservedPod], cfg: &BuildConfig) -> bool {
        let mut ready = true;
        for i in 0..self.job.spec.num_workers() {
            match find(current, &worker_name(&self.name, i)) {
                Some(p) => ready &= p.is_ready() && p.ip.is_some(),
                None => {
                    self.create(builders::worker_pod(self.job, i, self.epoch, cfg));
                    ready = false;
                }
            }
        }
        ready
    }

    /// Creates `pod` unless a pod of that name still exists: one being
    /// deleted (an earlier run) blocks the new one, and its deletion event
    /// brings the job back.
    fn create(&mut self, pod: Pod) {
        let name = pod.name_any();
        if !self.pods.iter().any(|p| p.name == name) {
            self.steps.push(Step::CreatePod(Box::new(pod)));
        }
    }
}

/// The conditions of a job on its way; cleared when it stops.
const IN_PROGRESS: [JobPhase; 3] = [
    JobPhase::Partitioning,
    JobPhase::Running,
    JobPhase::Restarting,
];

struct StatusBuilder {
    status: DGLJobStatus,
    now: Time,
    generation: Option<i64>,
}

impl StatusBuilder {
    fn is_true(&self, t: JobPhase) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.type_ == t.as_str() && c.status == "True")
    }

    /// Sets a condition, keeping lastTransitionTime when the status does not
    /// change (and the reason/message stay unless given new ones).
    fn set(&mut self, t: JobPhase, value: bool, reason: &str, message: &str) {
        let status = if value { "True" } else { "False" };
        match self
            .status
            .conditions
            .iter_mut()
            .find(|c| c.type_ == t.as_str())
        {
            Some(c) => {
                if c.status != status {
                    c.status = status.into();
                    c.last_transition_time = self.now.clone();
                }
                c.reason = reason.into();
                c.message = message.into();
                c.observed_generation = self.generation;
            }
            None => {
                if !value {
                    return; // a False condition that never was True says nothing
                }
                self.status.conditions.push(Condition {
                    type_: t.as_str().into(),
                    status: status.into(),
                    reason: reason.into(),
                    message: message.into(),
                    last_transition_time: self.now.clone(),
                    observed_generation: self.generation,
                });
            }
        }
    }

    /// Turns a condition False if it is True (same reason kept otherwise).
    fn clear(&mut self, t: JobPhase, reason: &str, message: &str) {
        if self.is_true(t) {
            self.set(t, false, reason, message);
        }
    }

    /// Clears the in-progress conditions when the job reaches `terminal`.
    fn finish(&mut self, terminal: JobPhase, reason: &str, message: &str) {
        for t in IN_PROGRESS {
            self.clear(t, reason, message);
        }
        self.set(terminal, true, reason, message);
        if self.status.completion_time.is_none() {
            self.status.completion_time = Some(self.now.clone());
        }
    }

    /// The phase shown is the most decisive True condition: this is a
    /// priority order, not the list of phases ([`JobPhase::ALL`]).
    fn derive_phase(&mut self) {
        use JobPhase::*;
        let priority = [
            Failed,
            Succeeded,
            Suspended,
            Restarting,
            Running,
            Partitioned,
            Partitioning,
            Created,
        ];
        self.status.phase = priority.into_iter().find(|p| self.is_true(*p));
    }
}

fn counts(pods: &[&ObservedPod]) -> BTreeMap<ReplicaType, ReplicaStatus> {
    let mut out = BTreeMap::new();
    for p in pods {
        // A pod on its way out is not counted, nor does it keep its role listed.
        if p.state == PodState::Terminating {
            continue;
        }
        let e: &mut ReplicaStatus = out.entry(p.role).or_default();
        match p.state {
            PodState::Pending | PodState::Running { .. } => e.active += 1,
            PodState::Succeeded => e.succeeded += 1,
            PodState::Failed { .. } => e.failed += 1,
            PodState::Terminating => {}
        }
    }
    out
}

/// Replica counts as they will be once this plan's steps are done: a pod it
/// deletes no longer counts, a pod it creates counts as active. The status
/// is written before the steps run, so counting them now saves a second
/// status write when their watch events arrive.
fn counts_after(pods: &[&ObservedPod], steps: &[Step]) -> BTreeMap<ReplicaType, ReplicaStatus> {
    let deleting: Vec<&str> = steps
        .iter()
        .flat_map(Step::deleted_pods)
        .map(String::as_str)
        .collect();
    let kept: Vec<&ObservedPod> = pods
        .iter()
        .filter(|p| !deleting.contains(&p.name.as_str()))
        .copied()
        .collect();
    let mut out = counts(&kept);
    for s in steps {
        if let Step::CreatePod(pod) = s {
            if let Some(o) = ObservedPod::from_pod(pod) {
                out.entry(o.role).or_default().active += 1;
            }
        }
    }
    out
}

/// The pods to delete under `policy` when the job ends, as one step (none
/// when there is nothing to delete).
fn clean_pods(policy: CleanPodPolicy, pods: &[ObservedPod]) -> Option<Step> {
    let names: Vec<String> = pods
        .iter()
        .filter(|p| p.state != PodState::Terminating)
        .filter(|p| match policy {
            CleanPodPolicy::All => true,
            CleanPodPolicy::Running => p.is_active(),
            CleanPodPolicy::None => false,
        })
        .map(|p| p.name.clone())
        .collect();
    (!names.is_empty()).then(|| Step::CleanPods {
        running_only: policy == CleanPodPolicy::Running,
        pods: names,
    })
}

fn secs_between(from: &Time, to: Timestamp) -> i64 {
    to.as_second().saturating_sub(from.0.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgl_api::names::{launcher_name, partitioner_name, worker_name};
    use dgl_api::{PartitionMode, RunPolicy};

    const JOB: &str = "dgl-graphsage";

    fn job() -> DGLJob {
        let mut job: DGLJob =
            serde_yaml::from_str(include_str!("../../examples/seed-dgljob.yaml")).unwrap();
        job.metadata.uid = Some("uid-1".into());
        job.metadata.generation = Some(1);
        job
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn pod(role: ReplicaType, index: i32, epoch: i32, state: PodState) -> ObservedPod {
        let name = match role {
            ReplicaType::Launcher => launcher_name(JOB),
            ReplicaType::Partitioner => partitioner_name(JOB),
            ReplicaType::Worker => worker_name(JOB, index),
        };
        ObservedPod {
            name,
            role,
            index,
            epoch,
            state,
            ip: Some(format!("10.0.0.{}", 10 + index)),
            progress: None,
            facts: Default::default(),
        }
    }

    fn ready() -> PodState {
        PodState::Running { ready: true }
    }

    fn failed(msg: &str) -> PodState {
        PodState::Failed {
            reason: "ContainerFailed".into(),
            message: msg.into(),
        }
    }

    /// Runs plan and feeds its status back into the job, as the API would.
    fn step(job: &mut DGLJob, pods: &[ObservedPod], now: Timestamp) -> Plan {
        let p = plan(job, pods, now, &BuildConfig::default(), None);
        job.status = Some(p.status.clone());
        p
    }

    fn created(p: &Plan) -> Vec<String> {
        p.steps
            .iter()
            .filter_map(|s| match s {
                Step::CreatePod(pod) => Some(pod.name_any()),
                _ => None,
            })
            .collect()
    }

    fn deleted(p: &Plan) -> Vec<String> {
        p.steps
            .iter()
            .flat_map(Step::deleted_pods)
            .cloned()
            .collect()
    }

    fn cond(p: &Plan, t: JobPhase) -> Option<&Condition> {
        p.status.conditions.iter().find(|c| c.type_ == t.as_str())
    }

    fn running_job() -> (DGLJob, Vec<ObservedPod>) {
        let mut j = job();
        let pods = vec![
            pod(ReplicaType::Partitioner, 0, 0, ready()),
            pod(ReplicaType::Worker, 0, 0, ready()),
            pod(ReplicaType::Worker, 1, 0, ready()),
            pod(
                ReplicaType::Launcher,
                0,
                0,
                PodState::Running { ready: false },
            ),
        ];
        step(&mut j, &pods, t(0));
        (j, pods)
    }

    #[test]
    fn the_launchers_progress_reaches_the_status_only_when_it_changed() {
        let (mut j, mut pods) = running_job();
        let report = |p: &Plan| p.status.progress.clone();
        pods[3].progress = Some(r#"{"epoch":3,"epochs":10,"loss":0.41}"#.into());
        let p = step(&mut j, &pods, t(1));
        let first = report(&p).expect("a report");
        assert_eq!(first.summary, "epoch 3/10");
        assert_eq!((first.epoch, first.loss), (3, Some(0.41)));
        assert_eq!(first.updated_at, Some(Time(t(1))));
        // The same report later: the status stays as it is (no write).
        assert_eq!(report(&step(&mut j, &pods, t(2))), Some(first.clone()));
        // A bad annotation changes nothing.
        pods[3].progress = Some("{not json".into());
        assert_eq!(report(&step(&mut j, &pods, t(3))), Some(first));
        pods[3].progress = Some(r#"{"epoch":10,"epochs":10}"#.into());
        let p = step(&mut j, &pods, t(4));
        assert_eq!(report(&p).unwrap().updated_at, Some(Time(t(4))));
        // Succeeded keeps the last report, also once the launcher is gone.
        pods[3].state = PodState::Succeeded;
        let p = step(&mut j, &pods, t(5));
        assert_eq!(p.status.phase, Some(JobPhase::Succeeded));
        assert_eq!(report(&p).unwrap().summary, "epoch 10/10");
        assert_eq!(
            report(&step(&mut j, &[], t(6))).unwrap().summary,
            "epoch 10/10"
        );
    }

    #[test]
    fn a_restart_clears_the_last_runs_progress() {
        let (mut j, mut pods) = running_job();
        j.spec.run_policy = Some(RunPolicy {
            backoff_limit: Some(1),
            ..Default::default()
        });
        pods[3].progress = Some(r#"{"epoch":2}"#.into());
        assert!(step(&mut j, &pods, t(1)).status.progress.is_some());
        pods[1].state = failed("pod w: container c exited with code 3");
        let p = step(&mut j, &pods, t(2));
        assert_eq!(p.status.phase, Some(JobPhase::Restarting));
        assert_eq!(
            p.status.progress, None,
            "the old launcher's report is stale"
        );
    }

    #[test]
    fn after_partitioning_holds_the_workers_until_the_partitioner_serves() {
        let mut j = job();
        j.spec.worker_creation_policy = Some(WorkerCreationPolicy::AfterPartitioning);
        let p = step(&mut j, &[], t(0));
        assert_eq!(
            created(&p),
            vec![partitioner_name(JOB), launcher_name(JOB)],
            "no worker yet"
        );
        assert_eq!(p.status.phase, Some(JobPhase::Partitioning));

        let mut pods = vec![
            pod(
                ReplicaType::Partitioner,
                0,
                0,
                PodState::Running { ready: false },
            ),
            pod(ReplicaType::Launcher, 0, 0, PodState::Pending),
        ];
        let p = step(&mut j, &pods, t(1));
        assert!(created(&p).is_empty(), "still partitioning: no worker");

        pods[0].state = ready();
        let p = step(&mut j, &pods, t(2));
        assert_eq!(
            created(&p),
            vec![worker_name(JOB, 0), worker_name(JOB, 1)],
            "the workers once the partitions are served"
        );
        assert_eq!(p.launch, None, "no launch before the workers are ready");
        assert_eq!(p.status.phase, Some(JobPhase::Partitioned));

        pods.push(pod(ReplicaType::Worker, 0, 0, ready()));
        pods.push(pod(ReplicaType::Worker, 1, 0, ready()));
        let p = step(&mut j, &pods, t(3));
        assert_eq!(p.launch, Some(0));
    }

    #[test]
    fn after_partitioning_changes_nothing_without_a_partitioner() {
        let mut j = job();
        j.spec.partition_mode = PartitionMode::Skip;
        j.spec.worker_creation_policy = Some(WorkerCreationPolicy::AfterPartitioning);
        let p = step(&mut j, &[], t(0));
        assert_eq!(
            created(&p),
            vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)],
            "nothing to wait for in Skip mode"
        );
    }

    #[test]
    fn dgl_api_job_starts_every_pod_then_launches_in_order() {
        let mut j = job();
        // Every pod at once (image pulls, preflights); no launch yet.
        let p = step(&mut j, &[], t(0));
        assert_eq!(
            created(&p),
            vec![
                partitioner_name(JOB),
                worker_name(JOB, 0),
                worker_name(JOB, 1),
                launcher_name(JOB)
            ]
        );
        assert_eq!(p.launch, None);
        assert_eq!(p.status.replica_statuses[&ReplicaType::Launcher].active, 1);
        assert_eq!(p.status.phase, Some(JobPhase::Partitioning));
        assert_eq!(cond(&p, JobPhase::Created).unwrap().reason, "JobCreated");
        assert_eq!(p.status.start_time, Some(Time(t(0))));

        // A launcher Running before its launch skipped its watcher-loop:
        // the job is not running.
        let mut pods = vec![
            pod(
                ReplicaType::Partitioner,
                0,
                0,
                PodState::Running { ready: false },
            ),
            pod(ReplicaType::Worker, 0, 0, ready()),
            pod(ReplicaType::Worker, 1, 0, ready()),
            pod(
                ReplicaType::Launcher,
                0,
                0,
                PodState::Running { ready: false },
            ),
        ];
        let p = step(&mut j, &pods, t(1));
        assert!(created(&p).is_empty());
        assert_eq!(
            p.launch, None,
            "no launch before the partitions are made, workers ready or not"
        );
        assert_eq!(p.status.phase, Some(JobPhase::Partitioning));

        pods[3].state = PodState::Pending;
        pods[0].state = ready();
        pods[2].state = PodState::Pending;
        let p = step(&mut j, &pods, t(2));
        assert_eq!(p.status.phase, Some(JobPhase::Partitioned));
        assert_eq!(cond(&p, JobPhase::Partitioning).unwrap().status, "False");
        let p = step(&mut j, &pods, t(3));
        assert_eq!(p.launch, None, "no launch before every worker is ready");
        pods[2].state = ready();
        pods[2].ip = None;
        assert_eq!(
            step(&mut j, &pods, t(3)).launch,
            None,
            "a worker without an IP is not ready"
        );
        pods[2].ip = Some("10.0.0.11".into());
        let p = step(&mut j, &pods, t(4));
        assert_eq!(p.launch, Some(0));
        assert!(created(&p).is_empty());

        pods[3].state = PodState::Running { ready: false };
        let p = step(&mut j, &pods, t(5));
        assert_eq!(p.status.phase, Some(JobPhase::Running));
        assert_eq!(p.status.replica_statuses[&ReplicaType::Worker].active, 2);

        pods[3].state = PodState::Succeeded;
        let p = step(&mut j, &pods, t(9));
        assert_eq!(p.status.phase, Some(JobPhase::Succeeded));
        assert_eq!(p.status.completion_time, Some(Time(t(9))));
        assert_eq!(cond(&p, JobPhase::Running).unwrap().status, "False");
        // cleanPodPolicy Running: the serving partitioner and workers go.
        let mut d = deleted(&p);
        d.sort();
        assert_eq!(
            d,
            vec![
                partitioner_name(JOB),
                worker_name(JOB, 0),
                worker_name(JOB, 1)
            ]
        );
        assert!(!p.ensure_children);
    }

    #[test]
    fn replanning_without_change_keeps_status_identical() {
        let (mut j, pods) = running_job();
        let before = j.status.clone().unwrap();
        let p = step(&mut j, &pods, t(100));
        assert_eq!(
            p.status, before,
            "a reconcile without news must not write status"
        );
    }

    #[test]
    fn pods_count_when_created_or_deleted_so_their_events_write_nothing() {
        let mut j = job();
        let p = step(&mut j, &[], t(0));
        assert_eq!(
            p.status.replica_statuses[&ReplicaType::Partitioner].active,
            1
        );
        // The partitioner's own watch event changes nothing.
        let before = j.status.clone();
        let pods = vec![pod(ReplicaType::Partitioner, 0, 0, PodState::Pending)];
        assert_eq!(Some(step(&mut j, &pods, t(1)).status), before);

        // Success under cleanPodPolicy Running: the pods it deletes stop
        // counting in the same write; their deletion events write nothing.
        let (mut j, mut pods) = running_job();
        pods[3].state = PodState::Succeeded;
        let p = step(&mut j, &pods, t(5));
        assert!(!p.status.replica_statuses.contains_key(&ReplicaType::Worker));
        assert_eq!(
            p.status.replica_statuses[&ReplicaType::Launcher].succeeded,
            1
        );
        for p in pods.iter_mut().take(3) {
            p.state = PodState::Terminating;
        }
        let before = j.status.clone();
        assert_eq!(Some(step(&mut j, &pods, t(6)).status.clone()), before);
        pods.drain(..3); // gone: only the launcher is left
        assert_eq!(Some(step(&mut j, &pods, t(7)).status), before);
    }

    #[test]
    fn each_run_is_launched_with_its_own_number() {
        let (mut j, mut pods) = running_job();
        assert_eq!(step(&mut j, &pods, t(10)).launch, Some(0));
        // Worker 1 fails: run 1 starts every pod again, launched only once
        // its own workers are Ready (the ConfigMap keeps run 0 until then).
        j.spec.run_policy = Some(RunPolicy {
            backoff_limit: Some(1),
            ..Default::default()
        });
        pods[2].state = failed("pod w1: container c exited with code 1");
        let p = step(&mut j, &pods, t(11));
        assert_eq!(p.status.phase, Some(JobPhase::Restarting));
        assert_eq!(p.launch, None);
        let run1 = vec![pod(ReplicaType::Partitioner, 0, 0, ready())];
        let p = step(&mut j, &run1, t(12));
        assert_eq!(
            created(&p),
            vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)]
        );
        assert_eq!(p.launch, None);
        pods = run1;
        pods.push(pod(ReplicaType::Worker, 0, 1, ready()));
        pods.push(pod(ReplicaType::Worker, 1, 1, ready()));
        pods.push(pod(ReplicaType::Launcher, 0, 1, PodState::Pending));
        assert_eq!(step(&mut j, &pods, t(13)).launch, Some(1));
    }

    #[test]
    fn a_worker_missing_before_training_is_created_again() {
        let mut j = job();
        j.spec.partition_mode = PartitionMode::Skip;
        step(&mut j, &[], t(0));
        // The launcher waits in its watcher-loop (Pending): worker 1 is
        // made again, the job does not fail.
        let mut pods = vec![
            pod(ReplicaType::Worker, 0, 0, ready()),
            pod(ReplicaType::Launcher, 0, 0, PodState::Pending),
        ];
        let p = step(&mut j, &pods, t(1));
        assert_eq!(created(&p), vec![worker_name(JOB, 1)]);
        assert!(cond(&p, JobPhase::Failed).is_none());
        // An earlier job's launcher of the same name (shown Terminating)
        // is not this job's training either.
        pods[1].state = PodState::Terminating;
        let p = step(&mut j, &pods, t(2));
        assert_eq!(created(&p), vec![worker_name(JOB, 1)]);
        assert!(cond(&p, JobPhase::Failed).is_none());
        // Once its main container runs, a missing worker fails the run.
        pods[1].state = PodState::Running { ready: false };
        let p = step(&mut j, &pods, t(3));
        assert_eq!(cond(&p, JobPhase::Failed).unwrap().reason, "PodDeleted");
    }

    #[test]
    fn a_pod_replaced_after_the_launch_fails_the_run() {
        let mut j = job();
        step(&mut j, &[], t(0));
        let pods = vec![
            pod(ReplicaType::Partitioner, 0, 0, ready()),
            pod(ReplicaType::Worker, 0, 0, ready()),
            pod(ReplicaType::Worker, 1, 0, ready()),
            pod(ReplicaType::Launcher, 0, 0, PodState::Pending),
        ];
        assert_eq!(step(&mut j, &pods, t(1)).launch, Some(0));
        // The partitioner is deleted while the launcher is still in its
        // watcher-loop. Not launched yet: it is simply made again.
        let gone: Vec<ObservedPod> = pods[1..].to_vec();
        let p = plan(&j, &gone, t(2), &BuildConfig::default(), None);
        assert_eq!(created(&p), vec![partitioner_name(JOB)]);
        assert!(cond(&p, JobPhase::Failed).is_none());
        // Launched (the ConfigMap holds run 0): the launcher may have its
        // IP, so the run fails (and may restart), naming the pod.
        let p = plan(&j, &gone, t(2), &BuildConfig::default(), Some(0));
        let c = cond(&p, JobPhase::Failed).unwrap();
        assert_eq!(c.reason, "PodDeleted");
        assert!(c.message.contains("partitioner"), "{}", c.message);
        // A launch of an earlier run does not count for this one.
        j.status.as_mut().unwrap().restart_count = Some(1);
        let p = plan(&j, &[], t(3), &BuildConfig::default(), Some(0));
        assert!(cond(&p, JobPhase::Failed).is_none());
    }

    #[test]
    fn a_suspended_launch_is_taken_back_for_the_resumed_run() {
        let (mut j, pods) = running_job();
        j.spec.run_policy = Some(RunPolicy {
            suspend: Some(true),
            ..Default::default()
        });
        let p = plan(&j, &pods, t(10), &BuildConfig::default(), Some(0));
        assert_eq!(p.status.phase, Some(JobPhase::Suspended));
        assert!(p.reset_launch, "run 0 resumes under the same number");
        let p = plan(&j, &pods, t(10), &BuildConfig::default(), None);
        assert!(!p.reset_launch, "nothing to take back");
    }

    #[test]
    fn skip_mode_starts_workers_at_once() {
        let mut j = job();
        j.spec.partition_mode = PartitionMode::Skip;
        let p = step(&mut j, &[], t(0));
        assert_eq!(
            created(&p),
            vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)]
        );
        assert!(cond(&p, JobPhase::Partitioning).is_none());
    }

    /// The seed's Launcher-only jobs (partitionMode Skip, no Worker).
    fn standalone_job() -> DGLJob {
        let mut j = job();
        j.spec.partition_mode = PartitionMode::Skip;
        j.spec.dgl_replica_specs.remove(&ReplicaType::Worker);
        j
    }

    #[test]
    fn a_standalone_job_is_its_launcher() {
        let mut j = standalone_job();
        j.spec.run_policy = Some(RunPolicy {
            backoff_limit: Some(1),
            active_deadline_seconds: Some(600),
            ..Default::default()
        });
        // At once: no partitioner, no worker, no ConfigMap to wait for.
        let p = plan(&j, &[], t(0), &BuildConfig::default(), None);
        assert_eq!(created(&p), vec![launcher_name(JOB)]);
        assert!(cond(&p, JobPhase::Partitioning).is_none());
        assert_eq!(
            p.requeue_after,
            Some(Duration::from_secs(600)),
            "the deadline applies"
        );
        step(&mut j, &[], t(0));
        let mut pods = vec![pod(
            ReplicaType::Launcher,
            0,
            0,
            PodState::Running { ready: false },
        )];
        let p = step(&mut j, &pods, t(1));
        assert_eq!(p.status.phase, Some(JobPhase::Running));
        assert!(!p.status.replica_statuses.contains_key(&ReplicaType::Worker));

        // Its failure is the job's; backoffLimit restarts it.
        pods[0].state = failed("pod l: container c exited with code 3");
        let p = step(&mut j, &pods, t(2));
        assert_eq!(p.status.phase, Some(JobPhase::Restarting));
        assert_eq!(deleted(&p), vec![launcher_name(JOB)]);
        let p = step(&mut j, &[], t(3));
        let launcher = p.steps.iter().find_map(|s| match s {
            Step::CreatePod(pod) => Some(pod.clone()),
            _ => None,
        });
        let labels = launcher.unwrap().metadata.labels.unwrap();
        assert_eq!(labels[dgl_api::names::LABEL_RUN], "1");
        let mut pods = vec![pod(ReplicaType::Launcher, 0, 1, PodState::Succeeded)];
        let p = step(&mut j, &pods, t(4));
        assert_eq!(p.status.phase, Some(JobPhase::Succeeded));

        // No restarts left: the second failure fails the job.
        let mut j = standalone_job();
        step(&mut j, &[], t(0));
        pods[0] = pod(ReplicaType::Launcher, 0, 0, failed("exited with code 2"));
        let p = step(&mut j, &pods, t(1));
        assert_eq!(cond(&p, JobPhase::Failed).unwrap().reason, "LauncherFailed");
    }

    #[test]
    fn worker_failure_fails_the_job_naming_the_pod() {
        let (mut j, mut pods) = running_job();
        pods[2].state =
            failed("pod dgl-graphsage-worker-1: container main exited with code 3 (Error)");
        let p = step(&mut j, &pods, t(10));
        assert_eq!(p.status.phase, Some(JobPhase::Failed));
        let c = cond(&p, JobPhase::Failed).unwrap();
        assert_eq!(c.reason, "WorkerFailed");
        assert!(c.message.contains("dgl-graphsage-worker-1") && c.message.contains("code 3"));
        // cleanPodPolicy Running deletes what is still active, keeps the failed pod.
        let d = deleted(&p);
        assert!(d.contains(&launcher_name(JOB)) && d.contains(&worker_name(JOB, 0)));
        assert!(!d.contains(&worker_name(JOB, 1)));
    }

    #[test]
    fn partitioner_and_launcher_failures_name_their_role() {
        let mut j = job();
        let pods = vec![pod(
            ReplicaType::Partitioner,
            0,
            0,
            failed("pod p: container c exited with code 2"),
        )];
        let p = step(&mut j, &pods, t(1));
        assert_eq!(
            cond(&p, JobPhase::Failed).unwrap().reason,
            "PartitionerFailed"
        );

        let (mut j, mut pods) = running_job();
        pods[3].state = failed("pod l: container c exited with code 1");
        let p = step(&mut j, &pods, t(1));
        assert_eq!(cond(&p, JobPhase::Failed).unwrap().reason, "LauncherFailed");
    }

    #[test]
    fn clean_pod_policies() {
        for (policy, expect) in [
            (CleanPodPolicy::All, 4usize),
            (CleanPodPolicy::Running, 3),
            (CleanPodPolicy::None, 0),
        ] {
            let (mut j, mut pods) = running_job();
            j.spec.clean_pod_policy = policy;
            pods[3].state = PodState::Succeeded;
            let p = step(&mut j, &pods, t(5));
            assert_eq!(deleted(&p).len(), expect, "{policy:?}");
            // One step (one request) for all of them, carrying the policy.
            let cleans: Vec<bool> = p
                .steps
                .iter()
                .filter_map(|s| match s {
                    Step::CleanPods { running_only, .. } => Some(*running_only),
                    Step::DeletePod(n) => panic!("{policy:?}: {n} deleted on its own"),
                    _ => None,
                })
                .collect();
            let want = match policy {
                CleanPodPolicy::None => vec![],
                _ => vec![policy == CleanPodPolicy::Running],
            };
            assert_eq!(cleans, want, "{policy:?}");
        }
    }

    fn with_policy(j: &mut DGLJob, backoff: i32) {
        j.spec.run_policy = Some(RunPolicy {
            backoff_limit: Some(backoff),
            pod_failure_policy: Some(
                serde_json::from_value(serde_json::json!({"rules": [
                    {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                    {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}}
                ]}))
                .unwrap(),
            ),
            ..Default::default()
        });
    }

    fn exited(code: i32, disrupted: bool) -> FailureFacts {
        FailureFacts {
            exits: vec![("c".into(), code)],
            conditions: disrupted
                .then(|| ("DisruptionTarget".into(), "True".into()))
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn a_fail_job_rule_fails_at_once_whatever_backoff_allows() {
        let (mut j, mut pods) = running_job();
        with_policy(&mut j, 3);
        pods[1].state = failed("pod w0: container c exited with code 42");
        pods[1].facts = exited(42, false);
        let p = step(&mut j, &pods, t(10));
        assert_eq!(p.status.phase, Some(JobPhase::Failed));
        let c = cond(&p, JobPhase::Failed).unwrap();
        assert_eq!(c.reason, "PodFailurePolicy");
        assert!(
            c.message
                .contains("runPolicy.podFailurePolicy.rules[0] (FailJob) matched"),
            "{}",
            c.message
        );
        assert_eq!(p.status.restart_count, None);
    }

    #[test]
    fn an_ignore_rule_restarts_without_counting_against_backoff() {
        let (mut j, mut pods) = running_job();
        with_policy(&mut j, 0);
        pods[1].state = failed("pod w0: container c exited with code 137");
        pods[1].facts = exited(137, true);
        let p = step(&mut j, &pods, t(10));
        assert_eq!(p.status.phase, Some(JobPhase::Restarting));
        assert_eq!(p.status.restart_count, Some(1));
        assert_eq!(p.status.ignored_restarts, Some(1));
        let c = cond(&p, JobPhase::Restarting).unwrap();
        assert!(c.message.contains("not counted against backoffLimit"));
        // The next run's failure without a matching rule counts: backoffLimit
        // 0 is reached although one restart happened.
        let mut pods = vec![pods[0].clone()];
        pods.push(pod(ReplicaType::Worker, 0, 1, failed("exited with code 1")));
        pods[1].facts = exited(1, false);
        let p = step(&mut j, &pods, t(20));
        assert_eq!(p.status.phase, Some(JobPhase::Failed));
        assert_eq!(cond(&p, JobPhase::Failed).unwrap().reason, "WorkerFailed");
    }

    #[test]
    fn a_count_rule_counts_and_ignores_beyond_the_cap_count_too() {
        let (mut j, mut pods) = running_job();
        with_policy(&mut j, 1);
        pods[1].state = failed("exited with code 2");
        pods[1].facts = exited(2, false);
        let p = step(&mut j, &pods, t(10));
        assert_eq!(p.status.phase, Some(JobPhase::Restarting));
        assert_eq!(p.status.ignored_restarts, None);
        assert!(cond(&p, JobPhase::Restarting)
            .unwrap()
            .message
            .contains("rules[2] (Count) matched; counted; restarting (restart 1 of 1)"));

        let (mut j, mut pods) = running_job();
        with_policy(&mut j, 0);
        let st = j.status.get_or_insert_with(Default::default);
        st.ignored_restarts = Some(MAX_IGNORED_RESTARTS);
        st.restart_count = Some(MAX_IGNORED_RESTARTS);
        for p in pods.iter_mut() {
            p.epoch = MAX_IGNORED_RESTARTS;
        }
        pods[1].state = failed("evicted");
        pods[1].facts = exited(137, true);
        let p = step(&mut j, &pods, t(10));
        assert_eq!(p.status.phase, Some(JobPhase::Failed));
        assert!(cond(&p, JobPhase::Failed)
            .unwrap()
            .message
            .contains("(Ignore) matched; counted, backoffLimit (0) reached"));
    }

    #[test]
    fn backoff_restarts_reuse_the_partitioner_then_fail() {
        let (mut j, mut pods) = running_job();
        j.spec.run_policy = Some(RunPolicy {
            backoff_limit: Some(1),
            ..Default::default()
        });
        pods[1].state = failed("pod w0: container c exited with code 1");
        let p = step(&mut j, &pods, t(10));
        assert_eq!(p.status.phase, Some(JobPhase::Restarting));
        assert_eq!(p.status.restart_count, Some(1));
        let d = deleted(&p);
        assert!(
            !d.contains(&partitioner_name(JOB)),
            "a ready partitioner is reused"
        );
        assert_eq!(d.len(), 3);

        // Old pods still terminating block the new run's names.
        for p in pods.iter_mut().skip(1) {
            p.state = PodState::Terminating;
        }
        let p = step(&mut j, &pods, t(11));
        assert!(created(&p).is_empty());
        assert_eq!(p.status.phase, Some(JobPhase::Restarting));

        // Gone: run 1 starts with new workers.
        pods.truncate(1);
        let p = step(&mut j, &pods, t(12));
        assert_eq!(
            created(&p),
            vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)]
        );
        let run_label = |p: &Plan| match &p.steps[0] {
            Step::CreatePod(pod) => pod.labels()[dgl_api::names::LABEL_RUN].clone(),
            _ => unreachable!(),
        };
        assert_eq!(run_label(&p), "1");

        pods.push(pod(
            ReplicaType::Worker,
            0,
            1,
            failed("pod w0: container c exited with code 1"),
        ));
        let p = step(&mut j, &pods, t(13));
        assert_eq!(p.status.phase, Some(JobPhase::Failed));
        assert!(cond(&p, JobPhase::Failed)
            .unwrap()
            .message
            .contains("backoffLimit (1) reached"));
        assert_eq!(p.status.restart_count, Some(1));
    }

    #[test]
    fn deadline_requeues_then_fails() {
        let mut j = job();
        j.spec.run_policy = Some(RunPolicy {
            active_deadline_seconds: Some(60),
            ..Default::default()
        });
        let p = step(&mut j, &[], t(0));
        assert_eq!(p.requeue_after, Some(Duration::from_secs(60)));
        let pods = vec![pod(
            ReplicaType::Partitioner,
            0,
            0,
            PodState::Running { ready: false },
        )];
        let p = step(&mut j, &pods, t(45));
        assert_eq!(p.requeue_after, Some(Duration::from_secs(15)));
        let p = step(&mut j, &pods, t(60));
        assert_eq!(p.status.phase, Some(JobPhase::Failed));
        assert_eq!(
            cond(&p, JobPhase::Failed).unwrap().reason,
            "DeadlineExceeded"
        );
        assert_eq!(deleted(&p), vec![partitioner_name(JOB)]);
    }

    #[test]
    fn ttl_deletes_the_finished_job() {
        let (mut j, mut pods) = running_job();
        j.spec.run_policy = Some(RunPolicy {
            ttl_seconds_after_finished: Some(30),
            ..Default::default()
        });
        pods[3].state = PodState::Succeeded;
        step(&mut j, &pods, t(100));
        let p = step(&mut j, &pods, t(110));
        assert_eq!(p.requeue_after, Some(Duration::from_secs(20)));
        assert!(!p.steps.iter().any(|s| matches!(s, Step::DeleteJob)));
        let p = step(&mut j, &pods, t(130));
        assert!(p.steps.iter().any(|s| matches!(s, Step::DeleteJob)));
    }

    #[test]
    fn suspend_deletes_pods_and_resume_starts_again() {
        let (mut j, pods) = running_job();
        j.spec.run_policy = Some(RunPolicy {
            suspend: Some(true),
            ..Default::default()
        });
        let p = step(&mut j, &pods, t(10));
        assert_eq!(p.status.phase, Some(JobPhase::Suspended));
        assert_eq!(deleted(&p).len(), 4);
        assert_eq!(cond(&p, JobPhase::Running).unwrap().status, "False");
        j.spec.run_policy = None;
        let p = step(&mut j, &[], t(20));
        assert_eq!(cond(&p, JobPhase::Suspended).unwrap().status, "False");
        assert_eq!(cond(&p, JobPhase::Suspended).unwrap().reason, "JobResumed");
        assert_eq!(
            created(&p),
            vec![
                partitioner_name(JOB),
                worker_name(JOB, 0),
                worker_name(JOB, 1),
                launcher_name(JOB)
            ]
        );
        assert_eq!(p.status.start_time, Some(Time(t(20))));
    }

    #[test]
    fn distparmetis_partitions_on_the_workers_behind_the_launchers_readiness() {
        let mut j = job();
        j.spec.partition_mode = PartitionMode::DistParMetis;
        // Workers and launcher at once, no partitioner.
        let p = step(&mut j, &[], t(0));
        assert_eq!(
            created(&p),
            vec![worker_name(JOB, 0), worker_name(JOB, 1), launcher_name(JOB)]
        );
        let mut pods = vec![
            pod(ReplicaType::Worker, 0, 0, ready()),
            pod(ReplicaType::Worker, 1, 0, PodState::Pending),
            pod(ReplicaType::Launcher, 0, 0, PodState::Pending),
        ];
        assert_eq!(step(&mut j, &pods, t(1)).launch, None);
        pods[1].state = ready();
        assert_eq!(step(&mut j, &pods, t(1)).launch, Some(0));
        // The launcher runs mpirun: Partitioning, not yet Running.
        pods[2].state = PodState::Running { ready: false };
        let p = step(&mut j, &pods, t(2));
        assert_eq!(p.status.phase, Some(JobPhase::Partitioning));
        assert!(cond(&p, JobPhase::Running).is_none());
        assert!(cond(&p, JobPhase::Partitioning)
            .unwrap()
            .message
            .contains("DistParMETIS"));
        // Ready (the marker exists): Partitioned and Running.
        pods[2].state = ready();
        let p = step(&mut j, &pods, t(3));
        assert_eq!(p.status.phase, Some(JobPhase::Running));
        assert_eq!(cond(&p, JobPhase::Partitioned).unwrap().status, "True");
        assert_eq!(cond(&p, JobPhase::Partitioning).unwrap().status, "False");
        pods[2].state = PodState::Succeeded;
        let p = step(&mut j, &pods, t(4));
        assert_eq!(p.status.phase, Some(JobPhase::Succeeded));
    }

    #[test]
    fn only_a_distparmetis_launcher_waits_for_partitioning() {
        let mut j = job();
        j.spec.partition_mode = PartitionMode::Skip;
        let pods = vec![
            pod(ReplicaType::Worker, 0, 0, ready()),
            pod(ReplicaType::Worker, 1, 0, ready()),
            pod(
                ReplicaType::Launcher,
                0,
                0,
                PodState::Running { ready: false },
            ),
        ];
        let p = step(&mut j, &pods, t(0));
        assert_eq!(p.status.phase, Some(JobPhase::Running));
        assert!(cond(&p, JobPhase::Partitioning).is_none());
    }

    #[test]
    fn a_worker_deleted_mid_run_fails_the_run() {
        let (mut j, mut pods) = running_job();
        pods.remove(2);
        let p = step(&mut j, &pods, t(10));
        let c = cond(&p, JobPhase::Failed).unwrap();
        assert_eq!(c.reason, "PodDeleted");
        assert!(c.message.contains("dgl-graphsage-worker-1"));
    }

    #[test]
    fn transitions_report_each_new_true_condition_once() {
        let mut j = job();
        let p1 = plan(&j, &[], t(0), &BuildConfig::default(), None);
        let tr = transitions(None, &p1.status);
        // Created and Partitioning at once: one Event telling both.
        assert_eq!(
            tr.iter().map(|t| t.type_).collect::<Vec<_>>(),
            vec![JobPhase::Created]
        );
        assert_eq!(tr[0].reason, "JobCreated");
        assert!(
            tr[0].message.contains("is created")
                && tr[0].message.contains("is partitioning the graph"),
            "{}",
            tr[0].message
        );
        // Partitioning later than Created (DistParMETIS, a restart): its own Event.
        let mut before = p1.status.clone();
        before.conditions.retain(|c| c.type_ != "Partitioning");
        let later = transitions(Some(&before), &p1.status);
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].reason, "JobPartitioning");
        j.status = Some(p1.status.clone());
        let p2 = plan(&j, &[], t(5), &BuildConfig::default(), None);
        assert!(transitions(Some(&p1.status), &p2.status).is_empty());
    }
}
