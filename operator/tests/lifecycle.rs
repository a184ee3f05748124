//! The operator against a real API server and controller-manager: the test
//! plays the kubelet by patching pod status.

mod common;

use std::time::Duration;

use common::Env;
use dgl_api::names::*;
use dgl_api::{CleanPodPolicy, JobPhase, PartitionMode, ReplicaType, RunPolicy};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

fn owned_by(meta: &kube::api::ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true) && o.kind == "DGLJob")
}

#[tokio::test]
async fn dgl_api_job_runs_to_succeeded_in_order() {
    let env = Env::new("op-full").await;
    let job = env.create_job("full", |_| {}).await;
    let uid = job.uid().unwrap();

    // Every pod at once (they pull their image and start while the graph
    // is partitioned); the launcher waits in its watcher-loop for the
    // ConfigMap to launch its run.
    env.wait_pod("full-partitioner").await;
    env.wait_pod("full-worker-0").await;
    env.wait_pod("full-worker-1").await;
    env.wait_pod("full-launcher").await;
    env.wait_phase("full", JobPhase::Partitioning).await;
    assert_eq!(
        env.pod_names().await,
        vec![
            "full-launcher",
            "full-partitioner",
            "full-worker-0",
            "full-worker-1"
        ]
    );
    // No ConfigMap before the launch: only the launcher reads it, and it
    // is created complete when the run is launched.
    let config = |env: &Env| {
        let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
        async move { api.get_opt("full-config").await.unwrap() }
    };
    assert!(config(&env).await.is_none(), "not launched yet");

    // Supporting objects: owned, labelled, least privilege.
    let secret: Secret = Api::namespaced(env.client.clone(), &env.ns)
        .get("full-token")
        .await
        .unwrap();
    assert!(owned_by(&secret.metadata, &uid));
    assert_eq!(secret.data.unwrap()[SECRET_TOKEN_KEY].0.len(), 64);
    let role: Role = Api::namespaced(env.client.clone(), &env.ns)
        .get("full-launcher")
        .await
        .unwrap();
    let rules = role.rules.unwrap();
    assert_eq!(rules[0].resources.as_deref().unwrap(), ["configmaps"]);
    assert_eq!(rules[0].resource_names.as_deref().unwrap(), ["full-config"]);
    // Pods by label (one watch for every worker), not by name.
    let rule = &rules[1];
    assert_eq!(rule.resources.as_deref().unwrap(), ["pods"]);
    assert_eq!(rule.verbs, ["get", "list", "watch"]);
    assert_eq!(rule.resource_names, None);
    assert!(!rules
        .iter()
        .flat_map(|r| r.resources.iter().flatten())
        .any(|r| r.contains("exec") || r == "secrets"));
    let _: ServiceAccount = Api::namespaced(env.client.clone(), &env.ns)
        .get("full-launcher")
        .await
        .unwrap();
    let _: RoleBinding = Api::namespaced(env.client.clone(), &env.ns)
        .get("full-launcher")
        .await
        .unwrap();
    // No Service: every address the job's pods need is a pod IP, from the
    // ConfigMap.
    let services: Api<Service> = Api::namespaced(env.client.clone(), &env.ns);
    let sel = ListParams::default().labels(&format!("{LABEL_JOB_NAME}=full"));
    assert!(services.list(&sel).await.unwrap().items.is_empty());

    // Workers ready while partitioning: not launched.
    env.kubelet_running("full-worker-1", "10.244.1.11", true)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(config(&env).await.is_none());
    // Partitioned: not launched, worker 0 is not Ready.
    env.kubelet_running("full-partitioner", "10.244.0.2", true)
        .await;
    env.wait_phase("full", JobPhase::Partitioned).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(config(&env).await.is_none());

    // Every worker ready with its IP: the ConfigMap is created, launching
    // run 0, with every worker in order and the partitioner.
    env.kubelet_running("full-worker-0", "10.244.1.10", true)
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let cm = loop {
        if let Some(cm) = config(&env).await {
            break cm;
        }
        assert!(std::time::Instant::now() < deadline, "never launched");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(owned_by(&cm.metadata, &uid));
    assert_eq!(cm.labels()[LABEL_JOB_NAME], "full");
    assert_eq!(cm.labels()[LABEL_RUN], "0");
    let data = cm.data.unwrap();
    assert_eq!(data[CONFIG_RUN], "0");
    assert_eq!(data[IP_CONFIG], "10.244.1.10 30050\n10.244.1.11 30050\n");
    assert!(data[HOSTFILE].starts_with("10.244.1.10 30049 full-worker-0 slots=1\n"));
    assert_eq!(data[PARTFILE], "10.244.0.2 30049 full-partitioner\n");

    env.kubelet_running("full-launcher", "10.244.0.3", false)
        .await;
    env.wait_phase("full", JobPhase::Running).await;
    env.kubelet_succeeded("full-launcher").await;
    let done = env.wait_phase("full", JobPhase::Succeeded).await;
    let status = done.status.unwrap();
    assert!(status.completion_time.is_some() && status.start_time.is_some());
    assert_eq!(status.observed_generation, Some(1));

    // cleanPodPolicy Running: the running pods go, the launcher stays.
    env.wait_pod_gone("full-worker-0").await;
    env.wait_pod_gone("full-worker-1").await;
    env.wait_pod_gone("full-partitioner").await;
    assert_eq!(env.pod_names().await, vec!["full-launcher"]);

    // An Event per transition, but Partitioning at the start is told by the
    // Created Event. Events are written after the status they announce, so
    // the last one may land a moment after Succeeded: wait (bounded).
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let want = ["JobCreated", "JobPartitioned", "JobRunning", "JobSucceeded"];
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let seen: Vec<(String, String)> = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("full"))
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect();
        let reasons: Vec<&String> = seen.iter().map(|(r, _)| r).collect();
        let missing: Vec<_> = want
            .iter()
            .filter(|r| !reasons.iter().any(|x| x == r))
            .collect();
        if missing.is_empty() {
            assert!(!reasons.iter().any(|r| *r == "JobPartitioning"), "{seen:?}");
            let created = seen.iter().find(|(r, _)| r == "JobCreated").unwrap();
            assert!(created.1.contains("is partitioning the graph"), "{seen:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {missing:?} event within 15 s of Succeeded in {reasons:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metrics = env.metrics.render();
    assert!(
        metrics.contains("dgl_operator_jobs_successful_total{job_namespace="),
        "{metrics}"
    );
}

#[tokio::test]
async fn skip_mode_starts_workers_without_partitioner() {
    let env = Env::new("op-skip").await;
    env.create_job("skip", |j| j.spec.partition_mode = PartitionMode::Skip)
        .await;
    env.wait_pod("skip-worker-0").await;
    env.wait_pod("skip-worker-1").await;
    assert!(!env
        .pod_names()
        .await
        .iter()
        .any(|p| p.contains("partitioner")));
    env.kubelet_running("skip-worker-0", "10.244.2.10", true)
        .await;
    env.kubelet_running("skip-worker-1", "10.244.2.11", true)
        .await;
    env.kubelet_running("skip-launcher", "10.244.2.3", false)
        .await;
    env.wait_phase("skip", JobPhase::Running).await;
    env.kubelet_succeeded("skip-launcher").await;
    let job = env.wait_phase("skip", JobPhase::Succeeded).await;
    assert!(Env::condition(&job, JobPhase::Partitioned).is_none());
}

#[tokio::test]
async fn failures_of_each_role_fail_the_job_with_the_reason() {
    let env = Env::new("op-fail").await;
    // Worker.
    env.create_job("wf", |_| {}).await;
    env.drive_to_running("wf", 2).await;
    env.kubelet_failed("wf-worker-1", 7).await;
    let job = env.wait_phase("wf", JobPhase::Failed).await;
    let c = Env::condition(&job, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "WorkerFailed");
    assert_eq!(
        c.message,
        "pod wf-worker-1: container dgl-graphsage exited with code 7 (Error)"
    );
    env.wait_pod_gone("wf-launcher").await;
    env.wait_pod_gone("wf-worker-0").await;

    // Partitioner.
    env.create_job("pf", |_| {}).await;
    env.wait_pod("pf-partitioner").await;
    env.kubelet_failed("pf-partitioner", 2).await;
    let job = env.wait_phase("pf", JobPhase::Failed).await;
    let c = Env::condition(&job, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "PartitionerFailed");
    assert!(c.message.contains("pf-partitioner") && c.message.contains("code 2"));
    // The workers, created with the partitioner, are deleted (cleanPodPolicy
    // Running) and no launcher was ever created.
    env.wait_pod_gone("pf-worker-0").await;
    env.wait_pod_gone("pf-worker-1").await;
    assert!(!env.pod_names().await.iter().any(|p| p == "pf-launcher"));

    // Launcher.
    env.create_job("lf", |_| {}).await;
    env.drive_to_running("lf", 2).await;
    env.kubelet_failed("lf-launcher", 1).await;
    let job = env.wait_phase("lf", JobPhase::Failed).await;
    assert_eq!(
        Env::condition(&job, JobPhase::Failed).unwrap().reason,
        "LauncherFailed"
    );
    env.wait_pod_gone("lf-worker-0").await;

    // Eviction names the reason.
    env.create_job("ev", |_| {}).await;
    env.drive_to_running("ev", 2).await;
    env.pods()
        .patch_status(
            "ev-worker-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed", "reason": "Evicted",
                "message": "The node was low on resource: memory."}})),
        )
        .await
        .unwrap();
    let job = env.wait_phase("ev", JobPhase::Failed).await;
    let c = Env::condition(&job, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "Evicted");
    assert!(c.message.contains("low on resource"));
}

