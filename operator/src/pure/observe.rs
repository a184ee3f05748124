//! What exists: a job's pods, classified (pure functions over `Pod`).

use dgl_api::failure_policy::FailureFacts;
use dgl_api::names::{ANNOTATION_PROGRESS, LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE, LABEL_RUN};
use dgl_api::partition_cache::{self, Lookup};
use dgl_api::pods::{self, ContainerExit};
use dgl_api::ReplicaType;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// The state of one pod, as the state machine needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Not yet running (scheduling, pulling, init containers).
    Pending,
    /// Running; `ready` when its Ready condition is True.
    Running {
        ready: bool,
    },
    Succeeded,
    /// Failed, with a message naming the container and exit code or the
    /// eviction reason.
    Failed {
        reason: String,
        message: String,
    },
    /// Being deleted (deletionTimestamp set).
    Terminating,
}

/// One observed pod of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedPod {
    pub name: String,
    pub role: ReplicaType,
    pub index: i32,
    /// The restart epoch of the run that created it: `status.restartCount`
    /// when it was created, from its `dgloperator.io/run` label.
    pub epoch: i32,
    pub state: PodState,
    pub ip: Option<String>,
    /// A launcher's progress annotation, as written (parsed by the plan).
    pub progress: Option<String>,
    /// Exit codes and conditions of a failed or terminating pod, for
    /// runPolicy.podFailurePolicy; empty otherwise.
    pub facts: FailureFacts,
    /// Why a Pending pod cannot start, if the scheduler or kubelet says so.
    pub not_starting: Option<StartFailure>,
    /// A launcher's partition-cache lookup, once it answered
    /// (`spec.partitionCache`; `dgl_api::partition_cache::of_pod`).
    pub cache_lookup: Option<Lookup>,
}

/// Why a pending pod cannot start (`dgl_api::pods::not_starting`), owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailure {
    /// The container the kubelet cannot start; `None`: not scheduled.
    pub container: Option<String>,
    /// The scheduler's or kubelet's reason, e.g. `ImagePullBackOff`.
    pub reason: String,
    /// Its message, on one line and trimmed to [`START_MESSAGE_MAX`].
    pub message: String,
}

/// Longest kubelet or scheduler message quoted: registry errors can be long.
const START_MESSAGE_MAX: usize = 300;

impl StartFailure {
    fn of(pod: &Pod) -> Option<StartFailure> {
        let n = pods::not_starting(pod)?;
        Some(StartFailure {
            container: n.container.map(str::to_string),
            reason: n.reason.to_string(),
            message: n
                .message
                .map(|m| trimmed(m, START_MESSAGE_MAX))
                .unwrap_or_default(),
        })
    }

    /// `pod <pod>: container <c>: <reason>: <message>` (no container when
    /// the pod is not scheduled).
    pub fn describe(&self, pod: &str) -> String {
        let container = self
            .container
            .as_ref()
            .map(|c| format!(" container {c}:"))
            .unwrap_or_default();
        let message = Some(&self.message)
            .filter(|m| !m.is_empty())
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        format!("pod {pod}:{container} {}{message}", self.reason)
    }
}

impl ObservedPod {
    /// Classifies a pod carrying the job's labels; `None` for a pod without a
    /// valid role label (not one of ours, ignored rather than guessed at).
    pub fn from_pod(pod: &Pod) -> Option<Self> {
        let labels = pod.labels();
        let role = ReplicaType::from_label_value(labels.get(LABEL_REPLICA_TYPE)?)?;
        let index = labels
            .get(LABEL_REPLICA_INDEX)
            .and_then(|i| i.parse().ok())
            .unwrap_or(0);
        let epoch = labels
            .get(LABEL_RUN)
            .and_then(|i| i.parse().ok())
            .unwrap_or(0);
        let status = pod.status.as_ref();
        let ip = status
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty());
        // Only the launcher publishes progress; nobody else's is read.
        let progress = (role == ReplicaType::Launcher)
            .then(|| pod.annotations().get(ANNOTATION_PROGRESS).cloned())
            .flatten();
        let state = pod_state(pod);
        let facts = if matches!(state, PodState::Failed { .. } | PodState::Terminating) {
            FailureFacts::of(pod)
        } else {
            FailureFacts::default()
        };
        let not_starting = (state == PodState::Pending)
            .then(|| StartFailure::of(pod))
            .flatten();
        Some(ObservedPod {
            name: pod.name_any(),
            role,
            index,
            epoch,
            state,
            ip,
            progress,
            facts,
            not_starting,
            cache_lookup: (role == ReplicaType::Launcher)
                .then(|| partition_cache::of_pod(pod))
                .flatten(),
        })
    }

    /// A launcher whose partition-cache lookup found the job's partitions:
    /// its run has no partitioner.
    pub fn reuses_partitions(&self) -> bool {
        self.cache_lookup.as_ref().is_some_and(|l| l.hit)
    }

    pub fn is_active(&self) -> bool {
        matches!(self.state, PodState::Pending | PodState::Running { .. })
    }

    pub fn is_ready(&self) -> bool {
        matches!(self.state, PodState::Running { ready: true })
    }
}

