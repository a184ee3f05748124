//! DGLJobs on the node stack: an example applied, followed to its end,
//! its losses read from the launcher's log, its deletion checked, and what
//! explains a job that went wrong.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use dgl_api::names::LABEL_JOB_NAME;
use dgl_api::{DGLJob, JobPhase};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams};
use kube::{Client, ResourceExt};

use super::placement::spread_workers;
use super::{print_events, EXAMPLE, JOB_TIMEOUT, MANAGER};
use crate::util::repo_root;

/// The example job, named `name`.
pub(crate) fn example_job(name: &str) -> Result<DGLJob> {
    example_job_at(EXAMPLE, name)
}

/// The job of the example file `example` (relative to the repository), named `name`.
pub(crate) fn example_job_at(example: &str, name: &str) -> Result<DGLJob> {
    let path = repo_root().join(example);
    let yaml =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut job: DGLJob =
        serde_yaml::from_str(&yaml).with_context(|| format!("parsing {}", path.display()))?;
    job.metadata.name = Some(name.to_owned());
    Ok(job)
}

pub(crate) async fn apply_job(client: &Client, ns: &str, job: &DGLJob) -> Result<()> {
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

pub(crate) fn phase(job: &DGLJob) -> Option<JobPhase> {
    job.status.as_ref().and_then(|s| s.phase)
}

pub(crate) fn pod_summary(p: &Pod) -> String {
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
pub(crate) async fn follow<F>(
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
pub(crate) fn losses_by_worker(log: &str) -> BTreeMap<String, Vec<(u32, f64)>> {
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
pub(crate) fn check_losses_fall(
    losses: &BTreeMap<String, Vec<(u32, f64)>>,
    workers: usize,
) -> Result<()> {
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

pub(crate) async fn launcher_log(client: &Client, ns: &str, job: &str) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let name = dgl_api::names::launcher_name(job);
    pods.logs(&name, &LogParams::default())
        .await
        .with_context(|| format!("reading the log of pod {ns}/{name}"))
}

pub(crate) fn condition_message(job: &DGLJob, type_: JobPhase) -> Option<(String, String)> {
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
pub(crate) async fn job_events(client: &Client, ns: &str, job: &str) -> Result<Vec<String>> {
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
    example_succeeds_on(client, ns, name, example, Place::Anywhere, on_poll).await
}

/// Where a scenario's job may run.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Place<'a> {
    /// Where the scheduler puts it (with the operator's preferred spread).
    Anywhere,
    /// Every pod on this node.
    Node(&'a str),
    /// The workers on different nodes as a rule ([`spread_workers`]).
    WorkersApart,
}

/// [`example_succeeds`] placed as `place` says.
pub(crate) async fn example_succeeds_on<F>(
    client: &Client,
    ns: &str,
    name: &str,
    example: &str,
    place: Place<'_>,
    on_poll: F,
) -> Result<Duration>
where
    F: FnMut(&DGLJob, &[Pod], Duration),
{
    let mut job = example_job_at(example, name)?;
    job = match place {
        Place::Anywhere => job,
        Place::Node(node) => super::placement::pin_to_node(job, node),
        Place::WorkersApart => spread_workers(job)?,
    };
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

/// `epoch=<i> loss=<l>` lines printed by a launcher that trains alone (no
/// worker prefix).
pub(crate) fn losses_unprefixed(log: &str) -> Vec<(u32, f64)> {
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

/// Prints what explains a failed scenario: status, pods, Events, pod logs.
pub(crate) async fn dump_job(client: &Client, ns: &str, name: &str) {
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
pub(crate) async fn follow_to_end<F>(
    client: &Client,
    ns: &str,
    name: &str,
    on_poll: F,
) -> Result<DGLJob>
where
    F: FnMut(&DGLJob, &[Pod], Duration),
{
    follow(
        client,
        ns,
        name,
        JOB_TIMEOUT,
        |p| p.is_some_and(JobPhase::is_terminal),
        on_poll,
    )
    .await
}

pub(crate) fn expect_phase(job: &DGLJob, want: JobPhase) -> Result<()> {
    let got = job.status.as_ref().and_then(|s| s.phase);
    if got != Some(want) {
        bail!(
            "DGLJob {} ended {got:?}, expected {want:?}; conditions: {:?}",
            job.name_any(),
            job.status.as_ref().map(|s| &s.conditions)
        );
    }
    Ok(())
}

/// Deletes the job; returns how many of its children remain after 120 s (0 expected).
pub(crate) async fn delete_and_count_left(client: &Client, ns: &str, name: &str) -> Result<usize> {
    delete_and_check_children(client, ns, name).await?;
    Ok(children(client, ns, name).await?.len())
}

#[cfg(test)]
mod tests {
    use dgl_api::ReplicaType;

    use super::*;
    use crate::stack::{EXAMPLE_LAUNCHPY, EXAMPLE_STANDALONE};

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
