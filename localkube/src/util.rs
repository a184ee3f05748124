//! Small filesystem and process helpers shared by the build and cluster code.
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Prints a progress line to stderr, bypassing libtest's output capture
/// (which only intercepts the print macros): a `cargo test` that builds
/// Kubernetes for 20 minutes must not look hung.
macro_rules! progress {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!("[localkube] {}\n", format_args!($($arg)*));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}
pub(crate) use progress;

/// Environment variable that overrides the cache directory.
pub const CACHE_ENV: &str = "DGL_OPERATOR_CACHE";

/// `$DGL_OPERATOR_CACHE`, else `$HOME/.cache/dgl-operator`.
///
/// Shared with other project tooling (the Python venv lives there too), so a
/// developer can wipe or relocate all project caches with one variable.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(CACHE_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .ok_or(Error::NoCacheDir)?;
    Ok(PathBuf::from(home).join(".cache").join("dgl-operator"))
}

pub(crate) fn create_dir_all(path: &Path) -> Result<()> {
    fs::create_dir_all(path).map_err(Error::io("creating directory", path))
}

pub(crate) fn read_to_string(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(Error::io("reading", path))
}

/// Writes via a temporary file + rename so a crash or a concurrent reader never
/// sees a half-written kubeconfig, key or state file.
pub(crate) fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)
            .map_err(Error::io("creating", &tmp))?;
        f.write_all(contents).map_err(Error::io("writing", &tmp))?;
        f.sync_all().ok();
    }
    fs::rename(&tmp, path).map_err(Error::io("renaming into place", path))
}

pub(crate) fn remove_dir_all_if_exists(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("removing", path)(e)),
    }
}

pub(crate) fn remove_file_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("removing", path)(e)),
    }
}

/// The last `n` lines of a log file, for error messages. Never fails: a
/// missing log is itself useful information.
pub(crate) fn tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(could not read {}: {e})", path.display()),
    }
}

/// An exclusive advisory lock (flock) on a file, released on drop.
///
/// flock locks belong to the open file description, so two threads of one
/// process that each call `acquire` also exclude each other; that matters
/// because one test binary runs many tests on parallel threads.
#[derive(Debug)]
pub(crate) struct FileLock {
    file: File,
    path: PathBuf,
}

impl FileLock {
    /// Blocks until the lock is held. Prints one line if another process holds
    /// it, so a waiting `cargo test` does not look hung during a cold build.
    pub(crate) fn acquire(path: &Path, purpose: &str) -> Result<FileLock> {
        if let Some(parent) = path.parent() {
            create_dir_all(parent)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
            .map_err(Error::io("opening lock file", path))?;
        let fd = file.as_raw_fd();
        // SAFETY: flock on a file descriptor we own; no memory is involved.
        if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(Error::io("locking", path)(err));
            }
            progress!(
                "waiting for {purpose}: another process holds {}",
                path.display()
            );
            loop {
                // SAFETY: as above.
                if unsafe { libc::flock(fd, libc::LOCK_EX) } == 0 {
                    break;
                }
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::Interrupted {
                    return Err(Error::io("locking", path)(err));
                }
            }
        }
        Ok(FileLock {
            file,
            path: path.to_owned(),
        })
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the file releases the lock anyway; unlocking explicitly keeps
        // the release independent of when the File is dropped.
        // SAFETY: flock on our own descriptor.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
        tracing::trace!(path = %self.path.display(), "released lock");
    }
}

/// FNV-1a: a hash that is stable across Rust releases (std's hasher is not),
/// used to derive default ports from a cluster name and unique suffixes.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Validates a cluster name; it becomes a directory name and an etcd member name.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    let ok = (1..=40).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName {
            name: name.to_owned(),
        })
    }
}

/// Formats a duration as `1m23s` for progress lines.
pub(crate) fn human(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// A plain HTTP/1.0 GET to 127.0.0.1:`port` (etcd, kubelet and kube-proxy
/// health ports, the operator's metrics; the kube client speaks TLS only):
/// the status code (0 if the answer has none) and the body.
pub async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    http_get_at("127.0.0.1", port, path).await
}

/// [`http_get`] to `host` (an extra node's health ports are on its node IP).
pub async fn http_get_at(host: &str, port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect((host, port)).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_name("dev").is_ok());
        assert!(validate_name("test-2").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("../etc").is_err());
        assert!(validate_name("Dev").is_err());
        assert!(validate_name("1abc").is_err());
    }

    #[test]
    fn tail_of_missing_file_is_a_message() {
        assert!(tail(Path::new("/nonexistent/x.log"), 5).contains("could not read"));
    }
}
