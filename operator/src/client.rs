//! The operator's API client: kube's default HTTP stack with one more tower
//! layer in front, which
//!
//! - counts every request by verb and resource
//!   (`dgl_operator_api_requests_total{verb,resource}`), and
//! - applies a client-side rate limit (token buckets, `--kube-api-qps` /
//!   `--kube-api-burst`), like client-go's default limiter: kube-rs has none.
//!
//! The reconciles' client has two buckets: one for the work (the jobs' pods
//! and the objects they need) and one for the reports (DGLJob status writes
//! and Events), so that under load what the operator reports never delays a
//! pod, and a pod creation never delays a status write. client-go gives
//! operators the same split: one limiter per clientset, so mpi-operator's
//! MPIJob status writes do not share its pods' bucket, and kube-scheduler
//! sends its Events through a client of their own.
//!
//! The limiter reserves a token when a request is issued and, when the
//! bucket is empty, delays that request until its token is due. Requests are
//! never dropped; a burst of reconciles is spread out at `qps` per second
//! after the first `burst` requests. Watches count once, when they are opened
//! (as in client-go).
//!
//! Events are the one exception to first come, first served: an Event only
//! takes a token nobody else is waiting for (client-go sends Events from a
//! queue of their own, off the reconcile's path, for the same reason), so
//! under load they do not delay the pods and status writes that make jobs
//! progress. None waits longer than [`BACKGROUND_MAX_WAIT`] for a spare
//! token: after that it queues like any other request.
//!
//! Every request has a deadline ([`Deadlines`]): connecting and writing are
//! bounded by kube's connector, and the layer bounds the wait for the
//! response's headers (a watch's included), so a half-open connection to the
//! API server fails a reconcile, a lease renewal or a token review instead
//! of hanging it. A client that never watches (leader election, /metrics
//! auth) also bounds every read of the body ([`for_requests_only`]); the
//! reconciles' client does not, since a quiet watch may send nothing for
//! minutes (kube's watcher has its own idle timeout for those).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Method, Request, Uri};
use kube::client::ClientBuilder;
use kube::{Client, Config};
use tower_layer::Layer;
use tower_service::Service;

use crate::metrics::{ApiRequestLabels, Metrics};

/// Client-side limits on requests to the API server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Sustained requests per second; 0 or less: no limit.
    pub qps: f32,
    /// Requests allowed at once above the sustained rate (bucket size).
    pub burst: u32,
}

impl RateLimit {
    pub const UNLIMITED: RateLimit = RateLimit { qps: 0.0, burst: 0 };
}

/// The longest an Event waits for a token nobody else wants before it
/// queues for one like every other request.
pub const BACKGROUND_MAX_WAIT: Duration = Duration::from_secs(30);

/// How long a request to the API server may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// Opening the TCP (and TLS) connection.
    pub connect: Duration,
    /// Sending the request, and then until the response's headers arrive.
    pub request: Duration,
}

impl Deadlines {
    /// `config` with connect and write timeouts set; the read side is the
    /// layer's (see the module's comment).
    pub fn apply(&self, mut config: Config) -> Config {
        config.connect_timeout = Some(self.connect);
        config.write_timeout = Some(self.request);
        config
    }
}

/// `config` for a client that never watches: every read of a response is
/// bounded by `deadlines.request` too, counted from when the request was
/// written (not from when its pooled connection went idle).
pub fn for_requests_only(config: Config, deadlines: Deadlines) -> Config {
    let mut config = deadlines.apply(config);
    config.read_timeout = Some(deadlines.request);
    config.reset_reader_on_write = true;
    config
}

/// A client from `config` with request counting, one rate limit for all
/// its requests and `deadlines` on each.
pub fn build(
    config: Config,
    limit: RateLimit,
    deadlines: Deadlines,
    metrics: Arc<Metrics>,
) -> kube::Result<Client> {
    let bucket = TokenBucket::new(limit).map(Arc::new);
    let layer = ApiLayer {
        work: bucket.clone(),
        report: bucket,
        deadline: Some(deadlines.request),
        metrics,
    };
    Ok(ClientBuilder::try_from(deadlines.apply(config))?
        .with_layer(&layer)
        .build())
}

