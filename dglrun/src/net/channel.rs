//! The authenticated control channel (protocol: `dgl_api::wire`).
//!
//! Both ends prove they hold the job's token with HMAC-SHA256 over the other
//! side's random nonce and both sides' runs, derive one key per direction
//! from the token, both nonces and both runs (HKDF), then exchange
//! length-prefixed JSON frames, each with a tag over its number and bytes.
//! A server refuses a client of a run older than the newest it knows; a
//! client refuses a server of a newer run, and of an older one unless it
//! calls the partitioner (kept across restarts). File bytes are sent raw after a `File` frame,
//! each chunk followed by its sha256 with a tag, so that the bytes are
//! authenticated through their sum without a second pass over them.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dgl_api::duration;
use dgl_api::wire::{
    self, Run, WireError, AUTH_OK, AUTH_REFUSED, AUTH_STALE, CLIENT_TO_SERVER_LABEL,
    FRAME_HEADER_LEN, MAC_LEN, MAGIC, NONCE_LEN, RUN_LEN, SERVER_PROOF_CONTEXT,
    SERVER_TO_CLIENT_LABEL, STALE_PROOF_CONTEXT, TAG_LEN,
};
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

type HmacSha256 = Hmac<Sha256>;

/// How long either side may take for the handshake before the other gives up.
/// Keeps a stray or hostile connection from holding an agent's task forever.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to wait for a peer: every wait on another dglrun is bounded by
/// one of these (flags of every role).
#[derive(clap::Args, Debug, Clone, Copy, PartialEq, Eq)]
#[command(next_help_heading = "Timeouts (every role)")]
pub struct Timeouts {
    /// Seconds to wait for a peer's answer to one request (a ping, the
    /// manifest, a file's header), for the next bytes of a file, and
    /// between a worker's progress reports while it prepares its shard
    /// (it sends one every 2 s). A peer silent for longer is given up on,
    /// and the error names it and what was awaited. At least 5, capped at
    /// 1 year.
    #[arg(long = "peer-timeout", env = "DGLRUN_PEER_TIMEOUT", value_name = "SECONDS", default_value_t = 60, value_parser = duration::parse_secs_min::<5>)]
    pub peer_secs: u64,
    /// Seconds an agent (partitioner, worker) keeps an authenticated
    /// connection open that sends no request; then it closes it. At least
    /// 1, capped at 1 year.
    #[arg(long = "session-idle-timeout", env = "DGLRUN_SESSION_IDLE_TIMEOUT", value_name = "SECONDS", default_value_t = 300, value_parser = duration::parse_secs_min::<1>)]
    pub session_idle_secs: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            peer_secs: 60,
            session_idle_secs: 300,
        }
    }
}

impl Timeouts {
    pub fn peer(&self) -> Duration {
        duration::secs(self.peer_secs)
    }

    pub fn session_idle(&self) -> Duration {
        duration::secs(self.session_idle_secs)
    }
}

/// The job's shared secret as this process holds it: the bytes, this
/// process's run, and the newest run it has seen prove itself (shared by
/// every clone: one process, one fence). Its `Debug` never shows the bytes.
#[derive(Clone)]
pub struct Token {
    secret: Vec<u8>,
    run: Run,
    newest: Arc<AtomicU32>,
    /// As a client: a server of an older run is accepted (the partitioner,
    /// kept across restarts with the run it was created in).
    older_server_ok: bool,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Token(<{} bytes, redacted>, run {})",
            self.secret.len(),
            self.run
        )
    }
}

impl Token {
    /// Reads the token from a file (the mounted Secret). Surrounding
    /// whitespace is dropped so that a token written with a trailing newline
    /// matches one written without.
    pub fn from_file(path: &Path) -> Result<Token, AuthError> {
        let raw = std::fs::read(path).map_err(|source| AuthError::TokenFile {
            path: path.display().to_string(),
            source,
        })?;
        Token::from_bytes(&raw).ok_or_else(|| AuthError::EmptyToken {
            path: path.display().to_string(),
        })
    }

