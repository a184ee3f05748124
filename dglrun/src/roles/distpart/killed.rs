//! A rank killed by a signal (the kernel's OOM killer sends SIGKILL): which
//! rank, on which worker, and that worker pod's memory limit. The rank's
//! guard ([`super::guard`]) reports all three in one line; failing that,
//! mpirun's own line names the rank and the worker's agent is asked for
//! the limit it reads from its own cgroup (its Pong).

use std::path::Path;
use std::time::Duration;

use dgl_api::wire::{Request, Response};

use crate::net::channel::{Channel, Token};
use crate::net::hosts::Peer;

/// A rank that died of a signal it was not asked to stop by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Killed {
    pub rank: u32,
    /// `9 (Killed)`.
    pub signal: String,
    pub limit: Limit,
}

/// The killed rank's memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Not reported (mpirun's line): ask the worker's agent.
    Unreported,
    /// The guard found no limit in its cgroup.
    Unlimited,
    Bytes(u64),
}

/// What mpirun said of a rank it saw die: `mpirun noticed that process
/// rank 1 with PID 0 on node 10.0.0.3 exited on signal 9 (Killed).`
pub fn killed(line: &str) -> Option<Killed> {
    let rest = &line[line.find("noticed that process rank ")? + 26..];
    let rank = rest.split_whitespace().next()?.parse().ok()?;
    let signal = &rest[rest.find("exited on signal ")? + 17..];
    let signal = signal.trim_end().trim_end_matches('.').to_string();
    Some(Killed {
        rank,
        signal,
        limit: Limit::Unreported,
    })
}

const GUARD: &str = "dglrun rank-guard: rank ";
const BY: &str = " was killed by signal ";
const LIMIT: &str = "; memory limit: ";

/// The guard's line: `dglrun rank-guard: rank 1 on j-worker-1 was killed
/// by signal 9 (Killed); memory limit: 2147483648 bytes` (or `none`). An
/// unknown rank is written `?`, which no launcher reads as a rank.
pub fn guard_line(rank: Option<u32>, host: &str, signal: &str, limit: Limit) -> String {
    let rank = rank.map_or("?".to_string(), |r| r.to_string());
    let limit = match limit {
        Limit::Bytes(b) => format!("{b} bytes"),
        Limit::Unlimited | Limit::Unreported => "none".into(),
    };
    format!("{GUARD}{rank} on {host}{BY}{signal}{LIMIT}{limit}")
}

/// The killed rank of a guard's line, if `line` is one.
pub fn guarded(line: &str) -> Option<Killed> {
    let rest = &line[line.find(GUARD)? + GUARD.len()..];
    let rank = rest.split_whitespace().next()?.parse().ok()?;
    let rest = &rest[rest.find(BY)? + BY.len()..];
    let (signal, limit) = rest.split_once(LIMIT)?;
    let limit = match limit.trim_end() {
        "none" => Limit::Unlimited,
        b => Limit::Bytes(b.strip_suffix(" bytes")?.parse().ok()?),
    };
    Some(Killed {
        rank,
        signal: signal.to_string(),
        limit,
    })
}

/// `rank R on <worker> was killed by signal 9 (Killed), most likely out of
/// memory: the pod's memory limit is 2.0 GiB` (or that the pod has none,
/// or that it is not known).
pub fn describe(k: &Killed, worker: Option<&Peer>) -> String {
    let on = worker
        .map(|w| format!(" on {}", w.describe()))
        .unwrap_or_default();
    let why = if k.signal.starts_with("9 ") || k.signal == "9" {
        ", most likely out of memory"
    } else {
        ""
    };
    let limit = match k.limit {
        Limit::Bytes(b) => format!("the pod's memory limit is {}", gib(b)),
        Limit::Unlimited => "the pod has no memory limit".to_string(),
        Limit::Unreported => "the pod's memory limit is not known".to_string(),
    };
    format!(
        "rank {}{on} was killed by signal {}{why}: {limit}",
        k.rank, k.signal
    )
}

/// `2.0 GiB (2147483648 bytes)`.
fn gib(bytes: u64) -> String {
    format!(
        "{:.1} GiB ({bytes} bytes)",
        bytes as f64 / f64::from(1u32 << 30)
    )
}

/// This pod's memory limit from its cgroup: v2's `memory.max`, else v1's
/// `memory.limit_in_bytes`, under `root` (`/sys/fs/cgroup`). `None`: no
/// limit (`max`, or v1's near-2^63 "unlimited") or no cgroup file.
pub fn memory_limit(root: &Path) -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
    let raw = read("memory.max").or_else(|| read("memory/memory.limit_in_bytes"))?;
    limit_of(&raw)
}

fn limit_of(raw: &str) -> Option<u64> {
    let bytes: u64 = raw.trim().parse().ok()?;
    // cgroup v1 writes "unlimited" as the largest page multiple below 2^63.
    (bytes < 1 << 62).then_some(bytes)
}

/// The memory limit that holds this process: the smallest along its
/// cgroup's path (`cgroups`, the text of `/proc/self/cgroup`) under `root`,
/// v2's `memory.max` or v1's `memory.limit_in_bytes`, and the mount's own
/// (a pod's cgroup mounted at `root` itself). `None`: no limit found.
pub fn own_memory_limit(root: &Path, cgroups: &str) -> Option<u64> {
    let mut best = memory_limit(root);
    for line in cgroups.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let (base, file) = match ctrls {
            "" => (root.to_path_buf(), "memory.max"),
            c if c.split(',').any(|c| c == "memory") => {
                (root.join("memory"), "memory.limit_in_bytes")
            }
            _ => continue,
        };
        let mut dir = base.join(path.trim_start_matches('/'));
        while dir.starts_with(&base) {
            let found = std::fs::read_to_string(dir.join(file)).ok();
            if let Some(b) = found.as_deref().and_then(limit_of) {
                best = Some(best.map_or(b, |a| a.min(b)));
            }
            if !dir.pop() {
                break;
            }
        }
    }
    best
}

