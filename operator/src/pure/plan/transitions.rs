//! Which conditions became True in a plan: one Event each.

use dgl_api::{DGLJobStatus, JobPhase};

/// A condition that became True in this plan, for Events and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub type_: JobPhase,
    pub reason: String,
    pub message: String,
}

/// Conditions that became True between two statuses, one Event each, but
/// for a job that starts partitioning as it is created: its Partitioning is
/// told in the Created Event's message (same instant, one Event fewer).
pub fn transitions(old: Option<&DGLJobStatus>, new: &DGLJobStatus) -> Vec<Transition> {
    let mut all = new_true_conditions(old, new);
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

fn new_true_conditions(old: Option<&DGLJobStatus>, new: &DGLJobStatus) -> Vec<Transition> {
    new.conditions
        .iter()
        .filter(|c| c.status == "True")
        .filter(|c| {
            let before = old.and_then(|o| o.conditions.iter().find(|x| x.type_ == c.type_));
            // A new True, or a True that turned True again since `old` (its
            // lastTransitionTime moved: another restart). A new reason or
            // message alone is no transition.
            before.is_none_or(|b| {
                b.status != "True" || b.last_transition_time != c.last_transition_time
            })
        })
        .filter_map(|c| {
            Some(Transition {
                type_: JobPhase::from_name(&c.type_)?,
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
        })
        .collect()
}