    /// A token from bytes; `None` when nothing but whitespace is left.
    /// A token from bytes, of run 0 (see [`Self::with_run`]); `None` when
    /// nothing but whitespace is left.
    pub fn from_bytes(raw: &[u8]) -> Option<Token> {
        let trimmed = raw.trim_ascii();
        (!trimmed.is_empty()).then(|| Token {
            secret: trimmed.to_vec(),
            run: Run::default(),
            newest: Arc::new(AtomicU32::new(0)),
            older_server_ok: false,
        })
    }

    /// This token held by a process of `run` (a fresh fence).
    pub fn with_run(self, run: Run) -> Token {
        Token {
            run,
            newest: Arc::new(AtomicU32::new(run.0)),
            ..self
        }
    }

    /// The same token (and fence) for calls to the partitioner, which may be
    /// of an older run: the operator keeps a partitioner that serves across
    /// a restart, its env (and so its run) fixed at its creation.
    pub fn to_kept_partitioner(&self) -> Token {
        Token {
            older_server_ok: true,
            ..self.clone()
        }
    }

    /// A client of `peer` proved itself: admitted unless older than the
    /// newest run known here, which it then raises; else that newest run.
    fn admit(&self, peer: Run) -> Result<(), Run> {
        let seen = self.newest.fetch_max(peer.0, Ordering::SeqCst);
        let newest = Run(seen.max(self.run.0));
        if peer < newest {
            Err(newest)
        } else {
            Ok(())
        }
    }

    fn mac(&self, parts: &[&[u8]]) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(&self.secret).expect("HMAC accepts keys of any length");
        for p in parts {
            mac.update(p);
        }
        mac
    }
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read the job token from {path}: {source}")]
    TokenFile {
        path: String,
        source: std::io::Error,
    },
    #[error("the job token file {path} is empty")]
    EmptyToken { path: String },
    #[error("the peer is not a dglrun agent of this protocol version (bad greeting)")]
    BadMagic,
    #[error("the peer refused our token: the two sides hold different job tokens")]
    Refused,
    #[error("the client's token proof is wrong (it holds a different job token)")]
    WrongClientProof,
    #[error("the server's token proof is wrong: it does not hold this job's token")]
    WrongServerProof,
    #[error("unexpected authentication status byte {0:#04x}")]
    BadStatus(u8),
    /// Server side: the client's run is older than the newest known here.
    #[error("peer is of run {peer}, this job is at run {newest}: refused as stale")]
    StalePeer { peer: Run, newest: Run },
    /// Client side: the server has seen a newer run than ours.
    #[error("the peer has seen run {newest} of this job, this process is of run {ours}: refused as stale")]
    Stale { ours: Run, newest: Run },
    /// Client side: a server of an older run where only our own run may serve.
    #[error("peer is of run {peer}, this job is at run {ours}: refused as stale (only the partitioner may be of an older run)")]
    StaleServer { peer: Run, ours: Run },
}

/// Failures of the channel.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("authentication failed: {0}")]
    Auth(#[from] AuthError),
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("the peer closed the connection")]
    Closed,
    /// A tag did not match: the unit was altered, replayed, dropped or
    /// reordered on the way (or the peer is not the one that authenticated).
    #[error("frame {unit} failed authentication (altered, replayed or reordered in flight); the connection is closed")]
    Unauthentic { unit: u64 },
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("{peer} sent nothing for {after:?} while we waited for {what}")]
    Silent {
        peer: SocketAddr,
        what: String,
        after: Duration,
    },
}

impl ChannelError {
    /// Errors worth another attempt (network trouble) as opposed to errors a
    /// retry cannot fix (a wrong token, a peer speaking another protocol).
    pub fn is_transient(&self) -> bool {
        match self {
            ChannelError::Io(_)
            | ChannelError::Closed
            | ChannelError::Timeout(_)
            | ChannelError::Silent { .. }
            // A damaged connection: a new one has fresh keys and counts.
            | ChannelError::Unauthentic { .. } => true,
            ChannelError::Auth(_) | ChannelError::Wire(_) => false,
        }
    }
}

fn random_nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).expect("the OS random source is available");
    n
}

