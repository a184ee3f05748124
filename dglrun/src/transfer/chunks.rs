//! Files as chunks of [`CHUNK_SIZE`] bytes, each with its own sha256: the
//! partitioner hashes a chunk when it first serves it (or earlier, in the
//! background on idle cores) and sends the sum after its bytes; a worker
//! checks every chunk as it arrives, and a file or partial file already on
//! disk chunk by chunk on all cores. Serving never waits for a hash pass
//! over the whole dataset, and a resumed transfer stays verified.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

pub use dgl_api::wire::{CHUNK_SIZE, SUM_LEN};
use sha2::{Digest, Sha256};

/// A chunk's sha256.
pub type Sum = [u8; SUM_LEN];

/// Number of chunks of a file of `size` bytes.
pub fn count(size: u64, chunk_size: u64) -> usize {
    usize::try_from(size.div_ceil(chunk_size)).unwrap_or(usize::MAX)
}

/// The byte range `[start, end)` of chunk `k`.
pub fn range(k: usize, size: u64, chunk_size: u64) -> (u64, u64) {
    let start = (k as u64).saturating_mul(chunk_size);
    (start, start.saturating_add(chunk_size).min(size))
}

/// sha256 of bytes.
pub fn sum(bytes: &[u8]) -> Sum {
    Sha256::digest(bytes).into()
}

/// Reads bytes `[start, end)` of a file.
pub fn read_range(file: &File, start: u64, end: u64) -> io::Result<Vec<u8>> {
    let len = usize::try_from(end - start).map_err(io::Error::other)?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, start)?;
    Ok(buf)
}

/// Bytes read per call when hashing from a file: small enough that what
/// was just copied is still in the core's cache when it is hashed.
const HASH_READ: usize = 256 * 1024;

thread_local! {
    /// Reused, so that hashing does not fault in a fresh buffer per chunk.
    static HASH_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The sha256 of bytes `[start, end)` of `file`. Blocking.
pub fn hash_range(file: &File, start: u64, end: u64) -> io::Result<Sum> {
    HASH_BUF.with_borrow_mut(|buf| {
        buf.resize(HASH_READ, 0);
        let mut h = Sha256::new();
        let mut pos = start;
        while pos < end {
            let n = usize::try_from(end - pos).map_or(HASH_READ, |n| n.min(HASH_READ));
            file.read_exact_at(&mut buf[..n], pos)?;
            h.update(&buf[..n]);
            pos += n as u64;
        }
        Ok(h.finalize().into())
    })
}

/// Size and modification time: what must not change while a file is served
/// from a manifest without sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    pub fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }
}

/// The sender's sums of one file, each computed at most once.
#[derive(Debug)]
pub struct FileSums {
    pub abs: PathBuf,
    pub size: u64,
    /// When the file was listed: a chunk is hashed only while the file
    /// still has this stamp, so the sums describe the checked partitions.
    /// `None`: the manifest holds the whole file's sha256, which the worker
    /// checks too.
    pub stamp: Option<Result<Stamp, String>>,
    sums: Vec<OnceLock<Sum>>,
}

impl FileSums {
    pub fn new(abs: PathBuf, size: u64, guarded: bool) -> FileSums {
        let stamp = guarded.then(|| {
            std::fs::metadata(&abs)
                .map(|m| Stamp::of(&m))
                .map_err(|e| e.to_string())
        });
        FileSums {
            abs,
            size,
            stamp,
            sums: (0..count(size, CHUNK_SIZE))
                .map(|_| OnceLock::new())
                .collect(),
        }
    }

    pub fn chunks(&self) -> usize {
        self.sums.len()
    }

    pub fn cached(&self, k: usize) -> Option<Sum> {
        self.sums.get(k)?.get().copied()
    }

    /// Fails when the file is no longer the one that was listed.
    pub fn check_unchanged(&self, file: &File) -> Result<(), String> {
        match &self.stamp {
            None => Ok(()),
            Some(Err(e)) => Err(format!("cannot read {}: {e}", self.abs.display())),
            Some(Ok(stamp)) => {
                let now = file.metadata().map(|m| Stamp::of(&m));
                match now {
                    Ok(now) if now == *stamp => Ok(()),
                    Ok(_) => Err(format!(
                        "{} changed after the partitions were checked (size or modification time differ)",
                        self.abs.display()
                    )),
                    Err(e) => Err(format!("cannot read {}: {e}", self.abs.display())),
                }
            }
        }
    }

    /// The sum of chunk `k` of `file`, hashed and cached unless it is
    /// already. Blocking.
    pub fn sum_chunk(&self, file: &File, k: usize) -> Result<Sum, String> {
        if let Some(s) = self.cached(k) {
            return Ok(s);
        }
        let (start, end) = range(k, self.size, CHUNK_SIZE);
        let s = hash_range(file, start, end)
            .map_err(|e| format!("cannot read {}: {e}", self.abs.display()))?;
        // Checked after the read: a file changed meanwhile is not summed.
        self.check_unchanged(file)?;
        Ok(*self.sums[k].get_or_init(|| s))
    }

    /// Every sum, computing the missing ones on all cores. Blocking.
    pub fn all(&self) -> Result<Vec<Sum>, String> {
        let file = File::open(&self.abs)
            .map_err(|e| format!("cannot read {}: {e}", self.abs.display()))?;
        self.check_unchanged(&file)?;
        let missing: Vec<usize> = (0..self.chunks())
            .filter(|&k| self.cached(k).is_none())
            .collect();
        parallel(missing.len(), |i| {
            self.sum_chunk(&file, missing[i]).map(|_| ())
        })?;
        Ok((0..self.chunks())
            .map(|k| self.cached(k).expect("every chunk was just summed"))
            .collect())
    }
}

