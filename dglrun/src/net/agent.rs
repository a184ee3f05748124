//! The accept loop of an agent (the partitioner's and the workers'): every
//! authenticated connection gets its own task, until the agent's work says
//! it is done or SIGTERM / SIGINT arrives.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dgl_api::wire::Request;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

use crate::net::channel::{Channel, ChannelError, Token};

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
    let mut backoff = AcceptBackoff::default();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => {
                        backoff.succeeded();
                        a
                    }
                    Err(e) => {
                        // Out of file descriptors (EMFILE) and the like fail
                        // again at once: wait instead of spinning the CPU.
                        let wait = backoff.failed();
                        tracing::warn!(error = %e, retry_in = ?wait, "accept failed");
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            value = &mut done => return Ok(Ended::Done(value)),
                            _ = sigterm.recv() => return Ok(Ended::Signal("SIGTERM")),
                            _ = sigint.recv() => return Ok(Ended::Signal("SIGINT")),
                        }
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

/// The next request on an agent's connection; `None` when the client
/// closed it or sent nothing for `idle` (then the agent closes it, so that
/// a silent client cannot hold a task and a socket forever).
pub async fn next_request(
    ch: &mut Channel,
    idle: Duration,
) -> Result<Option<Request>, ChannelError> {
    match ch.recv_within(idle, "a request").await {
        Err(ChannelError::Silent { peer, after, .. }) => {
            tracing::info!(%peer, "closing a connection that sent no request for {after:?}");
            Ok(None)
        }
        other => other,
    }
}

/// The wait after failed accepts: 10 ms, doubling up to 1 s while they keep
/// failing, back to the start after a success.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    failures: u32,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    /// One more failure: how long to wait before the next accept.
    pub fn failed(&mut self) -> Duration {
        let wait = Self::FIRST
            .saturating_mul(1 << self.failures.min(16))
            .min(Self::MAX);
        self.failures = self.failures.saturating_add(1);
        wait
    }

    pub fn succeeded(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_backoff_doubles_to_a_second_and_resets() {
        let mut b = AcceptBackoff::default();
        let got: Vec<u128> = (0..9).map(|_| b.failed().as_millis()).collect();
        assert_eq!(got, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        for _ in 0..100 {
            assert_eq!(b.failed(), AcceptBackoff::MAX);
        }
        b.succeeded();
        assert_eq!(b.failed(), AcceptBackoff::FIRST);
    }
}
