//! Desired objects, computed from the job alone: plain functions, no I/O.
//!
//! The user's pod templates are kept (image, resources, volumes, env); the
//! operator only adds what its programs need: env, volumes, labels, ports, a
//! readiness probe and a command where the template has none.

use std::collections::BTreeMap;

use dgl_api::names::*;
use dgl_api::DGLJob;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

/// Annotation holding the hash of what the operator last applied to a child,
/// so an unchanged child is not written again.
pub const HASH_ANNOTATION: &str = "dgloperator.io/applied-hash";

/// Volume names the operator adds.
pub const CONFIG_VOLUME: &str = "dgl-config";
pub const TOKEN_VOLUME: &str = "dgl-token";
pub const SHM_VOLUME: &str = "dgl-shm";
pub const DATASET_VOLUME: &str = "dgl-dataset";
/// The launcher's state folder (DistParMETIS: the "partitioned" marker).
pub const LAUNCHER_STATE_VOLUME: &str = "dgl-launcher-state";

/// The controller ownerReference every child carries.
pub fn owner_ref(job: &DGLJob) -> OwnerReference {
    job.controller_owner_ref(&())
        .expect("a DGLJob from the API server has a name and uid")
}

/// Labels every child of a job carries.
pub fn job_labels(job: &DGLJob) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_JOB_NAME.to_string(), job.name_any()),
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
    ])
}

fn meta(job: &DGLJob, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: job.namespace(),
        labels: Some(labels),
        owner_references: Some(vec![owner_ref(job)]),
        ..Default::default()
    }
}

/// Stamps the hash of an object's content into its annotations.
pub fn with_hash<T: serde::Serialize + Resource>(mut obj: T) -> T {
    let json = serde_json::to_vec(&obj).expect("k8s objects serialize");
    let hash = hex::encode(&Sha256::digest(&json)[..12]);
    obj.annotations_mut()
        .insert(HASH_ANNOTATION.to_string(), hash);
    obj
}

mod objects;
mod placement;
mod pods;

pub use objects::{
    config_map, job_token, launcher_rbac, network_policy, pod_group, secret, AdmittedRuns,
};
pub use placement::{worker_spread, WorkerSpread};
pub use pods::{launcher_pod, parse_quantity_bytes, partitioner_pod, shm_size_limit, worker_pod};

#[cfg(test)]
mod tests;
