//! The control channel and the shard transfer over real TCP on loopback:
//! framing, authentication (a wrong token is refused, a server without the
//! token is detected), manifest + sha256 checks, and transfers that are cut
//! or corrupted midway by a faulty proxy and still end with verified files.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dgl_api::wire::{
    self, FileEntry, Request, Response, AUTH_OK, MAC_LEN, MAGIC, NONCE_LEN, RUN_LEN,
};
use dgl_api::ReplicaType;
use dglrun::dataset::{sha256_file, Layout};
use dglrun::net::channel::{
    client_handshake, read_frame, server_handshake, AuthError, Channel, ChannelError, Token,
};
use dglrun::transfer::{FetchStats, Fetcher, FileServer, RetryPolicy, TransferError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod common;

fn token(s: &str) -> Token {
    Token::from_bytes(s.as_bytes()).unwrap()
}

fn fast_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        connect_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
    }
}

/// Deterministic pseudo-random bytes (xorshift), so files are not compressible
/// patterns and a flipped byte changes the hash.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A partition folder with two parts, as partition_graph lays it out; part 1
/// has a 3 MiB graph so that a transfer can be cut in the middle.
fn fake_dataset(ws: &Path) -> Layout {
    let l = Layout::new(ws, "g");
    let mut json = serde_json::json!({"graph_name": "g", "num_parts": 2});
    for i in 0..2u32 {
        json[format!("part-{i}")] = serde_json::json!({
            "node_feats": format!("part{i}/node_feat.dgl"),
            "edge_feats": format!("part{i}/edge_feat.dgl"),
            "part_graph": format!("part{i}/graph.dgl"),
        });
        std::fs::create_dir_all(l.part_dir(i)).unwrap();
        let big = if i == 1 { 3 << 20 } else { 1000 };
        std::fs::write(l.part_dir(i).join("graph.dgl"), bytes(big, 7 + i as u64)).unwrap();
        std::fs::write(
            l.part_dir(i).join("node_feat.dgl"),
            bytes(5000, 11 + i as u64),
        )
        .unwrap();
        std::fs::write(l.part_dir(i).join("edge_feat.dgl"), b"").unwrap();
    }
    std::fs::write(l.json_path(), json.to_string()).unwrap();
    l
}

/// Starts the partitioner's server (the real one) on an ephemeral loopback port.
async fn serve(layout: &Layout, tok: &Token) -> SocketAddr {
    layout.check_all(2).unwrap();
    let manifest = layout.build_manifest(2).unwrap();
    let server = FileServer::new(layout.dir.clone(), manifest);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(dglrun::roles::partitioner::serve(
        listener,
        server,
        tok.clone(),
    ));
    addr
}

fn same_file(a: &Path, b: &Path) {
    assert_eq!(
        sha256_file(a).unwrap(),
        sha256_file(b).unwrap(),
        "{} differs from {}",
        a.display(),
        b.display()
    );
}

#[tokio::test]
async fn frames_and_ping_over_tcp() {
    let ws = tempfile::tempdir().unwrap();
    let tok = token("job-token");
    let addr = serve(&fake_dataset(ws.path()), &tok).await;
    let mut ch = Channel::connect(addr, &tok, Duration::from_secs(5))
        .await
        .unwrap();
    // Several requests on one connection.
    for _ in 0..3 {
        match ch.call::<_, Response>(&Request::Ping).await.unwrap() {
            Response::Pong(info) => assert_eq!(info.role, ReplicaType::Partitioner),
            other => panic!("expected Pong, got {other:?}"),
        }
    }
    match ch.call::<_, Response>(&Request::GetManifest).await.unwrap() {
        Response::Manifest(m) => {
            assert_eq!((m.graph_name.as_str(), m.num_parts), ("g", 2));
            assert_eq!(m.files.len(), 7);
        }
        other => panic!("expected Manifest, got {other:?}"),
    }
    // A request the partitioner does not serve gets an Error frame, and the
    // connection stays usable.
    let r: Response = ch
        .call(&Request::Stop { reason: "x".into() })
        .await
        .unwrap();
    assert!(matches!(r, Response::Error { .. }), "{r:?}");
    let r: Response = ch.call(&Request::Ping).await.unwrap();
    assert!(matches!(r, Response::Pong(_)));
}