/// Runs `job(0..n)` on every core; the first error, if any.
pub fn parallel<E: Send>(n: usize, job: impl Fn(usize) -> Result<(), E> + Sync) -> Result<(), E> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(n);
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return Ok(());
                    }
                    job(i)?;
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("hash threads do not panic"))
    })
}

/// Hashes every chunk not summed yet, on threads that run only when a core
/// would otherwise idle (SCHED_IDLE), so a transfer never waits for them.
pub fn hash_in_background(files: Arc<Vec<FileSums>>) {
    // From the last chunk back: transfers start at the front of each file,
    // so the two meet late and a chunk is seldom hashed by both at once.
    let jobs: Arc<Vec<(usize, usize)>> = Arc::new(
        files
            .iter()
            .enumerate()
            .flat_map(|(f, s)| (0..s.chunks()).map(move |k| (f, k)))
            .rev()
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    for _ in 0..threads {
        let (files, jobs, next) = (files.clone(), jobs.clone(), next.clone());
        let spawned = std::thread::Builder::new()
            .name("chunk-sums".into())
            .spawn(move || {
                lower_priority();
                while let Some(&(f, k)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let s = &files[f];
                    if s.cached(k).is_some() {
                        continue;
                    }
                    let r = File::open(&s.abs)
                        .map_err(|e| e.to_string())
                        .and_then(|file| s.sum_chunk(&file, k));
                    if let Err(e) = r {
                        // Serving will report it to the worker that asks.
                        tracing::debug!(error = %e, "background hashing skipped a chunk");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start a background hashing thread");
        }
    }
}

fn lower_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads `param`; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc != 0 {
        tracing::debug!(error = %io::Error::last_os_error(), "cannot lower the hashing threads' priority");
    }
}

/// How many leading chunks of a `total`-byte file are whole and match
/// `sums` among the first `upto` bytes of the local file `path`, checked on
/// all cores. Blocking.
pub fn verify_local(
    path: &Path,
    sums: &[Sum],
    chunk_size: u64,
    total: u64,
    upto: u64,
) -> io::Result<usize> {
    let file = File::open(path)?;
    let have = file.metadata()?.len().min(upto);
    let n = (0..sums.len())
        .take_while(|&k| range(k, total, chunk_size).1 <= have)
        .count();
    let good: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
    parallel(n, |k| {
        let (start, end) = range(k, total, chunk_size);
        if hash_range(&file, start, end)? == sums[k] {
            good[k].store(1, Ordering::Relaxed);
        }
        Ok::<(), io::Error>(())
    })?;
    Ok(good
        .iter()
        .take_while(|g| g.load(Ordering::Relaxed) == 1)
        .count())
}

/// Parses hex sums.
pub fn parse_sums(hex_sums: &[String]) -> Option<Vec<Sum>> {
    hex_sums
        .iter()
        .map(|h| {
            let mut s = [0u8; SUM_LEN];
            hex::decode_to_slice(h, &mut s).ok()?;
            Some(s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_ranges_cover_the_file() {
        assert_eq!(count(0, 4), 0);
        assert_eq!(count(8, 4), 2);
        assert_eq!(count(9, 4), 3);
        assert_eq!(range(2, 9, 4), (8, 9));
    }

    #[test]
    fn local_chunks_are_checked_up_to_the_first_bad_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..10u8).collect();
        std::fs::write(&p, &data).unwrap();
        let sums: Vec<Sum> = data.chunks(4).map(sum).collect();
        assert_eq!(verify_local(&p, &sums, 4, 10, 10).unwrap(), 3, "complete");
        assert_eq!(
            verify_local(&p, &sums, 4, 10, 7).unwrap(),
            1,
            "whole chunks only"
        );
        let mut bad = data.clone();
        bad[5] ^= 1;
        std::fs::write(&p, &bad).unwrap();
        assert_eq!(verify_local(&p, &sums, 4, 10, 10).unwrap(), 1);
    }

    #[test]
    fn a_range_is_hashed_in_pieces_as_a_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..(2 * HASH_READ + 1234))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(&p, &data).unwrap();
        let f = File::open(&p).unwrap();
        for (start, end) in [
            (0, data.len()),
            (5, HASH_READ),
            (HASH_READ - 1, 2 * HASH_READ + 7),
            (9, 9),
        ] {
            let got = hash_range(&f, start as u64, end as u64).unwrap();
            assert_eq!(got, sum(&data[start..end]), "{start}..{end}");
        }
        assert!(
            hash_range(&f, 0, data.len() as u64 + 1).is_err(),
            "past the end"
        );
    }

    #[test]
    fn a_listed_file_that_changed_is_not_summed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"abcdefgh").unwrap();
        let s = FileSums::new(p.clone(), 8, true);
        let f = File::open(&p).unwrap();
        assert_eq!(s.sum_chunk(&f, 0).unwrap(), sum(b"abcdefgh"));
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&p, b"ABCDEFGHI").unwrap();
        let f = File::open(&p).unwrap();
        let e = s.check_unchanged(&f).unwrap_err();
        assert!(
            e.contains("changed after the partitions were checked"),
            "{e}"
        );
        // The sum computed before stays (it describes the checked file).
        assert_eq!(s.cached(0), Some(sum(b"abcdefgh")));
    }
}
