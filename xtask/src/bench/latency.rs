//! `cargo xtask bench latency`: apply → first training step of the example
//! job on the real node, split into the operator's share and the
//! environment's, for each `workerCreationPolicy` (AfterPartitioning: the
//! strict stage order of before; AtStartup: workers start with the
//! partitioner), alternating, in the same run.
//!
//! Every instant is this host's wall clock: pods are followed by a watch
//! (the moment an event arrives), log lines carry the container runtime's
//! timestamps (`kubectl logs --timestamps`), and the node is this host.
//! A container's start is its first log line: the pod's Running phase is
//! seen only when the kubelet next reports its status, often a second late.
//!
//! The operator's share is the time from what it waits for to what it then
//! does, as the watch shows both: job applied → partitioner pod (every pod,
//! the launcher too, comes in that reconcile); (AfterPartitioning)
//! partitioner Ready → first worker pod; partitioner and every worker Ready
//! → the run launched (the ConfigMap written, as the launcher's watcher-loop
//! logs reading it). Everything else (scheduling, pod
//! sandbox and container start, readiness probes every 2 s, the partition
//! script, shipping shards, DGL's initialisation, the first step) is the
//! environment's. Images are preloaded into the node's containerd: an image
//! pull costs nothing here (on a real cluster it is what AtStartup overlaps).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use dgl_api::names::{launcher_name, partitioner_name, LABEL_JOB_NAME, WATCHER_CONTAINER};
use dgl_api::{CleanPodPolicy, DGLJob, JobPhase, WorkerCreationPolicy};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, LogParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::stack::jobs::example_job;
use crate::stack::{self, pod_ready};
use crate::util::{done, step};

/// The lines of the example's training script the timeline ends on.
const SETUP_LINE: &str = "setup rank=0";
const FIRST_STEP_LINE: &str = "first step rank=0";
const NAMESPACE_PREFIX: &str = "bench-latency";

#[derive(clap::Args)]
pub struct LatencyArgs {
    /// Runs per policy (the two policies alternate).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Node cluster to run on (started when not running, like `e2e`).
    #[arg(long, default_value = stack::DEFAULT_CLUSTER)]
    name: String,
    /// Leave the cluster running afterwards.
    #[arg(long)]
    keep_cluster: bool,
    /// Seconds one job may take from apply to its first training step.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

/// What one run saw, as wall-clock instants.
#[derive(Debug, Default, Clone)]
struct Timeline {
    applied: Option<Timestamp>,
    /// Per pod: first seen, seen Ready.
    created: BTreeMap<String, Timestamp>,
    ready: BTreeMap<String, Timestamp>,
    /// From the logs (container runtime timestamps): the first line of the
    /// partitioner's and of the launcher's main container (the pod's status
    /// says Running only when the kubelet next reports it, often later).
    partitioner_first_line: Option<Timestamp>,
    launcher_first_line: Option<Timestamp>,
    /// The launcher's watcher-loop read the ConfigMap's launch of the run.
    launched: Option<Timestamp>,
    partitioned: Option<Timestamp>,
    shards_ready: Option<Timestamp>,
    setup: Option<Timestamp>,
    first_step: Option<Timestamp>,
}

/// One run's figures, seconds.
#[derive(Debug, Clone)]
struct Figures {
    policy: WorkerCreationPolicy,
    total: f64,
    operator: f64,
    partitioner_start: f64,
    partition: f64,
    partitioner_ready: f64,
    workers_ready_after_partition: f64,
    launcher_start: f64,
    shards: f64,
    dgl_init: f64,
    first_step: f64,
}

pub fn run(args: LatencyArgs) -> Result<()> {
    let rt = stack::runtime()?;
    let stack = stack::prepare(&rt, &args.name, 1, crate::images::Profile::Release)?;
    let result = rt.block_on(measure(&stack.client, &args));
    if !args.keep_cluster {
        let t = step(&format!("stopping node cluster {:?}", args.name));
        if let Err(e) = rt.block_on(stack.cluster.down(false)) {
            eprintln!(
                "bench latency: stopping node cluster {:?}: {e:#}",
                args.name
            );
        }
        done(t);
    }
    let figures = result?;
    print_table(&figures);
    Ok(())
}

async fn measure(client: &Client, args: &LatencyArgs) -> Result<Vec<Figures>> {
    let ns = localkube::create_test_namespace(client, NAMESPACE_PREFIX).await?;
    let mut out = Vec::new();
    let policies = [
        WorkerCreationPolicy::AfterPartitioning,
        WorkerCreationPolicy::AtStartup,
    ];
    for r in 0..args.runs {
        for policy in policies {
            let name = format!("lat-{}-{r}", short(policy));
            let t = step(&format!(
                "run {} of {}: {policy:?} ({ns}/{name})",
                r + 1,
                args.runs
            ));
            let tl = one_run(
                client,
                &ns,
                &name,
                policy,
                Duration::from_secs(args.timeout),
            )
            .await
            .with_context(|| format!("latency run {name}"))?;
            let f = figures(&name, policy, &tl)?;
            println!(
                "    apply → first step {:.1}s: operator {:.1}s, environment {:.1}s",
                f.total,
                f.operator,
                f.total - f.operator
            );
            out.push(f);
            done(t);
        }
    }
    localkube::delete_namespace(client, &ns).await?;
    Ok(out)
}

fn short(p: WorkerCreationPolicy) -> &'static str {
    match p {
        WorkerCreationPolicy::AtStartup => "at-startup",
        WorkerCreationPolicy::AfterPartitioning => "after-part",
    }
}

