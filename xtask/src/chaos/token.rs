//! The job's token Secret deleted mid-partitioning (issue #25 item 3).
//! The token is derived from the operator's key and the job's UID, and the
//! Secret is immutable: the operator must create it again with the same
//! bytes, so the running pods' token (mounted, and checked by their
//! readiness probes and the control channel) stays valid. The job must
//! Succeed without a restart.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use dgl_api::names::{secret_name, SECRET_TOKEN_KEY};
use dgl_api::{DGLJob, JobPhase};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};

use super::fault::Outcome;
use super::infra::{during, example, succeeded_unrestarted};
use crate::stack::jobs::phase;

/// How long the operator may take to create the Secret again.
const BACK_WITHIN: Duration = Duration::from_secs(60);

pub async fn token_delete(client: &Client, ns: &str) -> Result<Outcome> {
    let name = "chaos-token";
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let partitioning = |j: &DGLJob, _: &[_]| phase(j) == Some(JobPhase::Partitioning);
    let (terminal, done, note) = during(client, ns, example(name, 0)?, partitioning, || {
        delete_and_compare(client, &secrets, ns, name)
    })
    .await?;
    succeeded_unrestarted(client, ns, name, terminal, &done, note).await
}

/// Deletes `<job>-token` and waits for the operator's new one: another
/// object (uid), immutable, with the same bytes.
async fn delete_and_compare(
    client: &Client,
    secrets: &Api<Secret>,
    ns: &str,
    job: &str,
) -> Result<String> {
    let name = secret_name(job);
    let before = secrets
        .get(&name)
        .await
        .with_context(|| format!("reading Secret {ns}/{name}"))?;
    secrets
        .delete(&name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting Secret {ns}/{name}"))?;
    let deleted = Instant::now();
    // Where the job was when the Secret went (the fault is meant mid-partitioning).
    let at = Api::<DGLJob>::namespaced(client.clone(), ns)
        .get(job)
        .await
        .ok()
        .and_then(|j| phase(&j));
    let after = back_again(secrets, &name, before.uid()).await?;
    let (old, new) = (token(&before)?, token(&after)?);
    ensure!(
        old == new,
        "Secret {ns}/{name} came back with another token ({} bytes, was {})",
        new.len(),
        old.len()
    );
    ensure!(
        after.immutable == Some(true),
        "Secret {ns}/{name} came back mutable"
    );
    Ok(format!(
        "{name} deleted (job {at:?}); back after {:.1}s, immutable, same {} token bytes",
        deleted.elapsed().as_secs_f64(),
        new.len()
    ))
}

/// The Secret `name` once it exists with another uid than `old_uid`.
async fn back_again(secrets: &Api<Secret>, name: &str, old_uid: Option<String>) -> Result<Secret> {
    let start = Instant::now();
    while start.elapsed() < BACK_WITHIN {
        if let Some(s) = secrets.get_opt(name).await? {
            if s.uid() != old_uid {
                return Ok(s);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("Secret {name} was not created again within {BACK_WITHIN:?}")
}

fn token(s: &Secret) -> Result<Vec<u8>> {
    s.data
        .as_ref()
        .and_then(|d| d.get(SECRET_TOKEN_KEY))
        .map(|b| b.0.clone())
        .with_context(|| format!("Secret {} has no key {SECRET_TOKEN_KEY:?}", s.name_any()))
}
