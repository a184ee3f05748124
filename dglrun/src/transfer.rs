//! Shard transfer, pod to pod: the partitioner serves the files of its
//! manifest; a worker pulls its files, resumes an interrupted file at the
//! byte it already has, verifies size and sha256, and retries a bounded
//! number of times with exponential backoff.
//!
//! A file is written to `<name>.dglrun-partial` and renamed only after its
//! sha256 matched, so a file under its real name is always complete; a file
//! already present with the right size and sha256 is reused.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dgl_api::wire::{is_safe_relative_path, FileEntry, FileHeader, Manifest, Request, Response};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::channel::{Channel, ChannelError, Timeouts, Token};
use crate::dataset::sha256_file;

const PARTIAL_SUFFIX: &str = ".dglrun-partial";

/// Whether a file name is an unfinished download (never served, never counted).
pub fn is_partial_name(name: &str) -> bool {
    name.ends_with(PARTIAL_SUFFIX)
}

/// How hard to try.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts per file (and for the manifest), the first included.
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub connect_timeout: Duration,
    /// A read that brings no byte for this long counts as an interrupted transfer.
    pub idle_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// Backoff before attempt `attempt + 1` (attempt counts from 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// What a fetch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchStats {
    pub files: u32,
    pub bytes: u64,
    /// Bytes received over the network.
    pub transferred: u64,
    /// Files already present and verified.
    pub reused: u32,
    /// Failed attempts that were retried.
    pub retries: u32,
    /// Bytes kept from interrupted attempts (resumed, not re-sent).
    pub resumed_bytes: u64,
    /// Files whose finished download failed the sha256 check and started over.
    pub restarted: u32,
}

/// Why a fetch failed for good.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("{path}: giving up after {attempts} attempt(s); last error: {last}")]
    Exhausted {
        path: String,
        attempts: u32,
        last: String,
    },
    #[error("the partitioner at {addr} refused {what}: {message}")]
    Remote {
        addr: SocketAddr,
        what: String,
        message: String,
    },
    #[error("cannot reach the partitioner at {addr}: {source}")]
    Channel {
        addr: SocketAddr,
        source: ChannelError,
    },
    #[error("{path}: the partitioner announced {got}, the manifest says {expected} (did the partitions change while serving?)")]
    Changed {
        path: String,
        expected: String,
        got: String,
    },
    #[error("unsafe path {0:?} in the manifest")]
    UnsafePath(String),
    #[error("unexpected reply from the partitioner at {addr}: {got}")]
    Protocol { addr: SocketAddr, got: String },
    #[error("cannot write {path}: {source}")]
    Local {
        path: String,
        source: std::io::Error,
    },
}

/// One failed attempt: worth retrying or not.
enum Attempt {
    Retry(String),
    Fatal(TransferError),
}

/// Client side: pulls files from one partitioner.
pub struct Fetcher {
    addr: SocketAddr,
    token: Token,
    policy: RetryPolicy,
    conn: Option<Channel>,
    /// Counts the bytes received, for progress reports.
    received: Arc<AtomicU64>,
}

impl Fetcher {
    pub fn new(addr: SocketAddr, token: Token, policy: RetryPolicy) -> Fetcher {
        Fetcher {
            addr,
            token,
            policy,
            conn: None,
            received: Arc::default(),
        }
    }

    /// Counts every byte received into `counter` (read by progress reports).
    pub fn counting_into(mut self, counter: Arc<AtomicU64>) -> Fetcher {
        self.received = counter;
        self
    }

    async fn channel(&mut self) -> Result<&mut Channel, Attempt> {
        if self.conn.is_none() {
            let ch = Channel::connect(self.addr, &self.token, self.policy.connect_timeout)
                .await
                .map_err(|e| classify(self.addr, e))?;
            self.conn = Some(ch);
        }
        Ok(self.conn.as_mut().expect("just connected"))
    }

