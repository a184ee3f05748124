//! The operator's HTTP endpoints: `/healthz` and `/readyz` for the kubelet,
//! `/metrics` for Prometheus. `/metrics` requires a bearer token that the API
//! server authenticates (TokenReview) and authorizes for `get` on the
//! non-resource URL `/metrics` (SubjectAccessReview), as Kubernetes
//! components and controller-runtime do; `--metrics-auth=none` turns it off.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::Client;

use crate::client::{RateLimit, TokenBucket};
use crate::metrics::Metrics;

#[derive(Clone)]
pub struct ServerState {
    pub metrics: Arc<Metrics>,
    /// Set once leadership (if on) is held and every watch cache has listed once.
    pub ready: Arc<AtomicBool>,
    /// Checks of /metrics tokens; None disables auth.
    pub auth: Option<Arc<MetricsAuth>>,
}

/// Checks bearer tokens for /metrics with the API server, with a client
/// of its own (never the reconciles' rate limit), a short cache of verdicts
/// and a budget: over it, scrapes get 429 instead of queueing reviews.
pub struct MetricsAuth {
    client: Client,
    budget: Option<TokenBucket>,
    ttl: Duration,
    /// sha256 of the token -> (checked at, allowed). Never the token itself.
    cache: Mutex<HashMap<[u8; 32], (Instant, bool)>>,
}

/// What a /metrics token check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Denied,
    /// Not in the cache and the review budget is spent: try again later.
    OverBudget,
}

/// Verdicts kept at most; beyond it the cache starts over (bounded memory
/// against scrapers inventing tokens).
const CACHE_MAX: usize = 1024;

impl MetricsAuth {
    pub fn new(client: Client, budget: RateLimit, ttl: Duration) -> MetricsAuth {
        MetricsAuth {
            client,
            budget: TokenBucket::new(budget),
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub async fn check(&self, token: &str) -> Result<Verdict, kube::Error> {
        use sha2::Digest;
        let key: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some(&(at, allowed)) = self.cache.lock().expect("auth cache").get(&key) {
            if now.saturating_duration_since(at) < self.ttl {
                return Ok(if allowed {
                    Verdict::Allowed
                } else {
                    Verdict::Denied
                });
            }
        }
        if self.budget.as_ref().is_some_and(|b| !b.try_take_at(now)) {
            return Ok(Verdict::OverBudget);
        }
        let allowed = authorize(&self.client, token).await?;
        let mut cache = self.cache.lock().expect("auth cache");
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(key, (Instant::now(), allowed));
        Ok(if allowed {
            Verdict::Allowed
        } else {
            Verdict::Denied
        })
    }
}

pub async fn serve(addr: SocketAddr, state: ServerState) -> std::io::Result<()> {
    serve_on(tokio::net::TcpListener::bind(addr).await?, state).await
}

/// `serve` on a listener already bound (tests bind port 0 and keep it, so no
/// other process can take the port in between).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: ServerState,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state);
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
    axum::serve(listener, app).await
}

async fn readyz(State(s): State<ServerState>) -> Response {
    if s.ready.load(Ordering::Relaxed) {
        "ok".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
    }
}

async fn metrics(State(s): State<ServerState>, headers: HeaderMap) -> Response {
    if let Some(auth) = &s.auth {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let Some(token) = token else {
            return (StatusCode::UNAUTHORIZED, "bearer token required").into_response();
        };
        match auth.check(token).await {
            Ok(Verdict::Allowed) => {}
            Ok(Verdict::Denied) => return (StatusCode::FORBIDDEN, "forbidden").into_response(),
            Ok(Verdict::OverBudget) => {
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [(header::RETRY_AFTER, "1")],
                    "too many token checks; retry later",
                )
                    .into_response()
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics auth check failed");
                return (StatusCode::SERVICE_UNAVAILABLE, "auth check failed").into_response();
            }
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.render(),
    )
        .into_response()
}

async fn authorize(client: &Client, token: &str) -> Result<bool, kube::Error> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    let review = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    let Some(status) = review.status.filter(|s| s.authenticated == Some(true)) else {
        return Ok(false);
    };
    let user = status.user.unwrap_or_default();
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username,
            groups: user.groups,
            uid: user.uid,
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some("/metrics".into()),
                verb: Some("get".into()),
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let sar = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &sar)
        .await?;
    Ok(sar.status.map(|s| s.allowed).unwrap_or(false))
}
