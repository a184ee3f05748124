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

/// The kubelet's waiting reasons that mean a container will not start
/// without a change to the pod, its image or what it references (unlike
/// `ContainerCreating` or `PodInitializing`, which pass by themselves).
pub const NEVER_STARTS: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// Why a pod does not start: the scheduler found no node for it, or the
/// kubelet cannot start one of its containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotStarting<'a> {
    /// The container the kubelet cannot start; `None` when the pod is not
    /// scheduled (no container is tried before).
    pub container: Option<&'a str>,
    /// `Unschedulable`, or one of [`NEVER_STARTS`].
    pub reason: &'a str,
    pub message: Option<&'a str>,
}

/// Why the pod cannot start, if it cannot: condition PodScheduled False for
/// reason `Unschedulable` (no node meets its requests, a PVC it needs does
/// not exist), else the first container (init containers first) waiting
/// for one of [`NEVER_STARTS`]. `None` for a pod on its way or started.
pub fn not_starting(pod: &Pod) -> Option<NotStarting<'_>> {
    let status = pod.status.as_ref()?;
    let unscheduled = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    });
    if let Some(c) = unscheduled {
        return Some(NotStarting {
            container: None,
            reason: "Unschedulable",
            message: c.message.as_deref(),
        });
    }
    let init = status.init_container_statuses.iter().flatten();
    let main = status.container_statuses.iter().flatten();
    init.chain(main).find_map(|c| {
        let w = c.state.as_ref()?.waiting.as_ref()?;
        let reason = w.reason.as_deref().filter(|r| NEVER_STARTS.contains(r))?;
        Some(NotStarting {
            container: Some(&c.name),
            reason,
            message: w.message.as_deref(),
        })
    })
}

/// The memory limit of container `name` (init or main) as its spec states
/// it (e.g. `2Gi`), if it has one.
pub fn memory_limit<'a>(pod: &'a Pod, name: &str) -> Option<&'a str> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .find(|c| c.name == name)?
        .resources
        .as_ref()?
        .limits
        .as_ref()?
        .get("memory")
        .map(|q| q.0.as_str())
}

/// Whether the kernel's OOM killer ended the container (the kubelet's
/// reason `OOMKilled`).
pub fn oom_killed(c: &ContainerExit<'_>) -> bool {
    c.reason == Some("OOMKilled")
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

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn waiting(name: &str, reason: &str, message: &str) -> serde_json::Value {
        json!({"name": name, "image": "", "imageID": "", "ready": false, "restartCount": 0,
               "state": {"waiting": {"reason": reason, "message": message}}})
    }

    #[test]
    fn an_unschedulable_pod_is_named_before_its_containers() {
        let p = pod(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/1 nodes are available: 1 Insufficient memory."}]}
        }));
        assert_eq!(
            not_starting(&p),
            Some(NotStarting {
                container: None,
                reason: "Unschedulable",
                message: Some("0/1 nodes are available: 1 Insufficient memory.")
            })
        );
    }

    #[test]
    fn image_and_config_errors_name_the_container_and_passing_states_nothing() {
        let p = pod(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "initContainerStatuses": [waiting("watcher", "PodInitializing", "")],
                "containerStatuses": [waiting("main", "CreateContainerConfigError",
                    "couldn't find key k in ConfigMap ns/c")]}
        }));
        let n = not_starting(&p).unwrap();
        assert_eq!(
            (n.container, n.reason),
            (Some("main"), "CreateContainerConfigError")
        );
        for reason in ["ErrImagePull", "ImagePullBackOff"] {
            let p = pod(
                json!({"metadata": {"name": "p"}, "status": {"phase": "Pending",
                "containerStatuses": [waiting("main", reason, "not found")]}}),
            );
            assert_eq!(not_starting(&p).map(|n| n.reason), Some(reason));
        }
        let p = pod(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Pending",
            "containerStatuses": [waiting("main", "ContainerCreating", "")]}}),
        );
        assert_eq!(not_starting(&p), None);
    }

    #[test]
    fn a_memory_limit_is_read_from_init_and_main_containers() {
        let p = pod(json!({
            "metadata": {"name": "p"},
            "spec": {"initContainers": [{"name": "w", "resources": {"limits": {"memory": "64Mi"}}}],
                     "containers": [{"name": "main", "resources": {"limits": {"memory": "2Gi"}}},
                                    {"name": "free"}]}
        }));
        assert_eq!(memory_limit(&p, "w"), Some("64Mi"));
        assert_eq!(memory_limit(&p, "main"), Some("2Gi"));
        assert_eq!(memory_limit(&p, "free"), None);
        assert_eq!(memory_limit(&p, "absent"), None);
    }
}
