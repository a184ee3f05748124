//! Test harness: a real API server (localkube), the controller running
//! in-process on one namespace, and the test playing the kubelet by patching
//! pod status.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use dgl_api::{DGLJob, JobPhase};
use dgl_operator::controller::{self, Settings};
use dgl_operator::metrics::Metrics;
use dgl_operator::pure::settings::BuildConfig;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use tokio::task::JoinHandle;

pub const SEED: &str = include_str!("../../../examples/seed-dgljob.yaml");
pub const WAIT: Duration = Duration::from_secs(30);

pub struct Env {
    pub client: Client,
    pub ns: String,
    pub metrics: Arc<Metrics>,
    pub build: BuildConfig,
    operator: Option<(JoinHandle<()>, tokio::sync::oneshot::Sender<()>)>,
}

impl Env {
    /// A fresh namespace with the CRD installed and the operator running on it.
    pub async fn new(prefix: &str) -> Env {
        Env::with_build(prefix, BuildConfig::default()).await
    }

    /// Like [`Env::new`] with operator build settings (e.g. a gang scheduler).
    pub async fn with_build(prefix: &str, build: BuildConfig) -> Env {
        let cluster = localkube::ensure_cluster()
            .await
            .expect("test control plane");
        let client = cluster.client().await.expect("client");
        localkube::apply_crds(&client, &dgl_api::crd_yaml())
            .await
            .expect("CRD");
        let ns = localkube::create_test_namespace(&client, prefix)
            .await
            .expect("namespace");
        let mut env = Env {
            client,
            ns,
            metrics: Arc::new(Metrics::default()),
            build,
            operator: None,
        };
        env.start_operator();
        env
    }

    pub fn start_operator(&mut self) {
        assert!(self.operator.is_none(), "operator already running");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let settings = Settings {
            concurrency: 4,
            namespace: Some(self.ns.clone()),
            build: self.build.clone(),
            instance: "test".into(),
        };
        let client = self.client.clone();
        let metrics = self.metrics.clone();
        let handle = tokio::spawn(async move {
            controller::run(client, settings, metrics, async move {
                let _ = rx.await;
            })
            .await
        });
        self.operator = Some((handle, tx));
    }

    /// Kills the operator at once (no graceful shutdown), like a SIGKILL.
    pub async fn kill_operator(&mut self) {
        if let Some((handle, _tx)) = self.operator.take() {
            handle.abort();
            let _ = handle.await;
        }
    }

    pub fn jobs(&self) -> Api<DGLJob> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// The seed job under `name`, changed by `f`, created.
    pub async fn create_job(&self, name: &str, f: impl FnOnce(&mut DGLJob)) -> DGLJob {
        let mut job: DGLJob = serde_yaml::from_str(SEED).unwrap();
        job.metadata.name = Some(name.into());
        job.metadata.namespace = Some(self.ns.clone());
        f(&mut job);
        self.jobs()
            .create(&PostParams::default(), &job)
            .await
            .expect("job is accepted")
    }

    pub async fn wait_job(&self, name: &str, what: &str, f: impl Fn(&DGLJob) -> bool) -> DGLJob {
        let cond = await_condition(self.jobs(), name, move |j: Option<&DGLJob>| {
            j.is_some_and(&f)
        });
        match tokio::time::timeout(WAIT, cond).await {
            Ok(Ok(Some(j))) => j,
            _ => {
                let now = self.jobs().get_opt(name).await.ok().flatten();
                panic!(
                    "timed out waiting for job {name}: {what}; status now: {:#?}",
                    now.and_then(|j| j.status)
                )
            }
        }
    }

    pub async fn wait_phase(&self, name: &str, phase: JobPhase) -> DGLJob {
        self.wait_job(name, &format!("phase {phase}"), move |j| {
            j.status.as_ref().and_then(|s| s.phase) == Some(phase)
        })
        .await
    }

    pub async fn wait_pod(&self, name: &str) -> Pod {
        let cond = await_condition(self.pods(), name, |p: Option<&Pod>| p.is_some());
        match tokio::time::timeout(WAIT, cond).await {
            Ok(Ok(Some(p))) => p,
            _ => panic!(
                "timed out waiting for pod {name}; pods: {:?}",
                self.pod_names().await
            ),
        }
    }

    pub async fn wait_pod_gone(&self, name: &str) {
        let cond = await_condition(self.pods(), name, |p: Option<&Pod>| p.is_none());
        if tokio::time::timeout(WAIT, cond).await.is_err() {
            panic!(
                "timed out waiting for pod {name} to go; pods: {:?}",
                self.pod_names().await
            );
        }
    }

    pub async fn pod_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .pods()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|p| p.name_any())
            .collect();
        names.sort();
        names
    }

    /// Pod name -> uid: a recreated pod has a new uid.
    pub async fn pod_uids(&self) -> BTreeMap<String, String> {
        self.pods()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|p| (p.name_any(), p.uid().unwrap()))
            .collect()
    }

    pub async fn patch_pod_status(&self, name: &str, status: serde_json::Value) {
        self.pods()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .unwrap_or_else(|e| panic!("patch status of pod {name}: {e}"));
    }

    /// Plays the kubelet: the pod runs, with an IP, Ready or not.
    pub async fn kubelet_running(&self, name: &str, ip: &str, ready: bool) {
        self.wait_pod(name).await;
        self.patch_pod_status(
            name,
            json!({
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            }),
        )
        .await;
    }

    pub async fn kubelet_succeeded(&self, name: &str) {
        self.patch_pod_status(
            name,
            json!({
                "phase": "Succeeded",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [{"name": "dgl-graphsage", "image": "x", "imageID": "",
                    "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
            }),
        )
        .await;
    }

    pub async fn kubelet_failed(&self, name: &str, code: i32) {
        self.patch_pod_status(
            name,
            json!({
                "phase": "Failed",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [{"name": "dgl-graphsage", "image": "x", "imageID": "",
                    "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": code, "reason": "Error"}}}],
            }),
        )
        .await;
    }

    /// Drives a DGL-API job of `workers` workers to a running launcher.
    pub async fn drive_to_running(&self, job: &str, workers: i32) {
        self.kubelet_running(&format!("{job}-partitioner"), "10.244.0.2", true)
            .await;
        for i in 0..workers {
            self.kubelet_running(
                &format!("{job}-worker-{i}"),
                &format!("10.244.1.{}", 10 + i),
                true,
            )
            .await;
        }
        self.kubelet_running(&format!("{job}-launcher"), "10.244.0.3", false)
            .await;
        self.wait_phase(job, JobPhase::Running).await;
    }

    pub fn condition(
        job: &DGLJob,
        t: JobPhase,
    ) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        job.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == t.as_str())
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some((handle, _)) = self.operator.take() {
            handle.abort();
        }
    }
}
