//! Chaos scenarios that hit the cluster and the node under a running job:
//! kube-apiserver restarted, etcd frozen, the kubelet restarted, one worker
//! cut off the network, the partitioner deleted while workers fetch, a shard
//! file corrupted on disk before it is served.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use dgl_api::names::{partitioner_name, worker_name};
use dgl_api::{DGLJob, JobPhase};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};
use localkube::{Component, LocalCluster};

use super::fault::Outcome;
use crate::stack::jobs::{
    apply_job, delete_and_count_left, example_job, expect_phase, follow_to_end,
};

/// `follow`'s stop condition cannot see `on_poll`'s result, so this polls
/// the job until `until` holds (or it ends) with the same tolerance.
async fn wait_until(
    client: &Client,
    ns: &str,
    name: &str,
    until: impl Fn(&DGLJob, &[Pod]) -> bool,
) -> Result<()> {
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = kube::api::ListParams::default()
        .labels(&format!("{}={name}", dgl_api::names::LABEL_JOB_NAME));
    let deadline = Instant::now() + crate::stack::JOB_TIMEOUT;
    loop {
        let job = jobs.get(name).await?;
        let list = pods.list(&lp).await?.items;
        if until(&job, &list) {
            return Ok(());
        }
        let phase = job.status.as_ref().and_then(|s| s.phase);
        ensure!(
            !phase.is_some_and(JobPhase::is_terminal),
            "DGLJob {ns}/{name} ended {phase:?} before the fault could be injected"
        );
        ensure!(Instant::now() < deadline, "DGLJob {ns}/{name}: timed out");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(super) fn running(job: &DGLJob) -> bool {
    job.status.as_ref().and_then(|s| s.phase) == Some(JobPhase::Running)
}

pub(super) fn condition_true(job: &DGLJob, kind: &str) -> bool {
    job.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == kind && c.status == "True")
    })
}

/// Applies the example, waits for `until`, injects `fault`, follows the job
/// to its end and checks it Succeeded with at most `restarts` restarts.
pub(super) async fn during<F, Fut>(
    client: &Client,
    ns: &str,
    job: DGLJob,
    until: impl Fn(&DGLJob, &[Pod]) -> bool,
    fault: F,
) -> Result<(Duration, DGLJob, String)>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<String>>,
{
    let name = &job.name_any();
    let applied = Instant::now();
    apply_job(client, ns, &job).await?;
    wait_until(client, ns, name, until).await?;
    let injected = Instant::now();
    let note = fault().await?;
    println!("    {note}");
    let mut restart = None;
    let done = follow_to_end(client, ns, name, |j, _, _| {
        // The condition's message changes once the new run is up; keep why.
        if restart.is_none() && condition_true(j, "Restarting") {
            restart = condition_message(j, "Restarting");
        }
    })
    .await?;
    super::timing::record(&done, injected.elapsed());
    let note = match restart {
        Some(why) => format!("{note}; restarted: {}", truncate(&why, 200)),
        None => note,
    };
    Ok((applied.elapsed(), done, note))
}

pub(super) fn condition_message(job: &DGLJob, kind: &str) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.message.clone())
}

/// The example job named `name` with `backoff_limit`.
pub(super) fn example(name: &str, backoff_limit: i32) -> Result<DGLJob> {
    let mut job = example_job(name)?;
    job.spec
        .run_policy
        .get_or_insert_with(Default::default)
        .backoff_limit = Some(backoff_limit);
    Ok(job)
}

/// `job` with every pod held on node 0 (`kubernetes.io/hostname`): the
/// faults that act on one node's files or processes (its kubelet frozen or
/// restarted, a shard flipped under its kubelet's root) act on node 0's, so
/// on a cluster of several nodes the job must be there to be hit.
pub(super) fn on_node0(job: DGLJob, cluster: &LocalCluster) -> Result<DGLJob> {
    Ok(crate::stack::placement::pin_to_node(
        job,
        &crate::stack::placement::node0(cluster)?,
    ))
}

pub(super) fn restarts(job: &DGLJob) -> i32 {
    job.status
        .as_ref()
        .and_then(|s| s.restart_count)
        .unwrap_or(0)
}

