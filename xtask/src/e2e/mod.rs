//! `cargo xtask e2e`: real DGLJobs on a real node.
//!
//! 1. A node cluster of `--nodes` nodes (default 2; `localkube`,
//!    `with_nodes`): etcd, kube-apiserver, kube-controller-manager,
//!    kube-scheduler once; per node containerd + runc + CNI bridge, kubelet
//!    and kube-proxy (node 0 on this host, the others each in a network
//!    namespace of its own). `train`, `distparmetis` and `isolation` check
//!    that the job's workers sat on different nodes (`stack::placement`);
//!    faults that act on one node's kubelet or disk hold their job on node 0.
//! 2. The images (`cargo xtask images`): operator, runtime and the GraphSAGE
//!    training image, built with podman and imported into every node's
//!    containerd (the GraphStorm image into node 0's only: its jobs are held
//!    there).
//! 3. The operator, installed from `charts/dgl-operator` with Helm (the CRD
//!    is applied first with server-side apply, as docs say for upgrades).
//! 4. Scenarios, each in a namespace of its own:
//!    - `train`: `examples/graphsage/dgljob.yaml` as written. While the job
//!      runs, the operator's pod is deleted; the Deployment's new pod takes
//!      over and the job must still reach Succeeded with one run, the same
//!      pods, and every worker's loss falling in the launcher's log. Then
//!      the job is deleted and every child must go.
//!    - `fail`: the same job with a trainer that exits 3 at epoch 1
//!      (`DGL_EXAMPLE_CRASH_AT_EPOCH`, a switch of the example's train.py).
//!      It must reach Failed with a message naming the pod and exit code, an
//!      Event saying so, and cleanPodPolicy Running must leave no running
//!      pod. Then the job is deleted and every child must go.
//!    - `parmetis`: `examples/parmetis/dgljob.yaml` as written: the loader
//!      writes DGL's chunked format, the partitioner pod runs the native
//!      pipeline (METIS, balanced train nodes and edges) and ships the
//!      shards; the job must reach Succeeded with every worker's loss
//!      falling, and the partitioner's log must report the pipeline's stages
//!      and edge cut. Then the job is deleted and every child must go.
//!    - `distparmetis`: `examples/distparmetis/dgljob.yaml` as written: no
//!      partitioner pod; the launcher runs one MPI rank per worker through
//!      dglrun's agent; the job must pass through Partitioning, reach
//!      Succeeded with falling losses, the launcher's log must show every
//!      rank's report, and no shard may be shipped.
//!    - `launchpy`: `examples/launchpy/dgljob.yaml` as written: DGL's own
//!      convention (launch.py-style `--partition-command` and
//!      `--train-command` with placeholders, nothing appended) and scripts
//!      that parse their arguments strictly; the job must reach Succeeded
//!      on two workers with every worker's loss falling.
//!    - `standalone`: `examples/standalone/dgljob.yaml` as written: only a
//!      Launcher (partitionMode Skip); no other pod may appear, the
//!      launcher trains alone to Succeeded with its loss falling.
//!    - `graphbolt`: `examples/graphbolt/dgljob.yaml`: DGL's servers load
//!      GraphBolt partitions; Succeeded with falling losses.
//!    - `graphstorm`: `examples/graphstorm/dgljob.yaml` as written, on the
//!      GraphStorm image: gconstruct partitions in the partitioner pod,
//!      GraphStorm's gsgnn_np trains on two workers to Succeeded, its loss
//!      falls by epoch and status.progress moves through the epochs
//!      (`graphstorm.rs`).
//!    - `never-start`: three jobs whose workers cannot start, each named at
//!      once and Failed at its podStartTimeout (`never_start.rs`).
//!    - `bucket`: the graph only in a bucket of a real S3 server (SeaweedFS
//!      on the node IP): the DistParMETIS example and the same job in mode
//!      ParMETIS read it with `--partition-input s3://...` and the keys
//!      from a Secret to Succeeded (`bucket.rs`).
//!    - `isolation`: kube-router enforces the NetworkPolicies; a pod with
//!      another job's labels, or the job's own of the run before its
//!      restart, is refused by a training job's ports (`isolation.rs`).
//!    - `chaos-job`: every fault of `cargo xtask chaos` confined to one
//!      job (a worker deleted, the partitioner killed, a shard corrupted,
//!      the network cut, an eviction, the job's token Secret deleted), once
//!      each;
//!    - `kueue` (alone): Kueue's queueing, preemption and waitForPodsReady
//!      eviction of DGLJobs (`kueue.rs`).
//!    - `chaos`: every fault that disturbs the whole cluster (the operator
//!      killed, churn, kube-apiserver / etcd / kubelet restarted, a drain, a
//!      hung kubelet), once each.
//!    - `namespaced` (last): the Helm release is replaced by the
//!      single-namespace install `deploy/namespaced` (kustomize), whose
//!      namespace enforces Pod Security "restricted"; the example must train
//!      to Succeeded there, so every container the operator injects passes
//!      admission (`namespaced.rs`).
//!
//! Scenarios run side by side (`--parallel`, default 3) where they only
//! touch their own namespace (`never-start`, which only waits, beside them
//! whatever `--parallel` says); `kueue` and `train` (which replace the
//! operator's pod), `chaos` and `namespaced` run alone, in that order, after
//! them. Side by side pays only with node CPU to spare: on the 2-core
//! machine the group took longer at 3 in any pairing than at 1 (pods
//! Pending on the nodes' CPU requests, docs/benchmarks.md, "Test command"),
//! while one at a time left about a third of the CPU idle; the test command
//! runs them in two lanes planned to fit (`--parallel 2`, [`LANES`]), and
//! runs `chaos` earlier, while its test binaries run on the host
//! ([`BESIDE_THE_TESTS`]).
//!
//! On a failure, the job's status, its pods, Events and the operator's and
//! pods' logs are printed before the cluster is stopped.

