//! A real S3-compatible server for tests: SeaweedFS's `weed server -s3`
//! (built from the Go module proxy and cached, [`GoTool::SeaweedFs`]) on
//! 127.0.0.1 with free ports, its data in a temporary folder, and three
//! identities (no anonymous access): an admin (everything), a reader (read
//! and list the test buckets) and an outsider (no access to them). Objects
//! are put with the `object_store` crate, as the code under test reads them.
//! The process is killed when the [`S3Server`] is dropped.
//!
//! [`S3Options`] add the server's STS, HTTPS with a CA made for the test,
//! and a role that tokens of an OIDC issuer ([`oidc::OidcIssuer`]) may
//! assume with AssumeRoleWithWebIdentity (see `s3/options.rs`).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload, RetryConfig};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::tools::{installed_tool, GoTool};
use crate::util;

pub mod oidc;
mod options;
pub mod sts;

pub use options::{S3Options, WebIdentityRole};

/// The environment variable that names the `weed` binary (the test
/// command's setup sets it); otherwise the cached build is used.
pub const WEED_BIN_ENV: &str = "DGL_OPERATOR_WEED_BIN";

/// How long the server may take to answer S3 requests.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// An access key pair of one identity.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for Credentials {
    // The secret never reaches a test's output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <secret>)", self.access_key)
    }
}

/// The running server (see the module's documentation).
pub struct S3Server {
    child: Child,
    dir: PathBuf,
    endpoint: String,
    /// Full access.
    pub admin: Credentials,
    /// Read and list the buckets given to [`S3Server::start`].
    pub reader: Credentials,
    /// Read and list only a bucket that does not exist: denied everywhere.
    pub outsider: Credentials,
    /// From spawn to the first successful S3 request.
    pub start_time: Duration,
    rt: tokio::runtime::Runtime,
    weed: PathBuf,
    args: Vec<String>,
    s3_addr: SocketAddr,
    /// The STS signing key, when started with STS.
    sts_key: Option<Vec<u8>>,
    /// `https://<ip>:<port>` and the CA file, when started with HTTPS.
    https: Option<(String, PathBuf)>,
}

/// `weed server args`, its output appended to `dir/weed.log`.
fn spawn_weed(weed: &Path, args: &[String], dir: &Path) -> Result<Child> {
    let path = dir.join("weed.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(Error::io("opening", &path))?;
    let log2 = log.try_clone().map_err(Error::io("cloning", &path))?;
    Command::new(weed)
        .arg("server")
        .args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|source| Error::Spawn {
            program: weed.display().to_string(),
            source,
        })
}

/// The `weed` binary: `$DGL_OPERATOR_WEED_BIN`, else the cached build; an
/// error naming the command that builds it when neither exists.
pub fn weed_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(WEED_BIN_ENV).map(PathBuf::from) {
        if p.is_file() {
            return Ok(p);
        }
        return Err(Error::Invalid(format!(
            "{WEED_BIN_ENV}={} is not a file",
            p.display()
        )));
    }
    installed_tool(GoTool::SeaweedFs).ok_or_else(|| {
        Error::Invalid(format!(
            "SeaweedFS's weed {} is not built: `cargo test -p localkube --test s3_server` (or \
             `cargo xtask cluster build`, or the setup of `cargo xtask test`) builds it from the \
             Go module proxy and caches it",
            crate::tools::SEAWEEDFS_VERSION
        ))
    })
}

impl S3Server {
    /// Starts the server; `buckets` are the test buckets the reader may
    /// read (they are created by the first [`S3Server::put`] into them).
    pub fn start(buckets: &[&str]) -> Result<S3Server> {
        S3Server::start_on("127.0.0.1", buckets)
    }

    /// [`S3Server::start`] with the server's STS on (same identities):
    /// [`S3Server::assume_role`] gives temporary credentials.
    pub fn start_with_sts(buckets: &[&str]) -> Result<S3Server> {
        let opts = S3Options {
            sts: true,
            ..Default::default()
        };
        S3Server::start_with(buckets, &opts)
    }

