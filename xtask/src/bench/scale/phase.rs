//! One phase measured: the idle operator, the jobs created and followed
//! to their end, the operator's and the other processes' CPU, memory and
//! requests.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, PostParams};
use kube::Client;
use localkube::LocalCluster;

use super::cluster::nodes_ready;
use super::identity;
use super::metrics::{
    apiserver_scrape, by_verb_resource, histogram_quantile, own_metrics, per_job_diff,
    requests_total, scrape_opt, write_buckets, Metrics,
};
use super::operator::Operator;
use super::procs::Procs;
use super::report::Report;
use super::spec::{Env, ScaleArgs, Subject};
use super::times::job_times;
use super::watch::{start_watches, Seen};
use crate::bench::measure::{loadavg, percentile, proc_sample, ProcSample};

/// Step 5: creates the jobs, `--create-parallelism` at a time, noting when
/// each was created.
pub(super) fn spawn_creator(
    jobs_api: Api<DynamicObject>,
    seen: Arc<Mutex<Seen>>,
    names: Vec<String>,
    args: &ScaleArgs,
    subject: Subject,
    ns: &str,
) -> tokio::task::JoinHandle<Result<Vec<()>>> {
    let workers = args.workers;
    let par = args.create_parallelism.max(1);
    let ns = ns.to_string();
    tokio::spawn(async move {
        futures::stream::iter(names)
            .map(|name| {
                let api = jobs_api.clone();
                let seen = seen.clone();
                let obj = subject.job_object(&name, &ns, workers);
                async move {
                    let job: DynamicObject = serde_json::from_value(obj)?;
                    let at = Instant::now();
                    api.create(&PostParams::default(), &job)
                        .await
                        .with_context(|| format!("creating job {name}"))?;
                    seen.lock().unwrap().jobs.entry(name).or_default().created = Some(at);
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(par)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()
    })
}

/// What the wait for the jobs saw.
pub(super) struct Progress {
    pub(super) peak_rss: u64,
    pub(super) timed_out: bool,
    pub(super) created_all_at: Option<Duration>,
    pub(super) min_nodes_ready: usize,
    /// When every job had finished, and the operator's CPU seconds then.
    pub(super) finished: Option<(Duration, f64)>,
    /// When cleanPodPolicy's deletions were done (from the watch).
    pub(super) cleanup_done: Option<Duration>,
}

/// Step 6: waits until every job has finished and its pods are cleaned up
/// (or `--timeout`), sampling the operator's memory and the nodes, with a
/// line every 10 s.
pub(super) async fn wait_for_jobs(
    args: &ScaleArgs,
    client: &Client,
    seen: &Mutex<Seen>,
    creator: &tokio::task::JoinHandle<Result<Vec<()>>>,
    procs: &mut Procs,
    op_pid: u32,
    t0: Instant,
) -> Result<Progress> {
    let mut p = Progress {
        peak_rss: 0,
        timed_out: false,
        created_all_at: None,
        min_nodes_ready: args.nodes as usize,
        finished: None,
        cleanup_done: None,
    };
    let mut last_print = Instant::now();
    let timeout = Duration::from_secs(args.timeout);
    let mut nodes_checked = Instant::now();
    loop {
        procs.check_running()?;
        if nodes_checked.elapsed() > Duration::from_secs(5) {
            nodes_checked = Instant::now();
            if let Ok(r) = nodes_ready(client).await {
                if r < p.min_nodes_ready {
                    eprintln!(
                        "    warning: only {r} of {} nodes Ready (kwok heartbeats late?)",
                        args.nodes
                    );
                }
                p.min_nodes_ready = p.min_nodes_ready.min(r);
            }
        }
        let sample = proc_sample(op_pid).ok();
        if let Some(s) = sample {
            p.peak_rss = p.peak_rss.max(s.rss_kib);
        }
        if p.created_all_at.is_none() && creator.is_finished() {
            p.created_all_at = Some(t0.elapsed());
        }
        let (pods, done, failed, cleanup) = {
            let s = seen.lock().unwrap();
            let done = s.jobs.values().filter(|j| j.succeeded.is_some()).count();
            let failed = s.jobs.values().filter(|j| j.failed).count();
            (s.pods.len(), done, failed, s.cleanup_done())
        };
        if done + failed >= args.jobs && p.created_all_at.is_some() {
            if p.finished.is_none() {
                p.finished = Some((t0.elapsed(), sample.map(|s| s.cpu_seconds).unwrap_or(0.0)));
            }
            if let Some(at) = cleanup {
                p.cleanup_done = Some(
                    at.map(|at| at.saturating_duration_since(t0))
                        .unwrap_or_default(),
                );
                break;
            }
        }
        if t0.elapsed() > timeout {
            p.timed_out = true;
            eprintln!("    timed out after {} s", args.timeout);
            break;
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            last_print = Instant::now();
            eprintln!(
                "    {:>5.0} s: {pods} pods, {done} of {} jobs Succeeded, {failed} Failed; operator RSS {:.1} MiB; load {}",
                t0.elapsed().as_secs_f64(),
                args.jobs,
                p.peak_rss as f64 / 1024.0,
                loadavg()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(p)
}

/// How many warning/error lines the operator logged, and the first three
/// (ours: tracing's " WARN "/" ERROR "; mpi-operator: klog's W/E prefixes).
pub(super) fn log_warnings(op_log: &Path) -> (usize, Vec<String>) {
    let log = std::fs::read_to_string(op_log).unwrap_or_default();
    let is_warning = |l: &&str| {
        l.contains(" WARN ")
            || l.contains(" ERROR ")
            || ((l.starts_with('W') || l.starts_with('E'))
                && l.as_bytes().get(1).is_some_and(u8::is_ascii_digit))
    };
    let first_warnings: Vec<String> = log
        .lines()
        .filter(is_warning)
        .take(3)
        .map(|l| l.chars().take(300).collect())
        .collect();
    (log.lines().filter(is_warning).count(), first_warnings)
}

/// Creates the jobs (on a task) and follows them until they are done or
/// time out: the job names, the time of the first create, the progress.
async fn create_jobs(
    env: &Env<'_>,
    subject: Subject,
    ns: &str,
    pods_per_job: u32,
    seen: &Arc<Mutex<Seen>>,
    procs: &mut Procs,
    op_pid: u32,
) -> Result<(Vec<String>, Instant, Progress)> {
    let args = env.args.scale;
    let client = env.client;
    eprintln!(
        "==> creating {} jobs x {} workers ({}, {pods_per_job} pods each)",
        args.jobs,
        args.workers,
        subject.describe(),
    );
    let t0 = Instant::now();
    let jobs_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &subject.resource());
    let names: Vec<String> = (0..args.jobs).map(|i| format!("bench-{i:05}")).collect();
    let creator = spawn_creator(jobs_api, seen.clone(), names.clone(), args, subject, ns);
    let progress = wait_for_jobs(args, client, seen, &creator, procs, op_pid, t0).await?;
    creator.await.context("job creation task")??;
    Ok((names, t0, progress))
}

/// Which kube-scheduler the phase ran with, for the report.
fn scheduler_description(args: &ScaleArgs) -> String {
    if args.scheduler_qps > 0.0 {
        format!("bench kube-scheduler, client QPS {}", args.scheduler_qps)
    } else {
        "localkube kube-scheduler, stock client QPS 50".into()
    }
}

pub(super) async fn measure_phase(
    env: &Env<'_>,
    subject: Subject,
    ns: &str,
    op: &Operator,
    procs: &mut Procs,
) -> Result<Report> {
    let args = env.args.scale;
    let client = env.client;
    let flow = identity::flow_schema(subject.account());
    let Idle {
        sample: idle,
        requests_per_s: idle_requests_per_s,
        metrics: m0,
    } = measure_idle(env, &flow, op, procs).await?;
    let pods_per_job = subject.pods_per_job(args.workers);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watches = start_watches(client, seen.clone(), subject, ns, pods_per_job).await?;
    let base = baseline(env.cluster, client, env.scheduler_pid, env.kwok_pid).await?;
    let load_start = loadavg();

    let (names, t0, progress) =
        create_jobs(env, subject, ns, pods_per_job, &seen, procs, op.pid).await?;
    let load_end = loadavg();
    let after = proc_sample(op.pid)?;
    let m1 = scrape_opt(op.metrics_port).await?;
    let api1 = apiserver_scrape(client).await?;

    let peak_rss = settle(args, op.pid, progress.peak_rss.max(idle.rss_kib)).await;
    procs.check_running()?;
    let fin = proc_sample(op.pid)?;
    let m2 = scrape_opt(op.metrics_port).await?;
    let api2 = apiserver_scrape(client).await?;
    for w in watches {
        w.abort();
    }
    let components_cpu = components_cpu(&base, env.kwok_pid);
    let (log_warnings, first_warnings) = log_warnings(&op.log);
    let times = job_times(&seen.lock().unwrap(), &names, subject, args.workers, t0);

    let n = args.jobs.max(1) as f64;
    let api0 = &base.apiserver;
    let own = match (&m0, &m1, &m2) {
        (Some(m0), Some(m1), Some(m2)) => Some(own_metrics(m0, m1, m2, n, times.updates)),
        _ => None,
    };
    let write_latency = [0.5, 0.99].map(|q| {
        histogram_quantile(q, &write_buckets(api0), &write_buckets(&api1)).map(|s| s * 1000.0)
    });
    Ok(Report {
        label: args.label.clone(),
        subject,
        namespace: ns.to_string(),
        jobs: args.jobs,
        workers: args.workers,
        pods_per_job,
        operator_args: op.args.join(" "),
        scheduler: scheduler_description(args),
        first_create_to_last_pod: times.last_pod.map(|d| d.as_secs_f64()),
        first_create_to_last_launch: times.last_launch.map(|d| d.as_secs_f64()),
        jobs_created_in: progress.created_all_at.map(|d| d.as_secs_f64()),
        per_job: [0.5, 0.95, 0.99].map(|q| percentile(&times.per_job, q)),
        per_job_max: times.per_job.last().copied().unwrap_or(f64::NAN),
        reaction: [0.5, 0.95, 0.99].map(|q| percentile(&times.reaction, q)),
        environment: [0.5, 0.95, 0.99].map(|q| percentile(&times.environment, q)),
        apiserver_requests: requests_total(&api1) - requests_total(api0),
        apiserver_detail: per_job_diff(&by_verb_resource(api0), &by_verb_resource(&api1), n),
        operator_requests: identity::dispatched(&api2, &flow) - identity::dispatched(api0, &flow),
        idle_requests_per_s,
        min_nodes_ready: progress.min_nodes_ready,
        nodes: args.nodes as usize,
        apiserver_write_ms: write_latency,
        jobs_without_all_pods: times.incomplete,
        all_succeeded: (!progress.timed_out && times.succeeded == args.jobs)
            .then_some(progress.finished.map(|f| f.0.as_secs_f64()))
            .flatten(),
        cleanup_done: progress.cleanup_done.map(|d| d.as_secs_f64()),
        succeeded: times.succeeded,
        failed: times.failed,
        pods_seen: times.pods_seen,
        cpu_seconds: progress
            .finished
            .map(|f| f.1 - idle.cpu_seconds)
            .unwrap_or(f64::NAN),
        cpu_seconds_cleanup: after.cpu_seconds - idle.cpu_seconds,
        cpu_seconds_settled: fin.cpu_seconds - idle.cpu_seconds,
        idle_rss_mib: idle.rss_kib as f64 / 1024.0,
        peak_rss_mib: peak_rss.max(fin.hwm_kib) as f64 / 1024.0,
        final_rss_mib: fin.rss_kib as f64 / 1024.0,
        own,
        log_warnings,
        first_warnings,
        components_cpu,
        load_start,
        load_end,
    })
}

/// The operator with no job: its memory and CPU, its requests per second,
/// and (ours) its counters before the jobs.
struct Idle {
    sample: ProcSample,
    requests_per_s: f64,
    metrics: Option<Metrics>,
}

/// Lets the started operator idle for `--idle-seconds`, then samples it.
async fn measure_idle(env: &Env<'_>, flow: &str, op: &Operator, procs: &mut Procs) -> Result<Idle> {
    let client = env.client;
    let idle0 = (Instant::now(), apiserver_scrape(client).await?);
    tokio::time::sleep(Duration::from_secs(env.args.scale.idle_seconds)).await;
    procs.check_running()?;
    let sample = proc_sample(op.pid)?;
    let requests_per_s = (identity::dispatched(&apiserver_scrape(client).await?, flow)
        - identity::dispatched(&idle0.1, flow))
        / idle0.0.elapsed().as_secs_f64();
    let metrics = scrape_opt(op.metrics_port).await?;
    eprintln!(
        "    idle: RSS {:.1} MiB, CPU {:.2} s",
        sample.rss_kib as f64 / 1024.0,
        sample.cpu_seconds
    );
    Ok(Idle {
        sample,
        requests_per_s,
        metrics,
    })
}

/// CPU seconds the other processes (control plane, scheduler, kwok, this
/// bench) used since the baseline.
fn components_cpu(base: &Baseline, kwok_pid: u32) -> Vec<(String, f64)> {
    let since = |pid: u32, c0: f64| proc_sample(pid).map(|s| s.cpu_seconds - c0).unwrap_or(0.0);
    base.components
        .iter()
        .zip(&base.comp_cpu0)
        .map(|((n, p), (_, c0))| (n.clone(), since(*p, *c0)))
        .chain([
            ("kwok".to_string(), since(kwok_pid, base.kwok_cpu0)),
            (
                "this bench (watches, creates)".to_string(),
                since(std::process::id(), base.bench_cpu0),
            ),
        ])
        .collect()
}

/// CPU seconds and API server counters before the jobs are created.
pub(super) struct Baseline {
    pub(super) components: Vec<(String, u32)>,
    pub(super) comp_cpu0: Vec<(String, f64)>,
    pub(super) kwok_cpu0: f64,
    pub(super) bench_cpu0: f64,
    pub(super) apiserver: Metrics,
}

pub(super) async fn baseline(
    cluster: &LocalCluster,
    client: &Client,
    scheduler_pid: Option<u32>,
    kwok_pid: u32,
) -> Result<Baseline> {
    let mut components = component_pids(cluster).await;
    if let Some(pid) = scheduler_pid {
        components.push(("kube-scheduler (bench)".into(), pid));
    }
    let comp_cpu0 = components
        .iter()
        .map(|(n, p)| {
            (
                n.clone(),
                proc_sample(*p).map(|s| s.cpu_seconds).unwrap_or(0.0),
            )
        })
        .collect();
    Ok(Baseline {
        components,
        comp_cpu0,
        kwok_cpu0: proc_sample(kwok_pid)?.cpu_seconds,
        bench_cpu0: proc_sample(std::process::id())?.cpu_seconds,
        apiserver: apiserver_scrape(client).await?,
    })
}

/// Settle: the final memory after a quiet while; returns the peak RSS seen
/// so far.
pub(super) async fn settle(args: &ScaleArgs, op_pid: u32, mut peak_rss: u64) -> u64 {
    let settle_end = Instant::now() + Duration::from_secs(args.settle_seconds);
    while Instant::now() < settle_end {
        if let Ok(s) = proc_sample(op_pid) {
            peak_rss = peak_rss.max(s.rss_kib);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    peak_rss
}

pub(super) async fn component_pids(cluster: &LocalCluster) -> Vec<(String, u32)> {
    match cluster.status().await {
        Ok(s) => s
            .components
            .iter()
            .filter_map(|c| Some((c.name.to_string(), u32::try_from(c.pid?).ok()?)))
            .collect(),
        Err(_) => Vec::new(),
    }
}
