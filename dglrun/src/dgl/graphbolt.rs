//! GraphBolt partitions (DGL 2.1.0's `use_graphbolt`; what 2.1.0 supports:
//! docs/dgl-runtime-notes.md, "GraphBolt"). Partitions still in DGL's
//! format are converted by DGL's own `dgl_partition_to_graphbolt`, which
//! reads every partition and writes `part<i>/fused_csc_sampling_graph.pt`
//! plus the `part_graph_graphbolt` keys into the partition JSON.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::dataset::Layout;
use crate::procs::ProcSpec;

/// DGL's converter, run by `python -c` on the partition JSON.
const CONVERT: &str = "import sys\n\
from dgl.distributed import dgl_partition_to_graphbolt\n\
dgl_partition_to_graphbolt(sys.argv[1])\n";

/// The converter's command line for the partition JSON `part_config`.
pub fn converter(python: &str, part_config: &Path) -> ProcSpec {
    ProcSpec {
        name: "graphbolt-convert".into(),
        program: python.to_string(),
        args: vec![
            "-c".into(),
            CONVERT.into(),
            part_config.display().to_string(),
        ],
        env: vec![
            ("PYTHONUNBUFFERED".into(), "1".into()),
            ("DGLBACKEND".into(), "pytorch".into()),
        ],
        cwd: None,
    }
}

/// The lock file workers that share one dataset folder take turns with.
pub const CONVERT_LOCK: &str = ".dglrun-graphbolt.lock";

/// Default of `--graphbolt-convert-timeout`: an hour.
pub const CONVERT_TIMEOUT_SECS: u64 = 3600;
/// Default of `--graphbolt-lock-timeout`: the converter's hour and a minute
/// more, so that a worker waiting for one that converts within its own
/// limit does not give up first.
pub const LOCK_TIMEOUT_SECS: u64 = 3660;

/// How long a GraphBolt conversion may take: waiting for the folder's
/// lock, and DGL's converter itself (killed, with its process group, when
/// it runs longer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub lock_wait: Duration,
    pub convert: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            lock_wait: Duration::from_secs(LOCK_TIMEOUT_SECS),
            convert: Duration::from_secs(CONVERT_TIMEOUT_SECS),
        }
    }
}