/// One direction of a session: its key and the number of the next unit
/// (frame or chunk sum). The number is never sent: both ends count, so a
/// unit replayed, dropped or reordered fails its tag.
#[derive(Clone)]
struct Direction {
    /// Keyed once; cloned per unit (cheaper than keying again).
    mac: HmacSha256,
    next: u64,
}

impl Direction {
    fn new(key: &[u8]) -> Direction {
        Direction {
            mac: HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length"),
            next: 0,
        }
    }

    /// The MAC of the next unit, made of `parts`; advances the count.
    fn next_mac(&mut self, parts: &[&[u8]]) -> (u64, HmacSha256) {
        let n = self.next;
        self.next += 1;
        let mut mac = self.mac.clone();
        mac.update(&n.to_be_bytes());
        for p in parts {
            mac.update(p);
        }
        (n, mac)
    }

    fn tag(&mut self, parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let full = self.next_mac(parts).1.finalize().into_bytes();
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        tag
    }

    /// Checks the next unit's tag (in constant time).
    fn check(&mut self, parts: &[&[u8]], tag: &[u8]) -> Result<(), ChannelError> {
        let (n, mac) = self.next_mac(parts);
        mac.verify_truncated_left(tag)
            .map_err(|_| ChannelError::Unauthentic { unit: n })
    }
}

/// The keys of one authenticated connection, as one side sees them: what
/// it sends and what it receives are tagged with different keys, so a
/// unit reflected back at its sender fails too.
pub struct Session {
    send: Direction,
    recv: Direction,
}

impl Session {
    /// HKDF-SHA256 of the token, salted with both nonces and both runs
    /// (`runs`: the server's, then the client's, as sent), one key per
    /// direction (labels in [`dgl_api::wire`]).
    fn derive(
        token: &Token,
        server_nonce: &[u8],
        client_nonce: &[u8],
        runs: &[u8; 2 * RUN_LEN],
        is_server: bool,
    ) -> Session {
        let salt = [server_nonce, client_nonce, runs].concat();
        let hk = Hkdf::<Sha256>::new(Some(&salt), &token.secret);
        let key = |label: &[u8]| {
            let mut k = [0u8; 32];
            hk.expand(label, &mut k)
                .expect("32 bytes is a valid HKDF-SHA256 output length");
            Direction::new(&k)
        };
        let (c2s, s2c) = (key(CLIENT_TO_SERVER_LABEL), key(SERVER_TO_CLIENT_LABEL));
        if is_server {
            Session {
                send: s2c,
                recv: c2s,
            }
        } else {
            Session {
                send: c2s,
                recv: s2c,
            }
        }
    }

    /// The two halves of the connection, each with its direction's key.
    pub fn split<R, W>(self, reader: R, writer: W) -> (FrameReader<R>, FrameWriter<W>) {
        (
            FrameReader {
                inner: reader,
                dir: self.recv,
            },
            FrameWriter {
                inner: writer,
                dir: self.send,
            },
        )
    }
}

/// Both runs as the handshake binds them: the server's, then the client's.
fn runs(server: Run, client: Run) -> [u8; 2 * RUN_LEN] {
    let mut r = [0u8; 2 * RUN_LEN];
    r[..RUN_LEN].copy_from_slice(&server.to_be_bytes());
    r[RUN_LEN..].copy_from_slice(&client.to_be_bytes());
    r
}

