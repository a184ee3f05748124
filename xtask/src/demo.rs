//! `cargo xtask demo`: the local control plane, the CRD, the operator (as a
//! local process) and the proposal's DGLJob, with its status shown as it
//! changes.
//!
//! The control plane has no node yet (a real kubelet comes with the
//! packaging work), so the job's pods are created and stay Pending: the demo
//! shows the operator's side of the job, not training.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use dgl_api::DGLJob;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;

use crate::test::{repo_root, run_cmd};

#[derive(clap::Args)]
pub struct Args {
    /// Seconds to follow the job's status.
    #[arg(long, default_value_t = 20)]
    follow_seconds: u64,
}

const NAMESPACE: &str = "dgl-operator";

pub fn run(args: Args) -> Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    println!("==> control plane \"dev\" (built on first use: 20-30 min on 2 cores)");
    let cluster =
        localkube::LocalCluster::new(localkube::ClusterConfig::new(localkube::DEFAULT_CLUSTER)?)?;
    let info = rt.block_on(cluster.up())?;
    println!("    export KUBECONFIG={}", info.kubeconfig.display());

    println!("==> building dgl-operator");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_cmd(Command::new(&cargo).args(["build", "-q", "-p", "dgl-operator"]))?;
    let bin = repo_root().join("target/debug/dgl-operator");

    rt.block_on(async {
        let client = info.client().await?;
        println!("==> installing the DGLJob CRD");
        localkube::apply_crds(&client, &dgl_api::crd_yaml()).await?;
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}}))?;
        Api::<Namespace>::all(client.clone())
            .patch(
                NAMESPACE,
                &PatchParams::apply("xtask-demo"),
                &Patch::Apply(&ns),
            )
            .await?;
        anyhow::Ok(())
    })?;

    let log_path = info
        .state_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join("dgl-operator.log");
    println!("==> starting dgl-operator (log: {})", log_path.display());
    let log = std::fs::File::create(&log_path)?;
    let mut operator = Command::new(&bin)
        .args([
            "run",
            "--leader-elect=false",
            "--metrics-addr",
            "127.0.0.1:18080",
        ])
        .env("KUBECONFIG", &info.kubeconfig)
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;

    let result = rt.block_on(async {
        let client = info.client().await?;
        let jobs: Api<DGLJob> = Api::namespaced(client.clone(), NAMESPACE);
        let yaml = std::fs::read_to_string(repo_root().join("examples/seed-dgljob.yaml"))?;
        let job: DGLJob = serde_yaml::from_str(&yaml)?;
        println!(
            "==> applying examples/seed-dgljob.yaml (DGLJob {NAMESPACE}/{})",
            job.name_any()
        );
        jobs.patch(
            &job.name_any(),
            &PatchParams::apply("xtask-demo").force(),
            &Patch::Apply(&job),
        )
        .await?;
        let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < Duration::from_secs(args.follow_seconds) {
            let j = jobs.get(&job.name_any()).await?;
            let phase = j
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into());
            let pod_list: Vec<String> = pods
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .map(|p| {
                    let phase = p
                        .status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default();
                    format!("{} ({phase})", p.name_any())
                })
                .collect();
            let line = format!("phase={phase} pods=[{}]", pod_list.join(", "));
            if line != last {
                println!("    {:>5.1}s {line}", start.elapsed().as_secs_f64());
                last = line;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        anyhow::Ok(())
    });
    let _ = operator.kill();
    let _ = operator.wait();
    result?;
    println!(
        "\nThe control plane has no node yet, so the pods stay Pending.\n\
         The cluster keeps running: `cargo xtask cluster down` stops it."
    );
    Ok(())
}