    /// Gets the manifest, retrying connection failures.
    pub async fn manifest(&mut self) -> Result<Manifest, TransferError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (addr, within) = (self.addr, self.policy.idle_timeout);
            let res = match self.channel().await {
                Ok(ch) => ch
                    .call_within::<_, Response>(&Request::GetManifest, within, "the manifest")
                    .await
                    .map_err(|e| classify(addr, e)),
                Err(a) => Err(a),
            };
            let last = match res {
                Ok(Response::Manifest(m)) => {
                    for f in &m.files {
                        if !is_safe_relative_path(&f.path) {
                            return Err(TransferError::UnsafePath(f.path.clone()));
                        }
                    }
                    return Ok(m);
                }
                Ok(Response::Error { message }) => {
                    return Err(TransferError::Remote {
                        addr: self.addr,
                        what: "the manifest".into(),
                        message,
                    })
                }
                Ok(other) => {
                    return Err(TransferError::Protocol {
                        addr: self.addr,
                        got: format!("{other:?}"),
                    })
                }
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(m)) => m,
            };
            self.conn = None;
            if attempt >= self.policy.max_attempts {
                return Err(TransferError::Exhausted {
                    path: "manifest".into(),
                    attempts: attempt,
                    last,
                });
            }
            tracing::warn!(attempt, error = %last, "getting the manifest failed; retrying");
            tokio::time::sleep(self.policy.backoff(attempt)).await;
        }
    }

    /// Fetches `files` into `dest` (a dataset folder), verified.
    pub async fn fetch_all(
        &mut self,
        files: &[FileEntry],
        dest: &Path,
    ) -> Result<FetchStats, TransferError> {
        let mut stats = FetchStats::default();
        for entry in files {
            self.fetch_one(entry, dest, &mut stats).await?;
            stats.files += 1;
            stats.bytes += entry.size;
        }
        // Done with the partitioner: close instead of holding its task.
        self.conn = None;
        Ok(stats)
    }

    async fn fetch_one(
        &mut self,
        entry: &FileEntry,
        dest: &Path,
        stats: &mut FetchStats,
    ) -> Result<(), TransferError> {
        if !is_safe_relative_path(&entry.path) {
            return Err(TransferError::UnsafePath(entry.path.clone()));
        }
        let target = dest.join(&entry.path);
        let partial = PathBuf::from(format!("{}{PARTIAL_SUFFIX}", target.display()));
        let local = |source| TransferError::Local {
            path: target.display().to_string(),
            source,
        };
        if let Ok(m) = tokio::fs::metadata(&target).await {
            if m.len() == entry.size && hash(&target).await.ok() == Some(entry.sha256.clone()) {
                tracing::debug!(path = %entry.path, "already present and verified");
                stats.reused += 1;
                return Ok(());
            }
        }
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(local)?;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let offset = match tokio::fs::metadata(&partial).await {
                Ok(m) if m.len() <= entry.size => m.len(),
                Ok(_) => {
                    tokio::fs::remove_file(&partial).await.map_err(local)?;
                    0
                }
                Err(_) => 0,
            };
            if offset > 0 {
                tracing::info!(path = %entry.path, offset, size = entry.size, "resuming an interrupted transfer");
                stats.resumed_bytes += offset;
            }
            let last = match self.try_fetch(entry, &partial, offset, stats).await {
                Ok(()) => {
                    let got = hash(&partial).await.map_err(local)?;
                    if got == entry.sha256 {
                        tokio::fs::rename(&partial, &target).await.map_err(local)?;
                        return Ok(());
                    }
                    // Corrupt somewhere: resuming would keep the bad bytes.
                    tokio::fs::remove_file(&partial).await.map_err(local)?;
                    stats.restarted += 1;
                    format!(
                        "sha256 mismatch: expected {}, got {got}; starting the file over",
                        entry.sha256
                    )
                }
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(m)) => m,
            };
            // The connection may be mid-file; never reuse it.
            self.conn = None;
            if attempt >= self.policy.max_attempts {
                return Err(TransferError::Exhausted {
                    path: entry.path.clone(),
                    attempts: attempt,
                    last,
                });
            }
            stats.retries += 1;
            let wait = self.policy.backoff(attempt);
            tracing::warn!(path = %entry.path, attempt, error = %last, retry_in = ?wait, "transfer failed; retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// One attempt at the rest of `entry` from `offset`, appended to `partial`.
    async fn try_fetch(
        &mut self,
        entry: &FileEntry,
        partial: &Path,
        offset: u64,
        stats: &mut FetchStats,
    ) -> Result<(), Attempt> {
        let addr = self.addr;
        let idle = self.policy.idle_timeout;
        let received = self.received.clone();
        let ch = self.channel().await?;
        request_file(ch, addr, entry, offset, idle).await?;
        let local = |source| {
            Attempt::Fatal(TransferError::Local {
                path: partial.display().to_string(),
                source,
            })
        };
        let mut file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(partial)
            .await
            .map_err(local)?;
        let remaining = entry.size - offset;
        match receive(
            &mut ch.reader,
            &mut file,
            remaining,
            entry.size,
            idle,
            stats,
            &received,
        )
        .await
        {
            Ok(()) => {
                file.flush().await.map_err(local)?;
                file.sync_all().await.map_err(local)
            }
            Err(Received::Interrupted(message)) => {
                file.flush().await.map_err(local)?;
                Err(Attempt::Retry(message))
            }
            Err(Received::Write(e)) => Err(local(e)),
        }
    }
}

