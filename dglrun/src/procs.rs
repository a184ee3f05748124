//! Child processes: each one is started as an argument vector (never through
//! a shell) in its own process group, its output is read line by line, and
//! stopping means SIGTERM to the whole group, then SIGKILL after a grace
//! period.
//!
//! A group does not hold everything: `torch.distributed.run` starts each
//! trainer in a new session (`start_new_session=True`) and forwards SIGTERM
//! to them itself, and a trainer that dies hard leaves its sampler processes
//! behind (docs/dgl-runtime-notes.md). So the worker also makes itself the
//! child subreaper: whatever outlives its parent is re-parented to dglrun,
//! and [`reap_orphans`] kills it after every stop.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use dgl_api::wire::{ExitInfo, OutputLine, ProcessExit, Stream};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

/// What to run.
#[derive(Debug, Clone)]
pub struct ProcSpec {
    /// Short name used in logs and messages (`server-0`, `trainer`, `partition`).
    pub name: String,
    pub program: String,
    pub args: Vec<String>,
    /// Added to (or overriding) the inherited environment.
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
}

impl ProcSpec {
    /// The command line, for logs.
    pub fn display(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Converts a std exit status.
pub fn exit_info(status: ExitStatus) -> ExitInfo {
    use std::os::unix::process::ExitStatusExt;
    ExitInfo {
        code: status.code(),
        signal: status.signal(),
    }
}

/// Runs a group of processes and stops them together.
pub struct Supervisor {
    sink: mpsc::Sender<OutputLine>,
    exits_tx: mpsc::UnboundedSender<ProcessExit>,
    exits_rx: mpsc::UnboundedReceiver<ProcessExit>,
    groups: Vec<Group>,
}

/// One started process and the group it leads.
struct Group {
    name: String,
    pgid: Pid,
    leader: Leader,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leader {
    Running,
    Exited,
}

impl Group {
    fn running(&self) -> bool {
        self.leader == Leader::Running
    }
}

impl Supervisor {
    /// Output lines of every process go to `sink`.
    pub fn new(sink: mpsc::Sender<OutputLine>) -> Supervisor {
        let (exits_tx, exits_rx) = mpsc::unbounded_channel();
        Supervisor {
            sink,
            exits_tx,
            exits_rx,
            groups: Vec::new(),
        }
    }

    /// Starts a process in a new process group.
    pub fn spawn(&mut self, spec: &ProcSpec) -> std::io::Result<Pid> {
        let mut cmd = tokio::process::Command::new(&spec.program);
        cmd.args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group: one killpg reaches the process and all it forks.
            .process_group(0)
            .kill_on_drop(false);
        if let Some(dir) = &spec.cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd.spawn().map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot start {} ({}): {e}", spec.name, spec.program),
            )
        })?;
        let pid = Pid::from_raw(child.id().expect("a just-spawned child has a pid") as i32);
        tracing::info!(process = %spec.name, pid = pid.as_raw(), command = %spec.display(), "started");
        let out = child.stdout.take().map(|r| {
            tokio::spawn(forward_lines(
                r,
                spec.name.clone(),
                Stream::Stdout,
                self.sink.clone(),
            ))
        });
        let err = child.stderr.take().map(|r| {
            tokio::spawn(forward_lines(
                r,
                spec.name.clone(),
                Stream::Stderr,
                self.sink.clone(),
            ))
        });
        let name = spec.name.clone();
        let exits = self.exits_tx.clone();
        tokio::spawn(async move {
            let exit = match child.wait().await {
                Ok(s) => exit_info(s),
                Err(e) => {
                    tracing::error!(process = %name, error = %e, "cannot wait for the process");
                    ExitInfo {
                        code: None,
                        signal: None,
                    }
                }
            };
            // Deliver the last lines before the exit. A grandchild that keeps
            // the pipe open must not hold the exit back for long.
            for reader in [out, err].into_iter().flatten() {
                let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
            }
            let _ = exits.send(ProcessExit {
                process: name,
                exit,
            });
        });
        self.groups.push(Group {
            name: spec.name.clone(),
            pgid: pid,
            leader: Leader::Running,
        });
        Ok(pid)
    }

