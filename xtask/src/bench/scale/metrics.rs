//! Prometheus text from the operator's and the API server's /metrics, and
//! the figures derived from two scrapes.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use kube::Client;

use super::procs::http_get;

/// One sample of the Prometheus text format: name, labels, value.
#[derive(Debug, Clone, Default)]
pub(super) struct Metrics(pub(super) Vec<(String, BTreeMap<String, String>, f64)>);

impl Metrics {
    pub(super) fn parse(text: &str) -> Metrics {
        let mut out = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = match line.rsplit_once(' ') {
                Some(x) => x,
                None => continue,
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (series, ""),
            };
            let mut map = BTreeMap::new();
            for kv in labels.split(',').filter(|s| !s.is_empty()) {
                if let Some((k, v)) = kv.split_once('=') {
                    map.insert(k.to_string(), v.trim_matches('"').to_string());
                }
            }
            out.push((name.to_string(), map, value));
        }
        Metrics(out)
    }

    pub(super) fn sum(
        &self,
        name: &str,
        filter: impl Fn(&BTreeMap<String, String>) -> bool,
    ) -> f64 {
        self.0
            .iter()
            .filter(|(n, l, _)| n == name && filter(l))
            .map(|(_, _, v)| v)
            .sum()
    }

    pub(super) fn get(&self, name: &str) -> f64 {
        self.sum(name, |_| true)
    }

    /// Requests by verb.
    pub(super) fn requests_by_verb(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (n, l, v) in &self.0 {
            if n == "dgl_operator_api_requests_total" {
                *out.entry(l.get("verb").cloned().unwrap_or_default())
                    .or_insert(0.0) += v;
            }
        }
        out
    }

    pub(super) fn requests_by_verb_resource(&self) -> BTreeMap<(String, String), f64> {
        let mut out = BTreeMap::new();
        for (n, l, v) in &self.0 {
            if n == "dgl_operator_api_requests_total" {
                let key = (
                    l.get("verb").cloned().unwrap_or_default(),
                    l.get("resource").cloned().unwrap_or_default(),
                );
                *out.entry(key).or_insert(0.0) += v;
            }
        }
        out
    }

    /// Cumulative buckets (le, count) of a histogram.
    pub(super) fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        let bucket = format!("{name}_bucket");
        let mut b: Vec<(f64, f64)> = self
            .0
            .iter()
            .filter(|(n, _, _)| *n == bucket)
            .filter_map(|(_, l, v)| {
                let le = l.get("le")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, *v))
            })
            .collect();
        b.sort_by(|a, b| a.0.total_cmp(&b.0));
        b
    }
}

/// histogram_quantile over the difference of two scrapes (linear within a bucket).
pub(super) fn histogram_quantile(
    q: f64,
    before: &[(f64, f64)],
    after: &[(f64, f64)],
) -> Option<f64> {
    let diff: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, c)| {
            let b = before
                .iter()
                .find(|(l, _)| l == le)
                .map(|x| x.1)
                .unwrap_or(0.0);
            (*le, c - b)
        })
        .collect();
    let total = diff.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for (le, c) in &diff {
        if *c >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let in_bucket = c - prev.1;
            let frac = if in_bucket > 0.0 {
                (rank - prev.1) / in_bucket
            } else {
                1.0
            };
            return Some(prev.0 + (le - prev.0) * frac);
        }
        prev = (*le, *c);
    }
    None
}

pub(super) async fn scrape(port: u16) -> Result<Metrics> {
    let (code, body) = http_get(port, "/metrics").await?;
    if code != 200 {
        bail!("operator /metrics answered {code}: {body}");
    }
    Ok(Metrics::parse(&body))
}

pub(super) async fn scrape_opt(port: Option<u16>) -> Result<Option<Metrics>> {
    Ok(match port {
        Some(p) => Some(scrape(p).await?),
        None => None,
    })
}