/// Server side of the handshake; the session's keys on success. A client
/// of a run older than the newest this process knows is refused (and told
/// that run, with a proof); a newer one raises it.
pub async fn server_handshake<S>(s: &mut S, token: &Token) -> Result<Session, ChannelError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let nonce = random_nonce();
    let own = token.run;
    let mut hello = Vec::with_capacity(MAGIC.len() + NONCE_LEN + RUN_LEN);
    hello.extend_from_slice(&MAGIC);
    hello.extend_from_slice(&nonce);
    hello.extend_from_slice(&own.to_be_bytes());
    s.write_all(&hello).await?;
    let mut answer = [0u8; MAC_LEN + NONCE_LEN + RUN_LEN];
    s.read_exact(&mut answer).await.map_err(eof_is_closed)?;
    let (proof, rest) = answer.split_at(MAC_LEN);
    let (client_nonce, client_run) = rest.split_at(NONCE_LEN);
    let client_run = Run::from_be_bytes(client_run.try_into().expect("RUN_LEN bytes"));
    let runs = runs(own, client_run);
    // verify_slice compares in constant time.
    if token.mac(&[&nonce, &runs]).verify_slice(proof).is_err() {
        // Tell the client why, then close: it can print a clear message
        // instead of "connection reset".
        let _ = s.write_all(&[AUTH_REFUSED]).await;
        let _ = s.shutdown().await;
        return Err(AuthError::WrongClientProof.into());
    }
    if let Err(newest) = token.admit(client_run) {
        let stale_proof = token
            .mac(&[
                STALE_PROOF_CONTEXT,
                client_nonce,
                &client_run.to_be_bytes(),
                &newest.to_be_bytes(),
            ])
            .finalize()
            .into_bytes();
        let mut stale = vec![AUTH_STALE];
        stale.extend_from_slice(&newest.to_be_bytes());
        stale.extend_from_slice(&stale_proof);
        let _ = s.write_all(&stale).await;
        let _ = s.shutdown().await;
        return Err(AuthError::StalePeer {
            peer: client_run,
            newest,
        }
        .into());
    }
    let server_proof = token
        .mac(&[SERVER_PROOF_CONTEXT, client_nonce, &runs])
        .finalize()
        .into_bytes();
    let mut ok = Vec::with_capacity(1 + MAC_LEN);
    ok.push(AUTH_OK);
    ok.extend_from_slice(&server_proof);
    s.write_all(&ok).await?;
    Ok(Session::derive(token, &nonce, client_nonce, &runs, true))
}

/// Client side of the handshake; the session's keys on success. A server
/// of a newer run is refused (this process is the stale one), and one of an
/// older run unless the token is [`Token::to_kept_partitioner`]'s.
pub async fn client_handshake<S>(s: &mut S, token: &Token) -> Result<Session, ChannelError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut hello = [0u8; MAGIC.len() + NONCE_LEN + RUN_LEN];
    s.read_exact(&mut hello[..MAGIC.len()])
        .await
        .map_err(eof_is_closed)?;
    if hello[..MAGIC.len()] != MAGIC {
        return Err(AuthError::BadMagic.into());
    }
    s.read_exact(&mut hello[MAGIC.len()..])
        .await
        .map_err(eof_is_closed)?;
    let (server_nonce, server_run) = hello[MAGIC.len()..].split_at(NONCE_LEN);
    let server_run = Run::from_be_bytes(server_run.try_into().expect("RUN_LEN bytes"));
    let ours = token.run;
    let runs = runs(server_run, ours);
    let client_nonce = random_nonce();
    let proof = token.mac(&[server_nonce, &runs]).finalize().into_bytes();
    let mut answer = Vec::with_capacity(MAC_LEN + NONCE_LEN + RUN_LEN);
    answer.extend_from_slice(&proof);
    answer.extend_from_slice(&client_nonce);
    answer.extend_from_slice(&ours.to_be_bytes());
    s.write_all(&answer).await?;
    let mut status = [0u8; 1];
    s.read_exact(&mut status).await.map_err(eof_is_closed)?;
    match status[0] {
        AUTH_OK => {}
        AUTH_REFUSED => return Err(AuthError::Refused.into()),
        AUTH_STALE => return Err(read_stale(s, token, &client_nonce).await),
        other => return Err(AuthError::BadStatus(other).into()),
    }
    let mut server_proof = [0u8; MAC_LEN];
    s.read_exact(&mut server_proof)
        .await
        .map_err(eof_is_closed)?;
    token
        .mac(&[SERVER_PROOF_CONTEXT, &client_nonce, &runs])
        .verify_slice(&server_proof)
        .map_err(|_| AuthError::WrongServerProof)?;
    // The server's run is authentic now (its proof covers it).
    if server_run > ours {
        return Err(AuthError::Stale {
            ours,
            newest: server_run,
        }
        .into());
    }
    if server_run < ours && !token.older_server_ok {
        return Err(AuthError::StaleServer {
            peer: server_run,
            ours,
        }
        .into());
    }
    Ok(Session::derive(
        token,
        server_nonce,
        &client_nonce,
        &runs,
        false,
    ))
}

