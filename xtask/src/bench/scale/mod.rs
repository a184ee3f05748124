//! `cargo xtask bench scale`: the operator under hundreds of DGLJobs and
//! thousands of pods, and with `--peer mpi-operator` Kubeflow's mpi-operator
//! under as many MPIJobs on the same cluster right after.
//!
//! A dedicated local control plane ("bench": etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler) with fake nodes played by kwok
//! (a separate process): kwok gives bound pods an IP and makes them Running
//! and Ready, and Stages of ours make each launcher pod (a DGLJob's, an
//! MPIJob's) Succeed a few seconds after it runs. Each operator runs as a
//! binary in its own process, so its CPU time and memory are read from /proc,
//! and as a ServiceAccount of its own, so the API server counts its requests
//! (`identity.rs`).
//!
//! The runs ("phases") follow one another on the same cluster, kwok and
//! scheduler: ours in each `--mode`, then the peer with each
//! `--peer-queue` limit; each in a namespace of its own, deleted (and its
//! pods gone) before the next phase starts.
//!
//! What is measured per phase (client-side, from this process's own watches):
//! - the time from the first job's creation to the last pod created, and per
//!   job from its creation request to the moment all its pods exist
//!   (p50/p95/p99);
//! - the time until every job is Succeeded, and until cleanPodPolicy's
//!   deletions are done (every pod that is not Succeeded is gone);
//! - the operator's CPU seconds and RSS (idle before the jobs, peak, final);
//! - from the API server's metrics: requests of all clients until the
//!   cleanup is done, and of the operator (its FlowSchema) until the settle
//!   period after it has passed too (ours sends its Events in the
//!   background, some after the cleanup), per job;
//! - for ours, from its /metrics: requests it sent by verb (counted by its
//!   client layer), status writes, reconciles and their duration, errors;
//!   status writes that changed nothing: the operator's status writes minus
//!   the DGLJob updates this process saw (only the operator writes a job
//!   after it is created).
//!
//! Every process started here (kwok, the operators) is stopped by pid at the
//! end, and the cluster is stopped unless --keep-cluster.

mod cluster;
mod identity;
mod metrics;
mod operator;
mod peer;
mod phase;
mod procs;
mod report;
mod spec;
#[cfg(test)]
mod tests;
mod times;
mod watch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use localkube::{ClusterConfig, LocalCluster};

use super::measure::loadavg;
use cluster::{create_namespace, delete_namespace, start_cluster, start_kwok, start_scheduler};
use operator::start_operator;
use phase::measure_phase;
use procs::Procs;
use report::Report;
pub(crate) use spec::ScaleArgs;
use spec::{Args2, Bins, Env, PeerOperator, Subject, CLUSTER};

/// Builds (or finds cached) every binary of the run before anything is
/// started or measured.
fn binaries(args: &ScaleArgs) -> Result<Bins> {
    let operator = match &args.operator {
        Some(p) => p.clone(),
        None => crate::ensure::release_binary("dgl-operator", "dgl-operator")?,
    };
    if !operator.is_file() {
        bail!("operator binary {} does not exist", operator.display());
    }
    let peer = match args.peer {
        Some(PeerOperator::MpiOperator) => {
            peer::check_health_port()?;
            Some(peer::ensure()?)
        }
        None => None,
    };
    let kube = crate::ensure::kube_binaries_with_kwok()?;
    Ok(Bins {
        operator,
        peer,
        kube,
    })
}

