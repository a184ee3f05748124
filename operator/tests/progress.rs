//! Live progress against a real API server: the launcher's ServiceAccount
//! (impersonated) patches the progress annotation on its own pod with
//! dglrun's own code, and may patch no other pod; the operator folds the
//! report into `status.progress` with the percent done and the time left
//! (from the epochs and when it saw them), which the Progress printer
//! column shows, and keeps it once the job succeeded.

mod common;

use common::Env;
use dgl_api::progress::{short_duration, Progress};
use dgl_api::{DGLJob, JobPhase, JobProgress};
use dglrun::progress::{PodAnnotation, Sink};
use kube::{Client, ResourceExt};

/// A client acting as `<job>-launcher`'s ServiceAccount, as its pod's token would.
async fn as_launcher(env: &Env, job: &str) -> Client {
    let cluster = localkube::ensure_cluster()
        .await
        .expect("test control plane");
    let mut config = cluster.config().await.expect("kube config");
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{}:{job}-launcher", env.ns));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{}", env.ns),
        "system:authenticated".into(),
    ]);
    Client::try_from(config).expect("impersonating client")
}

/// The job's row as `kubectl get dgljobs` shows it: column name → cell.
async fn printed(env: &Env, job: &str) -> serde_json::Map<String, serde_json::Value> {
    let req = http::Request::get(format!(
        "/apis/dgloperator.io/v1alpha1/namespaces/{}/dgljobs/{job}",
        env.ns
    ))
    .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
    .body(Vec::new())
    .unwrap();
    let table: serde_json::Value = env.client.request(req).await.expect("table");
    let names = table["columnDefinitions"].as_array().expect("columns");
    let cells = table["rows"][0]["cells"].as_array().expect("one row");
    names
        .iter()
        .zip(cells)
        .map(|(c, v)| (c["name"].as_str().unwrap().to_string(), v.clone()))
        .collect()
}

fn progress(j: &DGLJob) -> Option<&JobProgress> {
    j.status.as_ref()?.progress.as_ref()
}

#[tokio::test]
async fn the_launchers_progress_shows_in_the_status_and_printer_column() {
    let env = Env::new("op-progress").await;
    env.create_job("prog", |_| {}).await;
    env.drive_to_running("prog", 2).await;
    let job = env.jobs().get("prog").await.unwrap();
    assert_eq!(progress(&job), None, "no report, no progress");
    assert_eq!(
        printed(&env, "prog").await["Progress"],
        serde_json::Value::Null
    );

    let sa = as_launcher(&env, "prog").await;
    let report = |epoch: u32| Progress {
        epoch,
        epochs: Some(10),
        loss: Some(0.41),
        throughput: Some(1234.5),
        unit: Some("samples/s".into()),
    };
    let mut own = PodAnnotation::new(sa.clone(), &env.ns, "prog-launcher");
    own.publish(&report(3))
        .await
        .expect("the launcher may patch its own pod");
    // Least privilege: not another pod of its job.
    let mut other = PodAnnotation::new(sa, &env.ns, "prog-worker-0");
    let refused = other.publish(&report(3)).await.unwrap_err();
    assert!(refused.contains("forbidden"), "{refused}");

    let job = env
        .wait_job("prog", "progress epoch 3", |j| {
            progress(j).is_some_and(|p| p.epoch == 3)
        })
        .await;
    let p = job.status.unwrap().progress.unwrap();
    assert_eq!(
        (p.epoch, p.epochs, p.loss, p.throughput, p.unit.as_deref()),
        (3, Some(10), Some(0.41), Some(1234.5), Some("samples/s"))
    );
    // One epoch seen: a percentage, no time left yet.
    assert_eq!(p.progress_percentage, Some(30));
    assert_eq!(p.estimated_remaining_seconds, None);
    assert_eq!(p.summary, "epoch 3/10 (30%)");
    let first = p.first_report.expect("the run's first report is kept");
    assert_eq!(
        (first.epoch, Some(&first.seen_at)),
        (3, p.updated_at.as_ref())
    );
    let row = printed(&env, "prog").await;
    assert_eq!(row["Progress"], "epoch 3/10 (30%)");
    assert_eq!(row["Phase"], "Running");

    // A second epoch, seen at least 2 s later: the time left is the 5
    // epochs left at the rate between the two sightings the status holds.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    own.publish(&report(5)).await.unwrap();
    let job = env
        .wait_job("prog", "progress epoch 5", |j| {
            progress(j).is_some_and(|p| p.epoch == 5)
        })
        .await;
    let p = job.status.unwrap().progress.unwrap();
    assert_eq!(p.first_report, Some(first.clone()), "counted from epoch 3");
    let secs = p.updated_at.as_ref().unwrap().0.as_second() - first.seen_at.0.as_second();
    assert!((2..60).contains(&secs), "{secs} s between the sightings");
    let left = (5 * secs + 1) / 2;
    assert_eq!(p.estimated_remaining_seconds, Some(left));
    assert_eq!(p.progress_percentage, Some(50));
    let summary = format!("epoch 5/10 (50%, ~{} left)", short_duration(left));
    assert_eq!(p.summary, summary);
    assert_eq!(printed(&env, "prog").await["Progress"], summary.as_str());

    // The epoch went back (a restarted script): the estimate is gone from
    // the stored object and the count starts over at epoch 2.
    own.publish(&report(2)).await.unwrap();
    let job = env
        .wait_job("prog", "progress epoch 2", |j| {
            progress(j).is_some_and(|p| p.epoch == 2)
        })
        .await;
    let p = progress(&job).unwrap();
    assert_eq!(p.estimated_remaining_seconds, None);
    assert_eq!(p.first_report.as_ref().map(|m| m.epoch), Some(2));
    assert_eq!(printed(&env, "prog").await["Progress"], "epoch 2/10 (20%)");

    // The last report before the end stays after Succeeded: done, nothing
    // left (a second later, else no rate could be measured from epoch 2).
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    own.publish(&report(10)).await.unwrap();
    env.wait_job("prog", "progress epoch 10", |j| {
        progress(j).is_some_and(|p| p.epoch == 10)
    })
    .await;
    env.kubelet_succeeded("prog-launcher").await;
    let job = env.wait_phase("prog", JobPhase::Succeeded).await;
    let p = progress(&job).unwrap();
    assert_eq!(
        (p.progress_percentage, p.estimated_remaining_seconds),
        (Some(100), Some(0))
    );
    assert_eq!(p.summary, "epoch 10/10 (100%)");
    assert_eq!(
        printed(&env, "prog").await["Progress"],
        "epoch 10/10 (100%)"
    );
}