/// Asks for `entry` from `offset`; the partitioner must announce exactly
/// that file.
async fn request_file(
    ch: &mut Channel,
    addr: SocketAddr,
    entry: &FileEntry,
    offset: u64,
    within: Duration,
) -> Result<(), Attempt> {
    let req = Request::Fetch {
        path: entry.path.clone(),
        offset,
    };
    let what = format!("the header of {}", entry.path);
    let header = match ch.call_within::<_, Response>(&req, within, &what).await {
        Ok(Response::File(h)) => h,
        Ok(Response::Error { message }) => {
            return Err(Attempt::Fatal(TransferError::Remote {
                addr,
                what: entry.path.clone(),
                message,
            }))
        }
        Ok(other) => {
            return Err(Attempt::Fatal(TransferError::Protocol {
                addr,
                got: format!("{other:?}"),
            }))
        }
        Err(e) => return Err(classify(addr, e)),
    };
    let expected = FileHeader {
        path: entry.path.clone(),
        size: entry.size,
        offset,
        sha256: entry.sha256.clone(),
    };
    if header != expected {
        return Err(Attempt::Fatal(TransferError::Changed {
            path: entry.path.clone(),
            expected: format!("{expected:?}"),
            got: format!("{header:?}"),
        }));
    }
    Ok(())
}

/// Why [`receive`] stopped early.
enum Received {
    /// The connection: what happened.
    Interrupted(String),
    /// The local file.
    Write(std::io::Error),
}

