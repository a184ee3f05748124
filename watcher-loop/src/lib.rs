//! `watcher-loop`: waits until a set of pods is Ready (`ready` mode) or has
//! Succeeded (`finished` mode), and fails at once when one of them fails or
//! is deleted. The launcher's init container runs it (the `watcher-loop` of
//! the original DGL operator design, without `kubectl`; docs/runtime-design.md).
//!
//! It only watches, never polls:
//! * pods named in a file: when they are one job's workers
//!   (`<job>-worker-<i>`), one watch of that job's workers by label (the
//!   operator's `dgloperator.io/job-name` and `replica-type=worker`), pods not
//!   named ignored: a 1,000-worker job opens one watch, not 1,000. That needs
//!   list/watch on pods without resourceNames; refused (401/403), it falls
//!   back to one watch per pod with the field selector `metadata.name=<pod>`
//!   (RBAC authorizes list/watch requests carrying that selector against
//!   `resourceNames`, so a Role with `get/list/watch pods, resourceNames:
//!   [<the pods>]` is enough). Other named pods get one watch each.
//! * a label selector: one watch of the matching pods.
//! * optionally first, the job's ConfigMap ([`wait_config_map`]), the same
//!   way (`metadata.name=<name>`): the launcher is created with the workers,
//!   so it waits until the operator has written its run's launch (key
//!   `run` = the run, with every worker's IP), then [`write_config`] writes
//!   the ConfigMap's keys as files for the launcher (a ConfigMap volume would
//!   lag up to a minute), and the pod file is read only then (usually the
//!   `hostfile` just written). One timeout covers both waits
//!   ([`Options::since`]).
//!
//! A pod or ConfigMap that does not exist yet is waited for: the operator may
//! create it a moment later.

mod config;
mod duration;
mod state;
mod targets;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::time::Instant;

pub use config::{wait_config_map, write_config};
pub use duration::{format_duration, parse_duration};
pub use state::{assess, Assessment, Change, Mode, Tracker};
pub use targets::{validate_pod_name, Targets};

/// Where a pod's ServiceAccount namespace is mounted.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Exit code: a watched pod failed or was deleted, or the waited-for
/// ConfigMap was deleted.
pub const EXIT_POD_FAILED: i32 = 1;
/// Exit code: bad input (arguments, the pod file, the namespace).
pub const EXIT_USAGE: i32 = 2;
/// Exit code: the timeout expired.
pub const EXIT_TIMEOUT: i32 = 3;
/// Exit code: the API refused or broke the watch (RBAC, bad selector).
pub const EXIT_API: i32 = 4;
/// Exit code: the ConfigMap's files could not be written (a key that is not
/// a file name, a missing or read-only folder).
pub const EXIT_WRITE: i32 = 5;

