//! The control channel between the `dglrun` processes of a job (launcher,
//! workers, partitioner): constants of the handshake, the framing, and every
//! message. `dglrun` implements the I/O; this module is the contract.
//!
//! ## Connection
//! TCP to the agent port ([`crate::names::AGENT_PORT`] by default).
//!
//! 1. server → client: [`MAGIC`] (8 bytes: `DGLRUN`, 0, protocol version)
//!    then a random nonce of [`NONCE_LEN`] bytes and the server's [`Run`]
//!    ([`RUN_LEN`] bytes, big-endian).
//! 2. client → server: `HMAC-SHA256(token, server_nonce || server_run ||
//!    client_run)` ([`MAC_LEN`] bytes), the client's own random nonce
//!    ([`NONCE_LEN`] bytes) and its run ([`RUN_LEN`] bytes).
//! 3. server → client: one status byte. [`AUTH_REFUSED`]: the answer was
//!    wrong and the server closes the connection. [`AUTH_STALE`]: the
//!    answer was right but the client's run is older than the newest run
//!    the server knows (its own, or the newest a client proved): followed
//!    by that run and `HMAC-SHA256(token, STALE_PROOF_CONTEXT ||
//!    client_nonce || client_run || newest_run)`, then the server closes
//!    the connection (a process of an old run never acts on a newer one).
//!    [`AUTH_OK`]: followed by `HMAC-SHA256(token, SERVER_PROOF_CONTEXT ||
//!    client_nonce || server_run || client_run)`, which the client checks
//!    so that it never takes shards or orders from a peer that does not
//!    hold the job's token. The context strings keep the server's proofs
//!    from ever being a valid client answer (no reflection). A client
//!    refuses a server of a newer run (the client is the stale one) and,
//!    except towards the partitioner (kept across restarts, so it may be of
//!    an older run), one of an older run.
//! 4. Both sides derive one key per direction with HKDF-SHA256: input key
//!    material the token, salt `server_nonce || client_nonce || server_run
//!    || client_run`, info
//!    [`CLIENT_TO_SERVER_LABEL`] or [`SERVER_TO_CLIENT_LABEL`] (32 bytes
//!    each). Every unit sent after the handshake (a frame, a chunk's sum)
//!    is followed by a tag of [`TAG_LEN`] bytes: the first bytes of
//!    `HMAC-SHA256(direction's key, counter || unit)`, where `counter` is
//!    the unit's number in its direction (a big-endian u64 from 0, never
//!    sent: both ends count). A unit altered, dropped, replayed (within
//!    or from another connection: the nonces differ) or reordered fails
//!    its tag, and the receiver ends the connection.
//! 5. Then frames both ways: a 4-byte big-endian length followed by that many
//!    bytes of JSON ([`Request`] from the client, [`Response`] from the
//!    server), at most [`MAX_FRAME_LEN`] bytes, then the tag over length and
//!    JSON. A [`Response::File`] frame is
//!    followed by the file's bytes from `offset` on, chunk by chunk: chunk
//!    `k` covers bytes `[k * chunk_size, (k + 1) * chunk_size)` of the file
//!    (the last one is shorter); after the bytes of each chunk (the first
//!    one may start in its middle, at `offset`) come the [`SUM_LEN`] bytes
//!    of the sha256 of the whole chunk, as the sender computed it, and
//!    their tag. The chunk's bytes carry no tag of their own: they are
//!    authenticated through their sum (no second pass over them). The
//!    receiver checks every chunk before it takes the next.
//!
//! The token is the job's Secret; it never travels on the wire.
//!
//! ## Conversations
//! - Probe / wait: `Ping` → `Pong`.
//! - Worker → partitioner: `GetManifest` → `Manifest`; `Fetch` → `File` + bytes
//!   (repeated on one connection; on an error the connection is dropped and a
//!   new one resumes at the offset already written); `ChunkSums` → `ChunkSums`
//!   (to check a file or a partial file already on disk).
//! - Launcher → worker: `PrepareShard` → `ShardProgress`* then `ShardReady` |
//!   `Error` (progress every [`SHARD_PROGRESS_INTERVAL_SECS`], so that a
//!   long transfer is told apart from a silent worker).
//! - Launcher → worker: `Start` → a stream of `Output` and `Exited`, ending with
//!   one `Finished`. While the stream runs the launcher may send `Stop` on the
//!   same connection; the worker stops its processes and still ends with
//!   `Finished`. A launcher that disconnects counts as `Stop`.
//! - Launcher → partitioner (after a successful training) or worker (when the
//!   job is abandoned before `Start`): `Shutdown` → `Ack`, then the process exits.
//! - `dglrun rsh` (mpirun's remote agent on the launcher) → worker, partition
//!   mode DistParMETIS only: `Exec` → a stream of `Output`, ending with one
//!   `Exited` (or `Error` when the worker refuses). The command runs as long
//!   as the connection stays open: a client that disconnects stops it.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::ReplicaType;