/// The rest of an [`AUTH_STALE`] answer: the newest run the server knows
/// and its proof; [`AuthError::Stale`] when the proof holds.
async fn read_stale<S>(s: &mut S, token: &Token, client_nonce: &[u8]) -> ChannelError
where
    S: AsyncRead + Unpin,
{
    let mut rest = [0u8; RUN_LEN + MAC_LEN];
    if let Err(e) = s.read_exact(&mut rest).await {
        return eof_is_closed(e);
    }
    let (newest, proof) = rest.split_at(RUN_LEN);
    let ours = token.run;
    let proven = token
        .mac(&[
            STALE_PROOF_CONTEXT,
            client_nonce,
            &ours.to_be_bytes(),
            newest,
        ])
        .verify_slice(proof);
    match proven {
        Ok(()) => AuthError::Stale {
            ours,
            newest: Run::from_be_bytes(newest.try_into().expect("RUN_LEN bytes")),
        }
        .into(),
        Err(_) => AuthError::WrongServerProof.into(),
    }
}

fn eof_is_closed(e: std::io::Error) -> ChannelError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        ChannelError::Closed
    } else {
        ChannelError::Io(e)
    }
}

/// The receiving half of an authenticated connection: frames and chunk
/// sums are checked against their tags; file bytes are read raw from
/// [`Self::get_mut`] (they are authenticated through their chunk's sum).
pub struct FrameReader<R> {
    inner: R,
    dir: Direction,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// The connection itself, for a chunk's bytes.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// Reads one frame; `Ok(None)` when the peer closed the connection
    /// cleanly between frames.
    pub async fn read_frame<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ChannelError> {
        let mut header = [0u8; FRAME_HEADER_LEN];
        // Distinguish a clean close (0 bytes) from a frame cut in half.
        let n = self.inner.read(&mut header).await?;
        if n == 0 {
            return Ok(None);
        }
        if n < FRAME_HEADER_LEN {
            self.inner
                .read_exact(&mut header[n..])
                .await
                .map_err(eof_is_closed)?;
        }
        let len = wire::frame_len(header)?;
        let mut body = vec![0u8; len + TAG_LEN];
        self.inner
            .read_exact(&mut body)
            .await
            .map_err(eof_is_closed)?;
        let (body, tag) = body.split_at(len);
        // The tag first: JSON from an unauthenticated source is never parsed.
        self.dir.check(&[&header, body], tag)?;
        Ok(Some(wire::decode_body(body)?))
    }

    /// Reads `buf.len()` bytes and their tag (a chunk's sum) and checks them.
    pub async fn read_sealed(&mut self, buf: &mut [u8]) -> Result<(), ChannelError> {
        let mut tag = [0u8; TAG_LEN];
        self.inner.read_exact(buf).await.map_err(eof_is_closed)?;
        self.inner
            .read_exact(&mut tag)
            .await
            .map_err(eof_is_closed)?;
        self.dir.check(&[buf], &tag)
    }
}

/// The sending half of an authenticated connection (see [`FrameReader`]).
pub struct FrameWriter<W> {
    inner: W,
    dir: Direction,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// The connection itself, for a chunk's bytes.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// Writes one frame and its tag.
    pub async fn write_frame<T: Serialize>(&mut self, msg: &T) -> Result<(), ChannelError> {
        let mut frame = wire::encode_frame(msg)?;
        let tag = self.dir.tag(&[&frame]);
        frame.extend_from_slice(&tag);
        self.inner.write_all(&frame).await?;
        self.inner.flush().await?;
        Ok(())
    }

    /// Writes `bytes` (a chunk's sum) and their tag.
    pub async fn write_sealed(&mut self, bytes: &[u8]) -> Result<(), ChannelError> {
        let tag = self.dir.tag(&[bytes]);
        let unit = [bytes, &tag].concat();
        self.inner.write_all(&unit).await?;
        self.inner.flush().await?;
        Ok(())
    }

    /// Closes the sending direction.
    pub async fn shutdown(&mut self) -> std::io::Result<()> {
        self.inner.shutdown().await
    }
}

