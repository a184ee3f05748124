//! Pipeline step "build": every child object a validated job wants besides
//! its pods, as one value ([`Desired`]), from the plan (which holds the pod
//! steps). Pure: the controller only applies it ([`crate::controller`]'s
//! `children`), so what a job wants is unit-tested without a server.
//!
//! The Kueue Workload is not here: it is an input of the plan, not an
//! output (Kueue's admission decides whether the job is suspended), so it
//! is applied before planning, by the controller's `kueue` gate.

use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::DynamicObject;

use crate::pure::builders::{self, AdmittedRuns};
use crate::pure::observe::ObservedPod;
use crate::pure::plan::{Plan, Planned};
use crate::pure::settings::{BuildConfig, GangScheduler};
use crate::pure::validate::ValidJob;

/// When a child is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyWhen {
    /// Whenever its hash differs from what the operator knows of it.
    Changed,
    /// Only when it does not exist yet.
    Missing,
}

/// The job's children as they should be after this reconcile, each written
/// only when it changed (the pods are the plan's steps).
#[derive(Debug, Clone)]
pub struct Desired<'a> {
    /// The job they belong to; a Secret with a random token is built from it.
    pub valid: ValidJob<'a>,
    /// The ConfigMap write the plan needs ([`config_map_write`]); None:
    /// nothing to write now (an object of its name must still be the job's).
    pub config_map: Option<(ConfigMap, ApplyWhen)>,
    /// The launcher's ServiceAccount, Role and RoleBinding.
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: RoleBinding,
    /// With `BuildConfig::network_policy`: the policy admitting the current
    /// run and the kept partitioner ([`AdmittedRuns`]).
    pub network_policy: Option<NetworkPolicy>,
    /// With a gang scheduler: its PodGroup.
    pub pod_group: Option<(DynamicObject, GangScheduler)>,
    /// The token Secret when its token derives from the operator's key and
    /// the job's UID; None: made with a random token when it is created.
    pub derived_secret: Option<Secret>,
}

impl Desired<'_> {
    /// The token Secret to create: the derived one, else one with the
    /// token `random` makes (called only then: a running job's pods hold
    /// the token of the Secret that exists, which is never rewritten).
    pub fn secret(&self, random: impl FnOnce() -> String) -> Secret {
        match &self.derived_secret {
            Some(s) => s.clone(),
            None => builders::secret(&self.valid, &random()),
        }
    }
}

/// What `planned` wants of the job's children: None when its plan keeps
/// them as they are (a finished job, or one refused: never validated).
pub fn wanted<'a>(
    planned: &Planned<'a>,
    pods: &[ObservedPod],
    cfg: &BuildConfig,
) -> Option<Desired<'a>> {
    let valid = planned.valid?;
    planned
        .plan
        .ensure_children
        .then(|| desired(valid, &planned.plan, pods, cfg))
}

/// Every child `valid` wants after `plan`, with the operator's settings
/// (gang scheduler, NetworkPolicy, token key).
pub fn desired<'a>(
    valid: ValidJob<'a>,
    plan: &Plan,
    pods: &[ObservedPod],
    cfg: &BuildConfig,
) -> Desired<'a> {
    let (service_account, role, role_binding) = builders::launcher_rbac(&valid);
    // The NetworkPolicy moves to a new run with the status, before its pods.
    let runs = AdmittedRuns::after(plan.status.restart_count, pods, &plan.steps);
    let token = cfg
        .token_key
        .as_ref()
        .and_then(|key| builders::job_token(key, valid.job()));
    Desired {
        config_map: config_map_write(&valid, pods, plan),
        service_account,
        role,
        role_binding,
        network_policy: cfg
            .network_policy
            .then(|| builders::network_policy(&valid, runs)),
        pod_group: cfg
            .gang
            .map(|gang| (builders::pod_group(&valid, gang), gang)),
        derived_secret: token.map(|t| builders::secret(&valid, &t)),
        valid,
    }
}

/// The ConfigMap write this plan needs, if any. Only the launcher reads the
/// ConfigMap, and a launcher with workers waits (its watcher-loop, through
/// the API) until the ConfigMap launches its run: so the ConfigMap is
/// created when the first run is launched, complete (every worker's IP,
/// the run), and rewritten only when a later run is launched or a suspended
/// job takes its launch back; one write per run instead of a create before
/// the IPs are known and a rewrite after. A launcher training alone mounts
/// it as a volume: created with the job, never rewritten.
fn config_map_write(
    valid: &ValidJob<'_>,
    pods: &[ObservedPod],
    plan: &Plan,
) -> Option<(ConfigMap, ApplyWhen)> {
    let when = if plan.launch.is_some() || plan.reset_launch {
        ApplyWhen::Changed
    } else if valid.spec.is_standalone() {
        ApplyWhen::Missing
    } else {
        return None;
    };
    Some((builders::config_map(valid, pods, plan.launch), when))
}

#[cfg(test)]
mod tests;