#[tokio::test]
async fn wrong_token_is_refused() {
    let ws = tempfile::tempdir().unwrap();
    let addr = serve(&fake_dataset(ws.path()), &token("right")).await;
    let err = Channel::connect(addr, &token("wrong"), Duration::from_secs(5))
        .await
        .err()
        .expect("a wrong token must not connect");
    assert!(
        matches!(err, ChannelError::Auth(AuthError::Refused)),
        "{err:?}"
    );
    assert!(!err.is_transient(), "a wrong token is not worth a retry");
    assert!(err.to_string().contains("different job tokens"), "{err}");

    // The fetcher gives up at once instead of retrying a wrong token.
    let mut f = Fetcher::new(addr, token("wrong"), fast_policy());
    let e = f.manifest().await.unwrap_err();
    assert!(matches!(e, TransferError::Channel { .. }), "{e:?}");
}

#[tokio::test]
async fn a_server_without_the_token_is_detected() {
    // A fake server that accepts any answer and "proves" itself with garbage.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut hello = MAGIC.to_vec();
        hello.extend_from_slice(&[7u8; NONCE_LEN + RUN_LEN]);
        s.write_all(&hello).await.unwrap();
        let mut answer = [0u8; MAC_LEN + NONCE_LEN + RUN_LEN];
        s.read_exact(&mut answer).await.unwrap();
        let mut ok = vec![AUTH_OK];
        ok.extend_from_slice(&[0u8; MAC_LEN]);
        s.write_all(&ok).await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    });
    let err = Channel::connect(addr, &token("t"), Duration::from_secs(5))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, ChannelError::Auth(AuthError::WrongServerProof)),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_foreign_protocol_is_detected() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    });
    let err = Channel::connect(addr, &token("t"), Duration::from_secs(5))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, ChannelError::Auth(AuthError::BadMagic)),
        "{err:?}"
    );
}

#[tokio::test]
async fn oversized_frames_are_refused() {
    let (mut a, mut b) = tokio::io::duplex(256);
    let tok = token("t");
    let t2 = tok.clone();
    tokio::spawn(async move {
        let session = server_handshake(&mut a, &t2).await.unwrap();
        let (r, w) = tokio::io::split(a);
        let (_r, mut w) = session.split(r, w);
        w.get_mut()
            .write_all(&((wire::MAX_FRAME_LEN as u32) + 1).to_be_bytes())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    });
    let session = client_handshake(&mut b, &tok).await.unwrap();
    let (r, w) = tokio::io::split(b);
    let (mut r, _w) = session.split(r, w);
    let r = read_frame::<_, Request>(&mut r).await;
    assert!(
        matches!(r, Err(ChannelError::Wire(wire::WireError::TooLarge { .. }))),
        "{r:?}"
    );
}

#[tokio::test]
async fn shard_is_fetched_verified_and_reused() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let tok = token("t");
    let layout = fake_dataset(src.path());
    let addr = serve(&layout, &tok).await;

    let mut f = Fetcher::new(addr, tok.clone(), fast_policy());
    let m = f.manifest().await.unwrap();
    let files = m.shard_files(1);
    assert_eq!(files.len(), 4, "the JSON and part1's three files");
    let dest = Layout::new(dst.path(), "g");
    let stats = f.fetch_all(&files, &dest.dir).await.unwrap();
    assert_eq!(stats.files, 4);
    assert_eq!(stats.transferred, stats.bytes);
    assert_eq!((stats.retries, stats.reused), (0, 0));
    // The worker's copy is complete for partition 1 and has nothing of part 0.
    dest.check_shard(1, Some(2)).unwrap();
    assert!(!dest.part_dir(0).exists());
    for f in &files {
        same_file(&layout.dir.join(&f.path), &dest.dir.join(&f.path));
    }

    // Again: everything is already there and verified, nothing is sent.
    let stats = Fetcher::new(addr, tok.clone(), fast_policy())
        .fetch_all(&files, &dest.dir)
        .await
        .unwrap();
    assert_eq!((stats.reused, stats.transferred), (4, 0));

    // A file outside the manifest is refused by the server, a path that
    // leaves the folder is refused by the client before asking.
    let mut f = Fetcher::new(addr, tok.clone(), fast_policy());
    let bogus = FileEntry {
        path: "part0/../../../etc/passwd".into(),
        size: 1,
        sha256: "00".into(),
    };
    let e = f.fetch_all(&[bogus], &dest.dir).await.unwrap_err();
    assert!(matches!(e, TransferError::UnsafePath(_)), "{e:?}");
    let unknown = FileEntry {
        path: "secret.txt".into(),
        size: 1,
        sha256: "00".into(),
    };
    let e = f.fetch_all(&[unknown], &dest.dir).await.unwrap_err();
    assert!(e.to_string().contains("not in the manifest"), "{e}");
}

