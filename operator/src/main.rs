//! `dgl-operator`: the DGLJob controller binary.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use dgl_api::logging::{self, LogFormat, Output};
use dgl_operator::client::{self, Deadlines, RateLimit};
use dgl_operator::controller::{self, Settings};
use dgl_operator::leader::{LeaderConfig, LeaderElector};
use dgl_operator::metrics::Metrics;
use dgl_operator::pure::settings::{BuildConfig, GangScheduler, ProtectedServiceAccount, TokenKey};
use dgl_operator::server::{self, ServerState};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::ByteString;
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{error, info, warn};

#[derive(Parser)]
#[command(
    version,
    about = "Kubernetes operator for distributed DGL training jobs (DGLJob)",
    long_about = "Reconciles DGLJobs (dgloperator.io/v1alpha1) into a partitioner pod, worker pods and a \
                  launcher pod that run dglrun, and reports the job's progress in its status, conditions \
                  and Events."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller (in a cluster, or against $KUBECONFIG).
    Run(Box<RunArgs>),
    /// Print the DGLJob CustomResourceDefinition as YAML (what crds/dgljobs.yaml holds).
    Crd,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Gang {
    /// Use Volcano or scheduler-plugins if its PodGroup CRD is installed.
    Auto,
    Volcano,
    SchedulerPlugins,
    /// No PodGroups.
    None,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MetricsAuth {
    /// Require a bearer token authorized for `get /metrics` (TokenReview + SubjectAccessReview).
    Token,
    /// No authentication (only behind a trusted proxy).
    None,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Watch only this namespace (single-namespace install). Default: all namespaces.
    #[arg(long, env = "WATCH_NAMESPACE")]
    namespace: Option<String>,

    /// How many DGLJobs are reconciled at once.
    #[arg(long, default_value_t = 16, env = "DGL_OPERATOR_CONCURRENCY")]
    concurrency: u16,

    /// Sustained requests per second to the API server for the jobs' work:
    /// pods, their ConfigMap, Secret and RBAC, launches, cleanups
    /// (client-side token bucket, as client-go's --kube-api-qps). DGLJob
    /// status writes and Events have a bucket of their own
    /// (--report-api-qps), as client-go gives each clientset its own: in all
    /// the operator may send the sum of the two. 0: no client-side limit.
    #[arg(long, default_value_t = 50.0, env = "DGL_OPERATOR_KUBE_API_QPS")]
    kube_api_qps: f32,

    /// Requests that may be sent at once above --kube-api-qps (bucket size).
    #[arg(long, default_value_t = 100, env = "DGL_OPERATOR_KUBE_API_BURST")]
    kube_api_burst: u32,

    /// Sustained requests per second for what the operator reports: DGLJob
    /// status writes and Events (Events take only tokens no status write is
    /// waiting for, at most 30 s late). Its own bucket, so reporting never
    /// delays a pod and pods never delay a status write. Default: the value
    /// of --kube-api-qps. 0: no client-side limit.
    #[arg(long, env = "DGL_OPERATOR_REPORT_API_QPS", value_name = "QPS")]
    report_api_qps: Option<f32>,

    /// Requests that may be sent at once above --report-api-qps. Default: the
    /// value of --kube-api-burst.
    #[arg(long, env = "DGL_OPERATOR_REPORT_API_BURST", value_name = "N")]
    report_api_burst: Option<u32>,

    /// Elect a leader with a Lease so that only one replica reconciles.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "DGL_OPERATOR_LEADER_ELECT")]
    leader_elect: bool,

    /// Namespace of the leader Lease. Default: the operator pod's namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    leader_election_namespace: Option<String>,

    /// Name of the leader Lease.
    #[arg(long, default_value = "dgl-operator-leader")]
    lease_name: String,

    /// Seconds a leader may go without renewing before another replica takes over.
    #[arg(long, default_value_t = 15)]
    lease_duration_seconds: u64,

    /// Seconds the leader keeps trying to renew before it steps down (stops
    /// reconciling and exits). Shorter than --lease-duration-seconds, so an
    /// old leader has stopped before a standby may take the lease, as
    /// client-go's renewDeadline.
    #[arg(long, default_value_t = 10)]
    lease_renew_deadline_seconds: u64,

    /// Seconds to open a connection to the API server before the request
    /// fails (and is retried by the reconcile's backoff, the next lease
    /// renewal, or the next scrape).
    #[arg(long, default_value_t = 10, value_parser = dgl_api::duration::parse_secs_min::<1>, env = "DGL_OPERATOR_KUBE_API_CONNECT_TIMEOUT")]
    kube_api_connect_timeout_seconds: u64,

    /// Seconds every API request may take to be sent and to begin its answer
    /// (a watch: until it is open); leader election's and /metrics auth's
    /// requests also for every read of the answer. A half-open connection
    /// then fails the request instead of hanging a reconcile, a lease
    /// renewal or a scrape. Capped at 1 year.
    #[arg(long, default_value_t = 30, value_parser = dgl_api::duration::parse_secs_min::<1>, env = "DGL_OPERATOR_KUBE_API_TIMEOUT")]
    kube_api_timeout_seconds: u64,

    /// Requests per second of the client that leader election and /metrics
    /// token reviews share: their own, never the reconciles' (--kube-api-qps).
    #[arg(long, default_value_t = 5.0)]
    side_api_qps: f32,

    /// Burst of that client.
    #[arg(long, default_value_t = 10)]
    side_api_burst: u32,

    /// /metrics token reviews per second (burst the same); over it a scrape
    /// gets 429 instead of waiting. Verdicts are cached for
    /// --metrics-auth-cache-seconds.
    #[arg(long, default_value_t = 2.0)]
    metrics_auth_qps: f32,

    /// Seconds a /metrics token verdict (allowed or not) is reused.
    #[arg(long, default_value_t = 10)]
    metrics_auth_cache_seconds: u64,

    /// Address of the /healthz, /readyz and /metrics endpoints.
    #[arg(
        long,
        default_value = "0.0.0.0:8080",
        env = "DGL_OPERATOR_METRICS_ADDR"
    )]
    metrics_addr: SocketAddr,

    /// How /metrics is protected.
    #[arg(long, value_enum, default_value_t = MetricsAuth::Token)]
    metrics_auth: MetricsAuth,

    /// Image of the launcher's watcher-loop init container. Default: the launcher's own image.
    #[arg(long, env = "DGL_OPERATOR_WATCHER_IMAGE")]
    watcher_image: Option<String>,

    /// ServiceAccounts no DGLJob's pod may run as, comma-separated
    /// `<namespace>/<name>` (or `<name>`: in every namespace). The Helm chart
    /// and deploy/ set the operator's own; a job whose template names one
    /// fails (ServiceAccountRefused) before any pod is created.
    #[arg(
        long,
        env = "DGL_OPERATOR_PROTECTED_SERVICE_ACCOUNTS",
        value_delimiter = ','
    )]
    protected_service_accounts: Vec<ProtectedServiceAccount>,

    /// Give every DGLJob a NetworkPolicy (`<job>-network`, owned by the job)
    /// that admits to its pods only traffic from the same job's pods (any
    /// port; egress unrestricted). Takes effect where the cluster's network
    /// plugin enforces NetworkPolicies; needs RBAC on networking.k8s.io
    /// networkpolicies (the Helm chart's networkPolicy.enabled sets both).
    #[arg(long, env = "DGL_OPERATOR_NETWORK_POLICY")]
    network_policy: bool,

    /// Kueue integration (Kueue's external framework
    /// `DGLJob.v1alpha1.dgloperator.io`): a DGLJob labelled
    /// `kueue.x-k8s.io/queue-name` waits suspended in a Workload the
    /// operator owns until Kueue admits it. Needs Kueue's CRDs and RBAC on
    /// workloads, workloads/status, resourceflavors, workloadpriorityclasses
    /// (the Helm chart's kueue.enabled sets both). Off: no Kueue request.
    #[arg(long, env = "DGL_OPERATOR_KUEUE")]
    kueue: bool,

    /// Secret in the operator's namespace (--leader-election-namespace's;
    /// with --namespace, in that namespace, where its RBAC has Secrets)
    /// holding the key every job's token is derived from (HMAC of the job's
    /// UID), so that a deleted `<job>-token` comes back with the token the
    /// running pods hold. Created (immutable, 32 random bytes) when absent;
    /// whoever can read it can derive every job's token.
    #[arg(
        long,
        default_value = "dgl-operator-token-key",
        env = "DGL_OPERATOR_TOKEN_KEY_SECRET"
    )]
    token_key_secret: String,

    /// Gang scheduler for runPolicy.schedulingPolicy.
    #[arg(long, value_enum, default_value_t = Gang::Auto)]
    gang_scheduler: Gang,

    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "DGL_OPERATOR_LOG_FORMAT")]
    log_format: LogFormat,
}