/// First bytes the server sends: `DGLRUN`, a zero, and the protocol version
/// (2: every frame and chunk sum carries a tag; 3: both sides' runs are
/// bound into the handshake).
pub const MAGIC: [u8; 8] = *b"DGLRUN\x00\x03";
/// Length of each side's random nonce.
pub const NONCE_LEN: usize = 32;
/// Length of an HMAC-SHA256 tag.
pub const MAC_LEN: usize = 32;
/// Status byte: the client's answer was right.
pub const AUTH_OK: u8 = 0x00;
/// Status byte: the client's answer was wrong; the connection is closed.
pub const AUTH_REFUSED: u8 = 0x01;
/// Status byte: the client's answer was right but its run is stale; the
/// newest run and a proof follow, then the connection is closed.
pub const AUTH_STALE: u8 = 0x02;
/// Prefix of the message the server signs to prove it holds the token.
pub const SERVER_PROOF_CONTEXT: &[u8] = b"dglrun server proof v3";
/// Prefix of the message the server signs when it refuses a stale client.
pub const STALE_PROOF_CONTEXT: &[u8] = b"dglrun stale proof v3";
/// HKDF info of the key that authenticates what the client sends.
pub const CLIENT_TO_SERVER_LABEL: &[u8] = b"dglrun v3 client to server";
/// HKDF info of the key that authenticates what the server sends.
pub const SERVER_TO_CLIENT_LABEL: &[u8] = b"dglrun v3 server to client";
/// Length of a run on the wire (a big-endian u32).
pub const RUN_LEN: usize = 4;

/// Which run of the job a process belongs to: 0, then +1 per restart (the
/// pods' [`crate::names::LABEL_RUN`], their env [`crate::names::ENV_RUN`]).
/// Both ends of a connection send theirs in the handshake, so that a
/// process of an old run (a pod left on a lost node) cannot act on a newer
/// run's pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Run(pub u32);

impl Run {
    pub fn to_be_bytes(self) -> [u8; RUN_LEN] {
        self.0.to_be_bytes()
    }

