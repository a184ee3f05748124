//! A phase's figures: markdown table rows, details and a JSON line.

use std::collections::BTreeMap;

use serde_json::json;

use super::metrics::OwnMetrics;
use super::spec::{Mode, Subject};

pub(super) struct Report {
    pub(super) label: String,
    pub(super) subject: Subject,
    pub(super) namespace: String,
    pub(super) jobs: usize,
    pub(super) workers: u32,
    pub(super) pods_per_job: u32,
    pub(super) operator_args: String,
    pub(super) scheduler: String,
    pub(super) first_create_to_last_pod: Option<f64>,
    /// First job's creation → the last job launched: its ConfigMap holding
    /// the run (ours), its launcher pod created (an MPIJob's, created once
    /// every worker is Ready).
    pub(super) first_create_to_last_launch: Option<f64>,
    pub(super) jobs_created_in: Option<f64>,
    /// Per job, creation → all pods seen: p50, p95, p99.
    pub(super) per_job: [f64; 3],
    pub(super) per_job_max: f64,
    /// p50/p95/p99 of the operator's share of a job's time to all pods.
    pub(super) reaction: [f64; 3],
    /// p50/p95/p99 of the scheduler's and kwok's share (pod created → Ready).
    pub(super) environment: [f64; 3],
    /// Requests the API server served from the first job's creation until
    /// the cleanup was done, from all clients (watches excluded).
    pub(super) apiserver_requests: f64,
    /// The same by verb and resource, per job.
    pub(super) apiserver_detail: BTreeMap<String, f64>,
    /// Requests of the operator until the settle period after the cleanup
    /// has passed (its FlowSchema's dispatched requests, watches included).
    pub(super) operator_requests: f64,
    /// The operator's requests per second with no job (leader election,
    /// resyncs), over `--idle-seconds`.
    pub(super) idle_requests_per_s: f64,
    /// Fewest fake nodes Ready at once during the run (all, unless kwok's
    /// heartbeats fell behind: then pods were marked NotReady too).
    pub(super) min_nodes_ready: usize,
    pub(super) nodes: usize,
    /// p50/p99 (ms) of the API server's latency for writes, all clients.
    pub(super) apiserver_write_ms: [Option<f64>; 2],
    pub(super) jobs_without_all_pods: usize,
    pub(super) all_succeeded: Option<f64>,
    /// First job's creation → every pod that cleanPodPolicy deletes gone.
    pub(super) cleanup_done: Option<f64>,
    pub(super) succeeded: usize,
    pub(super) failed: usize,
    pub(super) pods_seen: usize,
    /// Operator CPU from the first job until all finished, until the
    /// cleanup was done, and after settling.
    pub(super) cpu_seconds: f64,
    pub(super) cpu_seconds_cleanup: f64,
    pub(super) cpu_seconds_settled: f64,
    pub(super) idle_rss_mib: f64,
    pub(super) peak_rss_mib: f64,
    pub(super) final_rss_mib: f64,
    pub(super) own: Option<OwnMetrics>,
    pub(super) log_warnings: usize,
    pub(super) first_warnings: Vec<String>,
    pub(super) components_cpu: Vec<(String, f64)>,
    pub(super) load_start: String,
    pub(super) load_end: String,
}

pub(super) fn secs(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "—".into())
}

impl Report {
    pub(super) fn header() -> String {
        "| run | jobs x workers (mode) | first job → last pod (s) | per job → all pods p50/p95/p99 (s) | all Succeeded (s) | operator CPU (s) | RSS idle / peak / final (MiB) | API requests per job (verb) | status writes per job (no-op total) | reconciles per job, p50/p99 (ms) | errors |\n\
         |---|---|---|---|---|---|---|---|---|---|---|"
            .to_string()
    }

    /// The table of `--peer` runs: the same figures for every phase.
    pub(super) fn compare_header() -> String {
        "| run | operator, jobs | jobs x workers (pods per job) | load avg at start | first job → last pod (s) | first job → last launch (s) | per job → all pods p50 / p95 / p99 (s) | all Succeeded (s) | cleanup done (s) | operator CPU until cleanup (s) | RSS idle / peak (MiB) | API requests per job: operator / all clients |\n\
         |---|---|---|---|---:|---:|---|---:|---:|---:|---|---|"
            .to_string()
    }

    pub(super) fn succeeded_cell(&self) -> String {
        match self.all_succeeded {
            Some(s) => format!("{s:.1}"),
            None => format!(
                "— ({} of {} ok, {} failed)",
                self.succeeded, self.jobs, self.failed
            ),
        }
    }

