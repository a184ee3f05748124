//! Issue #36 item 5 (#34 item 4): a process of an old run cannot act on a
//! new one. Over real TCP on loopback, against the real partitioner agent
//! (`roles::partitioner::serve`, the accept loop the workers share): a
//! client holding the job's token but of run 1 cannot send `Shutdown` to a
//! run 2 partitioner, nor to the run 1 partitioner kept across the restart
//! once run 2 has reached it; run 2's clients still fetch from that kept
//! partitioner; a run carried in the handshake cannot be altered in flight;
//! the kept pod's own readiness probe (the `dglrun` binary, its pod's older
//! run) still finds it ready.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use dgl_api::wire::{Request, Response, Run, MAC_LEN, MAGIC, NONCE_LEN};
use dgl_api::ReplicaType;
use dglrun::dataset::Layout;
use dglrun::net::channel::{server_handshake, AuthError, Channel, ChannelError, Token};
use dglrun::transfer::{Fetcher, FileServer, RetryPolicy, TransferError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

mod common;

const WAIT: Duration = Duration::from_secs(5);
const DGLRUN: &str = env!("CARGO_BIN_EXE_dglrun");

/// The job's token as a process of `run` holds it.
fn token(run: u32) -> Token {
    Token::from_bytes(b"the-jobs-token")
        .unwrap()
        .with_run(Run(run))
}

/// Two small partitions, as partition_graph lays them out.
fn dataset(ws: &Path) -> Layout {
    let l = Layout::new(ws, "g");
    let mut json = serde_json::json!({"graph_name": "g", "num_parts": 2});
    for i in 0..2u32 {
        json[format!("part-{i}")] = serde_json::json!({
            "node_feats": format!("part{i}/node_feat.dgl"),
            "edge_feats": format!("part{i}/edge_feat.dgl"),
            "part_graph": format!("part{i}/graph.dgl"),
        });
        std::fs::create_dir_all(l.part_dir(i)).unwrap();
        for (f, n) in [
            ("graph.dgl", 3000),
            ("node_feat.dgl", 500),
            ("edge_feat.dgl", 0),
        ] {
            let bytes: Vec<u8> = (0..n).map(|k| (k * 7 + i as usize) as u8).collect();
            std::fs::write(l.part_dir(i).join(f), bytes).unwrap();
        }
    }
    std::fs::write(l.json_path(), json.to_string()).unwrap();
    l
}

/// The real partitioner serving `layout` as a process of `run`; its task
/// ends when it accepts a `Shutdown`.
async fn partitioner(layout: &Layout, run: u32) -> (SocketAddr, JoinHandle<anyhow::Result<()>>) {
    layout.check_all(2).unwrap();
    let server = FileServer::new(layout.dir.clone(), layout.build_manifest(2).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(dglrun::roles::partitioner::serve(
        listener,
        server,
        token(run),
    ));
    (addr, task)
}

fn shutdown() -> Request {
    Request::Shutdown {
        reason: "sent by a process of an old run".into(),
    }
}

/// What a process of `run` gets when it tries to shut the partitioner down.
async fn try_shutdown(addr: SocketAddr, tok: &Token) -> Result<Response, ChannelError> {
    let mut ch = Channel::connect(addr, tok, WAIT).await?;
    ch.call(&shutdown()).await
}

/// `err` is the refusal of a client of run `ours` by a server that knows `newest`.
fn assert_stale(err: &ChannelError, ours: u32, newest: u32) {
    assert!(
        matches!(err, ChannelError::Auth(AuthError::Stale { ours: o, newest: n })
            if *o == Run(ours) && *n == Run(newest)),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("run {newest}"))
            && msg.contains(&format!("run {ours}"))
            && msg.contains("refused as stale"),
        "{msg}"
    );
    assert!(!err.is_transient(), "a stale run is not worth a retry");
}

async fn ping(addr: SocketAddr, tok: &Token) -> Result<Response, ChannelError> {
    let mut ch = Channel::connect(addr, tok, WAIT).await?;
    ch.call(&Request::Ping).await
}

#[tokio::test]
async fn an_old_runs_client_cannot_shut_down_a_new_runs_partitioner() {
    let ws = tempfile::tempdir().unwrap();
    let (addr, task) = partitioner(&dataset(ws.path()), 2).await;

    let err = try_shutdown(addr, &token(1)).await.unwrap_err();
    assert_stale(&err, 1, 2);
    // Nor does the old run's fetcher get a byte: it gives up at once.
    let mut f = Fetcher::new(addr, token(1).to_kept_partitioner(), policy());
    let e = f.manifest().await.unwrap_err();
    assert!(matches!(e, TransferError::Channel { .. }), "{e:?}");
    assert!(e.to_string().contains("refused as stale"), "{e}");

    // The partitioner still serves its own run, which may shut it down.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!task.is_finished(), "the stale Shutdown must not end it");
    let pong = ping(addr, &token(2)).await.unwrap();
    assert!(matches!(pong, Response::Pong(i) if i.role == ReplicaType::Partitioner));
    assert!(matches!(
        try_shutdown(addr, &token(2)).await,
        Ok(Response::Ack)
    ));
    tokio::time::timeout(WAIT, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_kept_partitioner_serves_the_new_run_and_then_refuses_the_old_one() {
    let ws = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let layout = dataset(ws.path());
    // Created in run 1, kept across the restart to run 2: its env says 1.
    let (addr, task) = partitioner(&layout, 1).await;
    // Before run 2 reaches it, run 1 is its own run.
    assert!(matches!(ping(addr, &token(1)).await, Ok(Response::Pong(_))));

    // Run 2's worker fetches its shard from the older partitioner.
    let mut f = Fetcher::new(addr, token(2).to_kept_partitioner(), policy());
    let files = f.manifest().await.unwrap().shard_files(1);
    let dest = Layout::new(dst.path(), "g");
    let stats = f.fetch_all(&files, &dest.dir).await.unwrap();
    assert_eq!(stats.files as usize, files.len());
    dest.check_shard(1, Some(2)).unwrap();

    // From now on run 1 is stale there, whatever it asks.
    let err = try_shutdown(addr, &token(1)).await.unwrap_err();
    assert_stale(&err, 1, 2);
    assert_stale(&ping(addr, &token(1)).await.unwrap_err(), 1, 2);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!task.is_finished(), "the stale Shutdown must not end it");

    // Run 2's launcher still reaches it (and may release it).
    let kept = token(2).to_kept_partitioner();
    assert!(matches!(try_shutdown(addr, &kept).await, Ok(Response::Ack)));
    tokio::time::timeout(WAIT, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_new_runs_client_refuses_an_older_server_but_the_partitioner() {
    let ws = tempfile::tempdir().unwrap();
    let (addr, _task) = partitioner(&dataset(ws.path()), 1).await;
    // A launcher of run 2 calling a worker's agent: only its own run may
    // answer (an old worker's agent must not take its orders or give shards).
    let err = ping(addr, &token(2)).await.unwrap_err();
    assert!(
        matches!(err, ChannelError::Auth(AuthError::StaleServer { peer, ours })
            if peer == Run(1) && ours == Run(2)),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("peer is of run 1, this job is at run 2: refused as stale"),
        "{msg}"
    );
}

/// The server's side of a refusal names both runs.
#[tokio::test]
async fn the_server_names_both_runs_when_it_refuses_a_stale_client() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        server_handshake(&mut s, &token(3)).await.err().unwrap()
    });
    let client = Channel::connect(addr, &token(2), WAIT).await.err().unwrap();
    assert_stale(&client, 2, 3);
    let err = server.await.unwrap();
    assert!(
        matches!(err, ChannelError::Auth(AuthError::StalePeer { peer, newest })
            if peer == Run(2) && newest == Run(3)),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "authentication failed: peer is of run 2, this job is at run 3: refused as stale"
    );
}

/// A proxy that passes the handshake on but flips the last byte of the
/// server's run (`server_side`) or of the client's.
async fn run_rewriting_proxy(upstream: SocketAddr, server_side: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        let server = TcpStream::connect(upstream).await.unwrap();
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        let mut hello = [0u8; MAGIC.len() + NONCE_LEN + 4];
        sr.read_exact(&mut hello).await.unwrap();
        if server_side {
            hello[hello.len() - 1] ^= 1;
        }
        cw.write_all(&hello).await.unwrap();
        let mut answer = [0u8; MAC_LEN + NONCE_LEN + 4];
        cr.read_exact(&mut answer).await.unwrap();
        if !server_side {
            answer[answer.len() - 1] ^= 1;
        }
        sw.write_all(&answer).await.unwrap();
        tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
        let _ = tokio::io::copy(&mut sr, &mut cw).await;
    });
    addr
}

