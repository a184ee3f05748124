//! Live progress: the trainers' `DGLRUN_PROGRESS` lines (the protocol is
//! `dgl_api::progress`), kept by the launcher and published, at most every
//! `--progress-interval`, as an annotation on its own pod, which the
//! operator folds into the job's `status.progress`.
//!
//! The launcher keeps the furthest-along report: a line counts unless its
//! epoch is below the kept one's (every rank reports; a slower rank's
//! earlier epoch is not news). Publishing never blocks or fails the
//! training: it runs in a task of its own, and its failures are logged at
//! warn at most once a minute.

use std::future::Future;
use std::time::Duration;

use dgl_api::names::{ANNOTATION_PROGRESS, ENV_NAMESPACE, ENV_POD_NAME};
use dgl_api::progress::{parse_line, Progress};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How often a failing publication is logged at warn.
const WARN_EVERY: Duration = Duration::from_secs(60);
/// How long the launcher waits, at its end, for the last report to land.
const FINAL_PUBLISH: Duration = Duration::from_secs(10);

/// Where reports go.
pub trait Sink: Send + 'static {
    fn publish(&mut self, p: &Progress) -> impl Future<Output = Result<(), String>> + Send;
}

/// The furthest-along report seen so far.
#[derive(Debug, Default)]
pub struct Latest {
    kept: Option<Progress>,
}

impl Latest {
    /// Reads one output line; true when it is a report that replaced the
    /// kept one. A malformed report is ignored (one debug line).
    pub fn offer(&mut self, line: &str) -> bool {
        let p = match parse_line(line) {
            None => return false,
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                tracing::debug!("ignored a progress line: {e}");
                return false;
            }
        };
        if self.kept.as_ref().is_some_and(|k| p.epoch < k.epoch) {
            return false;
        }
        let changed = self.kept.as_ref() != Some(&p);
        self.kept = Some(p);
        changed
    }

    pub fn get(&self) -> Option<&Progress> {
        self.kept.as_ref()
    }
}

/// The launcher's end of the publication: reads lines, hands the latest
/// report to the publishing task.
pub struct Reporter {
    latest: Latest,
    tx: Option<watch::Sender<Option<Progress>>>,
    task: Option<JoinHandle<()>>,
}

impl Reporter {
    /// Publishes to `sink` at most every `interval`.
    pub fn start(sink: impl Sink, interval: Duration) -> Reporter {
        let (tx, rx) = watch::channel(None);
        Reporter {
            latest: Latest::default(),
            tx: Some(tx),
            task: Some(tokio::spawn(publish_loop(rx, sink, interval))),
        }
    }

    /// Reads the lines, publishes nothing (outside Kubernetes, or disabled).
    pub fn disabled() -> Reporter {
        Reporter {
            latest: Latest::default(),
            tx: None,
            task: None,
        }
    }

    /// On the launcher's own pod, when it runs in one (the downward-API env
    /// and the in-cluster config exist) and `interval` is not zero.
    pub fn from_env(interval: Duration) -> Reporter {
        if interval.is_zero() {
            return Reporter::disabled();
        }
        let (Ok(name), Ok(ns)) = (std::env::var(ENV_POD_NAME), std::env::var(ENV_NAMESPACE)) else {
            tracing::debug!(
                "not in a pod ({ENV_POD_NAME} or {ENV_NAMESPACE} unset): progress is not published"
            );
            return Reporter::disabled();
        };
        let client = kube::Config::incluster()
            .map_err(|e| e.to_string())
            .and_then(|c| kube::Client::try_from(c).map_err(|e| e.to_string()));
        match client {
            Ok(client) => Reporter::start(PodAnnotation::new(client, &ns, &name), interval),
            Err(e) => {
                tracing::warn!("progress is not published: no API client in this pod: {e}");
                Reporter::disabled()
            }
        }
    }

