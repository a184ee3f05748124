//! Pure part: what a pod's status means for the wait, and the bookkeeping
//! over all watched pods. No I/O here; `run` feeds it watch events.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use dgl_api::pods;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use crate::Error;

/// What the watched pods must reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Every pod has the `Ready` condition `True` (the launcher waits so for
    /// the workers; docs/runtime-design.md).
    Ready,
    /// Every pod is in phase `Succeeded` (a partitioner that exits when done).
    Finished,
}

impl Mode {
    /// The word used in messages: "ready" / "finished".
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Ready => "ready",
            Mode::Finished => "finished",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ready" => Ok(Mode::Ready),
            "finished" => Ok(Mode::Finished),
            other => Err(format!(
                "unknown mode {other:?}: expected `ready` or `finished`"
            )),
        }
    }
}

/// One pod's standing, from one observation of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    /// Reached the mode's goal.
    Done,
    /// Not yet; the text says where it stands (for logs and the timeout message).
    Waiting(String),
    /// Can never reach the goal; the text says why.
    Failed(String),
    /// Being deleted (`metadata.deletionTimestamp` is set): it is going away.
    Deleting,
}

/// Judges one pod for `mode`.
///
/// * phase `Failed` fails, in both modes;
/// * `finished`: phase `Succeeded` is done;
/// * `ready`: a `Ready=True` condition is done; phase `Succeeded` fails (a
///   completed pod never becomes Ready again);
/// * a pod that is being deleted (`deletionTimestamp`) is [`Assessment::Deleting`];
/// * with `restartPolicy: Never`, a container (or non-sidecar init
///   container) that terminated with a non-zero exit code fails: that pod can
///   neither become Ready nor Succeed. Under `Always` / `OnFailure` the
///   kubelet restarts it, so it only shows as waiting.
pub fn assess(pod: &Pod, mode: Mode) -> Assessment {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let restart_policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");

    if phase == "Failed" {
        let mut reason = "phase Failed".to_string();
        if let Some(r) = status.and_then(|s| s.reason.as_deref()) {
            reason.push_str(&format!(", reason {r}"));
        }
        if let Some(m) = status.and_then(|s| s.message.as_deref()) {
            reason.push_str(&format!(": {m}"));
        }
        if let Some(c) = failed_container(pod) {
            reason.push_str(&format!(" ({c})"));
        }
        return Assessment::Failed(reason);
    }
    if phase == "Succeeded" {
        return match mode {
            Mode::Finished => Assessment::Done,
            Mode::Ready => Assessment::Failed(
                "completed (phase Succeeded) before it became Ready; it never will".into(),
            ),
        };
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Assessment::Deleting;
    }
    if restart_policy == "Never" {
        if let Some(c) = failed_container(pod) {
            return Assessment::Failed(format!(
                "{c}, and restartPolicy is Never, so the pod can never become {mode}"
            ));
        }
    }
    if mode == Mode::Ready && pods::condition_true(pod, "Ready") {
        return Assessment::Done;
    }
    Assessment::Waiting(describe_waiting(pod, phase, mode))
}

/// The first container (init containers first, sidecars skipped; the rule
/// is `dgl_api::pods::failed_container`) that terminated non-zero, described.
fn failed_container(pod: &Pod) -> Option<String> {
    let c = pods::failed_container(pod)?;
    let kind = if c.init {
        "init container"
    } else {
        "container"
    };
    let mut s = format!(
        "{kind} {} terminated with exit code {}",
        c.name, c.exit_code
    );
    if let Some(r) = c.reason {
        s.push_str(&format!(" ({r})"));
    }
    if let Some(m) = c.message.map(str::trim).filter(|m| !m.is_empty()) {
        s.push_str(&format!(": {m}"));
    }
    Some(s)
}

fn describe_waiting(pod: &Pod, phase: &str, mode: Mode) -> String {
    let mut parts = vec![format!("phase {phase}")];
    let status = pod.status.as_ref();
    if mode == Mode::Ready {
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
        match ready {
            None => parts.push("no Ready condition yet".into()),
            Some(c) => {
                let mut s = format!("Ready={}", c.status);
                if let Some(r) = c.reason.as_deref() {
                    s.push_str(&format!(" ({r})"));
                }
                parts.push(s);
            }
        }
    }
    let containers = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .chain(&s.container_statuses)
        })
        .flatten();
    for c in containers {
        if let Some(d) = describe_container(c) {
            parts.push(d);
        }
    }
    if phase == "Pending" {
        if let Some(c) = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
            .filter(|c| c.status == "False")
        {
            parts.push(format!(
                "unschedulable: {}",
                c.message.as_deref().unwrap_or("no reason given")
            ));
        }
    }
    parts.join(", ")
}