async fn detect_gang(client: &Client, wanted: Gang) -> anyhow::Result<Option<GangScheduler>> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let installed = |gang: GangScheduler| {
        let crds = crds.clone();
        async move { crds.get_opt(&gang.crd_name()).await.map(|c| c.is_some()) }
    };
    Ok(match wanted {
        Gang::None => None,
        Gang::Volcano => Some(GangScheduler::Volcano),
        Gang::SchedulerPlugins => Some(GangScheduler::SchedulerPlugins),
        Gang::Auto => {
            if installed(GangScheduler::Volcano).await.unwrap_or(false) {
                Some(GangScheduler::Volcano)
            } else if installed(GangScheduler::SchedulerPlugins)
                .await
                .unwrap_or(false)
            {
                Some(GangScheduler::SchedulerPlugins)
            } else {
                None
            }
        }
    })
}

fn in_cluster_namespace() -> Option<String> {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|s| s.trim().to_string())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler installs");
    tokio::select! {
        _ = term.recv() => info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    // stdout, as before; no colour codes in the pod's log.
    logging::init(args.log_format, "info,kube=warn", Output::Stdout);
    anyhow::ensure!(
        args.lease_renew_deadline_seconds < args.lease_duration_seconds,
        "--lease-renew-deadline-seconds ({}) must be shorter than --lease-duration-seconds ({}), \
         so that a leader steps down before another replica may take the lease",
        args.lease_renew_deadline_seconds,
        args.lease_duration_seconds
    );
    let metrics = Arc::new(Metrics::default());
    let config = kube::Config::infer().await.context(
        "no Kubernetes client configuration (in-cluster service account or $KUBECONFIG)",
    )?;
    let limit = RateLimit {
        qps: args.kube_api_qps,
        burst: args.kube_api_burst,
    };
    let side_limit = RateLimit {
        qps: args.side_api_qps,
        burst: args.side_api_burst,
    };
    // Leader election and token reviews get a client of their own, so a
    // busy reconcile queue can neither delay a lease renewal nor a scrape.
    let deadlines = Deadlines {
        connect: dgl_api::duration::secs(args.kube_api_connect_timeout_seconds),
        request: dgl_api::duration::secs(args.kube_api_timeout_seconds),
    };
    // The side client never watches: every read of it is bounded too.
    let side_config = client::for_requests_only(config.clone(), deadlines);
    let side = client::build(side_config, side_limit, deadlines, metrics.clone())
        .context("building the Kubernetes client for leader election and /metrics auth")?;
    let report_limit = RateLimit {
        qps: args.report_api_qps.unwrap_or(limit.qps),
        burst: args.report_api_burst.unwrap_or(limit.burst),
    };
    let client = client::build_split(config, limit, report_limit, deadlines, metrics.clone())
        .context("building the Kubernetes client")?;
    let ready = spawn_server(&args, &side, &metrics);

    // One shutdown switch for the signal and for lost leadership.
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let signal_tx = stop_tx.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = signal_tx.send(true);
    });

    let instance = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "dgl-operator".into());
    let elector = match lead(&args, &side, &instance, &metrics, &stop_tx, &mut stop_rx).await {
        Leadership::Stopped => return Ok(()),
        Leadership::Alone => None,
        Leadership::Elected(elector) => Some(elector),
    };

    let gang = detect_gang(&client, args.gang_scheduler).await?;
    if let Some(g) = gang {
        info!(scheduler = ?g, "gang scheduling: PodGroups will be created");
    }
    let token_key = job_token_key(&client, &args).await?;
    let settings = Settings {
        concurrency: args.concurrency,
        namespace: args.namespace.clone(),
        build: BuildConfig {
            watcher_image: args.watcher_image.clone(),
            gang,
            protected_service_accounts: args.protected_service_accounts.clone(),
            network_policy: args.network_policy,
            kueue: args.kueue,
            token_key: Some(token_key),
        },
        instance,
    };
    if settings.build.protected_service_accounts.is_empty() {
        warn!("no --protected-service-accounts: a DGLJob's pod may run as the operator's own ServiceAccount");
    }
    // Ready once leading and every watch cache has listed once (set by
    // the controller): not while the caches cannot sync.
    info!(namespace = ?settings.namespace, concurrency = settings.concurrency,
        kube_api_qps = limit.qps, kube_api_burst = limit.burst,
        report_api_qps = report_limit.qps, report_api_burst = report_limit.burst, "starting controller");
    let mut rx = stop_rx.clone();
    let stop = async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    controller::run_reporting(client, settings, metrics.clone(), ready.clone(), stop).await;
    ready.store(false, Ordering::Relaxed);
    if let Some(e) = elector {
        e.release().await;
        metrics.is_leader.set(0);
    }
    if !*stop_rx.borrow_and_update() {
        warn!("controller ended without a shutdown request");
    }
    Ok(())
}

