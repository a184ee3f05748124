//! Where the workers go: spread over nodes by default.
//!
//! DistDGL assumes one machine per partition: two workers on one node halve
//! each other's memory and cores. So each worker (DistParMETIS ranks are the
//! workers) gets a preferred spread over `kubernetes.io/hostname`, unless the
//! user's template already says where its pods go (a topology spread or a pod
//! anti-affinity: the user's wins, untouched) or the job's
//! [`ANNOTATION_WORKER_SPREAD`] is `none`.

use std::collections::BTreeMap;

use dgl_api::names::*;
use dgl_api::{DGLJob, ReplicaType};
use k8s_openapi::api::core::v1::{PodSpec, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;

/// What the job's [`ANNOTATION_WORKER_SPREAD`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerSpread {
    /// The default: a preferred spread (`ScheduleAnyway`).
    Preferred,
    /// No spread added by the operator.
    None,
}

/// Reads the job's [`ANNOTATION_WORKER_SPREAD`]; an unknown value is an
/// error naming the annotation and what it may be.
pub fn worker_spread(job: &DGLJob) -> Result<WorkerSpread, String> {
    match job
        .annotations()
        .get(ANNOTATION_WORKER_SPREAD)
        .map(|v| v.trim())
    {
        None | Some("preferred") => Ok(WorkerSpread::Preferred),
        Some("none") => Ok(WorkerSpread::None),
        Some(other) => Err(format!(
            "annotation {ANNOTATION_WORKER_SPREAD} is {other:?}; expected \"preferred\" or \"none\""
        )),
    }
}

/// Adds the default spread to a worker's spec, unless the template already
/// places its pods or the job turns it off. (An unknown annotation value is
/// refused by validation before any pod is built; here it keeps the default.)
pub(super) fn add_worker_spread(spec: &mut PodSpec, job: &DGLJob) {
    if worker_spread(job) == Ok(WorkerSpread::None) || user_places_pods(spec) {
        return;
    }
    let match_labels = BTreeMap::from([
        (LABEL_JOB_NAME.to_string(), job.name_any()),
        (
            LABEL_REPLICA_TYPE.to_string(),
            ReplicaType::Worker.label_value().to_string(),
        ),
    ]);
    spec.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
        max_skew: 1,
        topology_key: TOPOLOGY_HOSTNAME.into(),
        when_unsatisfiable: "ScheduleAnyway".into(),
        label_selector: Some(LabelSelector {
            match_labels: Some(match_labels),
            ..Default::default()
        }),
        ..Default::default()
    }]);
}

/// The template sets a topology spread or a pod anti-affinity of its own.
fn user_places_pods(spec: &PodSpec) -> bool {
    let spread = spec
        .topology_spread_constraints
        .as_ref()
        .is_some_and(|c| !c.is_empty());
    let anti = spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .is_some();
    spread || anti
}

#[cfg(test)]
mod tests {
    use super::super::tests::job;
    use super::super::*;
    use super::{worker_spread, WorkerSpread};
    use crate::pure::settings::BuildConfig;
    use crate::pure::validate::valid;
    use dgl_api::ReplicaType;

    fn seed() -> DGLJob {
        job(include_str!("../../../../examples/seed-dgljob.yaml"))
    }

    #[test]
    fn workers_are_spread_over_nodes_by_default() {
        let j = seed();
        let pod = worker_pod(&valid(&j), 0, 0, &BuildConfig::default());
        let spread = pod
            .spec
            .as_ref()
            .unwrap()
            .topology_spread_constraints
            .clone();
        let spread = spread.expect("a default spread on the worker");
        assert_eq!(spread.len(), 1);
        let c = &spread[0];
        assert_eq!(c.topology_key, "kubernetes.io/hostname");
        assert_eq!(c.max_skew, 1);
        assert_eq!(c.when_unsatisfiable, "ScheduleAnyway");
        let sel = c
            .label_selector
            .as_ref()
            .unwrap()
            .match_labels
            .clone()
            .unwrap();
        assert_eq!(sel[LABEL_JOB_NAME], "dgl-graphsage");
        assert_eq!(sel[LABEL_REPLICA_TYPE], "worker");
        // The selector matches the worker's own labels.
        let labels = pod.metadata.labels.as_ref().unwrap();
        for (k, v) in &sel {
            assert_eq!(labels.get(k), Some(v), "label {k}");
        }
    }

    fn with_worker_spec(j: &mut DGLJob, f: impl FnOnce(&mut k8s_openapi::api::core::v1::PodSpec)) {
        let w = j
            .spec
            .dgl_replica_specs
            .get_mut(&ReplicaType::Worker)
            .unwrap();
        f(w.template.spec.as_mut().unwrap());
    }

    #[test]
    fn the_users_spread_or_anti_affinity_wins_untouched() {
        use k8s_openapi::api::core::v1::{Affinity, PodAntiAffinity, TopologySpreadConstraint};
        let mut j = seed();
        let hard = TopologySpreadConstraint {
            max_skew: 2,
            topology_key: "topology.kubernetes.io/zone".into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            ..Default::default()
        };
        with_worker_spec(&mut j, |s| {
            s.topology_spread_constraints = Some(vec![hard.clone()])
        });
        let pod = worker_pod(&valid(&j), 0, 0, &BuildConfig::default());
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.topology_spread_constraints, Some(vec![hard]));

        let mut j = seed();
        let affinity = Affinity {
            pod_anti_affinity: Some(PodAntiAffinity::default()),
            ..Default::default()
        };
        with_worker_spec(&mut j, |s| s.affinity = Some(affinity.clone()));
        let pod = worker_pod(&valid(&j), 0, 0, &BuildConfig::default());
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.topology_spread_constraints, None);
        assert_eq!(spec.affinity, Some(affinity));
    }

    #[test]
    fn the_annotation_turns_the_spread_off_and_only_workers_get_it() {
        let mut j = seed();
        for pod in [
            launcher_pod(&valid(&j), 0, &BuildConfig::default()),
            partitioner_pod(&valid(&j), 0, &BuildConfig::default()),
        ] {
            assert_eq!(pod.spec.unwrap().topology_spread_constraints, None);
        }
        j.annotations_mut()
            .insert(ANNOTATION_WORKER_SPREAD.into(), "none".into());
        assert_eq!(worker_spread(&j), Ok(WorkerSpread::None));
        let pod = worker_pod(&valid(&j), 0, 0, &BuildConfig::default());
        assert_eq!(pod.spec.unwrap().topology_spread_constraints, None);
        j.annotations_mut()
            .insert(ANNOTATION_WORKER_SPREAD.into(), "hard".into());
        let err = worker_spread(&j).unwrap_err();
        assert!(
            err.contains(ANNOTATION_WORKER_SPREAD) && err.contains("\"none\""),
            "{err}"
        );
        let refusal = crate::pure::validate::validate(&j, &BuildConfig::default()).unwrap_err();
        assert_eq!(refusal.reason, "AnnotationRefused");
    }
}
