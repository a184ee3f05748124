//! `cargo xtask chaos`: faults injected into real DGLJobs on the e2e tier's
//! real node, each scenario run N times, outcome counts and times reported.
//!
//! - `operator-kill`: the operator's pod is killed (grace 0, SIGKILL) at a
//!   random moment of a job's life, creating pods included. The job must
//!   still Succeed, every pod of it must have had one incarnation (no
//!   duplicate), and its deletion must leave no child.
//! - `worker-delete`: a worker pod is deleted (grace 0) while training runs.
//!   With backoffLimit 1 the job must restart once and Succeed; nothing left.
//! - `churn`: jobs applied and deleted in a loop while the operator's pod is
//!   killed: afterwards no pod, Secret, ConfigMap, Service or RBAC object of
//!   any of them may remain.
//! - `evict`, `drain`, `kubelet-hang` (`evict.rs`): a worker evicted through
//!   the Eviction API, worker 0's node drained (on 2 nodes the evicted pods
//!   must come back on the other one), node 0's kubelet frozen while the
//!   job's pods are deleted.
//! - `node-loss` (`node_loss.rs`, 2 nodes): the extra node holding a worker
//!   cut off the network mid-training; the operator must name it within 60 s
//!   of NotReady, the run restart on the other node and Succeed, and nothing
//!   of the old run be left once the node is back.
//!
//! Faults that act on one node's processes or files (the kubelet restarted
//! or frozen, a shard flipped on disk) pin their job to node 0, whose
//! kubelet they act on.
//!
//! The test command runs every scenario once (`e2e` scenario `chaos`); the
//! full figures (`--runs 5`) go to docs/reliability.md.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{ensure, Context, Result};
use dgl_api::names::worker_name;
use dgl_api::{DGLJob, JobPhase};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Client, ResourceExt};
use localkube::{Component, LocalCluster};

mod evict;
mod fault;
mod infra;
mod node_loss;
mod timing;
mod token;

use crate::stack::jobs::{
    apply_job, children, delete_and_count_left, example_job, expect_phase, follow, follow_to_end,
};
use crate::stack::{pod_ready, OPERATOR_NAMESPACE, RELEASE};
pub use fault::Fault;
pub(crate) use fault::Outcome;

#[derive(clap::Args)]
#[command(
    long_about = "Fault injection on the e2e tier's real node: the operator killed at a \
    random moment of a job's life, a worker deleted mid-training, jobs applied and deleted \
    while the operator restarts. Each scenario runs --runs times; a table of outcomes, \
    times to the terminal state and objects left behind is printed.\n\n\
    Needs what `cargo xtask e2e` needs (root, the cached Kubernetes binaries, podman)."
)]
pub struct Args {
    /// Runs per scenario.
    #[arg(long, default_value_t = 5)]
    pub runs: u32,
    /// Only these scenarios (repeatable); default: all.
    #[arg(long, value_enum)]
    pub only: Vec<Fault>,
    /// Jobs per churn run.
    #[arg(long, default_value_t = 10)]
    pub churn_jobs: u32,
    /// Node cluster to run on (started when not running).
    #[arg(long, default_value = crate::stack::DEFAULT_CLUSTER)]
    pub name: String,
    /// Binaries in the operator and runtime images.
    #[arg(long, value_enum, default_value_t = crate::images::Profile::Release)]
    pub profile: crate::images::Profile,
    /// Nodes of the cluster (as `cargo xtask e2e --nodes`): with 2, the
    /// drain moves the job's pods to the other node.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=3))]
    pub nodes: u32,
    /// Leave the cluster running afterwards (it is shared: the e2e tier's).
    #[arg(long)]
    pub keep_cluster: bool,
}

/// One row per scenario: runs, as expected, time to terminal p50/max, left behind.
#[derive(Default)]
struct Tally {
    runs: u32,
    expected: u32,
    times: Vec<Duration>,
    left: usize,
    notes: Vec<String>,
}

