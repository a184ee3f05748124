//! Prometheus metrics, named as users know them from Kubeflow's operators
//! (`*_jobs_created_total`, `*_jobs_successful_total`, `*_jobs_failed_total`).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabel {
    pub job_namespace: String,
}

/// Verb (`get`, `list`, `watch`, `create`, `patch`, ...) and resource
/// (`pods`, `dgljobs/status`, ...) of a request to the API server.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiRequestLabels {
    pub verb: String,
    pub resource: String,
}

/// Every metric the operator exports.
pub struct Metrics {
    registry: Registry,
    pub jobs_created: Family<NamespaceLabel, Counter>,
    pub jobs_successful: Family<NamespaceLabel, Counter>,
    pub jobs_failed: Family<NamespaceLabel, Counter>,
    pub jobs_restarted: Family<NamespaceLabel, Counter>,
    pub reconcile_errors: Counter,
    pub reconcile_duration: Histogram,
    pub status_writes: Counter,
    pub is_leader: Gauge<i64, std::sync::atomic::AtomicI64>,
    /// Kept as an AtomicU64-backed counter for API calls made by reconciles.
    pub api_writes: Counter<u64, AtomicU64>,
    /// Every request the client sent (reconciles, watches, leader election).
    pub api_requests: Family<ApiRequestLabels, Counter>,
    /// Seconds requests waited for the client-side rate limiter.
    pub client_throttled_seconds: Counter<f64, AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("dgl_operator");
        let m = Metrics {
            jobs_created: Family::default(),
            jobs_successful: Family::default(),
            jobs_failed: Family::default(),
            jobs_restarted: Family::default(),
            reconcile_errors: Counter::default(),
            reconcile_duration: Histogram::new([
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            status_writes: Counter::default(),
            is_leader: Gauge::default(),
            api_writes: Counter::default(),
            api_requests: Family::default(),
            client_throttled_seconds: Counter::default(),
            registry: Registry::default(),
        };
        registry.register(
            "jobs_created",
            "DGLJobs seen for the first time",
            m.jobs_created.clone(),
        );
        registry.register(
            "jobs_successful",
            "DGLJobs that succeeded",
            m.jobs_successful.clone(),
        );
        registry.register("jobs_failed", "DGLJobs that failed", m.jobs_failed.clone());
        registry.register(
            "jobs_restarted",
            "Restarts of failed runs (backoffLimit)",
            m.jobs_restarted.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that returned an error",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile",
            m.reconcile_duration.clone(),
        );
        registry.register(
            "status_writes",
            "DGLJob status writes",
            m.status_writes.clone(),
        );
        registry.register(
            "api_writes",
            "Create, apply and delete calls made by reconciles",
            m.api_writes.clone(),
        );
        registry.register(
            "api_requests",
            "Requests sent to the API server, by verb and resource",
            m.api_requests.clone(),
        );
        registry.register(
            "client_throttled_seconds",
            "Seconds requests waited for the client-side rate limit (--kube-api-qps/--kube-api-burst)",
            m.client_throttled_seconds.clone(),
        );
        registry.register(
            "is_leader",
            "1 while this replica holds the leader Lease",
            m.is_leader.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String does not fail");
        out
    }

    pub fn ns(namespace: &str) -> NamespaceLabel {
        NamespaceLabel {
            job_namespace: namespace.to_string(),
        }
    }
}

#[cfg(test)]
mod tests;
