//! The e2e tier's scenarios: each runs a job in a namespace of its own and
//! checks what the user would see (phase, Events, losses, what is left).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use dgl_api::names::LABEL_JOB_NAME;
use dgl_api::{DGLJob, JobPhase, ReplicaType};
use k8s_openapi::api::core::v1::{EnvVar, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams};
use kube::{Client, ResourceExt};

use crate::stack::jobs::{
    apply_job, check_losses_fall, condition_message, delete_and_check_children, dump_job,
    example_job, example_succeeds, example_succeeds_on, follow, job_events, launcher_log,
    losses_by_worker, losses_unprefixed, phase, pod_summary, Place,
};
use crate::stack::placement::{node_count, spread_workers, Placement};
use crate::stack::{
    operator_pods_lp, pod_ready, wait_operator_ready, EXAMPLE, EXAMPLE_DISTPARMETIS,
    EXAMPLE_GRAPHBOLT, EXAMPLE_LAUNCHPY, EXAMPLE_PARMETIS, EXAMPLE_STANDALONE, JOB_TIMEOUT,
    OPERATOR_NAMESPACE,
};

/// Deletes the operator's Ready pod; returns when a different pod is Ready.
async fn replace_operator_pod(client: &Client) -> Result<Duration> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let old = wait_operator_ready(client, Duration::from_secs(60)).await?;
    let start = Instant::now();
    pods.delete(&old, &DeleteParams::default()).await?;
    loop {
        let list = pods.list(&operator_pods_lp()).await?;
        if let Some(p) = list
            .items
            .iter()
            .find(|p| p.name_any() != old && pod_ready(p))
        {
            println!(
                "    operator pod {old} deleted; {} Ready {:.1}s later",
                p.name_any(),
                start.elapsed().as_secs_f64()
            );
            return Ok(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(180) {
            bail!("no new operator pod became Ready within 180 s of deleting {old}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Runs a scenario in a fresh namespace: on success the namespace is
/// deleted, on failure the job's state is printed and everything is kept.
pub(super) async fn in_namespace<'a, Fut>(
    client: &'a Client,
    prefix: &str,
    job: &'a str,
    scenario: impl FnOnce(String) -> Fut,
) -> Result<String>
where
    Fut: std::future::Future<Output = Result<String>> + 'a,
{
    let ns = localkube::create_test_namespace(client, prefix).await?;
    let r = scenario(ns.clone()).await;
    if r.is_err() {
        dump_job(client, &ns, job).await;
    } else {
        localkube::delete_namespace(client, &ns).await?;
    }
    r
}
/// The example trains to Succeeded while the operator's pod is replaced.
pub(super) async fn train(client: &Client) -> Result<String> {
    let job = "graphsage";
    in_namespace(client, "e2e-train", job, |ns| async move {
        train_in(client, &ns, job).await
    })
    .await
}

async fn train_in(client: &Client, ns: &str, name: &str) -> Result<String> {
    let job = spread_workers(example_job(name)?)?;
    let workers = job
        .spec
        .dgl_replica_specs
        .get(&ReplicaType::Worker)
        .and_then(|s| s.replicas)
        .unwrap_or(1) as usize;
    println!("    kubectl apply -f {EXAMPLE} -n {ns}   (through kube-rs)");
    let applied = Instant::now();
    apply_job(client, ns, &job).await?;

    // Replace the operator's pod once the job is under way: the new pod must
    // pick up from what the cluster holds (principle 6). Runs beside `follow`.
    let restarter = async {
        let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let lp = ListParams::default().labels(&format!("{LABEL_JOB_NAME}={name}"));
        let start = Instant::now();
        loop {
            let job = jobs.get(name).await?;
            if let Some(p @ (JobPhase::Partitioning | JobPhase::Partitioned | JobPhase::Running)) =
                phase(&job)
            {
                let existing = pods.list(&lp).await?.items.len();
                println!("    job is {p}: deleting the operator's pod");
                let took = replace_operator_pod(client).await?;
                return anyhow::Ok((p, existing, took));
            }
            if phase(&job).is_some_and(JobPhase::is_terminal) || start.elapsed() > JOB_TIMEOUT {
                bail!("the job never ran long enough to replace the operator mid-job");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    // Every uid each pod name had: a pod the replaced operator recreated
    // would show up with two.
    let mut uids: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    let mut placement = Placement::default();
    let nodes = node_count(client).await?;
    let following = follow(
        client,
        ns,
        name,
        JOB_TIMEOUT,
        |p| p.is_some_and(JobPhase::is_terminal),
        |_, pods, _| {
            placement.observe(pods);
            for p in pods {
                uids.entry(p.name_any())
                    .or_default()
                    .insert(p.uid().unwrap_or_default());
            }
        },
    );
    let (job_done, (restarted_at, pods_then, operator_gap)) =
        tokio::try_join!(following, restarter)?;
    let total = applied.elapsed();
    let final_phase = phase(&job_done);
    if final_phase != Some(JobPhase::Succeeded) {
        bail!(
            "DGLJob {ns}/{name} ended {final_phase:?}: {:?}",
            condition_message(&job_done, JobPhase::Failed)
        );
    }
    // Shards and DGL's server traffic cross nodes.
    let placed = placement.check_workers_spread(name, workers, nodes)?;
    println!("    placement: {placed}");
    let log = launcher_log(client, ns, name).await?;
    let losses = losses_by_worker(&log);
    check_losses_fall(&losses, workers)?;
    for (w, l) in &losses {
        println!("    {w}: loss by epoch {l:?}");
    }
    // The replaced operator neither recreated a pod nor started a second run.
    let recreated: Vec<_> = uids.iter().filter(|(_, u)| u.len() > 1).collect();
    ensure!(recreated.is_empty(), "pods were recreated: {recreated:?}");
    let restarts = job_done
        .status
        .as_ref()
        .and_then(|s| s.restart_count)
        .unwrap_or(0);
    ensure!(restarts == 0, "the job restarted {restarts} time(s)");
    // The example's rank 0 reports each epoch (DGLRUN_PROGRESS): the
    // launcher published it on its pod and the operator folded it in.
    let progress = job_done.status.as_ref().and_then(|s| s.progress.as_ref());
    let summary = progress.map(|p| p.summary.as_str()).unwrap_or("");
    ensure!(
        summary == "epoch 3/3 (100%)" && progress.is_some_and(|p| p.loss.is_some()),
        "status.progress after Succeeded: {progress:?}, expected epoch 3/3 (100%) with a loss"
    );
    let deleted_in = delete_and_check_children(client, ns, name).await?;
    Ok(format!(
        "Succeeded {:.0}s after apply on {nodes} node(s) ({placed}; operator pod replaced while {restarted_at}, new one Ready in {:.1}s, {} pods then, none recreated; progress {summary}); children deleted in {:.1}s",
        total.as_secs_f64(),
        operator_gap.as_secs_f64(),
        pods_then,
        deleted_in.as_secs_f64()
    ))
}

/// The ParMETIS example: the native pipeline partitions, the job trains to
/// Succeeded with falling losses, the partitioner's log has the pipeline's
/// report, and deleting the job removes every child.
pub(super) async fn parmetis(client: &Client) -> Result<String> {
    let job = "graphsage-parmetis";
    in_namespace(client, "e2e-parmetis", job, |ns| async move {
        parmetis_in(client, &ns, job).await
    })
    .await
}

async fn parmetis_in(client: &Client, ns: &str, name: &str) -> Result<String> {
    // Read while the job runs: cleanPodPolicy deletes the partitioner, still
    // serving, as soon as the job has Succeeded.
    let pname = dgl_api::names::partitioner_name(name);
    let plog = tokio::spawn(log_once_it_holds(
        client.clone(),
        ns.to_string(),
        pname.clone(),
        "edge cut",
    ));
    let total = example_succeeds(client, ns, name, EXAMPLE_PARMETIS, |_, _, _| {}).await?;
    let plog = plog
        .await?
        .with_context(|| format!("reading the log of pod {ns}/{pname}"))?;
    let cut = plog
        .lines()
        .find(|l| l.contains("edge cut"))
        .with_context(|| format!("the partitioner's log has no edge cut line:\n{plog}"))?;
    ensure!(
        plog.contains("native partition pipeline") && plog.contains("stage assign"),
        "the partitioner did not run the native pipeline:\n{plog}"
    );
    let losses = losses_by_worker(&launcher_log(client, ns, name).await?);
    check_losses_fall(&losses, 2)?;
    for (w, l) in &losses {
        println!("    {w}: loss by epoch {l:?}");
    }
    let deleted_in = delete_and_check_children(client, ns, name).await?;
    Ok(format!(
        "Succeeded {:.0}s after apply; partitioner: {}; children deleted in {:.1}s",
        total.as_secs_f64(),
        cut.trim(),
        deleted_in.as_secs_f64()
    ))
}

/// The log of pod `name` once it contains `needle` (polled every second,
/// at most `JOB_TIMEOUT`); the pod may not exist yet.
async fn log_once_it_holds(
    client: Client,
    ns: String,
    name: String,
    needle: &str,
) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let end = Instant::now() + JOB_TIMEOUT;
    let mut last = String::from("(no log read yet)");
    while Instant::now() < end {
        match pods.logs(&name, &LogParams::default()).await {
            Ok(log) if log.contains(needle) => return Ok(log),
            Ok(log) => last = log,
            Err(e) => last = format!("(no log: {e})"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    bail!("{needle:?} never appeared in the log of pod {ns}/{name}:\n{last}")
}

/// The GraphBolt example: DGL's servers load fused_csc_sampling_graph.pt
/// (DGL says so in the launcher's log) and the job trains to Succeeded.
pub(super) async fn graphbolt(client: &Client) -> Result<String> {
    let job = "graphbolt";
    in_namespace(client, "e2e-graphbolt", job, |ns| async move {
        let total = example_succeeds(client, &ns, job, EXAMPLE_GRAPHBOLT, |_, _, _| {}).await?;
        let log = launcher_log(client, &ns, job).await?;
        ensure!(
            log.contains("Initialize the distributed services with graphbolt: True"),
            "DGL did not initialize with GraphBolt:\n{log}"
        );
        let losses = losses_by_worker(&log);
        check_losses_fall(&losses, 2)?;
        let deleted_in = delete_and_check_children(client, &ns, job).await?;
        Ok(format!(
            "Succeeded {:.0}s after apply on GraphBolt partitions; children deleted in {:.1}s",
            total.as_secs_f64(),
            deleted_in.as_secs_f64()
        ))
    })
    .await
}

/// The launch.py-style example: the user's own command lines run as
/// written on two workers; Succeeded with falling losses.
pub(super) async fn launchpy(client: &Client) -> Result<String> {
    let job = "launchpy";
    in_namespace(client, "e2e-launchpy", job, |ns| async move {
        let total = example_succeeds(client, &ns, job, EXAMPLE_LAUNCHPY, |_, _, _| {}).await?;
        let log = launcher_log(client, &ns, job).await?;
        ensure!(
            !log.contains("unrecognized arguments"),
            "a strict script was given arguments it does not declare:\n{log}"
        );
        let losses = losses_by_worker(&log);
        check_losses_fall(&losses, 2)?;
        for (w, l) in &losses {
            println!("    {w}: loss by epoch {l:?}");
        }
        let deleted_in = delete_and_check_children(client, &ns, job).await?;
        Ok(format!(
            "Succeeded {:.0}s after apply; children deleted in {:.1}s",
            total.as_secs_f64(),
            deleted_in.as_secs_f64()
        ))
    })
    .await
}

/// The example without workers: only the launcher ever exists, and it
/// trains to Succeeded with its loss falling.
pub(super) async fn standalone(client: &Client) -> Result<String> {
    let job = "standalone";
    in_namespace(client, "e2e-standalone", job, |ns| async move {
        let launcher = dgl_api::names::launcher_name(job);
        let mut others = Vec::new();
        let total = example_succeeds(client, &ns, job, EXAMPLE_STANDALONE, |_, pods, _| {
            for p in pods {
                let name = p.name_any();
                if name != launcher && !others.contains(&name) {
                    others.push(name);
                }
            }
        })
        .await?;
        ensure!(others.is_empty(), "pods besides the launcher: {others:?}");
        let log = launcher_log(client, &ns, job).await?;
        let losses = losses_unprefixed(&log);
        let mut by_name = BTreeMap::new();
        by_name.insert(launcher.clone(), losses.clone());
        check_losses_fall(&by_name, 1)?;
        println!("    {launcher}: loss by epoch {losses:?}");
        let deleted_in = delete_and_check_children(client, &ns, job).await?;
        Ok(format!(
            "Succeeded {:.0}s after apply, no pod but the launcher; children deleted in {:.1}s",
            total.as_secs_f64(),
            deleted_in.as_secs_f64()
        ))
    })
    .await
}

/// The DistParMETIS example: Partitioning while the ranks run, then
/// Succeeded with falling losses; every rank reported in the launcher's log.
pub(super) async fn distparmetis(client: &Client) -> Result<String> {
    let job = "graphsage-distparmetis";
    in_namespace(client, "e2e-distparmetis", job, |ns| async move {
        distparmetis_in(client, &ns, job).await
    })
    .await
}

async fn distparmetis_in(client: &Client, ns: &str, name: &str) -> Result<String> {
    let (mut phases, mut reached, mut partitioner) = (Vec::new(), BTreeSet::new(), false);
    let mut placement = Placement::default();
    let nodes = node_count(client).await?;
    // Apart as a rule: beside other scenarios the preferred spread can lose
    // to the nodes' free CPU, and the ranks must cross nodes.
    let place = Place::WorkersApart;
    let total = example_succeeds_on(
        client,
        ns,
        name,
        EXAMPLE_DISTPARMETIS,
        place,
        |j, pods, _| {
            placement.observe(pods);
            if let Some(p) = phase(j) {
                if phases.last() != Some(&p) {
                    phases.push(p);
                }
            }
            // The conditions, not sampled phases: a partitioning of 3 s can
            // fall between two polls (seen in the test command).
            let conditions = j.status.iter().flat_map(|s| &s.conditions);
            reached.extend(conditions.map(|c| c.type_.clone()));
            partitioner |= pods.iter().any(|p| p.name_any().ends_with("-partitioner"));
        },
    )
    .await?;
    ensure!(!partitioner, "DistParMETIS created a partitioner pod");
    // One MPI rank per worker: with the workers apart, the ranks' traffic
    // crosses nodes.
    let placed = placement.check_workers_spread(name, 2, nodes)?;
    // The operator records Partitioning even when the ranks finish before
    // a reconcile sees them running (then False beside Partitioned).
    ensure!(
        ["Partitioning", "Partitioned", "Running"]
            .iter()
            .all(|c| reached.contains(*c)),
        "the job's conditions never named Partitioning, Partitioned and Running: {reached:?} (phases polled: {phases:?})"
    );
    let log = launcher_log(client, ns, name).await?;
    let ranks: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("[partition]") && l.contains("edge cut"))
        .collect();
    ensure!(
        !ranks.is_empty(),
        "the launcher's log has no rank report:\n{log}"
    );
    // Each worker checks its own partition in place: no byte transferred.
    let shipped: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("shard ready") && !l.contains("transferred=0 "))
        .collect();
    ensure!(
        shipped.is_empty(),
        "a shard was shipped in DistParMETIS mode: {shipped:?}"
    );
    let losses = losses_by_worker(&log);
    check_losses_fall(&losses, 2)?;
    for (w, l) in &losses {
        println!("    {w}: loss by epoch {l:?}");
    }
    let deleted_in = delete_and_check_children(client, ns, name).await?;
    Ok(format!(
        "Succeeded {:.0}s after apply through {phases:?} on {nodes} node(s) ({placed}); {}; children deleted in {:.1}s",
        total.as_secs_f64(),
        ranks[0].trim(),
        deleted_in.as_secs_f64()
    ))
}

/// A trainer exits 3 at epoch 1: Failed naming the pod, no running pod left.
pub(super) async fn fail(client: &Client) -> Result<String> {
    let job = "graphsage-crash";
    in_namespace(client, "e2e-fail", job, |ns| async move {
        fail_in(client, &ns, job).await
    })
    .await
}

async fn fail_in(client: &Client, ns: &str, name: &str) -> Result<String> {
    let mut job = example_job(name)?;
    let worker = job
        .spec
        .dgl_replica_specs
        .get_mut(&ReplicaType::Worker)
        .context("the example has no Worker replica spec")?;
    let container = worker
        .template
        .spec
        .as_mut()
        .and_then(|s| s.containers.first_mut())
        .context("the example's Worker template has no container")?;
    let env = container.env.get_or_insert_with(Vec::new);
    for (k, v) in [
        ("DGL_EXAMPLE_CRASH_AT_EPOCH", "1"),
        ("DGL_EXAMPLE_CRASH_RANK", "1"),
    ] {
        env.push(EnvVar {
            name: k.into(),
            value: Some(v.into()),
            ..EnvVar::default()
        });
    }
    println!("    {EXAMPLE} as {name}, workers with DGL_EXAMPLE_CRASH_AT_EPOCH=1 DGL_EXAMPLE_CRASH_RANK=1");
    let applied = Instant::now();
    apply_job(client, ns, &job).await?;
    let done = follow(
        client,
        ns,
        name,
        JOB_TIMEOUT,
        |p| p.is_some_and(JobPhase::is_terminal),
        |_, _, _| {},
    )
    .await?;
    let failed_after = applied.elapsed();
    ensure!(
        phase(&done) == Some(JobPhase::Failed),
        "DGLJob {ns}/{name} ended {:?}, expected Failed",
        phase(&done)
    );
    let (reason, message) =
        condition_message(&done, JobPhase::Failed).context("no Failed condition")?;
    println!("    Failed: {reason}: {message}");
    ensure!(
        message.contains(&format!("pod {name}-")) && message.contains("exited with code"),
        "the Failed condition must name the pod and its exit code, got {reason}: {message}"
    );

    // cleanPodPolicy Running: nothing of the job keeps running.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{LABEL_JOB_NAME}={name}"));
    let start = Instant::now();
    loop {
        let running: Vec<String> = pods
            .list(&lp)
            .await?
            .items
            .iter()
            .filter(|p| {
                matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Running" | "Pending")
                )
            })
            .map(pod_summary)
            .collect();
        if running.is_empty() {
            println!(
                "    no running pod {:.1}s after Failed (cleanPodPolicy Running)",
                start.elapsed().as_secs_f64()
            );
            break;
        }
        if start.elapsed() > Duration::from_secs(90) {
            bail!("90 s after the job Failed these pods still run: {running:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let events = job_events(client, ns, name).await?;
    ensure!(
        events
            .iter()
            .any(|e| e.starts_with("Warning") && e.contains(&format!("pod {name}-"))),
        "no Warning Event naming the failed pod; Events: {events:#?}"
    );
    let deleted_in = delete_and_check_children(client, ns, name).await?;
    Ok(format!(
        "Failed {:.0}s after apply ({reason}); children deleted in {:.1}s",
        failed_after.as_secs_f64(),
        deleted_in.as_secs_f64()
    ))
}