/// Converts a Skip-mode worker's partitions in place when they are still in
/// DGL's format. DGL's converter reads every partition, so the workspace
/// must hold all `num_parts` of them (checked first, naming what is
/// missing); output goes to the log. Workers whose workspaces share one
/// volume take turns (flock(2) on [`CONVERT_LOCK`] in the dataset folder):
/// the first converts, the others find the partitions converted, instead of
/// several converters writing the same files at once. `done` counts the
/// bytes of GraphBolt graphs written so far (the shard's progress).
pub async fn convert_local(
    python: &str,
    layout: &Layout,
    num_parts: u32,
    limits: Limits,
    done: Arc<AtomicU64>,
) -> Result<(), String> {
    if layout.has_graphbolt_graphs() {
        return Ok(());
    }
    let _turn = take_turn(layout, limits.lock_wait).await?;
    if layout.has_graphbolt_graphs() {
        tracing::info!(json = %layout.json_path().display(), "the partitions were converted to GraphBolt by another worker sharing this folder");
        return Ok(());
    }
    let plain = layout.clone().with_graphbolt(false);
    plain.check_all(num_parts).map_err(|e| {
        format!("GraphBolt was asked for and the partitions are in DGL's format; converting them (DGL's dgl_partition_to_graphbolt) needs every partition in this worker's workspace: {e}")
    })?;
    let spec = converter(python, &layout.json_path());
    tracing::info!(json = %layout.json_path().display(), "converting the partitions to GraphBolt");
    let outputs = Outputs::of(layout, num_parts);
    let out = run_converter(&spec, limits.convert, &outputs, &done).await;
    let out = out.map_err(|e| {
        format!(
            "{e} (DGL's dgl_partition_to_graphbolt on {})",
            layout.json_path().display()
        )
    })?;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        tracing::info!("[graphbolt-convert] {line}");
    }
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        return Err(format!(
            "DGL's dgl_partition_to_graphbolt on {} exited with {}: {}",
            layout.json_path().display(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    Ok(())
}

/// The files DGL's converter writes, one per part:
/// `part<i>/fused_csc_sampling_graph.pt` in the dataset folder.
pub struct Outputs(Vec<PathBuf>);

impl Outputs {
    pub fn of(layout: &Layout, num_parts: u32) -> Outputs {
        let files = (0..num_parts)
            .map(|i| layout.part_dir(i).join(GRAPHBOLT_FILE))
            .collect();
        Outputs(files)
    }

    /// Files present and their bytes so far.
    pub fn measure(&self) -> (usize, u64) {
        let sizes = self.0.iter().filter_map(|f| std::fs::metadata(f).ok());
        sizes.fold((0, 0), |(n, b), m| (n + 1, b.saturating_add(m.len())))
    }
}

/// The GraphBolt graph's file name in each part's folder.
pub const GRAPHBOLT_FILE: &str = "fused_csc_sampling_graph.pt";

/// How often the converter's output files are measured.
const MEASURE_EVERY: Duration = Duration::from_secs(1);

/// Bytes of the converter's stdout and of its stderr kept (their tails).
pub const OUTPUT_TAIL: usize = 64 << 10;

/// Runs the converter (in a process group of its own) for at most `limit`,
/// storing the bytes of `outputs` written so far in `done` every second and
/// logging each file as it appears. Past the limit the whole group is
/// killed and the error names the limit and the flag.
pub async fn run_converter(
    spec: &ProcSpec,
    limit: Duration,
    outputs: &Outputs,
    done: &AtomicU64,
) -> Result<Output, String> {
    let child = tokio::process::Command::new(&spec.program)
        .args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run {} (GraphBolt conversion): {e}", spec.program))?;
    let group = child.id();
    let mut child = child;
    // Read as it comes, keeping only the tails: a converter printing
    // without end costs OUTPUT_TAIL bytes per stream, not all it printed.
    let stdout = tokio::spawn(tail_of(child.stdout.take()));
    let stderr = tokio::spawn(tail_of(child.stderr.take()));
    let out = async move {
        let status = child.wait().await?;
        // A grandchild may keep the pipes open: the tails are not waited
        // for past a moment.
        let tail = |h: tokio::task::JoinHandle<Vec<u8>>| async move {
            let abort = h.abort_handle();
            let got = tokio::time::timeout(Duration::from_secs(5), h).await;
            abort.abort();
            got.ok().and_then(Result::ok).unwrap_or_default()
        };
        let (stdout, stderr) = (tail(stdout).await, tail(stderr).await);
        std::io::Result::Ok(Output {
            status,
            stdout,
            stderr,
        })
    };
    tokio::pin!(out);
    let deadline = tokio::time::sleep_until(crate::clock::after(limit));
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(MEASURE_EVERY);
    let mut files_seen = 0;
    loop {
        tokio::select! {
            r = &mut out => {
                report(outputs, done, &mut files_seen);
                return r.map_err(|e| format!("waiting for {}: {e}", spec.program));
            }
            _ = &mut deadline => {
                kill_group(group);
                let (files, bytes) = outputs.measure();
                return Err(format!(
                    "the GraphBolt conversion did not finish within {limit:?} (--graphbolt-convert-timeout) and was killed; {files} of {} files written, {bytes} bytes",
                    outputs.0.len()
                ));
            }
            _ = tick.tick() => report(outputs, done, &mut files_seen),
        }
    }
}

/// The last [`OUTPUT_TAIL`] bytes `r` yields until its end.
async fn tail_of(r: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let Some(mut r) = r else {
        return Vec::new();
    };
    let (mut keep, mut buf) = (Vec::new(), vec![0u8; 16 << 10]);
    while let Ok(n @ 1..) = r.read(&mut buf).await {
        keep.extend_from_slice(&buf[..n]);
        if keep.len() > 2 * OUTPUT_TAIL {
            keep.drain(..keep.len() - OUTPUT_TAIL);
        }
    }
    if keep.len() > OUTPUT_TAIL {
        keep.drain(..keep.len() - OUTPUT_TAIL);
    }
    keep
}

/// Stores the bytes written so far; logs each newly complete count of files.
fn report(outputs: &Outputs, done: &AtomicU64, files_seen: &mut usize) {
    let (files, bytes) = outputs.measure();
    done.store(bytes, Ordering::Relaxed);
    if files > *files_seen {
        *files_seen = files;
        tracing::info!(
            files,
            of = outputs.0.len(),
            bytes,
            "GraphBolt conversion: files written"
        );
    }
}

/// SIGKILL to the converter's process group (it leads one of its own).
fn kill_group(group: Option<u32>) {
    let Some(pgid) = group.and_then(|g| i32::try_from(g).ok()) else {
        return;
    };
    // SAFETY: kill(2) with a negative pid signals that process group only.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Waits at most `wait` for the dataset folder's conversion lock; the lock
/// lasts as long as the returned file is open, which names its holder (pid
/// and host) for whoever waits. A file system without locks gets a warning
/// and no lock (a volume of one worker needs none).
pub async fn take_turn(layout: &Layout, wait: Duration) -> Result<Option<std::fs::File>, String> {
    let json = layout.json_path();
    let path = json.parent().unwrap_or(Path::new(".")).join(CONVERT_LOCK);
    let shown = path.display().to_string();
    let locked = tokio::task::spawn_blocking(move || lock_within(&path, wait))
        .await
        .map_err(|e| format!("waiting for {shown}: {e}"))?
        .map_err(|e| format!("cannot lock {shown} (workers sharing the dataset folder convert it one at a time): {e}"))?;
    match locked {
        Lock::Held(file) => Ok(Some(file)),
        Lock::Unsupported => {
            tracing::warn!(lock = %shown, "the file system has no locks: converting without one; workers sharing this folder would convert it at the same time");
            Ok(None)
        }
        Lock::TimedOut { holder } => Err(format!(
            "waited {wait:?} (--graphbolt-lock-timeout) for the GraphBolt conversion lock {shown}, held by {holder}"
        )),
    }
}

/// What waiting for the lock came to.
enum Lock {
    Held(std::fs::File),
    Unsupported,
    TimedOut { holder: String },
}

/// How often a waiter tries the lock again.
const LOCK_RETRY: Duration = Duration::from_millis(200);

/// flock(2) without blocking, tried until `wait` has passed; once held,
/// the file is rewritten with this process's pid and host.
fn lock_within(path: &Path, wait: Duration) -> std::io::Result<Lock> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)?;
    let deadline = crate::clock::after(wait).into_std();
    loop {
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            name_holder(&file);
            return Ok(Lock::Held(file));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(LOCK_RETRY)
            }
            Some(libc::EWOULDBLOCK) => {
                return Ok(Lock::TimedOut {
                    holder: holder_of(path),
                })
            }
            Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS) => return Ok(Lock::Unsupported),
            _ => return Err(e),
        }
    }
}

