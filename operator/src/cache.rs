//! The operator's watch caches, kept small and indexed for what reconciles ask.
//!
//! - [`PodCache`]: the pods of each job, by (namespace, job name), as the
//!   compact [`ObservedPod`] the state machine reads, not as full `Pod`
//!   objects, with the node each is bound to. Pods are decoded through
//!   [`SlimPod`], which skips the spec (but the node's name),
//!   annotations and managed fields. A pod event triggers its job's
//!   reconcile only when what the state machine sees changed (not, say, when
//!   the scheduler binds it). It also holds the job's *expectations*: pods
//!   this operator created or deleted that the watch has not shown yet.
//! - [`ChildCache`]: for ConfigMaps, ServiceAccounts, Roles, RoleBindings
//!   and (with `--network-policy`) NetworkPolicies (not Secrets: the
//!   operator may not read them), only the
//!   applied-hash annotation, the controller and (ConfigMap) the run it
//!   launched, by kind, namespace and name (metadata-only watches), plus
//!   what this operator wrote and has not seen back yet. A deletion triggers the owner's reconcile, and so
//!   does a ConfigMap whose hash changed.
//!
//! - [`nodes::NodeCache`]: the nodes that are down (Ready False or
//!   Unknown); a node turning down triggers the jobs with a pod on it.
//!
//! Each watch handles a relist (Init … InitDone) by replacing its part of the
//! cache, and reports when its first list is in ([`Readiness`]).
//!
//! Both keep their expectations (writes not seen back yet) in the one store
//! of [`crate::expectations`].

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use dgl_api::failure_policy::FailureFacts;
use dgl_api::names::{ANNOTATION_PROGRESS, LABEL_JOB_NAME, LABEL_RUN};
use dgl_api::DGLJob;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Pod, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, PartialObjectMeta};
use kube::core::DeserializeGuard;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tokio::sync::watch;
use tracing::warn;

use crate::expectations::Expectations;
use crate::pure::builders::HASH_ANNOTATION;
use crate::pure::observe::{ObservedPod, PodState};
use crate::pure::plan::{DownNode, PodsOnDownNodes};

/// A job to reconcile, as the controller's trigger streams name it.
pub type JobToReconcile = ObjectRef<DeserializeGuard<DGLJob>>;

/// A job as the caches index its children: by namespace and name (a job
/// deleted and created again under the same name shares its key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobKey {
    pub namespace: String,
    pub name: String,
}

impl JobKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        JobKey {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    fn to_reconcile(&self) -> JobToReconcile {
        ObjectRef::new(&self.name).within(&self.namespace)
    }
}

/// Watches whose first list must be in before a reconcile may plan.
#[derive(Debug)]
pub struct Readiness {
    remaining: AtomicUsize,
    tx: watch::Sender<bool>,
}

impl Readiness {
    pub fn new(watches: usize) -> Arc<Readiness> {
        Arc::new(Readiness {
            remaining: AtomicUsize::new(watches),
            tx: watch::channel(watches == 0).0,
        })
    }

    fn one_ready(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.tx.send_replace(true);
        }
    }

    /// Resolves once every watch has listed once.
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as `self`: this cannot fail.
        let _ = rx.wait_for(|ready| *ready).await;
    }
}

