//! `cargo xtask e2e`: real DGLJobs on a real node.
//!
//! 1. A node cluster (`localkube`, `with_node`): etcd, kube-apiserver,
//!    kube-controller-manager, kube-scheduler, containerd + runc + CNI bridge,
//!    kubelet and kube-proxy on this host.
//! 2. The images (`cargo xtask images`): operator, runtime and the GraphSAGE
//!    training image, built with podman and imported into the node's containerd.
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
//!    - `chaos`: every fault of `cargo xtask chaos` once (`chaos.rs`).
//!    - `namespaced` (last): the Helm release is replaced by the
//!      single-namespace install `deploy/namespaced` (kustomize), whose
//!      namespace enforces Pod Security "restricted"; the example must train
//!      to Succeeded there, so every container the operator injects passes
//!      admission (`e2e_namespaced.rs`).
//!
//! On a failure, the job's status, its pods, Events and the operator's and
//! pods' logs are printed before the cluster is stopped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use dgl_api::names::LABEL_JOB_NAME;
use dgl_api::{DGLJob, JobPhase, ReplicaType};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, EnvVar, Event, Node, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use localkube::LocalCluster;

use crate::cluster::node_cluster;
use crate::images::render;
use crate::test::{done, repo_root, step};

/// Helm release and namespace of the operator.
pub const RELEASE: &str = "dgl-operator";
pub const OPERATOR_NAMESPACE: &str = "dgl-operator-system";
/// The node cluster `cargo xtask e2e` (and so `cargo xtask test`) uses.
pub const DEFAULT_CLUSTER: &str = "e2e";
/// Field manager of what this tool applies.
pub(crate) const MANAGER: &str = "xtask-e2e";
/// The example the train and fail scenarios run.
pub const EXAMPLE: &str = "examples/graphsage/dgljob.yaml";
/// The example of partition mode ParMETIS.
pub const EXAMPLE_PARMETIS: &str = "examples/parmetis/dgljob.yaml";
/// The example of partition mode DistParMETIS.
pub const EXAMPLE_DISTPARMETIS: &str = "examples/distparmetis/dgljob.yaml";
/// DGL's own convention: launch.py-style command lines.
pub const EXAMPLE_LAUNCHPY: &str = "examples/launchpy/dgljob.yaml";
/// GraphBolt partitions.
pub const EXAMPLE_GRAPHBOLT: &str = "examples/graphbolt/dgljob.yaml";
/// A job without workers.
pub const EXAMPLE_STANDALONE: &str = "examples/standalone/dgljob.yaml";
/// How long one GraphSAGE job may take from apply to a final phase.
pub(crate) const JOB_TIMEOUT: Duration = Duration::from_secs(900);

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
    /// Every `cargo xtask chaos` fault once.
    Chaos,
    /// Replaces the Helm release with deploy/namespaced (PSA restricted) and trains the example there. Runs last.
    Namespaced,
}

#[derive(clap::Args)]
#[command(
    long_about = "End-to-end tests on a real node: builds and loads the images, \
    installs the operator with Helm, and runs the GraphSAGE example as DGLJobs \
    (a training run during which the operator's pod is replaced, and a run whose \
    trainer fails).\n\n\
    Needs root (containerd, network namespaces, iptables). Only one node cluster \
    runs per host: stop another one first (`cargo xtask cluster down --name <it>`). \
    Cold, this builds Kubernetes and the images (about 35 min on 2 cores); warm \
    it takes a few minutes."
)]
pub struct Args {
    /// Node cluster to run on (started when not running).
    #[arg(long, default_value = DEFAULT_CLUSTER)]
    pub name: String,
    /// Leave the cluster, the operator and the jobs' namespaces running afterwards.
    #[arg(long)]
    pub keep_cluster: bool,
    /// Run only these scenarios (repeatable); default: all.
    #[arg(long, value_enum)]
    pub only: Vec<Scenario>,
    /// Binaries in the operator and runtime images (see `cargo xtask images --help`).
    #[arg(long, value_enum, default_value_t = crate::images::Profile::Release)]
    pub profile: crate::images::Profile,
}

/// A node cluster with the images loaded and the operator installed.
pub struct Stack {
    pub cluster: LocalCluster,
    pub kubeconfig: PathBuf,
    pub client: Client,
}