fn describe_container(c: &ContainerStatus) -> Option<String> {
    let state = c.state.as_ref()?;
    if let Some(w) = &state.waiting {
        let reason = w.reason.as_deref().unwrap_or("Waiting");
        return Some(format!("{}: {reason}", c.name));
    }
    if let Some(t) = &state.terminated {
        if t.exit_code != 0 {
            return Some(format!(
                "{}: exited {} (restarts: {})",
                c.name, t.exit_code, c.restart_count
            ));
        }
    }
    None
}

/// Where one watched pod stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    /// Named (in the file) but not seen in the cluster yet.
    NotFound,
    /// Seen; its uid and latest assessment.
    Seen {
        uid: Option<String>,
        assessment: Assessment,
    },
    /// `finished` mode: it Succeeded once; that stays true whatever comes next
    /// (the operator may delete a completed pod).
    Finished,
}

/// What the wait is over.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expected {
    /// Exactly these pods.
    Names,
    /// Whatever matches the selector, at least this many.
    Selector { min_pods: usize },
}

/// The state of the whole wait: one slot per pod.
#[derive(Debug, Clone)]
pub struct Tracker {
    mode: Mode,
    expected: Expected,
    pods: BTreeMap<String, Slot>,
}

/// What an observation changed, for logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Nothing worth logging.
    None,
    /// The pod's standing changed to this.
    Now(Assessment),
}

impl Tracker {
    /// Waits for exactly `names`.
    pub fn for_names(mode: Mode, names: &[String]) -> Self {
        Tracker {
            mode,
            expected: Expected::Names,
            pods: names.iter().map(|n| (n.clone(), Slot::NotFound)).collect(),
        }
    }

    /// Waits for every pod a selector matches, and for at least `min_pods` of them.
    pub fn for_selector(mode: Mode, min_pods: usize) -> Self {
        Tracker {
            mode,
            expected: Expected::Selector { min_pods },
            pods: BTreeMap::new(),
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Records an observed pod (added, modified or listed). Fails when the
    /// pod failed, or when it is a new pod under a name already seen with
    /// another uid (the one we watched was deleted in between).
    pub fn observe(&mut self, pod: &Pod) -> Result<Change, Error> {
        let Some(name) = pod.metadata.name.clone() else {
            return Ok(Change::None);
        };
        if self.expected == Expected::Names && !self.pods.contains_key(&name) {
            return Ok(Change::None); // not ours
        }
        let mode = self.mode;
        let slot = self.pods.entry(name.clone()).or_insert(Slot::NotFound);
        let uid = pod.metadata.uid.clone();
        let assessment = assess(pod, mode);
        match slot {
            Slot::Finished => return Ok(Change::None),
            Slot::Seen { uid: old, .. } if old.is_some() && uid.is_some() && *old != uid => {
                return Err(Error::PodDeleted {
                    pod: name,
                    detail: format!("was deleted and re-created before it was {mode}"),
                });
            }
            _ => {}
        }
        let changed = match slot {
            Slot::Seen { assessment: a, .. } => *a != assessment,
            _ => true,
        };
        *slot = if assessment == Assessment::Done && mode == Mode::Finished {
            Slot::Finished
        } else {
            Slot::Seen {
                uid,
                assessment: assessment.clone(),
            }
        };
        match &assessment {
            Assessment::Failed(reason) => {
                return Err(Error::PodFailed {
                    pod: name,
                    reason: reason.clone(),
                })
            }
            Assessment::Deleting => {
                return Err(Error::PodDeleted {
                    pod: name,
                    detail: format!("was deleted (deletionTimestamp set) before it was {mode}"),
                })
            }
            _ => {}
        }
        Ok(if changed {
            Change::Now(assessment)
        } else {
            Change::None
        })
    }

    /// Records that a watched pod is gone. Fails unless it had finished.
    pub fn deleted(&mut self, name: &str) -> Result<(), Error> {
        match self.pods.get(name) {
            Some(Slot::Finished) => Ok(()),
            None if self.expected == Expected::Names => Ok(()),
            _ => Err(Error::PodDeleted {
                pod: name.to_string(),
                detail: match self.expected {
                    Expected::Names => format!("was deleted before it was {}", self.mode),
                    Expected::Selector { .. } => format!(
                        "was deleted (or no longer matches the selector) before it was {}",
                        self.mode
                    ),
                },
            }),
        }
    }

    /// After a (re-)list is complete: pods in `scope` (all pods when `None`)
    /// that were seen before but are not in `listed` are gone. A re-list
    /// happens after a watch desync, when a Delete event may have been missed.
    pub fn relisted(
        &mut self,
        scope: Option<&str>,
        listed: &BTreeSet<String>,
    ) -> Result<(), Error> {
        let gone: Vec<String> = self
            .pods
            .iter()
            .filter(|(name, slot)| {
                scope.is_none_or(|s| s == name.as_str())
                    && matches!(slot, Slot::Seen { .. })
                    && !listed.contains(*name)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            self.deleted(&name)?;
        }
        Ok(())
    }

    /// True when every pod reached the goal (and, for a selector, enough pods
    /// exist).
    pub fn is_complete(&self) -> bool {
        if let Expected::Selector { min_pods } = self.expected {
            if self.pods.len() < min_pods.max(1) {
                return false;
            }
        }
        self.pods.values().all(|s| match s {
            Slot::Finished => true,
            Slot::Seen { assessment, .. } => *assessment == Assessment::Done,
            Slot::NotFound => false,
        })
    }

    /// Pods still waited for, with where each stands.
    pub fn waiting(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .pods
            .iter()
            .filter_map(|(name, slot)| match slot {
                Slot::NotFound => Some((name.clone(), "not found yet".to_string())),
                Slot::Seen {
                    assessment: Assessment::Waiting(why),
                    ..
                } => Some((name.clone(), why.clone())),
                Slot::Seen {
                    assessment: Assessment::Failed(why),
                    ..
                } => Some((name.clone(), why.clone())),
                Slot::Seen {
                    assessment: Assessment::Deleting,
                    ..
                } => Some((name.clone(), "being deleted".into())),
                _ => None,
            })
            .collect();
        if let Expected::Selector { min_pods } = self.expected {
            let missing = min_pods.max(1).saturating_sub(self.pods.len());
            if missing > 0 {
                out.push((
                    format!("<{missing} more pod(s) matching the selector>"),
                    "not found yet".into(),
                ));
            }
        }
        out
    }

    /// The pods being tracked, sorted.
    pub fn pod_names(&self) -> Vec<String> {
        self.pods.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, status: serde_json::Value) -> Pod {
        pod_with(name, "Never", status)
    }

    fn pod_with(name: &str, restart: &str, status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": name, "uid": format!("uid-{name}") },
            "spec": {
                "restartPolicy": restart,
                "initContainers": [
                    { "name": "setup" },
                    { "name": "sidecar", "restartPolicy": "Always" }
                ],
                "containers": [{ "name": "main" }, { "name": "other" }]
            },
            "status": status,
        }))
        .unwrap()
    }

