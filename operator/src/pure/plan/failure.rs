//! A failed run: which pod failed, and whether the run restarts
//! (backoffLimit, runPolicy.podFailurePolicy) or the job fails.

use dgl_api::failure_policy::{FailureFacts, PodFailurePolicyAction, MAX_IGNORED_RESTARTS};
use dgl_api::names::{partitioner_name, worker_name};
use dgl_api::{JobPhase, ReplicaType, EVENT_NODE_LOST};
use k8s_openapi::jiff::Timestamp;

use super::{find, Plan, Planner, Replicas, Step};
use crate::pure::observe::{ObservedPod, PodState};

/// A pod failure that ends the current run.
pub(super) struct Failure {
    role: ReplicaType,
    /// The pod, which orders failures that tie on their cause.
    pod: String,
    reason: String,
    message: String,
    /// What runPolicy.podFailurePolicy's rules match (empty for a pod gone).
    facts: FailureFacts,
}

impl Failure {
    /// Which of a run's failures decides it, smallest first: a pod
    /// Kubernetes disrupted (DisruptionTarget True), then the one that
    /// ended first (a pod gone before any with a time: it left nothing to
    /// say when), then by name. So an evicted or deleted worker decides,
    /// not the launcher that failed because it lost that worker.
    fn cause_order(&self) -> (bool, Option<Timestamp>, &str) {
        (!self.facts.disrupted(), self.facts.ended_at, &self.pod)
    }

    /// A failure the plan finds elsewhere (a node lost: `node_loss.rs`),
    /// with no facts for podFailurePolicy to match: counted.
    pub(super) fn found(role: ReplicaType, pod: &str, reason: &str, message: String) -> Failure {
        Failure {
            role,
            pod: pod.to_string(),
            reason: reason.to_string(),
            message,
            facts: FailureFacts::default(),
        }
    }
}

/// How long a pod may stay Terminating past its deletionTimestamp (the end
/// of its grace period) before it is deleted with grace 0. A kubelet that
/// is alive removes a pod within its grace period; one still there a
/// minute later is on a node that does not answer (NotReady), and would
/// block the pod of its name, which the next run needs, forever.
pub const STUCK_AFTER_SECS: i64 = 60;

/// What a failure leads to.
enum Verdict {
    /// Restart; `counted` against backoffLimit or not (an Ignore rule).
    Restart {
        counted: bool,
    },
    Fail,
}

impl<'a> Planner<'a> {
    /// The failure that decides the current run (see
    /// [`Failure::cause_order`]) among its failed pods and, once training
    /// started, the pods it uses that are gone or being deleted by someone
    /// else.
    pub(super) fn failure(&self, current: &[&ObservedPod]) -> Option<Failure> {
        // Only pods this run uses count: a failed pod of an earlier run that
        // the cache still shows must not trigger a second restart. The one
        // exception is the partitioner kept across a restart (it served
        // then): an earlier run's, but this run's now. An earlier run's
        // failed partitioner was deleted at that restart (Terminating until
        // gone), so one Failed here failed after it was kept (#36 item 2).
        let mut failures: Vec<Failure> = current
            .iter()
            .filter(|p| {
                p.epoch == self.epoch
                    || (p.role == ReplicaType::Partitioner && p.epoch < self.epoch)
            })
            .filter_map(|p| failed(p))
            .collect();
        if self.training_started(current) {
            failures.extend(self.deleted(current));
        } else if !failures.is_empty() {
            // Not yet training, a pod deleted is made again; but one that
            // Kubernetes disrupted may be why another failed.
            failures.extend(
                current
                    .iter()
                    .filter(|p| p.epoch == self.epoch && p.state == PodState::Terminating)
                    .filter(|p| p.facts.disrupted())
                    .map(|p| being_deleted(p.role, p)),
            );
        }
        failures
            .into_iter()
            .min_by(|a, b| a.cause_order().cmp(&b.cause_order()))
    }

    /// A Pending launcher is still in its watcher-loop (it exists from the
    /// job's start): a worker missing then is created again, not a failure.
    /// Once its main container ran, its workers are in use. (A Terminating
    /// one may be an earlier job's of the same name.)
    pub(super) fn training_started(&self, current: &[&ObservedPod]) -> bool {
        let launcher_started = find(current, &self.launcher).is_some_and(|l| {
            matches!(
                l.state,
                PodState::Running { .. } | PodState::Succeeded | PodState::Failed { .. }
            )
        });
        launcher_started || self.sb.is_true(JobPhase::Running) || self.launched
    }