mod bucket;
mod graphstorm;
mod isolation;
mod kueue;
mod namespaced;
mod never_start;
mod scenarios;

use std::time::Instant;

use anyhow::{Context, Result};
use futures::StreamExt;

use crate::chaos::Fault;
use crate::stack::{dump_operator, prepare, Stack, DEFAULT_CLUSTER};
use crate::util::node_cluster_n;
use crate::util::{done, step};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Scenario {
    /// The example trains to Succeeded while the operator's pod is replaced; then delete it.
    Train,
    /// A trainer exits 3: Failed naming the pod, cleanPodPolicy applied; then delete it.
    Fail,
    /// The ParMETIS example (native pipeline in the partitioner pod) trains to Succeeded; then delete it.
    Parmetis,
    /// The DistParMETIS example (one MPI rank per worker, nothing shipped) trains to Succeeded; then delete it.
    Distparmetis,
    /// The launch.py-style example (the user's command lines, strict scripts) trains to Succeeded on two workers.
    Launchpy,
    /// The example without workers: the launcher trains alone to Succeeded.
    Standalone,
    /// The GraphBolt example (spec.useGraphbolt) trains to Succeeded on GraphBolt partitions.
    Graphbolt,
    /// The GraphStorm example (gconstruct, then gsgnn_np on two workers) trains to Succeeded; then delete it.
    Graphstorm,
    /// Every `cargo xtask chaos` fault confined to one job, once each, two at a time.
    ChaosJob,
    /// Every `cargo xtask chaos` fault that disturbs the whole cluster, once each (`--small-chaos`: without KubeletHang and NodeLossPartitioning). Runs alone.
    Chaos,
    /// Replaces the Helm release with deploy/namespaced (PSA restricted) and trains the example there. Runs last.
    Namespaced,
    /// Three jobs whose workers cannot start (no such image, no such ConfigMap key, CPU no node has): each named at once, then Failed.
    NeverStart,
    /// Kueue v0.17 with its webhooks and the operator with kueue.enabled: queueing, preemption, waitForPodsReady eviction. Runs alone.
    Kueue,
    /// kube-router enforces the NetworkPolicies: a pod with another job's labels is refused by a training job's ports.
    Isolation,
    /// The graph only in a bucket (SeaweedFS): the DistParMETIS and ParMETIS jobs read it with --partition-input s3://... to Succeeded.
    Bucket,
}

