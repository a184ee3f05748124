//! Helpers for integration tests in any crate of the workspace.
//!
//! ```no_run
//! # async fn t() -> localkube::Result<()> {
//! # let crd_yaml = "";
//! let cluster = localkube::ensure_cluster().await?;   // start or reuse "test"
//! let client = cluster.client().await?;               // one per #[tokio::test]
//! let ns = localkube::create_test_namespace(&client, "my-test").await?;
//! localkube::apply_crds(&client, crd_yaml).await?;  // e.g. include_str! of crds/*.yaml
//! # Ok(()) }
//! ```
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::Client;
use serde::Deserialize;

use crate::cluster::ClusterInfo;
use crate::error::{Error, Result};
use crate::handle::LocalCluster;
use crate::settings::{ClusterConfig, TEST_CLUSTER};

/// Use this kubeconfig instead of starting a local cluster (e.g. a CI
/// cluster, or the developer's "dev" cluster).
pub const TEST_KUBECONFIG_ENV: &str = "DGL_TEST_KUBECONFIG";
/// Name of the local cluster tests start (default "test").
pub const TEST_CLUSTER_ENV: &str = "DGL_TEST_CLUSTER";
/// Label put on every namespace made by [`create_test_namespace`].
pub const TEST_NAMESPACE_LABEL: &str = "localkube.dgl-operator.io/test";
/// Field manager for the server-side applies done by these helpers.
pub const FIELD_MANAGER: &str = "localkube-test";

/// Options for [`ensure_cluster_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TestClusterOptions {
    /// Also run kube-scheduler.
    pub scheduler: bool,
}

/// Per-process memo: many tests in one binary call `ensure_cluster`, the
/// first one does the work. Holds plain data only (no client), because each
/// `#[tokio::test]` runs its own runtime. A tokio Mutex is runtime-agnostic.
static ENSURED: tokio::sync::Mutex<Option<(bool, ClusterInfo)>> =
    tokio::sync::Mutex::const_new(None);

/// Starts (or reuses) the shared test cluster and returns how to reach it.
///
/// * `DGL_TEST_KUBECONFIG=<path>`: use that cluster, start nothing.
/// * otherwise the local cluster named `$DGL_TEST_CLUSTER` (default "test",
///   never the developer's "dev"), built and started on first use. It keeps
///   running after the tests; `cargo xtask cluster down --name test` stops it.
///
/// Safe to call from many tests and many test binaries at once.
pub async fn ensure_cluster() -> Result<ClusterInfo> {
    ensure_cluster_with(TestClusterOptions::default()).await
}

/// [`ensure_cluster`] with options (e.g. a scheduler).
pub async fn ensure_cluster_with(opts: TestClusterOptions) -> Result<ClusterInfo> {
    let mut memo = ENSURED.lock().await;
    if let Some((has_scheduler, info)) = memo.as_ref() {
        if *has_scheduler || !opts.scheduler {
            return Ok(info.clone());
        }
    }
    let info = if let Some(path) = std::env::var_os(TEST_KUBECONFIG_ENV).filter(|v| !v.is_empty()) {
        external(path.into()).await?
    } else {
        let name = std::env::var(TEST_CLUSTER_ENV)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| TEST_CLUSTER.to_owned());
        let mut cfg = ClusterConfig::new(&name)?;
        cfg.scheduler = opts.scheduler;
        LocalCluster::new(cfg)?.up().await?
    };
    // An external cluster is taken as is; record it as satisfying every option.
    let satisfies_all = opts.scheduler || info.state_dir.is_none();
    *memo = Some((satisfies_all, info.clone()));
    Ok(info)
}

async fn external(path: std::path::PathBuf) -> Result<ClusterInfo> {
    let config = crate::kubeconfig::config_from_file(&path).await?;
    Ok(ClusterInfo {
        name: "external".into(),
        server: config.cluster_url.to_string(),
        kubeconfig: path,
        state_dir: None,
        reused: true,
    })
}