    /// Names of the processes whose leader is still running.
    pub fn running(&self) -> Vec<String> {
        self.groups
            .iter()
            .filter(|g| g.running())
            .map(|g| g.name.clone())
            .collect()
    }

    /// The next process to end. `None` only when nothing was ever started.
    pub async fn next_exit(&mut self) -> Option<ProcessExit> {
        if !self.groups.iter().any(Group::running) {
            return None;
        }
        let e = self.exits_rx.recv().await?;
        if let Some(g) = self
            .groups
            .iter_mut()
            .find(|g| g.name == e.process && g.running())
        {
            g.leader = Leader::Exited;
        }
        tracing::info!(process = %e.process, status = %e.exit, "exited");
        Some(e)
    }

    /// Stops every group: SIGTERM, then SIGKILL after `grace` (at once for
    /// groups whose members are still there after the leader exited).
    /// Returns the exits of the leaders that were still running.
    pub async fn stop_all(&mut self, grace: Duration) -> Vec<ProcessExit> {
        let mut exits = Vec::new();
        for Group { name, pgid, .. } in &self.groups {
            if group_alive(*pgid) {
                tracing::info!(process = %name, pgid = pgid.as_raw(), "sending SIGTERM to the process group");
                signal_group(*pgid, Signal::SIGTERM);
            }
        }
        let deadline = crate::clock::after(grace);
        while self.groups.iter().any(Group::running) {
            match tokio::time::timeout_at(deadline, self.next_exit()).await {
                Ok(Some(e)) => exits.push(e),
                Ok(None) | Err(_) => break,
            }
        }
        // Whatever is left after the grace period (leaders that ignored
        // SIGTERM, children that outlived their leader) is killed.
        for Group { name, pgid, .. } in &self.groups {
            if group_alive(*pgid) {
                tracing::warn!(process = %name, pgid = pgid.as_raw(), "still running after {grace:?}: SIGKILL to the process group");
                signal_group(*pgid, Signal::SIGKILL);
            }
        }
        while self.groups.iter().any(Group::running) {
            match tokio::time::timeout(Duration::from_secs(10), self.next_exit()).await {
                Ok(Some(e)) => exits.push(e),
                Ok(None) => break,
                Err(_) => {
                    tracing::error!(running = ?self.running(), "processes survived SIGKILL for 10s");
                    break;
                }
            }
        }
        reap_orphans();
        exits
    }
}

fn signal_group(pgid: Pid, sig: Signal) {
    if let Err(e) = killpg(pgid, sig) {
        if e != nix::errno::Errno::ESRCH {
            tracing::warn!(pgid = pgid.as_raw(), signal = ?sig, error = %e, "killpg failed");
        }
    }
}

/// The longest line forwarded, in bytes: a longer one is cut there and
/// marked, so that one enormous line (a process printing a whole array, a
/// progress bar that never writes a newline) costs bounded memory and
/// always fits in a frame.
pub const MAX_LINE: usize = 64 * 1024;

/// Appended to a line cut at [`MAX_LINE`] bytes.
pub const TRUNCATED_MARKER: &str = " …[dglrun: line longer than 65536 bytes, truncated]";

/// Splits a byte stream into lines at `\n`, `\r\n` and a lone `\r` (what
/// progress bars such as tqdm write between updates), with every line
/// capped at [`MAX_LINE`] bytes. Empty segments between `\r`s are dropped;
/// an empty line ended by `\n` is kept.
#[derive(Debug, Default)]
pub struct LineSplitter {
    buf: Vec<u8>,
    /// The current line was already cut and emitted; the rest is skipped.
    truncated: bool,
    /// The last byte seen was `\r` (so a `\n` right after it ends nothing).
    after_cr: bool,
}

