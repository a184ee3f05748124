//! Where a job's pods ran: gathered while the job is followed, then checked
//! against the cluster's nodes (issue #34: on several nodes a DGLJob puts
//! its workers on different ones, so shards, DGL's server traffic and the
//! MPI ranks cross nodes).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{ensure, Context, Result};
use dgl_api::names::worker_name;
use dgl_api::DGLJob;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use localkube::LocalCluster;

/// Pod name → the node it was bound to (the last one seen).
#[derive(Debug, Default)]
pub(crate) struct Placement(BTreeMap<String, String>);

impl Placement {
    /// Records the node of every pod that has one.
    pub(crate) fn observe(&mut self, pods: &[Pod]) {
        for p in pods {
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                self.0.insert(p.name_any(), node);
            }
        }
    }

    /// With `nodes` nodes, job `job`'s `workers` workers must have been on
    /// min(workers, nodes) distinct nodes (read from each pod's
    /// `spec.nodeName`). Returns a line naming every pod's node.
    pub(crate) fn check_workers_spread(
        &self,
        job: &str,
        workers: usize,
        nodes: usize,
    ) -> Result<String> {
        let names: Vec<String> = (0..workers).map(|i| worker_name(job, i as i32)).collect();
        let seen: Vec<(&String, Option<&String>)> =
            names.iter().map(|n| (n, self.0.get(n))).collect();
        let distinct: BTreeSet<&String> = seen.iter().filter_map(|(_, n)| *n).collect();
        let want = workers.min(nodes);
        ensure!(
            distinct.len() == want,
            "job {job}'s {workers} workers sat on {} distinct node(s), expected {want} on a \
             cluster of {nodes}: {seen:?}",
            distinct.len()
        );
        Ok(self.line())
    }

    /// `pod@node` for every pod seen.
    pub(crate) fn line(&self) -> String {
        let pods: Vec<String> = self.0.iter().map(|(p, n)| format!("{p}@{n}")).collect();
        pods.join(" ")
    }
}

/// `job` with every pod held on node `node` (`kubernetes.io/hostname`).
pub(crate) fn pin_to_node(mut job: DGLJob, node: &str) -> DGLJob {
    for spec in job.spec.dgl_replica_specs.values_mut() {
        spec.template
            .spec
            .get_or_insert_with(Default::default)
            .node_selector
            .get_or_insert_with(Default::default)
            .insert("kubernetes.io/hostname".into(), node.to_owned());
    }
    job
}

/// `job` with its workers spread over nodes as a rule, not a preference
/// (`whenUnsatisfiable: DoNotSchedule`, the user guide's hard spread): a
/// worker waits for a node of its own rather than share one. For the
/// scenarios that check the spread while others run beside them, where the
/// operator's default preference can lose to the nodes' free CPU.
pub(crate) fn spread_workers(mut job: DGLJob) -> Result<DGLJob> {
    let name = job.name_any();
    let constraint = serde_json::from_value(serde_json::json!({
        "maxSkew": 1,
        "topologyKey": dgl_api::names::TOPOLOGY_HOSTNAME,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": { "matchLabels": {
            dgl_api::names::LABEL_JOB_NAME: name,
            dgl_api::names::LABEL_REPLICA_TYPE: dgl_api::ReplicaType::Worker.label_value(),
        }},
    }))?;
    job.spec
        .dgl_replica_specs
        .get_mut(&dgl_api::ReplicaType::Worker)
        .context("the job has no Worker spec")?
        .template
        .spec
        .get_or_insert_with(Default::default)
        .topology_spread_constraints = Some(vec![constraint]);
    Ok(job)
}

/// The first container of `role`'s template in `job`.
pub(crate) fn main_container_mut(
    job: &mut DGLJob,
    role: dgl_api::ReplicaType,
) -> Result<&mut k8s_openapi::api::core::v1::Container> {
    job.spec
        .dgl_replica_specs
        .get_mut(&role)
        .and_then(|s| s.template.spec.as_mut())
        .and_then(|s| s.containers.first_mut())
        .with_context(|| format!("the job has no {role:?} container"))
}

/// The name of node 0 (the one in the host's network namespace).
pub(crate) fn node0(cluster: &LocalCluster) -> Result<String> {
    cluster
        .node_summaries()
        .into_iter()
        .next()
        .map(|n| n.node_name)
        .context("the cluster has no node")
}

/// How many nodes the cluster has.
pub(crate) async fn node_count(client: &Client) -> Result<usize> {
    Ok(Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": []},
        }))
        .unwrap()
    }

    #[test]
    fn workers_on_one_node_fail_where_two_exist() {
        let mut p = Placement::default();
        p.observe(&[pod("j-worker-0", "a"), pod("j-worker-1", "a")]);
        assert!(p.check_workers_spread("j", 2, 1).is_ok());
        assert!(p.check_workers_spread("j", 2, 2).is_err());
        p.observe(&[pod("j-worker-1", "b"), pod("j-launcher", "a")]);
        let line = p.check_workers_spread("j", 2, 2).unwrap();
        assert!(line.contains("j-worker-1@b"), "{line}");
        // A worker never seen on a node does not count as spread.
        assert!(p.check_workers_spread("j", 3, 3).is_err());
    }

    #[test]
    fn the_hard_spread_selects_this_jobs_workers_on_the_worker_template_only() {
        let template = serde_json::json!({"spec": {"containers": [{"name": "m"}]}});
        let job: DGLJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "dgloperator.io/v1alpha1",
            "kind": "DGLJob",
            "metadata": {"name": "g"},
            "spec": {"dglReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template},
                "Worker": {"replicas": 2, "template": template},
            }},
        }))
        .unwrap();
        let job = spread_workers(job).unwrap();
        let specs = &job.spec.dgl_replica_specs;
        let worker = specs[&dgl_api::ReplicaType::Worker].template.spec.as_ref();
        let c = &worker
            .unwrap()
            .topology_spread_constraints
            .as_ref()
            .unwrap()[0];
        assert_eq!(c.when_unsatisfiable, "DoNotSchedule");
        assert_eq!(c.topology_key, "kubernetes.io/hostname");
        let labels = c
            .label_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap();
        assert_eq!(labels["dgloperator.io/job-name"], "g");
        assert_eq!(labels["dgloperator.io/replica-type"], "worker");
        let launcher = specs[&dgl_api::ReplicaType::Launcher]
            .template
            .spec
            .as_ref();
        assert!(launcher.unwrap().topology_spread_constraints.is_none());
    }
}
