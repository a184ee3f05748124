//! The one path of a job condition from detection to status and Event:
//! a detector (the plan's, Kueue's gate, the failing reconciles') returns a
//! [`ConditionState`] for a [`JobConditionType`]; [`apply`] writes it into
//! `status.conditions`; [`transitions`] compares the status before and after
//! and says which conditions are told by an Event, as each type's
//! [`JobConditionType::event`] asks. The controller only sends what it gets.

use dgl_api::{ConditionEvent, DGLJobStatus, JobConditionType, JobPhase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// What a detector found for one condition type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionState {
    pub type_: JobConditionType,
    pub status: Status,
    pub reason: String,
    pub message: String,
}

/// How a [`ConditionState`] sets its condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// True; its lastTransitionTime stays while it stays True (a new reason
    /// or message alone is no transition).
    True,
    /// True as a new episode: its lastTransitionTime moves even when it
    /// already is True, so that it is told again (another node lost).
    TrueAgain,
    /// False if it is True now, with this reason and message; left as it is
    /// otherwise (a condition that never was True says nothing).
    Cleared,
    /// False, written even where the condition is absent (Queued: admitted
    /// at once is news too).
    False,
}

impl Status {
    /// `True` or `False`, as the condition's `status` says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True | Status::TrueAgain => "True",
            Status::Cleared | Status::False => "False",
        }
    }
}

impl ConditionState {
    /// The condition True with this reason and message.
    pub fn set(type_: impl Into<JobConditionType>, reason: &str, message: &str) -> Self {
        Self::new(type_.into(), Status::True, reason, message)
    }

    /// True as a new episode (see [`Status::TrueAgain`]).
    pub fn again(type_: impl Into<JobConditionType>, reason: &str, message: &str) -> Self {
        Self::new(type_.into(), Status::TrueAgain, reason, message)
    }

    /// False if True (see [`Status::Cleared`]).
    pub fn clear(type_: impl Into<JobConditionType>, reason: &str, message: &str) -> Self {
        Self::new(type_.into(), Status::Cleared, reason, message)
    }

    /// True or False, written either way (see [`Status::False`]).
    pub fn shown(
        type_: impl Into<JobConditionType>,
        value: bool,
        reason: &str,
        message: &str,
    ) -> Self {
        let status = if value { Status::True } else { Status::False };
        Self::new(type_.into(), status, reason, message)
    }

    fn new(type_: JobConditionType, status: Status, reason: &str, message: &str) -> Self {
        ConditionState {
            type_,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Writes `s` into `conds` at `now`: its status, reason, message and the
/// job's `generation`; lastTransitionTime moves only when the status does
/// (or for [`Status::TrueAgain`]).
pub fn apply(conds: &mut Vec<Condition>, s: ConditionState, now: &Time, generation: Option<i64>) {
    let value = s.status.as_str();
    let found = conds.iter_mut().find(|c| c.type_ == s.type_.as_str());
    let c = match (found, s.status) {
        (Some(c), Status::Cleared) if c.status != "True" => return,
        (None, Status::Cleared) => return,
        (Some(c), _) => c,
        (None, _) => {
            conds.push(Condition {
                type_: s.type_.as_str().into(),
                status: value.into(),
                reason: s.reason,
                message: s.message,
                last_transition_time: now.clone(),
                observed_generation: generation,
            });
            return;
        }
    };
    if c.status != value || s.status == Status::TrueAgain {
        c.status = value.into();
        c.last_transition_time = now.clone();
    }
    c.reason = s.reason;
    c.message = s.message;
    c.observed_generation = generation;
}

/// A condition told by an Event: it became True in this status (or, for
/// [`ConditionEvent::EachMessage`], has a new message while True).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub type_: JobConditionType,
    /// A Warning Event, else a Normal one.
    pub warning: bool,
    /// The Event's reason.
    pub reason: String,
    pub message: String,
}

/// The conditions to tell between two statuses, one Event each, but for a
/// job that starts partitioning as it is created: its Partitioning is told
/// in the Created Event's message (same instant, one Event fewer).
pub fn transitions(old: Option<&DGLJobStatus>, new: &DGLJobStatus) -> Vec<Transition> {
    let mut all: Vec<Transition> = new.conditions.iter().filter_map(|c| told(old, c)).collect();
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

/// The Event for condition `c` of the new status, if its type tells this
/// change: a new True, or a True that turned True again since `old` (its
/// lastTransitionTime moved: another restart); for an
/// [`ConditionEvent::EachMessage`] type, also a new message while True.
fn told(old: Option<&DGLJobStatus>, c: &Condition) -> Option<Transition> {
    let type_ = JobConditionType::from_name(&c.type_)?;
    if c.status != "True" {
        return None;
    }
    let before = old.and_then(|o| o.conditions.iter().find(|x| x.type_ == c.type_));
    let turned = turned_true(before, c);
    let (warning, reason) = match type_.event() {
        ConditionEvent::None => return None,
        ConditionEvent::OnTrue { warning, reason } if turned => (warning, reason),
        ConditionEvent::OnTrue { .. } => return None,
        ConditionEvent::EachMessage if turned || before.is_some_and(|b| b.message != c.message) => {
            (true, None)
        }
        ConditionEvent::EachMessage => return None,
    };
    Some(Transition {
        type_,
        warning,
        reason: reason.map_or_else(|| c.reason.clone(), str::to_string),
        message: c.message.clone(),
    })
}

/// A status after one detector's finding, and what it tells.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub status: DGLJobStatus,
    pub transitions: Vec<Transition>,
}

/// `s` applied to `old` outside a plan (the failing reconciles'): the new
/// status and its Events, or None when nothing changes.
pub fn update(
    old: &DGLJobStatus,
    s: ConditionState,
    now: &Time,
    generation: Option<i64>,
) -> Option<Update> {
    let mut status = old.clone();
    apply(&mut status.conditions, s, now, generation);
    if status == *old {
        return None;
    }
    let transitions = transitions(Some(old), &status);
    Some(Update {
        status,
        transitions,
    })
}

/// Whether `now` (True) turned True since `before`: it was absent or not
/// True, or its lastTransitionTime moved (True again).
fn turned_true(before: Option<&Condition>, now: &Condition) -> bool {
    before.is_none_or(|b| b.status != "True" || b.last_transition_time != now.last_transition_time)
}

#[cfg(test)]
mod tests;
