//! Health probes of the control plane: polling, the probe client, and the
//! `/readyz`, `/healthz`, etcd and default-ServiceAccount checks.
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::Api;
use kube::Client;

use crate::error::{Error, Result};
use crate::kubeconfig;

pub(super) async fn poll<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A client with short timeouts for health probes. With a kubeconfig it
/// authenticates as the admin; without, it is anonymous and accepts any
/// certificate (controller-manager and scheduler serve self-signed ones).
pub(crate) async fn health_client(server: &str, kubeconfig: Option<&Path>) -> Result<Client> {
    let mut config = match kubeconfig {
        Some(path) => kubeconfig::config_from_file(path).await?,
        None => {
            let uri = server
                .parse::<http::Uri>()
                .map_err(|e| Error::Invalid(format!("bad URL {server}: {e}")))?;
            let mut c = kube::Config::new(uri);
            c.accept_invalid_certs = true;
            c
        }
    };
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(5));
    config.write_timeout = Some(Duration::from_secs(5));
    Ok(Client::try_from(config)?)
}

pub(super) async fn get_ok(client: &Client, path: &str) -> bool {
    let Ok(req) = http::Request::get(path).body(Vec::new()) else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(6), client.request_text(req)).await,
        Ok(Ok(body)) if body.trim() == "ok"
    )
}

pub(crate) async fn readyz(client: &Client) -> bool {
    get_ok(client, "/readyz").await
}

pub(super) async fn healthz(client: &Client) -> bool {
    get_ok(client, "/healthz").await
}

pub(super) async fn default_sa_exists(client: &Client) -> bool {
    let ns: Api<Namespace> = Api::all(client.clone());
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    matches!(ns.get_opt("default").await, Ok(Some(_)))
        && matches!(sa.get_opt("default").await, Ok(Some(_)))
}

/// etcd's `/health` over plain HTTP/1.0 on loopback; a raw request keeps the
/// HTTP client (TLS-only kube client) out of it.
pub(crate) async fn etcd_healthy(port: u16) -> bool {
    let probe = crate::util::http_get(port, "/health");
    matches!(
        tokio::time::timeout(Duration::from_secs(3), probe).await,
        Ok(Ok((_, body))) if body.contains(r#""health":"true""#)
    )
}