/// Shorthand: ensure the test cluster and build a client for it.
pub async fn test_client() -> Result<Client> {
    ensure_cluster().await?.client().await
}

/// A DNS-1123 label `<prefix>-<6 random chars>` that is unique across
/// processes and calls (pid, time and a counter go into the hash).
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seed = format!(
        "{}-{}-{}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut h = crate::util::fnv1a(seed.as_bytes());
    let mut suffix = String::new();
    for _ in 0..6 {
        suffix.push(char::from(
            b"abcdefghijklmnopqrstuvwxyz0123456789"[(h % 36) as usize],
        ));
        h /= 36;
    }
    let mut prefix: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    prefix.truncate(63 - 7);
    let prefix = prefix.trim_matches('-');
    if prefix.is_empty() {
        format!("t-{suffix}")
    } else {
        format!("{prefix}-{suffix}")
    }
}

/// Creates a fresh namespace `<prefix>-<random>` and waits for its `default`
/// ServiceAccount (pods are refused until the controller-manager made it).
/// Namespaces are labelled with [`TEST_NAMESPACE_LABEL`]; they are not deleted
/// automatically, use [`delete_namespace`] at the end of a test if you like.
pub async fn create_test_namespace(client: &Client, prefix: &str) -> Result<String> {
    let name = unique_name(prefix);
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": name, "labels": { TEST_NAMESPACE_LABEL: "true" } }
    }))
    .map_err(|e| Error::Invalid(e.to_string()))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    let wait = await_condition(sa, "default", |o: Option<&ServiceAccount>| o.is_some());
    // An external cluster without a controller-manager never creates it; do
    // not fail the test for that, pods just need an explicit SA there.
    if tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .is_err()
    {
        tracing::warn!(namespace = %name, "no default ServiceAccount after 30s");
    }
    Ok(name)
}

/// Deletes a namespace (does not wait for finalization).
pub async fn delete_namespace(client: &Client, name: &str) -> Result<()> {
    match Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Server-side applies one CRD and waits until it is Established.
pub async fn apply_crd(client: &Client, crd: &CustomResourceDefinition) -> Result<()> {
    let name =
        crd.metadata.name.clone().ok_or_else(|| {
            Error::Invalid("CustomResourceDefinition without metadata.name".into())
        })?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(crd),
    )
    .await?;
    let established = await_condition(api, &name, conditions::is_crd_established());
    match tokio::time::timeout(Duration::from_secs(60), established).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::Invalid(format!("waiting for CRD {name}: {e}"))),
        Err(_) => Err(Error::Timeout {
            what: format!("CRD {name} to become Established"),
            seconds: 60,
            hint: Some("check its status.conditions (NamesAccepted) for a naming conflict".into()),
        }),
    }
}

/// Applies every CustomResourceDefinition in a (multi-document) YAML string,
/// e.g. the checked-in `crds/*.yaml`, and waits for each to be Established.
/// Returns the CRD names. Documents of other kinds are an error, so a wrong
/// file is noticed instead of silently skipped.
pub async fn apply_crds(client: &Client, yaml: &str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_yaml::Value::deserialize(doc)?;
        if value.is_null() {
            continue; // empty document, e.g. a trailing `---`
        }
        let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        if kind != "CustomResourceDefinition" {
            return Err(Error::Invalid(format!(
                "apply_crds: expected kind CustomResourceDefinition, found {kind:?}"
            )));
        }
        let crd: CustomResourceDefinition = serde_yaml::from_value(value)?;
        apply_crd(client, &crd).await?;
        names.push(crd.metadata.name.unwrap_or_default());
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_are_dns_labels() {
        let a = unique_name("GC Test_1");
        let b = unique_name("GC Test_1");
        assert_ne!(a, b);
        assert!(a.starts_with("gc-test-1-"), "{a}");
        assert!(a.len() <= 63);
        let long = unique_name(&"x".repeat(100));
        assert!(long.len() <= 63, "{long}");
        assert!(unique_name("--").starts_with("t-"));
    }
}