/// Writes one frame.
pub async fn write_frame<W, T>(w: &mut FrameWriter<W>, msg: &T) -> Result<(), ChannelError>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    w.write_frame(msg).await
}

/// Reads one frame; `Ok(None)` when the peer closed the connection cleanly
/// between frames.
pub async fn read_frame<R, T>(r: &mut FrameReader<R>) -> Result<Option<T>, ChannelError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    r.read_frame().await
}

/// How long a peer that vanished (a node gone, the network cut: no FIN ever
/// comes) may stay unanswered before its connection fails. The kernel
/// answers keepalive probes and acknowledges data, so a busy peer is not
/// mistaken for a gone one.
pub const DEAD_PEER_AFTER: Duration = Duration::from_secs(35);

/// Keepalive (15 s idle, then 4 probes 5 s apart) for an idle connection and
/// TCP_USER_TIMEOUT for one with unacknowledged data, so that a vanished
/// peer is noticed after [`DEAD_PEER_AFTER`] instead of the kernel's
/// defaults (2 h idle, ~15 min retransmitting).
fn set_keepalive(stream: &TcpStream) {
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(15))
        .with_interval(Duration::from_secs(5))
        .with_retries(4);
    let sock = socket2::SockRef::from(stream);
    if let Err(e) = sock.set_tcp_keepalive(&ka) {
        tracing::debug!(error = %e, "cannot enable TCP keepalive");
    }
    if let Err(e) = sock.set_tcp_user_timeout(Some(DEAD_PEER_AFTER)) {
        tracing::debug!(error = %e, "cannot set TCP_USER_TIMEOUT");
    }
}

/// The receiving half of a [`Channel`].
pub type ChannelReader = FrameReader<BufReader<OwnedReadHalf>>;
/// The sending half of a [`Channel`].
pub type ChannelWriter = FrameWriter<OwnedWriteHalf>;

/// An authenticated connection.
pub struct Channel {
    pub reader: ChannelReader,
    pub writer: ChannelWriter,
    pub peer: SocketAddr,
}

