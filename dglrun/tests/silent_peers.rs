//! Every wait on a peer is bounded (issue #15, item 9): peers that connect,
//! authenticate and then say nothing are given up on within the configured
//! timeout, with an error that names the peer and what was awaited; agents
//! close idle connections; a worker out of file descriptors does not spin
//! on accept().

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dgl_api::wire::{
    AgentInfo, ExitInfo, FileEntry, Manifest, Request, Response, ShardProgress, ShardReport,
    TrainResult, TrainSpec,
};
use dgl_api::ReplicaType;
use dglrun::net::channel::{read_frame, server_handshake, write_frame, Channel, Timeouts, Token};
use dglrun::net::hosts::Peer;
use dglrun::roles::launcher::{LaunchConfig, LaunchError};
use dglrun::transfer::{Fetcher, FileServer, RetryPolicy};
use tokio::net::{TcpListener, TcpStream};

mod common;

fn token() -> Token {
    Token::from_bytes(b"silent-test").unwrap()
}

fn quick_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 2,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(10),
        connect_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_millis(300),
    }
}

/// How a fake agent answers one request: `None` means say nothing (and
/// keep the connection open).
type Script = fn(&Request) -> Option<Vec<Response>>;

/// A fake agent that authenticates every client, then answers as `script`
/// says; a request it does not answer leaves the client waiting.
async fn fake_agent(script: Script) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = listener.accept().await.unwrap();
            tokio::spawn(fake_session(s, script));
        }
    });
    addr
}

async fn fake_session(mut s: TcpStream, script: Script) {
    let Ok(session) = server_handshake(&mut s, &token()).await else {
        return;
    };
    let (r, w) = s.into_split();
    let (mut r, mut w) = session.split(r, w);
    while let Ok(Some(req)) = read_frame::<_, Request>(&mut r).await {
        match script(&req) {
            Some(answers) => {
                for (i, a) in answers.iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    if write_frame(&mut w, a).await.is_err() {
                        return;
                    }
                }
            }
            None => {
                // Silent, with the connection open.
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
    }
}

fn manifest() -> Manifest {
    Manifest {
        graph_name: "g".into(),
        num_parts: 1,
        files: vec![FileEntry {
            path: "part0/graph.dgl".into(),
            size: 10,
            sha256: "00".repeat(32),
        }],
    }
}

#[tokio::test]
async fn a_partitioner_silent_after_the_handshake_is_named_for_the_manifest() {
    let addr = fake_agent(|_| None).await;
    let mut f = Fetcher::new(addr, token(), quick_policy());
    let started = Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(20), f.manifest())
        .await
        .expect("the fetcher gives up on a silent partitioner")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&addr.to_string()) && e.contains("the manifest"),
        "{e}"
    );
    assert!(e.contains("2 attempt(s)"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5), "{e}");
}

#[tokio::test]
async fn a_partitioner_silent_on_a_fetch_is_named_for_the_file_header() {
    let addr = fake_agent(|req| match req {
        Request::GetManifest => Some(vec![Response::Manifest(manifest())]),
        _ => None,
    })
    .await;
    let mut f = Fetcher::new(addr, token(), quick_policy());
    let m = f.manifest().await.unwrap();
    let dest = tempfile::tempdir().unwrap();
    let e = tokio::time::timeout(Duration::from_secs(20), f.fetch_all(&m.files, dest.path()))
        .await
        .expect("the fetcher gives up on a silent partitioner")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&addr.to_string()) && e.contains("the header of part0/graph.dgl"),
        "{e}"
    );
}

#[tokio::test]
async fn an_agent_closes_an_authenticated_connection_that_sends_nothing() {
    let ws = tempfile::tempdir().unwrap();
    let timeouts = Timeouts {
        session_idle_secs: 1,
        ..Timeouts::default()
    };
    let server = FileServer::new(ws.path().to_path_buf(), manifest()).with_timeouts(timeouts);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(dglrun::roles::partitioner::serve(listener, server, token()));
    let mut ch = Channel::connect(addr, &token(), Duration::from_secs(5))
        .await
        .unwrap();
    let started = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(10), ch.recv::<Response>())
        .await
        .expect("the agent closes the idle connection");
    assert!(matches!(got, Ok(None)), "{got:?}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    // A connection that keeps asking stays open past the idle time.
    let mut ch = Channel::connect(addr, &token(), Duration::from_secs(5))
        .await
        .unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let r: Response = ch.call(&Request::Ping).await.unwrap();
        assert!(matches!(r, Response::Pong(_)), "{r:?}");
    }
}