impl LineSplitter {
    /// Feeds bytes; returns the lines they completed.
    pub fn feed(&mut self, mut data: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        while !data.is_empty() {
            let end = data.iter().position(|&b| b == b'\n' || b == b'\r');
            let segment = &data[..end.unwrap_or(data.len())];
            if !segment.is_empty() {
                self.after_cr = false;
                self.append(segment, &mut out);
            }
            let Some(i) = end else { break };
            let cr = data[i] == b'\r';
            // "\r\n" ends one line; a "\r" with nothing before it ends none.
            let ends_line = !self.buf.is_empty() || (!cr && !self.after_cr);
            if ends_line && !self.truncated {
                out.push(String::from_utf8_lossy(&self.buf).into_owned());
            }
            self.buf.clear();
            self.truncated = false;
            self.after_cr = cr;
            data = &data[i + 1..];
        }
        out
    }

    /// The last line when the stream ended without a terminator.
    pub fn finish(&mut self) -> Option<String> {
        let line = (!self.buf.is_empty() && !self.truncated)
            .then(|| String::from_utf8_lossy(&self.buf).into_owned());
        self.buf.clear();
        self.truncated = false;
        line
    }

    fn append(&mut self, segment: &[u8], out: &mut Vec<String>) {
        if self.truncated {
            return;
        }
        let room = MAX_LINE - self.buf.len();
        if segment.len() <= room {
            self.buf.extend_from_slice(segment);
            return;
        }
        // Emitted now, not at the line's end: a line that never ends is
        // still shown.
        self.buf.extend_from_slice(&segment[..room]);
        let mut line = String::from_utf8_lossy(&self.buf).into_owned();
        line.push_str(TRUNCATED_MARKER);
        out.push(line);
        self.buf.clear();
        self.truncated = true;
    }
}

/// Reads a pipe into the sink, line by line ([`LineSplitter`]). Invalid
/// UTF-8 is replaced rather than ending the stream, so a stray binary byte
/// never hides later output.
async fn forward_lines<R: AsyncRead + Unpin>(
    mut r: R,
    process: String,
    stream: Stream,
    sink: mpsc::Sender<OutputLine>,
) {
    let mut splitter = LineSplitter::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let (lines, ended) = match r.read(&mut buf).await {
            Ok(0) => (splitter.finish().into_iter().collect(), true),
            Ok(n) => (splitter.feed(&buf[..n]), false),
            Err(e) => {
                tracing::debug!(process = %process, error = %e, "output pipe error");
                (splitter.finish().into_iter().collect(), true)
            }
        };
        for line in lines {
            let l = OutputLine {
                process: process.clone(),
                stream,
                line,
            };
            if sink.send(l).await.is_err() {
                return;
            }
        }
        if ended {
            return;
        }
    }
}