    /// The pods a training run uses that are gone or being deleted.
    fn deleted(&self, current: &[&ObservedPod]) -> Vec<Failure> {
        let running = self.sb.is_true(JobPhase::Running);
        // Launched and not yet training, the run needs its partitioner too:
        // the launcher has its IP and will have the workers fetch their
        // shards from it. (Once training runs, a partitioner gone is made
        // again, as it always was.)
        // (None when the run's partitions came from the partition cache.)
        let reused = find(current, &self.launcher).is_some_and(ObservedPod::reuses_partitions);
        let partitioner = self.launched && !running && self.job.spec.has_partitioner() && !reused;
        let expected = (0..self.job.spec.num_workers())
            .map(|i| (ReplicaType::Worker, worker_name(&self.name, i)))
            .chain(partitioner.then(|| (ReplicaType::Partitioner, partitioner_name(&self.name))))
            .chain(running.then(|| (ReplicaType::Launcher, self.launcher.clone())));
        expected
            .filter_map(|(role, pod)| match find(current, &pod) {
                None => Some(Failure {
                    role,
                    facts: self.gone_facts(&pod),
                    message: format!("pod {pod} was deleted while the job was running"),
                    pod,
                    reason: "PodDeleted".into(),
                }),
                Some(p) if p.state == PodState::Terminating => Some(being_deleted(role, p)),
                // A partitioner that exited 0 after the launch and before
                // training serves the launched run no more. (Workers exit 0
                // at the end of a training that succeeded: not a failure.)
                Some(p) if role == ReplicaType::Partitioner && p.state == PodState::Succeeded => {
                    Some(ended(role, p))
                }
                Some(_) => None,
            })
            .collect()
    }

    /// What the cache kept of this run's pod `name`, gone from it.
    fn gone_facts(&self, name: &str) -> FailureFacts {
        self.gone
            .iter()
            .find(|g| g.name == name && g.epoch == self.epoch)
            .map(|g| g.facts.clone())
            .unwrap_or_default()
    }

    /// Pods stuck Terminating [`STUCK_AFTER_SECS`] past their deletion's
    /// due time are deleted with grace 0 (so the next run can have their
    /// names); a wake-up for the next that may get stuck.
    pub(super) fn force_stuck_deletions(&mut self) {
        let now = self.now.as_second();
        for p in self.pods {
            let Some(due) = p
                .facts
                .deletion_due
                .filter(|_| p.state == PodState::Terminating)
            else {
                continue;
            };
            let left = due
                .as_second()
                .saturating_add(STUCK_AFTER_SECS)
                .saturating_sub(now);
            if left <= 0 {
                self.steps.push(Step::ForceDeletePod(p.name.clone()));
            } else {
                self.wake(left);
            }
        }
    }

    /// Restarts the run (reusing the partitions) while backoffLimit allows,
    /// else fails the job.
    pub(super) fn failed_run(mut self, current: &[&ObservedPod], failure: Failure) -> Plan {
        let limit = self.job.spec.run_policy().backoff_limit.unwrap_or(0);
        let Failure {
            role,
            reason,
            message,
            facts,
            ..
        } = failure;
        let mut reason =
            if reason == "PodDeleted" || reason == "Evicted" || reason == EVENT_NODE_LOST {
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
            self.sb.set(JobPhase::Restarting, &reason, &msg);
            self.sb.status.restart_count = Some(next);
            if !counted {
                self.sb.status.ignored_restarts = Some(self.ignored().saturating_add(1));
            }
            // The next run trains from its start: the last run's report is stale.
            self.sb.status.progress = None;
            // Keep a partitioner that serves: the next run reuses it. One
            // that exited serves no more, so the next run makes a new one.
            for p in current {
                let keep = p.role == ReplicaType::Partitioner
                    && p.state == (PodState::Running { ready: true });
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
}

/// A failed pod's failure; `None` for a pod that did not fail.
fn failed(p: &ObservedPod) -> Option<Failure> {
    match &p.state {
        PodState::Failed { reason, message } => Some(Failure {
            role: p.role,
            pod: p.name.clone(),
            reason: reason.clone(),
            message: message.clone(),
            facts: p.facts.clone(),
        }),
        _ => None,
    }
}

/// A pod being deleted by someone else (an eviction, a drain, a user).
fn being_deleted(role: ReplicaType, p: &ObservedPod) -> Failure {
    let pod = &p.name;
    Failure {
        role,
        message: format!("pod {pod} is being deleted while the job was running"),
        pod: pod.clone(),
        reason: "PodDeleted".into(),
        facts: p.facts.clone(),
    }
}

/// A pod the launched run needs that exited 0 before training started: a
/// partitioner told to stop by an earlier run's launcher.
fn ended(role: ReplicaType, p: &ObservedPod) -> Failure {
    let pod = &p.name;
    Failure {
        role,
        message: format!("pod {pod} exited (Completed) before the launched run could use it"),
        pod: pod.clone(),
        reason: "PodEnded".into(),
        facts: p.facts.clone(),
    }
}
