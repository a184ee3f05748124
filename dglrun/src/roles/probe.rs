//! `dglrun probe`: the exec readiness probe of the partitioner and the
//! workers (their agent answers an authenticated ping), or of the launcher
//! in partition mode DistParMETIS (its `partitioned` marker exists).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::bail;
use dgl_api::duration;
use dgl_api::wire::{Request, Response};

use crate::cli::{Options, ProbeArgs};
use crate::net::channel::{AuthError, Channel, ChannelError};

/// Exits 0 (`Ok`) when ready; the error says why not.
pub async fn run(opts: &Options, p: &ProbeArgs) -> anyhow::Result<()> {
    if p.partitioned {
        let marker = opts.partitioned_marker();
        if !marker.is_file() {
            bail!("not partitioned yet: {} does not exist", marker.display());
        }
        println!("partitioned: {}", marker.display());
        return Ok(());
    }
    let addr = p.addr.unwrap_or_else(|| {
        let ip = opts
            .runtime
            .listen
            .filter(|ip| !ip.is_unspecified())
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        SocketAddr::new(ip, opts.runtime.agent_port)
    });
    let timeout = duration::secs(p.timeout);
    let token = opts.token()?;
    let probe = async {
        let mut ch = match Channel::connect(addr, &token, timeout).await {
            // A partitioner kept across a restart has seen the newer run
            // and refuses its own pod's run (fixed at its creation): the
            // probe, in that pod, pings as the run the agent proved.
            Err(ChannelError::Auth(AuthError::Stale { newest, .. })) => {
                let newer = token.clone().with_run(newest).to_kept_partitioner();
                Channel::connect(addr, &newer, timeout).await?
            }
            other => other?,
        };
        ch.call::<_, Response>(&Request::Ping).await
    };
    match tokio::time::timeout(timeout, probe).await {
        Ok(Ok(Response::Pong(info))) => {
            println!("ready: {} agent at {addr}", info.role);
            Ok(())
        }
        Ok(Ok(other)) => bail!("not ready: unexpected answer from {addr}: {other:?}"),
        Ok(Err(e)) => bail!("not ready: {addr}: {e}"),
        Err(_) => bail!("not ready: {addr} did not answer within {timeout:?}"),
    }
}