/// Why a wait did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pod file cannot be read.
    #[error("cannot read the pod list {path}: {source}")]
    ReadFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The pod file is malformed.
    #[error(transparent)]
    Format(#[from] dgl_api::files::FileFormatError),
    /// The targets make no sense (no pods, a bad name, an empty selector).
    #[error("{0}")]
    InvalidTargets(String),
    /// No namespace given and none found.
    #[error("no namespace: pass --namespace, or set NAMESPACE or {env}, or run in a pod (reads {file})", env = dgl_api::names::ENV_NAMESPACE, file = SERVICE_ACCOUNT_NAMESPACE_FILE)]
    NoNamespace,
    /// A watched pod failed; it can never become ready / finished.
    #[error("pod {pod} failed: {reason}")]
    PodFailed { pod: String, reason: String },
    /// A watched pod was deleted.
    #[error("pod {pod} {detail}")]
    PodDeleted { pod: String, detail: String },
    /// The timeout expired first.
    #[error(
        "timed out after {} waiting for pods to be {mode}; still waiting for {}",
        format_duration(*after),
        waiting.iter().map(|(p, why)| format!("{p} ({why})")).collect::<Vec<_>>().join(", ")
    )]
    Timeout {
        after: Duration,
        mode: Mode,
        /// Pod (or placeholder) and where it stands.
        waiting: Vec<(String, String)>,
    },
    /// The API server refused the watch (authorization, a bad selector).
    #[error("cannot watch {target} in namespace {namespace}: {message}")]
    Watch {
        target: String,
        namespace: String,
        message: String,
    },
    /// A watch stream ended, which kube's watcher never does on its own.
    #[error("the watch of {target} ended unexpectedly")]
    WatchEnded { target: String },
    /// The waited-for ConfigMap was deleted after it was seen.
    #[error(
        "ConfigMap {name} was deleted while waiting for it to launch run {run} (the job is gone)"
    )]
    ConfigMapDeleted { name: String, run: u32 },
    /// The timeout expired before the ConfigMap launched the run.
    #[error(
        "timed out after {} waiting for ConfigMap {name} to launch run {run}; {holds}",
        format_duration(*after)
    )]
    ConfigMapTimeout {
        after: Duration,
        name: String,
        run: u32,
        /// Where the ConfigMap stands (`it holds run 0`, `it does not exist yet`).
        holds: String,
    },
    /// A ConfigMap key cannot be a file name.
    #[error("cannot write ConfigMap key {key:?} as a file in {dir}: {why}")]
    BadConfigKey {
        key: String,
        dir: String,
        why: String,
    },
    /// A ConfigMap file cannot be written.
    #[error("cannot write the ConfigMap's file {path}: {source}")]
    WriteConfig {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::PodFailed { .. } | Error::PodDeleted { .. } | Error::ConfigMapDeleted { .. } => {
                EXIT_POD_FAILED
            }
            Error::ReadFile { .. }
            | Error::Format(_)
            | Error::InvalidTargets(_)
            | Error::NoNamespace => EXIT_USAGE,
            Error::Timeout { .. } | Error::ConfigMapTimeout { .. } => EXIT_TIMEOUT,
            Error::Watch { .. } | Error::WatchEnded { .. } => EXIT_API,
            Error::BadConfigKey { .. } | Error::WriteConfig { .. } => EXIT_WRITE,
        }
    }

    /// The pod this error is about, if one.
    pub fn pod(&self) -> Option<&str> {
        match self {
            Error::PodFailed { pod, .. } | Error::PodDeleted { pod, .. } => Some(pod),
            _ => None,
        }
    }
}

/// A successful wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub mode: Mode,
    /// The pods that reached the goal, sorted.
    pub pods: Vec<String>,
    pub elapsed: Duration,
    /// One job's workers were waited for with one label-selected watch
    /// (false: one watch per pod, or a selector target).
    pub shared_watch: bool,
}

/// The namespace to watch: `explicit` (the flag, or env `NAMESPACE`), else
/// `operator_env` (env `DGL_OPERATOR_NAMESPACE`), else the content of the
/// ServiceAccount namespace file. Blank values count as unset.
pub fn resolve_namespace(
    explicit: Option<&str>,
    operator_env: Option<&str>,
    service_account_file: &Path,
) -> Result<String, Error> {
    let pick = |v: Option<&str>| v.map(str::trim).filter(|v| !v.is_empty()).map(String::from);
    if let Some(ns) = pick(explicit).or_else(|| pick(operator_env)) {
        return Ok(ns);
    }
    match std::fs::read_to_string(service_account_file) {
        Ok(content) => pick(Some(&content)).ok_or(Error::NoNamespace),
        Err(_) => Err(Error::NoNamespace),
    }
}

/// A stream key: the pod name of a per-pod watch, `None` for the selector watch.
type Scope = Option<String>;
type Item = (Scope, Result<watcher::Event<Pod>, watcher::Error>);

/// How long 401/403 answers are retried at the start of a run: the operator
/// creates the pod's Role and RoleBinding just before the pod, and the API
/// server's authorizer learns about them a moment later.
pub const DEFAULT_FORBIDDEN_GRACE: Duration = Duration::from_secs(10);

/// Knobs of [`run_with`] and [`wait_config_map`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Give up after this long; `None`: no limit.
    pub timeout: Option<Duration>,
    /// Retry 401/403 answers for this long after the call's start, then fail.
    pub forbidden_grace: Duration,
    /// Where `timeout` (and the reported elapsed time) counts from; `None`:
    /// the call's start. Give the ConfigMap wait and the pod wait after it
    /// the same instant, so one timeout covers both.
    pub since: Option<Instant>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: None,
            forbidden_grace: DEFAULT_FORBIDDEN_GRACE,
            since: None,
        }
    }
}