/// A Pod as the operator reads it: metadata without managed fields or
/// annotations (but the launcher's progress report), the status, and of the spec only the names of native
/// sidecars (which tell a failed container from a restarting sidecar:
/// `dgl_api::pods::failed_container`) and memory limits (`pods::memory_limit`).
#[derive(Clone, Debug, Deserialize)]
pub struct SlimPod {
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "slim_spec")]
    pub spec: Option<PodSpec>,
    #[serde(default)]
    pub status: Option<PodStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimSpec {
    /// The node it is bound to: the node watch maps a node lost to its jobs.
    node_name: Option<String>,
    #[serde(default)]
    init_containers: Vec<SlimContainer>,
    #[serde(default)]
    containers: Vec<SlimContainer>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimContainer {
    name: String,
    restart_policy: Option<String>,
    resources: Option<SlimResources>,
}

#[derive(Deserialize)]
struct SlimResources {
    limits: Option<BTreeMap<String, Quantity>>,
}

impl SlimContainer {
    /// Name, restartPolicy and memory limit (an OOMKilled container is
    /// named with it), or `None` when none of the last two is set.
    fn kept(self) -> Option<Container> {
        let memory = self
            .resources
            .and_then(|r| r.limits)
            .and_then(|mut l| l.remove("memory"));
        if self.restart_policy.is_none() && memory.is_none() {
            return None;
        }
        let resources = memory.map(|m| ResourceRequirements {
            limits: Some(BTreeMap::from([("memory".to_string(), m)])),
            ..Default::default()
        });
        Some(Container {
            name: self.name,
            restart_policy: self.restart_policy,
            resources,
            ..Default::default()
        })
    }
}

/// Keeps the containers' restartPolicy (sidecars) and memory limits only.
fn slim_spec<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<PodSpec>, D::Error> {
    let Some(spec) = Option::<SlimSpec>::deserialize(d)? else {
        return Ok(None);
    };
    let init: Vec<Container> = spec
        .init_containers
        .into_iter()
        .filter_map(SlimContainer::kept)
        .collect();
    let main: Vec<Container> = spec
        .containers
        .into_iter()
        .filter_map(|c| {
            SlimContainer {
                restart_policy: None,
                ..c
            }
            .kept()
        })
        .collect();
    let node_name = spec.node_name.filter(|n| !n.is_empty());
    Ok(
        (!init.is_empty() || !main.is_empty() || node_name.is_some()).then(|| PodSpec {
            init_containers: Some(init),
            containers: main,
            node_name,
            ..Default::default()
        }),
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "progress_only")]
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    deletion_timestamp: Option<Time>,
}

/// Keeps only the progress annotation, and only when it is small enough to
/// be a report (a larger one would be refused anyway).
fn progress_only<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    let all = Option::<BTreeMap<String, String>>::deserialize(d)?;
    Ok(all
        .and_then(|mut a| a.remove(ANNOTATION_PROGRESS))
        .filter(|v| v.len() <= dgl_api::progress::MAX_JSON)
        .map(|v| BTreeMap::from([(ANNOTATION_PROGRESS.to_string(), v)])))
}

fn slim_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        labels: m.labels,
        annotations: m.annotations,
        owner_references: m.owner_references,
        deletion_timestamp: m.deletion_timestamp,
        ..Default::default()
    })
}

impl Resource for SlimPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// One cached pod: what the state machine reads, and which job owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPod {
    pub observed: ObservedPod,
    /// uid of the controlling owner (a DGLJob).
    pub owner_uid: Option<String>,
    /// The node it is bound to (`spec.nodeName`), for the node watch.
    pub node: Option<String>,
    /// Its facts when it has DisruptionTarget True, whatever its state (a
    /// Running pod's `observed` has none): what is kept of it when it
    /// vanishes in a relist, which brings no Delete event.
    pub disruption: Option<FailureFacts>,
}

impl CachedPod {
    /// None for a pod that is not a job's (no job label or no role label).
    fn from_slim(p: SlimPod) -> Option<(JobKey, CachedPod)> {
        let ns = p.metadata.namespace.clone()?;
        let job = p.metadata.labels.as_ref()?.get(LABEL_JOB_NAME)?.clone();
        let owner_uid = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .map(|r| r.uid.clone());
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let pod = Pod {
            metadata: p.metadata,
            spec: p.spec,
            status: p.status,
        };
        let observed = ObservedPod::from_pod(&pod)?;
        let disruption = Some(FailureFacts::of(&pod)).filter(FailureFacts::disrupted);
        Some((
            JobKey {
                namespace: ns,
                name: job,
            },
            CachedPod {
                observed,
                owner_uid,
                node,
                disruption,
            },
        ))
    }

