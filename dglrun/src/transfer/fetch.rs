//! The worker's side of a shard transfer: it pulls its files from the
//! partitioner, checks every chunk against the sum sent after it, resumes
//! an interrupted file at the byte it already has, and retries a bounded
//! number of times with exponential backoff.
//!
//! A file is written to its partial name (`crate::dataset::partial_path`)
//! and renamed only after its sha256 matched, so a file under its real name
//! is always complete; a file already present with the right size and
//! sha256 is reused.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dgl_api::wire::{is_safe_relative_path, FileEntry, FileHeader, Manifest, Request, Response};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::chunks::{self, Sum, CHUNK_SIZE, SUM_LEN};
use crate::dataset::{partial_path, sha256_file};
use crate::net::channel::{Channel, ChannelError, FrameReader, Token};

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
        let what = "the manifest";
        let m = match self
            .call_retrying(&Request::GetManifest, what, "manifest")
            .await?
        {
            Response::Manifest(m) => m,
            other => return Err(unexpected(self.addr, what, other)),
        };
        for f in &m.files {
            if !is_safe_relative_path(&f.path) {
                return Err(TransferError::UnsafePath(f.path.clone()));
            }
        }
        Ok(m)
    }

    /// Sends `req` and returns the partitioner's answer, whatever it is;
    /// reconnects and retries (with the policy's backoff) while a failure is
    /// worth another attempt. `what` names the request in messages, `label`
    /// in the error of the last attempt.
    async fn call_retrying(
        &mut self,
        req: &Request,
        what: &str,
        label: &str,
    ) -> Result<Response, TransferError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (addr, within) = (self.addr, self.policy.idle_timeout);
            let res = match self.channel().await {
                Ok(ch) => ch
                    .call_within::<_, Response>(req, within, what)
                    .await
                    .map_err(|e| classify(addr, e)),
                Err(a) => Err(a),
            };
            let last = match res {
                Ok(response) => return Ok(response),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(m)) => m,
            };
            self.conn = None;
            if attempt >= self.policy.max_attempts {
                return Err(TransferError::Exhausted {
                    path: label.into(),
                    attempts: attempt,
                    last,
                });
            }
            tracing::warn!(attempt, error = %last, "getting {what} failed; retrying");
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
        let partial = partial_path(&target);
        let local = |source| TransferError::Local {
            path: target.display().to_string(),
            source,
        };
        let started = std::time::Instant::now();
        if self.already_there(entry, &target).await? {
            tracing::debug!(path = %entry.path, "already present and verified");
            stats.reused += 1;
            return Ok(());
        }
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(local)?;
        }
        // A partial file of an earlier process is kept only as far as its
        // chunks match the partitioner's sums now (with a whole-file sum,
        // its bytes are hashed again at the end anyway).
        if entry.sha256.is_empty() {
            self.check_partial(entry, &partial).await?;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let offset = resume_offset(entry, &partial).await.map_err(local)?;
            if offset > 0 {
                tracing::info!(path = %entry.path, offset, size = entry.size, "resuming an interrupted transfer");
                stats.resumed_bytes += offset;
            }
            let last = match self.try_fetch(entry, &partial, offset, stats).await {
                Ok(()) => {
                    tokio::fs::rename(&partial, &target).await.map_err(local)?;
                    // Per file, for finding stalls between files.
                    tracing::debug!(path = %entry.path, size = entry.size, took = ?started.elapsed(), "file fetched");
                    return Ok(());
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

    /// Whether `target` already holds `entry`: the whole file's sha256 when
    /// the manifest has it, else every chunk against the partitioner's sums.
    async fn already_there(
        &mut self,
        entry: &FileEntry,
        target: &Path,
    ) -> Result<bool, TransferError> {
        match tokio::fs::metadata(target).await {
            Ok(m) if m.len() == entry.size => {}
            _ => return Ok(false),
        }
        if !entry.sha256.is_empty() {
            return Ok(hash(target).await.ok() == Some(entry.sha256.clone()));
        }
        let sums = self.chunk_sums(entry).await?;
        let good = verify(target, &sums, entry.size, entry.size).await;
        Ok(good == Some(sums.len()))
    }

    /// Cuts a partial file left by an earlier process after its last chunk
    /// that matches the partitioner's sums (the bytes after it, within one
    /// chunk, are checked when that chunk completes).
    async fn check_partial(
        &mut self,
        entry: &FileEntry,
        partial: &Path,
    ) -> Result<(), TransferError> {
        let have = match tokio::fs::metadata(partial).await {
            Ok(m) if m.len() > 0 => m.len(),
            _ => return Ok(()),
        };
        let sums = self.chunk_sums(entry).await?;
        let good = verify(partial, &sums, entry.size, have).await.unwrap_or(0);
        let whole = (0..sums.len())
            .take_while(|&k| chunks::range(k, entry.size, CHUNK_SIZE).1 <= have)
            .count();
        if good < whole {
            let keep = chunks::range(good, entry.size, CHUNK_SIZE).0;
            tracing::warn!(path = %entry.path, kept = keep, had = have, "a partial file does not match the partitioner's sums; cut after its last good chunk");
            let f = std::fs::OpenOptions::new().write(true).open(partial);
            f.and_then(|f| f.set_len(keep))
                .map_err(|source| TransferError::Local {
                    path: partial.display().to_string(),
                    source,
                })?;
        }
        Ok(())
    }

    /// The partitioner's sum of every chunk of `entry`.
    async fn chunk_sums(&mut self, entry: &FileEntry) -> Result<Vec<Sum>, TransferError> {
        let req = Request::ChunkSums {
            path: entry.path.clone(),
        };
        let what = format!("the chunk sums of {}", entry.path);
        let c = match self.call_retrying(&req, &what, &entry.path).await? {
            Response::ChunkSums(c) => c,
            other => return Err(unexpected(self.addr, &what, other)),
        };
        let n = chunks::count(entry.size, c.chunk_size.max(1));
        match chunks::parse_sums(&c.sha256) {
            Some(s) if c.chunk_size == CHUNK_SIZE && s.len() == n && c.path == entry.path => Ok(s),
            _ => Err(TransferError::Protocol {
                addr: self.addr,
                got: format!("chunk sums for {} that do not fit the file", c.path),
            }),
        }
    }

    /// One attempt at the rest of `entry` from `offset`, written into
    /// `partial` (which holds exactly `offset` bytes).
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
        let sink = Sink::open(partial, entry, offset).await.map_err(local)?;
        let mut rx = Receiver {
            reader: &mut ch.reader,
            idle,
            size: entry.size,
            stats,
            received: &received,
        };
        match rx.receive(sink, offset, &entry.path).await {
            Ok(sink) => sink
                .finish(entry)
                .await
                .map_err(|r| r.into_attempt(partial, stats)),
            Err(r) => Err(r.into_attempt(partial, stats)),
        }
    }
}

/// Where to resume: the partial file's length, except that a partial file
/// as long as the whole (its last chunk never confirmed) re-fetches its
/// last chunk.
async fn resume_offset(entry: &FileEntry, partial: &Path) -> std::io::Result<u64> {
    let have = match tokio::fs::metadata(partial).await {
        Ok(m) => m.len(),
        Err(_) => return Ok(0),
    };
    let offset = if have >= entry.size && entry.size > 0 {
        let last = chunks::count(entry.size, CHUNK_SIZE) - 1;
        chunks::range(last, entry.size, CHUNK_SIZE).0
    } else {
        have
    };
    if offset != have {
        let f = std::fs::OpenOptions::new().write(true).open(partial)?;
        f.set_len(offset)?;
    }
    Ok(offset)
}

/// Leading chunks of `path` (its first `upto` bytes) that match `sums`;
/// `None` when it cannot be read.
async fn verify(path: &Path, sums: &[Sum], total: u64, upto: u64) -> Option<usize> {
    let (path, sums) = (path.to_path_buf(), sums.to_vec());
    tokio::task::spawn_blocking(move || chunks::verify_local(&path, &sums, CHUNK_SIZE, total, upto))
        .await
        .ok()?
        .ok()
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
        chunk_size: CHUNK_SIZE,
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

/// Why receiving stopped early.
enum Received {
    /// The connection: what happened.
    Interrupted(String),
    /// A chunk (or the whole file) did not match its sum; the partial file
    /// was cut before it.
    Corrupt(String),
    /// A chunk's sum failed its tag (altered in flight by someone without
    /// the token); the partial file was cut before the chunk.
    Forged(String),
    /// The local file.
    Write(std::io::Error),
}

impl Received {
    fn into_attempt(self, partial: &Path, stats: &mut FetchStats) -> Attempt {
        match self {
            Received::Interrupted(m) | Received::Forged(m) => Attempt::Retry(m),
            Received::Corrupt(m) => {
                stats.restarted += 1;
                Attempt::Retry(m)
            }
            Received::Write(source) => Attempt::Fatal(TransferError::Local {
                path: partial.display().to_string(),
                source,
            }),
        }
    }
}

/// The local side of one transfer: the partial file and the hashes, moved
/// to a blocking thread for each block so that hashing and writing run on
/// another core while the next block arrives.
struct Sink {
    file: std::fs::File,
    /// The current chunk's hash so far.
    chunk: Sha256,
    /// The whole file's, when the manifest has its sum.
    whole: Option<Sha256>,
}

impl Sink {
    /// Opens `partial` (holding `offset` bytes) and hashes what the
    /// current chunk (and, if needed, the whole file) already has of it.
    async fn open(partial: &Path, entry: &FileEntry, offset: u64) -> std::io::Result<Sink> {
        let (path, whole) = (partial.to_path_buf(), !entry.sha256.is_empty());
        tokio::task::spawn_blocking(move || {
            use std::io::Seek;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)?;
            // Only a longer partial file is cut. Truncating a file to 0
            // bytes, even one already empty, makes ext4 (auto_da_alloc)
            // write the whole file back when it is closed, on the
            // receiving task: 170 ms per 300 MB here, with nothing
            // received meanwhile.
            if file.metadata()?.len() != offset {
                file.set_len(offset)?;
            }
            file.seek(std::io::SeekFrom::Start(offset))?;
            let chunk_start = offset - offset % CHUNK_SIZE;
            let mut sink = Sink {
                chunk: Sha256::new(),
                whole: whole.then(Sha256::new),
                file,
            };
            let from = if sink.whole.is_some() { 0 } else { chunk_start };
            let mut pos = from;
            while pos < offset {
                let end = (pos + CHUNK_SIZE).min(offset);
                let bytes = chunks::read_range(&sink.file, pos, end)?;
                if pos >= chunk_start {
                    sink.chunk.update(&bytes);
                } else if end > chunk_start {
                    sink.chunk.update(&bytes[(chunk_start - pos) as usize..]);
                }
                if let Some(w) = &mut sink.whole {
                    w.update(&bytes);
                }
                pos = end;
            }
            Ok(sink)
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// Hashes and writes one block, then, when it ends a chunk, checks the
    /// chunk against its sum: a bad chunk is cut off the file. Blocking.
    fn write(mut self, block: Vec<u8>, check: Option<ChunkCheck>) -> Written {
        use std::io::Write;
        self.chunk.update(&block);
        if let Some(w) = &mut self.whole {
            w.update(&block);
        }
        let r = self.file.write_all(&block).map_err(Received::Write);
        let r = match (r, check) {
            (Ok(()), Some(c)) => self.check(c),
            (r, _) => r,
        };
        (self, block, r)
    }

    /// Compares the chunk just written with the partitioner's sum.
    fn check(&mut self, c: ChunkCheck) -> Result<(), Received> {
        let got: Sum = std::mem::take(&mut self.chunk).finalize().into();
        if got == c.expected {
            return Ok(());
        }
        self.file.set_len(c.start).map_err(Received::Write)?;
        Err(Received::Corrupt(format!(
            "{}: chunk {} (bytes {}..{}): sha256 mismatch: the partitioner's sum is {}, the bytes received hash to {}; fetching the chunk again",
            c.path,
            c.index,
            c.start,
            c.end,
            hex::encode(c.expected),
            hex::encode(got)
        )))
    }

    /// The whole file's sum, when the manifest has one. No fsync: every
    /// later `PrepareShard` checks files already present against the
    /// partitioner's sums, so one torn by a power loss is caught there.
    async fn finish(self, entry: &FileEntry) -> Result<(), Received> {
        let Some(whole) = self.whole else {
            return Ok(());
        };
        let got = hex::encode(whole.finalize());
        if got == entry.sha256 {
            return Ok(());
        }
        // Corrupt somewhere: resuming would keep the bad bytes.
        self.file.set_len(0).map_err(Received::Write)?;
        Err(Received::Corrupt(format!(
            "sha256 mismatch: expected {}, got {got}; starting the file over",
            entry.sha256
        )))
    }
}

/// The sink back from writing a block, the block's buffer, the result.
type Written = (Sink, Vec<u8>, Result<(), Received>);

/// A chunk's sum, as the partitioner sent it, checked by the thread that
/// wrote the chunk: the next chunk is received meanwhile.
struct ChunkCheck {
    expected: Sum,
    path: String,
    index: usize,
    start: u64,
    end: u64,
}

/// A block being hashed and written on a blocking thread while the next
/// one is read: two buffers of [`CHUNK_SIZE`] bytes in all.
struct Pipe {
    sink: Option<Sink>,
    pending: Option<tokio::task::JoinHandle<Written>>,
    free: Vec<Vec<u8>>,
}

impl Pipe {
    fn new(sink: Sink) -> Pipe {
        Pipe {
            sink: Some(sink),
            pending: None,
            free: Vec::new(),
        }
    }

    fn buffer(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.free.pop().unwrap_or_default();
        b.resize(len, 0);
        b
    }

    /// Waits for the block in flight (and its chunk's check).
    async fn settle(&mut self) -> Result<&mut Sink, Received> {
        if let Some(p) = self.pending.take() {
            let (s, buf, r) = p.await.expect("the block writer does not panic");
            self.free.push(buf);
            self.sink = Some(s);
            r?;
        }
        Ok(self.sink.as_mut().expect("the sink is back once settled"))
    }

    /// Hands `block` to the writing thread once the one before it is
    /// written (and its chunk checked); `check` when it ends a chunk.
    async fn push(&mut self, block: Vec<u8>, check: Option<ChunkCheck>) -> Result<(), Received> {
        self.settle().await?;
        let s = self.sink.take().expect("settled");
        self.pending = Some(tokio::task::spawn_blocking(move || s.write(block, check)));
        Ok(())
    }
}

/// The network side of one transfer.
struct Receiver<'a, R> {
    reader: &'a mut FrameReader<R>,
    idle: Duration,
    size: u64,
    stats: &'a mut FetchStats,
    received: &'a AtomicU64,
}

/// SO_RCVLOWAT while a chunk's bytes arrive: how many bytes the kernel
/// gathers before it wakes the worker (capped by the chunk's rest).
const LOW_WATER: usize = 1 << 20;

/// A connection that can be told how many bytes to wait for before it
/// reads as ready. Waking for every few packets cost a worker a poll, a
/// task switch and a read each time, at over 10,000 wakeups a second.
trait LowWater {
    fn low_water(&self, bytes: usize);
    /// Bytes received and not read yet (0 when unknown).
    fn unread(&self) -> usize;
}

impl LowWater for tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf> {
    fn low_water(&self, bytes: usize) {
        use std::os::fd::AsRawFd;
        let socket: &tokio::net::TcpStream = self.get_ref().as_ref();
        let v = libc::c_int::try_from(bytes.clamp(1, LOW_WATER)).unwrap_or(1);
        // SAFETY: an open socket, an int option of the right size. A
        // failure only leaves the kernel's default (wake on any byte).
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                std::ptr::from_ref(&v).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }

    fn unread(&self) -> usize {
        use std::os::fd::AsRawFd;
        let socket: &tokio::net::TcpStream = self.get_ref().as_ref();
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD (SIOCINQ) on an open TCP socket writes one int.
        let r = unsafe { libc::ioctl(socket.as_raw_fd(), libc::FIONREAD, &mut n) };
        if r == 0 {
            usize::try_from(n).unwrap_or(0)
        } else {
            0
        }
    }
}

impl<R: AsyncRead + Unpin + LowWater> Receiver<'_, R> {
    /// Receives the chunks from `offset` to the end, each checked against
    /// the sum that follows it; a bad chunk is cut off the partial file.
    async fn receive(&mut self, sink: Sink, offset: u64, path: &str) -> Result<Sink, Received> {
        let mut pipe = Pipe::new(sink);
        let r = self.chunks(&mut pipe, offset, path).await;
        // Never leave a write behind: the next attempt reads the file's length.
        let settled = pipe.settle().await;
        r?;
        settled?;
        Ok(pipe.sink.take().expect("settled"))
    }

    /// A chunk at a time to the writing thread (one hand-over per chunk: at
    /// 1 MiB blocks the thread switches took about 5 % of a worker's CPU).
    /// While it hashes, writes and checks chunk k, chunk k + 1 and its sum
    /// arrive: waiting for each check before reading on left the socket
    /// idle for the hashing of every chunk.
    async fn chunks(&mut self, pipe: &mut Pipe, offset: u64, path: &str) -> Result<(), Received> {
        let first = usize::try_from(offset / CHUNK_SIZE).unwrap_or(usize::MAX);
        for k in first..chunks::count(self.size, CHUNK_SIZE) {
            let (start, end) = chunks::range(k, self.size, CHUNK_SIZE);
            let pos = start.max(offset);
            let mut block = pipe.buffer((end - pos) as usize);
            if let Err((filled, e)) = self.read_exact(&mut block).await {
                // What did arrive is kept (the next attempt resumes
                // after it and checks it with the rest of the chunk).
                block.truncate(filled);
                pipe.push(block, None).await?;
                return Err(e);
            }
            let expected = match self.read_sum().await {
                Ok(sum) => sum,
                Err(Received::Forged(m)) => {
                    // The chunk's bytes are unauthenticated: never keep them
                    // (nor what a resumed chunk had before them).
                    let sink = pipe.settle().await?;
                    sink.file.set_len(start).map_err(Received::Write)?;
                    return Err(Received::Forged(format!("{path}: chunk {k}: {m}")));
                }
                Err(e) => return Err(e),
            };
            let check = ChunkCheck {
                expected,
                path: path.to_string(),
                index: k,
                start,
                end,
            };
            pipe.push(block, Some(check)).await?;
        }
        Ok(())
    }

    /// The chunk's sum that follows its bytes, checked against its tag: the
    /// bytes are authenticated through it. A bad tag ends the connection.
    async fn read_sum(&mut self) -> Result<Sum, Received> {
        let mut sum = [0u8; SUM_LEN];
        match tokio::time::timeout(self.idle, self.reader.read_sealed(&mut sum)).await {
            Ok(Ok(())) => Ok(sum),
            Ok(Err(e @ ChannelError::Unauthentic { .. })) => {
                Err(Received::Forged(format!("its sum: {e}")))
            }
            Ok(Err(e)) => Err(Received::Interrupted(format!("a chunk's sum: {e}"))),
            Err(_) => Err(Received::Interrupted(format!(
                "no chunk sum for {:?} ({} of {} bytes received so far)",
                self.idle, self.stats.transferred, self.size
            ))),
        }
    }

    /// Fills `buf` with file bytes; a read that brings no byte for `idle`
    /// interrupts (the error comes with the bytes filled by then).
    async fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), (usize, Received)> {
        let mut filled = 0;
        // A slow peer: read whatever comes, as without a low-water mark.
        let mut slow = false;
        while filled < buf.len() {
            // Never more than this chunk's rest: the sum frame after it is
            // all that follows, and must not wait.
            let want = if slow { 1 } else { buf.len() - filled };
            self.reader.get_mut().low_water(want);
            let read = self.reader.get_mut().read(&mut buf[filled..]);
            let n = match tokio::time::timeout(self.idle, read).await {
                // Bytes came, fewer than the mark: the peer is slow, not
                // silent. (Cancelling the read lost nothing: it had none.)
                Err(_) if !slow && self.reader.get_mut().unread() > 0 => {
                    slow = true;
                    continue;
                }
                Err(_) => {
                    return Err((
                        filled,
                        Received::Interrupted(format!(
                            "no data for {:?} ({} of {} bytes received so far)",
                            self.idle, self.stats.transferred, self.size
                        )),
                    ))
                }
                Ok(Err(e)) => {
                    return Err((filled, Received::Interrupted(format!("read failed: {e}"))))
                }
                Ok(Ok(0)) => {
                    return Err((
                        filled,
                        Received::Interrupted(format!(
                            "connection closed ({} of {} bytes received so far)",
                            self.stats.transferred, self.size
                        )),
                    ))
                }
                Ok(Ok(n)) => n,
            };
            filled += n;
            self.stats.transferred += n as u64;
            self.received.fetch_add(n as u64, Ordering::Relaxed);
        }
        // Frames (the chunk's sum, the next request's answer) read at once.
        self.reader.get_mut().low_water(1);
        Ok(())
    }
}

/// The error for an answer that is not the one asked for: the
/// partitioner's own error, or a protocol error naming what came.
fn unexpected(addr: SocketAddr, what: &str, response: Response) -> TransferError {
    match response {
        Response::Error { message } => TransferError::Remote {
            addr,
            what: what.into(),
            message,
        },
        other => TransferError::Protocol {
            addr,
            got: format!("{other:?}"),
        },
    }
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

    /// ftruncate(2), even to the length a file has, marks it for ext4's
    /// auto_da_alloc: its close then writes the whole file back, on the
    /// task that receives the next file. A partial file is cut only when
    /// it is longer than what is kept (ftruncate also sets the mtime,
    /// which is what this test sees).
    #[tokio::test]
    async fn a_partial_file_is_cut_only_when_longer_than_what_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let long_ago = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let partial = |name: &str, len: usize| {
            let path = dir.path().join(name);
            std::fs::write(&path, vec![7u8; len]).unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(long_ago).unwrap();
            path
        };
        let entry = FileEntry {
            path: "f".into(),
            size: 3 * CHUNK_SIZE,
            sha256: String::new(),
        };
        let meta = |p: &Path| std::fs::metadata(p).unwrap();
        for (name, have, offset) in [("empty", 0, 0), ("resumed", 1000, 1000)] {
            let path = partial(name, have);
            drop(Sink::open(&path, &entry, offset).await.unwrap());
            assert_eq!(
                meta(&path).modified().unwrap(),
                long_ago,
                "{name}: truncated"
            );
            assert_eq!(meta(&path).len(), offset);
        }
        let longer = partial("longer", 1000);
        drop(Sink::open(&longer, &entry, 600).await.unwrap());
        assert_eq!(meta(&longer).len(), 600);
    }
}
