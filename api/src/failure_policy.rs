//! `runPolicy.podFailurePolicy`: how a failed pod's exit codes or conditions
//! decide between failing the job at once, restarting without counting
//! against backoffLimit, and today's rule (count it). Modelled on
//! Kubernetes Job's `spec.podFailurePolicy` (batch/v1); asked for by
//! mpi-operator users in kubeflow/mpi-operator#537.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::pods;

/// Rules checked in order against a failed pod of the current run (any
/// role); the first that matches decides. No rule matches: the failure
/// counts against backoffLimit, as without a policy.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodFailurePolicy {
    #[schemars(length(min = 1, max = 20))]
    pub rules: Vec<PodFailurePolicyRule>,
}

/// What a matching rule does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PodFailurePolicyAction {
    /// Fail the job at once (reason `PodFailurePolicy`), whatever
    /// backoffLimit allows.
    FailJob,
    /// Restart the run without counting it against backoffLimit (an
    /// eviction, a preemption). At most [`MAX_IGNORED_RESTARTS`] such
    /// restarts; after that they count.
    Ignore,
    /// Count it against backoffLimit (the default).
    Count,
}

/// Ignored restarts a job may have; beyond this an Ignore rule counts, so a
/// pod that keeps failing the same way cannot restart the job forever.
pub const MAX_IGNORED_RESTARTS: i32 = 100;

/// One rule: exactly one of `onExitCodes` and `onPodConditions`.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.onExitCodes) != has(self.onPodConditions)")
    .message("runPolicy.podFailurePolicy.rules[]: exactly one of onExitCodes and onPodConditions must be set"))]
#[serde(rename_all = "camelCase")]
pub struct PodFailurePolicyRule {
    pub action: PodFailurePolicyAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exit_codes: Option<OnExitCodes>,
    /// Matches when the pod has any of these conditions (e.g.
    /// `DisruptionTarget`, which Kubernetes sets on an evicted or preempted pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 20))]
    pub on_pod_conditions: Option<Vec<OnPodCondition>>,
}

/// Exit codes of the pod's containers that terminated non-zero. A container
/// killed by signal N exits 128+N (SIGKILL: 137, SIGTERM: 143).
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("self.operator != 'In' || !self.values.exists(v, v == 0)")
    .message("runPolicy.podFailurePolicy.rules[].onExitCodes.values: must not contain 0 with operator In (a container that exited 0 did not fail)"))]
#[serde(rename_all = "camelCase")]
pub struct OnExitCodes {
    /// Only this container's exit code; default: any container's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub container_name: Option<String>,
    pub operator: ExitCodeOperator,
    #[schemars(length(min = 1, max = 255))]
    pub values: Vec<i32>,
}

/// How `values` is applied.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ExitCodeOperator {
    In,
    NotIn,
}

/// A pod condition to match.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OnPodCondition {
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// Default `True`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// What a failed (or terminating) pod shows that rules can match, and
/// when it ended (which tells the cause of a run's failure from the pods
/// that failed because of it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailureFacts {
    /// `(container, exit code)` of every container (init containers but
    /// sidecars included) that terminated with a non-zero code.
    pub exits: Vec<(String, i32)>,
    /// `(type, status)` of the pod's conditions.
    pub conditions: Vec<(String, String)>,
    /// When it failed: the earliest `finishedAt` of those containers; for a
    /// pod being deleted, when its deletion was asked (deletionTimestamp
    /// less its grace period). `None` when the pod shows neither.
    pub ended_at: Option<Timestamp>,
    /// A pod being deleted: its deletionTimestamp, the end of its grace
    /// period, by which a kubelet that is alive has stopped and removed it.
    pub deletion_due: Option<Timestamp>,
}

/// The condition Kubernetes sets on a pod it evicts, preempts or deletes
/// from a tainted node.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

impl FailureFacts {
    pub fn of(pod: &Pod) -> FailureFacts {
        let deletion_due = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0);
        let asked = deletion_due.map(|due| {
            let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
            due.checked_sub(SignedDuration::from_secs(grace.max(0)))
                .unwrap_or(due)
        });
        let mut facts = FailureFacts {
            deletion_due,
            ..FailureFacts::default()
        };
        let Some(status) = pod.status.as_ref() else {
            facts.ended_at = asked;
            return facts;
        };
        let side = pods::sidecars(pod);
        let mut finished = Vec::new();
        for c in status
            .init_container_statuses
            .iter()
            .flatten()
            .filter(|c| !side.contains(c.name.as_str()))
            .chain(status.container_statuses.iter().flatten())
        {
            let Some(t) = c.state.as_ref().and_then(|s| s.terminated.as_ref()) else {
                continue;
            };
            if t.exit_code != 0 {
                facts.exits.push((c.name.clone(), t.exit_code));
                finished.extend(t.finished_at.as_ref().map(|f| f.0));
            }
        }
        facts.conditions = status
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect();
        // A deletion asked for is the cause of any exit it led to.
        facts.ended_at = asked.or_else(|| finished.into_iter().min());
        facts
    }

    /// Whether Kubernetes disrupted the pod (eviction, preemption, a
    /// tainted node): condition DisruptionTarget True.
    pub fn disrupted(&self) -> bool {
        self.conditions
            .iter()
            .any(|(t, s)| t == DISRUPTION_TARGET && s == "True")
    }
}