/// Copies the last `remaining` bytes of a `size`-byte file from `reader` to
/// `file`; a read that brings no byte for `idle` interrupts the transfer.
async fn receive(
    reader: &mut (impl AsyncRead + Unpin),
    file: &mut tokio::fs::File,
    mut remaining: u64,
    size: u64,
    idle: Duration,
    stats: &mut FetchStats,
    received: &AtomicU64,
) -> Result<(), Received> {
    let mut buf = vec![0u8; 256 * 1024];
    while remaining > 0 {
        let want = buf
            .len()
            .min(usize::try_from(remaining).unwrap_or(usize::MAX));
        let n = match tokio::time::timeout(idle, reader.read(&mut buf[..want])).await {
            Err(_) => {
                return Err(Received::Interrupted(format!(
                    "no data for {idle:?} with {remaining} of {size} bytes to go"
                )))
            }
            Ok(Err(e)) => return Err(Received::Interrupted(format!("read failed: {e}"))),
            Ok(Ok(0)) => {
                return Err(Received::Interrupted(format!(
                    "connection closed with {remaining} of {size} bytes to go"
                )))
            }
            Ok(Ok(n)) => n,
        };
        file.write_all(&buf[..n]).await.map_err(Received::Write)?;
        remaining -= n as u64;
        stats.transferred += n as u64;
        received.fetch_add(n as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// Network trouble is worth another attempt; a wrong token or a foreign
/// protocol is not.
fn classify(addr: SocketAddr, e: ChannelError) -> Attempt {
    if e.is_transient() {
        Attempt::Retry(e.to_string())
    } else {
        Attempt::Fatal(TransferError::Channel { addr, source: e })
    }
}

async fn hash(path: &Path) -> std::io::Result<String> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || sha256_file(&path).map(|(_, h)| h))
        .await
        .map_err(std::io::Error::other)?
}

/// Server side: serves the files of a manifest from a dataset folder.
#[derive(Clone)]
pub struct FileServer {
    root: PathBuf,
    manifest: Arc<Manifest>,
    timeouts: Timeouts,
}

impl FileServer {
    pub fn new(root: PathBuf, manifest: Manifest) -> FileServer {
        FileServer {
            root,
            manifest: Arc::new(manifest),
            timeouts: Timeouts::default(),
        }
    }

    /// How long its clients may stay silent.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> FileServer {
        self.timeouts = timeouts;
        self
    }

    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Answers one `Fetch`. Errors the client cannot fix are sent as
    /// `Error` frames (the connection stays usable); an I/O error while
    /// streaming ends the connection (the client resumes on a new one).
    pub async fn handle_fetch(
        &self,
        ch: &mut Channel,
        path: &str,
        offset: u64,
    ) -> Result<(), ChannelError> {
        // Only files of the manifest can be read: the path never touches the
        // file system before this lookup.
        let Some(entry) = self.manifest.get(path) else {
            return ch
                .send(&Response::Error {
                    message: format!("{path:?} is not in the manifest"),
                })
                .await;
        };
        if offset > entry.size {
            return ch
                .send(&Response::Error {
                    message: format!(
                        "offset {offset} is past the end of {path} ({} bytes)",
                        entry.size
                    ),
                })
                .await;
        }
        let abs = self.root.join(&entry.path);
        let opened = async {
            let mut f = tokio::fs::File::open(&abs).await?;
            let len = f.metadata().await?.len();
            f.seek(std::io::SeekFrom::Start(offset)).await?;
            Ok::<_, std::io::Error>((f, len))
        }
        .await;
        let file = match opened {
            Ok((_, len)) if len != entry.size => {
                return ch
                    .send(&Response::Error {
                        message: format!(
                            "{path} has {len} bytes now, {} in the manifest: it changed while being served",
                            entry.size
                        ),
                    })
                    .await
            }
            Ok((f, _)) => f,
            Err(e) => {
                return ch
                    .send(&Response::Error {
                        message: format!("cannot read {path}: {e}"),
                    })
                    .await
            }
        };
        ch.send(&Response::File(FileHeader {
            path: entry.path.clone(),
            size: entry.size,
            offset,
            sha256: entry.sha256.clone(),
        }))
        .await?;
        let want = entry.size - offset;
        let sent = tokio::io::copy(&mut file.take(want), &mut ch.writer).await?;
        ch.writer.flush().await?;
        if sent != want {
            return Err(ChannelError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{path} shrank while being sent ({sent} of {want} bytes)"),
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
            ..RetryPolicy::default()
        };
        let got: Vec<u128> = (1..=5).map(|a| p.backoff(a).as_millis()).collect();
        assert_eq!(got, [100, 200, 400, 500, 500]);
    }
}