/// Applies the example with `policy`, follows it to its first training
/// step (and to Succeeded), reads the logs, deletes it.
async fn one_run(
    client: &Client,
    ns: &str,
    name: &str,
    policy: WorkerCreationPolicy,
    timeout: Duration,
) -> Result<Timeline> {
    let mut job = example_job(name)?;
    job.spec.worker_creation_policy = Some(policy);
    // Keep every pod to read its log; the job is deleted below.
    job.spec.clean_pod_policy = CleanPodPolicy::None;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    let cfg = watcher::Config::default().labels(&format!("{LABEL_JOB_NAME}={name}"));
    let mut stream = watcher::watcher(pods.clone(), cfg).boxed();
    // The watch is established before the job exists: no pod is missed.
    let mut tl = Timeline::default();
    match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
        Ok(Some(Ok(_))) => {}
        other => bail!("the pod watch did not start: {other:?}"),
    }
    tl.applied = Some(Timestamp::now());
    jobs.create(&PostParams::default(), &job)
        .await
        .with_context(|| format!("creating DGLJob {ns}/{name}"))?;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_check = tokio::time::Instant::now();
    loop {
        if tokio::time::Instant::now() > deadline {
            bail!("DGLJob {ns}/{name} did not succeed within {timeout:?}: {tl:?}");
        }
        // Wake at least every second to read the job's phase: after the
        // launcher runs, no pod event may come until it ends.
        match tokio::time::timeout(Duration::from_secs(1), stream.next()).await {
            Ok(None) => bail!("the pod watch ended"),
            Ok(Some(Err(e))) => eprintln!("    (watch error, retried: {e})"),
            Ok(Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)))) => {
                note(&mut tl, &p, Timestamp::now())
            }
            Ok(Some(Ok(_))) | Err(_) => {}
        }
        if last_check.elapsed() < Duration::from_secs(1) {
            continue;
        }
        last_check = tokio::time::Instant::now();
        match jobs.get_status(name).await?.status.and_then(|s| s.phase) {
            Some(JobPhase::Succeeded) => break,
            Some(JobPhase::Failed) => bail!("DGLJob {ns}/{name} failed"),
            _ => {}
        }
    }
    read_logs(&pods, name, &mut tl).await?;
    jobs.delete(name, &DeleteParams::foreground())
        .await
        .with_context(|| format!("deleting DGLJob {ns}/{name}"))?;
    wait_gone(&pods, name).await?;
    Ok(tl)
}

/// Records the first time a pod was seen, and seen Ready.
fn note(tl: &mut Timeline, p: &Pod, now: Timestamp) {
    let name = p.name_any();
    tl.created.entry(name.clone()).or_insert(now);
    if pod_ready(p) {
        tl.ready.entry(name).or_insert(now);
    }
}