/// One line of `/proc/<pid>/stat`: (state, ppid, pgrp).
fn proc_stat(pid: i32) -> Option<(char, i32, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain spaces or
    // parentheses; the fields after the last ')' are fixed.
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether any live (non-zombie) process is in group `pgid`. Checked before
/// signalling a group whose leader is gone, so that a recycled id is never hit.
pub fn group_alive(pgid: Pid) -> bool {
    all_pids()
        .into_iter()
        .filter_map(proc_stat)
        .any(|(state, _, pgrp)| pgrp == pgid.as_raw() && state != 'Z')
}

/// Makes this process the reaper of its orphaned descendants, so that a
/// process that escaped its group (setsid) and outlived its parent is still
/// ours to find and kill. No-op (with a log) where unsupported.
pub fn become_subreaper() {
    match nix::sys::prctl::set_child_subreaper(true) {
        Ok(()) => SUBREAPER.store(true, std::sync::atomic::Ordering::Relaxed),
        Err(e) => {
            tracing::warn!(error = %e, "cannot become child subreaper; orphans of killed trainers may survive")
        }
    }
}

/// Set once this process is the reaper of its orphaned descendants: only
/// then are children it did not track orphans (else they are another
/// part's own children, e.g. a test binary's other tests').
static SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Unit tests that start processes of their own and the test that reaps
/// this process's children (`stop_all` ends in [`reap_orphans`], which takes
/// every child of the test binary) must not overlap.
#[cfg(test)]
pub(crate) static CHILDREN_TEST_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Kills and reaps processes that were re-parented to us (we are a
/// subreaper) and are not children we still track: they are what is left of
/// killed process trees.
pub fn reap_orphans() {
    if !SUBREAPER.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let me = std::process::id() as i32;
    let mut seen = HashSet::new();
    // A few rounds: killing one orphan may orphan its children to us.
    for _ in 0..5 {
        let orphans: Vec<(i32, char)> = all_pids()
            .into_iter()
            .filter_map(|pid| proc_stat(pid).map(|(s, ppid, _)| (pid, s, ppid)))
            .filter(|&(_, _, ppid)| ppid == me)
            .map(|(pid, s, _)| (pid, s))
            .collect();
        if orphans.is_empty() {
            return;
        }
        for (pid, state) in orphans {
            if state != 'Z' && seen.insert(pid) {
                tracing::warn!(pid, "killing a leftover process");
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, args: &[&str]) -> ProcSpec {
        ProcSpec {
            name: name.into(),
            program: "sh".into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: vec![("X_TEST".into(), "42".into())],
            cwd: None,
        }
    }

    #[test]
    fn lines_split_at_newlines_and_carriage_returns() {
        let mut s = LineSplitter::default();
        // tqdm: "\r" before every update, "\n" at the end; CRLF is one end.
        let mut got = s.feed(b"start\n\r  0%|\r 50%|");
        got.extend(s.feed(b"\r100%|\nwin\r"));
        got.extend(s.feed(b"\ndos\r\n\nlast"));
        got.extend(s.finish());
        assert_eq!(
            got,
            ["start", "  0%|", " 50%|", "100%|", "win", "dos", "", "last"]
        );
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn a_long_line_is_cut_once_and_memory_stays_bounded() {
        let mut s = LineSplitter::default();
        let mut got = Vec::new();
        // 10 MiB without a terminator, fed in pieces as a pipe delivers it.
        for _ in 0..160 {
            got.extend(s.feed(&[b'x'; 64 * 1024]));
            assert!(s.buf.capacity() <= 2 * MAX_LINE);
        }
        assert_eq!(got.len(), 1, "the cut line is shown at once");
        assert!(got[0].starts_with("xxx") && got[0].ends_with(TRUNCATED_MARKER));
        assert_eq!(got[0].len(), MAX_LINE + TRUNCATED_MARKER.len());
        // Its rest is dropped; the next line is whole.
        let next = s.feed(b"yyy\nnext\n");
        assert_eq!(next, ["next"]);
        assert_eq!(s.finish(), None);
        // Invalid UTF-8 is replaced, not an end of the stream.
        assert_eq!(s.feed(b"a\xffb\n"), ["a\u{fffd}b"]);
    }

    #[tokio::test]
    async fn output_then_exit_in_order() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut s = Supervisor::new(tx);
        s.spawn(&spec(
            "p",
            &["-c", "echo out $X_TEST; echo err >&2; exit 3"],
        ))
        .unwrap();
        let e = s.next_exit().await.unwrap();
        assert_eq!(e.exit, ExitInfo::code(3));
        let mut lines = Vec::new();
        while let Ok(l) = rx.try_recv() {
            lines.push((l.stream, l.line));
        }
        lines.sort_by_key(|l| l.1.clone());
        assert_eq!(
            lines,
            [
                (Stream::Stderr, "err".to_string()),
                (Stream::Stdout, "out 42".to_string())
            ]
        );
        assert!(s.next_exit().await.is_none());
    }

    #[tokio::test]
    async fn stop_all_kills_the_whole_group_including_grandchildren() {
        let _children = CHILDREN_TEST_LOCK.lock().await;
        let (tx, _rx) = mpsc::channel(16);
        let mut s = Supervisor::new(tx);
        // The leader ignores SIGTERM; its background child sleeps.
        let pgid = s
            .spawn(&spec("stubborn", &["-c", "trap '' TERM; sleep 300 & wait"]))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(group_alive(pgid));
        let exits = s.stop_all(Duration::from_millis(300)).await;
        assert_eq!(exits.len(), 1);
        assert_eq!(exits[0].exit.signal, Some(9));
        // The grandchild got the group's SIGKILL too (it may linger as a
        // zombie of init for a moment, which group_alive ignores).
        for _ in 0..50 {
            if !group_alive(pgid) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("process group {pgid} survived stop_all");
    }
}
