//! Who sent how many requests, from the API server's own metrics.
//!
//! `apiserver_request_total` has no label for the client, so each operator
//! under test runs as a ServiceAccount of its own (bound to cluster-admin,
//! as the admin certificate the bench uses otherwise is), and a FlowSchema
//! of API Priority and Fairness per ServiceAccount sends its requests to
//! the `exempt` priority level (where the admin's `system:masters` requests
//! go too, so nothing is queued or limited by the API server either way).
//! The API server counts every request per FlowSchema in
//! `apiserver_flowcontrol_dispatched_requests_total`: that is the operator's
//! request count, measured the same way for ours and the peer.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use super::metrics::Metrics;

/// Namespace of the operators' ServiceAccounts and of mpi-operator's
/// leader-election Lease.
pub const SYSTEM_NAMESPACE: &str = "bench-system";
const MANAGER: &str = "xtask-bench";

/// The FlowSchema (and ServiceAccount) name of an operator's identity.
pub fn flow_schema(account: &str) -> String {
    format!("bench-{account}")
}

/// Creates ServiceAccount `account` (cluster-admin), its FlowSchema, and a
/// kubeconfig in `work` that authenticates as it; returns that kubeconfig.
pub async fn identity(
    client: &Client,
    admin_kubeconfig: &Path,
    work: &Path,
    account: &str,
) -> Result<PathBuf> {
    let pp = PatchParams::apply(MANAGER).force();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": SYSTEM_NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone())
        .patch(SYSTEM_NAMESPACE, &pp, &Patch::Apply(&ns))
        .await?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let sa: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": account, "namespace": SYSTEM_NAMESPACE}
    }))?;
    sas.patch(account, &pp, &Patch::Apply(&sa)).await?;
    let name = flow_schema(account);
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": SYSTEM_NAMESPACE}]
    }))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&name, &pp, &Patch::Apply(&crb))
        .await?;
    let fs: FlowSchema = serde_json::from_value(flow_schema_object(&name, account))?;
    Api::<FlowSchema>::all(client.clone())
        .patch(&name, &pp, &Patch::Apply(&fs))
        .await
        .with_context(|| format!("applying FlowSchema {name}"))?;
    let tr: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 86400}
    }))?;
    let token = sas
        .create_token_request(account, &PostParams::default(), &tr)
        .await
        .with_context(|| format!("token for ServiceAccount {account}"))?
        .status
        .map(|s| s.token)
        .context("TokenRequest without a token")?;
    let path = work.join(format!("kubeconfig-{account}"));
    std::fs::write(&path, token_kubeconfig(admin_kubeconfig, &token)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

fn flow_schema_object(name: &str, account: &str) -> serde_json::Value {
    json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {
            // Ahead of every suggested FlowSchema (the lowest is 500) but
            // behind the mandatory "exempt" one (1), which does not match a
            // ServiceAccount.
            "matchingPrecedence": 100,
            "priorityLevelConfiguration": {"name": "exempt"},
            "rules": [{
                "subjects": [{"kind": "ServiceAccount",
                              "serviceAccount": {"name": account, "namespace": SYSTEM_NAMESPACE}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                   "namespaces": ["*"], "clusterScope": true}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
            }]
        }
    })
}

/// The admin kubeconfig with its user's credentials replaced by `token`.
fn token_kubeconfig(admin: &Path, token: &str) -> Result<String> {
    let text =
        std::fs::read_to_string(admin).with_context(|| format!("reading {}", admin.display()))?;
    let mut cfg: serde_yaml::Value =
        serde_yaml::from_str(&text).with_context(|| format!("parsing {}", admin.display()))?;
    let Some(users) = cfg.get_mut("users").and_then(|u| u.as_sequence_mut()) else {
        bail!("{}: no users list", admin.display());
    };
    if users.is_empty() {
        bail!("{}: empty users list", admin.display());
    }
    for u in users.iter_mut() {
        u["user"] = serde_yaml::to_value(json!({ "token": token }))?;
    }
    Ok(serde_yaml::to_string(&cfg)?)
}

/// Requests the API server dispatched for FlowSchema `name` (every verb,
/// watches included: each counts once, when it starts).
pub fn dispatched(m: &Metrics, name: &str) -> f64 {
    m.sum("apiserver_flowcontrol_dispatched_requests_total", |l| {
        l.get("flow_schema").is_some_and(|f| f == name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_user_gets_the_token_and_nothing_else_changes() {
        let dir = std::env::temp_dir().join(format!("bench-identity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let admin = dir.join("admin");
        std::fs::write(
            &admin,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n\
             users:\n- name: u\n  user: {client-certificate-data: AAA, client-key-data: BBB}\n\
             contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
        )
        .unwrap();
        let out: serde_yaml::Value =
            serde_yaml::from_str(&token_kubeconfig(&admin, "tok").unwrap()).unwrap();
        assert_eq!(out["users"][0]["user"]["token"].as_str(), Some("tok"));
        assert!(out["users"][0]["user"]
            .get("client-certificate-data")
            .is_none());
        assert_eq!(
            out["clusters"][0]["cluster"]["server"].as_str(),
            Some("https://127.0.0.1:1")
        );
        std::fs::write(&admin, "apiVersion: v1\nusers: []\n").unwrap();
        assert!(token_kubeconfig(&admin, "tok").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn dispatched_sums_one_flow_schema() {
        let m = Metrics::parse(
            "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"bench-a\",priority_level=\"exempt\"} 7\n\
             apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"exempt\",priority_level=\"exempt\"} 100\n",
        );
        assert_eq!(dispatched(&m, "bench-a"), 7.0);
        assert_eq!(dispatched(&m, "bench-b"), 0.0);
    }
}