    /// As kept once gone unseen (see [`CachedPod::disruption`]): being
    /// deleted, with its disruption facts; `None` when not disrupted.
    fn vanished(&self) -> Option<CachedPod> {
        let mut c = self.clone();
        c.observed.facts = self.disruption.clone()?;
        c.observed.state = PodState::Terminating;
        Some(c)
    }
}

type PodIndex = HashMap<JobKey, BTreeMap<String, CachedPod>>;

/// A write of this operator to a pod that the watch has not shown yet.
#[derive(Debug, Clone)]
enum Expect {
    /// Created, as the state machine will first see it.
    Created(Box<ObservedPod>),
    Deleted,
}

/// How long a disrupted pod's facts are kept after its Delete event: long
/// enough for the reconcile it triggers (and its retries) to judge it.
pub const GONE_TTL: Duration = Duration::from_secs(600);
/// At most this many disrupted pods' facts are kept (oldest dropped first).
pub const GONE_MAX: usize = 1024;

/// A disrupted pod gone from the cache, as last seen.
#[derive(Debug)]
struct GonePod {
    at: Instant,
    key: JobKey,
    cached: CachedPod,
}

/// The pods of every job, indexed by job, and the pods this operator
/// created or deleted that the watch has not shown yet (by job and pod name).
#[derive(Default)]
pub struct PodCache {
    index: RwLock<PodIndex>,
    expected: Expectations<JobKey, String, Expect>,
    /// Disrupted pods deleted lately, so an eviction whose pod is gone
    /// before the reconcile still matches podFailurePolicy (#36 item 3).
    gone: Mutex<VecDeque<GonePod>>,
}

