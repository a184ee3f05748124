//! One machine-readable line per job a fault disturbed, so the figures in
//! docs/reliability.md can be re-measured from any log of the chaos runs
//! (the test command's included):
//!
//! ```text
//! chaos-timing fault=Evict variant=evict-ignore run=1 outcome=Succeeded fault_to_end_s=29.3
//! ```
//!
//! `variant` is the job's name without `chaos-`; `fault_to_end_s` runs from
//! the moment the fault was injected to the job's terminal phase. The jobs
//! record themselves ([`record`]) in a task-local list that [`collect`]
//! scopes to one run of one fault.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use dgl_api::DGLJob;
use kube::ResourceExt;

use super::fault::Fault;

/// One job's time from its fault to its end.
pub(super) struct Timing {
    variant: String,
    outcome: String,
    after_fault: Duration,
}

tokio::task_local! {
    static TIMES: RefCell<Vec<Timing>>;
}

/// Records that `job` ended `after_fault` after its fault was injected
/// (nothing outside [`collect`]).
pub(super) fn record(job: &DGLJob, after_fault: Duration) {
    let name = job.name_any();
    let outcome = job
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .map_or("none".to_owned(), |p| format!("{p:?}"));
    let t = Timing {
        variant: name.strip_prefix("chaos-").unwrap_or(&name).to_owned(),
        outcome,
        after_fault,
    };
    let _ = TIMES.try_with(|v| v.borrow_mut().push(t));
}

/// Runs `run` and returns what it recorded.
pub(super) async fn collect<F: Future>(run: F) -> (F::Output, Vec<Timing>) {
    TIMES
        .scope(RefCell::new(Vec::new()), async {
            let out = run.await;
            (out, TIMES.with(|v| v.take()))
        })
        .await
}

/// The line for one recorded job of run `run` (from 1) of `fault`.
pub(super) fn line(fault: Fault, run: u32, t: &Timing) -> String {
    format!(
        "chaos-timing fault={fault:?} variant={} run={run} outcome={} fault_to_end_s={:.1}",
        t.variant,
        t.outcome,
        t.after_fault.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_recorded_job_gives_one_line_and_nothing_leaks_out_of_its_scope() {
        let mut job: DGLJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "dgloperator.io/v1alpha1", "kind": "DGLJob",
            "metadata": {"name": "chaos-evict-ignore"},
            "spec": {"dglReplicaSpecs": {}},
            "status": {"phase": "Succeeded"}
        }))
        .unwrap();
        record(&job, Duration::from_secs(1)); // outside a scope: dropped
        let ((), times) = collect(async {
            record(&job, Duration::from_millis(29_340));
            job.metadata.name = Some("chaos-hang".into());
            job.status = None;
            record(&job, Duration::from_secs(200));
        })
        .await;
        let lines: Vec<String> = times.iter().map(|t| line(Fault::Evict, 2, t)).collect();
        assert_eq!(
            lines,
            [
                "chaos-timing fault=Evict variant=evict-ignore run=2 outcome=Succeeded fault_to_end_s=29.3",
                "chaos-timing fault=Evict variant=hang run=2 outcome=none fault_to_end_s=200.0",
            ]
        );
    }
}