impl Options {
    /// When the timeout expires, for a call that started at `started`.
    pub fn deadline(&self, started: Instant) -> Option<Instant> {
        self.timeout.map(|t| {
            let since = self.since.unwrap_or(started).into_std();
            Instant::from_std(dgl_api::duration::later(since, t))
        })
    }
}

/// Sleeps until `deadline`; forever without one.
async fn deadline_sleep(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Waits until every target pod in `namespace` is Ready / Succeeded (per
/// `mode`), or one fails or is deleted, or `timeout` expires (`None`: no
/// limit). Watch errors the API server may recover from are retried with
/// backoff; request errors (400, 404, 422) end the wait at once, and
/// authorization errors (401, 403) after [`DEFAULT_FORBIDDEN_GRACE`].
pub async fn run(
    client: Client,
    namespace: &str,
    targets: &Targets,
    mode: Mode,
    timeout: Option<Duration>,
) -> Result<Outcome, Error> {
    let options = Options {
        timeout,
        ..Options::default()
    };
    run_with(client, namespace, targets, mode, options).await
}

/// [`run`] with every knob.
pub async fn run_with(
    client: Client,
    namespace: &str,
    targets: &Targets,
    mode: Mode,
    options: Options,
) -> Result<Outcome, Error> {
    let Options {
        timeout,
        forbidden_grace,
        since,
    } = options;
    let started = Instant::now();
    let since = since.unwrap_or(started);
    let api: Api<Pod> = Api::namespaced(client, namespace);
    let (mut tracker, streams, mut shared) = watch_targets(&api, targets, mode)?;
    let selector_mode = matches!(targets, Targets::Selector { .. });
    tracing::info!(
        namespace,
        %mode,
        targets = %targets.describe(),
        timeout = %timeout.map(format_duration).unwrap_or_else(|| "none".into()),
        "waiting for pods",
    );

    let mut events = stream::select_all(streams);
    let mut lists = Lists::default();
    let expired = deadline_sleep(options.deadline(started));
    tokio::pin!(expired);

    loop {
        // A selector's pod set is only known once its list is complete.
        let judge = !selector_mode || lists.listed_once.contains(&None);
        if judge && tracker.is_complete() {
            let pods = tracker.pod_names();
            let elapsed = since.elapsed();
            tracing::info!(
                namespace,
                %mode,
                pods = %pods.join(","),
                elapsed = %format_duration(elapsed),
                "all pods are {mode}",
            );
            return Ok(Outcome {
                mode,
                pods,
                elapsed,
                shared_watch: shared,
            });
        }
        let item = tokio::select! {
            item = events.next() => item,
            () = &mut expired => {
                let waiting = tracker.waiting();
                return Err(Error::Timeout {
                    after: timeout.unwrap_or_default(),
                    mode,
                    waiting,
                });
            }
        };
        let Some((scope, event)) = item else {
            return Err(Error::WatchEnded {
                target: targets.describe(),
            });
        };
        match event {
            Ok(event) => lists.apply(&mut tracker, scope, event)?,
            Err(e) if shared && refused(&e) => {
                // The Role names each pod (resourceNames): one watch per pod.
                let names = match targets {
                    Targets::Pods(names) => names.as_slice(),
                    Targets::Selector { .. } => &[],
                };
                tracing::warn!(
                    namespace, pods = names.len(), error = %e,
                    "not allowed to watch the job's workers by label (list/watch on pods \
                     without resourceNames); watching each pod by name instead",
                );
                events = stream::select_all(per_pod_streams(&api, names));
                lists = Lists::default();
                shared = false;
            }
            Err(e) => {
                let target = match &scope {
                    Some(pod) => format!("pod {pod}"),
                    None => targets.describe(),
                };
                watch_failed(&e, namespace, target, started, forbidden_grace)?;
            }
        }
    }
}

/// The watches of `targets` and the tracker that judges them, and whether
/// named pods share one watch. One job's workers (`<job>-worker-<i>`) are
/// watched together by their labels ([`Targets::workers_selector`]), the
/// tracker ignoring pods not named; other named pods get one watch each
/// (field selector, so a resourceNames Role suffices); a label selector one.
fn watch_targets(
    api: &Api<Pod>,
    targets: &Targets,
    mode: Mode,
) -> Result<(Tracker, Vec<BoxStream<'static, Item>>, bool), Error> {
    match targets {
        Targets::Pods(names) => {
            if names.is_empty() {
                return Err(Error::InvalidTargets("no pods to watch".into()));
            }
            let tracker = Tracker::for_names(mode, names);
            match targets.workers_selector() {
                Some(selector) => Ok((tracker, vec![selector_stream(api, &selector)], true)),
                None => Ok((tracker, per_pod_streams(api, names), false)),
            }
        }
        Targets::Selector { selector, min_pods } => {
            let stream = selector_stream(api, selector);
            Ok((Tracker::for_selector(mode, *min_pods), vec![stream], false))
        }
    }
}

fn selector_stream(api: &Api<Pod>, selector: &str) -> BoxStream<'static, Item> {
    let config = watcher::Config::default().labels(selector);
    watcher(api.clone(), config)
        .default_backoff()
        .map(|r| (None, r))
        .boxed()
}

fn per_pod_streams(api: &Api<Pod>, names: &[String]) -> Vec<BoxStream<'static, Item>> {
    let stream = |name: &String| {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let scope = Some(name.clone());
        watcher(api.clone(), config)
            .default_backoff()
            .map(move |r| (scope.clone(), r))
            .boxed()
    };
    names.iter().map(stream).collect()
}