/// Writes "pid <pid> on <host>" into the held lock file (best effort: the
/// lock works without it).
fn name_holder(mut file: &std::fs::File) {
    use std::io::{Seek, Write};
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let line = format!("pid {} on {}\n", std::process::id(), host.trim());
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = file.write_all(line.as_bytes());
}

/// The holder a lock file names: its first line, at most 120 printable
/// ASCII characters, or "a process that did not say who it is".
fn holder_of(path: &Path) -> String {
    use std::io::Read;
    // Its first line is all that is shown: the file may be anything.
    let mut text = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(256).read_to_end(&mut text);
    }
    let line: String = text
        .iter()
        .take_while(|&&b| b != b'\n')
        .take(120)
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                '?'
            }
        })
        .collect();
    if line.trim().is_empty() {
        "a process that did not say who it is".into()
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;

    /// An executable shell script `name` in `dir`.
    fn script(dir: &Path, name: &str, body: &str) -> String {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.display().to_string()
    }

    fn spec(program: String) -> ProcSpec {
        ProcSpec {
            name: "graphbolt-convert".into(),
            program,
            args: vec![],
            env: vec![],
            cwd: None,
        }
    }

    fn alive(pid: i32) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    /// A converter that hangs (and has started a child of its own) is
    /// killed with its whole process group at the limit; the error names
    /// the flag and what was written.
    #[tokio::test]
    async fn a_converter_that_hangs_is_killed_after_the_timeout() {
        let _children = crate::procs::CHILDREN_TEST_LOCK.lock().await;
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        let body = format!("sleep 600 &\necho $! > {}\nwait", pidfile.display());
        let hang = spec(script(dir.path(), "hang", &body));
        let layout = Layout::new(dir.path(), "g");
        let outputs = Outputs::of(&layout, 2);
        let done = AtomicU64::new(0);
        let started = std::time::Instant::now();
        let limit = Duration::from_secs(2);
        let err = run_converter(&hang, limit, &outputs, &done)
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert!(
            took >= limit && took < limit + Duration::from_secs(5),
            "{took:?}"
        );
        assert!(err.contains("--graphbolt-convert-timeout"), "{err}");
        assert!(err.contains("0 of 2 files"), "{err}");
        let grandchild: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let gone = std::time::Instant::now();
        while alive(grandchild) && gone.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            !alive(grandchild),
            "the converter's child {grandchild} outlived the kill"
        );
    }

    /// Progress is the bytes of the files the converter has written, as it
    /// writes them, not a clock.
    #[tokio::test]
    async fn progress_is_the_bytes_written_so_far() {
        let _children = crate::procs::CHILDREN_TEST_LOCK.lock().await;
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "g");
        let d = layout.dir.display();
        let body = format!(
            "mkdir -p {d}/part0 {d}/part1\n\
             head -c 1000 /dev/zero > {d}/part0/{GRAPHBOLT_FILE}\n\
             sleep 2.5\n\
             head -c 2000 /dev/zero > {d}/part1/{GRAPHBOLT_FILE}\n\
             sleep 1.5"
        );
        let conv = spec(script(dir.path(), "conv", &body));
        let outputs = Outputs::of(&layout, 2);
        let done = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (d2, s2) = (done.clone(), seen.clone());
        let watch = tokio::spawn(async move {
            loop {
                s2.lock().unwrap().push(d2.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let out = run_converter(&conv, Duration::from_secs(60), &outputs, &done).await;
        watch.abort();
        assert!(out.unwrap().status.success());
        assert_eq!(done.load(Ordering::Relaxed), 3000);
        let seen = seen.lock().unwrap();
        assert!(
            seen.contains(&1000),
            "one file's bytes never reported: {seen:?}"
        );
        assert_eq!(seen.first(), Some(&0));
    }

    /// The converter's output is kept bounded (its tail, for the log and
    /// the error): 40 MiB on stdout do not become 40 MiB in this process.
    #[tokio::test]
    async fn the_converters_output_is_kept_bounded() {
        let _children = crate::procs::CHILDREN_TEST_LOCK.lock().await;
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "g");
        let body = "head -c 41943040 /dev/zero | tr '\\0' x\necho the-end\necho err-end >&2";
        let conv = spec(script(dir.path(), "loud", body));
        let outputs = Outputs::of(&layout, 1);
        let done = Arc::new(AtomicU64::new(0));
        let out = run_converter(&conv, Duration::from_secs(60), &outputs, &done)
            .await
            .unwrap();
        assert!(out.status.success());
        assert!(
            out.stdout.len() <= OUTPUT_TAIL,
            "{} bytes kept",
            out.stdout.len()
        );
        assert!(out.stdout.ends_with(b"the-end\n"), "the tail is kept");
        assert_eq!(out.stderr, b"err-end\n");
    }

    /// The lock file's holder is read from its first bytes only.
    #[test]
    fn a_huge_lock_file_is_read_only_for_its_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let f = std::fs::File::create(&path).unwrap();
        // 1 TiB, sparse: read whole it would not fit this process.
        f.set_len(1 << 40).unwrap();
        drop(f);
        let shown = holder_of(&path);
        assert_eq!(shown.len(), 120, "{shown}");
    }

    /// A lock held by another process: the wait ends at the limit with an
    /// error naming the lock file and the holder it wrote.
    #[tokio::test]
    async fn a_lock_held_by_another_process_times_out_naming_file_and_holder() {
        let _children = crate::procs::CHILDREN_TEST_LOCK.lock().await;
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "g");
        std::fs::create_dir_all(&layout.dir).unwrap();
        let lock = layout.dir.join(CONVERT_LOCK);
        // Another process takes the lock and says who it is, as dglrun does.
        let holder = format!(
            "exec 9>>{l}; flock -x 9; echo 'pid '$$' on other-worker' > {l}; echo held; exec sleep 600",
            l = lock.display()
        );
        let mut other = std::process::Command::new("sh")
            .args(["-c", &holder])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(other.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "held");
        let started = std::time::Instant::now();
        let err = take_turn(&layout, Duration::from_secs(1))
            .await
            .unwrap_err();
        let took = started.elapsed();
        let _ = other.kill();
        let _ = other.wait();
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_secs(4),
            "{took:?}"
        );
        assert!(err.contains(&lock.display().to_string()), "{err}");
        assert!(
            err.contains(&format!("pid {} on other-worker", other.id())),
            "{err}"
        );
        assert!(err.contains("--graphbolt-lock-timeout"), "{err}");
        // Free again: taken at once, and this process named as its holder.
        let held = take_turn(&layout, Duration::from_secs(1)).await.unwrap();
        assert!(held.is_some());
        let text = std::fs::read_to_string(&lock).unwrap();
        assert!(
            text.starts_with(&format!("pid {} on ", std::process::id())),
            "{text}"
        );
    }

    #[test]
    fn the_converter_is_dgls_own() {
        let c = converter("/venv/bin/python", Path::new("/w/dataset/g.json"));
        assert_eq!(c.args[0], "-c");
        assert!(c.args[1].contains("dgl_partition_to_graphbolt(sys.argv[1])"));
        assert_eq!(c.args[2], "/w/dataset/g.json");
    }
}
