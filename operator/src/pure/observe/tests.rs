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
    assert_eq!(
        container_failed("j-launcher", &c),
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
    assert!(container_failed("p", &blank).ends_with("(Error)"));
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