/// The memory limit the worker's agent reports (its Pong), if it answers
/// within a few seconds: the pod outlives a rank the OOM killer took.
pub async fn ask_limit(worker: &Peer, token: &Token) -> Option<u64> {
    let within = Duration::from_secs(5);
    let mut ch = Channel::connect(worker.agent, token, within).await.ok()?;
    match ch
        .call_within(&Request::Ping, within, "a Pong")
        .await
        .ok()?
    {
        Response::Pong(info) => info.memory_limit,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mpiruns_line_names_the_killed_rank_and_signal() {
        let k = killed(
            "mpirun noticed that process rank 1 with PID 0 on node 10.0.0.3 exited on signal 9 (Killed).",
        )
        .unwrap();
        assert_eq!(
            k,
            Killed {
                rank: 1,
                signal: "9 (Killed)".into(),
                limit: Limit::Unreported,
            }
        );
        assert_eq!(killed("rank 1 of 2: part 1: ..."), None);
    }

    #[test]
    fn the_guards_line_is_read_back_and_an_unknown_rank_is_not() {
        for limit in [Limit::Bytes(2 << 30), Limit::Unlimited] {
            let line = guard_line(Some(3), "j-worker-3", "9 (Killed)", limit);
            let k = guarded(&format!("[1,3]<stderr>:{line}\n")).unwrap();
            assert_eq!(
                k,
                Killed {
                    rank: 3,
                    signal: "9 (Killed)".into(),
                    limit
                }
            );
        }
        assert_eq!(
            guard_line(Some(1), "h", "9 (Killed)", Limit::Bytes(1024)),
            "dglrun rank-guard: rank 1 on h was killed by signal 9 (Killed); memory limit: 1024 bytes"
        );
        assert_eq!(
            guarded(&guard_line(None, "h", "9 (Killed)", Limit::Unlimited)),
            None
        );
        assert_eq!(
            guarded("dglrun rank-guard: rank 1 on h was killed by signal 9; memory limit: lots"),
            None
        );
    }

    #[test]
    fn a_killed_rank_is_described_with_its_limit_or_its_absence() {
        let mut k = guarded(&guard_line(Some(0), "h", "9 (Killed)", Limit::Unlimited)).unwrap();
        assert_eq!(
            describe(&k, None),
            "rank 0 was killed by signal 9 (Killed), most likely out of memory: the pod has no memory limit"
        );
        k.limit = Limit::Bytes(3 << 29);
        k.signal = "11 (Segmentation fault)".into();
        assert_eq!(
            describe(&k, None),
            "rank 0 was killed by signal 11 (Segmentation fault): the pod's memory limit is 1.5 GiB (1610612736 bytes)"
        );
    }

    #[test]
    fn the_cgroup_limit_is_read_v2_then_v1_and_unlimited_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(memory_limit(d.path()), None);
        std::fs::create_dir(d.path().join("memory")).unwrap();
        std::fs::write(
            d.path().join("memory/memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        assert_eq!(memory_limit(d.path()), None);
        std::fs::write(
            d.path().join("memory/memory.limit_in_bytes"),
            "1073741824\n",
        )
        .unwrap();
        assert_eq!(memory_limit(d.path()), Some(1 << 30));
        std::fs::write(d.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(memory_limit(d.path()), None);
        std::fs::write(d.path().join("memory.max"), "2147483648\n").unwrap();
        assert_eq!(memory_limit(d.path()), Some(2 << 30));
    }

    /// The smallest limit on the process's cgroup path holds: v1's memory
    /// hierarchy (a parent's limit below the leaf's) and v2's.
    #[test]
    fn the_own_limit_is_the_smallest_along_the_cgroup_path() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let v1 = "4:memory:/pods/p1/c\n0::/\n";
        std::fs::create_dir_all(r.join("memory/pods/p1/c")).unwrap();
        assert_eq!(own_memory_limit(r, v1), None);
        let f = "memory.limit_in_bytes";
        std::fs::write(r.join("memory/pods/p1/c").join(f), "3221225472").unwrap();
        assert_eq!(own_memory_limit(r, v1), Some(3 << 30));
        std::fs::write(r.join("memory/pods/p1").join(f), "1073741824").unwrap();
        assert_eq!(own_memory_limit(r, v1), Some(1 << 30));
        let v2 = "0::/kubepods/pod-a\n";
        let d2 = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d2.path().join("kubepods/pod-a")).unwrap();
        std::fs::write(d2.path().join("kubepods/pod-a/memory.max"), "max").unwrap();
        assert_eq!(own_memory_limit(d2.path(), v2), None);
        std::fs::write(d2.path().join("kubepods/memory.max"), "536870912").unwrap();
        assert_eq!(own_memory_limit(d2.path(), v2), Some(1 << 29));
        // A pod's own cgroup namespace: its path is `/`, its limit at the root.
        std::fs::write(d2.path().join("memory.max"), "268435456").unwrap();
        assert_eq!(own_memory_limit(d2.path(), "0::/\n"), Some(1 << 28));
    }
}