#[tokio::test]
async fn a_file_that_changed_after_the_manifest_fails_with_its_name() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let tok = token("t");
    let layout = fake_dataset(src.path());
    let addr = serve(&layout, &tok).await;
    let mut f = Fetcher::new(addr, tok, fast_policy());
    let files = f.manifest().await.unwrap().shard_files(0);
    // Same size, different bytes: only the sha256 can tell.
    let victim = layout.part_dir(0).join("node_feat.dgl");
    std::fs::write(&victim, bytes(5000, 999)).unwrap();
    let e = f
        .fetch_all(&files, &Layout::new(dst.path(), "g").dir)
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("part0/node_feat.dgl"), "{msg}");
    assert!(msg.contains("sha256 mismatch"), "{msg}");
    assert!(msg.contains("4 attempt(s)"), "{msg}");
    // Nothing half-verified is left under the real name.
    assert!(!dst.path().join("dataset/part0/node_feat.dgl").exists());
}

/// What the proxy does to the first connection.
#[derive(Clone, Copy)]
enum Fault {
    /// Forward this many bytes server→client, then cut both sides.
    CutAfter(usize),
    /// Flip the byte at this position of the server→client stream.
    FlipAt(usize),
    /// Forward the first this many bytes server→client 10 KiB per 100 ms.
    Trickle(usize),
}

/// A TCP proxy in front of `upstream` that damages only its first connection.
async fn faulty_proxy(upstream: SocketAddr, fault: Fault) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let counter = conns.clone();
    tokio::spawn(async move {
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let server = TcpStream::connect(upstream).await.unwrap();
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                });
                let mut seen = 0usize;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let k = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => k,
                    };
                    let chunk = &mut buf[..k];
                    if let (0, Fault::Trickle(limit)) = (n, fault) {
                        let mut rest: &[u8] = chunk;
                        while !rest.is_empty() && seen < limit {
                            let piece = rest.len().min(10 << 10);
                            if cw.write_all(&rest[..piece]).await.is_err() {
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            (seen, rest) = (seen + piece, &rest[piece..]);
                        }
                        if cw.write_all(rest).await.is_err() {
                            break;
                        }
                        seen += rest.len();
                        continue;
                    }
                    if n == 0 {
                        match fault {
                            Fault::CutAfter(limit) if seen + k >= limit => {
                                let _ = cw.write_all(&chunk[..limit - seen]).await;
                                break; // drop both directions mid-file
                            }
                            Fault::FlipAt(pos) if (seen..seen + k).contains(&pos) => {
                                chunk[pos - seen] ^= 0xff;
                            }
                            _ => {}
                        }
                    }
                    seen += k;
                    if cw.write_all(chunk).await.is_err() {
                        break;
                    }
                }
                up.abort();
            });
        }
    });
    (addr, conns)
}