impl PodCache {
    /// The job's pods as the state machine should see them: the cached pods,
    /// plus pods this operator created that the watch has not shown yet,
    /// with pods it deleted shown as Terminating. Pods of another job of the
    /// same name (an earlier one, being garbage-collected) are Terminating
    /// too: they block their names but say nothing about this job.
    pub fn job_pods(&self, ns: &str, job: &str, uid: Option<&str>) -> Vec<ObservedPod> {
        let key = JobKey::new(ns, job);
        let mut pods: Vec<ObservedPod> = {
            let index = self.index.read().expect("pod cache lock");
            index
                .get(&key)
                .map(|pods| {
                    pods.values()
                        .map(|c| {
                            let mut o = c.observed.clone();
                            if uid.is_none() || c.owner_uid.as_deref() != uid {
                                o.state = PodState::Terminating;
                            }
                            o
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        self.expected.retain(&key, |name, what| {
            let seen = pods.iter_mut().find(|p| &p.name == name);
            match (what, seen) {
                (Expect::Created(_), Some(_)) => false,
                (Expect::Created(o), None) => {
                    pods.push(ObservedPod::clone(o));
                    true
                }
                (Expect::Deleted, None) => false,
                (Expect::Deleted, Some(p)) => {
                    p.state = PodState::Terminating;
                    true
                }
            }
        });
        pods
    }

    /// What is kept of the job's disrupted pods gone from the cache
    /// ([`GONE_TTL`], [`GONE_MAX`]); none for another job of its name.
    pub fn job_gone(&self, ns: &str, job: &str, uid: Option<&str>) -> Vec<ObservedPod> {
        let key = JobKey::new(ns, job);
        let mut gone = self.gone.lock().expect("gone pods lock");
        gone.retain(|g| g.at.elapsed() < GONE_TTL);
        gone.iter()
            .filter(|g| g.key == key && uid.is_some() && g.cached.owner_uid.as_deref() == uid)
            .map(|g| g.cached.observed.clone())
            .collect()
    }

    /// Keeps a deleted pod's facts when Kubernetes disrupted it.
    fn keep_gone(&self, pod: &SlimPod) {
        // A pod deleted at once (grace 0, never bound) may have no
        // deletionTimestamp in its last state: it was being deleted, and
        // only a Terminating or Failed pod's facts are read.
        let mut pod = pod.clone();
        pod.metadata
            .deletion_timestamp
            .get_or_insert_with(|| Time(k8s_openapi::jiff::Timestamp::now()));
        let Some((key, cached)) = CachedPod::from_slim(pod) else {
            return;
        };
        if cached.observed.facts.disrupted() {
            self.push_gone(key, cached);
        }
    }

    /// Keeps a disrupted pod's facts ([`GONE_TTL`], [`GONE_MAX`]).
    fn push_gone(&self, key: JobKey, cached: CachedPod) {
        let mut gone = self.gone.lock().expect("gone pods lock");
        gone.retain(|g| g.at.elapsed() < GONE_TTL);
        while gone.len() >= GONE_MAX {
            gone.pop_front();
        }
        gone.push_back(GonePod {
            at: Instant::now(),
            key,
            cached,
        });
    }

    #[cfg(test)]
    /// Makes every kept gone pod `by` older.
    pub fn age_gone(&self, by: Duration) {
        for g in self.gone.lock().expect("gone pods lock").iter_mut() {
            g.at = g.at.checked_sub(by).expect("an Instant that far back");
        }
    }

    #[cfg(test)]
    pub fn gone_len(&self) -> usize {
        self.gone.lock().expect("gone pods lock").len()
    }

    /// The job's pods bound to a node in `down`, with that node (what
    /// `plan::plan_on_nodes` reads).
    pub fn job_pods_on(
        &self,
        ns: &str,
        job: &str,
        down: &BTreeMap<String, DownNode>,
    ) -> PodsOnDownNodes {
        if down.is_empty() {
            return PodsOnDownNodes::new();
        }
        let index = self.index.read().expect("pod cache lock");
        index
            .get(&JobKey::new(ns, job))
            .into_iter()
            .flatten()
            .filter_map(|(name, c)| {
                let node = down.get(c.node.as_deref()?)?;
                Some((name.clone(), node.clone()))
            })
            .collect()
    }

    /// The jobs with a pod bound to `node`.
    pub fn jobs_on(&self, node: &str) -> Vec<JobToReconcile> {
        let index = self.index.read().expect("pod cache lock");
        index
            .iter()
            .filter(|(_, pods)| pods.values().any(|c| c.node.as_deref() == Some(node)))
            .map(|(k, _)| k.to_reconcile())
            .collect()
    }

    /// Records a pod this operator just created (as `observed`).
    pub fn expect_created(&self, key: &JobKey, observed: ObservedPod) {
        let name = observed.name.clone();
        self.expected
            .expect(key, name, Expect::Created(Box::new(observed)));
    }

    /// Records a pod this operator just deleted.
    pub fn expect_deleted(&self, key: &JobKey, pod: &str) {
        self.expected.expect(key, pod.to_string(), Expect::Deleted);
    }

    #[cfg(test)]
    /// Pods this operator wrote and has not seen back yet (all jobs).
    pub fn pending_expectations(&self) -> usize {
        self.expected.len()
    }

    #[cfg(test)]
    /// Number of cached pods.
    pub fn len(&self) -> usize {
        let index = self.index.read().expect("pod cache lock");
        index.values().map(BTreeMap::len).sum()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the expectation on `name` that this observation satisfies.
    /// True when the reconcile that wrote it already planned with exactly
    /// this observation (a created pod, first seen as it was built), so the
    /// event needs no reconcile of its own.
    fn satisfy(&self, key: &JobKey, name: &str, seen: Option<&CachedPod>) -> bool {
        // Whatever its age: an old expectation the event satisfies goes too.
        let satisfied = self
            .expected
            .remove_if(key, &name.to_string(), |what, _expired| {
                match (what, seen) {
                    (Expect::Created(_), Some(_)) => true,
                    (Expect::Deleted, None) => true,
                    (Expect::Deleted, Some(c)) => c.observed.state == PodState::Terminating,
                    (Expect::Created(_), None) => false,
                }
            });
        matches!((satisfied, seen), (Some(Expect::Created(o)), Some(c)) if *o == c.observed)
    }

    /// Upserts a pod; Some(job) when the job should be reconciled.
    fn apply(&self, pod: SlimPod) -> Option<JobToReconcile> {
        let name = pod.metadata.name.clone()?;
        let (key, cached) = CachedPod::from_slim(pod)?;
        let changed = {
            let mut index = self.index.write().expect("pod cache lock");
            let pods = index.entry(key.clone()).or_default();
            let before = pods.insert(name.clone(), cached.clone());
            // A binding alone (the node) is nothing the plan sees.
            before.is_none_or(|b| b.observed != cached.observed || b.owner_uid != cached.owner_uid)
        };
        let foreseen = self.satisfy(&key, &name, Some(&cached));
        (changed && !foreseen).then(|| key.to_reconcile())
    }

    fn delete(&self, pod: &SlimPod) -> Option<JobToReconcile> {
        self.keep_gone(pod);
        let name = pod.metadata.name.as_ref()?;
        let ns = pod.metadata.namespace.clone()?;
        let job = pod.metadata.labels.as_ref()?.get(LABEL_JOB_NAME)?.clone();
        let key = JobKey {
            namespace: ns,
            name: job,
        };
        {
            let mut index = self.index.write().expect("pod cache lock");
            let pods = index.get_mut(&key)?;
            pods.remove(name)?;
            if pods.is_empty() {
                index.remove(&key);
            }
        }
        self.satisfy(&key, name, None);
        Some(key.to_reconcile())
    }

    /// Replaces everything with a fresh list; returns the jobs whose pods changed.
    fn replace(&self, fresh: PodIndex) -> Vec<JobToReconcile> {
        let mut index = self.index.write().expect("pod cache lock");
        // A pod deleted while the watch was down has no Delete event: one
        // seen disrupted is kept as gone, as `delete` keeps it.
        let vanished: Vec<(JobKey, CachedPod)> = index
            .iter()
            .flat_map(|(k, pods)| {
                let now = fresh.get(k);
                pods.iter()
                    .filter(move |(n, _)| now.is_none_or(|f| !f.contains_key(*n)))
                    .filter_map(move |(_, c)| Some((k.clone(), c.vanished()?)))
            })
            .collect();
        for (key, cached) in vanished {
            self.push_gone(key, cached);
        }
        let mut changed: Vec<JobToReconcile> = fresh
            .iter()
            .filter(|(k, v)| index.get(*k) != Some(*v))
            .map(|(k, _)| k.to_reconcile())
            .collect();
        changed.extend(
            index
                .keys()
                .filter(|k| !fresh.contains_key(*k))
                .map(JobKey::to_reconcile),
        );
        *index = fresh;
        changed
    }
}

/// The controlling DGLJob of a child, from its ownerReferences.
fn owner_job(meta: &ObjectMeta) -> Option<JobToReconcile> {
    let ns = meta.namespace.as_deref()?;
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == DGLJob::kind(&()))
        .map(|r| ObjectRef::new(&r.name).within(ns))
}

/// Drives the pod watch into `cache`; yields the jobs to reconcile.
pub fn pod_triggers(
    api: Api<SlimPod>,
    config: watcher::Config,
    cache: Arc<PodCache>,
    ready: Arc<Readiness>,
) -> impl Stream<Item = JobToReconcile> + Send + 'static {
    let mut fresh: Option<PodIndex> = None;
    let mut listed = false;
    watcher(api, config).default_backoff().flat_map(move |ev| {
        let out: Vec<JobToReconcile> = match ev {
            Ok(watcher::Event::Apply(p)) => cache.apply(p).into_iter().collect(),
            Ok(watcher::Event::Delete(p)) => cache.delete(&p).into_iter().collect(),
            Ok(watcher::Event::Init) => {
                fresh = Some(PodIndex::new());
                Vec::new()
            }
            Ok(watcher::Event::InitApply(p)) => {
                if let (Some(name), Some(fresh)) = (p.metadata.name.clone(), fresh.as_mut()) {
                    if let Some((key, c)) = CachedPod::from_slim(p) {
                        fresh.entry(key).or_default().insert(name, c);
                    }
                }
                Vec::new()
            }
            Ok(watcher::Event::InitDone) => {
                let changed = cache.replace(fresh.take().unwrap_or_default());
                if !listed {
                    listed = true;
                    ready.one_ready();
                }
                changed
            }
            Err(e) => {
                warn!(error = %e, "pod watch failed; retrying");
                Vec::new()
            }
        };
        futures::stream::iter(out)
    })
}

/// Kind, namespace, name of a child.
type ChildKey = (&'static str, String, String);

/// What the operator knows of one child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildState {
    /// It does not exist (or the operator has not seen it yet).
    Absent,
    /// It exists, carrying this applied-hash annotation (None: without one).
    Present(Option<String>),
}

/// The controller ownerReference of an object: who may rewrite it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Controller {
    pub kind: String,
    pub name: String,
    pub uid: String,
}

impl Controller {
    /// The controller ownerReference in `meta`, if any.
    pub fn of(meta: &ObjectMeta) -> Option<Controller> {
        meta.owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .map(|r| Controller {
                kind: r.kind.clone(),
                name: r.name.clone(),
                uid: r.uid.clone(),
            })
    }
}

/// One child as the operator knows it: its applied hash and its controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenChild {
    pub hash: Option<String>,
    pub controller: Option<Controller>,
    /// The ConfigMap's `dgloperator.io/run` label: the run it launched.
    pub run: Option<i32>,
}

impl SeenChild {
    pub fn of(meta: &ObjectMeta) -> SeenChild {
        SeenChild {
            hash: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(HASH_ANNOTATION).cloned()),
            controller: Controller::of(meta),
            run: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_RUN))
                .and_then(|r| r.parse().ok()),
        }
    }
}

