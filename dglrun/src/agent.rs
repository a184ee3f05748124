//! The accept loop of an agent (the partitioner's and the workers'): every
//! authenticated connection gets its own task, until the agent's work says
//! it is done or SIGTERM / SIGINT arrives.

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

use crate::channel::{Channel, ChannelError, Token};

/// Why an agent's accept loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended<T> {
    /// `done` resolved, to this.
    Done(T),
    /// A signal arrived: `"SIGTERM"` or `"SIGINT"`.
    Signal(&'static str),
}

/// Accepts connections on `listener`, authenticates them with `token` and
/// runs `handle` on each in its own task, until `done` resolves or a
/// signal arrives. Connections still being handled go on.
pub async fn accept_until<T, H, F>(
    listener: &TcpListener,
    token: Arc<Token>,
    done: impl Future<Output = T>,
    handle: H,
) -> std::io::Result<Ended<T>>
where
    H: Fn(Channel) -> F + Send + Sync + 'static,
    F: Future<Output = Result<(), ChannelError>> + Send + 'static,
{
    let handle = Arc::new(handle);
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    tokio::pin!(done);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let (token, handle) = (token.clone(), handle.clone());
                tokio::spawn(async move {
                    match Channel::accept(stream, peer, &token).await {
                        Ok(ch) => {
                            if let Err(e) = handle(ch).await {
                                tracing::debug!(%peer, error = %e, "connection ended");
                            }
                        }
                        Err(e) => tracing::warn!(%peer, error = %e, "refused a connection"),
                    }
                });
            }
            value = &mut done => return Ok(Ended::Done(value)),
            _ = sigterm.recv() => return Ok(Ended::Signal("SIGTERM")),
            _ = sigint.recv() => return Ok(Ended::Signal("SIGINT")),
        }
    }
}