impl Scenario {
    /// Every scenario, in the order they start.
    const ALL: [Scenario; 15] = [
        Scenario::ChaosJob,
        Scenario::Bucket,
        Scenario::Graphstorm,
        Scenario::Distparmetis,
        Scenario::Parmetis,
        Scenario::Launchpy,
        Scenario::Fail,
        Scenario::Graphbolt,
        Scenario::Standalone,
        Scenario::NeverStart,
        Scenario::Kueue,
        Scenario::Isolation,
        Scenario::Train,
        Scenario::Chaos,
        Scenario::Namespaced,
    ];

    /// Whether the scenario disturbs what every job depends on (the
    /// operator's pod, the control plane, the node, the Helm release), so
    /// that it must run with no other scenario beside it.
    fn alone(self) -> bool {
        matches!(
            self,
            Scenario::Train | Scenario::Chaos | Scenario::Namespaced | Scenario::Kueue
        )
    }

    /// Whether the scenario only waits (its pods never start, and those
    /// scheduled ask little CPU), so that it runs beside the others
    /// whatever `--parallel` says: on 2 cores side by side pays only for
    /// what leaves the CPU idle.
    fn idle(self) -> bool {
        self == Scenario::NeverStart
    }
}

/// The confined faults (ChaosJob) two at a time: each job asks 1.1 CPU of
/// the two nodes' 4 allocatable, and much of a fault's run is waiting (pods
/// starting, a grace period, a restart's backoff), so a second job fills
/// that wait; the figures of docs/reliability.md come from `cargo xtask
/// chaos`, one at a time.
const CHAOS_JOB_LANES: usize = 2;

/// How a scenario runs: the small chaos or the whole, and how many of
/// ChaosJob's faults at a time.
#[derive(Clone, Copy)]
struct Run {
    small_chaos: bool,
    chaos_job_lanes: usize,
}

/// `--parallel 2` (the test command's): the group in two lanes, each one
/// scenario after another, planned so that the two lanes' jobs fit the
/// nodes' CPU (each example job asks 1.6 CPU of the two nodes' 2 + 2) and
/// fill the CPU one lane leaves idle (about a third of it, one at a time:
/// pods starting, DGL's start-up, a fault's wait). ChaosJob runs its faults
/// one at a time there. The GraphStorm jobs are held on node 0 (its image
/// is only there), so what runs beside them in the other lane needs no
/// worker on node 0 (no hard spread: Bucket, DistParMETIS and Isolation
/// run beside ChaosJob instead).
const LANES: [&[Scenario]; 2] = [
    &[Scenario::ChaosJob, Scenario::Graphstorm],
    &[
        Scenario::Bucket,
        Scenario::Distparmetis,
        Scenario::Isolation,
        Scenario::Parmetis,
        Scenario::Launchpy,
        Scenario::Fail,
        Scenario::Graphbolt,
        Scenario::Standalone,
    ],
];

/// What `--small-chaos` (the test command) leaves to `cargo xtask chaos`:
/// KubeletHang's path, a node NotReady and the run restarted naming it, is
/// NodeLoss's too, and its 100 s freeze is the scenario's longest wait;
/// NodeLossPartitioning is NodeLoss again (the same cut, the same
/// replacement of the lost pods) with the partitioner as the victim, and
/// another minute of waiting for NotReady.
const SMALL_CHAOS_LEAVES_OUT: [Fault; 2] = [Fault::KubeletHang, Fault::NodeLossPartitioning];

/// Whether a chaos fault stays inside its own job (so it may run beside
/// other jobs) rather than disturbing the operator, the control plane or
/// the node every job shares.
fn confined(f: Fault) -> bool {
    match f {
        Fault::WorkerDelete
        | Fault::PartitionerKill
        | Fault::ShardCorrupt
        | Fault::NetworkCut
        | Fault::Evict
        | Fault::TokenDelete => true,
        // Drain cordons a node; KubeletHang freezes one; NodeLoss cuts one off.
        Fault::Drain | Fault::KubeletHang | Fault::NodeLoss | Fault::NodeLossPartitioning => false,
        Fault::OperatorKill
        | Fault::Churn
        | Fault::ApiserverRestart
        | Fault::EtcdPause
        | Fault::KubeletRestart => false,
    }
}