/// The end of a fault the job must ride out: it Succeeded without a
/// restart, and deleting it leaves nothing behind.
pub(super) async fn succeeded_unrestarted(
    client: &Client,
    ns: &str,
    name: &str,
    terminal: Duration,
    done: &DGLJob,
    note: String,
) -> Result<Outcome> {
    expect_phase(done, JobPhase::Succeeded)?;
    ensure!(
        restarts(done) == 0,
        "the job restarted {} times after {note}",
        restarts(done)
    );
    let left = delete_and_count_left(client, ns, name).await?;
    Ok(Outcome {
        terminal: Some(terminal),
        left,
        note,
    })
}

/// A control-plane or node component restarted (or frozen) while the job
/// trains: the job must Succeed without a restart and leave nothing behind.
pub async fn component(
    client: &Client,
    cluster: &LocalCluster,
    ns: &str,
    c: Component,
    pause: Option<Duration>,
) -> Result<Outcome> {
    let name = "chaos-infra";
    // The control plane's components serve every node; a kubelet is node 0's.
    let job = match c {
        Component::Kubelet => on_node0(example(name, 0)?, cluster)?,
        _ => example(name, 0)?,
    };
    let (terminal, done, note) = during(
        client,
        ns,
        job,
        |j, _| running(j),
        || async {
            let t = Instant::now();
            match pause {
                Some(p) => cluster.pause_component(c, p).await?,
                None => {
                    cluster.restart_component(c).await?;
                }
            }
            let verb = if pause.is_some() {
                "paused"
            } else {
                "restarted"
            };
            Ok(format!(
                "{c:?} {verb} while Running, serving again after {:.1}s",
                t.elapsed().as_secs_f64()
            ))
        },
    )
    .await?;
    succeeded_unrestarted(client, ns, name, terminal, &done, note).await
}

/// The partitioner's pod deleted (grace 0) as soon as the job reports
/// Partitioned, before or while the workers fetch their shards (the
/// example's shards take well under a second). With backoffLimit 1 the run
/// restarts once (a new partitioner partitions again) and Succeeds.
pub async fn partitioner_kill(client: &Client, ns: &str) -> Result<Outcome> {
    let name = "chaos-part";
    let partitioned = |j: &DGLJob, _: &[Pod]| condition_true(j, "Partitioned");
    let victim = partitioner_name(name);
    let job = example(name, 1)?;
    let (terminal, done, note) = during(client, ns, job, partitioned, || async {
        delete_now(client, ns, &victim).await?;
        Ok(format!("{victim} deleted at Partitioned"))
    })
    .await?;
    expect_phase(&done, JobPhase::Succeeded)?;
    ensure!(restarts(&done) <= 1, "restarted {} times", restarts(&done));
    let left = delete_and_count_left(client, ns, name).await?;
    Ok(Outcome {
        terminal: Some(terminal),
        left,
        note: format!("{note}; restarts {}", restarts(&done)),
    })
}

async fn delete_now(client: &Client, ns: &str, pod: &str) -> Result<()> {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete(pod, &dp)
        .await
        .with_context(|| format!("deleting pod {ns}/{pod}"))?;
    Ok(())
}

/// A byte of worker 1's largest partition file flipped on the partitioner's
/// disk right after partitioning, before it is served. No worker may train
/// on it: the job must fail, naming the file.
pub async fn shard_corrupt(client: &Client, cluster: &LocalCluster, ns: &str) -> Result<Outcome> {
    let name = "chaos-shard";
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (terminal, done, note) = during(
        client,
        ns,
        launcher_delayed(on_node0(example(name, 0)?, cluster)?, 10),
        |j, _| condition_true(j, "Partitioned"),
        || async {
            let uid = pods
                .get(&partitioner_name(name))
                .await?
                .uid()
                .unwrap_or_default();
            let pod_dir = cluster.node_paths().kubelet_root().join("pods").join(uid);
            let file = largest_file(&pod_dir.join("volumes"), "part1")?
                .with_context(|| format!("no part1 file under {}", pod_dir.display()))?;
            flip_a_byte(&file)?;
            let shown = file.file_name().unwrap_or_default().to_string_lossy();
            Ok(format!(
                "flipped a byte of part1/{shown} on the partitioner's disk"
            ))
        },
    )
    .await?;
    let file = note
        .split("part1/")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or("part1/")
        .to_owned();
    expect_phase(&done, JobPhase::Failed)?;
    let message = done
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Failed"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    ensure!(
        message.contains(&file),
        "the Failed condition does not name the corrupted file: {message:?}"
    );
    let left = delete_and_count_left(client, ns, name).await?;
    Ok(Outcome {
        terminal: Some(terminal),
        left,
        note: format!("{note}; Failed: {}", truncate(&message, 160)),
    })
}