    fn ready(status: &str) -> serde_json::Value {
        serde_json::json!([{ "type": "Ready", "status": status }])
    }

    fn terminated(name: &str, code: i32) -> serde_json::Value {
        serde_json::json!({
            "name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": { "terminated": { "exitCode": code, "reason": "Error" } }
        })
    }

    fn running(name: &str) -> serde_json::Value {
        serde_json::json!({
            "name": name, "image": "i", "imageID": "", "ready": true, "restartCount": 0,
            "state": { "running": {} }
        })
    }

    #[test]
    fn mode_parses_case_insensitively() {
        assert_eq!("ready".parse::<Mode>().unwrap(), Mode::Ready);
        assert_eq!(" Finished ".parse::<Mode>().unwrap(), Mode::Finished);
        assert!("done"
            .parse::<Mode>()
            .unwrap_err()
            .contains("`ready` or `finished`"));
    }

    #[test]
    fn ready_mode_needs_the_ready_condition() {
        let p = pod(
            "a",
            serde_json::json!({ "phase": "Running", "conditions": ready("False") }),
        );
        assert!(
            matches!(assess(&p, Mode::Ready), Assessment::Waiting(w) if w.contains("Ready=False"))
        );
        let p = pod("a", serde_json::json!({ "phase": "Pending" }));
        assert!(
            matches!(assess(&p, Mode::Ready), Assessment::Waiting(w) if w.contains("no Ready condition"))
        );
        let p = pod(
            "a",
            serde_json::json!({ "phase": "Running", "conditions": ready("True") }),
        );
        assert_eq!(assess(&p, Mode::Ready), Assessment::Done);
        // Ready is not finished.
        assert!(matches!(assess(&p, Mode::Finished), Assessment::Waiting(_)));
    }

