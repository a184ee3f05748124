//! Kueue on the node (issue #26 items 2 and 3): Kueue v0.17's manager with
//! its webhooks (`stack::kueue::NodeKueue`), the Helm-installed operator
//! switched to `kueue.enabled=true` for the scenario and back after it, and
//! real DGLJobs training on real pods:
//!
//! a. queueing: a ClusterQueue whose quota fits one job, two jobs applied at
//!    once; the second waits (condition Queued, the Queue column naming its
//!    LocalQueue, no pod), is admitted when the first Succeeds, and trains;
//! b. preemption: a job of a higher WorkloadPriorityClass preempts the
//!    second while it trains; its pods go, it is requeued and Succeeds after;
//! c. all-or-nothing start: a job whose workers cannot start (an image that
//!    does not exist), in a ClusterQueue of its own, is evicted by
//!    `waitForPodsReady` and requeued; no pod of it is left meanwhile;
//! and a job without the queue label runs as it always does (no Workload,
//! no Queued condition, never suspended).
//!
//! a+b, c and the unlabelled job run side by side under one Kueue start.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use dgl_api::names::LABEL_JOB_NAME;
use dgl_api::{DGLJob, JobPhase, ReplicaType};
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

use crate::stack::jobs::{
    apply_job, check_losses_fall, dump_job, example_job, example_job_at, launcher_log,
    losses_by_worker, phase,
};
use crate::stack::kueue::{operator_kueue, NodeKueue, NodeOptions};
use crate::stack::{dump_operator, Stack, EXAMPLE_STANDALONE};

/// Long enough for a healthy job's pods to start (its launcher starts once
/// the graph is partitioned: about 8 s after admission on the 2-core
/// machine), short enough to keep the scenario short (the gang's eviction
/// waits it out).
const PODS_READY_TIMEOUT_S: u32 = 40;
/// The requeue backoff after a waitForPodsReady eviction.
const BACKOFF_BASE_S: u32 = 10;
/// What one wait may take at most (a job trains in about 30 s).
const STEP_TIMEOUT: Duration = Duration::from_secs(240);
/// Epochs of the job that is preempted, so that it still trains when the
/// urgent job arrives (it is applied once the job is Running; an epoch
/// takes about 3 s, so 6 leave it well over 10 s of training).
const LONG_EPOCHS: u32 = 6;
const QUEUE_A: &str = "team-a";
const QUEUE_B: &str = "team-b";

/// The times of the scenario's steps, printed as they happen.
struct Clock {
    start: Instant,
    marks: Mutex<Vec<String>>,
}

impl Clock {
    fn mark(&self, what: &str) -> f64 {
        let at = self.start.elapsed().as_secs_f64();
        println!("    [kueue] {at:>6.1}s  {what}");
        self.marks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("{at:.0}s {what}"));
        at
    }
}

pub(super) async fn kueue(stack: &Stack) -> Result<String> {
    let clock = Clock {
        start: Instant::now(),
        marks: Mutex::new(Vec::new()),
    };
    let client = &stack.client;
    let opts = NodeOptions {
        pods_ready_timeout_s: PODS_READY_TIMEOUT_S,
        backoff_base_s: BACKOFF_BASE_S,
    };
    // First: the operator with --kueue is Ready only once its Workload
    // watch has listed, which needs Kueue's CRDs.
    let kueue = NodeKueue::start(client, &stack.cluster, &stack.kubeconfig, &opts).await?;
    clock.mark(&format!(
        "Kueue's manager serving, CRDs and webhooks installed (log {})",
        kueue.log_path().display()
    ));
    let r = match operator_kueue(client, &stack.kubeconfig, true).await {
        Ok(took) => {
            clock.mark(&format!(
                "operator with --kueue (helm upgrade, its new pod Ready) in {:.1}s",
                took.as_secs_f64()
            ));
            with_kueue(client, &clock).await
        }
        Err(e) => Err(e),
    };
    if r.is_err() {
        dump_operator(client).await;
        kueue.print_log_tail(60);
    }
    let stopped = kueue.stop(client).await;
    let restored = operator_kueue(client, &stack.kubeconfig, false).await;
    if let Ok(t) = &restored {
        clock.mark(&format!(
            "Kueue stopped; operator without --kueue again in {:.1}s",
            t.as_secs_f64()
        ));
    }
    let summary = r?;
    stopped?;
    restored.context("switching the operator's Kueue integration off again")?;
    Ok(summary)
}