    pub fn from_be_bytes(b: [u8; RUN_LEN]) -> Run {
        Run(u32::from_be_bytes(b))
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A run that is not a whole number from 0 to [`u32::MAX`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a run number (expected a whole number from 0 to {max})", max = u32::MAX)]
pub struct RunError {
    pub value: String,
}

impl std::str::FromStr for Run {
    type Err = RunError;

    fn from_str(s: &str) -> Result<Run, RunError> {
        s.trim().parse().map(Run).map_err(|_| RunError {
            value: s.to_string(),
        })
    }
}
/// Length of the tag after each frame and chunk sum (HMAC-SHA256, truncated).
pub const TAG_LEN: usize = 16;
/// Length of a frame's length prefix.
pub const FRAME_HEADER_LEN: usize = 4;
/// Largest JSON frame accepted (file bytes are not framed and not limited).
pub const MAX_FRAME_LEN: usize = 16 * 1024 * 1024;
/// The chunk a partitioner hashes and a worker verifies at a time.
pub const CHUNK_SIZE: u64 = 4 << 20;
/// Length of a chunk's sha256 after its bytes.
pub const SUM_LEN: usize = 32;

/// A frame that cannot be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("frame of {len} bytes exceeds the limit of {MAX_FRAME_LEN} bytes")]
    TooLarge { len: usize },
    #[error("malformed message: {0}")]
    Json(#[from] serde_json::Error),
}

/// Encodes one message as a frame: length prefix + JSON.
pub fn encode_frame<T: Serialize>(msg: &T) -> Result<Vec<u8>, WireError> {
    let body = serde_json::to_vec(msg)?;
    if body.len() > MAX_FRAME_LEN {
        return Err(WireError::TooLarge { len: body.len() });
    }
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// The body length announced by a frame header, checked against the limit.
pub fn frame_len(header: [u8; FRAME_HEADER_LEN]) -> Result<usize, WireError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME_LEN {
        return Err(WireError::TooLarge { len });
    }
    Ok(len)
}

/// Decodes a frame body.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, WireError> {
    Ok(serde_json::from_slice(body)?)
}

/// Messages from the connecting side.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Is the agent up (and, for a partitioner, are the partitions ready)?
    Ping,
    /// Partitioner: the list of files it serves.
    GetManifest,
    /// Partitioner: one file of the manifest from byte `offset` on.
    Fetch { path: String, offset: u64 },
    /// Partitioner: the sha256 of every chunk of one file of the manifest.
    ChunkSums { path: String },
    /// Worker: get this machine's shard into its workspace.
    PrepareShard(ShardRequest),
    /// Worker: start the DGL servers and the trainers.
    Start(TrainSpec),
    /// Worker: stop the training processes (SIGTERM, SIGKILL after a grace period).
    Stop { reason: String },
    /// Partitioner or idle worker: exit.
    Shutdown { reason: String },
    /// Worker in partition mode DistParMETIS: run MPI's daemon for `mpirun`
    /// (what ssh would run for it); only [`EXEC_PROGRAMS`] are accepted.
    Exec(ExecSpec),
    /// Worker in partition mode DistParMETIS with `spec.partitionCache`,
    /// once its rank wrote its part and its shard was checked: upload the
    /// part to the cache's entry. Answered by [`Response::Manifest`] of the
    /// files uploaded, each with its size and SHA-256 (with
    /// [`Response::ShardProgress`] meanwhile, as for `PrepareShard`), or
    /// `Error`. The entry is not a hit until the launcher commits it.
    StorePart(StoreRequest),
}

/// Messages from the accepting side.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    Pong(AgentInfo),
    Manifest(Manifest),
    /// Followed by the bytes from `offset` on, each chunk with its sha256.
    File(FileHeader),
    ChunkSums(ChunkSums),
    ShardReady(ShardReport),
    /// The worker still prepares its shard (sent every
    /// [`SHARD_PROGRESS_INTERVAL_SECS`] until `ShardReady` or `Error`).
    ShardProgress(ShardProgress),
    /// One line a training process printed.
    Output(OutputLine),
    /// A training process ended.
    Exited(ProcessExit),
    /// The worker's training ended; the last message of a `Start` stream.
    Finished(TrainResult),
    Ack,
    Error {
        message: String,
    },
}

/// Who answered a `Ping`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct AgentInfo {
    pub role: ReplicaType,
    /// A worker's index (partition id), when it knows it.
    pub index: Option<u32>,
    /// dglrun's version.
    pub version: String,
    /// The pod's memory limit in bytes (its cgroup's), when it has one: a
    /// rank killed for memory is reported with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<u64>,
}

/// The files a partitioner serves, paths relative to its dataset folder.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub graph_name: String,
    pub num_parts: u32,
    pub files: Vec<FileEntry>,
}