    #[test]
    fn finished_mode_needs_succeeded() {
        let p = pod("a", serde_json::json!({ "phase": "Succeeded" }));
        assert_eq!(assess(&p, Mode::Finished), Assessment::Done);
        // A completed pod will never be Ready.
        assert!(
            matches!(assess(&p, Mode::Ready), Assessment::Failed(r) if r.contains("Succeeded"))
        );
    }

    #[test]
    fn failed_phase_fails_in_both_modes_with_the_reason() {
        let p = pod(
            "a",
            serde_json::json!({
                "phase": "Failed", "reason": "Evicted", "message": "low on memory",
                "containerStatuses": [terminated("main", 137)]
            }),
        );
        for mode in [Mode::Ready, Mode::Finished] {
            let Assessment::Failed(r) = assess(&p, mode) else {
                panic!()
            };
            assert!(r.contains("phase Failed"), "{r}");
            assert!(r.contains("Evicted") && r.contains("low on memory"), "{r}");
            assert!(
                r.contains("container main terminated with exit code 137"),
                "{r}"
            );
        }
    }

    #[test]
    fn nonzero_exit_fails_only_under_restart_policy_never() {
        let status = serde_json::json!({
            "phase": "Running", "conditions": ready("False"),
            "containerStatuses": [running("main"), terminated("other", 3)]
        });
        let never = pod("a", status.clone());
        for mode in [Mode::Ready, Mode::Finished] {
            let Assessment::Failed(r) = assess(&never, mode) else {
                panic!()
            };
            assert!(
                r.contains("container other terminated with exit code 3"),
                "{r}"
            );
        }
        let always = pod_with("a", "Always", status);
        let Assessment::Waiting(w) = assess(&always, Mode::Ready) else {
            panic!()
        };
        assert!(w.contains("other: exited 3"), "{w}");
        // Exit 0 of one container is not a failure.
        let ok = pod(
            "a",
            serde_json::json!({
                "phase": "Running",
                "containerStatuses": [running("main"), terminated("other", 0)]
            }),
        );
        assert!(matches!(
            assess(&ok, Mode::Finished),
            Assessment::Waiting(_)
        ));
    }

    #[test]
    fn init_containers_count_but_sidecars_do_not() {
        let failed_init = pod(
            "a",
            serde_json::json!({
                "phase": "Pending",
                "initContainerStatuses": [terminated("setup", 1)]
            }),
        );
        let Assessment::Failed(r) = assess(&failed_init, Mode::Ready) else {
            panic!()
        };
        assert!(r.contains("init container setup"), "{r}");
        let restarting_sidecar = pod(
            "a",
            serde_json::json!({
                "phase": "Pending",
                "initContainerStatuses": [terminated("sidecar", 1)]
            }),
        );
        assert!(matches!(
            assess(&restarting_sidecar, Mode::Ready),
            Assessment::Waiting(_)
        ));
    }

    #[test]
    fn terminating_pod_counts_as_deleted() {
        let mut p = pod(
            "a",
            serde_json::json!({ "phase": "Running", "conditions": ready("True") }),
        );
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert_eq!(assess(&p, Mode::Ready), Assessment::Deleting);
        let mut t = Tracker::for_names(Mode::Ready, &["a".to_string()]);
        let e = t.observe(&p).unwrap_err();
        assert!(
            matches!(&e, Error::PodDeleted { pod, .. } if pod == "a"),
            "{e}"
        );
        assert!(e.to_string().contains("pod a was deleted"), "{e}");
        // A pod that Succeeded and is then deleted has still finished.
        p.status =
            Some(serde_json::from_value(serde_json::json!({ "phase": "Succeeded" })).unwrap());
        assert_eq!(assess(&p, Mode::Finished), Assessment::Done);
    }

    #[test]
    fn tracker_waits_for_every_name_then_completes() {
        let names = vec!["w-0".to_string(), "w-1".to_string()];
        let mut t = Tracker::for_names(Mode::Ready, &names);
        assert!(!t.is_complete());
        let w = t.waiting();
        assert_eq!(w.len(), 2);
        assert_eq!(w[0], ("w-0".into(), "not found yet".into()));

        let r0 = pod(
            "w-0",
            serde_json::json!({ "phase": "Running", "conditions": ready("True") }),
        );
        assert_eq!(t.observe(&r0).unwrap(), Change::Now(Assessment::Done));
        assert_eq!(t.observe(&r0).unwrap(), Change::None);
        assert!(!t.is_complete());
        assert_eq!(t.waiting(), vec![("w-1".into(), "not found yet".into())]);

        // A pod not in the list is ignored.
        let stranger = pod("x", serde_json::json!({ "phase": "Failed" }));
        assert_eq!(t.observe(&stranger).unwrap(), Change::None);

        let p1 = pod("w-1", serde_json::json!({ "phase": "Pending" }));
        assert!(matches!(
            t.observe(&p1).unwrap(),
            Change::Now(Assessment::Waiting(_))
        ));
        assert!(t.waiting()[0].1.contains("phase Pending"));
        let r1 = pod(
            "w-1",
            serde_json::json!({ "phase": "Running", "conditions": ready("True") }),
        );
        t.observe(&r1).unwrap();
        assert!(t.is_complete());
        assert!(t.waiting().is_empty());

        // Ready is not sticky: a ready pod that goes un-ready is waited for again.
        let nr = pod(
            "w-1",
            serde_json::json!({ "phase": "Running", "conditions": ready("False") }),
        );
        t.observe(&nr).unwrap();
        assert!(!t.is_complete());
    }