/// A 401/403: the shared watch is not allowed by the pod's Role.
fn refused(e: &watcher::Error) -> bool {
    matches!(fatal_watch_error(e), Some((401 | 403, _)))
}

/// A failed watch: fatal errors end the wait, except 401/403 during the
/// grace period (RBAC may not have propagated yet); others are retried.
fn watch_failed(
    e: &watcher::Error,
    namespace: &str,
    target: String,
    started: Instant,
    forbidden_grace: Duration,
) -> Result<(), Error> {
    let Some((code, message)) = fatal_watch_error(e) else {
        tracing::warn!(namespace, %target, error = %e, "watch failed; retrying");
        return Ok(());
    };
    let unauthorized = code == 401 || code == 403;
    if !unauthorized || started.elapsed() >= forbidden_grace {
        return Err(Error::Watch {
            target,
            namespace: namespace.to_string(),
            message,
        });
    }
    tracing::warn!(
        namespace, %target, error = %message,
        "not allowed (yet?); retrying for {} in case RBAC has not propagated",
        format_duration(forbidden_grace.saturating_sub(started.elapsed())),
    );
    Ok(())
}

/// What each stream's (re-)lists have shown.
#[derive(Default)]
struct Lists {
    /// Names listed by each stream's (re-)list in progress.
    listing: HashMap<Scope, BTreeSet<String>>,
    /// Streams whose first list is complete.
    listed_once: HashSet<Scope>,
}

impl Lists {
    fn apply(
        &mut self,
        tracker: &mut Tracker,
        scope: Scope,
        event: watcher::Event<Pod>,
    ) -> Result<(), Error> {
        match event {
            watcher::Event::Init => {
                self.listing.insert(scope, BTreeSet::new());
            }
            watcher::Event::InitApply(pod) => {
                if let (Some(list), Some(name)) =
                    (self.listing.get_mut(&scope), pod.metadata.name.as_ref())
                {
                    list.insert(name.clone());
                }
                observe(tracker, &pod)?;
            }
            watcher::Event::InitDone => {
                let listed = self.listing.remove(&scope).unwrap_or_default();
                tracker.relisted(scope.as_deref(), &listed)?;
                self.listed_once.insert(scope);
            }
            watcher::Event::Apply(pod) => observe(tracker, &pod)?,
            watcher::Event::Delete(pod) => {
                let name = pod.metadata.name.unwrap_or_default();
                tracing::info!(pod = %name, "pod deleted");
                tracker.deleted(&name)?;
            }
        }
        Ok(())
    }
}