/// The runtime of `e2e` and `demo`: two threads, like the machine.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

pub fn run(args: Args) -> Result<()> {
    let started = Instant::now();
    let rt = runtime()?;
    let stack = match prepare(&rt, &args.name, args.profile) {
        Ok(s) => s,
        Err(e) => {
            if !args.keep_cluster {
                // Leave no node behind; the cluster's logs stay in its state dir.
                if let Ok(c) = node_cluster(&args.name) {
                    if let Err(down) = rt.block_on(c.down(false)) {
                        eprintln!("e2e: stopping node cluster {:?}: {down:#}", args.name);
                    }
                }
            }
            return Err(e);
        }
    };
    let scenarios = if args.only.is_empty() {
        vec![
            Scenario::Train,
            Scenario::Fail,
            Scenario::Parmetis,
            Scenario::Distparmetis,
            Scenario::Launchpy,
            Scenario::Standalone,
            Scenario::Graphbolt,
            Scenario::Chaos,
            Scenario::Namespaced,
        ]
    } else {
        let mut s = args.only.clone();
        s.sort();
        s.dedup();
        s
    };
    let mut result = Ok(());
    let mut report = Vec::new();
    for s in scenarios {
        let t = step(&format!("scenario {s:?}"));
        let r = rt.block_on(async {
            match s {
                Scenario::Train => train(&stack.client).await,
                Scenario::Fail => fail(&stack.client).await,
                Scenario::Parmetis => parmetis(&stack.client).await,
                Scenario::Distparmetis => distparmetis(&stack.client).await,
                Scenario::Launchpy => launchpy(&stack.client).await,
                Scenario::Standalone => standalone(&stack.client).await,
                Scenario::Graphbolt => graphbolt(&stack.client).await,
                Scenario::Chaos => {
                    use crate::chaos::Fault;
                    crate::chaos::run_all(&stack.client, &stack.cluster, &Fault::ALL, 1, 4).await
                }
                Scenario::Namespaced => {
                    crate::e2e_namespaced::namespaced(&stack.client, &stack.kubeconfig).await
                }
            }
        });
        done(t);
        match r {
            Ok(line) => report.push(format!("{s:?}: {line}")),
            Err(e) => {
                result = Err(e.context(format!("e2e scenario {s:?} failed")));
                break;
            }
        }
    }
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

/// Starts (or reuses) the node cluster `name`, builds and loads the images,
/// and installs the operator with Helm; returns when the operator is Ready.
pub fn prepare(
    rt: &tokio::runtime::Runtime,
    name: &str,
    profile: crate::images::Profile,
) -> Result<Stack> {
    let t = step(&format!(
        "node cluster {name:?} (control plane + containerd + kubelet + kube-proxy)"
    ));
    let cluster = node_cluster(name)?;
    let info = rt
        .block_on(cluster.up())
        .with_context(|| format!("starting node cluster {name:?}"))?;
    println!("    export KUBECONFIG={}", info.kubeconfig.display());
    done(t);

    let t = step("images: operator, runtime, GraphSAGE training image (podman, no registry)");
    crate::images::run(crate::images::Args {
        name: name.to_owned(),
        only: Vec::new(),
        no_load: false,
        force: false,
        smoke: false,
        python_env_only: false,
        profile,
    })?;
    done(t);

    let t = step("operator: CRD (server-side apply) and `helm upgrade --install`");
    let client = rt.block_on(localkube::client_from_file(&info.kubeconfig))?;
    rt.block_on(localkube::apply_crds(&client, &dgl_api::crd_yaml()))
        .context("applying the DGLJob CRD")?;
    // The tag stays the same when the image is rebuilt: an annotation with
    // its content hash makes Helm roll the operator's pod onto the new one.
    let image_hash = cluster
        .node_image_labels(&crate::images::reference(crate::images::Which::Operator))?
        .and_then(|l| l.get(crate::images::HASH_LABEL).cloned())
        .context("the operator image in the node's containerd has no content-hash label")?;
    let installed = helm_install(&info.kubeconfig, &image_hash).and_then(|()| {
        rt.block_on(wait_operator_ready(&client, Duration::from_secs(180)))
            .map(drop)
    });
    if installed.is_err() {
        rt.block_on(dump_install(&client));
    }
    installed?;
    done(t);
    Ok(Stack {
        cluster,
        kubeconfig: info.kubeconfig,
        client,
    })
}

/// `helm upgrade --install` of the chart, with the locally loaded image.
fn helm_install(kubeconfig: &Path, image_hash: &str) -> Result<()> {
    let helm = localkube::ensure_tool(localkube::GoTool::Helm)?;
    let chart = repo_root().join("charts").join("dgl-operator");
    let mut cmd = Command::new(&helm);
    cmd.arg("upgrade")
        .arg("--install")
        .arg(RELEASE)
        .arg(&chart)
        .args(["--namespace", OPERATOR_NAMESPACE, "--create-namespace"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        // The image was imported into containerd; never try a registry.
        .args(["--set", "image.pullPolicy=Never"])
        .args(["--set", "logFormat=text"])
        .arg("--set-string")
        .arg(format!(
            "podAnnotations.dgl-operator-image-hash={image_hash}"
        ))
        .args(["--wait", "--timeout", "180s"])
        .stdin(Stdio::null());
    println!("    {}", render(&cmd));
    let out = cmd
        .output()
        .with_context(|| format!("could not run {}", helm.display()))?;
    if !out.status.success() {
        bail!(
            "helm upgrade --install failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for line in String::from_utf8_lossy(&out.stdout).lines().take(6) {
        println!("    | {line}");
    }
    Ok(())
}

fn operator_pods_lp() -> ListParams {
    ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"))
}

pub(crate) fn pod_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until the operator's Deployment has a Ready pod; returns its name.
async fn wait_operator_ready(client: &Client, timeout: Duration) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let start = Instant::now();
    loop {
        let list = pods.list(&operator_pods_lp()).await?;
        if let Some(p) = list.items.iter().find(|p| pod_ready(p)) {
            return Ok(p.name_any());
        }
        if start.elapsed() > timeout {
            let deploys: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
            let status = deploys
                .list(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .map(|d| format!("{}: {:?}", d.name_any(), d.status))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default();
            bail!(
                "the operator had no Ready pod within {timeout:?}; pods: {:?}\n{status}",
                list.items
                    .iter()
                    .map(|p| (
                        p.name_any(),
                        p.status.as_ref().and_then(|s| s.phase.clone())
                    ))
                    .collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The example job, named `name`.
pub fn example_job(name: &str) -> Result<DGLJob> {
    example_job_at(EXAMPLE, name)
}

/// The job of the example file `example` (relative to the repository), named `name`.
pub fn example_job_at(example: &str, name: &str) -> Result<DGLJob> {
    let path = repo_root().join(example);
    let yaml =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut job: DGLJob =
        serde_yaml::from_str(&yaml).with_context(|| format!("parsing {}", path.display()))?;
    job.metadata.name = Some(name.to_owned());
    Ok(job)
}

pub async fn apply_job(client: &Client, ns: &str, job: &DGLJob) -> Result<()> {
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    jobs.patch(
        &job.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(job),
    )
    .await
    .with_context(|| format!("applying DGLJob {ns}/{}", job.name_any()))?;
    Ok(())
}

fn phase(job: &DGLJob) -> Option<JobPhase> {
    job.status.as_ref().and_then(|s| s.phase)
}

fn pod_summary(p: &Pod) -> String {
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "-".into());
    let gone = if p.metadata.deletion_timestamp.is_some() {
        ",terminating"
    } else {
        ""
    };
    format!("{}={phase}{gone}", p.name_any())
}

/// Follows a job until `until(phase)` or the timeout, printing a line
/// whenever its phase or its pods change. `on_poll` sees every state read.
pub async fn follow<F>(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
    until: impl Fn(Option<JobPhase>) -> bool,
    mut on_poll: F,
) -> Result<DGLJob>
where
    F: FnMut(&DGLJob, &[Pod], Duration),
{
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{LABEL_JOB_NAME}={name}"));
    let start = Instant::now();
    let mut last = String::new();
    let mut failing_since: Option<Instant> = None;
    loop {
        // A poll that fails (an API server restarting) is retried for a minute.
        let (job, mut list) = match tokio::try_join!(jobs.get(name), pods.list(&lp)) {
            Ok((job, list)) => {
                failing_since = None;
                (job, list.items)
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(60) {
                    return Err(e).context(format!("polling DGLJob {ns}/{name} for a minute"));
                }
                println!(
                    "    {:>6.1}s  (poll failed: {e})",
                    start.elapsed().as_secs_f64()
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        list.sort_by_key(|p| p.name_any());
        let line = format!(
            "{:<13} {}",
            phase(&job).map(|p| p.as_str()).unwrap_or("-"),
            list.iter().map(pod_summary).collect::<Vec<_>>().join(" ")
        );
        on_poll(&job, &list, start.elapsed());
        if line != last {
            println!("    {:>6.1}s  {line}", start.elapsed().as_secs_f64());
            last = line;
        }
        if until(phase(&job)) {
            return Ok(job);
        }
        if start.elapsed() > timeout {
            bail!("DGLJob {ns}/{name} did not get there within {timeout:?}; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `[worker-i] epoch=E loss=L ...` lines of the launcher's log: worker → losses by epoch.
pub fn losses_by_worker(log: &str) -> BTreeMap<String, Vec<(u32, f64)>> {
    let mut out: BTreeMap<String, Vec<(u32, f64)>> = BTreeMap::new();
    for line in log.lines() {
        let Some(rest) = line.strip_prefix('[') else {
            continue;
        };
        let Some((worker, text)) = rest.split_once(']') else {
            continue;
        };
        let field = |key: &str| {
            text.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .map(str::to_owned)
        };
        let (Some(epoch), Some(loss)) = (field("epoch="), field("loss=")) else {
            continue;
        };
        let (Ok(epoch), Ok(loss)) = (epoch.parse::<u32>(), loss.parse::<f64>()) else {
            continue;
        };
        out.entry(worker.to_owned())
            .or_default()
            .push((epoch, loss));
    }
    out
}

/// Every worker printed a loss for at least two epochs and its last is below its first.
pub fn check_losses_fall(losses: &BTreeMap<String, Vec<(u32, f64)>>, workers: usize) -> Result<()> {
    ensure!(
        losses.len() == workers,
        "expected loss lines of {workers} workers in the launcher's log, found {:?}",
        losses.keys().collect::<Vec<_>>()
    );
    for (w, per_epoch) in losses {
        ensure!(
            per_epoch.len() >= 2,
            "{w}: loss of only {} epoch(s): {per_epoch:?}",
            per_epoch.len()
        );
        let (first, last) = (per_epoch[0].1, per_epoch[per_epoch.len() - 1].1);
        ensure!(last < first, "{w}: loss did not fall: {per_epoch:?}");
    }
    Ok(())
}

pub async fn launcher_log(client: &Client, ns: &str, job: &str) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let name = dgl_api::names::launcher_name(job);
    pods.logs(&name, &LogParams::default())
        .await
        .with_context(|| format!("reading the log of pod {ns}/{name}"))
}

fn condition_message(job: &DGLJob, type_: JobPhase) -> Option<(String, String)> {
    job.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == type_.as_str() && c.status == "True")
            .map(|c| (c.reason.clone(), c.message.clone()))
    })
}

/// Deletes the job and waits until the garbage collector has removed every
/// child (pods, ConfigMap, Secret, Service, ServiceAccounts, Roles, RoleBindings).
pub(crate) async fn delete_and_check_children(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Duration> {
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    let before = children(client, ns, name).await?;
    ensure!(
        !before.is_empty(),
        "DGLJob {ns}/{name} has no labelled children before deletion"
    );
    println!(
        "    deleting DGLJob {ns}/{name}; children: {}",
        before.join(" ")
    );
    let start = Instant::now();
    jobs.delete(name, &DeleteParams::background()).await?;
    loop {
        let left = children(client, ns, name).await?;
        let job_gone = jobs.get_opt(name).await?.is_none();
        if left.is_empty() && job_gone {
            let took = start.elapsed();
            println!(
                "    DGLJob and all {} children gone in {:.1}s",
                before.len(),
                took.as_secs_f64()
            );
            return Ok(took);
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("120 s after deleting DGLJob {ns}/{name}, these children remain: {left:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `Kind/name` of every object labelled as the job's.
pub(crate) async fn children(client: &Client, ns: &str, job: &str) -> Result<Vec<String>> {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let lp = ListParams::default().labels(&format!("{LABEL_JOB_NAME}={job}"));
    let mut out = Vec::new();
    macro_rules! collect {
        ($($kind:ty),*) => {$(
            for o in Api::<$kind>::namespaced(client.clone(), ns).list(&lp).await?.items {
                out.push(format!("{}/{}", stringify!($kind), o.name_any()));
            }
        )*};
    }
    collect!(
        Pod,
        ConfigMap,
        Secret,
        Service,
        ServiceAccount,
        Role,
        RoleBinding,
        NetworkPolicy
    );
    Ok(out)
}

/// Events about the job, oldest first: "reason: message".
async fn job_events(client: &Client, ns: &str, job: &str) -> Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().fields(&format!(
        "involvedObject.kind=DGLJob,involvedObject.name={job}"
    ));
    let mut list = events.list(&lp).await?.items;
    list.sort_by_key(|e| e.metadata.creation_timestamp.clone());
    Ok(list
        .iter()
        .map(|e| {
            format!(
                "{} {}: {}",
                e.type_.as_deref().unwrap_or("-"),
                e.reason.as_deref().unwrap_or("-"),
                e.message.as_deref().unwrap_or("")
            )
        })
        .collect())
}

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
async fn in_namespace<'a, Fut>(
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
async fn train(client: &Client) -> Result<String> {
    let job = "graphsage";
    in_namespace(client, "e2e-train", job, |ns| async move {
        train_in(client, &ns, job).await
    })
    .await
}

async fn train_in(client: &Client, ns: &str, name: &str) -> Result<String> {
    let job = example_job(name)?;
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
    let following = follow(
        client,
        ns,
        name,
        JOB_TIMEOUT,
        |p| p.is_some_and(JobPhase::is_terminal),
        |_, pods, _| {
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
        summary == "epoch 3/3" && progress.is_some_and(|p| p.loss.is_some()),
        "status.progress after Succeeded: {progress:?}, expected epoch 3/3 with a loss"
    );
    let deleted_in = delete_and_check_children(client, ns, name).await?;
    Ok(format!(
        "Succeeded {:.0}s after apply (operator pod replaced while {restarted_at}, new one Ready in {:.1}s, {} pods then, none recreated; progress {summary}); children deleted in {:.1}s",
        total.as_secs_f64(),
        operator_gap.as_secs_f64(),
        pods_then,
        deleted_in.as_secs_f64()
    ))
}

/// The ParMETIS example: the native pipeline partitions, the job trains to
/// Succeeded with falling losses, the partitioner's log has the pipeline's
/// report, and deleting the job removes every child.
async fn parmetis(client: &Client) -> Result<String> {
    let job = "graphsage-parmetis";
    in_namespace(client, "e2e-parmetis", job, |ns| async move {
        parmetis_in(client, &ns, job).await
    })
    .await
}

/// Applies the example `example` as job `name` and follows it to its end,
/// showing `on_poll` every state read; fails unless it Succeeded. Returns
/// the time from apply to Succeeded.
pub(crate) async fn example_succeeds<F>(
    client: &Client,
    ns: &str,
    name: &str,
    example: &str,
    on_poll: F,
) -> Result<Duration>
where
    F: FnMut(&DGLJob, &[Pod], Duration),
{
    let job = example_job_at(example, name)?;
    println!("    kubectl apply -f {example} -n {ns}   (through kube-rs)");
    let applied = Instant::now();
    apply_job(client, ns, &job).await?;
    let done = follow(
        client,
        ns,
        name,
        JOB_TIMEOUT,
        |p| p.is_some_and(JobPhase::is_terminal),
        on_poll,
    )
    .await?;
    if phase(&done) != Some(JobPhase::Succeeded) {
        bail!(
            "DGLJob {ns}/{name} ended {:?}: {:?}",
            phase(&done),
            condition_message(&done, JobPhase::Failed)
        );
    }
    Ok(applied.elapsed())
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

/// The launch.py-style example: the user's own command lines run as
/// written on two workers; Succeeded with falling losses.
/// The GraphBolt example: DGL's servers load fused_csc_sampling_graph.pt
/// (DGL says so in the launcher's log) and the job trains to Succeeded.
async fn graphbolt(client: &Client) -> Result<String> {
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

async fn launchpy(client: &Client) -> Result<String> {
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
async fn standalone(client: &Client) -> Result<String> {
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

/// `epoch=<i> loss=<l>` lines printed by a launcher that trains alone (no
/// worker prefix).
pub fn losses_unprefixed(log: &str) -> Vec<(u32, f64)> {
    log.lines()
        .filter(|l| l.starts_with("epoch="))
        .filter_map(|l| {
            let field = |key: &str| l.split_whitespace().find_map(|w| w.strip_prefix(key));
            Some((
                field("epoch=")?.parse().ok()?,
                field("loss=")?.parse().ok()?,
            ))
        })
        .collect()
}

/// The DistParMETIS example: Partitioning while the ranks run, then
/// Succeeded with falling losses; every rank reported in the launcher's log.
async fn distparmetis(client: &Client) -> Result<String> {
    let job = "graphsage-distparmetis";
    in_namespace(client, "e2e-distparmetis", job, |ns| async move {
        distparmetis_in(client, &ns, job).await
    })
    .await
}

async fn distparmetis_in(client: &Client, ns: &str, name: &str) -> Result<String> {
    let (mut phases, mut partitioner) = (Vec::new(), false);
    let total = example_succeeds(client, ns, name, EXAMPLE_DISTPARMETIS, |j, pods, _| {
        if let Some(p) = phase(j) {
            if phases.last() != Some(&p) {
                phases.push(p);
            }
        }
        partitioner |= pods.iter().any(|p| p.name_any().ends_with("-partitioner"));
    })
    .await?;
    ensure!(!partitioner, "DistParMETIS created a partitioner pod");
    ensure!(
        phases.contains(&JobPhase::Partitioning) && phases.contains(&JobPhase::Running),
        "the job did not pass through Partitioning and Running: {phases:?}"
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
        "Succeeded {:.0}s after apply through {phases:?}; {}; children deleted in {:.1}s",
        total.as_secs_f64(),
        ranks[0].trim(),
        deleted_in.as_secs_f64()
    ))
}

/// A trainer exits 3 at epoch 1: Failed naming the pod, no running pod left.
async fn fail(client: &Client) -> Result<String> {
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

/// Prints what explains a failed scenario: status, pods, Events, pod logs.
async fn dump_job(client: &Client, ns: &str, name: &str) {
    println!("\n---- diagnostics for DGLJob {ns}/{name}");
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    match jobs.get(name).await {
        Ok(j) => println!(
            "status: {}",
            serde_json::to_string_pretty(&j.status).unwrap_or_default()
        ),
        Err(e) => println!("job: {e}"),
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = pods.list(&ListParams::default()).await {
        for p in list.items {
            let pname = p.name_any();
            let statuses = p
                .status
                .as_ref()
                .map(|s| {
                    serde_json::to_string(&(
                        &s.phase,
                        &s.init_container_statuses,
                        &s.container_statuses,
                    ))
                    .unwrap_or_default()
                })
                .unwrap_or_default();
            println!("pod {pname}: {statuses}");
            let log = pods
                .logs(
                    &pname,
                    &LogParams {
                        tail_lines: Some(40),
                        ..LogParams::default()
                    },
                )
                .await
                .unwrap_or_else(|e| format!("(no log: {e})"));
            for l in log.lines() {
                println!("  | {l}");
            }
        }
    }
    print_events(client, ns).await;
}

/// Prints the Events of namespace `ns`, one line each.
async fn print_events(client: &Client, ns: &str) {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = events.list(&ListParams::default()).await {
        for e in list.items {
            println!(
                "event {} {} {}: {}",
                e.involved_object.name.as_deref().unwrap_or("-"),
                e.type_.as_deref().unwrap_or("-"),
                e.reason.as_deref().unwrap_or("-"),
                e.message.as_deref().unwrap_or("")
            );
        }
    }
}

/// Prints why the operator's pod may not be Ready: the node's conditions
/// and taints (disk pressure keeps pods Pending), the pods and the Events.
async fn dump_install(client: &Client) {
    println!("\n---- diagnostics for the operator's install");
    let nodes: Api<Node> = Api::all(client.clone());
    if let Ok(list) = nodes.list(&ListParams::default()).await {
        for n in list.items {
            let conditions: Vec<String> = n
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .map(|c| {
                    format!(
                        "{}={} ({})",
                        c.type_,
                        c.status,
                        c.message.as_deref().unwrap_or("")
                    )
                })
                .collect();
            let taints: Vec<String> = n
                .spec
                .iter()
                .flat_map(|s| s.taints.iter().flatten())
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect();
            println!("node {}: {conditions:?} taints {taints:?}", n.name_any());
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    if let Ok(list) = pods.list(&ListParams::default()).await {
        for p in list.items {
            let status = p
                .status
                .as_ref()
                .map(|s| serde_json::to_string(&(&s.phase, &s.conditions, &s.container_statuses)))
                .transpose()
                .unwrap_or_default()
                .unwrap_or_default();
            println!("pod {}: {status}", p.name_any());
        }
    }
    print_events(client, OPERATOR_NAMESPACE).await;
    dump_operator(client).await;
}

async fn dump_operator(client: &Client) {
    println!("\n---- operator logs (last 80 lines)");
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    if let Ok(list) = pods.list(&operator_pods_lp()).await {
        for p in list.items {
            let log = pods
                .logs(
                    &p.name_any(),
                    &LogParams {
                        tail_lines: Some(80),
                        ..LogParams::default()
                    },
                )
                .await
                .unwrap_or_else(|e| format!("(no log: {e})"));
            println!("pod {}:", p.name_any());
            for l in log.lines() {
                println!("  | {l}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losses_are_read_per_worker() {
        let log = "\
[worker-0] setup rank=0 world=2\n\
[worker-0] epoch=0 loss=1.6072 rank=0 train_acc=0.3\n\
[worker-1] epoch=0 loss=1.7992 rank=1 train_acc=0.3\n\
[worker-0] epoch=1 loss=0.7330 rank=0 train_acc=0.7\n\
[worker-1] epoch=1 loss=0.7907 rank=1\n\
dglrun: all workers done\n\
[worker-1] epoch=2 loss=oops rank=1\n";
        let l = losses_by_worker(log);
        assert_eq!(l["worker-0"], vec![(0, 1.6072), (1, 0.7330)]);
        assert_eq!(l["worker-1"], vec![(0, 1.7992), (1, 0.7907)]);
        check_losses_fall(&l, 2).unwrap();
        assert!(check_losses_fall(&l, 3).is_err(), "a missing worker fails");
    }

    #[test]
    fn a_loss_that_does_not_fall_fails() {
        let l = losses_by_worker("[worker-0] epoch=0 loss=1.0\n[worker-0] epoch=1 loss=1.2\n");
        let e = check_losses_fall(&l, 1).unwrap_err().to_string();
        assert!(e.contains("did not fall"), "{e}");
        let one = losses_by_worker("[worker-0] epoch=0 loss=1.0\n");
        assert!(
            check_losses_fall(&one, 1).is_err(),
            "one epoch proves nothing"
        );
    }

    #[test]
    fn a_lone_launchers_losses_are_read() {
        let log = "2026-01-01 INFO running the training in the launcher (no workers)\n\
epoch=0 loss=1.4652 val_acc=0.27\nepoch=5 loss=1.0610 val_acc=0.59\n\
[worker-0] epoch=9 loss=0.1\nepoch=x loss=1\n";
        let l = losses_unprefixed(log);
        assert_eq!(l, vec![(0, 1.4652), (5, 1.0610)]);
    }

    #[test]
    fn the_new_examples_parse_with_their_shapes() {
        let job = example_job_at(EXAMPLE_LAUNCHPY, "l").unwrap();
        assert_eq!(job.spec.num_workers(), 2);
        let args = job.spec.dgl_replica_specs[&ReplicaType::Launcher]
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .args
            .clone()
            .unwrap();
        let cmd = args
            .iter()
            .position(|a| a == "--train-command")
            .map(|i| &args[i + 1])
            .unwrap();
        assert!(
            cmd.starts_with("python3 train_dist.py --graph_name {graph_name}"),
            "{cmd}"
        );
        assert!(!cmd.contains('\n'), "one line: {cmd:?}");
        let job = example_job_at(EXAMPLE_STANDALONE, "s").unwrap();
        assert!(job.spec.is_standalone());
        assert_eq!(job.spec.partition_mode, dgl_api::PartitionMode::Skip);
    }

    #[test]
    fn the_example_parses_with_two_workers() {
        let job = example_job("x").unwrap();
        assert_eq!(job.name_any(), "x");
        assert_eq!(
            job.spec.dgl_replica_specs[&ReplicaType::Worker].replicas,
            Some(2)
        );
    }
}