/// Reads each pod's log once and finds the timeline's lines in it.
async fn read_logs(pods: &Api<Pod>, job: &str, tl: &mut Timeline) -> Result<()> {
    let part = log_with_times(pods, &partitioner_name(job), None).await?;
    let launch = log_with_times(pods, &launcher_name(job), None).await?;
    let watcher = log_with_times(pods, &launcher_name(job), Some(WATCHER_CONTAINER)).await?;
    let first = |log: &[(Timestamp, String)], needle: &str| {
        log.iter()
            .find(|(_, l)| l.contains(needle))
            .map(|(t, _)| *t)
    };
    tl.partitioner_first_line = part.first().map(|(t, _)| *t);
    tl.launcher_first_line = launch.first().map(|(t, _)| *t);
    tl.partitioned = first(&part, "partitioned into");
    // watcher-loop logs "wrote N files of ConfigMap …" once it read the launch.
    tl.launched = first(&watcher, "wrote ");
    tl.shards_ready = launch
        .iter()
        .rev()
        .find(|(_, l)| l.contains("shard ready"))
        .map(|(t, _)| *t);
    tl.setup = first(&launch, SETUP_LINE);
    tl.first_step = first(&launch, FIRST_STEP_LINE);
    Ok(())
}

async fn log_with_times(
    pods: &Api<Pod>,
    pod: &str,
    container: Option<&str>,
) -> Result<Vec<(Timestamp, String)>> {
    let lp = LogParams {
        timestamps: true,
        container: container.map(String::from),
        ..Default::default()
    };
    let text = pods
        .logs(pod, &lp)
        .await
        .with_context(|| format!("reading the log of pod {pod}"))?;
    Ok(parse_timed_log(&text))
}

/// `kubectl logs --timestamps` lines: `<RFC 3339 time> <line>`.
fn parse_timed_log(text: &str) -> Vec<(Timestamp, String)> {
    text.lines()
        .filter_map(|l| {
            let (t, rest) = l.split_once(' ')?;
            Some((t.parse().ok()?, rest.to_owned()))
        })
        .collect()
}