/// Runs every fault `runs` times, `lanes` faults at a time (each in
/// namespaces of its own; 1 for figures undisturbed by a neighbour). A
/// fault stops at its first unexpected outcome, leaving that namespace for
/// diagnosis; the others still run, and the table of those that passed is
/// printed before the first error is returned.
pub async fn run_all(
    client: &Client,
    cluster: &LocalCluster,
    faults: &[Fault],
    runs: u32,
    churn: u32,
    lanes: usize,
) -> Result<String> {
    let results: Vec<(Fault, Result<Tally>)> = futures::stream::iter(faults.iter().copied())
        .map(|f| async move { (f, run_fault(client, cluster, f, runs, churn).await) })
        .buffer_unordered(lanes.max(1))
        .collect()
        .await;
    let mut rows: BTreeMap<Fault, Tally> = BTreeMap::new();
    let mut first_err = None;
    for (f, r) in results {
        match r {
            Ok(row) => {
                rows.insert(f, row);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        println!("{}", table(&rows));
        return Err(e);
    }
    Ok(table(&rows))
}

/// The `runs` runs of fault `f`, one after another, each in a new
/// namespace (deleted when the run went as expected).
async fn run_fault(
    client: &Client,
    cluster: &LocalCluster,
    f: Fault,
    runs: u32,
    churn: u32,
) -> Result<Tally> {
    let mut row = Tally::default();
    for i in 0..runs {
        let ns = localkube::create_test_namespace(client, "chaos").await?;
        let t = Instant::now();
        let (r, times) = timing::collect(run_one(client, cluster, &ns, f, i, churn)).await;
        for timed in &times {
            println!("{}", timing::line(f, i + 1, timed));
        }
        row.runs += 1;
        let outcome = r.with_context(|| format!("chaos {f:?} run {} (namespace {ns})", i + 1))?;
        row.expected += 1;
        row.times
            .push(outcome.terminal.unwrap_or_else(|| t.elapsed()));
        row.left += outcome.left;
        row.notes.push(outcome.note);
        localkube::delete_namespace(client, &ns).await?;
    }
    Ok(row)
}

/// Run `i` (from 0) of fault `f` in namespace `ns`.
async fn run_one(
    client: &Client,
    cluster: &LocalCluster,
    ns: &str,
    f: Fault,
    i: u32,
    churn: u32,
) -> Result<Outcome> {
    match f {
        Fault::OperatorKill => operator_kill(client, ns, i).await,
        Fault::WorkerDelete => worker_delete(client, ns).await,
        Fault::Churn => churn_run(client, ns, churn).await,
        Fault::ApiserverRestart => {
            infra::component(client, cluster, ns, Component::Apiserver, None).await
        }
        Fault::EtcdPause => {
            let pause = Some(Duration::from_secs(10));
            infra::component(client, cluster, ns, Component::Etcd, pause).await
        }
        Fault::KubeletRestart => {
            infra::component(client, cluster, ns, Component::Kubelet, None).await
        }
        Fault::PartitionerKill => infra::partitioner_kill(client, ns).await,
        Fault::ShardCorrupt => infra::shard_corrupt(client, cluster, ns).await,
        Fault::NetworkCut => infra::network_cut(client, ns).await,
        Fault::Evict => evict::evict(client, ns).await,
        Fault::Drain => evict::drain(client, ns).await,
        Fault::KubeletHang => evict::kubelet_hang(client, cluster, ns).await,
        Fault::TokenDelete => token::token_delete(client, ns).await,
        Fault::NodeLoss => node_loss::training(client, cluster, ns).await,
        Fault::NodeLossPartitioning => node_loss::partitioning(client, cluster, ns).await,
    }
}

fn table(rows: &BTreeMap<Fault, Tally>) -> String {
    let mut s = String::from(
        "| scenario | runs | as expected | to terminal p50 / max | left behind | notes |\n|---|---|---|---|---|---|\n",
    );
    for (f, t) in rows {
        let mut times = t.times.clone();
        times.sort();
        let p50 = times
            .get(times.len() / 2)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let max = times.last().map(|d| d.as_secs_f64()).unwrap_or(0.0);
        s.push_str(&format!(
            "| {f:?} | {} | {} | {p50:.0} s / {max:.0} s | {} | {} |\n",
            t.runs,
            t.expected,
            t.left,
            t.notes.join("; ")
        ));
    }
    s
}

/// A pseudo-random delay in [0, max): the wall clock's nanoseconds, printed so
/// a failing run can be repeated.
fn random_delay(max: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64 ^ d.as_secs().wrapping_mul(0x9E37_79B9))
        .unwrap_or(0);
    Duration::from_millis(nanos % max.as_millis().max(1) as u64)
}

async fn operator_kill(client: &Client, ns: &str, run: u32) -> Result<Outcome> {
    let name = "chaos-kill";
    // The first run kills while the job's pods are being created; later ones at random.
    let delay = if run == 0 {
        Duration::ZERO
    } else {
        random_delay(Duration::from_secs(60))
    };
    println!(
        "    killing the operator {:.1}s after apply",
        delay.as_secs_f64()
    );
    let applied = Instant::now();
    apply_job(client, ns, &example_job(name)?).await?;
    let killer = {
        let client = client.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let victim = kill_operator(&client).await?;
            Ok::<_, anyhow::Error>((victim, Instant::now()))
        })
    };
    let mut incarnations: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    let done = follow_to_end(client, ns, name, |_, pods, _| {
        for p in pods {
            incarnations
                .entry(p.name_any())
                .or_default()
                .insert(p.uid().unwrap_or_default());
        }
    })
    .await?;
    let (ended, terminal) = (Instant::now(), applied.elapsed());
    let (killed, killed_at) = killer.await.context("the killer task")??;
    timing::record(&done, ended.saturating_duration_since(killed_at));
    expect_phase(&done, JobPhase::Succeeded)?;
    let twice: Vec<_> = incarnations.iter().filter(|(_, u)| u.len() > 1).collect();
    ensure!(twice.is_empty(), "pods created more than once: {twice:?}");
    let left = delete_and_count_left(client, ns, name).await?;
    Ok(Outcome {
        terminal: Some(terminal),
        left,
        note: format!("killed {killed} at {:.0}s", delay.as_secs_f64()),
    })
}