    #[test]
    fn tracker_fails_on_failure_deletion_and_recreation() {
        let names = vec!["p".to_string()];
        let mut t = Tracker::for_names(Mode::Ready, &names);
        let failed = pod("p", serde_json::json!({ "phase": "Failed" }));
        let e = t.observe(&failed).unwrap_err();
        assert!(
            matches!(&e, Error::PodFailed { pod, .. } if pod == "p"),
            "{e}"
        );
        assert!(e.to_string().contains("pod p failed"), "{e}");

        let mut t = Tracker::for_names(Mode::Ready, &names);
        let e = t.deleted("p").unwrap_err();
        assert!(e.to_string().contains("pod p"), "{e}");

        let mut t = Tracker::for_names(Mode::Ready, &names);
        t.observe(&pod("p", serde_json::json!({ "phase": "Pending" })))
            .unwrap();
        let mut again = pod("p", serde_json::json!({ "phase": "Pending" }));
        again.metadata.uid = Some("another".into());
        let e = t.observe(&again).unwrap_err();
        assert!(e.to_string().contains("re-created"), "{e}");
    }

    #[test]
    fn relist_detects_missed_deletions() {
        let names = vec!["a".to_string(), "b".to_string()];
        let mut t = Tracker::for_names(Mode::Ready, &names);
        t.observe(&pod("a", serde_json::json!({ "phase": "Pending" })))
            .unwrap();
        // b never seen: its absence is fine; a's stream relisted with a present.
        t.relisted(Some("b"), &BTreeSet::new()).unwrap();
        t.relisted(Some("a"), &BTreeSet::from(["a".to_string()]))
            .unwrap();
        let e = t.relisted(Some("a"), &BTreeSet::new()).unwrap_err();
        assert!(
            matches!(e, Error::PodDeleted { ref pod, .. } if pod == "a"),
            "{e}"
        );
    }

    #[test]
    fn finished_is_sticky_even_after_deletion() {
        let names = vec!["a".to_string(), "b".to_string()];
        let mut t = Tracker::for_names(Mode::Finished, &names);
        t.observe(&pod("a", serde_json::json!({ "phase": "Succeeded" })))
            .unwrap();
        t.deleted("a").unwrap();
        t.relisted(Some("a"), &BTreeSet::new()).unwrap();
        assert!(!t.is_complete());
        t.observe(&pod("b", serde_json::json!({ "phase": "Succeeded" })))
            .unwrap();
        assert!(t.is_complete());
    }

    #[test]
    fn selector_needs_min_pods_and_all_of_them() {
        let mut t = Tracker::for_selector(Mode::Finished, 2);
        assert!(!t.is_complete());
        assert!(t.waiting()[0].0.contains("2 more pod(s)"));
        t.observe(&pod("a", serde_json::json!({ "phase": "Succeeded" })))
            .unwrap();
        assert!(!t.is_complete());
        t.observe(&pod("b", serde_json::json!({ "phase": "Running" })))
            .unwrap();
        assert!(!t.is_complete());
        assert_eq!(t.waiting().len(), 1);
        t.observe(&pod("b", serde_json::json!({ "phase": "Succeeded" })))
            .unwrap();
        assert!(t.is_complete());
        assert_eq!(t.pod_names(), vec!["a", "b"]);

        let mut t = Tracker::for_selector(Mode::Ready, 1);
        t.observe(&pod("a", serde_json::json!({ "phase": "Pending" })))
            .unwrap();
        let e = t.deleted("a").unwrap_err();
        assert!(
            e.to_string().contains("no longer matches the selector"),
            "{e}"
        );
        // A selector with zero minimum still needs one pod.
        assert!(!Tracker::for_selector(Mode::Ready, 0).is_complete());
    }
}