/// One file: `/`-separated path relative to the dataset folder, size, and
/// the sha256 (hex) of the whole file when the manifest was built by
/// hashing everything first; empty in a manifest served at once (the
/// partitioner's), whose files are verified chunk by chunk.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub path: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
}

/// The partition JSON's file name: `<graph>.json`.
pub fn partition_json_name(graph_name: &str) -> String {
    format!("{graph_name}.json")
}

/// The folder of partition `i`: `part<i>`.
pub fn part_dir_name(part: u32) -> String {
    format!("part{part}")
}

/// Whether `path` is a plain relative path (no `..`, no root, no empty or `.`
/// components), so that a received name can never leave the dataset folder.
pub fn is_safe_relative_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\\'))
}

impl Manifest {
    /// What worker `part` needs: the partition JSON and everything below `part<part>/`.
    pub fn shard_files(&self, part: u32) -> Vec<FileEntry> {
        let json = partition_json_name(&self.graph_name);
        let prefix = format!("{}/", part_dir_name(part));
        self.files
            .iter()
            .filter(|f| f.path == json || f.path.starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// Looks a file up by path.
    pub fn get(&self, path: &str) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.path == path)
    }
}

/// Header of a file transfer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FileHeader {
    pub path: String,
    /// Size of the whole file.
    pub size: u64,
    /// First byte sent.
    pub offset: u64,
    /// The manifest's sha256 of the whole file (hex), empty if none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
    /// Bytes per chunk (each followed by its sha256 on the wire).
    pub chunk_size: u64,
}

/// The sha256 (hex) of every chunk of a file, in order.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ChunkSums {
    pub path: String,
    pub chunk_size: u64,
    pub sha256: Vec<String>,
}

/// Where a worker gets its shard from.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ShardSource {
    /// Pull from the partitioner's agent at `addr` (`ip:port`).
    Partitioner { addr: String },
    /// Partition mode Skip: the shard is already in the worker's workspace.
    Local,
    /// `spec.partitionCache` had the job's partitions: the worker downloads
    /// its own part (and the partition JSON) of entry `key` under `url`
    /// (`s3://bucket/prefix`), each file checked by size and SHA-256.
    Cache { url: String, key: String },
}

/// `StorePart`'s parameters.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StoreRequest {
    pub graph_name: String,
    /// The worker's partition id: it uploads `part<part_id>/`.
    pub part_id: u32,
    pub num_parts: u32,
    /// The cache, `s3://bucket/prefix`.
    pub url: String,
    /// The entry's key (64 hex digits).
    pub key: String,
    /// Also upload the files outside every part's folder (the partition
    /// JSON, the assignment): asked of one worker only.
    pub shared: bool,
}

/// `PrepareShard`'s parameters.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ShardRequest {
    pub graph_name: String,
    /// The worker's partition id (= its index = its line in ip_config).
    pub part_id: u32,
    /// Number of partitions (= number of workers).
    pub num_parts: u32,
    pub source: ShardSource,
    /// GraphBolt partitions: the shard holds `fused_csc_sampling_graph.pt`
    /// (`part_graph_graphbolt`) instead of `graph.dgl`; a Skip-mode shard
    /// still in DGL's format is converted in place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_graphbolt: bool,
}

/// A worker's shard is in place.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ShardReport {
    pub part_id: u32,
    pub files: u32,
    pub bytes: u64,
    /// Bytes that crossed the network (0 in Skip mode or when files were reused).
    pub transferred_bytes: u64,
    /// Files already present with the right size and sha256.
    pub reused_files: u32,
    /// Transfer attempts that failed and were retried.
    pub retries: u32,
}

/// How often a worker reports progress while it prepares its shard.
pub const SHARD_PROGRESS_INTERVAL_SECS: u64 = 2;

/// A worker's shard preparation (or `StorePart`'s upload) goes on.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ShardProgress {
    pub part_id: u32,
    /// Bytes received from the partitioner so far (0 while uploading).
    pub received_bytes: u64,
}