/// Serves /healthz, /readyz and /metrics in the background; returns the
/// readiness switch. A server that cannot start ends the process.
fn spawn_server(args: &RunArgs, client: &kube::Client, metrics: &Arc<Metrics>) -> Arc<AtomicBool> {
    let ready = Arc::new(AtomicBool::new(false));
    let state = ServerState {
        metrics: metrics.clone(),
        ready: ready.clone(),
        auth: (args.metrics_auth == MetricsAuth::Token).then(|| {
            let budget = RateLimit {
                qps: args.metrics_auth_qps,
                burst: args.metrics_auth_qps.ceil().max(1.0) as u32,
            };
            let ttl = Duration::from_secs(args.metrics_auth_cache_seconds);
            Arc::new(dgl_operator::server::MetricsAuth::new(
                client.clone(),
                budget,
                ttl,
            ))
        }),
    };
    let addr = args.metrics_addr;
    tokio::spawn(async move {
        if let Err(e) = server::serve(addr, state).await {
            error!(%addr, error = %e, "metrics server failed");
            std::process::exit(1);
        }
    });
    ready
}

/// The operator's own namespace: the leader Lease's and the token key's.
fn operator_namespace(args: &RunArgs) -> String {
    args.leader_election_namespace
        .clone()
        .or_else(in_cluster_namespace)
        .unwrap_or_else(|| "default".into())
}

