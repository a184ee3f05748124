//! The partitioner's side of a shard transfer: it serves the files of its
//! manifest, each chunk by sendfile(2) followed by its sha256, hashed when
//! the chunk is first served (or earlier, on idle cores).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dgl_api::wire::{ChunkSums, FileEntry, FileHeader, Manifest, Response};

use super::chunks::{self, FileSums, Sum, CHUNK_SIZE};
use crate::net::channel::{Channel, ChannelError, Timeouts};

/// Server side: serves the files of a manifest from a dataset folder, each
/// chunk followed by its sha256 (see [`crate::transfer::chunks`]).
#[derive(Clone)]
pub struct FileServer {
    manifest: Arc<Manifest>,
    /// The sums of `manifest.files[i]`, computed once each.
    sums: Arc<Vec<FileSums>>,
    timeouts: Timeouts,
}

impl FileServer {
    /// Serves `manifest`'s files below `root`. Files without a sha256 in
    /// the manifest are summed chunk by chunk while their size and
    /// modification time stay what they are now.
    pub fn new(root: PathBuf, manifest: Manifest) -> FileServer {
        let sums = manifest
            .files
            .iter()
            .map(|f| FileSums::new(root.join(&f.path), f.size, f.sha256.is_empty()))
            .collect();
        FileServer {
            manifest: Arc::new(manifest),
            sums: Arc::new(sums),
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

    /// Sums every chunk not summed yet on idle cores (never delaying a
    /// transfer), so that later transfers send straight from the page cache.
    pub fn hash_in_background(&self) {
        chunks::hash_in_background(self.sums.clone());
    }

    fn lookup(&self, path: &str) -> Option<(&FileEntry, &FileSums)> {
        let i = self.manifest.files.iter().position(|f| f.path == path)?;
        Some((&self.manifest.files[i], &self.sums[i]))
    }

    /// Answers `ChunkSums`: every chunk's sum (computed on all cores where
    /// missing).
    pub async fn handle_chunk_sums(
        &self,
        ch: &mut Channel,
        path: &str,
    ) -> Result<(), ChannelError> {
        let Some(i) = self.manifest.files.iter().position(|f| f.path == path) else {
            let message = format!("{path:?} is not in the manifest");
            return ch.send(&Response::Error { message }).await;
        };
        let sums = self.sums.clone();
        let all = tokio::task::spawn_blocking(move || sums[i].all())
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        let resp = match all {
            Ok(s) => Response::ChunkSums(ChunkSums {
                path: path.to_string(),
                chunk_size: CHUNK_SIZE,
                sha256: s.iter().map(hex::encode).collect(),
            }),
            Err(message) => Response::Error { message },
        };
        ch.send(&resp).await
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
        let Some((entry, sums)) = self.lookup(path) else {
            let message = format!("{path:?} is not in the manifest");
            return ch.send(&Response::Error { message }).await;
        };
        if offset > entry.size {
            let message = format!(
                "offset {offset} is past the end of {path} ({} bytes)",
                entry.size
            );
            return ch.send(&Response::Error { message }).await;
        }
        let file = match open_checked(entry, sums) {
            Ok(f) => Arc::new(f),
            Err(message) => return ch.send(&Response::Error { message }).await,
        };
        ch.send(&Response::File(FileHeader {
            path: entry.path.clone(),
            size: entry.size,
            offset,
            sha256: entry.sha256.clone(),
            chunk_size: CHUNK_SIZE,
        }))
        .await?;
        let i = self
            .manifest
            .files
            .iter()
            .position(|f| f.path == path)
            .expect("looked up above");
        let sender = Sender {
            sums: self.sums.clone(),
            i,
            file,
            within: self.timeouts.peer(),
        };
        sender.send_from(ch, offset).await
    }
}

/// Opens a file of the manifest, checked against its size and stamp.
fn open_checked(entry: &FileEntry, sums: &FileSums) -> Result<std::fs::File, String> {
    let file =
        std::fs::File::open(&sums.abs).map_err(|e| format!("cannot read {}: {e}", entry.path))?;
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", entry.path))?
        .len();
    if len != entry.size {
        return Err(format!(
            "{} has {len} bytes now, {} in the manifest: it changed while being served",
            entry.path, entry.size
        ));
    }
    sums.check_unchanged(&file)?;
    Ok(file)
}

/// Streams one file's chunks with their sums.
struct Sender {
    sums: Arc<Vec<FileSums>>,
    i: usize,
    file: Arc<std::fs::File>,
    /// How long the client may take to accept more bytes.
    within: Duration,
}

impl Sender {
    fn file_sums(&self) -> &FileSums {
        &self.sums[self.i]
    }

    /// Every chunk goes out by sendfile(2), straight from the page cache.
    /// A chunk not summed yet is hashed on a blocking thread meanwhile (and
    /// the next one too, a chunk ahead), and its sum follows its bytes. On
    /// a first serving this saves copying every byte into the socket: the
    /// hash reads the page cache, sendfile hands the same pages on.
    async fn send_from(&self, ch: &mut Channel, offset: u64) -> Result<(), ChannelError> {
        let s = self.file_sums();
        let first = usize::try_from(offset / CHUNK_SIZE).unwrap_or(usize::MAX);
        let mut ahead = None;
        for k in first..s.chunks() {
            let (start, end) = chunks::range(k, s.size, CHUNK_SIZE);
            let hashing = match ahead.take() {
                Some(job) => Some(job),
                None => s.cached(k).is_none().then(|| self.hash_chunk(k)),
            };
            if k + 1 < s.chunks() && s.cached(k + 1).is_none() {
                ahead = Some(self.hash_chunk(k + 1));
            }
            self.sendfile(ch, start.max(offset), end).await?;
            let sum = match hashing {
                None => s.cached(k).expect("checked above"),
                Some(job) => job
                    .await
                    .map_err(std::io::Error::other)?
                    .map_err(std::io::Error::other)?,
            };
            self.write_sum(ch, &sum).await?;
        }
        Ok(())
    }

    fn hash_chunk(&self, k: usize) -> tokio::task::JoinHandle<Result<Sum, String>> {
        let (sums, i, file) = (self.sums.clone(), self.i, self.file.clone());
        tokio::task::spawn_blocking(move || sums[i].sum_chunk(&file, k))
    }

    /// A chunk's sum with its tag, which authenticates the chunk's bytes.
    async fn write_sum(&self, ch: &mut Channel, sum: &Sum) -> Result<(), ChannelError> {
        let peer = ch.peer;
        tokio::time::timeout(self.within, ch.writer.write_sealed(sum))
            .await
            .map_err(|_| self.silent(peer))?
    }

    fn silent(&self, peer: SocketAddr) -> ChannelError {
        ChannelError::Silent {
            peer,
            what: "it to take more bytes of a file".into(),
            after: self.within,
        }
    }

    /// Bytes `[from, end)` of the file straight from the page cache to
    /// the socket.
    async fn sendfile(&self, ch: &mut Channel, from: u64, end: u64) -> Result<(), ChannelError> {
        use std::os::fd::AsRawFd;
        use tokio::io::Interest;
        let stream: &tokio::net::TcpStream = ch.writer.get_ref().as_ref();
        let mut off = i64::try_from(from).map_err(std::io::Error::other)?;
        let end = i64::try_from(end).map_err(std::io::Error::other)?;
        while off < end {
            tokio::time::timeout(self.within, stream.writable())
                .await
                .map_err(|_| self.silent(ch.peer))??;
            let len = usize::try_from(end - off).map_err(std::io::Error::other)?;
            let r = stream.try_io(Interest::WRITABLE, || {
                // SAFETY: both descriptors are open for the whole call;
                // sendfile advances `off` by what it sent.
                let n = unsafe {
                    libc::sendfile(stream.as_raw_fd(), self.file.as_raw_fd(), &mut off, len)
                };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match r {
                Ok(0) => {
                    return Err(ChannelError::Io(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("{} shrank while being sent", self.file_sums().abs.display()),
                    )))
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