/// `job` whose launcher first sleeps `secs` in an init container: since
/// the workers start with the partitioner, the launcher (which asks for the
/// shards) would otherwise follow Partitioned within a second or two; this
/// makes the window before any shard is fetched certain.
fn launcher_delayed(mut job: DGLJob, secs: u32) -> DGLJob {
    use dgl_api::ReplicaType;
    use k8s_openapi::api::core::v1::Container;
    let Some(launcher) = job.spec.dgl_replica_specs.get_mut(&ReplicaType::Launcher) else {
        return job;
    };
    let Some(spec) = launcher.template.spec.as_mut() else {
        return job;
    };
    let main = spec.containers.first().cloned().unwrap_or_default();
    let sleep = Container {
        name: "chaos-delay".into(),
        image: main.image,
        image_pull_policy: main.image_pull_policy,
        security_context: main.security_context,
        command: Some(vec!["sleep".into(), secs.to_string()]),
        ..Default::default()
    };
    spec.init_containers
        .get_or_insert_with(Vec::new)
        .insert(0, sleep);
    job
}

pub(super) fn truncate(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The largest regular file under `root` inside a directory named `dir`.
fn largest_file(root: &Path, dir: &str) -> Result<Option<PathBuf>> {
    let mut best: Option<(u64, PathBuf)> = None;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let e = e?;
            let ty = e.file_type()?;
            let p = e.path();
            if ty.is_dir() {
                stack.push(p);
            } else if ty.is_file() && p.parent().and_then(Path::file_name) == Some(dir.as_ref()) {
                let len = e.metadata()?.len();
                if best.as_ref().is_none_or(|(l, _)| len > *l) {
                    best = Some((len, p));
                }
            }
        }
    }
    Ok(best.map(|(_, p)| p))
}

/// Inverts the byte in the middle of `file`, in place (same size).
fn flip_a_byte(file: &Path) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .with_context(|| format!("opening {}", file.display()))?;
    let len = f.metadata()?.len();
    ensure!(len > 0, "{} is empty", file.display());
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, len / 2)?;
    f.write_all_at(&[!b[0]], len / 2)?;
    f.sync_all()?;
    Ok(())
}

/// Worker 1 cut off the network (every packet in and out of its pod dropped
/// in its network namespace) while training. With backoffLimit 1 the run
/// fails naming worker 1 and restarts with fresh pods, which Succeed.
pub async fn network_cut(client: &Client, ns: &str) -> Result<Outcome> {
    let name = "chaos-net";
    let victim = worker_name(name, 1);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (terminal, done, note) = during(
        client,
        ns,
        example(name, 1)?,
        |j, _| running(j),
        || async {
            let uid = pods.get(&victim).await?.uid().unwrap_or_default();
            let pid = pid_in_pod(&uid)?;
            for chain in ["INPUT", "OUTPUT"] {
                run(Command::new("nsenter").args([
                    "-t",
                    &pid.to_string(),
                    "-n",
                    "iptables",
                    "-I",
                    chain,
                    "-j",
                    "DROP",
                ]))?;
            }
            Ok(format!("{victim} cut off the network while Running"))
        },
    )
    .await?;
    expect_phase(&done, JobPhase::Succeeded)?;
    ensure!(restarts(&done) == 1, "restarted {} times", restarts(&done));
    let why = note.split("; restarted: ").nth(1).unwrap_or_default();
    ensure!(
        why.contains(&victim) || why.contains("worker-1"),
        "the restart does not name {victim}: {why:?}"
    );
    let left = delete_and_count_left(client, ns, name).await?;
    Ok(Outcome {
        terminal: Some(terminal),
        left,
        note,
    })
}

/// A process of the pod with `uid` (its cgroup path names the uid).
pub(super) fn pid_in_pod(uid: &str) -> Result<u32> {
    let needles = [uid.to_owned(), uid.replace('-', "_")];
    for e in std::fs::read_dir("/proc")? {
        let e = e?;
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cg) = std::fs::read_to_string(e.path().join("cgroup")) else {
            continue;
        };
        if needles.iter().any(|n| cg.contains(n.as_str())) {
            return Ok(pid);
        }
    }
    bail!("no process of pod {uid} found in /proc")
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