async fn with_kueue(client: &Client, clock: &Clock) -> Result<String> {
    let ns = localkube::create_test_namespace(client, "e2e-kueue").await?;
    let r = in_queues(client, &ns, clock).await;
    if r.is_err() {
        for job in ["one", "two", "urgent", "gang", "plain"] {
            dump_job(client, &ns, job).await;
        }
    }
    // Kueue's finalizers on its objects are removed by Kueue: clean up
    // while it still runs.
    let cleaned = cleanup(client, &ns).await;
    let summary = r?;
    cleaned?;
    clock.mark("cleaned up: jobs, Workloads, queues, namespace");
    Ok(summary)
}

fn kueue_ar(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind),
        plural,
    )
}

/// Cluster-scoped Kueue objects of this run, named after its namespace.
struct Names {
    flavor: String,
    cq_a: String,
    cq_b: String,
    high: String,
}

impl Names {
    fn of(ns: &str) -> Names {
        Names {
            flavor: format!("{ns}-flavor"),
            cq_a: format!("{ns}-a"),
            cq_b: format!("{ns}-b"),
            high: format!("{ns}-high"),
        }
    }
}

/// Creates a Kueue object, retried while Kueue's webhooks start serving.
async fn create(api: &Api<DynamicObject>, obj: Value) -> Result<()> {
    let o: DynamicObject = serde_json::from_value(obj)?;
    let mut last = None;
    for _ in 0..60 {
        match api.create(&PostParams::default(), &o).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(anyhow::anyhow!("{last:?}")).context(format!("creating Kueue object {}", o.name_any()))
}

/// One flavor (its node label must reach the pods); ClusterQueue A with a
/// quota for one job (each asks 850m CPU) and preemption of lower
/// priorities; ClusterQueue B, the same quota, for the job that cannot
/// start; their LocalQueues; a WorkloadPriorityClass of value 1000.
async fn queues(client: &Client, ns: &str) -> Result<()> {
    let n = Names::of(ns);
    let all = |k, p| Api::<DynamicObject>::all_with(client.clone(), &kueue_ar(k, p));
    let v = "kueue.x-k8s.io/v1beta2";
    create(
        &all("ResourceFlavor", "resourceflavors"),
        json!({"apiVersion": v,
        "kind": "ResourceFlavor", "metadata": {"name": n.flavor},
        "spec": {"nodeLabels": {"kubernetes.io/os": "linux"}}}),
    )
    .await?;
    for cq in [&n.cq_a, &n.cq_b] {
        create(&all("ClusterQueue", "clusterqueues"), json!({"apiVersion": v,
            "kind": "ClusterQueue", "metadata": {"name": cq},
            "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": n.flavor,
                    "resources": [{"name": "cpu", "nominalQuota": "1"},
                                  {"name": "memory", "nominalQuota": "8Gi"}]}]}]}}))
        .await?;
    }
    create(
        &all("WorkloadPriorityClass", "workloadpriorityclasses"),
        json!({"apiVersion": v,
        "kind": "WorkloadPriorityClass", "metadata": {"name": n.high}, "value": 1000}),
    )
    .await?;
    let lqs = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        ns,
        &kueue_ar("LocalQueue", "localqueues"),
    );
    for (lq, cq) in [(QUEUE_A, &n.cq_a), (QUEUE_B, &n.cq_b)] {
        create(
            &lqs,
            json!({"apiVersion": v, "kind": "LocalQueue",
            "metadata": {"name": lq, "namespace": ns}, "spec": {"clusterQueue": cq}}),
        )
        .await?;
    }
    Ok(())
}