#[tokio::test]
async fn a_run_altered_in_flight_fails_the_handshake() {
    let ws = tempfile::tempdir().unwrap();
    let (addr, task) = partitioner(&dataset(ws.path()), 2).await;
    // Run 3 claimed for a run 2 client (or run 3 shown for the server):
    // the proofs cover both runs, so the server refuses the answer.
    for server_side in [false, true] {
        let proxy = run_rewriting_proxy(addr, server_side).await;
        let err = ping(proxy, &token(2)).await.unwrap_err();
        assert!(
            matches!(err, ChannelError::Auth(AuthError::Refused)),
            "server side {server_side}: {err:?}"
        );
    }
    // Nothing was raised by the forged run 3: run 2 still works.
    assert!(matches!(ping(addr, &token(2)).await, Ok(Response::Pong(_))));
    assert!(!task.is_finished());
}

/// A process this test started, killed (by its own handle) when dropped.
struct Started(std::process::Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `dglrun probe --ready` as the kubelet runs it in a pod of run 1.
fn probe(port: u16, token_file: &Path) -> std::process::Output {
    std::process::Command::new(DGLRUN)
        .args(["probe", "--ready", "--timeout", "2"])
        .args(["--agent-port", &port.to_string()])
        .arg("--token-file")
        .arg(token_file)
        .env(dgl_api::names::ENV_RUN, "1")
        .output()
        .unwrap()
}

#[tokio::test]
async fn the_probe_of_a_pod_of_an_older_run_still_finds_its_agent_ready() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "the-jobs-token\n").unwrap();
    let port = common::free_port();
    let child = std::process::Command::new(DGLRUN)
        .args(["worker", "--listen", "127.0.0.1", "--index", "0"])
        .args(["--agent-port", &port.to_string(), "--python", "python3"])
        .arg("--token-file")
        .arg(&token_file)
        .arg("--workspace")
        .arg(dir.path().join("ws"))
        .env(dgl_api::names::ENV_RUN, "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _agent = Started(child);
    let end = std::time::Instant::now() + Duration::from_secs(15);
    while !probe(port, &token_file).status.success() {
        assert!(std::time::Instant::now() < end, "the agent never got ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Run 2 reaches the run 1 agent: from then on run 1 is stale there...
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let newer = ping(addr, &token(2).to_kept_partitioner()).await;
    assert!(matches!(newer, Ok(Response::Pong(_))), "{newer:?}");
    assert_stale(&ping(addr, &token(1)).await.unwrap_err(), 1, 2);
    // ...but not its own pod's probe, which pings as the run it proved.
    let o = probe(port, &token_file);
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("ready: Worker agent"), "{out}");
}

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(50),
        connect_timeout: WAIT,
        idle_timeout: WAIT,
    }
}
