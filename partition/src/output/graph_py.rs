//! `graph.dgl` through DGL's own Python: one process for all partitions,
//! started first so its ~2 s of imports overlap the native work, fed one job
//! per partition as soon as that partition's arrays are on disk.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// The script, embedded so the crate needs no files beside its binary.
pub const SCRIPT: &str = include_str!("../make_graphs.py");

/// One partition's graph job (the script's stdin line).
#[derive(serde::Serialize)]
pub struct GraphJob {
    pub part: u32,
    /// Folder with src.npy, dst.npy, halo_nid.npy (and halo_ntype.npy).
    pub arrays: PathBuf,
    /// The graph.dgl to write.
    pub out: PathBuf,
    pub num_inner: u64,
    pub node_start: u64,
    pub edge_start: u64,
    pub hetero: bool,
    pub inner_ntype_counts: Vec<u64>,
    pub etype_counts: Vec<u64>,
}

/// What the Python process reported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PythonStats {
    /// Seconds the imports took.
    pub import_secs: f64,
    /// Seconds each part's graph took (build + save), by part.
    pub part_secs: Vec<(u32, f64)>,
    /// From start to exit.
    pub wall: Duration,
}

/// The running Python process.
pub struct GraphBuilder {
    python: PathBuf,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
    started: Instant,
    submitted: Vec<u32>,
    broken: bool,
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let mut buf = BufReader::new(&mut r);
        let mut line = String::new();
        while buf.read_line(&mut line).unwrap_or(0) > 0 {
            s.push_str(&line);
            line.clear();
        }
        s
    })
}

impl GraphBuilder {
    /// Starts `python` with the embedded script and `threads` torch threads.
    pub fn spawn(python: &Path, threads: usize) -> Result<Self> {
        let mut child = Command::new(python)
            .arg("-c")
            .arg(SCRIPT)
            .arg(threads.max(1).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io(python, e))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        Ok(GraphBuilder {
            python: python.to_path_buf(),
            child,
            stdin,
            stdout,
            stderr,
            started: Instant::now(),
            submitted: Vec::new(),
            broken: false,
        })
    }

    /// Queues a partition; a dead process is reported by [`Self::finish`].
    pub fn submit(&mut self, job: &GraphJob) {
        let line = serde_json::to_string(job).expect("plain JSON values") + "\n";
        match self
            .stdin
            .as_mut()
            .map(|s| s.write_all(line.as_bytes()).and_then(|_| s.flush()))
        {
            Some(Ok(())) => self.submitted.push(job.part),
            _ => self.broken = true,
        }
    }

    /// Closes the job stream and waits for every queued graph.
    pub fn finish(mut self) -> Result<PythonStats> {
        drop(self.stdin.take());
        let status = self.child.wait().map_err(|e| Error::io(&self.python, e));
        let join =
            |h: Option<JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
        let out = join(self.stdout.take());
        let err = join(self.stderr.take());
        let fail = |why: String| Error::Stage {
            stage: "graph.dgl",
            message: format!(
                "{} {why}; its stderr ends:\n{}",
                self.python.display(),
                tail(&err, 40)
            ),
        };
        let status = status?;
        if !status.success() || self.broken {
            return Err(fail(format!("failed ({status})")));
        }
        let stats = parse_report(&out, self.started.elapsed());
        let mut done: Vec<u32> = stats.part_secs.iter().map(|&(p, _)| p).collect();
        let mut want = self.submitted.clone();
        done.sort_unstable();
        want.sort_unstable();
        if done != want {
            return Err(fail(format!("built parts {done:?} of {want:?}")));
        }
        Ok(stats)
    }
}

impl Drop for GraphBuilder {
    /// An abandoned builder (an earlier error) must not outlive the run.
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn parse_report(out: &str, wall: Duration) -> PythonStats {
    let mut stats = PythonStats {
        wall,
        ..Default::default()
    };
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["ready", s] => stats.import_secs = s.parse().unwrap_or(0.0),
            ["done", p, s] => {
                if let Ok(p) = p.parse() {
                    stats.part_secs.push((p, s.parse().unwrap_or(0.0)));
                }
            }
            _ => {}
        }
    }
    stats
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
