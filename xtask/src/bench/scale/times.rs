//! Where each job's time went, from what the watches saw: creation to all
//! pods, the operator reacting and the environment (scheduler + kwok).

use std::time::{Duration, Instant};

use super::spec::{Mode, Subject};
use super::watch::{JobSeen, PodSeen, Seen};

/// Where the jobs' time went, from what the watches saw.
pub(super) struct JobTimes {
    /// Creation to all pods seen, per job, sorted.
    pub(super) per_job: Vec<f64>,
    pub(super) incomplete: usize,
    pub(super) updates: u64,
    pub(super) reaction: Vec<f64>,
    pub(super) environment: Vec<f64>,
    pub(super) last_pod: Option<Duration>,
    /// The last job launched (see `split_job`).
    pub(super) last_launch: Option<Duration>,
    pub(super) succeeded: usize,
    pub(super) failed: usize,
    pub(super) pods_seen: usize,
}

/// One job's pods as the watches saw them: the last of a role seen / Ready.
pub(super) struct RoleTimes {
    pub(super) seen: Option<Instant>,
    pub(super) ready: Option<Instant>,
    pub(super) count: usize,
}

pub(super) fn role_times(s: &Seen, job: &str, role: &str) -> RoleTimes {
    let pods: Vec<&PodSeen> = s
        .pods
        .values()
        .filter(|p| p.job == job && p.role == role)
        .collect();
    let all = |f: &dyn Fn(&PodSeen) -> Option<Instant>| {
        pods.iter()
            .map(|p| f(p))
            .collect::<Option<Vec<_>>>()
            .and_then(|v| v.into_iter().max())
    };
    RoleTimes {
        seen: all(&|p| Some(p.seen)),
        ready: all(&|p| p.ready),
        count: pods.len(),
    }
}

/// One job's time split into the operator reacting (an event seen here →
/// the next pods seen here) and the environment (pods seen → seen Ready
/// with an IP: scheduler + kwok). For an MPIJob "reacting" to Ready workers
/// includes the Job controller creating the launcher pod.
pub(super) fn split_job(
    s: &Seen,
    name: &str,
    created: Instant,
    subject: Subject,
    workers: u32,
) -> Option<(f64, f64)> {
    let d = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
    let w = role_times(s, name, "worker");
    if w.count != workers as usize {
        return None;
    }
    let (w_seen, w_ready) = (w.seen?, w.ready?);
    // When the launcher may train: our ConfigMap launching the run (the
    // launcher pod exists from the start), an MPIJob's launcher pod seen.
    let launch = match subject {
        Subject::Ours(_) => s.jobs.get(name)?.launched?,
        Subject::Mpi(_) => role_times(s, name, "launcher").seen?,
    };
    Some(match subject {
        Subject::Ours(Mode::DglApi) => {
            let p = role_times(s, name, "partitioner");
            let (p_seen, p_ready) = (p.seen?, p.ready?);
            (
                d(created, p_seen) + d(p_ready.max(w_ready), launch),
                d(p_seen, p_ready).max(d(w_seen, w_ready)),
            )
        }
        Subject::Ours(Mode::Skip) | Subject::Mpi(_) => {
            (d(created, w_seen) + d(w_ready, launch), d(w_seen, w_ready))
        }
    })
}

/// Step 8: per-job timings, split into the operator's share and the rest.
pub(super) fn job_times(
    s: &Seen,
    names: &[String],
    subject: Subject,
    workers: u32,
    t0: Instant,
) -> JobTimes {
    let mut per_job: Vec<f64> = Vec::new();
    let mut incomplete = 0;
    let mut updates = 0u64;
    let mut reaction: Vec<f64> = Vec::new();
    let mut environment: Vec<f64> = Vec::new();
    for name in names {
        let j = s.jobs.get(name).cloned().unwrap_or_default();
        updates += j.updates;
        match (j.created, j.all_pods) {
            (Some(c), Some(a)) => per_job.push(a.saturating_duration_since(c).as_secs_f64()),
            _ => incomplete += 1,
        }
        if let Some((r, e)) = j
            .created
            .and_then(|c| split_job(s, name, c, subject, workers))
        {
            reaction.push(r);
            environment.push(e);
        }
    }
    for v in [&mut per_job, &mut reaction, &mut environment] {
        v.sort_by(|a, b| a.total_cmp(b));
    }
    let last_pod = s
        .pods
        .values()
        .map(|p| p.seen)
        .max()
        .map(|t| t.saturating_duration_since(t0));
    let launches: Vec<Instant> = match subject {
        Subject::Ours(_) => names
            .iter()
            .filter_map(|n| s.jobs.get(n).and_then(|j| j.launched))
            .collect(),
        Subject::Mpi(_) => s
            .pods
            .values()
            .filter(|p| p.role == "launcher")
            .map(|p| p.seen)
            .collect(),
    };
    let last_launch = (launches.len() == names.len())
        .then(|| launches.into_iter().max())
        .flatten()
        .map(|t| t.saturating_duration_since(t0));
    let count = |f: &dyn Fn(&JobSeen) -> bool| {
        names
            .iter()
            .filter(|n| s.jobs.get(*n).is_some_and(f))
            .count()
    };
    JobTimes {
        per_job,
        incomplete,
        updates,
        reaction,
        environment,
        last_pod,
        last_launch,
        succeeded: count(&|j| j.succeeded.is_some()),
        failed: count(&|j| j.failed),
        pods_seen: s.pods.len(),
    }
}
