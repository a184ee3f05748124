//! The node watch: which nodes are down (Ready False or Unknown), so that a
//! node lost mid-run is acted on at once (`pure::plan::node_loss`) instead
//! of after Kubernetes' 300 s not-ready/unreachable eviction.
//!
//! Nodes are decoded through [`SlimNode`] (name and status conditions
//! only: a node's image list alone can be large). A node turning down
//! triggers the jobs with a pod bound to it (the pod cache's node index).
//! Optional: an install that may not list Nodes (the namespaced one) runs
//! without it ([`readable`]), and node loss is then left to Kubernetes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ClusterResourceScope;
use kube::api::{Api, ListParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource};
use serde::Deserialize;
use tracing::{info, warn};

use super::{JobToReconcile, PodCache};
use crate::pure::plan::DownNode;

/// A Node as the operator reads it: its name and status conditions.
#[derive(Clone, Debug, Deserialize)]
pub struct SlimNode {
    #[serde(deserialize_with = "name_only")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: Option<SlimNodeStatus>,
}

/// A Node's status, conditions only.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimNodeStatus {
    #[serde(default)]
    pub conditions: Vec<NodeCondition>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NameMeta {
    name: Option<String>,
    resource_version: Option<String>,
}

fn name_only<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = NameMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        resource_version: m.resource_version,
        ..Default::default()
    })
}

impl Resource for SlimNode {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Node".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "nodes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl SlimNode {
    fn down(&self) -> Option<DownNode> {
        let conditions = self.status.as_ref().map(|s| s.conditions.as_slice());
        DownNode::of(self.metadata.name.as_deref()?, conditions.unwrap_or(&[]))
    }
}

/// The nodes that are down, by name, as the watch last showed them.
#[derive(Default)]
pub struct NodeCache {
    down: RwLock<BTreeMap<String, DownNode>>,
}

impl NodeCache {
    /// The nodes that are down now.
    pub fn down(&self) -> BTreeMap<String, DownNode> {
        self.down.read().expect("node cache lock").clone()
    }

    /// Records a node as seen; true when it has just gone down (or is down
    /// for another reason than before).
    fn saw(&self, name: &str, down: Option<DownNode>) -> bool {
        let mut nodes = self.down.write().expect("node cache lock");
        match down {
            Some(d) => nodes.insert(name.to_string(), d.clone()).as_ref() != Some(&d),
            None => {
                nodes.remove(name);
                false
            }
        }
    }

    fn gone(&self, name: &str) {
        self.down.write().expect("node cache lock").remove(name);
    }

    /// Replaces everything after a (re)list; the nodes down now that were
    /// not before.
    fn replace(&self, fresh: BTreeMap<String, DownNode>) -> Vec<String> {
        let mut nodes = self.down.write().expect("node cache lock");
        let new = fresh
            .iter()
            .filter(|(n, d)| nodes.get(*n) != Some(*d))
            .map(|(n, _)| n.clone())
            .collect();
        *nodes = fresh;
        new
    }
}

/// Whether this install may list Nodes: false (logged once) when the API
/// server answers 403, as for the namespaced install's Role. Any other
/// error is taken as yes: the watch retries with backoff.
pub async fn readable(client: &Client) -> bool {
    let api: Api<SlimNode> = Api::all(client.clone());
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(s)) if s.code == 403 => {
            info!(
                "the operator may not list Nodes: no node watch; pods of a node \
                 lost are left to Kubernetes' eviction (300 s)"
            );
            false
        }
        Err(e) => {
            warn!(error = %e, "listing Nodes failed; watching them anyway");
            true
        }
        Ok(_) => true,
    }
}

/// Drives the node watch into `nodes`; yields the jobs with a pod on each
/// node that has just gone down.
pub fn node_triggers(
    client: &Client,
    nodes: Arc<NodeCache>,
    pods: Arc<PodCache>,
) -> impl Stream<Item = JobToReconcile> + Send + 'static {
    let api: Api<SlimNode> = Api::all(client.clone());
    let mut fresh: Option<BTreeMap<String, DownNode>> = None;
    watcher(api, watcher::Config::default())
        .default_backoff()
        .flat_map(move |ev| {
            let went_down: Vec<String> = match ev {
                Ok(watcher::Event::Apply(n)) => {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    let down = n.down();
                    match (nodes.saw(&name, down.clone()), down) {
                        (true, Some(d)) => {
                            warn!(node = %name, ready = %d.ready, reason = ?d.reason, "node is NotReady");
                            vec![name]
                        }
                        _ => Vec::new(),
                    }
                }
                Ok(watcher::Event::Delete(n)) => {
                    nodes.gone(n.metadata.name.as_deref().unwrap_or_default());
                    Vec::new()
                }
                Ok(watcher::Event::Init) => {
                    fresh = Some(BTreeMap::new());
                    Vec::new()
                }
                Ok(watcher::Event::InitApply(n)) => {
                    if let (Some(d), Some(fresh)) = (n.down(), fresh.as_mut()) {
                        fresh.insert(d.name.clone(), d);
                    }
                    Vec::new()
                }
                Ok(watcher::Event::InitDone) => nodes.replace(fresh.take().unwrap_or_default()),
                Err(e) => {
                    warn!(error = %e, "node watch failed; retrying");
                    Vec::new()
                }
            };
            let jobs: Vec<JobToReconcile> = went_down.iter().flat_map(|n| pods.jobs_on(n)).collect();
            futures::stream::iter(jobs)
        })
}