/// Applied-hash annotations and controllers of the operator's children, by
/// kind/ns/name: as the watches last showed them, and as this operator last
/// wrote them (until the watch shows that write).
#[derive(Default)]
pub struct ChildCache {
    seen: RwLock<HashMap<ChildKey, SeenChild>>,
    written: Expectations<ChildKey, (), SeenChild>,
}

impl ChildCache {
    fn key(kind: &'static str, ns: &str, name: &str) -> ChildKey {
        (kind, ns.to_string(), name.to_string())
    }

    /// The child as far as this operator knows (its own last write first);
    /// None: it does not exist, or the label-selected watch does not show it
    /// (an object this operator did not label).
    pub fn get(&self, kind: &'static str, ns: &str, name: &str) -> Option<SeenChild> {
        let key = Self::key(kind, ns, name);
        self.written.get(&key, &()).or_else(|| {
            self.seen
                .read()
                .expect("child cache lock")
                .get(&key)
                .cloned()
        })
    }

    /// The child's applied hash as far as this operator knows.
    pub fn hash(&self, kind: &'static str, ns: &str, name: &str) -> ChildState {
        match self.get(kind, ns, name) {
            Some(c) => ChildState::Present(c.hash),
            None => ChildState::Absent,
        }
    }

    #[cfg(test)]
    /// The child as the watch last showed it (what the API server serves to
    /// other clients).
    pub fn seen_hash(&self, kind: &'static str, ns: &str, name: &str) -> ChildState {
        let seen = self.seen.read().expect("child cache lock");
        match seen.get(&Self::key(kind, ns, name)) {
            Some(c) => ChildState::Present(c.hash.clone()),
            None => ChildState::Absent,
        }
    }

