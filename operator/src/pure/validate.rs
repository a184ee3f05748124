//! What the CRD cannot check because it depends on the operator's install:
//! a job refused here fails (condition Failed, a Warning Event) before any
//! of its objects or pods is created. Pure, like the plan that calls it.

use dgl_api::{rules, DGLJob, ReplicaType};
use kube::ResourceExt;

use crate::pure::settings::BuildConfig;

/// Why a job is refused: the Failed condition's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

/// A job that passed [`validate`]: the proof the planner's forward path
/// and the builders of its children ask for. The field is private, so no
/// other module can make one: building a job's objects without validating
/// it first does not compile.
#[derive(Debug, Clone, Copy)]
pub struct ValidJob<'a> {
    job: &'a DGLJob,
}

impl<'a> ValidJob<'a> {
    /// The job that was validated.
    pub fn job(&self) -> &'a DGLJob {
        self.job
    }
}

impl std::ops::Deref for ValidJob<'_> {
    type Target = DGLJob;

    fn deref(&self) -> &DGLJob {
        self.job
    }
}

/// Checks `job` against the operator's settings.
pub fn validate<'a>(job: &'a DGLJob, cfg: &BuildConfig) -> Result<ValidJob<'a>, Refusal> {
    protected_service_accounts(job, cfg)?;
    launcher_accounts(job)?;
    graphbolt(job)?;
    partition_cache(job)?;
    placement(job)?;
    Ok(ValidJob { job })
}

/// Tests: `job` validated with the default settings (a refusal fails the test).
#[cfg(test)]
pub(crate) fn valid(job: &DGLJob) -> ValidJob<'_> {
    validate(job, &BuildConfig::default()).expect("the test's job is valid")
}

/// The job's worker-spread annotation is one the operator knows.
fn placement(job: &DGLJob) -> Result<(), Refusal> {
    crate::pure::builders::worker_spread(job)
        .map(|_| ())
        .map_err(|message| Refusal {
            reason: "AnnotationRefused",
            message,
        })
}

/// No Worker or Partitioner runs as a launcher's ServiceAccount, which may
/// patch a launcher pod: the CRD's rule from [`dgl_api::rules`], checked
/// again for a job stored before the CRD had it.
fn launcher_accounts(job: &DGLJob) -> Result<(), Refusal> {
    match rules::launcher_account_named(&job.spec) {
        None => Ok(()),
        Some(message) => Err(Refusal {
            reason: "ServiceAccountRefused",
            message,
        }),
    }
}

/// What DGL 2.1.0's GraphBolt cannot do with this job's settings: the
/// CRD's rules from [`dgl_api::rules`], checked again for a job stored
/// before the CRD had them.
fn graphbolt(job: &DGLJob) -> Result<(), Refusal> {
    match rules::graphbolt_conflict(&rules::Facts::of(&job.spec)) {
        None => Ok(()),
        Some(conflict) => Err(Refusal {
            reason: "GraphBoltUnsupported",
            message: conflict.rule().message.to_string(),
        }),
    }
}

/// `spec.partitionCache` only where its key can be computed (the CRD's
/// rule, checked again as the others are).
fn partition_cache(job: &DGLJob) -> Result<(), Refusal> {
    let rule = &rules::PARTITION_CACHE_NEEDS_NATIVE_PARTITIONER;
    if rule.kept_by(&rules::Facts::of(&job.spec)) {
        return Ok(());
    }
    Err(Refusal {
        reason: "PartitionCacheUnsupported",
        message: rule.message.to_string(),
    })
}

/// No template may name a protected ServiceAccount (`serviceAccountName`,
/// or its deprecated alias `serviceAccount`).
fn protected_service_accounts(job: &DGLJob, cfg: &BuildConfig) -> Result<(), Refusal> {
    let ns = job.namespace().unwrap_or_default();
    for role in ReplicaType::ALL {
        let Some(spec) = job
            .spec
            .replica_spec(role)
            .and_then(|s| s.template.spec.as_ref())
        else {
            continue;
        };
        let named = [
            ("serviceAccountName", spec.service_account_name.as_deref()),
            ("serviceAccount", spec.service_account.as_deref()),
        ];
        for (field, sa) in named {
            let Some(sa) = sa else { continue };
            if cfg
                .protected_service_accounts
                .iter()
                .any(|p| p.matches(&ns, sa))
            {
                return Err(Refusal {
                    reason: "ServiceAccountRefused",
                    message: format!(
                        "spec.dglReplicaSpecs.{role}.template.spec.{field}: ServiceAccount {ns}/{sa} \
                         is reserved (the operator's own, or declared off limits by its install); \
                         a job's pods may not run as it"
                    ),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