/// Our operator's own counters between the scrapes before the jobs (m0),
/// after the cleanup (m1) and after settling (m2).
pub(super) fn own_metrics(
    m0: &Metrics,
    m1: &Metrics,
    m2: &Metrics,
    n: f64,
    updates: u64,
) -> OwnMetrics {
    let (requests_per_job, requests_detail) = requests_per_job(m0, m1, n);
    let hist = "dgl_operator_reconcile_duration_seconds";
    let status_writes =
        m1.get("dgl_operator_status_writes_total") - m0.get("dgl_operator_status_writes_total");
    let reconciles = m1.get(&format!("{hist}_count")) - m0.get(&format!("{hist}_count"));
    OwnMetrics {
        requests_per_job,
        requests_detail,
        status_writes_per_job: status_writes / n,
        noop_status_writes: status_writes - updates as f64,
        reconciles_per_job: reconciles / n,
        reconcile_p50_ms: histogram_quantile(0.5, &m0.buckets(hist), &m1.buckets(hist))
            .map(|s| s * 1000.0),
        reconcile_p99_ms: histogram_quantile(0.99, &m0.buckets(hist), &m1.buckets(hist))
            .map(|s| s * 1000.0),
        reconcile_errors: m2.get("dgl_operator_reconcile_errors_total")
            - m0.get("dgl_operator_reconcile_errors_total"),
        throttled_seconds: m1.get("dgl_operator_client_throttled_seconds_total")
            - m0.get("dgl_operator_client_throttled_seconds_total"),
    }
}

/// (after - before) / n per key, keys that grew only.
pub(super) fn per_job_diff(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    n: f64,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, c)| (k.clone(), (c - before.get(k).copied().unwrap_or(0.0)) / n))
        .filter(|(_, c)| *c > 0.0)
        .collect()
}

/// The operator's requests between two scrapes, per job: by verb, and by
/// verb and resource.
pub(super) fn requests_per_job(
    m0: &Metrics,
    m1: &Metrics,
    n: f64,
) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let by_verb = per_job_diff(&m0.requests_by_verb(), &m1.requests_by_verb(), n);
    let flat = |m: &Metrics| {
        m.requests_by_verb_resource()
            .into_iter()
            .map(|((v, r), c)| (format!("{v} {r}"), c))
            .collect::<BTreeMap<_, _>>()
    };
    (by_verb, per_job_diff(&flat(m0), &flat(m1), n))
}

/// The API server's own metrics.
pub(super) async fn apiserver_scrape(client: &Client) -> Result<Metrics> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    Ok(Metrics::parse(&client.request_text(req).await?))
}

/// Requests served, all clients, watches excluded.
pub(super) fn requests_total(m: &Metrics) -> f64 {
    m.sum("apiserver_request_total", |l| {
        l.get("verb").is_none_or(|v| v != "WATCH")
    })
}

/// Requests served by verb and resource[/subresource], all clients,
/// watches excluded.
pub(super) fn by_verb_resource(m: &Metrics) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (n, l, v) in &m.0 {
        let verb = l.get("verb").map(String::as_str).unwrap_or("");
        if n != "apiserver_request_total" || verb == "WATCH" {
            continue;
        }
        let res = l.get("resource").map(String::as_str).unwrap_or("");
        let key = match l.get("subresource").map(String::as_str) {
            Some(s) if !s.is_empty() => format!("{verb} {res}/{s}"),
            _ => format!("{verb} {res}"),
        };
        *out.entry(key).or_insert(0.0) += v;
    }
    out
}

/// The latency histogram of writes, all clients (buckets summed over
/// resources).
pub(super) fn write_buckets(m: &Metrics) -> Vec<(f64, f64)> {
    let mut buckets: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (n, l, v) in &m.0 {
        let write = l
            .get("verb")
            .is_some_and(|v| matches!(v.as_str(), "POST" | "PATCH" | "PUT" | "DELETE" | "APPLY"));
        if n == "apiserver_request_duration_seconds_bucket" && write {
            if let Some(le) = l.get("le") {
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::NAN)
                };
                buckets.entry(le.clone()).or_insert((bound, 0.0)).1 += v;
            }
        }
    }
    let mut b: Vec<(f64, f64)> = buckets
        .into_values()
        .filter(|(le, _)| !le.is_nan())
        .collect();
    b.sort_by(|a, b| a.0.total_cmp(&b.0));
    b
}

/// Our operator's own counters (its /metrics), per phase.
pub(super) struct OwnMetrics {
    pub(super) requests_per_job: BTreeMap<String, f64>,
    pub(super) requests_detail: BTreeMap<String, f64>,
    pub(super) status_writes_per_job: f64,
    pub(super) noop_status_writes: f64,
    pub(super) reconciles_per_job: f64,
    pub(super) reconcile_p50_ms: Option<f64>,
    pub(super) reconcile_p99_ms: Option<f64>,
    pub(super) reconcile_errors: f64,
    pub(super) throttled_seconds: f64,
}
