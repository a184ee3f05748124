use super::*;
use serde_json::json;

fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_termination_message_is_quoted_on_one_line_and_capped() {
    let c = ContainerExit {
        init: false,
        name: "main",
        exit_code: 1,
        reason: Some("Error"),
        message: Some("getting worker-1 its shard failed:\n part1/graph.dgl changed\n"),
    };
    let launcher = pod(json!({"metadata": {"name": "j-launcher"}}));
    assert_eq!(
        container_failed(&launcher, &c),
        "pod j-launcher: container main exited with code 1 (Error): \
         getting worker-1 its shard failed:; part1/graph.dgl changed"
    );
    let long = format!("{}the cause", "x".repeat(5000));
    let m = one_line(&long);
    assert!(m.ends_with("the cause") && m.len() <= MESSAGE_MAX + "…".len());
    let blank = ContainerExit {
        message: Some(" \n"),
        ..c
    };
    assert!(container_failed(&launcher, &blank).ends_with("(Error)"));
}

#[test]
fn classifies_phases_and_failures() {
    let base = |status: serde_json::Value| {
        pod(json!({
            "metadata": {"name": "j-worker-1", "labels": {
                "dgloperator.io/replica-type": "worker",
                "dgloperator.io/replica-index": "1",
                "dgloperator.io/run": "2"}},
            "status": status
        }))
    };
    let p = ObservedPod::from_pod(&base(json!({"phase": "Running", "podIP": "10.0.0.5",
        "conditions": [{"type": "Ready", "status": "True"}]})))
    .unwrap();
    assert_eq!((p.role, p.index, p.epoch), (ReplicaType::Worker, 1, 2));
    assert!(p.is_ready());
    assert_eq!(p.ip.as_deref(), Some("10.0.0.5"));

    let p = ObservedPod::from_pod(&base(json!({"phase": "Failed", "containerStatuses": [
        {"name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
         "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]})))
    .unwrap();
    match p.state {
        PodState::Failed { reason, message } => {
            assert_eq!(reason, "ContainerFailed");
            assert_eq!(
                message,
                "pod j-worker-1: container main exited with code 3 (Error)"
            );
        }
        s => panic!("unexpected {s:?}"),
    }

    let p = ObservedPod::from_pod(&base(json!({"phase": "Failed", "reason": "Evicted",
        "message": "The node was low on resource: memory."})))
    .unwrap();
    assert_eq!(
        p.state,
        PodState::Failed {
            reason: "Evicted".into(),
            message: "pod j-worker-1 failed: Evicted: The node was low on resource: memory.".into()
        }
    );
    assert_eq!(
        ObservedPod::from_pod(&base(json!({}))).unwrap().state,
        PodState::Pending
    );
}

#[test]
fn ignores_pods_without_a_role() {
    assert!(ObservedPod::from_pod(&pod(json!({"metadata": {"name": "x"}}))).is_none());
}

fn worker(spec: serde_json::Value, status: serde_json::Value) -> ObservedPod {
    ObservedPod::from_pod(&pod(json!({
        "metadata": {"name": "j-worker-1", "labels": {
            "dgloperator.io/replica-type": "worker", "dgloperator.io/replica-index": "1"}},
        "spec": spec,
        "status": status
    })))
    .unwrap()
}

#[test]
fn a_pod_that_cannot_start_is_named_with_container_reason_and_trimmed_message() {
    let long = format!("failed to pull \"no/such:image\":\n{}", "y".repeat(1000));
    let p = worker(
        json!({"containers": [{"name": "graphsage"}]}),
        json!({"phase": "Pending", "containerStatuses": [
            {"name": "graphsage", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"waiting": {"reason": "ErrImagePull", "message": long}}}]}),
    );
    assert_eq!(p.state, PodState::Pending);
    let n = p.not_starting.as_ref().unwrap();
    assert_eq!(
        (n.container.as_deref(), n.reason.as_str()),
        (Some("graphsage"), "ErrImagePull")
    );
    let d = n.describe(&p.name);
    assert!(
        d.starts_with("pod j-worker-1: container graphsage: ErrImagePull: failed to pull \"no/such:image\": yyy"),
        "{d}"
    );
    assert!(!d.contains('\n') && n.message.len() <= START_MESSAGE_MAX + "…".len());

    let p = worker(
        json!({}),
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/1 nodes are available: 1 Insufficient cpu."}]}),
    );
    assert_eq!(
        p.not_starting.unwrap().describe("j-worker-1"),
        "pod j-worker-1: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."
    );
    // Running, or pending on its way: nothing to name.
    let p = worker(json!({}), json!({"phase": "Running"}));
    assert_eq!(p.not_starting, None);
}

#[test]
fn an_oom_killed_container_is_named_with_its_memory_limit() {
    let oom = |name: &str| {
        json!({"name": name, "image": "x", "imageID": "", "ready": false, "restartCount": 0,
               "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}})
    };
    let p = worker(
        json!({"containers": [{"name": "graphsage", "resources": {"limits": {"memory": "2Gi"}}}]}),
        json!({"phase": "Failed", "containerStatuses": [oom("graphsage")]}),
    );
    let PodState::Failed { message, .. } = p.state else {
        panic!("{:?}", p.state)
    };
    assert_eq!(
        message,
        "pod j-worker-1: container graphsage OOMKilled (limit 2Gi), exit code 137"
    );
    // The launcher's init container, without a limit of its own.
    let p = worker(
        json!({"initContainers": [{"name": "watcher-loop"}], "containers": [{"name": "m"}]}),
        json!({"phase": "Failed", "initContainerStatuses": [oom("watcher-loop")]}),
    );
    let PodState::Failed { message, .. } = p.state else {
        panic!("{:?}", p.state)
    };
    assert!(
        message.contains("container watcher-loop OOMKilled (no memory limit set)"),
        "{message}"
    );
}
