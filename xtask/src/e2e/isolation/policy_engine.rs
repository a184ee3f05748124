//! A NetworkPolicy engine on the node: the CNI bridge enforces no
//! NetworkPolicy, so the isolation scenario runs kube-router (built from the
//! Go module proxy, cached like the Kubernetes binaries) with only its
//! firewall, the NetworkPolicy controller: no routing, no service proxy
//! (kube-proxy stays the node's). Its iptables rules and ipsets are removed
//! when it stops (and before it starts, in case an earlier run was killed),
//! so the node is as it was for the scenarios after it. On a cluster of
//! several nodes one runs per node: node 0's in the host's network
//! namespace, each other node's inside that node's (`nsenter --net`), where
//! its pods' bridge and iptables are.

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
    log: PathBuf,
    /// The node's network namespace (`None`: the host's).
    netns: Option<PathBuf>,
}

/// `prog` run in network namespace `netns` (the host's when `None`).
fn in_netns(netns: Option<&Path>, prog: &Path) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={}", ns.display())).arg("--").arg(prog);
            c
        }
        None => Command::new(prog),
    }
}

impl PolicyEngine {
    /// Starts kube-router's NetworkPolicy controller for node `node` of the
    /// cluster at `kubeconfig`; returns once its chains are in place.
    pub(crate) fn start(
        kubeconfig: &Path,
        node: &str,
        netns: Option<&Path>,
        log_dir: &Path,
    ) -> Result<PolicyEngine> {
        // kube-router shells out to ipset for the policies' pod sets.
        localkube::host::ensure_packages(&["ipset"], log_dir)?;
        remove_rules(netns).context("removing an earlier kube-router's rules")?;
        let bin = localkube::ensure_tool(localkube::GoTool::KubeRouter)
            .context("building kube-router from the Go module proxy")?;
        std::fs::create_dir_all(log_dir)?;
        let log = log_dir.join(format!("kube-router-{node}.log"));
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = in_netns(netns, &bin)
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
            "    kube-router {} (firewall only) on {node}, pid {}, log {}",
            localkube::GoTool::KubeRouter.version(),
            child.id(),
            log.display()
        );
        let mut engine = PolicyEngine {
            child: Some(child),
            log,
            netns: netns.map(Path::to_path_buf),
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
            if chains(self.netns.as_deref())?
                .iter()
                .any(|c| c == FORWARD_CHAIN)
            {
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

    /// Whether kube-router's rules guard pod `ns/pod` at `ip` (its REJECT
    /// rule, and a rule naming the pod and its IP: after a restart the pod
    /// of the same name has a new IP, and the old one's rules may remain
    /// until the next sync) and send its traffic through NetworkPolicy
    /// `policy` (rule comments as kube-router v2.1.0 writes them,
    /// `pkg/controllers/netpol/pod.go`). Chain names alone say nothing:
    /// `KUBE-NWPLCY-DEFAULT` always exists.
    pub(crate) fn guards(&self, ns: &str, pod: &str, ip: &str, policy: &str) -> Result<bool> {
        let rules = output(
            in_netns(self.netns.as_deref(), Path::new("iptables-save")).args(["-t", "filter"]),
        )?;
        let named = format!("POD name:{pod} namespace: {ns}");
        let at_ip = format!("{ip}/32");
        Ok(
            rules.contains(&format!("REJECT traffic destined for {named}\""))
                && rules
                    .lines()
                    .any(|l| l.contains(&named) && l.contains(&at_ip))
                && rules.contains(&format!("run through nw policy {policy}\"")),
        )
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
        remove_rules(self.netns.as_deref())
    }
}

/// Removes what kube-router's NetworkPolicy controller made: the jumps from
/// INPUT/FORWARD/OUTPUT, its chains and its ipsets. Its own
/// `--cleanup-config` cannot: in v2.1.0 it cleans with an empty controller
/// (no iptables handlers, so it removes nothing and says it succeeded), then
/// panics in the service proxy's cleanup (seen on the node).
fn remove_rules(netns: Option<&Path>) -> Result<()> {
    for hook in ["INPUT", "FORWARD", "OUTPUT"] {
        let target = format!("-j KUBE-ROUTER-{hook}");
        // `iptables -S <hook>`: line 0 is the policy, line n is rule n.
        while let Some(n) = iptables(netns, &["-S", hook])?
            .lines()
            .position(|l| l.ends_with(&target))
        {
            iptables(netns, &["-D", hook, &n.to_string()])?;
        }
    }
    let chains: Vec<String> = chains(netns)?
        .into_iter()
        .filter(|c| OWN_CHAINS.iter().any(|p| c.starts_with(p)))
        .collect();
    for c in &chains {
        iptables(netns, &["-F", c])?;
    }
    for c in &chains {
        iptables(netns, &["-X", c])?;
    }
    let ipset = Path::new("ipset");
    let sets = output(in_netns(netns, ipset).args(["list", "-n"]))?;
    for set in sets
        .lines()
        .filter(|s| OWN_SETS.iter().any(|p| s.starts_with(p)))
    {
        output(in_netns(netns, ipset).args(["destroy", set]))?;
    }
    Ok(())
}

/// The filter table's chains in `netns` (`-N <chain>` lines of `iptables -S`).
fn chains(netns: Option<&Path>) -> Result<Vec<String>> {
    Ok(iptables(netns, &["-S"])?
        .lines()
        .filter_map(|l| l.strip_prefix("-N "))
        .map(|c| c.trim().to_owned())
        .collect())
}

/// Chain and ipset name prefixes of kube-router's NetworkPolicy controller.
const OWN_CHAINS: [&str; 3] = ["KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-"];
const OWN_SETS: [&str; 2] = ["KUBE-SRC-", "KUBE-DST-"];

fn iptables(netns: Option<&Path>, args: &[&str]) -> Result<String> {
    output(
        in_netns(netns, Path::new("iptables"))
            .args(["-w", "5", "-t", "filter"])
            .args(args),
    )
}

/// Runs `cmd`; its stdout, or an error naming it and its stderr.
fn output(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Drop for PolicyEngine {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("e2e: stopping kube-router: {e:#}");
        }
    }
}