#[tokio::test]
async fn clean_pod_policies_on_success() {
    let env = Env::new("op-clean").await;
    for (name, policy, left) in [
        ("all", CleanPodPolicy::All, vec![]),
        (
            "none",
            CleanPodPolicy::None,
            vec!["launcher", "partitioner", "worker-0", "worker-1"],
        ),
        ("running", CleanPodPolicy::Running, vec!["launcher"]),
    ] {
        env.create_job(name, |j| j.spec.clean_pod_policy = policy)
            .await;
        env.drive_to_running(name, 2).await;
        env.kubelet_succeeded(&format!("{name}-launcher")).await;
        env.wait_phase(name, JobPhase::Succeeded).await;
        let expected: Vec<String> = left.iter().map(|s| format!("{name}-{s}")).collect();
        // Deletion is asynchronous: wait until only the expected pods remain.
        let mut remaining = Vec::new();
        for _ in 0..100 {
            remaining = env
                .pod_names()
                .await
                .into_iter()
                .filter(|p| p.starts_with(&format!("{name}-")))
                .collect();
            if remaining == expected {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(remaining, expected, "cleanPodPolicy {policy:?}");
    }
}

#[tokio::test]
async fn deadline_fails_the_job_on_a_timer() {
    let env = Env::new("op-deadline").await;
    env.create_job("dl", |j| {
        j.spec.run_policy = Some(RunPolicy {
            active_deadline_seconds: Some(3),
            ..Default::default()
        })
    })
    .await;
    env.wait_pod("dl-partitioner").await;
    // Nothing else happens: only the timer can end it.
    let job = env.wait_phase("dl", JobPhase::Failed).await;
    assert_eq!(
        Env::condition(&job, JobPhase::Failed).unwrap().reason,
        "DeadlineExceeded"
    );
    env.wait_pod_gone("dl-partitioner").await;
}

#[tokio::test]
async fn ttl_deletes_the_finished_job_and_its_children() {
    let env = Env::new("op-ttl").await;
    env.create_job("ttl", |j| {
        j.spec.run_policy = Some(RunPolicy {
            ttl_seconds_after_finished: Some(2),
            ..Default::default()
        })
    })
    .await;
    env.drive_to_running("ttl", 2).await;
    env.kubelet_succeeded("ttl-launcher").await;
    env.wait_phase("ttl", JobPhase::Succeeded).await;
    let gone =
        kube::runtime::wait::await_condition(env.jobs(), "ttl", |j: Option<&dgl_api::DGLJob>| {
            j.is_none()
        });
    tokio::time::timeout(common::WAIT, gone)
        .await
        .expect("the job is deleted after its TTL")
        .unwrap();
    env.wait_pod_gone("ttl-launcher").await; // garbage collection
}

#[tokio::test]
async fn backoff_limit_restarts_reusing_the_partitioner() {
    let env = Env::new("op-backoff").await;
    env.create_job("bo", |j| {
        j.spec.run_policy = Some(RunPolicy {
            backoff_limit: Some(1),
            ..Default::default()
        })
    })
    .await;
    env.drive_to_running("bo", 2).await;
    let partitioner_uid = env.pod_uids().await["bo-partitioner"].clone();
    let worker_uid = env.pod_uids().await["bo-worker-0"].clone();
    env.kubelet_failed("bo-worker-0", 1).await;
    let job = env
        .wait_job("bo", "one restart", |j| {
            j.status.as_ref().and_then(|s| s.restart_count) == Some(1)
        })
        .await;
    assert_eq!(
        Env::condition(&job, JobPhase::Restarting).unwrap().status,
        "True"
    );

    // New run: new workers, same partitioner.
    env.wait_job("bo", "new workers", |_| true).await;
    let mut new_uid = String::new();
    for _ in 0..100 {
        if let Some(u) = env.pod_uids().await.get("bo-worker-0") {
            if *u != worker_uid {
                new_uid = u.clone();
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!new_uid.is_empty(), "worker-0 was recreated");
    assert_eq!(env.pod_uids().await["bo-partitioner"], partitioner_uid);
    let w0 = env.pods().get("bo-worker-0").await.unwrap();
    assert_eq!(w0.labels()[LABEL_RUN], "1");

    env.kubelet_running("bo-worker-0", "10.244.1.10", true)
        .await;
    env.kubelet_running("bo-worker-1", "10.244.1.11", true)
        .await;
    env.kubelet_running("bo-launcher", "10.244.0.3", false)
        .await;
    env.wait_phase("bo", JobPhase::Running).await;
    // Second failure: the limit is reached.
    env.kubelet_failed("bo-worker-1", 9).await;
    let job = env.wait_phase("bo", JobPhase::Failed).await;
    let c = Env::condition(&job, JobPhase::Failed).unwrap();
    assert!(
        c.message.contains("backoffLimit (1) reached"),
        "{}",
        c.message
    );
    assert!(env
        .metrics
        .render()
        .contains("dgl_operator_jobs_restarted_total"));
}

#[tokio::test]
async fn suspend_then_resume() {
    let env = Env::new("op-suspend").await;
    env.create_job("sus", |_| {}).await;
    env.drive_to_running("sus", 2).await;
    env.jobs()
        .patch(
            "sus",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runPolicy": {"suspend": true}}})),
        )
        .await
        .unwrap();
    env.wait_phase("sus", JobPhase::Suspended).await;
    // The launch is taken back: the resumed run (the same run number) waits
    // for a launch of its own.
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let cm = cms.get("sus-config").await.unwrap();
        let data = cm.data.clone().unwrap_or_default();
        if !data.contains_key(CONFIG_RUN) && !cm.labels().contains_key(LABEL_RUN) {
            assert!(!data.contains_key(IP_CONFIG), "{data:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the launch was not taken back: {cm:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for p in [
        "sus-launcher",
        "sus-worker-0",
        "sus-worker-1",
        "sus-partitioner",
    ] {
        env.wait_pod_gone(p).await;
    }
    assert!(
        env.jobs().get_opt("sus").await.unwrap().is_some(),
        "job kept"
    );

    env.jobs()
        .patch(
            "sus",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runPolicy": {"suspend": false}}})),
        )
        .await
        .unwrap();
    env.wait_pod("sus-partitioner").await;
    let job = env
        .wait_job("sus", "resumed", |j| {
            Env::condition(j, JobPhase::Suspended).is_some_and(|c| c.status == "False")
        })
        .await;
    assert_eq!(
        Env::condition(&job, JobPhase::Suspended).unwrap().reason,
        "JobResumed"
    );
    env.drive_to_running("sus", 2).await;
    env.kubelet_succeeded("sus-launcher").await;
    env.wait_phase("sus", JobPhase::Succeeded).await;
}

#[tokio::test]
async fn a_pod_deleted_by_hand_mid_run_fails_the_job() {
    let env = Env::new("op-deleted").await;
    env.create_job("del", |_| {}).await;
    env.drive_to_running("del", 2).await;
    env.pods()
        .delete("del-worker-1", &DeleteParams::default())
        .await
        .unwrap();
    let job = env.wait_phase("del", JobPhase::Failed).await;
    let c = Env::condition(&job, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "PodDeleted");
    assert!(c.message.contains("del-worker-1"));
    // No stray re-creation of the deleted worker.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!env.pod_names().await.contains(&"del-worker-1".to_string()));
}

#[tokio::test]
async fn operator_killed_at_every_stage_finishes_the_same_job() {
    let mut env = Env::new("op-restart").await;
    env.create_job("rs", |_| {}).await;
    env.wait_pod("rs-partitioner").await;

    env.kill_operator().await;
    env.kubelet_running("rs-partitioner", "10.244.0.2", true)
        .await;
    env.start_operator();
    env.wait_pod("rs-worker-1").await;

    env.kill_operator().await;
    env.kubelet_running("rs-worker-0", "10.244.1.10", true)
        .await;
    env.kubelet_running("rs-worker-1", "10.244.1.11", true)
        .await;
    env.start_operator();
    env.wait_pod("rs-launcher").await;
    let uids = env.pod_uids().await;

    env.kill_operator().await;
    env.kubelet_running("rs-launcher", "10.244.0.3", false)
        .await;
    env.start_operator();
    env.wait_phase("rs", JobPhase::Running).await;

    env.kill_operator().await;
    env.kubelet_succeeded("rs-launcher").await;
    env.start_operator();
    let job = env.wait_phase("rs", JobPhase::Succeeded).await;

    // Same pods throughout: nothing recreated, nothing duplicated.
    for p in ["rs-worker-0", "rs-worker-1", "rs-partitioner"] {
        env.wait_pod_gone(p).await;
    }
    let after = env.pod_uids().await;
    assert_eq!(after.get("rs-launcher"), uids.get("rs-launcher"));
    assert_eq!(
        after.len(),
        1,
        "cleanPodPolicy Running left only the launcher: {after:?}"
    );
    let status = job.status.unwrap();
    assert_eq!(status.restart_count, None);
    for t in [
        "Created",
        "Partitioning",
        "Partitioned",
        "Running",
        "Succeeded",
    ] {
        assert!(
            status.conditions.iter().any(|c| c.type_ == t),
            "condition {t} missing"
        );
    }
}

#[tokio::test]
async fn deleting_the_job_collects_every_child() {
    let env = Env::new("op-gc").await;
    env.create_job("gc", |_| {}).await;
    env.drive_to_running("gc", 2).await;
    env.jobs()
        .delete("gc", &DeleteParams::background())
        .await
        .unwrap();
    for p in [
        "gc-launcher",
        "gc-worker-0",
        "gc-worker-1",
        "gc-partitioner",
    ] {
        env.wait_pod_gone(p).await;
    }
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let sel = ListParams::default().labels(&format!("{LABEL_JOB_NAME}=gc"));
    for _ in 0..150 {
        let left = cms.list(&sel).await.unwrap().items.len()
            + secrets.list(&sel).await.unwrap().items.len()
            + Api::<Role>::namespaced(env.client.clone(), &env.ns)
                .list(&sel)
                .await
                .unwrap()
                .items
                .len()
            + Api::<ServiceAccount>::namespaced(env.client.clone(), &env.ns)
                .list(&sel)
                .await
                .unwrap()
                .items
                .len();
        if left == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("children of the deleted job are still there");
}

/// DistParMETIS: no partitioner; the workers at once; the launcher (which
/// runs the ranks on them) is Partitioning until its readiness probe passes.
#[tokio::test]
async fn distparmetis_partitions_on_the_workers() {
    let env = Env::new("op-dist").await;
    env.create_job("dp", |j| {
        j.spec.partition_mode = PartitionMode::DistParMetis;
    })
    .await;
    env.wait_pod("dp-worker-0").await;
    env.wait_pod("dp-worker-1").await;
    env.kubelet_running("dp-worker-0", "10.244.3.10", true)
        .await;
    env.kubelet_running("dp-worker-1", "10.244.3.11", true)
        .await;
    let launcher = env.wait_pod("dp-launcher").await;
    let probe = launcher.spec.unwrap().containers[0]
        .readiness_probe
        .clone()
        .and_then(|p| p.exec)
        .and_then(|e| e.command);
    assert_eq!(
        probe.as_deref(),
        Some(&["dglrun".to_string(), "probe".into(), "--partitioned".into()][..])
    );
    assert!(!env
        .pod_names()
        .await
        .iter()
        .any(|p| p.contains("partitioner")));
    env.kubelet_running("dp-launcher", "10.244.3.3", false)
        .await;
    env.wait_phase("dp", JobPhase::Partitioning).await;
    env.kubelet_running("dp-launcher", "10.244.3.3", true).await;
    let job = env.wait_phase("dp", JobPhase::Running).await;
    assert_eq!(
        Env::condition(&job, JobPhase::Partitioned).map(|c| c.status.as_str()),
        Some("True")
    );
    env.kubelet_succeeded("dp-launcher").await;
    env.wait_phase("dp", JobPhase::Succeeded).await;
    let _ = ReplicaType::Worker;
}

/// The seed's Launcher-only jobs (partitionMode Skip, no Worker): accepted,
/// the launcher created at once with no worker pods, no API
/// right but patching its own pod (progress); its exit status is the job's, backoffLimit restarts it.
#[tokio::test]
async fn a_job_without_workers_is_its_launcher() {
    let env = Env::new("op-solo").await;
    let standalone = |j: &mut dgl_api::DGLJob| {
        j.spec.partition_mode = PartitionMode::Skip;
        j.spec.dgl_replica_specs.remove(&ReplicaType::Worker);
        j.spec.run_policy = Some(RunPolicy {
            backoff_limit: Some(1),
            ..Default::default()
        });
    };
    env.create_job("solo", standalone).await;
    let pod = env.wait_pod("solo-launcher").await;
    let spec = pod.spec.unwrap();
    assert!(
        spec.init_containers.is_none(),
        "no watcher: nothing to wait for"
    );
    assert_eq!(spec.automount_service_account_token, Some(true));
    assert_eq!(env.pod_names().await, vec!["solo-launcher"]);
    let role: Role = Api::namespaced(env.client.clone(), &env.ns)
        .get("solo-launcher")
        .await
        .unwrap();
    let rules = role.rules.unwrap_or_default();
    assert_eq!(rules.len(), 1, "no right but patching itself: {rules:?}");
    assert_eq!(rules[0].verbs, ["patch"]);
    assert_eq!(
        rules[0].resource_names.as_deref(),
        Some(&["solo-launcher".to_string()][..])
    );
    let cm: ConfigMap = Api::namespaced(env.client.clone(), &env.ns)
        .get("solo-config")
        .await
        .unwrap();
    assert!(!cm.data.unwrap_or_default().contains_key(HOSTFILE));

    env.kubelet_running("solo-launcher", "10.244.0.3", false)
        .await;
    env.wait_phase("solo", JobPhase::Running).await;
    // The launcher's failure is the job's: restarted once (backoffLimit 1).
    let first = pod.metadata.uid.unwrap();
    env.kubelet_failed("solo-launcher", 3).await;
    env.wait_job("solo", "restart 1", |j| {
        j.status.as_ref().and_then(|s| s.restart_count) == Some(1)
    })
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match env.pod_uids().await.get("solo-launcher") {
            Some(uid) if *uid != first => break,
            _ => assert!(
                std::time::Instant::now() < deadline,
                "no new launcher after the restart"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(env.pod_names().await, vec!["solo-launcher"]);
    env.kubelet_running("solo-launcher", "10.244.0.4", false)
        .await;
    env.kubelet_succeeded("solo-launcher").await;
    env.wait_phase("solo", JobPhase::Succeeded).await;

    // Without restarts left, its failure fails the job, naming it.
    env.create_job("solo-fail", |j| {
        standalone(j);
        j.spec.run_policy = None;
    })
    .await;
    env.kubelet_running("solo-fail-launcher", "10.244.0.5", false)
        .await;
    env.kubelet_failed("solo-fail-launcher", 2).await;
    let failed = env.wait_phase("solo-fail", JobPhase::Failed).await;
    let c = Env::condition(&failed, JobPhase::Failed).unwrap();
    assert_eq!(c.reason, "LauncherFailed");
}