#[tokio::test]
async fn an_interrupted_transfer_resumes_and_is_verified() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let tok = token("t");
    let layout = fake_dataset(src.path());
    let addr = serve(&layout, &tok).await;
    let manifest = Fetcher::new(addr, tok.clone(), fast_policy())
        .manifest()
        .await
        .unwrap();
    let graph = manifest.get("part1/graph.dgl").unwrap().clone();
    assert_eq!(graph.size, 3 << 20);

    // Cut the first connection about 1 MiB into the big file.
    let (proxy, conns) = faulty_proxy(addr, Fault::CutAfter(1 << 20)).await;
    let mut f = Fetcher::new(proxy, tok.clone(), fast_policy());
    let dest = Layout::new(dst.path(), "g");
    let stats = f
        .fetch_all(std::slice::from_ref(&graph), &dest.dir)
        .await
        .unwrap();
    assert_eq!(stats.retries, 1, "{stats:?}");
    assert!(
        stats.resumed_bytes > 512 * 1024,
        "the second attempt resumes instead of starting over: {stats:?}"
    );
    assert_eq!(
        stats.transferred, graph.size,
        "each byte crossed the network once: {stats:?}"
    );
    assert_eq!(conns.load(Ordering::SeqCst), 2);
    same_file(&layout.dir.join(&graph.path), &dest.dir.join(&graph.path));
    assert!(
        !dest.dir.join("part1/graph.dgl.dglrun-partial").exists(),
        "the partial file is renamed once verified"
    );
}

#[tokio::test]
async fn a_corrupted_transfer_starts_over_and_is_verified() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let tok = token("t");
    let layout = fake_dataset(src.path());
    let addr = serve(&layout, &tok).await;
    let manifest = Fetcher::new(addr, tok.clone(), fast_policy())
        .manifest()
        .await
        .unwrap();
    let graph = manifest.get("part1/graph.dgl").unwrap().clone();
    // Flip a byte deep in the file (past the handshake and the header frame).
    let (proxy, _) = faulty_proxy(addr, Fault::FlipAt(2 << 20)).await;
    let mut f = Fetcher::new(proxy, tok, fast_policy());
    let dest = Layout::new(dst.path(), "g");
    let stats = f
        .fetch_all(std::slice::from_ref(&graph), &dest.dir)
        .await
        .unwrap();
    assert_eq!((stats.restarted, stats.retries), (1, 1), "{stats:?}");
    assert_eq!(stats.transferred, 2 * graph.size, "{stats:?}");
    same_file(&layout.dir.join(&graph.path), &dest.dir.join(&graph.path));
}

#[tokio::test]
async fn an_unreachable_partitioner_fails_after_bounded_retries() {
    // A port nobody listens on.
    let addr = SocketAddr::from(([127, 0, 0, 1], common::free_port()));
    let started = std::time::Instant::now();
    let e = Fetcher::new(addr, token("t"), fast_policy())
        .manifest()
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransferError::Exhausted { attempts: 4, .. }),
        "{e:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

// ---------------------------------------------------------------------------
// The partitioner's own manifest: sizes only, served at once; every chunk
// is checked against the sum the partitioner sends after it.

/// Serves `layout` as the partitioner does: listed (no hashing first).
async fn serve_listed(layout: &Layout, tok: &Token) -> SocketAddr {
    let manifest = layout.list_manifest(2).unwrap();
    assert!(manifest.files.iter().all(|f| f.sha256.is_empty()));
    let server = FileServer::new(layout.dir.clone(), manifest);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(dglrun::roles::partitioner::serve(
        listener,
        server,
        tok.clone(),
    ));
    addr
}

/// A dataset whose part 1 graph spans three chunks (4 MiB each).
fn three_chunk_dataset(ws: &Path) -> Layout {
    let l = fake_dataset(ws);
    std::fs::write(l.part_dir(1).join("graph.dgl"), bytes(9 << 20, 5)).unwrap();
    l
}

/// [`three_chunk_dataset`] served listed, with its graph's manifest entry
/// and an empty destination folder.
struct Served {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    tok: Token,
    layout: Layout,
    /// Where the worker puts it.
    dest: Layout,
    addr: SocketAddr,
    graph: FileEntry,
}

impl Served {
    /// Fetches the graph file through `via` (the partitioner or a proxy).
    async fn fetch(
        &self,
        via: SocketAddr,
        policy: RetryPolicy,
    ) -> Result<FetchStats, TransferError> {
        Fetcher::new(via, self.tok.clone(), policy)
            .fetch_all(std::slice::from_ref(&self.graph), &self.dest.dir)
            .await
    }

    /// The worker's copy is the partitioner's file.
    fn same_copy(&self) {
        same_file(
            &self.layout.dir.join(&self.graph.path),
            &self.dest.dir.join(&self.graph.path),
        );
    }
}

