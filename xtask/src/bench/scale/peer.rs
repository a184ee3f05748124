//! The peer in `cargo xtask bench scale --peer mpi-operator`: Kubeflow's
//! mpi-operator, built from the Go module proxy by localkube (cached with
//! the other tools), its CRD from the same module, and its MPIJobs.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

/// Pod labels mpi-operator sets (also on the launcher Job's pod template).
pub const JOB_LABEL: &str = "training.kubeflow.org/job-name";
pub const ROLE_LABEL: &str = "training.kubeflow.org/job-role";
pub const POD_SELECTOR: &str = "training.kubeflow.org/operator-name=mpi-operator";

/// mpi-operator's own controller-queue limit (`--controller-queue-rate-limit`
/// and `--controller-queue-burst`, a token bucket in front of its work
/// queue: every event of every MPIJob waits for a token).
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum QueueLimit {
    /// Its defaults: 10 syncs/s, burst 100.
    Default,
    /// Both set to 1,000,000 (the flags are ints; 0 would mean no token
    /// after the burst), so the queue never waits.
    Lifted,
}

impl QueueLimit {
    pub fn name(self) -> &'static str {
        match self {
            QueueLimit::Default => "default",
            QueueLimit::Lifted => "lifted",
        }
    }

    fn args(self) -> Vec<String> {
        match self {
            QueueLimit::Default => Vec::new(),
            QueueLimit::Lifted => vec![
                "--controller-queue-rate-limit=1000000".into(),
                "--controller-queue-burst=1000000".into(),
            ],
        }
    }
}

/// The client limits and worker count our operator runs with, given to the
/// peer too.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClientLimits {
    pub qps: f32,
    pub burst: u32,
    pub workers: u32,
}

impl ClientLimits {
    /// Our operator's defaults, overridden by `--kube-api-qps=`,
    /// `--kube-api-burst=`, `--concurrency=` among its extra arguments.
    pub fn from_operator_args(args: &[String]) -> Result<ClientLimits> {
        let mut l = ClientLimits {
            qps: 50.0,
            burst: 100,
            workers: 16,
        };
        for a in args {
            let Some((flag, v)) = a.split_once('=') else {
                continue;
            };
            let bad = || format!("--operator-arg {a}: expected a number after '='");
            match flag {
                "--kube-api-qps" => l.qps = v.parse().with_context(bad)?,
                "--kube-api-burst" => l.burst = v.parse().with_context(bad)?,
                "--concurrency" => l.workers = v.parse().with_context(bad)?,
                _ => {}
            }
        }
        Ok(l)
    }

    /// The same limits as mpi-operator's flags. Its QPS flag is an integer,
    /// and client-go reads QPS 0 as its default (5), a negative one as no
    /// limit: our 0 (no limit) becomes -1.
    fn args(self) -> Result<Vec<String>> {
        let qps = if self.qps <= 0.0 {
            -1
        } else if self.qps.fract() == 0.0 {
            self.qps as i64
        } else {
            bail!(
                "mpi-operator's --kube-api-qps takes whole numbers; ours is {}",
                self.qps
            )
        };
        Ok(vec![
            format!("--kube-api-qps={qps}"),
            format!("--kube-api-burst={}", self.burst),
            format!("--threadiness={}", self.workers),
        ])
    }
}

/// The cached mpi-operator binary and its CRD (built on first use).
pub fn ensure() -> Result<(PathBuf, PathBuf)> {
    let tool = localkube::GoTool::MpiOperator;
    eprintln!("==> mpi-operator {} (cached build)", tool.version());
    let bin = localkube::ensure_tool(tool)
        .with_context(|| format!("building mpi-operator {}", tool.version()))?;
    let crd = localkube::ensure_tool_file(tool, "kubeflow.org_mpijobs.yaml")?;
    Ok((bin, crd))
}

pub fn version() -> &'static str {
    localkube::GoTool::MpiOperator.version()
}

/// `mpi-operator` arguments: namespace-scoped, metrics on `metrics_port`,
/// leader Lease in `lock_namespace` (it always elects a leader).
pub fn args(
    namespace: &str,
    lock_namespace: &str,
    metrics_port: u16,
    limits: ClientLimits,
    queue: QueueLimit,
) -> Result<Vec<String>> {
    let mut a = vec![
        format!("--namespace={namespace}"),
        format!("--lock-namespace={lock_namespace}"),
        format!("--monitoring-port={metrics_port}"),
    ];
    a.extend(limits.args()?);
    a.extend(queue.args());
    Ok(a)
}