/// A client from `config` with request counting and a rate limit of its own
/// for each [`Stream`]: `work` for every request but the reports, `report`
/// for DGLJob status writes and Events.
pub fn build_split(
    config: Config,
    work: RateLimit,
    report: RateLimit,
    deadlines: Deadlines,
    metrics: Arc<Metrics>,
) -> kube::Result<Client> {
    let layer = ApiLayer {
        work: TokenBucket::new(work).map(Arc::new),
        report: TokenBucket::new(report).map(Arc::new),
        deadline: Some(deadlines.request),
        metrics,
    };
    Ok(ClientBuilder::try_from(deadlines.apply(config))?
        .with_layer(&layer)
        .build())
}

/// Which bucket of a [`build_split`] client a request takes its token from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Everything that makes jobs progress: pods, their supporting objects,
    /// the launch, cleanups, and the watches.
    Work,
    /// What the operator reports: DGLJob status writes and Events.
    Report,
}

impl Stream {
    /// The stream of a request, by its resource as [`classify`] names it.
    pub fn of(resource: &str) -> Stream {
        match resource {
            "dgljobs/status" | "events" => Stream::Report,
            _ => Stream::Work,
        }
    }
}

/// A token bucket that hands out reservations: `reserve` takes one token and
/// says how long the caller must wait for it (none while tokens are left).
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// Tokens available (negative: owed to requests already waiting) and
    /// when that was computed.
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// None when `limit` does not limit anything.
    pub fn new(limit: RateLimit) -> Option<TokenBucket> {
        if limit.qps <= 0.0 || !limit.qps.is_finite() {
            return None;
        }
        let burst = f64::from(limit.burst.max(1));
        Some(TokenBucket {
            qps: f64::from(limit.qps),
            burst,
            state: Mutex::new((burst, Instant::now())),
        })
    }

    /// The state with the tokens accrued until `now` added (capped at the
    /// burst), locked for the caller to take from.
    fn refilled(&self, now: Instant) -> std::sync::MutexGuard<'_, (f64, Instant)> {
        let mut s = self.state.lock().expect("token bucket lock");
        let elapsed = now.saturating_duration_since(s.1).as_secs_f64();
        s.1 = s.1.max(now);
        s.0 = (s.0 + elapsed * self.qps).min(self.burst);
        s
    }

    /// How long until `tokens` more have accrued; a tiny qps makes that too
    /// long for a Duration: "forever".
    fn time_for(&self, tokens: f64) -> Duration {
        Duration::try_from_secs_f64(tokens / self.qps).unwrap_or(Duration::MAX)
    }

    /// Takes a token at `now`; returns how long to wait before using it.
    pub fn reserve_at(&self, now: Instant) -> Option<Duration> {
        let mut s = self.refilled(now);
        s.0 -= 1.0;
        (s.0 < 0.0).then(|| self.time_for(-s.0))
    }

    pub fn reserve(&self) -> Option<Duration> {
        self.reserve_at(Instant::now())
    }

    /// Takes a token at `now` only if one is there: for callers that answer
    /// "too many requests" rather than wait.
    pub fn try_take_at(&self, now: Instant) -> bool {
        self.take_spare_at(now).is_ok()
    }

    /// Takes a token at `now` if one is there that no reservation is owed;
    /// else says how long until one would be, if nobody else asked.
    pub fn take_spare_at(&self, now: Instant) -> Result<(), Duration> {
        let mut s = self.refilled(now);
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            Ok(())
        } else {
            Err(self.time_for(1.0 - s.0))
        }
    }

    /// Waits for a spare token (see `take_spare_at`), at most `max_wait`,
    /// then for a reserved one; returns how long it waited.
    pub async fn background(&self, max_wait: Duration) -> Duration {
        let start = Instant::now();
        let deadline = start + max_wait;
        loop {
            let now = Instant::now();
            match self.take_spare_at(now) {
                Ok(()) => break,
                // checked: a tiny qps makes the wait Duration::MAX.
                Err(wait) if now.checked_add(wait).is_some_and(|t| t < deadline) => {
                    tokio::time::sleep(wait).await
                }
                Err(_) => {
                    if let Some(w) = self.reserve_at(now) {
                        tokio::time::sleep(w).await;
                    }
                    break;
                }
            }
        }
        start.elapsed()
    }
}