#[derive(clap::Args)]
#[command(
    long_about = "End-to-end tests on a real node: builds and loads the images, \
    installs the operator with Helm, and runs the examples as DGLJobs, the chaos \
    faults once each and the single-namespace install (see `--only`).\n\n\
    Scenarios that touch only their own namespace run side by side (--parallel); \
    those that disturb every job (the operator replaced, cluster-wide faults, the \
    Helm release replaced) run alone after them.\n\n\
    Needs root (containerd, network namespaces, iptables). Only one node cluster \
    runs per host: stop another one first (`cargo xtask cluster down --name <it>`). \
    Cold, this builds Kubernetes and the images (about 35 min on 2 cores); warm \
    it takes a few minutes."
)]
pub struct Args {
    /// Node cluster to run on (started when not running).
    #[arg(long, default_value = DEFAULT_CLUSTER)]
    pub name: String,
    /// Nodes of the cluster (each extra one in a network namespace of its
    /// own, see `cargo xtask cluster up --help`). With 2 or more, the
    /// train, distparmetis and isolation scenarios check that the job's
    /// workers sit on different nodes, and the drain moves pods for real.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=3))]
    pub nodes: u32,
    /// Leave the cluster, the operator and the jobs' namespaces running afterwards.
    #[arg(long)]
    pub keep_cluster: bool,
    /// Run only these scenarios (repeatable); default: all.
    #[arg(long, value_enum)]
    pub only: Vec<Scenario>,
    /// Binaries in the operator and runtime images (see `cargo xtask images --help`).
    #[arg(long, value_enum, default_value_t = crate::images::Profile::Release)]
    pub profile: crate::images::Profile,
    /// How many scenarios that touch only their own namespace run at once
    /// (1: one after another, as a slow machine may need; 2: in two lanes
    /// planned so that their jobs fit the 2-node cluster's CPU, the test
    /// command's; more: that many at a time, in any pairing).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub parallel: u32,
    /// The `chaos` scenario without KubeletHang and NodeLossPartitioning
    /// (the test command's small run; see `SMALL_CHAOS_LEAVES_OUT` for
    /// why). `cargo xtask chaos` and this command without the flag run them.
    #[arg(long)]
    pub small_chaos: bool,
}

/// Starts the node cluster, loads the images and installs the operator;
/// on a failure, stops the cluster again unless asked to keep it.
pub(crate) fn start(rt: &tokio::runtime::Runtime, args: &Args) -> Result<Stack> {
    prepare(rt, &args.name, args.nodes as usize, args.profile).inspect_err(|_| {
        if !args.keep_cluster {
            // Leave no node behind; the cluster's logs stay in its state dir.
            if let Ok(c) = node_cluster_n(&args.name, args.nodes as usize) {
                if let Err(down) = rt.block_on(c.down(false)) {
                    eprintln!("e2e: stopping node cluster {:?}: {down:#}", args.name);
                }
            }
        }
    })
}

/// The scenarios that must run alone yet leave much of the CPU idle
/// (waiting for a node to turn NotReady, a control plane to serve again, a
/// restarted operator), which the test command runs on its node cluster
/// while the test binaries run on the host (they share no cluster, port or
/// file). Chaos alone already outlasts the test binaries beside it (r20:
/// about 445 s against 420), so Train (57 s there, 30 s alone) runs after
/// the group with Kueue; Namespaced stays last (it replaces the Helm
/// release the others use).
const BESIDE_THE_TESTS: [Scenario; 1] = [Scenario::Chaos];

/// Scenarios already run on the stack, and their report lines.
#[derive(Default)]
pub(crate) struct Ran {
    scenarios: Vec<Scenario>,
    report: Vec<String>,
}

