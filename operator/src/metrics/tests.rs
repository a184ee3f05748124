use super::*;

#[test]
fn names_follow_kubeflow_conventions() {
    let m = Metrics::default();
    m.jobs_created.get_or_create(&Metrics::ns("a")).inc();
    m.reconcile_duration.observe(0.01);
    let text = m.render();
    for name in [
        "dgl_operator_jobs_created_total{job_namespace=\"a\"} 1",
        "dgl_operator_reconcile_duration_seconds_bucket",
        "dgl_operator_is_leader 0",
        "dgl_operator_reconcile_errors_total 0",
    ] {
        assert!(text.contains(name), "missing {name} in\n{text}");
    }
}
