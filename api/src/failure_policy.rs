//! `runPolicy.podFailurePolicy`: how a failed pod's exit codes or conditions
//! decide between failing the job at once, restarting without counting
//! against backoffLimit, and today's rule (count it). Modelled on
//! Kubernetes Job's `spec.podFailurePolicy` (batch/v1); asked for by
//! mpi-operator users in kubeflow/mpi-operator#537.

use k8s_openapi::api::core::v1::Pod;
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

/// What a failed (or terminating) pod shows that rules can match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailureFacts {
    /// `(container, exit code)` of every container (init containers but
    /// sidecars included) that terminated with a non-zero code.
    pub exits: Vec<(String, i32)>,
    /// `(type, status)` of the pod's conditions.
    pub conditions: Vec<(String, String)>,
}

impl FailureFacts {
    pub fn of(pod: &Pod) -> FailureFacts {
        let Some(status) = pod.status.as_ref() else {
            return FailureFacts::default();
        };
        let side = pods::sidecars(pod);
        let exits = status
            .init_container_statuses
            .iter()
            .flatten()
            .filter(|c| !side.contains(c.name.as_str()))
            .chain(status.container_statuses.iter().flatten())
            .filter_map(|c| {
                let t = c.state.as_ref()?.terminated.as_ref()?;
                (t.exit_code != 0).then(|| (c.name.clone(), t.exit_code))
            })
            .collect();
        let conditions = status
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect();
        FailureFacts { exits, conditions }
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
}
