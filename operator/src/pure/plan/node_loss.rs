//! A node lost mid-run: a pod of the current run whose node's Ready
//! condition is False or Unknown is lost. Kubernetes alone would evict it
//! only after the 300 s `not-ready`/`unreachable` toleration; the plan
//! instead names the node and the pods at once (condition
//! [`CONDITION_NODE_LOST`], a Warning Event), deletes the lost pods with
//! grace 0 (the dead kubelet will never confirm a graceful deletion, and the
//! next run needs their names) and restarts the run like any other failure
//! of it (counted against backoffLimit). The condition turns False when the
//! next run is Running.
//!
//! Which nodes are down is the controller's to know (its node watch); the
//! plan reads it as [`PodsOnDownNodes`], so this stays pure.

use std::collections::BTreeMap;

use dgl_api::{
    DGLJobStatus, JobConditionType, CONDITION_NODE_LOST, EVENT_NODE_LOST,
    REASON_NODE_LOST_RECOVERED, REASON_NODE_NOT_READY,
};
use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::failure::Failure;
use super::{Plan, Planner, Step};
use crate::pure::conditions::{self, ConditionState};
use crate::pure::observe::{ObservedPod, PodState};

/// A node whose Ready condition is False or Unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownNode {
    pub name: String,
    /// The Ready condition's status: `False` or `Unknown`.
    pub ready: String,
    /// Its reason (e.g. `NodeStatusUnknown`: the kubelet stopped posting).
    pub reason: Option<String>,
}

/// The job's pods whose node is down, by pod name.
pub type PodsOnDownNodes = BTreeMap<String, DownNode>;

/// How many lost pods a message names per node before "… (n more)".
const NAMED_MAX: usize = 8;

impl DownNode {
    /// The node `name` is down when its Ready condition is False or
    /// Unknown. A node without a Ready condition (just registered, its
    /// kubelet not yet reporting) is not judged: no pod runs there yet.
    pub fn of(name: &str, conditions: &[NodeCondition]) -> Option<DownNode> {
        let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
        (ready.status != "True").then(|| DownNode {
            name: name.to_string(),
            ready: ready.status.clone(),
            reason: ready.reason.clone().filter(|r| !r.is_empty()),
        })
    }

    /// `node <name> is NotReady (Ready <status>[: <reason>])`.
    fn describe(&self) -> String {
        let reason = self
            .reason
            .as_ref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        format!(
            "node {} is NotReady (Ready {}{reason})",
            self.name, self.ready
        )
    }
}

/// One lost pod and its node.
pub(super) type Lost<'p> = (&'p ObservedPod, &'p DownNode);

impl<'a> Planner<'a> {
    /// Pods being deleted on a down node are deleted with grace 0 at once:
    /// the dead kubelet will never confirm, and each blocks its name.
    pub(super) fn force_down_terminating(&mut self, down: &PodsOnDownNodes) {
        for p in self.pods {
            let forced = self
                .steps
                .iter()
                .any(|s| matches!(s, Step::ForceDeletePod(n) if *n == p.name));
            if p.state == PodState::Terminating && down.contains_key(&p.name) && !forced {
                self.steps.push(Step::ForceDeletePod(p.name.clone()));
            }
        }
    }

    /// The current run's pods (its own and a kept partitioner) that are
    /// pending or running on a down node, by node then pod.
    pub(super) fn lost<'p>(
        &self,
        current: &[&'p ObservedPod],
        down: &'p PodsOnDownNodes,
    ) -> Vec<Lost<'p>> {
        let mut lost: Vec<Lost<'p>> = current
            .iter()
            .filter(|p| p.is_active())
            .filter_map(|p| down.get(&p.name).map(|n| (*p, n)))
            .collect();
        lost.sort_by(|a, b| (&a.1.name, &a.0.name).cmp(&(&b.1.name, &b.0.name)));
        lost
    }

    /// The run lost pods with their node: condition NodeLost, the lost pods
    /// deleted with grace 0, and the run restarted (or the job failed) as
    /// for any failure of it; the others are deleted as in any restart.
    pub(super) fn node_lost(mut self, current: &[&ObservedPod], lost: &[Lost<'_>]) -> Plan {
        let message = lost_message(self.epoch, lost);
        // Another loss before the last one was overcome is a new
        // transition too, so that it gets its own Warning Event.
        let t = JobConditionType::NodeLost;
        self.sb
            .apply(ConditionState::again(t, REASON_NODE_NOT_READY, &message));
        for (p, _) in lost {
            self.steps.push(Step::ForceDeletePod(p.name.clone()));
        }
        // The restart must neither delete them again nor keep a lost
        // partitioner; nor count them among the replicas.
        let rest: Vec<&ObservedPod> = current
            .iter()
            .filter(|p| !lost.iter().any(|(l, _)| l.name == p.name))
            .copied()
            .collect();
        let (first, _) = lost[0];
        let failure = Failure::found(first.role, &first.name, EVENT_NODE_LOST, message);
        self.failed_run(&rest, failure)
    }
}

/// `node <n> is NotReady (…): pods of run <r> lost: a, b; node …`.
fn lost_message(run: i32, lost: &[Lost<'_>]) -> String {
    let mut by_node: BTreeMap<&str, (&DownNode, Vec<&str>)> = BTreeMap::new();
    for (p, n) in lost {
        by_node
            .entry(n.name.as_str())
            .or_insert_with(|| (n, Vec::new()))
            .1
            .push(p.name.as_str());
    }
    by_node
        .values()
        .map(|(node, pods)| {
            let mut named = pods.iter().take(NAMED_MAX).copied().collect::<Vec<_>>();
            let more = pods.len().saturating_sub(NAMED_MAX);
            let more = format!("… ({more} more)");
            if pods.len() > NAMED_MAX {
                named.push(&more);
            }
            format!(
                "{}: pods of run {run} lost: {}",
                node.describe(),
                named.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Deletions of pods on a down node become deletions with grace 0 (a
/// restart's or an earlier run's: the kubelet that would end them is gone).
pub(super) fn force_on_down_nodes(steps: &mut [Step], down: &PodsOnDownNodes) {
    for s in steps.iter_mut() {
        if let Step::DeletePod(n) = s {
            if down.contains_key(n.as_str()) {
                *s = Step::ForceDeletePod(std::mem::take(n));
            }
        }
    }
}

/// NodeLost turns False once a later run is Running (or the job
/// Succeeded): the loss was overcome. The cleared condition keeps naming
/// the node and the pods of the last loss, so `kubectl describe` after the
/// fact still shows them.
pub(super) fn settle(status: &mut DGLJobStatus, now: Timestamp, generation: Option<i64>) {
    if let Some(s) = recovered(status) {
        conditions::apply(&mut status.conditions, s, &Time(now), generation);
    }
}

/// The detector of the recovery: NodeLost cleared when it is True and the
/// job is Running or Succeeded.
fn recovered(status: &DGLJobStatus) -> Option<ConditionState> {
    let is_true = |t: JobConditionType| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == t.as_str() && c.status == "True")
    };
    let last = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_NODE_LOST && c.status == "True")?;
    if !(is_true(JobConditionType::Running) || is_true(JobConditionType::Succeeded)) {
        return None;
    }
    let run = status.restart_count.unwrap_or(0);
    let message = format!("Run {run} is running. Last loss: {}", last.message);
    let t = JobConditionType::NodeLost;
    Some(ConditionState::clear(
        t,
        REASON_NODE_LOST_RECOVERED,
        &message,
    ))
}