    /// [`S3Server::start`] on 127.0.0.1 with `opts`.
    pub fn start_with(buckets: &[&str], opts: &S3Options) -> Result<S3Server> {
        S3Server::start_retrying("127.0.0.1", buckets, opts)
    }

    /// [`S3Server::start`] on address `ip` of this host (e.g. the node
    /// cluster's [`crate::NODE_IP`], which every node's pods reach).
    pub fn start_on(ip: &str, buckets: &[&str]) -> Result<S3Server> {
        S3Server::start_retrying(ip, buckets, &S3Options::default())
    }

    fn start_retrying(ip: &str, buckets: &[&str], opts: &S3Options) -> Result<S3Server> {
        // A free port can be taken between its pick and weed's bind: a
        // start that fails so is tried again on other ports.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match S3Server::start_once(ip, buckets, opts) {
                Err(Error::Invalid(m)) if attempt < 3 && m.contains("address already in use") => {
                    continue
                }
                other => return other,
            }
        }
    }

    fn start_once(ip: &str, buckets: &[&str], opts: &S3Options) -> Result<S3Server> {
        let weed = weed_binary()?;
        let addr: Ipv4Addr = ip
            .parse()
            .map_err(|e| Error::Invalid(format!("S3 server address {ip:?}: {e}")))?;
        let dir = std::env::temp_dir().join(format!("localkube-s3-{}", unique()));
        util::create_dir_all(&dir.join("data"))?;
        let ids = [identity("admin"), identity("reader"), identity("outsider")];
        let config = identities_json(&ids, buckets);
        util::write_atomic(&dir.join("s3.json"), config.as_bytes(), 0o600)?;
        let sts_key = opts
            .with_sts()
            .then(|| Sha256::digest(format!("sts-{}", unique())).to_vec());
        let ports = free_ports(9)?;
        let mut args = server_args(ip, &dir, &ports);
        if let Some(key) = &sts_key {
            let path = dir.join("iam.json");
            let config = options::iam_config(key, opts.web_identity.as_ref(), buckets);
            util::write_atomic(&path, config.as_bytes(), 0o600)?;
            args.push(format!("-s3.iam.config={}", path.display()));
        }
        let https = match opts.https {
            true => Some(options::https_args(ip, ports[8], &dir, &mut args)?),
            false => None,
        };
        let started = Instant::now();
        let child = spawn_weed(&weed, &args, &dir)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::io("starting a runtime", &dir))?;
        let [admin, reader, outsider] = ids;
        let mut server = S3Server {
            child,
            endpoint: format!("http://{ip}:{}", ports[6]),
            admin,
            reader,
            outsider,
            start_time: Duration::ZERO,
            dir,
            rt,
            weed,
            args,
            s3_addr: SocketAddr::from((addr, ports[6])),
            sts_key,
            https,
        };
        server.wait_ready(server.s3_addr, started)?;
        server.start_time = started.elapsed();
        Ok(server)
    }

    /// Stops the server (SIGKILL: every connection dropped at once).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the killed server again, same ports and data; returns once
    /// it answers, with how long that took.
    pub fn revive(&mut self) -> Result<Duration> {
        let started = Instant::now();
        self.child = spawn_weed(&self.weed, &self.args, &self.dir)?;
        self.wait_ready(self.s3_addr, started)?;
        Ok(started.elapsed())
    }

    /// `http://<ip>:<port>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// `https://<ip>:<port>` (S3 and STS), when started with HTTPS.
    pub fn https_endpoint(&self) -> Option<&str> {
        self.https.as_ref().map(|(e, _)| e.as_str())
    }

    /// The PEM file of the CA that signed the HTTPS certificate.
    pub fn ca_file(&self) -> Option<&Path> {
        self.https.as_ref().map(|(_, f)| f.as_path())
    }

    /// The server's resident memory now (VmRSS), in bytes.
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        kb.checked_mul(1024)
    }

    /// The environment a client of `bucket` needs, as `AmazonS3Builder::from_env`
    /// reads it: the endpoint (plain HTTP), a region, `who`'s keys.
    pub fn env(&self, who: &Credentials) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT", self.endpoint.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", who.access_key.as_str()),
            ("AWS_SECRET_ACCESS_KEY", who.secret_key.as_str()),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec()
    }

    /// An `object_store` client of `bucket` as `who`. It retries for up
    /// to 30 s: a loaded SeaweedFS answers a PUT 500 InternalError while it
    /// grows a volume (seen on 2026-11-29 with 2 retries in 0.3 s), and a
    /// fixture that gives up then fails the test for nothing it checks.
    pub fn store(&self, bucket: &str, who: &Credentials) -> Result<Arc<AmazonS3>> {
        // reqwest's rustls takes the process default: ring, as kube's.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let retry = RetryConfig {
            max_retries: 8,
            retry_timeout: Duration::from_secs(30),
            ..Default::default()
        };
        self.store_retrying(bucket, who, retry)
    }

    fn store_retrying(
        &self,
        bucket: &str,
        who: &Credentials,
        retry: RetryConfig,
    ) -> Result<Arc<AmazonS3>> {
        AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(bucket)
            .with_access_key_id(&who.access_key)
            .with_secret_access_key(&who.secret_key)
            .with_retry(retry)
            .build()
            .map(Arc::new)
            .map_err(|e| Error::Invalid(format!("an S3 client of {bucket}: {e}")))
    }

    /// Puts `bytes` at `bucket/key` as the admin (creating the bucket on
    /// its first object).
    pub fn put(&self, bucket: &str, key: &str, bytes: Vec<u8>) -> Result<()> {
        let store = self.store(bucket, &self.admin)?;
        let path = ObjectPath::parse(key)
            .map_err(|e| Error::Invalid(format!("object key {key:?}: {e}")))?;
        self.rt
            .block_on(store.put(&path, PutPayload::from(bytes)))
            .map(|_| ())
            .map_err(|e| Error::Invalid(format!("putting s3://{bucket}/{key}: {e}")))
    }

    /// The bytes of `bucket/key`, read as the admin.
    pub fn get(&self, bucket: &str, key: &str) -> Result<Vec<u8>> {
        let store = self.store(bucket, &self.admin)?;
        let path = ObjectPath::parse(key)
            .map_err(|e| Error::Invalid(format!("object key {key:?}: {e}")))?;
        let fail =
            |e: object_store::Error| Error::Invalid(format!("getting s3://{bucket}/{key}: {e}"));
        self.rt.block_on(async {
            let got = store.get(&path).await.map_err(fail)?;
            got.bytes().await.map(|b| b.to_vec()).map_err(fail)
        })
    }

    /// Puts every file under `dir` at `bucket/prefix/<relative path>`;
    /// returns the bytes put.
    pub fn upload_dir(&self, bucket: &str, prefix: &str, dir: &Path) -> Result<u64> {
        let mut total = 0u64;
        for file in files_under(dir)? {
            let rel = file.strip_prefix(dir).unwrap_or(&file);
            let key = format!("{}/{}", prefix.trim_end_matches('/'), rel.display());
            let bytes = std::fs::read(&file).map_err(Error::io("reading", &file))?;
            total += bytes.len() as u64;
            self.put(bucket, key.trim_start_matches('/'), bytes)?;
        }
        Ok(total)
    }

    /// The server's log (for a failing test's message).
    pub fn log_tail(&self, lines: usize) -> String {
        util::tail(&self.dir.join("weed.log"), lines)
    }

    /// Waits until an S3 request as the admin succeeds: the port answers
    /// and the filer behind it is up.
    fn wait_ready(&mut self, addr: SocketAddr, started: Instant) -> Result<()> {
        let port = addr.port();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join("weed.log")).unwrap_or_default();
                // The fatal line, before Go's goroutine dump.
                let fatal = log.lines().find(|l| l.starts_with('F')).unwrap_or("");
                return Err(Error::Invalid(format!(
                    "weed server exited ({status}) before S3 answered: {fatal}; its log:\n{}",
                    self.log_tail(30)
                )));
            }
            let up =
                |a: SocketAddr| TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok();
            let answering = up(addr) && self.https_addr().is_none_or(up);
            if answering && self.probe() {
                return Ok(());
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(Error::Invalid(format!(
                    "weed server's S3 port {port} did not answer in {START_TIMEOUT:?}; its log:\n{}",
                    self.log_tail(30)
                )));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn https_addr(&self) -> Option<SocketAddr> {
        let (endpoint, _) = self.https.as_ref()?;
        endpoint.trim_start_matches("https://").parse().ok()
    }

    /// One admin request that needs the whole server (a listing).
    fn probe(&self) -> bool {
        // Few retries: the readiness loop asks again itself.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let retry = RetryConfig {
            max_retries: 2,
            retry_timeout: Duration::from_secs(10),
            ..Default::default()
        };
        let Ok(store) = self.store_retrying("probe", &self.admin, retry) else {
            return false;
        };
        let key = ObjectPath::from("ready");
        let put = store.put(&key, PutPayload::from_static(b"1"));
        self.rt.block_on(put).is_ok()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `weed server` on `ip`: master, volume, filer and S3 on the given
/// free ports (http and gRPC each), no telemetry, the catalog endpoints off.
fn server_args(ip: &str, dir: &Path, p: &[u16]) -> Vec<String> {
    let mut a: Vec<String> = vec![format!("-ip={ip}"), format!("-ip.bind={ip}")];
    a.extend(
        [
            "-s3",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=0",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]
        .map(String::from),
    );
    a.push(format!("-dir={}", dir.join("data").display()));
    a.push(format!("-s3.config={}", dir.join("s3.json").display()));
    let names = ["master", "volume", "filer", "s3"];
    for (i, name) in names.iter().enumerate() {
        a.push(format!("-{name}.port={}", p[2 * i]));
        a.push(format!("-{name}.port.grpc={}", p[2 * i + 1]));
    }
    a
}

/// SeaweedFS's identities file: the admin may do anything, the reader may
/// read and list `buckets`, the outsider only a bucket nobody creates.
fn identities_json(ids: &[Credentials; 3], buckets: &[&str]) -> String {
    let scoped = |bucket: &str| [format!("Read:{bucket}"), format!("List:{bucket}")];
    let reader: Vec<String> = buckets.iter().flat_map(|b| scoped(b)).collect();
    let outsider: Vec<String> = scoped("no-such-bucket-for-outsider").to_vec();
    let admin: Vec<String> = ["Admin", "Read", "List", "Tagging", "Write"]
        .map(String::from)
        .to_vec();
    let entry = |name: &str, c: &Credentials, actions: Vec<String>| {
        serde_json::json!({
            "name": name,
            "credentials": [{"accessKey": c.access_key, "secretKey": c.secret_key}],
            "actions": actions,
        })
    };
    serde_json::json!({
        "identities": [
            entry("admin", &ids[0], admin),
            entry("reader", &ids[1], reader),
            entry("outsider", &ids[2], outsider),
        ]
    })
    .to_string()
}

/// A fresh random-looking key pair (unique per call and process).
fn identity(name: &str) -> Credentials {
    let seed = format!("{name}-{}", unique());
    let hash = hex::encode(Sha256::digest(seed.as_bytes()));
    Credentials {
        access_key: format!("AK{}", hash[..18].to_uppercase()),
        secret_key: format!("sk{}", &hash[18..58]),
    }
}

fn unique() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// `n` distinct free ports (all held until every one is picked).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| {
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .map_err(Error::io("binding a free port", Path::new("127.0.0.1")))
        })
        .collect::<Result<_>>()?;
    held.iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(Error::io("reading a port", Path::new("127.0.0.1")))
        })
        .collect()
}

/// Every regular file under `dir`, sorted.
fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(Error::io("listing", &d))? {
            let path = entry.map_err(Error::io("listing", &d))?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}