fn launch_config(agent: SocketAddr, peer_timeout: Duration) -> LaunchConfig {
    LaunchConfig {
        workers: vec![Peer {
            index: 0,
            ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            agent,
            pod: Some("job-worker-0".into()),
            slots: None,
        }],
        partitioner: None,
        from_cache: None,
        store: None,
        spec: TrainSpec {
            graph_name: "g".into(),
            entry_point: "train.py".into(),
            num_epochs: 1,
            batch_size: 1,
            num_trainers: 1,
            num_samplers: 0,
            num_servers: 1,
            machine_rank: 0,
            ip_config: "127.0.0.1 30050\n".into(),
            master_port: 29500,
            extra_args: vec![],
            command: None,
            use_graphbolt: false,
        },
        token: token(),
        wait_timeout: Duration::from_secs(10),
        peer_timeout,
        stop_grace: Duration::from_secs(1),
        dist_partition: None,
        progress_interval: Duration::ZERO,
    }
}

fn pong() -> Response {
    Response::Pong(AgentInfo {
        role: ReplicaType::Worker,
        index: Some(0),
        version: "test".into(),
        memory_limit: None,
    })
}

fn shard_ready() -> Response {
    Response::ShardReady(ShardReport {
        part_id: 0,
        files: 4,
        bytes: 1,
        transferred_bytes: 0,
        reused_files: 0,
        retries: 0,
    })
}

#[tokio::test]
async fn a_worker_silent_on_prepare_shard_fails_the_launch_with_its_name() {
    let agent = fake_agent(|req| match req {
        Request::Ping => Some(vec![pong()]),
        Request::Shutdown { .. } => Some(vec![Response::Ack]),
        _ => None,
    })
    .await;
    let cfg = launch_config(agent, Duration::from_secs(1));
    let started = Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(30), dglrun::roles::launcher::run(cfg))
        .await
        .expect("the launcher gives up on a silent worker")
        .unwrap_err();
    assert!(matches!(e, LaunchError::Shard { .. }), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("worker-0") && e.contains(&agent.to_string()) && e.contains("its shard"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(15), "{e}");
}

#[tokio::test]
async fn a_worker_that_reports_progress_is_waited_for_past_the_peer_timeout() {
    let agent = fake_agent(|req| match req {
        Request::Ping => Some(vec![pong()]),
        // 6 progress reports 0.3 s apart: 1.5 s, longer than the timeout.
        Request::PrepareShard(_) => Some(
            (0..6)
                .map(|i| {
                    Response::ShardProgress(ShardProgress {
                        part_id: 0,
                        received_bytes: i,
                    })
                })
                .chain([shard_ready()])
                .collect(),
        ),
        Request::Start(_) => Some(vec![Response::Finished(TrainResult {
            exit: ExitInfo::SUCCESS,
            failed_process: None,
            message: "fake training done".into(),
            stopped: false,
            failed_at_ms: None,
            lost_peer: false,
        })]),
        _ => Some(vec![Response::Ack]),
    })
    .await;
    let cfg = launch_config(agent, Duration::from_secs(1));
    tokio::time::timeout(Duration::from_secs(30), dglrun::roles::launcher::run(cfg))
        .await
        .expect("the launch ends")
        .expect("a worker that reports progress is not silent");
}

/// CPU seconds (user + system) of a process so far.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5), counted after the command name.
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

#[test]
fn a_worker_out_of_file_descriptors_backs_off_instead_of_spinning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "silent-test").unwrap();
    let port = common::free_port();
    let log = std::fs::File::create(dir.path().join("worker.log")).unwrap();
    let script = format!(
        "ulimit -n 40 && exec {} worker --token-file {} --workspace {} --listen 127.0.0.1 --agent-port {port}",
        env!("CARGO_BIN_EXE_dglrun"),
        dir.path().join("token").display(),
        dir.path().join("ws").display(),
    );
    let mut child = Command::new("sh")
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
    let pid = child.id();
    let end = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "the worker does not listen");
        assert!(child.try_wait().unwrap().is_none(), "the worker exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _child = Kill(child);
    // Silent clients: more than the worker has descriptors for. Those past
    // the limit stay in the listen queue, and every accept() of them fails
    // with EMFILE at once (until the handshake timeout frees descriptors).
    let clients: Vec<std::net::TcpStream> = (0..80)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_secs(pid);
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_secs(pid) - before;
    let log = std::fs::read_to_string(dir.path().join("worker.log")).unwrap();
    assert!(
        log.contains("accept failed"),
        "no EMFILE was provoked: {log}"
    );
    assert!(
        used < 0.5,
        "the worker used {used:.2} CPU s in 3 s while out of descriptors"
    );
    // And the warnings are few (the backoff reaches 1 s).
    let warnings = log.matches("accept failed").count();
    assert!(warnings < 30, "{warnings} accept warnings");
    drop(clients);
}