impl PodFailurePolicyRule {
    fn matches(&self, f: &FailureFacts) -> bool {
        if let Some(on) = &self.on_exit_codes {
            return f
                .exits
                .iter()
                .filter(|(name, _)| on.container_name.as_ref().is_none_or(|n| n == name))
                .any(|(_, code)| {
                    on.values.contains(code) == (on.operator == ExitCodeOperator::In)
                });
        }
        self.on_pod_conditions.iter().flatten().any(|want| {
            let status = want.status.as_deref().unwrap_or("True");
            f.conditions
                .iter()
                .any(|(t, s)| *t == want.type_ && s == status)
        })
    }
}

impl PodFailurePolicy {
    /// The first matching rule: its index and action.
    pub fn decide(&self, f: &FailureFacts) -> Option<(usize, PodFailurePolicyAction)> {
        self.rules
            .iter()
            .position(|r| r.matches(f))
            .map(|i| (i, self.rules[i].action))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(v: serde_json::Value) -> PodFailurePolicy {
        serde_json::from_value(json!({ "rules": v })).unwrap()
    }

    fn facts(exits: &[(&str, i32)], conditions: &[(&str, &str)]) -> FailureFacts {
        FailureFacts {
            exits: exits.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
            conditions: conditions
                .iter()
                .map(|(t, s)| (t.to_string(), s.to_string()))
                .collect(),
            ..FailureFacts::default()
        }
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let p = policy(json!([
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}}
        ]));
        use PodFailurePolicyAction::*;
        assert_eq!(p.decide(&facts(&[("main", 42)], &[])), Some((0, FailJob)));
        // FailJob wins over Ignore when both match: order decides.
        let both = facts(&[("main", 42)], &[("DisruptionTarget", "True")]);
        assert_eq!(p.decide(&both), Some((0, FailJob)));
        let evicted = facts(&[("main", 137)], &[("DisruptionTarget", "True")]);
        assert_eq!(p.decide(&evicted), Some((1, Ignore)));
        assert_eq!(p.decide(&facts(&[("main", 137)], &[])), Some((2, Count)));
        assert_eq!(p.decide(&facts(&[("main", 1)], &[])), None);
        // A condition that is not True does not match a rule without status.
        let not_true = facts(&[], &[("DisruptionTarget", "False")]);
        assert_eq!(p.decide(&not_true), None);
    }

    #[test]
    fn container_name_restricts_the_exit_codes_looked_at() {
        let p = policy(json!([{"action": "FailJob",
            "onExitCodes": {"containerName": "main", "operator": "In", "values": [3]}}]));
        assert!(p.decide(&facts(&[("sidecar", 3)], &[])).is_none());
        assert!(p
            .decide(&facts(&[("sidecar", 1), ("main", 3)], &[]))
            .is_some());
    }

    #[test]
    fn facts_skip_zero_exits_and_sidecars() {
        let pod: Pod = serde_json::from_value(json!({
            "spec": {"containers": [], "initContainers": [
                {"name": "side", "restartPolicy": "Always"}, {"name": "init"}]},
            "status": {
                "conditions": [{"type": "DisruptionTarget", "status": "True"}],
                "initContainerStatuses": [
                    {"name": "side", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                     "state": {"terminated": {"exitCode": 9}}},
                    {"name": "init", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                     "state": {"terminated": {"exitCode": 0}}}],
                "containerStatuses": [
                    {"name": "main", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                     "state": {"terminated": {"exitCode": 143}}}]
            }
        }))
        .unwrap();
        let f = FailureFacts::of(&pod);
        assert_eq!(f.exits, vec![("main".to_string(), 143)]);
        assert_eq!(
            f.conditions,
            vec![("DisruptionTarget".to_string(), "True".to_string())]
        );
    }

    #[test]
    fn facts_say_when_a_pod_ended_its_deletion_first() {
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let exit = |code: i32, at: &str| {
            json!({"name": format!("c{code}"), "ready": false,
            "restartCount": 0, "image": "", "imageID": "",
            "state": {"terminated": {"exitCode": code, "finishedAt": at}}})
        };
        let failed: Pod = serde_json::from_value(json!({
            "spec": {"containers": []},
            "status": {"containerStatuses": [
                exit(1, "2026-01-01T00:00:09Z"), exit(2, "2026-01-01T00:00:05Z"),
                exit(0, "2026-01-01T00:00:01Z")]}
        }))
        .unwrap();
        let f = FailureFacts::of(&failed);
        // The earliest non-zero exit; the one that exited 0 is no failure.
        assert_eq!(f.ended_at, Some(at("2026-01-01T00:00:05Z")));
        assert_eq!(f.deletion_due, None);
        assert!(!f.disrupted());

        let evicted: Pod = serde_json::from_value(json!({
            "metadata": {"deletionTimestamp": "2026-01-01T00:00:30Z",
                         "deletionGracePeriodSeconds": 30},
            "spec": {"containers": []},
            "status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}],
                       "containerStatuses": [exit(143, "2026-01-01T00:00:02Z")]}
        }))
        .unwrap();
        let f = FailureFacts::of(&evicted);
        // Asked at 00:00, due at 00:30: the deletion caused the exit.
        assert_eq!(f.ended_at, Some(at("2026-01-01T00:00:00Z")));
        assert_eq!(f.deletion_due, Some(at("2026-01-01T00:00:30Z")));
        assert!(f.disrupted());

        let no_status: Pod = serde_json::from_value(json!({
            "metadata": {"deletionTimestamp": "2026-01-01T00:00:30Z"},
            "spec": {"containers": []}
        }))
        .unwrap();
        let f = FailureFacts::of(&no_status);
        assert_eq!(f.ended_at, Some(at("2026-01-01T00:00:30Z")));
    }
}
