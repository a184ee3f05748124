//! `cargo xtask cluster ...`: build the Kubernetes binaries and run a local
//! control plane (etcd + kube-apiserver + kube-controller-manager, optionally
//! kube-scheduler) on 127.0.0.1. All the work is in the `localkube` crate;
//! this is the command-line edge (anyhow errors, human output).
use std::time::Instant;

use anyhow::Context;
use clap::Subcommand;
use localkube::{BuildOptions, ClusterConfig, LocalCluster};

use crate::util::node_cluster_n;

#[derive(clap::Args)]
#[command(
    long_about = "Local Kubernetes control plane built from the Go module proxy.\n\n\
        Binaries are cached under $DGL_OPERATOR_CACHE (default ~/.cache/dgl-operator)/bin, \
        cluster state under <cache>/cluster/<name>/. Processes run detached and survive \
        this command; `down` stops exactly the processes `up` started.\n\n\
        Integration tests use their own cluster named \"test\" (see localkube::ensure_cluster)."
)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args)]
struct NameArg {
    /// Cluster name: state dir <cache>/cluster/<name>, fixed ports per name
    /// ("dev": 6443/2379/2380/10257/10259, "test": those + 10000).
    #[arg(long, default_value = localkube::DEFAULT_CLUSTER)]
    name: String,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the cluster, or reuse it if it is already healthy (idempotent).
    ///
    /// Builds the binaries first if they are not cached (20-30 min cold on 2
    /// cores). Prints the kubeconfig path; `export KUBECONFIG=<path>` points
    /// kube-rs and other clients at it.
    Up {
        #[command(flatten)]
        name: NameArg,
        /// Also run kube-scheduler (pods get bound to nodes, e.g. kwok nodes).
        #[arg(long)]
        scheduler: bool,
        /// Also run a real node on this host: containerd + runc + CNI bridge
        /// (Debian packages, installed when missing), kubelet and kube-proxy.
        /// Needs root. The apiserver then serves on the node IP
        /// (10.213.255.1); `down` reverts every host change.
        #[arg(long)]
        node: bool,
        /// With --node: how many nodes (1 to 8). Node 1 runs on the host as
        /// without this flag; every further node runs its own containerd,
        /// kubelet, kube-proxy and CNI bridge in a network namespace of its
        /// own (node IP 10.213.255.<1+i>, pods 10.244.<i>.0/24), joined to
        /// the host by a veth pair; each costs memory and start time (see
        /// the README).
        #[arg(long, default_value_t = 1, requires = "node")]
        nodes: usize,
    },
    /// Stop the cluster's processes (by recorded pid) and delete its etcd data.
    ///
    /// For a node cluster, first deletes the node's pods, stops kube-proxy,
    /// the kubelet and containerd and reverts the host changes (mounts,
    /// links, iptables chains, cgroups, sysctls). PKI, kubeconfig, logs and
    /// the node's image store are kept unless --purge is given.
    Down {
        #[command(flatten)]
        name: NameArg,
        /// Also delete the state dir (PKI, kubeconfig, logs, the node's images).
        #[arg(long)]
        purge: bool,
    },
    /// Show each component's pid and whether the apiserver is ready.
    Status {
        #[command(flatten)]
        name: NameArg,
    },
    /// Print the path of the cluster's admin kubeconfig.
    Kubeconfig {
        #[command(flatten)]
        name: NameArg,
    },
    /// Only build (or verify the cache of) the binaries; print paths and versions.
    ///
    /// Kubernetes (kube-apiserver, kube-controller-manager, kube-scheduler,
    /// kubelet, kube-proxy), etcd and kwok/kwokctl, and SeaweedFS's weed (the
    /// object-storage tests' S3 server), from the Go module proxy.
    Build {
        /// Parallel Go compile jobs (`go build -p`); default: number of CPUs.
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// End-to-end smoke test of the node tier (needs root; about 1 min).
    ///
    /// Brings up a node cluster, runs a pod from a locally built image (a
    /// static Go probe that calls the apiserver through the `kubernetes`
    /// Service with its service-account token), reads its log through the
    /// API, tears the cluster down and checks that no process, link, mount,
    /// cgroup or iptables chain is left. It is the ignored test
    /// localkube/tests/node_smoke.rs.
    Smoke {
        /// Cluster for the test; a running node cluster of this name is reused
        /// and then torn down. Only one node cluster can run per host.
        #[arg(long, default_value = "smoketest")]
        name: String,
        /// With 2 or more: the multi-node test instead (localkube/tests/
        /// multinode.rs): that many nodes Ready, a pod on each node reaching a
        /// server pod on every other node by pod IP and by ClusterIP Service,
        /// per-node memory and start time printed, teardown checked clean.
        #[arg(long, default_value_t = 1)]
        nodes: usize,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    rt.block_on(run_async(args))
}

fn cluster(name: &str, scheduler: bool) -> anyhow::Result<LocalCluster> {
    let mut cfg = ClusterConfig::new(name)?;
    cfg.scheduler = scheduler;
    Ok(LocalCluster::new(cfg)?)
}

async fn run_async(args: Args) -> anyhow::Result<()> {
    match args.cmd {
        Cmd::Up {
            name,
            scheduler,
            node,
            nodes,
        } => up(name, scheduler, node, nodes).await?,
        Cmd::Down { name, purge } => down(name, purge).await?,
        Cmd::Status { name } => status(name).await?,
        Cmd::Kubeconfig { name } => kubeconfig(name)?,
        Cmd::Smoke { name, nodes } => smoke(name, nodes)?,
        Cmd::Build { jobs } => build(jobs).await?,
    }
    Ok(())
}

/// `cluster up`: starts (or reuses) the cluster and prints its kubeconfig.
async fn up(name: NameArg, scheduler: bool, node: bool, nodes: usize) -> anyhow::Result<()> {
    let started = Instant::now();
    let c = if node {
        node_cluster_n(&name.name, nodes)?
    } else {
        cluster(&name.name, scheduler)?
    };
    let info = c
        .up()
        .await
        .with_context(|| format!("starting cluster {:?}", name.name))?;
    eprintln!(
        "cluster {:?} {} in {:.1}s: {}",
        info.name,
        if info.reused {
            "already running, reused"
        } else {
            "started"
        },
        started.elapsed().as_secs_f64(),
        info.server
    );
    eprintln!("logs: {}", c.log_dir().display());
    if node {
        print_nodes(&c);
    }
    eprintln!("export KUBECONFIG={}", info.kubeconfig.display());
    println!("{}", info.kubeconfig.display());
    Ok(())
}

/// `cluster down`: stops every process, optionally purging the state dir.
async fn down(name: NameArg, purge: bool) -> anyhow::Result<()> {
    let c = cluster(&name.name, false)?;
    let stopped = c
        .down(purge)
        .await
        .with_context(|| format!("stopping cluster {:?}", name.name))?;
    if stopped.is_empty() {
        eprintln!("cluster {:?}: no processes were running", name.name);
    }
    for (component, pid) in stopped {
        eprintln!("stopped {component} (pid {pid})");
    }
    eprintln!(
        "cluster {:?}: etcd data removed{}",
        name.name,
        if purge { ", state dir purged" } else { "" }
    );
    Ok(())
}

/// `cluster status`: each component's state; an error if not ready.
async fn status(name: NameArg) -> anyhow::Result<()> {
    let c = cluster(&name.name, false)?;
    let s = c.status().await?;
    println!("cluster:    {}", s.name);
    println!("state dir:  {}", s.state_dir.display());
    println!(
        "apiserver:  {} ({})",
        s.server.trim_end_matches('/'),
        match (&s.ready, &s.server_version) {
            (true, Some(v)) => format!("ready, {v}"),
            (true, None) => "ready".to_string(),
            (false, _) => "not ready".to_string(),
        }
    );
    println!(
        "kubeconfig: {}",
        s.kubeconfig
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "(none yet)".into())
    );
    if s.node.is_some() {
        print_nodes(&c);
    }
    for comp in &s.components {
        let state = match (comp.pid, comp.running) {
            (Some(pid), true) => format!("running (pid {pid})"),
            (Some(pid), false) => format!("not running (stale pid {pid})"),
            (None, _) => "not running".to_string(),
        };
        println!("{:<24}{:<32}{}", comp.name, state, comp.log.display());
    }
    if !s.ready {
        // Non-zero exit so scripts can use `status` as a health check.
        anyhow::bail!("cluster {:?} is not ready", s.name);
    }
    Ok(())
}

/// `cluster kubeconfig`: the kubeconfig's path, once it exists.
fn kubeconfig(name: NameArg) -> anyhow::Result<()> {
    let c = cluster(&name.name, false)?;
    let path = c.kubeconfig_path();
    if !path.is_file() {
        anyhow::bail!(
            "{} does not exist yet; run `cargo xtask cluster up --name {}`",
            path.display(),
            name.name
        );
    }
    println!("{}", path.display());
    Ok(())
}

/// `cluster smoke`: localkube's ignored node test against this cluster.
fn smoke(name: String, nodes: usize) -> anyhow::Result<()> {
    let started = Instant::now();
    let test = if nodes > 1 { "multinode" } else { "node_smoke" };
    let status =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(crate::util::repo_root())
            .args(["test", "-p", "localkube", "--test", test, "--"])
            .args(["--ignored", "--nocapture"])
            .env("LOCALKUBE_SMOKE_CLUSTER", &name)
            .env("LOCALKUBE_SMOKE_NODES", nodes.to_string())
            .status()
            .context("could not run cargo test")?;
    eprintln!(
        "node smoke test {} in {:.1}s",
        if status.success() { "passed" } else { "FAILED" },
        started.elapsed().as_secs_f64()
    );
    if !status.success() {
        anyhow::bail!(
            "`cargo test -p localkube --test {test} -- --ignored` failed ({status}); \
             logs: <cache>/cluster/{name}/logs/"
        );
    }
    Ok(())
}

/// `cluster build`: the Kubernetes, etcd, kwok and SeaweedFS binaries.
async fn build(jobs: Option<usize>) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut opts = BuildOptions::from_env()?;
    if let Some(j) = jobs {
        opts.jobs = j.max(1);
    }
    let bins = tokio::task::spawn_blocking(move || localkube::ensure_kwok(&opts))
        .await
        .context("build task")??;
    // The S3 server of the object-storage tests.
    let weed = tokio::task::spawn_blocking(|| localkube::ensure_tool(localkube::GoTool::SeaweedFs))
        .await
        .context("build task")??;
    eprintln!(
        "binaries ready in {:.1}s (Kubernetes {}, etcd {}, kwok {})",
        started.elapsed().as_secs_f64(),
        bins.kubernetes_version,
        bins.etcd_version,
        bins.kwok_version
    );
    for (name, path) in bins.all() {
        let version = match name {
            "etcd" => &bins.etcd_version,
            "kwok" | "kwokctl" => &bins.kwok_version,
            _ => &bins.kubernetes_version,
        };
        println!("{name:<24}{version:<10}{}", path.display());
    }
    println!(
        "{:<24}{:<10}{}",
        "weed (SeaweedFS)",
        localkube::SEAWEEDFS_VERSION,
        weed.display()
    );
    Ok(())
}

/// One line per node: name, IP, pod CIDR, and the RSS of its containerd +
/// kubelet + kube-proxy.
fn print_nodes(c: &LocalCluster) {
    for n in c.node_summaries() {
        println!(
            "node:       {} (node IP {}, pods {}, {}; containerd+kubelet+kube-proxy RSS {} MiB{})",
            n.node_name,
            n.node_ip,
            n.pod_cidr,
            if n.host_network {
                "host network"
            } else {
                "own network namespace"
            },
            n.rss_bytes / (1024 * 1024),
            if n.running { "" } else { ", NOT all running" }
        );
    }
}
