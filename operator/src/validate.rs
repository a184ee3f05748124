//! What the CRD cannot check because it depends on the operator's install:
//! a job refused here fails (condition Failed, a Warning Event) before any
//! of its objects or pods is created. Pure, like the plan that calls it.

use std::str::FromStr;

use dgl_api::{DGLJob, PartitionMode, ReplicaType};
use kube::ResourceExt;

use crate::builders::BuildConfig;

/// A ServiceAccount no job's pod may run as: `namespace/name`, or `name`
/// alone for that name in every namespace. The operator's own is one
/// (a pod running as it would hold the operator's token and rights).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedServiceAccount {
    pub namespace: Option<String>,
    pub name: String,
}

impl FromStr for ProtectedServiceAccount {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (namespace, name) = match s.split_once('/') {
            Some((ns, name)) => (Some(ns.to_string()), name),
            None => (None, s),
        };
        let valid = |x: &str| !x.is_empty() && !x.contains('/');
        if !valid(name) || namespace.as_deref().is_some_and(|ns| !valid(ns)) {
            return Err(format!(
                "{s:?}: expected <namespace>/<name> or <name> of a ServiceAccount"
            ));
        }
        Ok(ProtectedServiceAccount {
            namespace,
            name: name.to_string(),
        })
    }
}

impl ProtectedServiceAccount {
    fn matches(&self, namespace: &str, name: &str) -> bool {
        self.name == name && self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }
}

/// Why a job is refused: the Failed condition's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

/// Checks `job` against the operator's settings.
pub fn validate(job: &DGLJob, cfg: &BuildConfig) -> Result<(), Refusal> {
    protected_service_accounts(job, cfg)?;
    graphbolt(job)
}

