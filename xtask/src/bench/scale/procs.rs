//! The processes the bench starts (kwok, a scheduler, the operators),
//! stopped by pid, and the local ports they listen on.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Child processes started by the bench, stopped by pid (SIGTERM, then SIGKILL).
#[derive(Default)]
pub(super) struct Procs(pub(super) Vec<(&'static str, Child)>);

impl Procs {
    pub(super) fn spawn(
        &mut self,
        name: &'static str,
        cmd: &mut Command,
        log: &Path,
    ) -> Result<u32> {
        let out =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let pid = child.id();
        eprintln!("    {name}: pid {pid}, log {}", log.display());
        self.0.push((name, child));
        Ok(pid)
    }

    pub(super) fn check_running(&mut self) -> Result<()> {
        for (name, child) in &mut self.0 {
            if let Some(status) = child.try_wait()? {
                bail!("{name} (pid {}) exited: {status}", child.id());
            }
        }
        Ok(())
    }

    /// Stops the child with this pid (an operator between phases).
    pub(super) fn stop(&mut self, pid: u32) {
        if let Some(i) = self.0.iter().position(|(_, c)| c.id() == pid) {
            let (name, child) = self.0.remove(i);
            stop_child(name, child);
        }
    }

    pub(super) fn stop_all(&mut self) {
        for (name, child) in self.0.drain(..).rev() {
            stop_child(name, child);
        }
    }
}

pub(super) fn stop_child(name: &str, mut child: Child) {
    let pid = child.id() as i32;
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    // SAFETY: kill(2) on the pid of our own child, which we have not reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            _ if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    eprintln!("    stopped {name} (pid {pid})");
}

pub(super) fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// GET over plain HTTP/1.0 (the operator's metrics endpoint).
pub(super) async fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    Ok(localkube::http_get(port, path).await?)
}