pub(crate) fn run(args: ScaleArgs) -> Result<()> {
    if Subject::all(&args).is_empty() {
        bail!("nothing to run: --peer-only without --peer-queue");
    }
    let bins = binaries(&args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut cfg = ClusterConfig::new(CLUSTER)?;
    cfg.scheduler = args.scheduler_qps <= 0.0;
    // `binaries` has built them: the cluster only checks them.
    cfg.build_if_missing = false;
    let cluster = LocalCluster::new(cfg)?;
    let mut procs = Procs::default();
    let mut reports = Vec::new();
    let result = rt.block_on(scale_async(
        &args,
        &bins,
        &cluster,
        &mut procs,
        &mut reports,
    ));
    procs.stop_all();
    if !args.keep_cluster {
        eprintln!("==> stopping cluster {CLUSTER:?}");
        if let Err(e) = rt.block_on(cluster.down(false)) {
            eprintln!("warning: stopping cluster {CLUSTER:?}: {e}");
        }
    }
    print_reports(&args, &reports)?;
    result
}

fn print_reports(args: &ScaleArgs, reports: &[Report]) -> Result<()> {
    if reports.iter().any(|r| r.own.is_some()) {
        println!("{}", Report::header());
        for r in reports.iter().filter(|r| r.own.is_some()) {
            println!("{}", r.row());
        }
        println!();
    }
    if !reports.is_empty() {
        println!("{}", Report::compare_header());
        for r in reports {
            println!("{}", r.compare_row());
        }
        println!();
    }
    for r in reports {
        println!("{}", r.details());
    }
    if let Some(path) = &args.json {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        for r in reports {
            writeln!(f, "{}", serde_json::to_string(&r.json())?)?;
        }
        if !reports.is_empty() {
            // This run's phases side by side, from the lines just written.
            let phases: Vec<serde_json::Value> = reports.iter().map(Report::json).collect();
            let svg = super::chart::svg_path(path, None);
            super::chart::scale(&phases, &svg)?;
            println!("chart: {}", svg.display());
        }
    }
    Ok(())
}

async fn scale_async(
    args: &ScaleArgs,
    bins: &Bins,
    cluster: &LocalCluster,
    procs: &mut Procs,
    reports: &mut Vec<Report>,
) -> Result<()> {
    let load_start = loadavg();
    let peer_crd = bins.peer.as_ref().map(|(_, crd)| crd.as_path());
    let (info, client, work) = start_cluster(cluster, &load_start, peer_crd).await?;
    let scheduler_pid = start_scheduler(args, &info, &work, &bins.kube, procs)?;
    let kwok_pid = start_kwok(args, &client, &info, &work, &bins.kube, procs).await?;
    let env = Env {
        args: Args2 {
            scale: args,
            bins,
            work: &work,
        },
        client: &client,
        cluster,
        scheduler_pid,
        kwok_pid,
    };
    let mut kubeconfigs: HashMap<&str, PathBuf> = HashMap::new();
    for subject in Subject::all(args) {
        let account = subject.account();
        if !kubeconfigs.contains_key(account) {
            let kc = identity::identity(&client, &info.kubeconfig, &work, account).await?;
            kubeconfigs.insert(account, kc);
        }
        reports.push(run_phase(&env, subject, &kubeconfigs[account], procs).await?);
    }
    Ok(())
}

/// One phase: its namespace, its operator, its jobs; afterwards the
/// operator is stopped and the namespace deleted.
async fn run_phase(
    env: &Env<'_>,
    subject: Subject,
    kubeconfig: &Path,
    procs: &mut Procs,
) -> Result<Report> {
    let ns = subject.namespace();
    eprintln!(
        "==> phase: {} in namespace {ns}; load average {}",
        subject.describe(),
        loadavg()
    );
    create_namespace(env.client, &ns).await?;
    let op = start_operator(&env.args, subject, &ns, kubeconfig, procs).await?;
    let result = measure_phase(env, subject, &ns, &op, procs).await;
    procs.stop(op.pid);
    if let Err(e) = delete_namespace(env.client, &ns).await {
        eprintln!("    warning: deleting namespace {ns}: {e:#}");
    }
    // The garbage collector and the endpoints controllers finish behind
    // the namespace; their requests belong to no phase.
    tokio::time::sleep(Duration::from_secs(15)).await;
    result
}