/// Runs [`BESIDE_THE_TESTS`] (those asked for) on a started stack; on a
/// failure dumps the operator's state and stops the cluster (unless kept).
pub(crate) fn beside_the_tests(
    rt: &tokio::runtime::Runtime,
    stack: Stack,
    args: &Args,
) -> Result<(Stack, Ran)> {
    let mut ran = Ran::default();
    let wanted = chosen(&args.only);
    let result = rt.block_on(async {
        for s in BESIDE_THE_TESTS.into_iter().filter(|s| wanted.contains(s)) {
            ran.report
                .push(run_alone(&stack, s, args.small_chaos).await?);
            ran.scenarios.push(s);
        }
        anyhow::Ok(())
    });
    if let Err(e) = result {
        rt.block_on(dump_operator(&stack.client));
        if !args.keep_cluster {
            if let Err(down) = rt.block_on(stack.cluster.down(false)) {
                eprintln!("e2e: stopping node cluster {:?}: {down:#}", args.name);
            }
        }
        return Err(e);
    }
    Ok((stack, ran))
}

/// Runs the scenarios on a started stack, then stops the cluster (unless
/// kept) and prints one line per scenario.
pub(crate) fn finish(
    rt: &tokio::runtime::Runtime,
    stack: Stack,
    args: &Args,
    (started, ran): (Instant, Ran),
) -> Result<()> {
    let mut report = ran.report;
    let left: Vec<Scenario> = chosen(&args.only)
        .into_iter()
        .filter(|s| !ran.scenarios.contains(s))
        .collect();
    let result = rt.block_on(run_scenarios(
        &stack,
        &left,
        (args.parallel, args.small_chaos),
        &mut report,
    ));
    if result.is_err() {
        rt.block_on(dump_operator(&stack.client));
    }
    if !args.keep_cluster {
        let t = step(&format!("stopping node cluster {:?}", args.name));
        let down = rt
            .block_on(stack.cluster.down(false))
            .with_context(|| format!("stopping node cluster {:?}", args.name));
        done(t);
        match (&result, down) {
            (_, Ok(_)) => {}
            // The scenario's failure is the news; report the teardown's too.
            (Err(_), Err(e)) => eprintln!("e2e: {e:#}"),
            (Ok(()), Err(e)) => return Err(e),
        }
    }
    result?;
    println!("\ne2e passed in {:.0}s", started.elapsed().as_secs_f64());
    for line in report {
        println!("  {line}");
    }
    Ok(())
}

/// The scenarios asked for (all without `--only`), in `Scenario::ALL`'s order.
fn chosen(only: &[Scenario]) -> Vec<Scenario> {
    Scenario::ALL
        .into_iter()
        .filter(|s| only.is_empty() || only.contains(s))
        .collect()
}