/// Issue #36 item 6: the launcher may write its progress as often as it
/// likes; the status writes it causes are about one a second for its job,
/// and another job's status still moves at once.
#[tokio::test]
async fn a_flood_of_progress_is_written_about_once_a_second_and_spares_other_jobs() {
    use futures::StreamExt;
    use kube::api::{Patch, PatchParams};
    use kube::runtime::{watcher, WatchStreamExt};
    use std::time::{Duration, Instant};

    let env = Env::new("op-flood").await;
    env.create_job("flood", |_| {}).await;
    env.drive_to_running("flood", 2).await;

    // Every status of "flood" the API server stores, counted by its progress.
    let jobs = env.jobs();
    let cfg = watcher::Config::default().fields("metadata.name=flood");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let s = seen.clone();
    let counter = tokio::spawn(async move {
        let mut stream = watcher(jobs, cfg).applied_objects().boxed();
        while let Some(Ok(j)) = stream.next().await {
            let p = progress(&j).map(|p| format!("{p:?}")).unwrap_or_default();
            let mut s = s.lock().unwrap();
            if s.last() != Some(&p) {
                s.push(p);
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = seen.lock().unwrap().len();

    // Up to 100 patches a second for 5 s, each a new report. One at a time:
    // patches spawned each tick pile up in the API server's queue when the
    // machine is busy (500 in flight, 12 s in one CI rehearsal), and then
    // every request waits, the other job's too, whatever the operator does.
    let pods = env.pods();
    let flood = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for i in 0..500u32 {
            tick.tick().await;
            let report = Progress {
                epoch: i,
                epochs: Some(1_000_000),
                loss: Some(f64::from(i)),
                throughput: None,
                unit: None,
            };
            let patch = serde_json::json!({"metadata": {"annotations": {
                dgl_api::names::ANNOTATION_PROGRESS: serde_json::to_string(&report).unwrap()
            }}});
            let _ = pods
                .patch(
                    "flood-launcher",
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await;
        }
    });
    // Meanwhile another job is created: its status is written at once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t = Instant::now();
    env.create_job("calm", |_| {}).await;
    env.wait_job("calm", "a phase", |j| {
        j.status.as_ref().and_then(|s| s.phase).is_some()
    })
    .await;
    let calm_after = t.elapsed();
    flood.await.unwrap();
    let flood_time = t.elapsed() + Duration::from_secs(1);
    // The last report stored is written.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pod = env.pods().get("flood-launcher").await.unwrap();
    let last: Progress =
        serde_json::from_str(&pod.annotations()[dgl_api::names::ANNOTATION_PROGRESS]).unwrap();
    env.wait_job("flood", "the last report", |j| {
        progress(j).is_some_and(|p| p.epoch == last.epoch)
    })
    .await;
    counter.abort();
    let writes = seen.lock().unwrap().len() - before;
    let most = flood_time.as_secs() + 4;
    eprintln!(
        "{writes} progress writes in {flood_time:?}; the other job's status after {calm_after:?}"
    );
    assert!(
        writes as u64 <= most,
        "{writes} progress writes in {flood_time:?} (at most {most})"
    );
    assert!(
        calm_after < Duration::from_secs(8),
        "the other job's first status took {calm_after:?}"
    );
}
