//! What the bench's own watches see of a phase's pods, jobs and
//! ConfigMaps, with client-side arrival times; and the bench playing each
//! DGLJob launcher's watcher-loop for kwok.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use dgl_api::names::{launcher_name, CONFIG_RUN, LABEL_JOB_NAME, LABEL_MANAGED_BY, MANAGED_BY};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use super::spec::{Subject, LAUNCHED_ANNOTATION};

/// What the bench's watches saw, with client-side arrival times.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) pods: HashMap<String, PodSeen>,
    pub(super) jobs: HashMap<String, JobSeen>,
    pub(super) pod_events: u64,
}

pub(super) struct PodSeen {
    pub(super) job: String,
    /// The role label's value (launcher, worker, partitioner).
    pub(super) role: String,
    pub(super) seen: Instant,
    /// First seen Ready with an IP.
    pub(super) ready: Option<Instant>,
    /// Phase Succeeded or Failed (kept by cleanPodPolicy Running).
    pub(super) terminal: bool,
    pub(super) deleted: Option<Instant>,
}

#[derive(Default, Clone)]
pub(super) struct JobSeen {
    pub(super) created: Option<Instant>,
    pub(super) pods: u32,
    pub(super) all_pods: Option<Instant>,
    pub(super) succeeded: Option<Instant>,
    pub(super) failed: bool,
    /// Ours: its ConfigMap seen launching the run (the launcher may train).
    pub(super) launched: Option<Instant>,
    /// Watch events of the job after its creation (status updates: only the
    /// operator writes a job once it exists).
    pub(super) updates: u64,
    pub(super) last_rv: Option<String>,
}

impl Seen {
    pub(super) fn note_pod(
        &mut self,
        p: &Pod,
        job_label: &str,
        role_label: &str,
        pods_per_job: u32,
    ) {
        let now = Instant::now();
        self.pod_events += 1;
        let st = p.status.as_ref();
        let ready = st.is_some_and(|st| {
            st.pod_ip.is_some()
                && st
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        });
        let terminal = st
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
        let labels = p.labels();
        let job = labels.get(job_label).cloned().unwrap_or_default();
        let entry = self.pods.entry(p.name_any());
        let new = matches!(entry, std::collections::hash_map::Entry::Vacant(_));
        let ps = entry.or_insert_with(|| PodSeen {
            job: job.clone(),
            role: labels.get(role_label).cloned().unwrap_or_default(),
            seen: now,
            ready: None,
            terminal: false,
            deleted: None,
        });
        if ready && ps.ready.is_none() {
            ps.ready = Some(now);
        }
        ps.terminal |= terminal;
        if new && !job.is_empty() {
            let j = self.jobs.entry(job).or_default();
            j.pods += 1;
            if j.pods == pods_per_job {
                j.all_pods = Some(now);
            }
        }
    }

    /// A ConfigMap seen: true the first time it launches its job's run.
    pub(super) fn note_config_map(&mut self, cm: &ConfigMap) -> bool {
        let launches = cm.data.as_ref().is_some_and(|d| d.contains_key(CONFIG_RUN));
        let Some(job) = cm.labels().get(LABEL_JOB_NAME) else {
            return false;
        };
        let js = self.jobs.entry(job.clone()).or_default();
        if !launches || js.launched.is_some() {
            return false;
        }
        js.launched = Some(Instant::now());
        true
    }

    pub(super) fn note_job(&mut self, subject: Subject, j: &DynamicObject) {
        let now = Instant::now();
        let js = self.jobs.entry(j.name_any()).or_default();
        let rv = j.resource_version();
        if js.last_rv.is_some() && js.last_rv != rv {
            js.updates += 1;
        }
        js.last_rv = rv;
        match j.data.get("status").and_then(|s| subject.finished(s)) {
            Some(true) if js.succeeded.is_none() => js.succeeded = Some(now),
            Some(false) => js.failed = true,
            _ => {}
        }
    }

    /// When cleanPodPolicy's deletions were done: every pod is gone or
    /// finished (the launchers stay). None while a pod remains to delete.
    pub(super) fn cleanup_done(&self) -> Option<Option<Instant>> {
        if self
            .pods
            .values()
            .any(|p| p.deleted.is_none() && !p.terminal)
        {
            return None;
        }
        Some(self.pods.values().filter_map(|p| p.deleted).max())
    }
}

/// Watches the phase's pods and jobs into `seen`; resolves once both
/// initial lists are done.
pub(super) async fn start_watches(
    client: &Client,
    seen: Arc<Mutex<Seen>>,
    subject: Subject,
    ns: &str,
    pods_per_job: u32,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let (pods_ready_tx, pods_ready) = tokio::sync::oneshot::channel::<()>();
    let (jobs_ready_tx, jobs_ready) = tokio::sync::oneshot::channel::<()>();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let jobs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &subject.resource());
    let (selector, job_label, role_label) = subject.pod_labels();

    let s = seen.clone();
    let pod_task = tokio::spawn(async move {
        let mut ready = Some(pods_ready_tx);
        let wc = watcher::Config::default().labels(&selector);
        let mut stream = watcher(pods, wc).boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => {
                    s.lock()
                        .unwrap()
                        .note_pod(&p, job_label, role_label, pods_per_job);
                }
                Ok(watcher::Event::Delete(p)) => {
                    let mut s = s.lock().unwrap();
                    if let Some(ps) = s.pods.get_mut(&p.name_any()) {
                        ps.deleted.get_or_insert(Instant::now());
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!("    pod watch: {e}"),
            }
        }
    });
    let s = seen.clone();
    let job_task = tokio::spawn(async move {
        let mut ready = Some(jobs_ready_tx);
        let mut stream = watcher(jobs, watcher::Config::default()).boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(watcher::Event::Apply(j)) | Ok(watcher::Event::InitApply(j)) => {
                    s.lock().unwrap().note_job(subject, &j);
                }
                Ok(_) => {}
                Err(e) => eprintln!("    job watch: {e}"),
            }
        }
    });
    pods_ready.await.context("pod watch ended")?;
    jobs_ready.await.context("job watch ended")?;
    let mut tasks = vec![pod_task, job_task];
    if let Subject::Ours(_) = subject {
        tasks.push(play_watcher_loop(client, seen, ns));
    }
    Ok(tasks)
}

/// What each DGLJob launcher's watcher-loop does on a real node, for kwok:
/// once the job's ConfigMap launches its run, the launcher may train. Here
/// that is an annotation on the launcher pod (one PATCH per job, counted
/// among all clients' requests), which kwok's `dgl-launcher-complete`
/// Stage waits for.
pub(super) fn play_watcher_loop(
    client: &Client,
    seen: Arc<Mutex<Seen>>,
    ns: &str,
) -> tokio::task::JoinHandle<()> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    tokio::spawn(async move {
        let wc = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
        let mut stream = watcher(cms, wc).boxed();
        while let Some(ev) = stream.next().await {
            let cm = match ev {
                Ok(watcher::Event::Apply(cm)) | Ok(watcher::Event::InitApply(cm)) => cm,
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("    ConfigMap watch: {e}");
                    continue;
                }
            };
            if !seen.lock().unwrap().note_config_map(&cm) {
                continue;
            }
            let job = cm.labels()[LABEL_JOB_NAME].clone();
            let patch = json!({"metadata": {"annotations": {LAUNCHED_ANNOTATION: "true"}}});
            let pods = pods.clone();
            tokio::spawn(async move {
                let name = launcher_name(&job);
                if let Err(e) = pods
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    eprintln!("    marking {name} launched: {e}");
                }
            });
        }
    })
}