/// `Start`'s parameters: what a worker needs to run its share of the training.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TrainSpec {
    pub graph_name: String,
    /// The training script, as the worker's image sees it.
    pub entry_point: String,
    pub num_epochs: u32,
    pub batch_size: u32,
    /// Trainer processes per worker.
    pub num_trainers: u32,
    /// Sampler processes per trainer.
    pub num_samplers: u32,
    /// DGL server processes per worker.
    pub num_servers: u32,
    /// This worker's machine id (line in ip_config, partition id).
    pub machine_rank: u32,
    /// DGL's ip_config content: one `<ip> <port>` line per worker, partition order.
    pub ip_config: String,
    /// torch.distributed's rendezvous port on worker 0.
    pub master_port: u16,
    /// Arguments appended to the training script's command line.
    pub extra_args: Vec<String>,
    /// The launch.py convention: the user's whole training command, split
    /// into words, with `{name}` placeholders the worker fills; then
    /// `entry_point` and `extra_args` are unused and `num_epochs` /
    /// `batch_size` are 0 unless given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Train on GraphBolt partitions: the seed convention appends
    /// `--use_graphbolt` to the script's arguments (servers and trainers);
    /// the launch.py convention fills `{use_graphbolt}` with it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_graphbolt: bool,
}

/// The programs a worker runs for [`Request::Exec`], by file name: OpenMPI's
/// daemon (`orted` up to OpenMPI 4, `prted` from 5 on). A worker is never a
/// general remote shell.
pub const EXEC_PROGRAMS: &[&str] = &["orted", "prted"];

/// `Exec`'s parameters: an argument vector (never a shell string).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    /// A name found on the worker's PATH, or an absolute path.
    pub program: String,
    pub args: Vec<String>,
    /// Added to the worker's environment.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
}

impl ExecSpec {
    /// The program's file name, when it is one of [`EXEC_PROGRAMS`].
    pub fn allowed_program(&self) -> Option<&'static str> {
        let name = self.program.rsplit('/').next()?;
        EXEC_PROGRAMS.iter().copied().find(|p| *p == name)
    }
}

/// Which pipe a line came from.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One line of a process's output.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct OutputLine {
    /// `server-<i>` or `trainer`.
    pub process: String,
    pub stream: Stream,
    pub line: String,
}

/// How a process ended: an exit code, or the signal that killed it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitInfo {
    pub const SUCCESS: ExitInfo = ExitInfo {
        code: Some(0),
        signal: None,
    };

    pub fn code(code: i32) -> Self {
        ExitInfo {
            code: Some(code),
            signal: None,
        }
    }

    pub fn signal(signal: i32) -> Self {
        ExitInfo {
            code: None,
            signal: Some(signal),
        }
    }

    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// The status a shell would report: the code, or 128 + signal.
    pub fn as_shell_status(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 1,
        }
    }
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit code {c}"),
            (None, Some(s)) => write!(f, "signal {s}"),
            (None, None) => f.write_str("unknown exit status"),
        }
    }
}

/// A training process ended.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ProcessExit {
    pub process: String,
    pub exit: ExitInfo,
}