    /// Records what the operator just wrote (the watch event follows later).
    pub fn record(&self, kind: &'static str, ns: &str, name: &str, child: SeenChild) {
        self.written.expect(&Self::key(kind, ns, name), (), child);
    }

    #[cfg(test)]
    /// Cached children (seen by the watches).
    pub fn len(&self) -> usize {
        self.seen.read().expect("child cache lock").len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[cfg(test)]
    /// Applied writes not seen back yet.
    pub fn pending_writes(&self) -> usize {
        self.written.len()
    }

    /// A watch showed the child: true when its hash is new.
    fn saw(&self, key: ChildKey, child: SeenChild) -> bool {
        self.written
            .remove_if(&key, &(), |w, expired| w.hash == child.hash || expired);
        let hash = child.hash.clone();
        let mut seen = self.seen.write().expect("child cache lock");
        seen.insert(key, child).map(|c| c.hash) != Some(hash)
    }

    fn gone(&self, key: &ChildKey) {
        self.written.forget(key, &());
        self.seen.write().expect("child cache lock").remove(key);
    }

    fn replace_kind(&self, kind: &'static str, fresh: HashMap<ChildKey, SeenChild>) {
        let mut seen = self.seen.write().expect("child cache lock");
        seen.retain(|k, _| k.0 != kind);
        seen.extend(fresh);
    }

    fn key_of(kind: &'static str, meta: &ObjectMeta) -> Option<ChildKey> {
        Some((kind, meta.namespace.clone()?, meta.name.clone()?))
    }
}

/// Drives a metadata-only watch of one kind of child into `cache`; yields
/// the owning job of each deleted child, and for ConfigMaps also of each
/// one whose hash changed (the launcher waits for its complete ConfigMap).
pub fn child_triggers<K>(
    client: &Client,
    ns: &Option<String>,
    config: &watcher::Config,
    cache: &Arc<ChildCache>,
    ready: &Arc<Readiness>,
) -> BoxStream<'static, JobToReconcile>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let kind = <K as k8s_openapi::Resource>::KIND;
    let api: Api<PartialObjectMeta<K>> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let trigger_on_change = kind == <ConfigMap as k8s_openapi::Resource>::KIND;
    let (cache, ready) = (cache.clone(), ready.clone());
    let mut fresh: Option<HashMap<ChildKey, SeenChild>> = None;
    let mut listed = false;
    watcher(api, config.clone())
        .default_backoff()
        .filter_map(move |ev| {
            let out = match ev {
                Ok(watcher::Event::Apply(o)) => {
                    ChildCache::key_of(kind, &o.metadata).and_then(|k| {
                        let changed = cache.saw(k, SeenChild::of(&o.metadata));
                        (changed && trigger_on_change)
                            .then(|| owner_job(&o.metadata))
                            .flatten()
                    })
                }
                Ok(watcher::Event::Delete(o)) => {
                    if let Some(k) = ChildCache::key_of(kind, &o.metadata) {
                        cache.gone(&k);
                    }
                    owner_job(&o.metadata)
                }
                Ok(watcher::Event::Init) => {
                    fresh = Some(HashMap::new());
                    None
                }
                Ok(watcher::Event::InitApply(o)) => {
                    if let (Some(k), Some(fresh)) =
                        (ChildCache::key_of(kind, &o.metadata), fresh.as_mut())
                    {
                        fresh.insert(k, SeenChild::of(&o.metadata));
                    }
                    None
                }
                Ok(watcher::Event::InitDone) => {
                    cache.replace_kind(kind, fresh.take().unwrap_or_default());
                    if !listed {
                        listed = true;
                        ready.one_ready();
                    }
                    None
                }
                Err(e) => {
                    warn!(kind, error = %e, "watch failed; retrying");
                    None
                }
            };
            std::future::ready(out)
        })
        .boxed()
}

pub mod nodes;
#[cfg(test)]
mod tests;