/// The field of the token key Secret that holds the key.
const TOKEN_KEY_FIELD: &str = "key";
/// The shortest key accepted: HMAC-SHA256's block of security.
const TOKEN_KEY_MIN: usize = 32;

/// Reads the jobs' token key from Secret `ns/name`, creating it (immutable,
/// 32 random bytes) when absent; a replica that loses the race to create it
/// reads the winner's.
/// The jobs' token key, where the install's RBAC lets the operator create
/// Secrets and get this one by name: the watched namespace of a
/// single-namespace install, else its own.
async fn job_token_key(client: &Client, args: &RunArgs) -> anyhow::Result<TokenKey> {
    let key_ns = args
        .namespace
        .clone()
        .unwrap_or_else(|| operator_namespace(args));
    load_token_key(client, &key_ns, &args.token_key_secret)
        .await
        .with_context(|| {
            format!(
                "the jobs' token key, Secret {key_ns}/{} (key {TOKEN_KEY_FIELD})",
                args.token_key_secret
            )
        })
}

async fn load_token_key(client: &Client, ns: &str, name: &str) -> anyhow::Result<TokenKey> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    if let Some(s) = api.get_opt(name).await? {
        return key_of(&s);
    }
    let mut key = vec![0u8; TOKEN_KEY_MIN];
    getrandom::fill(&mut key).map_err(|e| anyhow::anyhow!("no random bytes: {e}"))?;
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        immutable: Some(true),
        data: Some([(TOKEN_KEY_FIELD.to_string(), ByteString(key))].into()),
        ..Default::default()
    };
    match api.create(&Default::default(), &secret).await {
        Ok(s) => key_of(&s),
        Err(kube::Error::Api(e)) if e.code == 409 => key_of(&api.get(name).await?),
        Err(e) => Err(e.into()),
    }
}