/// The scenarios that may share the node first, `parallel` at a time, then
/// each one that must run alone. Stops at the first group with a failure
/// (every scenario of a side-by-side group is waited for, so its namespaces
/// are left in a known state for the dump).
async fn run_scenarios(
    stack: &Stack,
    scenarios: &[Scenario],
    (parallel, small_chaos): (u32, bool),
    report: &mut Vec<String>,
) -> Result<()> {
    let (alone, shared): (Vec<Scenario>, Vec<Scenario>) = scenarios.iter().partition(|s| s.alone());
    if !shared.is_empty() {
        let (idle, busy): (Vec<Scenario>, Vec<Scenario>) = shared.iter().partition(|s| s.idle());
        let how = if parallel == 2 {
            "in two planned lanes".to_owned()
        } else {
            format!("{parallel} at a time")
        };
        let t = step(&format!(
            "scenarios side by side, {how}: {busy:?}; beside them: {idle:?}"
        ));
        let run = Run {
            small_chaos,
            chaos_job_lanes: if parallel == 2 { 1 } else { CHAOS_JOB_LANES },
        };
        let group = async {
            if parallel == 2 {
                let lanes = LANES.map(|lane| {
                    let mine: Vec<Scenario> =
                        lane.iter().copied().filter(|s| busy.contains(s)).collect();
                    async move {
                        let mut out = Vec::new();
                        for s in mine {
                            out.push((s, timed(stack, s, run).await));
                        }
                        out
                    }
                });
                let [a, b] = lanes;
                let (mut a, b) = futures::join!(a, b);
                a.extend(b);
                // A scenario no lane names still runs, after them.
                for s in busy
                    .iter()
                    .copied()
                    .filter(|s| !LANES.iter().any(|l| l.contains(s)))
                {
                    a.push((s, timed(stack, s, run).await));
                }
                a
            } else {
                futures::stream::iter(busy.clone())
                    .map(|s| async move { (s, timed(stack, s, run).await) })
                    .buffer_unordered(parallel as usize)
                    .collect::<Vec<_>>()
                    .await
            }
        };
        let beside = futures::future::join_all(
            idle.into_iter()
                .map(|s| async move { (s, timed(stack, s, run).await) }),
        );
        let (mut results, beside) = futures::join!(group, beside);
        results.extend(beside);
        done(t);
        results.sort_by_key(|(s, _)| Scenario::ALL.iter().position(|a| a == s));
        let mut first_err = None;
        for (s, r) in results {
            match r {
                Ok(line) => report.push(format!("{s:?}: {line}")),
                Err(e) => {
                    eprintln!("e2e scenario {s:?} failed: {e:#}");
                    first_err.get_or_insert(e.context(format!("e2e scenario {s:?} failed")));
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
    }
    for s in alone {
        report.push(run_alone(stack, s, small_chaos).await?);
    }
    Ok(())
}

/// One scenario that must run alone, as a step of its own; its report line.
async fn run_alone(stack: &Stack, s: Scenario, small_chaos: bool) -> Result<String> {
    let t = step(&format!("scenario {s:?}"));
    let run = Run {
        small_chaos,
        chaos_job_lanes: CHAOS_JOB_LANES,
    };
    let r = timed(stack, s, run).await;
    done(t);
    Ok(format!(
        "{s:?}: {}",
        r.context(format!("e2e scenario {s:?} failed"))?
    ))
}

/// One scenario, its wall time printed when it ends (side by side, the
/// step's own timer covers the whole group).
async fn timed(stack: &Stack, s: Scenario, run: Run) -> Result<String> {
    let t = Instant::now();
    println!("    [{s:?}] started");
    let r = scenario(stack, s, run).await;
    let outcome = if r.is_ok() { "passed" } else { "FAILED" };
    println!("    [{s:?}] {outcome} in {:.1}s", t.elapsed().as_secs_f64());
    r
}

async fn scenario(stack: &Stack, s: Scenario, run: Run) -> Result<String> {
    let faults = |want: bool| -> Vec<Fault> {
        Fault::ALL
            .into_iter()
            .filter(|&f| confined(f) == want)
            .collect()
    };
    match s {
        Scenario::Train => scenarios::train(&stack.client).await,
        Scenario::Fail => scenarios::fail(&stack.client).await,
        Scenario::Parmetis => scenarios::parmetis(&stack.client).await,
        Scenario::Distparmetis => scenarios::distparmetis(&stack.client).await,
        Scenario::Launchpy => scenarios::launchpy(&stack.client).await,
        Scenario::Standalone => scenarios::standalone(&stack.client).await,
        Scenario::Graphbolt => scenarios::graphbolt(&stack.client).await,
        Scenario::Graphstorm => graphstorm::graphstorm(stack).await,
        Scenario::ChaosJob => {
            let (faults, lanes) = (faults(true), run.chaos_job_lanes);
            crate::chaos::run_all(&stack.client, &stack.cluster, &faults, 1, 4, lanes).await
        }
        Scenario::Chaos => {
            let mut faults = faults(false);
            if run.small_chaos {
                faults.retain(|&f| !SMALL_CHAOS_LEAVES_OUT.contains(&f));
            }
            crate::chaos::run_all(&stack.client, &stack.cluster, &faults, 1, 4, 1).await
        }
        Scenario::Namespaced => namespaced::namespaced(&stack.client, &stack.kubeconfig).await,
        Scenario::NeverStart => never_start::never_start(&stack.client).await,
        Scenario::Isolation => isolation::isolation(stack).await,
        Scenario::Bucket => bucket::bucket(stack).await,
        Scenario::Kueue => kueue::kueue(stack).await,
    }
}
