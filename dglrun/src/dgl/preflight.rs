//! Checks a worker runs before it starts DGL, so that a broken image, a full
//! /dev/shm or a taken port is reported by name instead of as a hang or a
//! SIGBUS in the middle of training.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

/// A failed check.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("DGL is not installed for {python}: {detail}")]
    Dgl { python: String, detail: String },
    #[error("{ip} is not an address of this machine (local addresses: {local}); DGL finds its machine id by matching ip_config against local addresses")]
    NotLocal { ip: IpAddr, local: String },
    #[error("cannot list network interfaces: {0}")]
    Interfaces(String),
    #[error("{path} has {free} bytes free but this machine's partition needs {need} bytes in shared memory; enlarge the /dev/shm volume (an emptyDir with medium: Memory and a sizeLimit) or use more partitions")]
    Shm { path: String, free: u64, need: u64 },
    #[error("cannot check free space of {path}: {source}")]
    Statvfs { path: String, source: nix::Error },
    #[error("port {port} on {ip} is in use ({what}): {source}")]
    Port {
        ip: IpAddr,
        port: u16,
        what: String,
        source: std::io::Error,
    },
    #[error(
        "the training entry point {path} does not exist (relative paths are resolved from {cwd})"
    )]
    EntryPoint { path: String, cwd: String },
}

/// Finds DGL with the configured interpreter, without importing it, and
/// returns its version. Why not `import dgl`: that costs about 4 CPU-seconds
/// per worker and run (torch and DGL load), and the DGL servers started
/// next import it anyway, so an image whose DGL or torch is broken still
/// fails there with the traceback in the log; this check names the case
/// seen most (the interpreter has no DGL at all) before any process starts.
const FIND_DGL: &str = "\
import importlib.metadata as m, importlib.util as u, sys
if u.find_spec('dgl') is None:
    sys.exit(\"No module named 'dgl'\")
try:
    print(m.version('dgl'))
except m.PackageNotFoundError:
    print('unknown (no package metadata)')
";

/// Finds DGL with `python` (see [`FIND_DGL`]) and returns its version.
pub async fn dgl_version(python: &str) -> Result<String, PreflightError> {
    let err = |detail: String| PreflightError::Dgl {
        python: python.to_string(),
        detail,
    };
    let fut = Command::new(python)
        .args(["-c", FIND_DGL])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), fut)
        .await
        .map_err(|_| err("finding DGL took more than 300 s".into()))?
        .map_err(|e| err(format!("cannot run the interpreter: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(err(format!(
            "{}; {}",
            crate::procs::exit_info(out.status),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The interface that holds `ip` (for GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME).
pub fn interface_of(ip: IpAddr) -> Result<String, PreflightError> {
    let addrs =
        nix::ifaddrs::getifaddrs().map_err(|e| PreflightError::Interfaces(e.to_string()))?;
    let mut local = Vec::new();
    for a in addrs {
        let Some(sa) = a.address else { continue };
        let found: Option<IpAddr> = if let Some(v4) = sa.as_sockaddr_in() {
            Some(IpAddr::V4(v4.ip()))
        } else {
            sa.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
        };
        if let Some(found) = found {
            if found == ip {
                return Ok(a.interface_name);
            }
            local.push(format!("{found} ({})", a.interface_name));
        }
    }
    Err(PreflightError::NotLocal {
        ip,
        local: local.join(", "),
    })
}

/// Free bytes for unprivileged use on the file system of `path`.
pub fn free_bytes(path: &Path) -> Result<u64, PreflightError> {
    let st = nix::sys::statvfs::statvfs(path).map_err(|source| PreflightError::Statvfs {
        path: path.display().to_string(),
        source,
    })?;
    Ok(st.blocks_available() as u64 * st.fragment_size() as u64)
}

/// Fails unless `path` can hold `need` bytes.
pub fn check_shm(path: &Path, need: u64) -> Result<u64, PreflightError> {
    let free = free_bytes(path)?;
    if free < need {
        return Err(PreflightError::Shm {
            path: path.display().to_string(),
            free,
            need,
        });
    }
    Ok(free)
}

/// Fails if a port cannot be bound on `ip` (someone else listens there).
pub fn check_port_free(ip: IpAddr, port: u16, what: &str) -> Result<(), PreflightError> {
    TcpListener::bind(SocketAddr::new(ip, port))
        .map(drop)
        .map_err(|source| PreflightError::Port {
            ip,
            port,
            what: what.to_string(),
            source,
        })
}

/// Fails if the training script is not there.
pub fn check_entry_point(path: &str) -> Result<(), PreflightError> {
    if Path::new(path).is_file() {
        return Ok(());
    }
    Err(PreflightError::EntryPoint {
        path: path.to_string(),
        cwd: std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|_| "?".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_local_and_others_are_not() {
        assert_eq!(interface_of("127.0.0.1".parse().unwrap()).unwrap(), "lo");
        let e = interface_of("192.0.2.77".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("127.0.0.1 (lo)"), "{e}");
    }

    #[test]
    fn shm_and_ports() {
        let free = free_bytes(Path::new("/tmp")).unwrap();
        assert!(check_shm(Path::new("/tmp"), 1).is_ok());
        let e = check_shm(Path::new("/tmp"), free + (1 << 40)).unwrap_err();
        assert!(e.to_string().contains("bytes free"), "{e}");
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let e = check_port_free("127.0.0.1".parse().unwrap(), port, "DGL server 0").unwrap_err();
        assert!(e.to_string().contains("DGL server 0"), "{e}");
        drop(l);
        // A port just freed is free, unless another process (the tests run
        // beside others) took it in between: a few fresh ports, one must pass.
        let freed = (0..5).any(|_| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            drop(l);
            check_port_free("127.0.0.1".parse().unwrap(), port, "x").is_ok()
        });
        assert!(freed, "five ports just freed were each reported in use");
    }

    /// An interpreter without DGL is named with Python's own words; one
    /// with it gives the version (the test venv, when the test command
    /// provides it).
    #[tokio::test]
    async fn dgl_is_found_without_importing_it() {
        let err = dgl_version("python3").await.unwrap_err().to_string();
        assert!(
            err.contains("DGL is not installed for python3")
                && err.contains("No module named 'dgl'"),
            "{err}"
        );
        if let Some(py) = std::env::var_os("DGLRUN_TEST_PYTHON") {
            let py = py.to_string_lossy();
            assert_eq!(dgl_version(&py).await.unwrap(), "2.1.0");
        }
    }
}