/// The end of a worker's training.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TrainResult {
    /// The worker's status: success only if every process exited 0.
    pub exit: ExitInfo,
    /// The first process that failed, if any.
    pub failed_process: Option<String>,
    /// Human-readable summary (names the process and its status on failure).
    pub message: String,
    /// True when the processes were stopped on request (`Stop`, SIGTERM,
    /// launcher gone) rather than failing on their own.
    pub stopped: bool,
    /// When the worker saw the failure (Unix time, ms): torchrun's first
    /// report of a failed rank, else the failing process's end. When several
    /// workers fail, one failure usually causes the others; the launcher
    /// lists the earliest first (after `lost_peer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at_ms: Option<u64>,
    /// The failed process reported losing a peer (a connection closed or
    /// reset by another machine): likely a consequence of another worker's
    /// failure, so the launcher lists it after failures without this mark.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost_peer: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_parse_from_env_values_and_round_trip_on_the_wire() {
        assert_eq!("0".parse::<Run>(), Ok(Run(0)));
        assert_eq!(" 7\n".parse::<Run>(), Ok(Run(7)));
        assert_eq!(Run::from_be_bytes(Run(258).to_be_bytes()), Run(258));
        assert!(Run(1) < Run(2));
        for bad in ["-1", "x", "", "4294967296"] {
            let e = bad.parse::<Run>().unwrap_err();
            assert!(e.to_string().contains("is not a run number"), "{e}");
        }
    }

    #[test]
    fn frames_round_trip_and_enforce_the_limit() {
        let msg = Request::Fetch {
            path: "part0/graph.dgl".into(),
            offset: 42,
        };
        let frame = encode_frame(&msg).unwrap();
        let len = frame_len(frame[..4].try_into().unwrap()).unwrap();
        assert_eq!(len, frame.len() - 4);
        let back: Request = decode_body(&frame[4..]).unwrap();
        assert_eq!(back, msg);
        let body = std::str::from_utf8(&frame[4..]).unwrap();
        assert_eq!(
            body,
            r#"{"type":"fetch","path":"part0/graph.dgl","offset":42}"#
        );
        assert!(matches!(
            frame_len((MAX_FRAME_LEN as u32 + 1).to_be_bytes()),
            Err(WireError::TooLarge { .. })
        ));
        assert!(decode_body::<Request>(b"{\"type\":\"nope\"}").is_err());
    }

    #[test]
    fn shard_files_are_the_json_and_one_part() {
        let entry = |p: &str| FileEntry {
            path: p.into(),
            size: 1,
            sha256: "00".into(),
        };
        let m = Manifest {
            graph_name: "g".into(),
            num_parts: 12,
            files: vec![
                entry("g.json"),
                entry("part1/graph.dgl"),
                entry("part11/graph.dgl"),
                entry("part1/node_feat.dgl"),
            ],
        };
        let paths: Vec<String> = m.shard_files(1).into_iter().map(|f| f.path).collect();
        assert_eq!(paths, ["g.json", "part1/graph.dgl", "part1/node_feat.dgl"]);
    }

    #[test]
    fn unsafe_paths_are_refused() {
        for ok in ["g.json", "part0/graph.dgl", "part0/sub/x"] {
            assert!(is_safe_relative_path(ok), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "part0/../../x",
            "a//b",
            "./a",
            "a\\b",
        ] {
            assert!(!is_safe_relative_path(bad), "{bad}");
        }
    }

    #[test]
    fn exec_accepts_only_the_mpi_daemons() {
        let spec = |p: &str| ExecSpec {
            program: p.into(),
            args: vec!["-mca".into(), "ess".into(), "env".into()],
            env: Default::default(),
        };
        assert_eq!(spec("orted").allowed_program(), Some("orted"));
        assert_eq!(spec("/usr/bin/orted").allowed_program(), Some("orted"));
        assert_eq!(
            spec("/opt/ompi5/bin/prted").allowed_program(),
            Some("prted")
        );
        for bad in ["sh", "/bin/sh", "orted.sh", "/tmp/orted/sh", "", "orted/"] {
            assert_eq!(spec(bad).allowed_program(), None, "{bad}");
        }
        let frame = encode_frame(&Request::Exec(spec("orted"))).unwrap();
        assert_eq!(
            std::str::from_utf8(&frame[4..]).unwrap(),
            r#"{"type":"exec","program":"orted","args":["-mca","ess","env"]}"#
        );
    }

    #[test]
    fn exit_info_reads_like_a_shell() {
        assert!(ExitInfo::SUCCESS.success());
        assert_eq!(ExitInfo::code(3).to_string(), "exit code 3");
        assert_eq!(ExitInfo::signal(9).as_shell_status(), 137);
        assert_eq!(ExitInfo::signal(15).to_string(), "signal 15");
    }
}
