//! What the bench created and must remove: filled before each thing is
//! created, emptied as things are removed, emptied entirely by `cleanup`
//! (drop guard or signal).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// A signal arrived; its thread owns the cleanup from then on.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

pub fn set_interrupted() {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

struct Registry {
    namespaces: Vec<String>,
    pids: Vec<u32>,
    dirs: Vec<PathBuf>,
    /// Kernel settings changed for the run, with their values before.
    settings: Vec<(PathBuf, String)>,
    /// Set by `cleanup`: whatever is tracked later is removed at once.
    closed: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    namespaces: Vec::new(),
    pids: Vec::new(),
    dirs: Vec::new(),
    settings: Vec::new(),
    closed: false,
});

fn lock() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn track_ns(name: &str) {
    lock().namespaces.push(name.to_string());
}

pub fn track_pid(pid: u32) {
    let mut r = lock();
    if r.closed {
        kill(pid, libc::SIGKILL);
    } else {
        r.pids.push(pid);
    }
}

pub fn untrack_pid(pid: u32) {
    lock().pids.retain(|p| *p != pid);
}

pub fn track_dir(dir: &Path) {
    lock().dirs.push(dir.to_path_buf());
}

pub fn track_setting(path: &Path, original: &str) {
    lock()
        .settings
        .push((path.to_path_buf(), original.to_string()));
}

pub fn untrack_setting(path: &Path) {
    lock().settings.retain(|(p, _)| p != path);
}

fn kill(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) on a pid this bench started.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Kills what still runs in the namespaces (only the bench's processes
/// can be there) and deletes them; the veth pairs and the bridge go with them.
pub fn delete_namespaces(names: &[String]) {
    for ns in names {
        if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
            for p in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Ok(pid) = p.parse() {
                    kill(pid, libc::SIGKILL);
                }
            }
        }
        let _ = Command::new("ip").args(["netns", "del", ns]).output();
    }
    lock().namespaces.retain(|n| !names.contains(n));
}

/// Deletes the namespaces of earlier benches that were SIGKILLed (no
/// cleanup code ran): named `dglbs<pid>-...` after a pid that is gone.
pub fn remove_stale_namespaces() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    let stale: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| {
            name.strip_prefix("dglbs")
                .and_then(|r| r.split_once('-'))
                .and_then(|(pid, _)| pid.parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        })
        .map(str::to_string)
        .collect();
    if !stale.is_empty() {
        eprintln!(
            "==> deleting namespaces of a killed bench: {}",
            stale.join(" ")
        );
        delete_namespaces(&stale);
    }
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Stops every tracked process (SIGTERM, SIGKILL after 5 s), deletes the
/// namespaces and the folders.
pub fn cleanup() {
    let (pids, namespaces, dirs, settings) = {
        let mut r = lock();
        r.closed = true;
        (
            std::mem::take(&mut r.pids),
            r.namespaces.clone(),
            std::mem::take(&mut r.dirs),
            std::mem::take(&mut r.settings),
        )
    };
    for (path, original) in settings {
        let _ = std::fs::write(path, original);
    }
    for &p in &pids {
        kill(p, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for &p in &pids {
        if alive(p) {
            kill(p, libc::SIGKILL);
        }
    }
    delete_namespaces(&namespaces);
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}