    pub(super) fn compare_row(&self) -> String {
        let n = self.jobs.max(1) as f64;
        format!(
            "| {} | {} | {} x {} ({}) | {} | {} | {} | {:.1} / {:.1} / {:.1} | {} | {} | {:.1} | {:.1} / {:.1} | {:.1} / {:.1} |",
            if self.label.is_empty() { "-" } else { &self.label },
            self.subject.describe(),
            self.jobs,
            self.workers,
            self.pods_per_job,
            self.load_start,
            secs(self.first_create_to_last_pod),
            secs(self.first_create_to_last_launch),
            self.per_job[0],
            self.per_job[1],
            self.per_job[2],
            self.succeeded_cell(),
            secs(self.cleanup_done),
            self.cpu_seconds_cleanup,
            self.idle_rss_mib,
            self.peak_rss_mib,
            self.operator_requests / n,
            self.apiserver_requests / n,
        )
    }

    pub(super) fn mode(&self) -> &'static str {
        match self.subject {
            Subject::Ours(Mode::DglApi) => "DGL-API",
            Subject::Ours(Mode::Skip) => "Skip",
            Subject::Mpi(_) => "MPIJob",
        }
    }

    /// The row of our operator's own table (its counters).
    pub(super) fn row(&self) -> String {
        let Some(own) = &self.own else {
            return String::new();
        };
        let reqs = own
            .requests_per_job
            .iter()
            .map(|(v, c)| format!("{v} {c:.1}"))
            .collect::<Vec<_>>()
            .join(", ");
        let ms = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "—".into());
        format!(
            "| {} | {} x {} ({}) | {} | {:.1} / {:.1} / {:.1} | {} | {:.1} | {:.1} / {:.1} / {:.1} | {} | {:.1} ({:.0}) | {:.1}, {} / {} | {} |",
            if self.label.is_empty() { "-" } else { &self.label },
            self.jobs,
            self.workers,
            self.mode(),
            secs(self.first_create_to_last_pod),
            self.per_job[0],
            self.per_job[1],
            self.per_job[2],
            self.succeeded_cell(),
            self.cpu_seconds,
            self.idle_rss_mib,
            self.peak_rss_mib,
            self.final_rss_mib,
            reqs,
            own.status_writes_per_job,
            own.noop_status_writes,
            own.reconciles_per_job,
            ms(own.reconcile_p50_ms),
            ms(own.reconcile_p99_ms),
            own.reconcile_errors as u64 + self.log_warnings as u64,
        )
    }

    pub(super) fn details(&self) -> String {
        let mut out = String::new();
        self.details_jobs(&mut out);
        self.details_requests(&mut out);
        out
    }

    /// The details' jobs, timing, CPU and memory lines.
    fn details_jobs(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "details: {} (namespace {})",
            self.subject.describe(),
            self.namespace
        );
        let _ = writeln!(out, "  operator args: {}", self.operator_args);
        let _ = writeln!(out, "  scheduler: {}", self.scheduler);
        let _ = writeln!(
            out,
            "  pods seen {} (expected {}); jobs Succeeded {}, Failed {}; jobs without all pods {}",
            self.pods_seen,
            self.jobs * self.pods_per_job as usize,
            self.succeeded,
            self.failed,
            self.jobs_without_all_pods
        );
        if self.min_nodes_ready < self.nodes {
            let _ = writeln!(
                out,
                "  WARNING: at one point only {} of {} fake nodes were Ready: the controller-manager marks their pods NotReady, which stalls jobs (environment, not operator)",
                self.min_nodes_ready, self.nodes
            );
        }
        let _ = writeln!(
            out,
            "  all jobs created in {} s; slowest job to all pods {:.1} s; all finished at {} s, cleanup done at {} s",
            secs(self.jobs_created_in),
            self.per_job_max,
            secs(self.all_succeeded),
            secs(self.cleanup_done)
        );
        let _ = writeln!(
            out,
            "  per job, operator reacting (event → next pods) p50/p95/p99: {:.1} / {:.1} / {:.1} s; \
             scheduler + kwok (pods created → Ready) p50/p95/p99: {:.1} / {:.1} / {:.1} s",
            self.reaction[0],
            self.reaction[1],
            self.reaction[2],
            self.environment[0],
            self.environment[1],
            self.environment[2]
        );
        let _ = writeln!(
            out,
            "  operator CPU {:.1} s until all finished, {:.1} s until cleanup done, {:.1} s including settle; RSS idle / peak / final {:.1} / {:.1} / {:.1} MiB",
            self.cpu_seconds, self.cpu_seconds_cleanup, self.cpu_seconds_settled,
            self.idle_rss_mib, self.peak_rss_mib, self.final_rss_mib
        );
    }

    /// The details' request counts, latency, log warnings and load lines.
    fn details_requests(&self, out: &mut String) {
        use std::fmt::Write;
        let n = self.jobs.max(1) as f64;
        let _ = writeln!(
            out,
            "  API server requests until cleanup done, all clients (no watches): {:.0} ({:.1} per job); the operator's (its FlowSchema, until settled): {:.0} ({:.1} per job)",
            self.apiserver_requests,
            self.apiserver_requests / n,
            self.operator_requests,
            self.operator_requests / n,
        );
        let _ = writeln!(
            out,
            "  the operator's requests with no job: {:.2}/s",
            self.idle_requests_per_s
        );
        let _ = writeln!(out, "  all clients' requests per job by verb and resource:");
        for (k, v) in self.apiserver_detail.iter().filter(|(_, v)| **v >= 0.05) {
            let _ = writeln!(out, "    {k:<40} {v:.2}");
        }
        if let Some(own) = &self.own {
            let _ = writeln!(out, "  the operator's requests per job (its own counter):");
            for (k, v) in &own.requests_detail {
                let _ = writeln!(out, "    {k:<40} {v:.2}");
            }
            let _ = writeln!(
                out,
                "  client-side throttling: {:.1} s waited in total; reconcile errors {}",
                own.throttled_seconds, own.reconcile_errors
            );
        }
        let _ = writeln!(
            out,
            "  API server latency of writes (all clients) p50/p99: {} / {} ms",
            self.apiserver_write_ms[0]
                .map(|v| format!("{v:.0}"))
                .unwrap_or("—".into()),
            self.apiserver_write_ms[1]
                .map(|v| format!("{v:.0}"))
                .unwrap_or("—".into()),
        );
        let _ = writeln!(out, "  warning/error log lines {}", self.log_warnings);
        for w in &self.first_warnings {
            let _ = writeln!(out, "    {w}");
        }
        let _ = writeln!(out, "  CPU seconds of the other processes during the run:");
        for (n, c) in &self.components_cpu {
            let _ = writeln!(out, "    {n:<26} {c:.1}");
        }
        let _ = writeln!(
            out,
            "  load average at start {}, at end {}",
            self.load_start, self.load_end
        );
    }

    pub(super) fn json(&self) -> serde_json::Value {
        let own = self.own.as_ref().map(|o| {
            json!({
                "requests_per_job": o.requests_per_job,
                "requests_per_job_detail": o.requests_detail,
                "status_writes_per_job": o.status_writes_per_job,
                "noop_status_writes": o.noop_status_writes,
                "reconciles_per_job": o.reconciles_per_job,
                "reconcile_ms": {"p50": o.reconcile_p50_ms, "p99": o.reconcile_p99_ms},
                "reconcile_errors": o.reconcile_errors,
                "throttled_s": o.throttled_seconds,
            })
        });
        json!({
            "label": self.label,
            "subject": self.subject.describe(),
            "namespace": self.namespace,
            "jobs": self.jobs,
            "workers": self.workers,
            "pods_per_job": self.pods_per_job,
            "mode": self.mode(),
            "operator_args": self.operator_args,
            "scheduler": self.scheduler,
            "first_create_to_last_pod_s": self.first_create_to_last_pod,
            "first_create_to_last_launch_s": self.first_create_to_last_launch,
            "jobs_created_in_s": self.jobs_created_in,
            "per_job_all_pods_s": {"p50": self.per_job[0], "p95": self.per_job[1],
                                   "p99": self.per_job[2], "max": self.per_job_max},
            "operator_reaction_s": {"p50": self.reaction[0], "p95": self.reaction[1], "p99": self.reaction[2]},
            "scheduler_kwok_s": {"p50": self.environment[0], "p95": self.environment[1], "p99": self.environment[2]},
            "all_succeeded_s": self.all_succeeded,
            "cleanup_done_s": self.cleanup_done,
            "apiserver_requests": self.apiserver_requests,
            "apiserver_requests_per_job_detail": self.apiserver_detail,
            "operator_requests": self.operator_requests,
            "operator_idle_requests_per_s": self.idle_requests_per_s,
            "min_nodes_ready": self.min_nodes_ready,
            "apiserver_write_ms": {"p50": self.apiserver_write_ms[0], "p99": self.apiserver_write_ms[1]},
            "succeeded": self.succeeded,
            "failed": self.failed,
            "operator_cpu_s": self.cpu_seconds,
            "operator_cpu_until_cleanup_s": self.cpu_seconds_cleanup,
            "rss_mib": {"idle": self.idle_rss_mib, "peak": self.peak_rss_mib, "final": self.final_rss_mib},
            "own": own,
            "log_warnings": self.log_warnings,
            "components_cpu_s": self.components_cpu.iter().cloned().collect::<BTreeMap<_, _>>(),
            "load_start": self.load_start,
            "load_end": self.load_end,
        })
    }
}