/// mpi-operator serves its leader-election health check on this port of
/// every interface (fixed in its code).
pub const HEALTH_PORT: u16 = 8080;

/// Fails when [`HEALTH_PORT`] is taken (mpi-operator would exit at once).
pub fn check_health_port() -> Result<()> {
    std::net::TcpListener::bind(("0.0.0.0", HEALTH_PORT))
        .map(drop)
        .with_context(|| {
            format!(
                "port {HEALTH_PORT} is in use; mpi-operator serves its health check there (fixed)"
            )
        })
}

pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubeflow.org", "v2beta1", "MPIJob"),
        "mpijobs",
    )
}

/// An MPIJob of `workers` workers that mirrors the bench's DGLJob: one
/// launcher, cleanPodPolicy Running, the launcher created once every worker
/// is Ready.
pub fn job_object(name: &str, namespace: &str, workers: u32) -> serde_json::Value {
    let container = |extra: serde_json::Value| {
        let mut c = json!({"name": "main", "image": "registry.invalid/dgl-bench:none"});
        if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        c
    };
    json!({
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "slotsPerWorker": 1,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                    container(json!({"command": ["mpirun"], "args": ["-n", workers.to_string(), "bench"]}))
                ]}}},
                "Worker": {"replicas": workers, "template": {"spec": {"containers": [
                    container(json!({}))
                ]}}}
            }
        }
    })
}

/// Succeeded (true) or Failed (false) from an MPIJob's status conditions;
/// None while it runs.
pub fn finished(status: &serde_json::Value) -> Option<bool> {
    let conds = status.get("conditions")?.as_array()?;
    let is_true = |t: &str| {
        conds
            .iter()
            .any(|c| c["type"].as_str() == Some(t) && c["status"].as_str() == Some("True"))
    };
    if is_true("Succeeded") {
        Some(true)
    } else if is_true("Failed") {
        Some(false)
    } else {
        None
    }
}

/// The CRD manifest's text, checked to be the MPIJob CRD.
pub fn crd_yaml(path: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    if !text.contains("name: mpijobs.kubeflow.org") {
        bail!("{}: not the mpijobs.kubeflow.org CRD", path.display());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_limits_follow_our_operator_args() {
        let l = ClientLimits::from_operator_args(&[]).unwrap();
        assert_eq!(
            l.args().unwrap(),
            [
                "--kube-api-qps=50",
                "--kube-api-burst=100",
                "--threadiness=16"
            ]
        );
        let l = ClientLimits::from_operator_args(&[
            "--kube-api-qps=0".into(),
            "--concurrency=4".into(),
            "--kube-api-burst=7".into(),
        ])
        .unwrap();
        assert_eq!(
            l.args().unwrap(),
            ["--kube-api-qps=-1", "--kube-api-burst=7", "--threadiness=4"]
        );
        assert!(ClientLimits::from_operator_args(&["--kube-api-qps=x".into()]).is_err());
        let frac = ClientLimits::from_operator_args(&["--kube-api-qps=2.5".into()]).unwrap();
        assert!(frac.args().is_err());
    }

    #[test]
    fn finished_reads_conditions() {
        assert_eq!(finished(&json!({})), None);
        assert_eq!(
            finished(&json!({"conditions": [{"type": "Running", "status": "True"}]})),
            None
        );
        assert_eq!(
            finished(&json!({"conditions": [{"type": "Succeeded", "status": "True"}]})),
            Some(true)
        );
        assert_eq!(
            finished(&json!({"conditions": [{"type": "Failed", "status": "True"}]})),
            Some(false)
        );
    }

    #[test]
    fn job_object_has_the_compared_policies() {
        let j = job_object("a", "ns", 4);
        assert_eq!(j["spec"]["launcherCreationPolicy"], "WaitForWorkersReady");
        assert_eq!(j["spec"]["runPolicy"]["cleanPodPolicy"], "Running");
        assert_eq!(j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"], 4);
        assert_eq!(j["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"], 1);
    }
}