fn key_of(secret: &Secret) -> anyhow::Result<TokenKey> {
    let key = secret
        .data
        .as_ref()
        .and_then(|d| d.get(TOKEN_KEY_FIELD))
        .map(|b| b.0.clone())
        .unwrap_or_default();
    anyhow::ensure!(
        key.len() >= TOKEN_KEY_MIN,
        "the key has {} bytes; at least {TOKEN_KEY_MIN} expected",
        key.len()
    );
    Ok(TokenKey(key))
}

/// How this process came to reconcile.
enum Leadership {
    /// No leader election (--leader-elect=false).
    Alone,
    /// Holds the Lease; a background task holds it and stops the process
    /// when it is lost.
    Elected(Arc<LeaderElector>),
    /// Asked to stop before it won.
    Stopped,
}

/// With --leader-elect, waits for the Lease (or a stop request).
async fn lead(
    args: &RunArgs,
    client: &kube::Client,
    instance: &str,
    metrics: &Metrics,
    stop_tx: &watch::Sender<bool>,
    stop_rx: &mut watch::Receiver<bool>,
) -> Leadership {
    if !args.leader_elect {
        metrics.is_leader.set(1);
        return Leadership::Alone;
    }
    let namespace = operator_namespace(args);
    let identity = format!("{instance}_{:08x}", std::process::id() ^ rand_u32());
    let elector = Arc::new(LeaderElector::new(
        client.clone(),
        LeaderConfig {
            namespace,
            name: args.lease_name.clone(),
            identity,
            duration: Duration::from_secs(args.lease_duration_seconds),
            renew_deadline: Duration::from_secs(args.lease_renew_deadline_seconds),
            renew: Duration::from_secs((args.lease_duration_seconds / 5).max(1)),
        },
    ));
    tokio::select! {
        _ = elector.acquire() => {}
        _ = stop_rx.changed() => return Leadership::Stopped,
    }
    metrics.is_leader.set(1);
    let holder = elector.clone();
    let lost_tx = stop_tx.clone();
    tokio::spawn(async move {
        holder.hold().await;
        error!("leadership lost: stopping so that the new leader alone reconciles");
        let _ = lost_tx.send(true);
    });
    Leadership::Elected(elector)
}

/// A random number that tells this process from an earlier one of the same
/// pod in the leader Lease; 0 (the pid alone) if the kernel gives none.
fn rand_u32() -> u32 {
    getrandom::u32().unwrap_or(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crd => print!("{}", dgl_api::crd_yaml()),
        Command::Run(args) => run(*args).await?,
    }
    Ok(())
}
