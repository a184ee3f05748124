//! `cargo xtask demo`: the whole thing on this machine. A real node cluster
//! (control plane + containerd + kubelet + kube-proxy), the images built and
//! loaded, the operator installed with Helm, and the GraphSAGE example
//! applied and followed to Succeeded; then the launcher's log shows every
//! worker's loss falling. The cluster keeps running for `kubectl`-style
//! exploration (`export KUBECONFIG=...`).

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use dgl_api::{DGLJob, JobPhase};
use kube::api::Api;

use crate::images::Which;
use crate::stack::{self, jobs};

#[derive(clap::Args)]
#[command(
    long_about = "Bring up a node cluster on this machine, build and load the images, \
    install the operator with Helm, apply examples/graphsage/dgljob.yaml and follow it to \
    Succeeded.\n\n\
    Needs root. The first run builds Kubernetes, etcd, Helm, the wheels and the images \
    (about 20 min on 2 cores, cached afterwards); later runs take a few minutes. \
    The cluster keeps running afterwards; `cargo xtask cluster down --name <name>` stops it."
)]
pub struct Args {
    /// Node cluster to use (only one node cluster runs per host).
    #[arg(long, default_value = localkube::DEFAULT_CLUSTER)]
    name: String,
    /// Namespace of the example job.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Give up following the job after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
    /// Binaries in the images (see `cargo xtask images --help`). `debug`, the
    /// default, is the dev profile (no optimisation, no LTO): the quickest
    /// cold compile, and it runs the example alike; `release` is what users
    /// deploy.
    #[arg(long, value_enum, default_value_t = crate::images::Profile::Debug)]
    profile: crate::images::Profile,
}

pub fn run(args: Args) -> Result<()> {
    let started = Instant::now();
    let rt = stack::runtime()?;
    // As the test command: the cached target dir (a later `cargo xtask
    // test` finds the dependencies compiled), no incremental caches.
    if std::env::var_os("CARGO_INCREMENTAL").is_none() {
        std::env::set_var("CARGO_INCREMENTAL", "0");
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Held to the end: the dir's lock (see test_target).
    let _target = super::test_target::choose(&cargo)?;
    let stack = prepare(&rt, &args.name, args.profile)?;
    let client = stack.client.clone();
    let ns = args.namespace.clone();
    let name = "graphsage";

    rt.block_on(async {
        let jobs: Api<DGLJob> = Api::namespaced(client.clone(), &ns);
        // A finished job of an earlier demo would be reported at once: start afresh.
        if jobs.get_opt(name).await?.is_some() {
            println!("\n==> deleting the earlier DGLJob {ns}/{name}");
            jobs.delete(name, &Default::default()).await?;
            let t = Instant::now();
            while jobs.get_opt(name).await?.is_some() {
                if t.elapsed() > Duration::from_secs(120) {
                    bail!("the earlier DGLJob {ns}/{name} was not deleted within 120 s");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        println!(
            "\n==> applying {} as DGLJob {ns}/{name}; its phase and pods as they change:",
            stack::EXAMPLE
        );
        let applied = Instant::now();
        jobs::apply_job(&client, &ns, &jobs::example_job(name)?).await?;
        let job = jobs::follow(
            &client,
            &ns,
            name,
            Duration::from_secs(args.timeout_seconds),
            |p| p.is_some_and(JobPhase::is_terminal),
            |_, _, _| {},
        )
        .await?;
        let took = applied.elapsed();
        let phase = job.status.as_ref().and_then(|s| s.phase);
        let log = jobs::launcher_log(&client, &ns, name).await.unwrap_or_default();
        println!("\n==> the launcher's log ({name}-launcher), last lines:");
        let lines: Vec<&str> = log.lines().collect();
        for l in &lines[lines.len().saturating_sub(14)..] {
            println!("    {l}");
        }
        if phase != Some(JobPhase::Succeeded) {
            bail!(
                "DGLJob {ns}/{name} ended {phase:?} after {:.0}s; see `cargo xtask e2e` for diagnostics",
                took.as_secs_f64()
            );
        }
        let losses = jobs::losses_by_worker(&log);
        jobs::check_losses_fall(&losses, losses.len().max(1))?;
        println!("\n==> DGLJob {ns}/{name} Succeeded {:.0}s after apply", took.as_secs_f64());
        for (w, l) in &losses {
            let shown: Vec<String> = l.iter().map(|(e, v)| format!("{e}:{v:.4}")).collect();
            println!("    {w} loss by epoch  {}", shown.join("  "));
        }
        anyhow::Ok(())
    })?;
    println!(
        "\nWhere the time went (steps beside each other overlap):\n{}",
        crate::util::step_summary()
    );
    println!(
        "The cluster keeps running ({:.0}s in all):\n  export KUBECONFIG={}\n  \
         cargo xtask cluster down --name {}   # stops it and reverts every host change",
        started.elapsed().as_secs_f64(),
        stack.kubeconfig.display(),
        args.name
    );
    Ok(())
}

/// The node cluster with the operator installed. Only the images the
/// example runs: the GraphStorm image (5.8 GB, about 4 min to build and
/// import cold) is for its own scenario. Cold, the images (debootstrap and
/// the wheels over the network, the Python layers on disk, the release
/// compile) and Helm are built beside the node cluster's Kubernetes build;
/// `prepare_with` then finds them built and only imports them. Warm, all
/// three are no-ops.
fn prepare(
    rt: &tokio::runtime::Runtime,
    cluster: &str,
    profile: crate::images::Profile,
) -> Result<stack::Stack> {
    let images = vec![Which::Operator, Which::Runtime, Which::Graphsage];
    std::thread::scope(|s| {
        let only = images.clone();
        let name = cluster.to_owned();
        let build =
            s.spawn(move || crate::images::run(crate::images::build_only(&name, only, profile)));
        let helm = s.spawn(|| localkube::ensure_tool(localkube::GoTool::Helm));
        let wait = || -> Result<()> {
            let t = crate::util::step("waiting for the images and Helm built beside the cluster");
            build
                .join()
                .map_err(|_| anyhow::anyhow!("the image build thread panicked"))?
                .context("building the images")?;
            helm.join()
                .map_err(|_| anyhow::anyhow!("the Helm build thread panicked"))?
                .context("building Helm")?;
            crate::util::done(t);
            Ok(())
        };
        stack::prepare_with(rt, cluster, 1, profile, images, wait)
    })
}