/// The tower layer: counting, the rate limits (one bucket per [`Stream`];
/// the same bucket twice for a client with one limit) and the deadline for
/// a response's headers, counted once the request has its token.
#[derive(Clone)]
pub struct ApiLayer {
    work: Option<Arc<TokenBucket>>,
    report: Option<Arc<TokenBucket>>,
    deadline: Option<Duration>,
    metrics: Arc<Metrics>,
}

/// The error of a request whose response did not begin within its deadline.
#[derive(Debug, thiserror::Error)]
#[error("the API server did not answer {verb} {resource} within {deadline:?}")]
pub struct DeadlineExceeded {
    pub verb: &'static str,
    pub resource: String,
    pub deadline: Duration,
}

impl<S> Layer<S> for ApiLayer {
    type Service = ApiService<S>;
    fn layer(&self, inner: S) -> ApiService<S> {
        ApiService {
            inner,
            work: self.work.clone(),
            report: self.report.clone(),
            deadline: self.deadline,
            metrics: self.metrics.clone(),
        }
    }
}

pub struct ApiService<S> {
    inner: S,
    work: Option<Arc<TokenBucket>>,
    report: Option<Arc<TokenBucket>>,
    deadline: Option<Duration>,
    metrics: Arc<Metrics>,
}

/// `fut` bounded by `deadline` (none: unbounded), its error boxed.
async fn bounded<F, T, E>(
    fut: F,
    deadline: Option<Duration>,
    verb: &'static str,
    resource: String,
) -> Result<T, BoxError>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    let Some(deadline) = deadline else {
        return fut.await.map_err(Into::into);
    };
    match tokio::time::timeout(deadline, fut).await {
        Ok(r) => r.map_err(Into::into),
        Err(_) => Err(Box::new(DeadlineExceeded {
            verb,
            resource,
            deadline,
        })),
    }
}

/// The error type of kube's HTTP stack, and so of this layer.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, B> Service<Request<B>> for ApiService<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Into<BoxError> + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let (verb, resource) = classify(req.method(), req.uri());
        let background = verb == "create" && resource == "events";
        let bucket = match Stream::of(&resource) {
            Stream::Work => self.work.clone(),
            Stream::Report => self.report.clone(),
        };
        self.metrics
            .api_requests
            .get_or_create(&ApiRequestLabels {
                verb: verb.to_string(),
                resource: resource.clone(),
            })
            .inc();
        // kube's stack is lazy: nothing is sent before the future is polled.
        let fut = bounded(self.inner.call(req), self.deadline, verb, resource);
        let Some(bucket) = bucket else {
            return Box::pin(fut);
        };
        let metrics = self.metrics.clone();
        if background {
            return Box::pin(async move {
                let waited = bucket.background(BACKGROUND_MAX_WAIT).await;
                metrics
                    .client_throttled_seconds
                    .inc_by(waited.as_secs_f64());
                fut.await
            });
        }
        let wait = bucket.reserve();
        if let Some(w) = wait {
            metrics.client_throttled_seconds.inc_by(w.as_secs_f64());
        }
        Box::pin(async move {
            if let Some(w) = wait {
                tokio::time::sleep(w).await;
            }
            fut.await
        })
    }
}

/// The Kubernetes verb and resource (with subresource) of a request, as the
/// API server's audit log names them.
pub fn classify(method: &Method, uri: &Uri) -> (&'static str, String) {
    let path = uri.path();
    let query = uri.query().unwrap_or("");
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest: &[&str] = match segs.as_slice() {
        ["api", _v, rest @ ..] => rest,
        ["apis", _g, _v, rest @ ..] => rest,
        _ => return (other_verb(method), "nonresource".into()),
    };
    let rest = match rest {
        ["namespaces", _ns, more @ ..] if !more.is_empty() => more,
        other => other,
    };
    let (resource, name, sub) = match rest {
        [] => ("", None, None),
        [r] => (*r, None, None),
        [r, n] => (*r, Some(*n), None),
        [r, n, s, ..] => (*r, Some(*n), Some(*s)),
    };
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if name.is_none() => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if name.is_none() => "deletecollection",
        Method::DELETE => "delete",
        _ => other_verb(method),
    };
    let resource = match sub {
        Some(s) => format!("{resource}/{s}"),
        None => resource.to_string(),
    };
    (verb, resource)
}

fn other_verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

#[cfg(test)]
mod tests;
