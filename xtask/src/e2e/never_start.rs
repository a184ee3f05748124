//! Pods that never start, on the real node (issue #25 item 1): three jobs
//! side by side, each with a worker that cannot start for its own reason
//! (an image that does not exist, an env var from a ConfigMap key that does
//! not exist, CPU requests no node can meet). Each must show condition
//! PodsNotStarting naming a pod of the Worker template (the example's
//! partitioner runs it too, and its name sorts first) within seconds, a
//! Warning Event, and fail with reason PodStartTimeout after
//! runPolicy.podStartTimeoutSeconds.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use dgl_api::{DGLJob, JobPhase, ReplicaType, RunPolicy};
use k8s_openapi::api::core::v1::Container;
use kube::Client;
use serde_json::json;

use super::scenarios::in_namespace;
use crate::stack::jobs::{apply_job, condition_message, example_job, follow, job_events};

/// Short, so that the three jobs fail well within the scenario's ~90 s.
const START_TIMEOUT_SECONDS: i32 = 25;

/// What is wrong with each job's workers, and the reasons that may name it
/// (the kubelet turns ErrImagePull into ImagePullBackOff between attempts).
const CASES: [(&str, &[&str]); 3] = [
    ("image", &["ErrImagePull", "ImagePullBackOff"]),
    ("config", &["CreateContainerConfigError"]),
    ("sched", &["Unschedulable"]),
];

pub(super) async fn never_start(client: &Client) -> Result<String> {
    in_namespace(client, "e2e-never-start", "ns-image", |ns| async move {
        let runs = CASES.map(|(case, reasons)| one(client, &ns, case, reasons));
        let [a, b, c] = runs;
        let (a, b, c) = tokio::join!(a, b, c);
        Ok([a?, b?, c?].join("; "))
    })
    .await
}

/// The example job `ns-<case>`, its workers broken as `case` says.
fn broken_job(case: &str) -> Result<DGLJob> {
    let mut job = example_job(&format!("ns-{case}"))?;
    job.spec
        .run_policy
        .get_or_insert_with(RunPolicy::default)
        .pod_start_timeout_seconds = Some(START_TIMEOUT_SECONDS);
    let worker = job
        .spec
        .dgl_replica_specs
        .get_mut(&ReplicaType::Worker)
        .context("the example has no Worker replica spec")?;
    let c: &mut Container = worker
        .template
        .spec
        .as_mut()
        .and_then(|s| s.containers.first_mut())
        .context("the example's Worker template has no container")?;
    // Small requests for the pods that are scheduled but never start: the
    // three jobs side by side must fit the node (the example's 500m per
    // worker would not), so that each fails for its own reason only.
    let small = json!({"requests": {"cpu": "10m", "memory": "64Mi"}});
    c.resources = Some(serde_json::from_value(small)?);
    match case {
        "image" => {
            c.image = Some("localhost/dgl-operator-no-such-image:v0".into());
            c.image_pull_policy = Some("IfNotPresent".into());
        }
        "config" => {
            let env = json!({"name": "ABSENT", "valueFrom": {"configMapKeyRef":
                {"name": "no-such-config", "key": "no-such-key"}}});
            c.env
                .get_or_insert_with(Vec::new)
                .push(serde_json::from_value(env)?);
        }
        _ => {
            let r = json!({"requests": {"cpu": "1000"}});
            c.resources = Some(serde_json::from_value(r)?);
        }
    }
    Ok(job)
}

/// Applies the broken job, follows it to Failed and checks what it showed.
async fn one(client: &Client, ns: &str, case: &str, reasons: &[&str]) -> Result<String> {
    let job = broken_job(case)?;
    let name = format!("ns-{case}");
    apply_job(client, ns, &job).await?;
    let applied = Instant::now();
    let mut named: Option<(Duration, String, String)> = None;
    let done = follow(
        client,
        ns,
        &name,
        Duration::from_secs(120),
        |p| p.is_some_and(JobPhase::is_terminal),
        |j, _, at| {
            if named.is_none() {
                named = not_starting(j).map(|(r, m)| (at, r, m));
            }
        },
    )
    .await?;
    let failed_after = applied.elapsed();
    let (at, reason, message) = named.context(format!("{name}: PodsNotStarting never True"))?;
    println!(
        "    {name}: PodsNotStarting after {:.1}s: {reason}: {message}",
        at.as_secs_f64()
    );
    ensure!(
        reasons.contains(&reason.as_str()) && names_a_broken_pod(&name, &message),
        "{name}: PodsNotStarting must name its partitioner or a worker and one of {reasons:?}, \
         got {reason}: {message}"
    );
    let (f_reason, f_message) =
        condition_message(&done, JobPhase::Failed).context(format!("{name}: not Failed"))?;
    ensure!(
        f_reason == "PodStartTimeout" && names_a_broken_pod(&name, &f_message),
        "{name}: Failed must be PodStartTimeout naming its partitioner or a worker, \
         got {f_reason}: {f_message}"
    );
    one_warning_each(client, ns, &name, reasons).await?;
    Ok(format!(
        "{name}: {reason} named at {:.1}s, Failed at {:.1}s",
        at.as_secs_f64(),
        failed_after.as_secs_f64()
    ))
}

/// One Warning Event for the pod that cannot start and one for
/// PodStartTimeout (the operator sends Events in the background: waited for
/// up to 10 s). Events read "<type> <reason>: <note>"; the Failed Event's
/// note quotes the kubelet's reason too, so the reason field is matched.
async fn one_warning_each(client: &Client, ns: &str, name: &str, reasons: &[&str]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = job_events(client, ns, name).await?;
        let warned = |r: &str| {
            let head = format!("Warning {r}: ");
            events.iter().filter(|e| e.starts_with(&head)).count()
        };
        let (stuck, timed_out) = (
            reasons.iter().map(|r| warned(r)).sum::<usize>(),
            warned("PodStartTimeout"),
        );
        if (stuck, timed_out) == (1, 1) {
            return Ok(());
        }
        ensure!(
            stuck <= 1 && timed_out <= 1 && Instant::now() < deadline,
            "{name}: one Warning Event for the pod that cannot start and one for \
             PodStartTimeout, got {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether `message` starts by naming a pod of job `name` made from the
/// broken Worker template: a worker, or the partitioner (the example has
/// no Partitioner spec, so its partitioner runs the Worker template).
fn names_a_broken_pod(name: &str, message: &str) -> bool {
    [
        format!("pod {name}-worker-"),
        format!("pod {name}-partitioner:"),
    ]
    .iter()
    .any(|p| message.starts_with(p.as_str()))
}

/// `(reason, message)` of condition PodsNotStarting when True.
fn not_starting(j: &DGLJob) -> Option<(String, String)> {
    j.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "PodsNotStarting" && c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}