async fn served_graph() -> Served {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let tok = token("t");
    let layout = three_chunk_dataset(src.path());
    let addr = serve_listed(&layout, &tok).await;
    let graph = Fetcher::new(addr, tok.clone(), fast_policy())
        .manifest()
        .await
        .unwrap()
        .get("part1/graph.dgl")
        .unwrap()
        .clone();
    let dest = Layout::new(dst.path(), "g");
    Served {
        _dirs: (src, dst),
        tok,
        layout,
        dest,
        addr,
        graph,
    }
}

#[tokio::test]
async fn a_listed_shard_is_fetched_chunk_by_chunk_and_reused_after_a_check() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let tok = token("t");
    let layout = three_chunk_dataset(src.path());
    let addr = serve_listed(&layout, &tok).await;
    let mut f = Fetcher::new(addr, tok.clone(), fast_policy());
    let files = f.manifest().await.unwrap().shard_files(1);
    let dest = Layout::new(dst.path(), "g");
    let stats = f.fetch_all(&files, &dest.dir).await.unwrap();
    assert_eq!((stats.transferred, stats.retries), (stats.bytes, 0));
    for e in &files {
        same_file(&layout.dir.join(&e.path), &dest.dir.join(&e.path));
    }
    // Present files are checked against the partitioner's chunk sums.
    let stats = Fetcher::new(addr, tok.clone(), fast_policy())
        .fetch_all(&files, &dest.dir)
        .await
        .unwrap();
    assert_eq!((stats.reused, stats.transferred), (4, 0));
    // A present file with a flipped byte is not reused.
    let victim = dest.dir.join("part1/graph.dgl");
    let mut b = std::fs::read(&victim).unwrap();
    b[5 << 20] ^= 1;
    std::fs::write(&victim, b).unwrap();
    let stats = Fetcher::new(addr, tok, fast_policy())
        .fetch_all(&files, &dest.dir)
        .await
        .unwrap();
    assert_eq!((stats.reused, stats.transferred), (3, 9 << 20));
    same_file(&layout.dir.join("part1/graph.dgl"), &victim);
}

#[tokio::test]
async fn a_slow_partitioner_is_not_a_silent_one() {
    // The worker asks the kernel to wake it per MiB of a chunk; bytes that
    // trickle in under that within the idle timeout must still count.
    let g = served_graph().await;
    // 100 KiB/s for the first 200 KiB: a second brings far less than 1 MiB.
    let (proxy, conns) = faulty_proxy(g.addr, Fault::Trickle(200 << 10)).await;
    let policy = RetryPolicy {
        idle_timeout: Duration::from_secs(1),
        ..fast_policy()
    };
    let stats = g.fetch(proxy, policy).await.unwrap();
    assert_eq!(
        (stats.retries, stats.transferred),
        (0, 9 << 20),
        "{stats:?}"
    );
    assert_eq!(conns.load(Ordering::SeqCst), 1);
    g.same_copy();
}

#[tokio::test]
async fn a_corrupted_chunk_is_fetched_again_alone() {
    let g = served_graph().await;
    // A byte of the second chunk (bytes 4..8 MiB of the file).
    let (proxy, _) = faulty_proxy(g.addr, Fault::FlipAt(6 << 20)).await;
    let stats = g.fetch(proxy, fast_policy()).await.unwrap();
    assert_eq!((stats.restarted, stats.retries), (1, 1), "{stats:?}");
    // Chunks 0, 1 and 2 (the last arrives while chunk 1 is checked), then
    // 1 and 2 again: the first chunk was kept.
    assert_eq!(stats.transferred, 14 << 20, "{stats:?}");
    assert_eq!(stats.resumed_bytes, 4 << 20, "{stats:?}");
    g.same_copy();
}