async fn worker_delete(client: &Client, ns: &str) -> Result<Outcome> {
    let name = "chaos-worker";
    let mut job = example_job(name)?;
    job.spec
        .run_policy
        .get_or_insert_with(Default::default)
        .backoff_limit = Some(1);
    let applied = Instant::now();
    apply_job(client, ns, &job).await?;
    follow(
        client,
        ns,
        name,
        crate::stack::JOB_TIMEOUT,
        |p| p == Some(JobPhase::Running) || p.is_some_and(JobPhase::is_terminal),
        |_, _, _| {},
    )
    .await?;
    let victim = worker_name(name, 0);
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete(
            &victim,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("deleting pod {ns}/{victim}"))?;
    let deleted = Instant::now();
    println!("    deleted {victim} while Running");
    let done = follow_to_end(client, ns, name, |_, _, _| {}).await?;
    timing::record(&done, deleted.elapsed());
    let terminal = applied.elapsed();
    expect_phase(&done, JobPhase::Succeeded)?;
    let restarts = done
        .status
        .as_ref()
        .and_then(|s| s.restart_count)
        .unwrap_or(0);
    ensure!(
        restarts == 1,
        "expected one restart after deleting {victim}, status says {restarts}"
    );
    let left = delete_and_count_left(client, ns, name).await?;
    Ok(Outcome {
        terminal: Some(terminal),
        left,
        note: format!("{victim} deleted; restarted once"),
    })
}

async fn churn_run(client: &Client, ns: &str, jobs: u32) -> Result<Outcome> {
    let names: Vec<String> = (0..jobs).map(|i| format!("churn-{i}")).collect();
    let started = Instant::now();
    for (i, n) in names.iter().enumerate() {
        apply_job(client, ns, &example_job(n)?).await?;
        if i == names.len() / 2 {
            kill_operator(client).await?;
        }
    }
    tokio::time::sleep(random_delay(Duration::from_secs(20))).await;
    let api: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    for (i, n) in names.iter().enumerate() {
        api.delete(n, &DeleteParams::background()).await?;
        if i == names.len() / 2 {
            kill_operator(client).await?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    let left = loop {
        let mut left = Vec::new();
        for n in &names {
            left.extend(children(client, ns, n).await?);
        }
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    ensure!(
        left.is_empty(),
        "left behind 180 s after deleting every churn job: {left:?}"
    );
    Ok(Outcome {
        terminal: Some(started.elapsed()),
        left: left.len(),
        note: format!("{jobs} jobs, operator killed twice"),
    })
}

/// Kills the operator's Ready pod with grace 0 (SIGKILL); returns its name.
async fn kill_operator(client: &Client) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"));
    let deadline = Instant::now() + Duration::from_secs(120);
    let victim = loop {
        if let Some(p) = pods.list(&lp).await?.items.iter().find(|p| pod_ready(p)) {
            break p.name_any();
        }
        ensure!(
            Instant::now() < deadline,
            "no Ready operator pod to kill within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete(&victim, &dp)
        .await
        .with_context(|| format!("killing operator pod {victim}"))?;
    Ok(victim)
}
