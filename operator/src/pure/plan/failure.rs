//! A failed run: which pod failed, and whether the run restarts
//! (backoffLimit, runPolicy.podFailurePolicy) or the job fails.

use dgl_api::failure_policy::{FailureFacts, PodFailurePolicyAction, MAX_IGNORED_RESTARTS};
use dgl_api::names::{partitioner_name, worker_name};
use dgl_api::{JobPhase, ReplicaType};

use super::{find, Plan, Planner, Replicas, Step};
use crate::pure::observe::{ObservedPod, PodState};

/// A pod failure that ends the current run.
pub(super) struct Failure {
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

impl<'a> Planner<'a> {
    /// A failure in the current run: a failed pod of this run, or (once
    /// training started) a worker or the launcher gone or being deleted by
    /// someone else.
    pub(super) fn failure(&self, current: &[&ObservedPod]) -> Option<Failure> {
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
    pub(super) fn failed_run(mut self, current: &[&ObservedPod], failure: Failure) -> Plan {
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
}
