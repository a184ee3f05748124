//! Admin kubeconfig with embedded certificates, readable by kube-rs, kubectl
//! and the Kubernetes components themselves (controller-manager, scheduler).
use std::path::Path;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use crate::error::{Error, Result};

/// Renders a single-context kubeconfig. Certificates are embedded (`*-data`)
/// so the file stays valid when copied elsewhere.
pub fn render(
    context: &str,
    server: &str,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<String> {
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": context,
            "cluster": {
                "server": server,
                "certificate-authority-data": STANDARD.encode(ca_pem),
            }
        }],
        "users": [{
            "name": format!("{context}-admin"),
            "user": {
                "client-certificate-data": STANDARD.encode(cert_pem),
                "client-key-data": STANDARD.encode(key_pem),
            }
        }],
        "contexts": [{
            "name": context,
            "context": { "cluster": context, "user": format!("{context}-admin") }
        }],
        "current-context": context,
        "preferences": {},
    });
    Ok(serde_yaml::to_string(&doc)?)
}

/// Builds a kube client from a kubeconfig file (its current context).
pub async fn client_from_file(path: &Path) -> Result<kube::Client> {
    let config = config_from_file(path).await?;
    Ok(kube::Client::try_from(config)?)
}

/// A kube `Config` from a kubeconfig file (its current context).
pub async fn config_from_file(path: &Path) -> Result<kube::Config> {
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig {
        path: path.to_owned(),
        source,
    })?;
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|source| Error::Kubeconfig {
            path: path.to_owned(),
            source,
        })
}