fn pod_state(pod: &Pod) -> PodState {
    if pod.metadata.deletion_timestamp.is_some() {
        return PodState::Terminating;
    }
    let Some(status) = pod.status.as_ref() else {
        return PodState::Pending;
    };
    match status.phase.as_deref() {
        Some("Succeeded") => PodState::Succeeded,
        Some("Failed") => {
            let (reason, message) = failure_of(pod);
            PodState::Failed { reason, message }
        }
        Some("Running") => {
            // A container of a `restartPolicy: Never` pod that exited non-zero
            // fails the pod's work even while a sidecar keeps the phase Running.
            if let Some(c) = pods::failed_container(pod) {
                return PodState::Failed {
                    reason: "ContainerFailed".into(),
                    message: container_failed(pod, &c),
                };
            }
            PodState::Running {
                ready: pods::condition_true(pod, "Ready"),
            }
        }
        _ => PodState::Pending,
    }
}

/// `pod <pod>: container <c> exited with code <n> (<reason>): <message>`,
/// the message being the container's termination message (dglrun writes its
/// error there), on one line and capped; an OOMKilled container is named so,
/// with its memory limit.
fn container_failed(pod: &Pod, c: &ContainerExit<'_>) -> String {
    let message = c
        .message
        .map(one_line)
        .filter(|m| !m.is_empty())
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    let pod_name = pod.name_any();
    if pods::oom_killed(c) {
        let limit = pods::memory_limit(pod, c.name)
            .map(|l| format!("limit {l}"))
            .unwrap_or_else(|| "no memory limit set".into());
        return format!(
            "pod {pod_name}: container {} OOMKilled ({limit}), exit code {}{message}",
            c.name, c.exit_code
        );
    }
    let pod = pod_name;
    format!(
        "pod {pod}: container {} exited with code {}{}{message}",
        c.name,
        c.exit_code,
        c.reason.map(|r| format!(" ({r})")).unwrap_or_default()
    )
}

/// Longest termination message quoted in a condition: its end, the cause.
const MESSAGE_MAX: usize = 1024;

/// `s` on one line, its first `max` bytes (the kubelet puts the cause first).
fn trimmed(s: &str, max: usize) -> String {
    let line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

/// `s` on one line (`; ` between lines), its last [`MESSAGE_MAX`] bytes.
fn one_line(s: &str) -> String {
    let joined = s
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if joined.len() <= MESSAGE_MAX {
        return joined;
    }
    let mut start = joined.len() - MESSAGE_MAX;
    while !joined.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &joined[start..])
}

/// Reason and message of a Failed pod: the first container that exited
/// non-zero, or the pod's own reason (eviction).
fn failure_of(pod: &Pod) -> (String, String) {
    let name = pod.name_any();
    let status = pod.status.as_ref();
    let pod_reason = status.and_then(|s| s.reason.clone());
    let pod_message = status.and_then(|s| s.message.clone());
    if let Some(c) = pods::failed_container(pod) {
        return ("ContainerFailed".into(), container_failed(pod, &c));
    }
    match pod_reason {
        Some(r) => (
            if r == "Evicted" {
                "Evicted".into()
            } else {
                r.clone()
            },
            format!(
                "pod {name} failed: {r}{}",
                pod_message.map(|m| format!(": {m}")).unwrap_or_default()
            ),
        ),
        None => (
            "PodFailed".into(),
            format!(
                "pod {name} failed{}",
                pod_message.map(|m| format!(": {m}")).unwrap_or_default()
            ),
        ),
    }
}

#[cfg(test)]
mod tests;