/// What DGL 2.1.0's GraphBolt cannot do with this job's settings (the CRD's
/// rules say the same; a job stored before them is refused here).
fn graphbolt(job: &DGLJob) -> Result<(), Refusal> {
    let spec = &job.spec;
    if !spec.use_graphbolt() {
        return Ok(());
    }
    let refuse = |message: &str| {
        Err(Refusal {
            reason: "GraphBoltUnsupported",
            message: message.to_string(),
        })
    };
    if spec.partition_mode == PartitionMode::DistParMetis {
        return refuse("spec.useGraphbolt: is not supported with spec.partitionMode DistParMETIS (each worker holds only its own partition; DGL 2.1.0's converter needs all of them): use ParMETIS, DGL-API or Skip");
    }
    if spec.num_workers() == 0 {
        return refuse("spec.useGraphbolt: needs spec.dglReplicaSpecs.Worker (DGL 2.1.0 has no GraphBolt in standalone mode, the training a job without workers runs)");
    }
    Ok(())
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
mod tests {
    use super::*;

    fn job(ns: &str) -> DGLJob {
        let mut job: DGLJob =
            serde_yaml::from_str(include_str!("../../examples/seed-dgljob.yaml")).unwrap();
        job.metadata.namespace = Some(ns.into());
        job
    }

    #[test]
    fn graphbolt_is_refused_where_dgl_cannot_use_it() {
        let cfg = cfg(&[]);
        let mut j = job("ns");
        j.spec.use_graphbolt = Some(true);
        assert_eq!(validate(&j, &cfg), Ok(()));
        j.spec.partition_mode = PartitionMode::DistParMetis;
        let r = validate(&j, &cfg).unwrap_err();
        assert_eq!(r.reason, "GraphBoltUnsupported");
        assert!(r.message.starts_with("spec.useGraphbolt:"), "{}", r.message);
        assert!(r.message.contains("DistParMETIS"), "{}", r.message);
        j.spec.partition_mode = PartitionMode::Skip;
        j.spec.dgl_replica_specs.remove(&ReplicaType::Worker);
        let r = validate(&j, &cfg).unwrap_err();
        assert!(r.message.contains("standalone"), "{}", r.message);
        j.spec.use_graphbolt = Some(false);
        assert_eq!(validate(&j, &cfg), Ok(()));
    }

    fn set_sa(job: &mut DGLJob, role: ReplicaType, sa: &str) {
        let spec = job.spec.dgl_replica_specs.get_mut(&role).unwrap();
        spec.template.spec.as_mut().unwrap().service_account_name = Some(sa.into());
    }

    fn cfg(protected: &[&str]) -> BuildConfig {
        BuildConfig {
            protected_service_accounts: protected.iter().map(|s| s.parse().unwrap()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_operators_service_account_is_refused_naming_the_field() {
        let cfg = cfg(&["ops/dgl-operator"]);
        let mut j = job("ops");
        assert_eq!(validate(&j, &cfg), Ok(()));
        set_sa(&mut j, ReplicaType::Worker, "dgl-operator");
        let r = validate(&j, &cfg).unwrap_err();
        assert_eq!(r.reason, "ServiceAccountRefused");
        assert!(
            r.message
                .starts_with("spec.dglReplicaSpecs.Worker.template.spec.serviceAccountName: ServiceAccount ops/dgl-operator"),
            "{}",
            r.message
        );
        // The same name in another namespace is another ServiceAccount.
        let mut other = job("team-a");
        set_sa(&mut other, ReplicaType::Worker, "dgl-operator");
        assert_eq!(validate(&other, &cfg), Ok(()));
    }

    #[test]
    fn the_deprecated_alias_and_every_role_are_checked() {
        let cfg = cfg(&["admin"]);
        let mut j = job("any");
        let spec = j
            .spec
            .dgl_replica_specs
            .get_mut(&ReplicaType::Launcher)
            .unwrap();
        spec.template.spec.as_mut().unwrap().service_account = Some("admin".into());
        let r = validate(&j, &cfg).unwrap_err();
        assert!(r
            .message
            .starts_with("spec.dglReplicaSpecs.Launcher.template.spec.serviceAccount:"));
    }

    #[test]
    fn protected_service_accounts_parse_or_name_what_is_wrong() {
        assert_eq!(
            "ns/sa".parse::<ProtectedServiceAccount>(),
            Ok(ProtectedServiceAccount {
                namespace: Some("ns".into()),
                name: "sa".into()
            })
        );
        assert_eq!(
            "sa".parse::<ProtectedServiceAccount>().unwrap().namespace,
            None
        );
        for bad in ["", "ns/", "/sa", "a/b/c"] {
            let e = bad.parse::<ProtectedServiceAccount>().unwrap_err();
            assert!(e.contains("expected <namespace>/<name>"), "{e}");
        }
    }

    /// The CRD caps `replicas` so that the largest job it admits (longest
    /// name, IPv6 addresses) still fits its ConfigMap under the API
    /// server's 1 MiB limit; the operator never meets an oversized one.
    #[test]
    fn the_largest_job_the_crd_admits_fits_its_config_map() {
        let crd = serde_json::to_value(dgl_api::crd()).unwrap();
        let replicas = crd
            .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/dglReplicaSpecs/additionalProperties/properties/replicas/maximum")
            .and_then(|m| m.as_f64())
            .unwrap() as i32;
        assert!(replicas >= 1024, "cap {replicas}");
        let mut j = job("a-namespace");
        j.metadata.name = Some(format!("j{}", "x".repeat(49)));
        let w = j
            .spec
            .dgl_replica_specs
            .get_mut(&ReplicaType::Worker)
            .unwrap();
        w.replicas = Some(replicas);
        j.spec.slots_per_worker = Some(1024);
        j.metadata.uid = Some("uid".into());
        let name = j.name_any();
        let pods: Vec<crate::observe::ObservedPod> = (0..replicas)
            .map(|i| crate::observe::ObservedPod {
                name: dgl_api::names::worker_name(&name, i),
                role: ReplicaType::Worker,
                index: i,
                epoch: 0,
                state: crate::observe::PodState::Running { ready: true },
                ip: Some(format!("fd00:1234:5678:9abc:def0:1234:{:04x}:{:04x}", i, i)),
                progress: None,
                facts: Default::default(),
            })
            .collect();
        let cm = crate::builders::config_map(&j, &pods, Some(0));
        let size = serde_json::to_vec(&cm.data).unwrap().len();
        assert!(
            cm.data
                .as_ref()
                .unwrap()
                .contains_key(dgl_api::names::IP_CONFIG),
            "complete"
        );
        assert!(size < 1024 * 1024 * 3 / 4, "ConfigMap data is {size} bytes");
    }
}