async fn wait_gone(pods: &Api<Pod>, job: &str) -> Result<()> {
    let lp = kube::api::ListParams::default().labels(&format!("{LABEL_JOB_NAME}={job}"));
    for _ in 0..240 {
        if pods.list(&lp).await?.items.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("the pods of DGLJob {job} were not gone within 120 s")
}

fn secs(from: Timestamp, to: Timestamp) -> f64 {
    (to.as_nanosecond() - from.as_nanosecond()) as f64 / 1e9
}

/// Splits a timeline into the operator's share and the environment's.
fn figures(job: &str, policy: WorkerCreationPolicy, tl: &Timeline) -> Result<Figures> {
    let need = |what: &str, t: Option<Timestamp>| t.with_context(|| format!("{job}: no {what}"));
    let pod = |m: &BTreeMap<String, Timestamp>, name: &str, what: &str| {
        m.get(name)
            .copied()
            .with_context(|| format!("{job}: pod {name} never seen {what}"))
    };
    let workers: Vec<&String> = tl
        .created
        .keys()
        .filter(|n| n.starts_with(&format!("{job}-worker-")))
        .collect();
    if workers.is_empty() {
        bail!("{job}: no worker pod seen");
    }
    let (part, launcher) = (partitioner_name(job), launcher_name(job));
    let applied = need("apply", tl.applied)?;
    let part_created = pod(&tl.created, &part, "created")?;
    let part_started = need("line in the partitioner's log", tl.partitioner_first_line)?;
    let part_ready = pod(&tl.ready, &part, "Ready")?;
    let first_worker = workers
        .iter()
        .map(|w| pod(&tl.created, w, "created"))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .min()
        .expect("non-empty");
    let workers_ready = workers
        .iter()
        .map(|w| pod(&tl.ready, w, "Ready"))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .max()
        .expect("non-empty");
    pod(&tl.created, &launcher, "created")?;
    let launched = need(
        "`wrote` line in the launcher's watcher-loop log",
        tl.launched,
    )?;
    let launcher_started = need("line in the launcher's log", tl.launcher_first_line)?;
    let partitioned = need(
        "`partitioned into` line in the partitioner's log",
        tl.partitioned,
    )?;
    let shards = need("`shard ready` line in the launcher's log", tl.shards_ready)?;
    let setup = need("`setup rank=0` line in the launcher's log", tl.setup)?;
    let first_step = need(
        "`first step rank=0` line in the launcher's log",
        tl.first_step,
    )?;

    let mut operator = secs(applied, part_created);
    if policy == WorkerCreationPolicy::AfterPartitioning {
        operator += secs(part_ready, first_worker).max(0.0);
    }
    operator += secs(part_ready.max(workers_ready), launched).max(0.0);
    Ok(Figures {
        policy,
        total: secs(applied, first_step),
        operator,
        partitioner_start: secs(part_created, part_started),
        partition: secs(part_started, partitioned),
        partitioner_ready: secs(partitioned, part_ready),
        workers_ready_after_partition: secs(part_ready, workers_ready).max(0.0),
        launcher_start: secs(launched, launcher_started),
        shards: secs(launcher_started, shards),
        dgl_init: secs(shards, setup),
        first_step: secs(setup, first_step),
    })
}

fn print_table(all: &[Figures]) {
    println!("\nEvery run (seconds):");
    println!(
        "| workerCreationPolicy | apply → first step | operator | environment | partitioner created → its first log line | → partitioned | → partitioner Ready | workers Ready after partitioner Ready | launched → launcher's first log line | → shards ready | → DGL set up | → first step |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for f in all {
        println!("{}", row(&format!("{:?}", f.policy), f));
    }
    println!("\nMedians (seconds):");
    for policy in [
        WorkerCreationPolicy::AfterPartitioning,
        WorkerCreationPolicy::AtStartup,
    ] {
        let runs: Vec<&Figures> = all.iter().filter(|f| f.policy == policy).collect();
        if runs.is_empty() {
            continue;
        }
        let m =
            |g: fn(&Figures) -> f64| super::measure::median(runs.iter().map(|f| g(f)).collect());
        let f = Figures {
            policy,
            total: m(|f| f.total),
            operator: m(|f| f.operator),
            partitioner_start: m(|f| f.partitioner_start),
            partition: m(|f| f.partition),
            partitioner_ready: m(|f| f.partitioner_ready),
            workers_ready_after_partition: m(|f| f.workers_ready_after_partition),
            launcher_start: m(|f| f.launcher_start),
            shards: m(|f| f.shards),
            dgl_init: m(|f| f.dgl_init),
            first_step: m(|f| f.first_step),
        };
        println!(
            "{}",
            row(&format!("{policy:?} (median of {})", runs.len()), &f)
        );
    }
}

fn row(label: &str, f: &Figures) -> String {
    format!(
        "| {label} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
        f.total,
        f.operator,
        f.total - f.operator,
        f.partitioner_start,
        f.partition,
        f.partitioner_ready,
        f.workers_ready_after_partition,
        f.launcher_start,
        f.shards,
        f.dgl_init,
        f.first_step
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: f64) -> Timestamp {
        Timestamp::from_nanosecond(1_800_000_000_000_000_000 + (s * 1e9) as i128).unwrap()
    }

    #[test]
    fn timed_log_lines_parse() {
        let log = "2026-11-25T23:59:01.123456789Z [worker-0] setup rank=0 world=2\nnot timed\n";
        let lines = parse_timed_log(log);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].1, "[worker-0] setup rank=0 world=2");
        assert_eq!(lines[0].0.subsec_nanosecond(), 123_456_789);
    }

    #[test]
    fn the_operator_share_is_the_waits_it_reacts_to() {
        let job = "j";
        let mut tl = Timeline {
            applied: Some(at(0.0)),
            partitioner_first_line: Some(at(1.5)),
            launcher_first_line: Some(at(15.0)),
            partitioned: Some(at(10.0)),
            shards_ready: Some(at(16.0)),
            setup: Some(at(20.0)),
            first_step: Some(at(21.0)),
            ..Default::default()
        };
        let (p, l) = (partitioner_name(job), launcher_name(job));
        let w = dgl_api::names::worker_name(job, 0);
        tl.created.insert(p.clone(), at(0.5));
        tl.ready.insert(p, at(11.0));
        tl.created.insert(w.clone(), at(11.2));
        tl.ready.insert(w, at(13.0));
        tl.created.insert(l, at(0.5));
        tl.launched = Some(at(13.3));
        let f = figures(job, WorkerCreationPolicy::AfterPartitioning, &tl).unwrap();
        // 0.5 (job → partitioner) + 0.2 (Ready → worker) + 0.3 (Ready → launched)
        assert!((f.operator - 1.0).abs() < 1e-6, "{f:?}");
        assert!((f.total - 21.0).abs() < 1e-6);
        assert!((f.workers_ready_after_partition - 2.0).abs() < 1e-6);
        // AtStartup: the workers' creation is not a wait of the operator's.
        let f = figures(job, WorkerCreationPolicy::AtStartup, &tl).unwrap();
        assert!((f.operator - 0.8).abs() < 1e-6, "{f:?}");
    }
}