fn observe(tracker: &mut Tracker, pod: &Pod) -> Result<(), Error> {
    let name = pod.metadata.name.as_deref().unwrap_or("<unnamed>");
    match tracker.observe(pod) {
        Ok(Change::Now(Assessment::Done)) => {
            tracing::info!(pod = %name, "pod is {}", tracker.mode());
            Ok(())
        }
        Ok(Change::Now(Assessment::Waiting(why))) => {
            tracing::info!(pod = %name, state = %why, "waiting for pod");
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::error!(pod = %name, error = %e, "pod can never be {}", tracker.mode());
            Err(e)
        }
    }
}

/// The status code and message of a watch error that retrying cannot fix:
/// the API server refused the request (401, 403, 400 for a malformed
/// selector, 404, 422). Everything else (connection errors, 5xx, 410 Gone,
/// 429) is retried.
fn fatal_watch_error(e: &watcher::Error) -> Option<(u16, String)> {
    let status = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.as_ref(),
        watcher::Error::WatchError(s) => s.as_ref(),
        _ => return None,
    };
    matches!(status.code, 400 | 401 | 403 | 404 | 422).then(|| {
        let reason = if status.reason.is_empty() {
            String::new()
        } else {
            format!(" ({})", status.reason)
        };
        (
            status.code,
            format!("HTTP {}{reason}: {}", status.code, status.message),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> Box<kube::core::Status> {
        let mut s = kube::core::Status::failure(message, reason);
        s.code = code;
        Box::new(s)
    }

    #[test]
    fn refusals_are_fatal_transient_errors_are_not() {
        let forbidden = watcher::Error::InitialListFailed(kube::Error::Api(status(
            403,
            "Forbidden",
            "pods is forbidden: User \"system:serviceaccount:ns:sa\" cannot list resource \"pods\"",
        )));
        let (code, m) = fatal_watch_error(&forbidden).expect("403 is fatal");
        assert_eq!(code, 403);
        assert!(
            m.starts_with("HTTP 403 (Forbidden): pods is forbidden"),
            "{m}"
        );
        let bad_selector = watcher::Error::WatchStartFailed(kube::Error::Api(status(
            400,
            "BadRequest",
            "unable to parse requirement",
        )));
        assert!(fatal_watch_error(&bad_selector).is_some());
        let gone = watcher::Error::WatchError(status(410, "Expired", "too old resource version"));
        assert!(fatal_watch_error(&gone).is_none());
        let unavailable = watcher::Error::InitialListFailed(kube::Error::Api(status(
            503,
            "ServiceUnavailable",
            "x",
        )));
        assert!(fatal_watch_error(&unavailable).is_none());
        assert!(fatal_watch_error(&watcher::Error::NoResourceVersion).is_none());
    }

    #[test]
    fn namespace_resolution_order() {
        let dir = std::env::temp_dir().join(format!("wl-ns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("namespace");
        std::fs::write(&file, "from-sa\n").unwrap();
        assert_eq!(
            resolve_namespace(Some("flag"), Some("op"), &file).unwrap(),
            "flag"
        );
        assert_eq!(
            resolve_namespace(Some(" "), Some("op"), &file).unwrap(),
            "op"
        );
        assert_eq!(resolve_namespace(None, None, &file).unwrap(), "from-sa");
        let missing = dir.join("missing");
        let e = resolve_namespace(None, Some(""), &missing).unwrap_err();
        assert!(e.to_string().contains("--namespace"), "{e}");
        assert_eq!(e.exit_code(), EXIT_USAGE);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_name_the_pods_and_map_to_exit_codes() {
        let e = Error::Timeout {
            after: Duration::from_secs(600),
            mode: Mode::Ready,
            waiting: vec![
                ("w-0".into(), "phase Pending".into()),
                ("w-1".into(), "not found yet".into()),
            ],
        };
        assert_eq!(
            e.to_string(),
            "timed out after 10m waiting for pods to be ready; still waiting for w-0 (phase Pending), w-1 (not found yet)"
        );
        assert_eq!(e.exit_code(), EXIT_TIMEOUT);
        let e = Error::PodFailed {
            pod: "w-1".into(),
            reason: "phase Failed".into(),
        };
        assert_eq!(e.to_string(), "pod w-1 failed: phase Failed");
        assert_eq!(e.exit_code(), EXIT_POD_FAILED);
        assert_eq!(e.pod(), Some("w-1"));
    }
}