impl Channel {
    /// Connects to `addr` and authenticates, within `timeout` in total.
    pub async fn connect(
        addr: SocketAddr,
        token: &Token,
        timeout: Duration,
    ) -> Result<Channel, ChannelError> {
        let fut = async {
            let mut stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            set_keepalive(&stream);
            let session = client_handshake(&mut stream, token).await?;
            Ok::<_, ChannelError>((stream, session))
        };
        let (stream, session) = tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| ChannelError::Timeout(timeout))??;
        Ok(Channel::from_stream(stream, session, addr))
    }

    /// Authenticates an accepted connection (server side).
    pub async fn accept(
        mut stream: TcpStream,
        peer: SocketAddr,
        token: &Token,
    ) -> Result<Channel, ChannelError> {
        stream.set_nodelay(true)?;
        set_keepalive(&stream);
        let session = tokio::time::timeout(HANDSHAKE_TIMEOUT, server_handshake(&mut stream, token))
            .await
            .map_err(|_| ChannelError::Timeout(HANDSHAKE_TIMEOUT))??;
        Ok(Channel::from_stream(stream, session, peer))
    }

    fn from_stream(stream: TcpStream, session: Session, peer: SocketAddr) -> Channel {
        let (r, w) = stream.into_split();
        let (reader, writer) = session.split(BufReader::with_capacity(256 * 1024, r), w);
        Channel {
            reader,
            writer,
            peer,
        }
    }

    pub async fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), ChannelError> {
        self.writer.write_frame(msg).await
    }

    pub async fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ChannelError> {
        self.reader.read_frame().await
    }

    /// Receives a frame, treating a close as an error.
    pub async fn expect<T: DeserializeOwned>(&mut self) -> Result<T, ChannelError> {
        self.recv().await?.ok_or(ChannelError::Closed)
    }

    /// One request, one response.
    pub async fn call<Q: Serialize, A: DeserializeOwned>(
        &mut self,
        req: &Q,
    ) -> Result<A, ChannelError> {
        self.send(req).await?;
        self.expect().await
    }

    /// Receives a frame within `within`, else [`ChannelError::Silent`]
    /// naming the peer and `what` was awaited. After a timeout the
    /// connection may be mid-frame: drop it.
    pub async fn recv_within<T: DeserializeOwned>(
        &mut self,
        within: Duration,
        what: &str,
    ) -> Result<Option<T>, ChannelError> {
        match tokio::time::timeout(within, self.recv()).await {
            Ok(r) => r,
            Err(_) => Err(ChannelError::Silent {
                peer: self.peer,
                what: what.to_string(),
                after: within,
            }),
        }
    }

    /// One request, one response within `within` (see [`Self::recv_within`]).
    pub async fn call_within<Q: Serialize, A: DeserializeOwned>(
        &mut self,
        req: &Q,
        within: Duration,
        what: &str,
    ) -> Result<A, ChannelError> {
        self.send(req).await?;
        self.recv_within(within, what)
            .await?
            .ok_or(ChannelError::Closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgl_api::wire::Request;

    #[test]
    fn token_debug_is_redacted_and_whitespace_trimmed() {
        let t = Token::from_bytes(b"  s3cret\n").unwrap();
        assert_eq!(t.secret, b"s3cret");
        assert!(!format!("{t:?}").contains("s3cret"));
        assert!(Token::from_bytes(b" \n").is_none());
    }

    #[tokio::test]
    async fn a_vanished_peer_is_given_up_after_dead_peer_after() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        set_keepalive(&c);
        let s = socket2::SockRef::from(&c);
        assert!(s.keepalive().unwrap());
        let probes = s.tcp_keepalive_time().unwrap()
            + s.tcp_keepalive_interval().unwrap() * s.tcp_keepalive_retries().unwrap();
        assert_eq!(probes, DEAD_PEER_AFTER);
        assert_eq!(s.tcp_user_timeout().unwrap(), Some(DEAD_PEER_AFTER));
    }

    #[tokio::test]
    async fn handshake_over_a_duplex_pipe() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let t = Token::from_bytes(b"k").unwrap();
        let t2 = t.clone();
        let server = tokio::spawn(async move { server_handshake(&mut a, &t2).await });
        let client = client_handshake(&mut b, &t).await.unwrap();
        let server = server.await.unwrap().unwrap();
        // Each side's sending key is the other's receiving key.
        let (mut cs, mut sr) = (client.send, server.recv);
        assert_eq!(cs.tag(&[b"x"]), sr.tag(&[b"x"]));
        let (mut ss, mut cr) = (server.send, client.recv);
        assert_eq!(ss.tag(&[b"x"]), cr.tag(&[b"x"]));
    }

    /// Both sides of one session, as a handshake with these nonces makes them.
    fn sessions(token: &[u8]) -> (Session, Session) {
        let t = Token::from_bytes(token).unwrap();
        let (sn, cn) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        (
            Session::derive(&t, &sn, &cn, &runs(Run(0), Run(0)), false),
            Session::derive(&t, &sn, &cn, &runs(Run(0), Run(0)), true),
        )
    }

    /// What `session`'s writer puts on the wire for `msgs`, one buffer each.
    async fn frames(session: Session, msgs: &[Request]) -> Vec<Vec<u8>> {
        let (_, mut w) = session.split(&b""[..], Vec::new());
        let mut out = Vec::new();
        for m in msgs {
            let before = w.get_ref().len();
            w.write_frame(m).await.unwrap();
            out.push(w.get_ref()[before..].to_vec());
        }
        out
    }

    /// The frames `session`'s reader gets from `wire` until the first error.
    async fn read_all(session: Session, wire: &[u8]) -> (Vec<Request>, Option<ChannelError>) {
        let (mut r, _) = session.split(wire, Vec::<u8>::new());
        let mut got = Vec::new();
        loop {
            match r.read_frame::<Request>().await {
                Ok(Some(m)) => got.push(m),
                Ok(None) => return (got, None),
                Err(e) => return (got, Some(e)),
            }
        }
    }

    fn fetch(offset: u64) -> Request {
        Request::Fetch {
            path: "part0/graph.dgl".into(),
            offset,
        }
    }

    #[tokio::test]
    async fn frames_pass_in_order_and_fail_altered_replayed_reordered_or_reflected() {
        let msgs = [fetch(0), fetch(1), fetch(2)];
        let (client, _) = sessions(b"k");
        let f = frames(client, &msgs).await;
        let unit = |e: Option<ChannelError>| match e {
            Some(ChannelError::Unauthentic { unit }) => unit,
            other => panic!("expected a failed tag, got {other:?}"),
        };

        let (got, err) = read_all(sessions(b"k").1, &f.concat()).await;
        assert_eq!((got.as_slice(), err.is_none()), (&msgs[..], true));

        // A flipped byte of frame 1's JSON.
        let mut altered = f.concat();
        altered[f[0].len() + 10] ^= 1;
        let (got, err) = read_all(sessions(b"k").1, &altered).await;
        assert_eq!((got, unit(err)), (vec![fetch(0)], 1));

        // Frame 0 sent again in place of frame 1.
        let replayed = [f[0].clone(), f[0].clone(), f[1].clone()].concat();
        let (got, err) = read_all(sessions(b"k").1, &replayed).await;
        assert_eq!((got, unit(err)), (vec![fetch(0)], 1));

        // Frames 1 and 0 swapped; frame 2 dropped after frame 0.
        let swapped = [f[1].clone(), f[0].clone()].concat();
        assert_eq!(unit(read_all(sessions(b"k").1, &swapped).await.1), 0);
        let dropped = [f[0].clone(), f[2].clone()].concat();
        assert_eq!(unit(read_all(sessions(b"k").1, &dropped).await.1), 1);

        // The client's own frames sent back to it, another session's frames,
        // another token's: all refused at frame 0.
        assert_eq!(unit(read_all(sessions(b"k").0, &f.concat()).await.1), 0);
        let t = Token::from_bytes(b"k").unwrap();
        let other = Session::derive(
            &t,
            &[1u8; NONCE_LEN],
            &[3u8; NONCE_LEN],
            &runs(Run(0), Run(0)),
            true,
        );
        assert_eq!(unit(read_all(other, &f.concat()).await.1), 0);
        // The same nonces and token, another run: other keys.
        let other_run = Session::derive(
            &t,
            &[1u8; NONCE_LEN],
            &[2u8; NONCE_LEN],
            &runs(Run(0), Run(1)),
            true,
        );
        assert_eq!(unit(read_all(other_run, &f.concat()).await.1), 0);
        assert_eq!(unit(read_all(sessions(b"k2").1, &f.concat()).await.1), 0);

        let e = ChannelError::Unauthentic { unit: 7 };
        assert!(e.to_string().starts_with("frame 7 failed authentication"));
        assert!(e.is_transient(), "a new connection may succeed");
    }

    #[tokio::test]
    async fn sealed_sums_are_checked_and_counted_with_the_frames() {
        let (client, server) = sessions(b"k");
        let (_, mut w) = server.split(&b""[..], Vec::new());
        w.write_frame(&fetch(0)).await.unwrap();
        w.write_sealed(&[9u8; 32]).await.unwrap();
        let wire = w.get_ref().clone();
        assert_eq!(wire.len(), f_len(&fetch(0)) + 32 + TAG_LEN);

        let (mut r, _) = client.split(&wire[..], Vec::<u8>::new());
        assert_eq!(r.read_frame::<Request>().await.unwrap(), Some(fetch(0)));
        let mut sum = [0u8; 32];
        r.read_sealed(&mut sum).await.unwrap();
        assert_eq!(sum, [9u8; 32]);

        let mut forged = wire.clone();
        let at = forged.len() - TAG_LEN - 1;
        forged[at] ^= 1;
        let (client, _) = sessions(b"k");
        let (mut r, _) = client.split(&forged[..], Vec::<u8>::new());
        r.read_frame::<Request>().await.unwrap();
        let e = r.read_sealed(&mut sum).await.unwrap_err();
        assert!(matches!(e, ChannelError::Unauthentic { unit: 1 }), "{e:?}");
    }

    fn f_len(m: &Request) -> usize {
        wire::encode_frame(m).unwrap().len() + TAG_LEN
    }
}
