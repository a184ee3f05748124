//! The accept loop of an agent (the partitioner's and the workers'): every
//! authenticated connection gets its own task, until the agent's work says
//! it is done or SIGTERM / SIGINT arrives. At most [`MAX_UNAUTHENTICATED`]
//! connections wait in their handshake at once.

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
    let pending = Pending::default();
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
                let (id, evicted) = pending.admit();
                let pending = pending.clone();
                tokio::spawn(async move {
                    let accepted = tokio::select! {
                        r = Channel::accept(stream, peer, &token) => r,
                        _ = evicted => {
                            tracing::debug!(%peer, "closed unauthenticated: newer connections came");
                            return;
                        }
                    };
                    pending.done(id);
                    match accepted {
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

/// Connections accepted whose handshake has not finished, at most this
/// many: admitting one more closes the oldest. Idle connections from
/// anyone who can reach the port (2,000 of them, say) then cost at most
/// this many sockets and tasks, and a real peer, whose handshake takes a
/// round trip, still gets through.
pub const MAX_UNAUTHENTICATED: usize = 256;

/// The connections in their handshake, by arrival; dropping one's sender
/// closes it.
#[derive(Clone, Default)]
struct Pending(Arc<std::sync::Mutex<Pend>>);

#[derive(Default)]
struct Pend {
    next: u64,
    open: std::collections::BTreeMap<u64, tokio::sync::oneshot::Sender<()>>,
}

impl Pending {
    /// Registers a new connection (closing the oldest when full); its id
    /// and what resolves when it is closed to make room.
    fn admit(&self) -> (u64, tokio::sync::oneshot::Receiver<()>) {
        let mut p = self.0.lock().unwrap_or_else(|e| e.into_inner());
        while p.open.len() >= MAX_UNAUTHENTICATED {
            p.open.pop_first();
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = p.next;
        p.next += 1;
        p.open.insert(id, tx);
        (id, rx)
    }

    /// Connection `id` finished its handshake (or failed it).
    fn done(&self, id: u64) {
        let mut p = self.0.lock().unwrap_or_else(|e| e.into_inner());
        p.open.remove(&id);
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
