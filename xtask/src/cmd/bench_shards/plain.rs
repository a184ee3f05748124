//! The plain TCP copy the dglrun path is compared with.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::common::*;
use super::dataset::ShardFile;
use super::shipping::machine_busy;
use super::testbed::{in_netns, Testbed};

/// What a baseline receiver does besides writing the bytes. `Copy` is the
/// baseline; the other two add dglrun's per-file steps one at a time (fsync,
/// then sha256 of the written file, read back as dglrun does) to show where
/// dglrun's time goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Plain {
    Copy,
    Fsync,
    FsyncSha256,
}

impl Plain {
    pub(super) const ALL: [Plain; 3] = [Plain::Copy, Plain::Fsync, Plain::FsyncSha256];

    pub(super) fn label(self) -> &'static str {
        match self {
            Plain::Copy => "plain TCP",
            Plain::Fsync => "plain + fsync",
            Plain::FsyncSha256 => "plain + fsync + sha256",
        }
    }
}

/// CPU seconds (user + system) of the calling thread.
pub(super) fn thread_cpu() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Copies every worker's files from the partitioner namespace to the
/// worker's namespace over plain TCP, all workers at once.
pub(super) fn plain_copy(
    bed: &Testbed,
    src_ws: &Path,
    dest_root: &Path,
    shards: &[Vec<ShardFile>],
    mode: Plain,
    timeout_secs: u64,
) -> Result<Run> {
    let timeout = Duration::from_secs(timeout_secs);
    let src = src_ws.join(dgl_api::names::DATASET_DIR);
    let n = shards.len();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
    let mut receivers = Vec::new();
    for (i, files) in shards.iter().enumerate() {
        let addr = SocketAddr::new(IpAddr::V4(worker_ip(i as u32)), PLAIN_PORT);
        let dest = plain_dest(dest_root, i as u32);
        let expect: u64 = files.iter().map(|f| f.size).sum();
        let ns = bed.worker_ns[i].clone();
        let ready = ready_tx.clone();
        receivers.push(std::thread::spawn(move || {
            in_netns(&ns, move || {
                receive(addr, &dest, expect, mode, timeout, ready)
            })
        }));
    }
    drop(ready_tx);
    for _ in 0..n {
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| anyhow!("the plain-copy receivers did not start"))??;
    }
    // Senders enter their namespace and open their files first; the clock
    // starts when all of them are released at once.
    let gate = Arc::new(Barrier::new(n + 1));
    let mut senders = Vec::new();
    for (i, files) in shards.iter().enumerate() {
        let addr = SocketAddr::new(IpAddr::V4(worker_ip(i as u32)), PLAIN_PORT);
        let (gate, src, files) = (gate.clone(), src.clone(), files.clone());
        let ns = bed.partitioner_ns.clone();
        senders.push(std::thread::spawn(move || -> Result<f64> {
            in_netns(&ns, move || {
                let opened: Result<Vec<(ShardFile, File)>> = files
                    .into_iter()
                    .map(|f| {
                        let file = File::open(src.join(&f.rel))
                            .with_context(|| format!("cannot open {}", f.rel))?;
                        Ok((f, file))
                    })
                    .collect();
                // Always reach the gate, or the main thread would wait forever.
                gate.wait();
                send(addr, opened?)
            })
        }));
    }
    gate.wait();
    let started = Instant::now();
    let machine_before = machine_busy()?;
    let mut finished = started;
    let (mut sender_cpu, mut receiver_cpu) = (0.0, 0.0);
    let mut errors = Vec::new();
    for (i, r) in receivers.into_iter().enumerate() {
        match r.join().map_err(|_| anyhow!("receiver panicked"))? {
            Ok((at, cpu)) => {
                finished = finished.max(at);
                receiver_cpu += cpu;
            }
            Err(e) => errors.push(format!("receiver {i}: {e:#}")),
        }
    }
    for (i, s) in senders.into_iter().enumerate() {
        match s.join().map_err(|_| anyhow!("sender panicked"))? {
            Ok(cpu) => sender_cpu += cpu,
            Err(e) => errors.push(format!("sender {i}: {e:#}")),
        }
    }
    if !errors.is_empty() {
        bail!("{} failed: {}", mode.label(), errors.join("; "));
    }
    Ok(Run {
        secs: (finished - started).as_secs_f64(),
        sender_cpu,
        receiver_cpu,
        machine_cpu: machine_busy()? - machine_before,
    })
}

/// Sends files: per file a header (path length u16, path, size u64, big
/// endian), then its bytes. Returns the thread's CPU seconds.
pub(super) fn send(addr: SocketAddr, files: Vec<(ShardFile, File)>) -> Result<f64> {
    let cpu = thread_cpu();
    let mut sock = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .with_context(|| format!("cannot connect to {addr}"))?;
    let mut buf = vec![0u8; PLAIN_BUF];
    for (f, mut file) in files {
        let mut header = Vec::new();
        header.extend_from_slice(&(f.rel.len() as u16).to_be_bytes());
        header.extend_from_slice(f.rel.as_bytes());
        header.extend_from_slice(&f.size.to_be_bytes());
        sock.write_all(&header)?;
        let mut left = f.size;
        while left > 0 {
            let k = file.read(&mut buf)?;
            if k == 0 {
                bail!("{} ended {left} bytes early", f.rel);
            }
            let k = k.min(usize::try_from(left).unwrap_or(usize::MAX));
            sock.write_all(&buf[..k])?;
            left -= k as u64;
        }
    }
    sock.shutdown(std::net::Shutdown::Write)?;
    Ok(thread_cpu() - cpu)
}

/// Accepts one connection and writes what `send` sends below `dest`;
/// returns when the last file is closed, with the thread's CPU seconds.
pub(super) fn receive(
    addr: SocketAddr,
    dest: &Path,
    expect: u64,
    mode: Plain,
    timeout: Duration,
    ready: mpsc::Sender<Result<()>>,
) -> Result<(Instant, f64)> {
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(anyhow!("cannot listen on {addr}: {e}")));
            bail!("cannot listen on {addr}: {e}");
        }
    };
    let _ = ready.send(Ok(()));
    // A sender that never comes must not hang the bench.
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + timeout;
    let mut sock = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    bail!("no sender connected to {addr}");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let cpu = thread_cpu();
    sock.set_nonblocking(false)?;
    sock.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut buf = vec![0u8; PLAIN_BUF];
    let mut got = 0u64;
    loop {
        let mut len = [0u8; 2];
        match sock.read_exact(&mut len) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            r => r?,
        }
        let mut rel = vec![0u8; usize::from(u16::from_be_bytes(len))];
        sock.read_exact(&mut rel)?;
        let rel = String::from_utf8(rel)?;
        let mut size = [0u8; 8];
        sock.read_exact(&mut size)?;
        let mut left = u64::from_be_bytes(size);
        let path = dest.join(&rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut file =
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let k = sock.read(&mut buf[..want])?;
            if k == 0 {
                bail!("connection closed with {left} bytes of {rel} to go");
            }
            file.write_all(&buf[..k])?;
            left -= k as u64;
            got += k as u64;
        }
        if mode != Plain::Copy {
            file.sync_all()?;
        }
        drop(file);
        if mode == Plain::FsyncSha256 {
            // dglrun's own function, as its worker runs it on a received file.
            std::hint::black_box(dglrun::dataset::sha256_file(&path)?);
        }
    }
    let at = Instant::now();
    if got != expect {
        bail!("received {got} bytes, expected {expect}");
    }
    Ok((at, thread_cpu() - cpu))
}