    /// Reads one line of a trainer's output.
    pub fn observe(&mut self, line: &str) {
        if self.latest.offer(line) {
            if let Some(tx) = &self.tx {
                tx.send_replace(self.latest.get().cloned());
            }
        }
    }

    /// Publishes the last report if it is not yet (waiting at most
    /// [`FINAL_PUBLISH`]), then stops.
    pub async fn finish(mut self) {
        drop(self.tx.take());
        if let Some(task) = self.task.take() {
            if tokio::time::timeout(FINAL_PUBLISH, task).await.is_err() {
                tracing::warn!(
                    "the last progress report was not published within {FINAL_PUBLISH:?}"
                );
            }
        }
    }
}

/// Publishes each new report, then waits out `interval` (unless the
/// launcher is ending) before the next; a failed one is tried again after
/// the interval. Ends once the sender is gone and the last report was tried.
async fn publish_loop(
    mut rx: watch::Receiver<Option<Progress>>,
    mut sink: impl Sink,
    interval: Duration,
) {
    let mut published: Option<Progress> = None;
    let mut last_warn: Option<Instant> = None;
    let mut open = true;
    loop {
        // News: a report not published yet (also one that failed, or that
        // arrived while waiting out the interval).
        let news = rx
            .borrow()
            .as_ref()
            .is_some_and(|p| published.as_ref() != Some(p));
        if !news && rx.changed().await.is_err() {
            open = false;
        }
        let p = rx.borrow_and_update().clone();
        if let Some(p) = p.filter(|p| published.as_ref() != Some(p)) {
            match sink.publish(&p).await {
                Ok(()) => published = Some(p),
                Err(e) => {
                    if last_warn.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
                        tracing::warn!(
                            "cannot publish the training's progress (the training goes on): {e}"
                        );
                        last_warn = Some(Instant::now());
                    } else {
                        tracing::debug!("cannot publish the training's progress: {e}");
                    }
                }
            }
        }
        if !open {
            return;
        }
        open = wait_out(&mut rx, interval).await;
    }
}

/// Sleeps `interval`, cut short when the sender goes; false then.
async fn wait_out(rx: &mut watch::Receiver<Option<Progress>>, interval: Duration) -> bool {
    let until = crate::clock::after(interval);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(until) => return true,
            // A new report waits for the next turn (`changed` sees it then).
            r = rx.changed() => if r.is_err() { return false },
        }
    }
}

/// The annotation [`ANNOTATION_PROGRESS`] on the launcher's own pod (a merge
/// patch; its Role allows `patch` on that pod only).
pub struct PodAnnotation {
    api: Api<Pod>,
    name: String,
}

impl PodAnnotation {
    pub fn new(client: kube::Client, namespace: &str, pod: &str) -> PodAnnotation {
        PodAnnotation {
            api: Api::namespaced(client, namespace),
            name: pod.to_string(),
        }
    }
}