#[tokio::test]
async fn a_partial_file_of_an_earlier_run_is_checked_before_it_is_resumed() {
    let g = served_graph().await;
    // 8.5 MiB left by an earlier process: chunk 0 right, chunk 1 wrong,
    // half of chunk 2.
    std::fs::create_dir_all(g.dest.part_dir(1)).unwrap();
    let mut partial = std::fs::read(g.layout.dir.join(&g.graph.path)).unwrap();
    partial.truncate(17 << 19);
    partial[5 << 20] ^= 1;
    std::fs::write(g.dest.dir.join("part1/graph.dgl.dglrun-partial"), &partial).unwrap();
    let stats = g.fetch(g.addr, fast_policy()).await.unwrap();
    assert_eq!(stats.resumed_bytes, 4 << 20, "cut after chunk 0: {stats:?}");
    assert_eq!(stats.transferred, 5 << 20, "{stats:?}");
    g.same_copy();
}

#[tokio::test]
async fn a_listed_file_that_changed_is_refused_with_its_name() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let tok = token("t");
    let layout = fake_dataset(src.path());
    let addr = serve_listed(&layout, &tok).await;
    let mut f = Fetcher::new(addr, tok, fast_policy());
    let files = f.manifest().await.unwrap().shard_files(0);
    // Same size, different bytes, later modification time.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(layout.part_dir(0).join("node_feat.dgl"), bytes(5000, 999)).unwrap();
    let e = f
        .fetch_all(&files, &Layout::new(dst.path(), "g").dir)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("part0/node_feat.dgl"), "{e}");
    assert!(
        e.contains("changed after the partitions were checked"),
        "{e}"
    );
    assert!(!dst.path().join("dataset/part0/node_feat.dgl").exists());
}

// ---------------------------------------------------------------------------
// After the handshake every frame and every chunk's sum carries a tag
// (issue #15, item 8): whoever sits on the path without the token can
// neither alter, replay nor forge what the two ends exchange.

/// Bytes the server sends in the handshake: magic, nonce, run, status, proof.
const SERVER_HELLO: usize = MAGIC.len() + NONCE_LEN + RUN_LEN + 1 + MAC_LEN;
/// Bytes the client sends in the handshake: proof, nonce, run.
const CLIENT_HELLO: usize = MAC_LEN + NONCE_LEN + RUN_LEN;

/// Copies `n` bytes from `r` to `w` (what a proxy passes on untouched).
async fn pass(
    r: &mut (impl tokio::io::AsyncRead + Unpin),
    w: &mut (impl tokio::io::AsyncWrite + Unpin),
    n: usize,
) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).await.unwrap();
    w.write_all(&buf).await.unwrap();
    buf
}

/// Reads one whole frame (length, JSON, tag) without checking it.
async fn raw_frame(r: &mut (impl tokio::io::AsyncRead + Unpin)) -> Vec<u8> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await.unwrap();
    let mut rest = vec![0u8; u32::from_be_bytes(len) as usize + wire::TAG_LEN];
    r.read_exact(&mut rest).await.unwrap();
    [len.to_vec(), rest].concat()
}