async fn in_queues(client: &Client, ns: &str, clock: &Clock) -> Result<String> {
    queues(client, ns).await?;
    clock.mark("ResourceFlavor, ClusterQueues, LocalQueues, WorkloadPriorityClass created");
    let high = Names::of(ns).high;
    let (ab, c, plain) = tokio::try_join!(
        queue_and_preempt(client, ns, &high, clock),
        gang(client, ns, clock),
        unlabelled(client, ns, clock),
    )?;
    Ok(format!("{ab}; {c}; {plain}"))
}

// ---- the jobs ----

/// The GraphSAGE example named `name`, in LocalQueue `queue` (with the
/// WorkloadPriorityClass `priority`), its workers asking 250m CPU: 850m in
/// all with the partitioner (the workers' template) and the launcher's
/// 100m. Two such jobs and a small one fit the node's 2 CPUs.
fn queued_job(name: &str, queue: &str, priority: Option<&str>, epochs: u32) -> Result<DGLJob> {
    let mut job = example_job(name)?;
    job.labels_mut()
        .insert("kueue.x-k8s.io/queue-name".into(), queue.into());
    if let Some(p) = priority {
        job.labels_mut()
            .insert("kueue.x-k8s.io/priority-class".into(), p.into());
    }
    let worker = main_container(&mut job, ReplicaType::Worker)?;
    worker.resources = Some(serde_json::from_value(json!({
        "requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}))?);
    let launcher = main_container(&mut job, ReplicaType::Launcher)?;
    let args = launcher.args.get_or_insert_with(Vec::new);
    let i = args
        .iter()
        .position(|a| a == "--num-epochs")
        .context("the example's launcher has no --num-epochs")?;
    let value = args
        .get_mut(i + 1)
        .context("the example's --num-epochs has no value")?;
    *value = epochs.to_string();
    Ok(job)
}

fn main_container(job: &mut DGLJob, role: ReplicaType) -> Result<&mut Container> {
    job.spec
        .dgl_replica_specs
        .get_mut(&role)
        .and_then(|s| s.template.spec.as_mut())
        .and_then(|s| s.containers.first_mut())
        .with_context(|| format!("the example has no {role:?} container"))
}

fn queued(j: &DGLJob) -> Option<(String, String, String)> {
    let c = j
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Queued")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn queued_is(j: &DGLJob, status: &str, reason: &str) -> bool {
    queued(j).is_some_and(|(s, r, _)| s == status && r == reason)
}

fn admitted(j: &DGLJob) -> bool {
    queued_is(j, "False", "Admitted")
}

async fn pods_of(client: &Client, ns: &str, job: &str) -> Result<Vec<Pod>> {
    let lp = ListParams::default().labels(&format!("{LABEL_JOB_NAME}={job}"));
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items)
}

/// Polls job `name` until `f` holds; fails after STEP_TIMEOUT saying what
/// was awaited and where the job stood.
async fn wait_job(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    f: impl Fn(&DGLJob) -> bool,
) -> Result<DGLJob> {
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        let j = jobs.get(name).await?;
        if f(&j) {
            return Ok(j);
        }
        if start.elapsed() > STEP_TIMEOUT {
            bail!(
                "DGLJob {ns}/{name}: not {what} within {STEP_TIMEOUT:?}; phase {:?}, Queued {:?}",
                phase(&j),
                queued(&j)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn workload(client: &Client, ns: &str, job: &str) -> Result<Option<Value>> {
    let api = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        ns,
        &kueue_ar("Workload", "workloads"),
    );
    Ok(api
        .get_opt(&format!("dgljob-{job}"))
        .await?
        .map(|o| serde_json::to_value(o).unwrap_or_default()))
}

fn wl_condition(wl: &Value, t: &str) -> Option<(String, String)> {
    wl["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

/// Polls job `job`'s Workload until `f` holds (STEP_TIMEOUT).
async fn wait_workload(
    client: &Client,
    ns: &str,
    job: &str,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let start = Instant::now();
    loop {
        let wl = workload(client, ns, job).await?;
        if let Some(w) = wl.as_ref().filter(|w| f(w)) {
            return Ok(w.clone());
        }
        if start.elapsed() > STEP_TIMEOUT {
            bail!("Workload of {ns}/{job}: not {what} within {STEP_TIMEOUT:?}; now {wl:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The job's Queue column as `kubectl get dgljobs` prints it: the server's
/// Table rendering of the CRD's printer columns, which is what kubectl asks for.
async fn queue_column(client: &Client, ns: &str, job: &str) -> Result<String> {
    let req = http::Request::get(format!(
        "/apis/dgloperator.io/v1alpha1/namespaces/{ns}/dgljobs/{job}"
    ))
    .header(
        http::header::ACCEPT,
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    .body(Vec::new())?;
    let table: Value = client.request(req).await?;
    let col = table["columnDefinitions"]
        .as_array()
        .and_then(|c| c.iter().position(|d| d["name"] == "Queue"))
        .context("the DGLJob table has no Queue column")?;
    Ok(table["rows"][0]["cells"][col]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

async fn no_pods_within(client: &Client, ns: &str, job: &str, limit: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let left = pods_of(client, ns, job).await?;
        if left.is_empty() {
            return Ok(());
        }
        if start.elapsed() > limit {
            let names: Vec<String> = left.iter().map(|p| p.name_any()).collect();
            bail!("{job}'s pods still there {limit:?} after its eviction: {names:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn losses_fall(client: &Client, ns: &str, job: &str) -> Result<()> {
    let log = launcher_log(client, ns, job).await?;
    check_losses_fall(&losses_by_worker(&log), 2).with_context(|| format!("job {job}"))
}

// ---- a and b: queueing, then preemption ----

async fn queue_and_preempt(client: &Client, ns: &str, high: &str, clock: &Clock) -> Result<String> {
    // Both train long enough to be preempted: which one Kueue admits first
    // is its choice (their Workloads may be created in the same second).
    for name in ["one", "two"] {
        apply_job(client, ns, &queued_job(name, QUEUE_A, None, LONG_EPOCHS)?).await?;
    }
    let t0 = clock.mark("a: jobs one and two applied to LocalQueue team-a (quota for one)");
    let (first, second) = admitted_and_waiting(client, ns).await?;
    clock.mark(&format!("a: {first} admitted, {second} waits"));
    let waiting = wait_job(client, ns, second, "queued", |j| {
        queued_is(j, "True", "WaitingForAdmission")
    })
    .await?;
    let column = queue_column(client, ns, second).await?;
    let summary = waiting.status.and_then(|s| s.queue).map(|q| q.summary);
    ensure!(
        column == "queued in team-a" && summary.as_deref() == Some("queued in team-a"),
        "{second}: the Queue column must say it waits in team-a; column {column:?}, status.queue {summary:?}"
    );
    ensure!(
        pods_of(client, ns, second).await?.is_empty(),
        "{second} has pods while queued"
    );
    clock.mark(&format!(
        "a: {second} Queued (WaitingForAdmission), Queue column {column:?}, no pod"
    ));
    let pod = wait_pod(client, ns, &format!("{first}-worker-0")).await?;
    let selector = pod.spec.and_then(|s| s.node_selector).unwrap_or_default();
    ensure!(
        selector.get("kubernetes.io/os").map(String::as_str) == Some("linux"),
        "{first}-worker-0 lacks the flavor's node label: {selector:?}"
    );
    wait_job(client, ns, first, "Succeeded", |j| {
        phase(j) == Some(JobPhase::Succeeded)
    })
    .await?;
    let t_first = clock.mark(&format!("a: {first} Succeeded"));
    wait_job(client, ns, second, "admitted", admitted).await?;
    let t_second = clock.mark(&format!("a: {second} admitted"));
    wait_workload(client, ns, first, "Finished", |w| {
        wl_condition(w, "Finished").is_some_and(|c| c.0 == "True")
    })
    .await?;
    let (preempted_at, gone) = preempt(client, ns, second, high, clock).await?;
    for j in [first, "urgent", second] {
        losses_fall(client, ns, j).await?;
    }
    let t_end = clock.mark("a, b: all three Succeeded, every worker's loss falling");
    Ok(format!(
        "queued job admitted {:.1}s after the first Succeeded; preempted {preempted_at:.1}s after \
         the urgent job's apply, its pods gone {gone:.1}s later; a+b {:.0}s",
        t_second - t_first,
        t_end - t0
    ))
}

/// Which of `one` and `two` Kueue admitted, and which waits.
async fn admitted_and_waiting(client: &Client, ns: &str) -> Result<(&'static str, &'static str)> {
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        let (one, two) = tokio::try_join!(jobs.get("one"), jobs.get("two"))?;
        match (admitted(&one), admitted(&two)) {
            (true, true) => bail!("both jobs admitted though the quota fits one"),
            (true, false) => return Ok(("one", "two")),
            (false, true) => return Ok(("two", "one")),
            _ if start.elapsed() > STEP_TIMEOUT => {
                bail!(
                    "neither job admitted: {:?}, {:?}",
                    queued(&one),
                    queued(&two)
                )
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn wait_pod(client: &Client, ns: &str, name: &str) -> Result<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        if let Some(p) = pods.get_opt(name).await? {
            return Ok(p);
        }
        if start.elapsed() > STEP_TIMEOUT {
            bail!("pod {ns}/{name} never appeared");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// b: urgent (priority 1000) arrives while second trains; returns the
/// seconds from urgent's apply to second's eviction and from that to its
/// last pod gone.
async fn preempt(
    client: &Client,
    ns: &str,
    second: &str,
    high: &str,
    clock: &Clock,
) -> Result<(f64, f64)> {
    wait_job(client, ns, second, "Running", |j| {
        phase(j) == Some(JobPhase::Running)
    })
    .await?;
    clock.mark(&format!("b: {second} Running (training)"));
    apply_job(client, ns, &queued_job("urgent", QUEUE_A, Some(high), 3)?).await?;
    let t_apply = clock.mark("b: urgent applied (WorkloadPriorityClass value 1000)");
    let evicted = wait_job(client, ns, second, "preempted", |j| {
        queued_is(j, "True", "EvictedPreempted") || phase(j).is_some_and(JobPhase::is_terminal)
    })
    .await?;
    ensure!(
        phase(&evicted) == Some(JobPhase::Suspended),
        "{second} must be preempted and suspended, got phase {:?} (it trained too fast?)",
        phase(&evicted)
    );
    let t_evicted = clock.mark(&format!(
        "b: {second} evicted (Queued True, EvictedPreempted), suspended"
    ));
    no_pods_within(client, ns, second, Duration::from_secs(60)).await?;
    let t_gone = clock.mark(&format!("b: {second}'s pods all gone"));
    wait_workload(client, ns, second, "requeued", |w| {
        wl_condition(w, "Requeued") == Some(("True".into(), "Preempted".into()))
    })
    .await?;
    wait_job(client, ns, "urgent", "admitted", admitted).await?;
    clock.mark(&format!(
        "b: {second}'s Workload Requeued (Preempted); urgent admitted"
    ));
    wait_job(client, ns, "urgent", "Succeeded", |j| {
        phase(j) == Some(JobPhase::Succeeded)
    })
    .await?;
    clock.mark("b: urgent Succeeded");
    wait_job(client, ns, second, "admitted again", admitted).await?;
    clock.mark(&format!("b: {second} admitted again"));
    let done = wait_job(client, ns, second, "ended", |j| {
        phase(j).is_some_and(JobPhase::is_terminal)
    })
    .await?;
    ensure!(
        phase(&done) == Some(JobPhase::Succeeded),
        "{second} ended {:?}",
        phase(&done)
    );
    clock.mark(&format!("b: {second} Succeeded"));
    Ok((t_evicted - t_apply, t_gone - t_evicted))
}

// ---- c: all-or-nothing start ----

/// The job whose workers cannot start: their image does not exist.
fn gang_job() -> Result<DGLJob> {
    let mut job = queued_job("gang", QUEUE_B, None, 3)?;
    let w = main_container(&mut job, ReplicaType::Worker)?;
    w.image = Some("localhost/dgl-operator-no-such-image:v0".into());
    w.image_pull_policy = Some("IfNotPresent".into());
    Ok(job)
}

/// Whether a container of the pod runs (an init container counts: the
/// launcher's watcher-loop runs while it waits for the workers).
fn started(p: &Pod) -> bool {
    let Some(st) = p.status.as_ref() else {
        return false;
    };
    st.container_statuses
        .iter()
        .chain(st.init_container_statuses.iter())
        .flatten()
        .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

async fn gang(client: &Client, ns: &str, clock: &Clock) -> Result<String> {
    apply_job(client, ns, &gang_job()?).await?;
    wait_job(client, ns, "gang", "admitted", admitted).await?;
    let t_admit = clock.mark("c: gang admitted in team-b (its workers' image does not exist)");
    // A partial set: a container of some pod runs (the launcher's
    // watcher-loop; the partitioner has the workers' template) while the
    // workers cannot start.
    let start = Instant::now();
    let partial = loop {
        let pods = pods_of(client, ns, "gang").await?;
        let up: Vec<String> = pods
            .iter()
            .filter(|p| started(p))
            .map(|p| p.name_any())
            .collect();
        if !up.is_empty() {
            break up;
        }
        if start.elapsed() > STEP_TIMEOUT {
            bail!("no pod of gang ever ran");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    clock.mark(&format!(
        "c: gang partly started: a container runs in {partial:?}, the workers cannot pull"
    ));
    let j = wait_job(client, ns, "gang", "evicted", |j| {
        queued_is(j, "True", "EvictedPodsReadyTimeout")
    })
    .await?;
    let t_evict =
        clock.mark("c: gang evicted by waitForPodsReady (Queued True, EvictedPodsReadyTimeout)");
    let message = queued(&j).map(|q| q.2).unwrap_or_default();
    ensure!(
        message.contains("waits again in LocalQueue team-b")
            && phase(&j) == Some(JobPhase::Suspended),
        "gang: the Queued condition must say it waits again, suspended; got {message:?}, {:?}",
        phase(&j)
    );
    no_pods_within(client, ns, "gang", Duration::from_secs(60)).await?;
    let t_gone = clock.mark("c: no pod of gang left");
    let requeue = requeued_without_pods(client, ns).await?;
    let t_requeued = clock.mark(&format!(
        "c: gang requeued after its backoff ({requeue}), no pod meanwhile"
    ));
    Api::<DGLJob>::namespaced(client.clone(), ns)
        .delete("gang", &DeleteParams::background())
        .await?;
    Ok(format!(
        "gang evicted {:.1}s after admission (waitForPodsReady {PODS_READY_TIMEOUT_S}s), its pods gone {:.1}s later, \
         requeued {:.1}s after eviction with no pod meanwhile",
        t_evict - t_admit,
        t_gone - t_evict,
        t_requeued - t_evict
    ))
}

/// Waits until Kueue requeues the evicted gang job (Workload condition
/// Requeued True, BackoffFinished, with a requeue count); fails if any pod
/// of it exists before that. Returns Kueue's requeue count and reason.
async fn requeued_without_pods(client: &Client, ns: &str) -> Result<String> {
    let start = Instant::now();
    loop {
        let wl = workload(client, ns, "gang")
            .await?
            .context("gang's Workload is gone")?;
        if let Some((s, r)) = wl_condition(&wl, "Requeued").filter(|c| c.0 == "True") {
            let count = wl["status"]["requeueState"]["count"].as_i64().unwrap_or(0);
            ensure!(
                r == "BackoffFinished" && count >= 1,
                "gang's Workload: expected Requeued True after a backoff, got {s} {r}, requeue count {count}"
            );
            return Ok(format!("Requeued {r}, requeue count {count}"));
        }
        let pods = pods_of(client, ns, "gang").await?;
        if !pods.is_empty() && !queued_again(&wl) {
            let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
            bail!("gang has pods while evicted and not yet requeued: {names:?}");
        }
        if start.elapsed() > STEP_TIMEOUT {
            bail!("gang was never requeued; its Workload: {}", wl["status"]);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Whether the Workload is requeued or admitted again (then pods may come).
fn queued_again(wl: &Value) -> bool {
    wl_condition(wl, "Requeued").is_some_and(|c| c.0 == "True")
        || wl_condition(wl, "QuotaReserved").is_some_and(|c| c.0 == "True")
}

// ---- a job without the queue label ----

async fn unlabelled(client: &Client, ns: &str, clock: &Clock) -> Result<String> {
    let mut job = example_job_at(EXAMPLE_STANDALONE, "plain")?;
    let c = main_container(&mut job, ReplicaType::Launcher)?;
    c.resources = Some(serde_json::from_value(json!({
        "requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}))?);
    apply_job(client, ns, &job).await?;
    let t0 = clock.mark("plain (no queue label) applied");
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    let done = loop {
        let j = jobs.get("plain").await?;
        let st = j.status.as_ref();
        ensure!(
            queued(&j).is_none()
                && st.and_then(|s| s.queue.as_ref()).is_none()
                && !j.spec.suspended(),
            "plain has no queue label but was queued or suspended: {:?}",
            j.status
        );
        if phase(&j).is_some_and(JobPhase::is_terminal) {
            break j;
        }
        if start.elapsed() > STEP_TIMEOUT {
            bail!("plain did not end within {STEP_TIMEOUT:?}: {:?}", phase(&j));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    ensure!(
        phase(&done) == Some(JobPhase::Succeeded),
        "plain ended {:?}",
        phase(&done)
    );
    ensure!(
        workload(client, ns, "plain").await?.is_none(),
        "plain has a Workload"
    );
    let t = clock.mark("plain Succeeded: never queued, no Workload");
    Ok(format!(
        "unlabelled job Succeeded in {:.1}s untouched by Kueue",
        t - t0
    ))
}

// ---- cleanup ----

/// Deletes the jobs (their Workloads go with them), the queues, the flavor
/// and the priority class, each waited for, then the namespace.
async fn cleanup(client: &Client, ns: &str) -> Result<()> {
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    jobs.delete_collection(&DeleteParams::background(), &ListParams::default())
        .await?;
    let n = Names::of(ns);
    let wls = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        ns,
        &kueue_ar("Workload", "workloads"),
    );
    gone(&wls, None).await?;
    let lqs = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        ns,
        &kueue_ar("LocalQueue", "localqueues"),
    );
    lqs.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    gone(&lqs, None).await?;
    for (kind, plural, name) in [
        ("ClusterQueue", "clusterqueues", &n.cq_a),
        ("ClusterQueue", "clusterqueues", &n.cq_b),
        ("ResourceFlavor", "resourceflavors", &n.flavor),
        ("WorkloadPriorityClass", "workloadpriorityclasses", &n.high),
    ] {
        let api = Api::<DynamicObject>::all_with(client.clone(), &kueue_ar(kind, plural));
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => gone(&api, Some(name)).await?,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).context(format!("deleting {kind} {name}")),
        }
    }
    localkube::delete_namespace(client, ns).await?;
    Ok(())
}

/// Waits up to 60 s until `name` (or every object of `api`) is gone.
async fn gone(api: &Api<DynamicObject>, name: Option<&str>) -> Result<()> {
    let start = Instant::now();
    loop {
        let left: Vec<String> = match name {
            Some(n) => api
                .get_opt(n)
                .await?
                .map(|o| o.name_any())
                .into_iter()
                .collect(),
            None => api
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .map(|o| o.name_any())
                .collect(),
        };
        if left.is_empty() {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("still there 60 s after their deletion: {left:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
