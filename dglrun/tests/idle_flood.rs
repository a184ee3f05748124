//! Unauthenticated connections are bounded (issue #36, item 7): 2,000 idle
//! TCP connections to a worker's agent (the real binary, under `ulimit -n
//! 1024` as many containers run) must not keep an authenticated peer out.
//! Before the cap every idle connection held a socket and a task for the
//! handshake's 10 s, the agent ran out of descriptors and the peer waited.

use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dgl_api::wire::{Request, Response};
use dglrun::net::channel::{Channel, Token};

mod common;

const IDLE: usize = 2000;

/// Lets this process hold the idle connections (its hard limit allows).
fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit on a struct this function owns.
    unsafe {
        let mut l: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        l.rlim_cur = l.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &l), 0);
        assert!(
            l.rlim_cur as usize > IDLE + 100,
            "hard fd limit {}",
            l.rlim_max
        );
    }
}

#[test]
fn two_thousand_idle_connections_do_not_keep_a_real_peer_out() {
    raise_fd_limit();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "flood-test").unwrap();
    let port = common::free_port();
    let log = std::fs::File::create(dir.path().join("worker.log")).unwrap();
    let script = format!(
        "ulimit -n 1024 && exec {} worker --token-file {} --workspace {} --listen 127.0.0.1 --agent-port {port}",
        env!("CARGO_BIN_EXE_dglrun"),
        dir.path().join("token").display(),
        dir.path().join("ws").display(),
    );
    let child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Kill(child);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let started = Instant::now();
    let end = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < end, "the worker does not listen");
        assert!(child.0.try_wait().unwrap().is_none(), "the worker exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Idle: connected, never a byte of the handshake; all at once (16
    // threads), well within the agent's 10 s handshake timeout.
    let threads: Vec<_> = (0..16)
        .map(|_| {
            std::thread::spawn(move || {
                (0..IDLE / 16)
                    .filter_map(|_| {
                        TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let idle: Vec<TcpStream> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    println!("{} idle connections in {:?}", idle.len(), started.elapsed());
    assert!(idle.len() > IDLE * 9 / 10, "only {} connected", idle.len());

    let rt = tokio::runtime::Runtime::new().unwrap();
    let started = Instant::now();
    let answer = rt.block_on(async {
        let token = Token::from_bytes(b"flood-test").unwrap();
        let mut ch = Channel::connect(addr, &token, Duration::from_secs(5))
            .await
            .map_err(|e| e.to_string())?;
        tokio::time::timeout(
            Duration::from_secs(5),
            ch.call::<_, Response>(&Request::Ping),
        )
        .await
        .map_err(|_| "no answer in 5 s".to_string())?
        .map_err(|e| e.to_string())
    });
    let log = std::fs::read_to_string(dir.path().join("worker.log")).unwrap_or_default();
    let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join("\n");
    match answer {
        Ok(Response::Pong(_)) => {}
        other => panic!(
            "after {IDLE} idle connections the peer got {other:?} in {:?}; the worker's log ends:\n{tail}",
            started.elapsed()
        ),
    }
    println!(
        "authenticated Ping answered {:?} after {} idle connections",
        started.elapsed(),
        idle.len()
    );
    drop(idle);
}
