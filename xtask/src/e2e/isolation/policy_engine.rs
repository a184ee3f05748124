//! A NetworkPolicy engine on the node: the CNI bridge enforces no
//! NetworkPolicy, so the isolation scenario runs kube-router (built from the
//! Go module proxy, cached like the Kubernetes binaries) with only its
//! firewall, the NetworkPolicy controller: no routing, no service proxy
//! (kube-proxy stays the node's). Stopped, it removes its iptables rules and
//! ipsets (`--cleanup-config`), so the node is as it was for the scenarios
//! after it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The chain kube-router's NetworkPolicy controller hooks into FORWARD: it
/// exists once the controller has synced.
const FORWARD_CHAIN: &str = "KUBE-ROUTER-FORWARD";
/// How long the controller may take to program its first sync.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// kube-router running on this host, stopped (and cleaned up) on drop.
pub(crate) struct PolicyEngine {
    child: Option<Child>,
    bin: PathBuf,
    log: PathBuf,
}

impl PolicyEngine {
    /// Starts kube-router's NetworkPolicy controller for node `node` of the
    /// cluster at `kubeconfig`; returns once its chains are in place.
    pub(crate) fn start(kubeconfig: &Path, node: &str, log_dir: &Path) -> Result<PolicyEngine> {
        // kube-router shells out to ipset for the policies' pod sets.
        localkube::host::ensure_packages(&["ipset"], log_dir)?;
        let bin = localkube::ensure_tool(localkube::GoTool::KubeRouter)
            .context("building kube-router from the Go module proxy")?;
        std::fs::create_dir_all(log_dir)?;
        let log = log_dir.join("kube-router.log");
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(&bin)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--hostname-override={node}"))
            .arg(format!(
                "--service-cluster-ip-range={}",
                localkube::SERVICE_CIDR
            ))
            .args([
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                // Pod and policy changes sync at once; this is the full resync.
                "--iptables-sync-period=10s",
                "--health-port=0",
                "--v=1",
            ])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        println!(
            "    kube-router {} (firewall only) pid {}, log {}",
            localkube::GoTool::KubeRouter.version(),
            child.id(),
            log.display()
        );
        let mut engine = PolicyEngine {
            child: Some(child),
            bin,
            log,
        };
        engine.wait_ready()?;
        Ok(engine)
    }

    /// Waits for the FORWARD hook, failing early if kube-router exits.
    fn wait_ready(&mut self) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!(
                    "kube-router exited ({status}) before syncing:\n{}",
                    self.log_tail()
                );
            }
            if localkube::host::iptables_chains("iptables", "filter")?.contains(FORWARD_CHAIN) {
                println!(
                    "    kube-router synced in {:.1}s",
                    start.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            if start.elapsed() > READY_TIMEOUT {
                bail!(
                    "kube-router made no {FORWARD_CHAIN} chain within {READY_TIMEOUT:?}:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Whether kube-router's rules guard pod `ns/pod` (its REJECT rule) and
    /// send its traffic through NetworkPolicy `policy` (rule comments as
    /// kube-router v2.1.0 writes them, `pkg/controllers/netpol/pod.go`).
    /// Chain names alone say nothing: `KUBE-NWPLCY-DEFAULT` always exists.
    pub(crate) fn guards(&self, ns: &str, pod: &str, policy: &str) -> Result<bool> {
        let out = Command::new("iptables-save")
            .args(["-t", "filter"])
            .stdin(Stdio::null())
            .output()
            .context("running iptables-save -t filter")?;
        if !out.status.success() {
            bail!(
                "iptables-save -t filter failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let rules = String::from_utf8_lossy(&out.stdout);
        Ok(rules.contains(&format!(
            "REJECT traffic destined for POD name:{pod} namespace: {ns}\""
        )) && rules.contains(&format!("run through nw policy {policy}\"")))
    }

    /// The last lines of kube-router's log.
    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Stops kube-router and removes its rules and ipsets.
    pub(crate) fn stop(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        child.kill().ok();
        child.wait().ok();
        let out = Command::new(&self.bin)
            .arg("--cleanup-config")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {} --cleanup-config", self.bin.display()))?;
        if !out.status.success() {
            bail!(
                "kube-router --cleanup-config failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if localkube::host::iptables_chains("iptables", "filter")?.contains(FORWARD_CHAIN) {
            bail!("kube-router --cleanup-config left {FORWARD_CHAIN} behind");
        }
        Ok(())
    }
}

impl Drop for PolicyEngine {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("e2e: stopping kube-router: {e:#}");
        }
    }
}
