//! How a pod's state is read, one rule for every binary: the operator's
//! state machine (`operator/src/pure/observe.rs`) and watcher-loop
//! (`watcher-loop/src/state.rs`) word their messages differently, but agree
//! on which container failed a pod and when it is Ready.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;

/// A container whose current state is "terminated with a non-zero exit code".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerExit<'a> {
    /// An init container (not a sidecar), rather than a main container.
    pub init: bool,
    pub name: &'a str,
    pub exit_code: i32,
    pub reason: Option<&'a str>,
    pub message: Option<&'a str>,
}

/// Names of the pod's native sidecars: init containers with `restartPolicy:
/// Always`, which the kubelet restarts whatever the pod's policy, so their
/// exit fails nothing. Empty when the pod's spec is not known.
pub fn sidecars(pod: &Pod) -> BTreeSet<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .map(|cs| {
            cs.iter()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                .map(|c| c.name.as_str())
                .collect()
        })
        .unwrap_or_default()
}

/// The first container (init containers first, sidecars skipped) that
/// terminated with a non-zero exit code.
pub fn failed_container(pod: &Pod) -> Option<ContainerExit<'_>> {
    let status = pod.status.as_ref()?;
    let side = sidecars(pod);
    let init = status
        .init_container_statuses
        .iter()
        .flatten()
        .filter(|c| !side.contains(c.name.as_str()))
        .map(|c| (true, c));
    let main = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| (false, c));
    init.chain(main).find_map(|(init, c)| {
        let t = c.state.as_ref()?.terminated.as_ref()?;
        (t.exit_code != 0).then_some(ContainerExit {
            init,
            name: &c.name,
            exit_code: t.exit_code,
            reason: t.reason.as_deref(),
            message: t.message.as_deref(),
        })
    })
}

/// Whether the pod's condition `kind` (e.g. `Ready`) is True.
pub fn condition_true(pod: &Pod, kind: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_failed_sidecar_fails_nothing_and_init_containers_come_first() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "main"}],
                     "initContainers": [{"name": "side", "restartPolicy": "Always"}, {"name": "init"}]},
            "status": {
                "initContainerStatuses": [
                    {"name": "side", "image": "", "imageID": "", "ready": false, "restartCount": 1,
                     "state": {"terminated": {"exitCode": 1}}},
                    {"name": "init", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}],
                "containerStatuses": [
                    {"name": "main", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 3}}}],
                "conditions": [{"type": "Ready", "status": "False"}]
            }
        }))
        .unwrap();
        let c = failed_container(&pod).unwrap();
        assert_eq!(
            (c.init, c.name, c.exit_code, c.reason),
            (true, "init", 2, Some("Error"))
        );
        assert!(!condition_true(&pod, "Ready"));
    }
}