#[tokio::test]
async fn a_frame_altered_after_the_handshake_ends_the_connection() {
    let ws = tempfile::tempdir().unwrap();
    let tok = token("t");
    let addr = serve(&fake_dataset(ws.path()), &tok).await;
    // A byte of the Pong's JSON (past its 4-byte length).
    let (proxy, _) = faulty_proxy(addr, Fault::FlipAt(SERVER_HELLO + 6)).await;
    let mut ch = Channel::connect(proxy, &tok, Duration::from_secs(5))
        .await
        .unwrap();
    let err = ch.call::<_, Response>(&Request::Ping).await.unwrap_err();
    assert!(
        matches!(err, ChannelError::Unauthentic { unit: 0 }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("frame 0 failed authentication"),
        "{err}"
    );
    // The next connection (not damaged) works.
    let mut ch = Channel::connect(proxy, &tok, Duration::from_secs(5))
        .await
        .unwrap();
    let r: Response = ch.call(&Request::Ping).await.unwrap();
    assert!(matches!(r, Response::Pong(_)), "{r:?}");
}

#[tokio::test]
async fn a_replayed_frame_is_refused() {
    // The real handshake and framing on the server side, behind a proxy
    // that sends the client's first frame twice.
    let tok = token("t");
    let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = server.local_addr().unwrap();
    let t2 = tok.clone();
    let received = tokio::spawn(async move {
        let (mut s, _) = server.accept().await.unwrap();
        let session = server_handshake(&mut s, &t2).await.unwrap();
        let (r, w) = s.into_split();
        let (mut r, _w) = session.split(r, w);
        let first = read_frame::<_, Request>(&mut r).await;
        let second = read_frame::<_, Request>(&mut r).await;
        (first.unwrap(), second)
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        let server = TcpStream::connect(upstream).await.unwrap();
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        tokio::spawn(async move { tokio::io::copy(&mut sr, &mut cw).await });
        pass(&mut cr, &mut sw, CLIENT_HELLO).await;
        let frame = raw_frame(&mut cr).await;
        sw.write_all(&frame).await.unwrap();
        sw.write_all(&frame).await.unwrap();
        let _ = tokio::io::copy(&mut cr, &mut sw).await;
    });
    let mut ch = Channel::connect(proxy, &tok, Duration::from_secs(5))
        .await
        .unwrap();
    ch.send(&Request::Ping).await.unwrap();
    let (first, second) = received.await.unwrap();
    assert_eq!(first, Some(Request::Ping));
    let err = second.unwrap_err();
    assert!(
        matches!(err, ChannelError::Unauthentic { unit: 1 }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("frame 1 failed authentication"),
        "{err}"
    );
}

/// A proxy that, on its first connection, replaces chunk `k` (of `len`
/// bytes, all chunks before it of `CHUNK` bytes) of the first file fetched
/// with other bytes and their right sha256, keeping the partitioner's tag:
/// all an attacker without the token can do. Later connections pass.
async fn forging_proxy(upstream: SocketAddr, k: usize, len: usize) -> SocketAddr {
    const CHUNK: usize = wire::CHUNK_SIZE as usize;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut first = true;
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let server = TcpStream::connect(upstream).await.unwrap();
            let forge = std::mem::replace(&mut first, false);
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
                if forge {
                    // The greeting, then (after the client's answer) the rest.
                    pass(&mut sr, &mut cw, MAGIC.len() + NONCE_LEN + RUN_LEN).await;
                    pass(&mut sr, &mut cw, 1 + MAC_LEN).await;
                    let header = raw_frame(&mut sr).await;
                    cw.write_all(&header).await.unwrap();
                    for _ in 0..k {
                        pass(&mut sr, &mut cw, CHUNK + wire::SUM_LEN + wire::TAG_LEN).await;
                    }
                    let mut chunk = vec![0u8; len];
                    sr.read_exact(&mut chunk).await.unwrap();
                    chunk[len / 2] ^= 0xff;
                    let mut sum_and_tag = [0u8; wire::SUM_LEN + wire::TAG_LEN];
                    sr.read_exact(&mut sum_and_tag).await.unwrap();
                    use sha2::Digest;
                    sum_and_tag[..wire::SUM_LEN].copy_from_slice(&sha2::Sha256::digest(&chunk));
                    cw.write_all(&chunk).await.unwrap();
                    cw.write_all(&sum_and_tag).await.unwrap();
                }
                let _ = tokio::io::copy(&mut sr, &mut cw).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_chunk_forged_in_flight_with_its_sum_is_refused() {
    let g = served_graph().await;
    let proxy = forging_proxy(g.addr, 1, 4 << 20).await;
    // One attempt: the forged chunk (whose sha256 matches its bytes) is
    // refused by its sum's tag, and its bytes are not kept.
    let once = RetryPolicy {
        max_attempts: 1,
        ..fast_policy()
    };
    let e = g.fetch(proxy, once).await.unwrap_err().to_string();
    assert!(e.contains("part1/graph.dgl: chunk 1"), "{e}");
    assert!(e.contains("failed authentication"), "{e}");
    let partial = g.dest.dir.join("part1/graph.dgl.dglrun-partial");
    assert_eq!(std::fs::metadata(&partial).unwrap().len(), 4 << 20);
    assert!(!g.dest.dir.join("part1/graph.dgl").exists());
    // The next connection is not forged: the transfer resumes after chunk 0.
    let stats = g.fetch(proxy, fast_policy()).await.unwrap();
    assert_eq!(stats.resumed_bytes, 4 << 20, "{stats:?}");
    g.same_copy();
}