impl Sink for PodAnnotation {
    async fn publish(&mut self, p: &Progress) -> Result<(), String> {
        let patch = serde_json::json!({
            "metadata": {"annotations": {ANNOTATION_PROGRESS: p.to_json()}}
        });
        self.api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| format!("patch pod {}: {e}", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn line(epoch: u32, loss: f64) -> String {
        format!(r#"DGLRUN_PROGRESS {{"epoch":{epoch},"epochs":10,"loss":{loss}}}"#)
    }

    #[test]
    fn the_furthest_along_report_is_kept() {
        let mut l = Latest::default();
        assert!(!l.offer("epoch=1 loss=0.5"), "not a report");
        assert!(!l.offer("DGLRUN_PROGRESS {broken"), "ignored");
        assert!(l.offer(&line(2, 0.5)));
        assert!(!l.offer(&line(2, 0.5)), "the same again is no change");
        assert!(!l.offer(&line(1, 0.9)), "a slower rank's earlier epoch");
        assert!(l.offer(&line(2, 0.4)), "the same epoch, newer numbers");
        assert!(l.offer(&line(3, 0.3)));
        assert_eq!(l.get().map(|p| (p.epoch, p.loss)), Some((3, Some(0.3))));
    }

    /// Records what was published and when (tokio's paused clock); fails
    /// the first `fail_first` attempts.
    #[derive(Clone)]
    struct Recorder {
        seen: Arc<Mutex<Vec<(u32, u64)>>>,
        fail_first: usize,
        start: Instant,
    }

    impl Recorder {
        fn new(fail_first: usize) -> Recorder {
            Recorder {
                seen: Arc::default(),
                fail_first,
                start: Instant::now(),
            }
        }

        fn seen(&self) -> Vec<(u32, u64)> {
            self.seen.lock().unwrap().clone()
        }
    }

    impl Sink for Recorder {
        async fn publish(&mut self, p: &Progress) -> Result<(), String> {
            let mut seen = self.seen.lock().unwrap();
            seen.push((p.epoch, self.start.elapsed().as_secs()));
            if seen.len() <= self.fail_first {
                Err("refused".into())
            } else {
                Ok(())
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn publishes_at_most_every_interval_and_the_last_at_the_end() {
        let rec = Recorder::new(0);
        let mut r = Reporter::start(rec.clone(), Duration::from_secs(5));
        r.observe(&line(1, 0.9));
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Three reports within the interval: only the latest goes out, at 5 s.
        r.observe(&line(2, 0.8));
        r.observe(&line(3, 0.7));
        r.observe(&line(4, 0.6));
        // Then nothing new for a while: nothing published.
        tokio::time::sleep(Duration::from_secs(20)).await;
        // Epoch 5 goes at once (the interval passed); 6, newer, at the end
        // without waiting out the interval.
        r.observe(&line(5, 0.5));
        tokio::time::sleep(Duration::from_millis(10)).await;
        r.observe(&line(6, 0.4));
        r.finish().await;
        assert_eq!(rec.seen(), [(1, 0), (4, 5), (5, 21), (6, 21)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_publication_is_tried_again_after_the_interval() {
        let rec = Recorder::new(2);
        let mut r = Reporter::start(rec.clone(), Duration::from_secs(5));
        r.observe(&line(1, 0.9));
        tokio::time::sleep(Duration::from_secs(30)).await;
        r.finish().await;
        assert_eq!(rec.seen(), [(1, 0), (1, 5), (1, 10)]);
    }

    #[test]
    fn a_disabled_reporter_reads_lines_and_publishes_nothing() {
        let mut r = Reporter::disabled();
        r.observe(&line(1, 0.9));
        assert_eq!(r.latest.get().map(|p| p.epoch), Some(1));
        assert!(r.tx.is_none() && r.task.is_none());
    }

    /// The exact request: a merge patch of the one annotation on the
    /// launcher's own pod, its value the report as compact JSON.
    #[tokio::test]
    async fn the_annotation_is_a_merge_patch_of_the_own_pod() {
        use http::{Request, Response};
        use kube::client::Body;
        let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(svc, "default");
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("one request");
            let (parts, body) = req.into_parts();
            let body = body.collect_bytes().await.unwrap();
            let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "j-launcher", "namespace": "ns"}});
            send.send_response(Response::new(Body::from(serde_json::to_vec(&pod).unwrap())));
            (parts, body)
        });
        let mut sink = PodAnnotation::new(client, "ns", "j-launcher");
        let p = parse_line(&line(3, 0.25)).unwrap().unwrap();
        sink.publish(&p).await.unwrap();
        let (parts, body) = server.await.unwrap();
        assert_eq!(parts.method, http::Method::PATCH);
        assert_eq!(parts.uri.path(), "/api/v1/namespaces/ns/pods/j-launcher");
        assert_eq!(
            parts.headers[http::header::CONTENT_TYPE],
            "application/merge-patch+json"
        );
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"metadata": {"annotations": {
                "dgloperator.io/progress": r#"{"epoch":3,"epochs":10,"loss":0.25}"#}}})
        );
    }
}
