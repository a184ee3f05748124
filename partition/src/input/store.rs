//! Where the input's bytes come from: a local file, or an object in an
//! S3-compatible store named `s3://bucket/key` (the Arrow project's
//! `object_store` client, configured from the usual `AWS_*` variables).
//!
//! The readers see one interface: [`len`], [`read`] (a whole small file)
//! and [`Input`] (positioned reads, `Read + Seek`), so that they stay
//! unchanged and read only the byte ranges they need: an object is read
//! with ranged GETs, never whole unless the reader needs all of it.
//!
//! Reads from objects are counted per [`Session`] (one per
//! [`super::read_share`] call, held by its pool's threads), and an object's
//! size and ETag are taken once per session: every later GET asks for that
//! ETag (`If-Match`), so an object replaced while read is an error rather
//! than a mix of two versions.
//!
//! Errors name `s3://bucket/key` (the path) and the server's reason (status,
//! S3 error code and message), never the credentials: the reason is cut
//! from the response, and any credential value from the environment (and
//! a web identity token) is replaced by `<redacted>` in it.
//!
//! How the client is made (CA certificates, web identity): [`setup`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use object_store::aws::AmazonS3;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, GetOptions, GetRange, ObjectStore, ObjectStoreExt, RetryConfig};

mod setup;

pub use setup::CA_BUNDLE_VAR;

/// The scheme of object URLs.
pub(crate) const SCHEME: &str = "s3://";

/// Largest single GET: a bigger read is several (bounds the extra copy).
const MAX_GET: u64 = 64 << 20;

/// Environment variables whose values never appear in a message.
const SECRET_VARS: [&str; 3] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
];

/// Environment variables a client is built from (a change makes a new one).
const CLIENT_VARS: [&str; 14] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ALLOW_HTTP",
    setup::TOKEN_FILE_VAR,
    setup::ROLE_ARN_VAR,
    "AWS_ROLE_SESSION_NAME",
    setup::STS_ENDPOINT_VAR,
    setup::CA_BUNDLE_VAR,
];

/// What one read of the input fetched from object storage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fetched {
    /// Bytes of object data received (GET bodies).
    pub bytes: u64,
    /// Requests sent (HEAD and GET, retries not counted).
    pub requests: u64,
}

/// The counters and object sizes of one read of the input.
#[derive(Debug, Default)]
pub(crate) struct Session {
    bytes: AtomicU64,
    requests: AtomicU64,
    heads: Mutex<HashMap<String, Head>>,
}

impl Session {
    pub fn fetched(&self) -> Fetched {
        Fetched {
            bytes: self.bytes.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
        }
    }
}

thread_local! {
    static SESSION: RefCell<Option<Arc<Session>>> = const { RefCell::new(None) };
}

/// Makes `s` this thread's session (a pool's start handler calls it).
pub(crate) fn enter(s: Arc<Session>) {
    SESSION.with(|c| *c.borrow_mut() = Some(s));
}

fn session() -> Option<Arc<Session>> {
    SESSION.with(|c| c.borrow().clone())
}

fn count(bytes: u64) {
    if let Some(s) = session() {
        s.bytes.fetch_add(bytes, Ordering::Relaxed);
        s.requests.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether `path` names an object (`s3://...`).
pub(crate) fn is_object(path: &Path) -> bool {
    path.to_str().is_some_and(|p| p.starts_with(SCHEME))
}

/// Bucket and key of `s3://bucket/key`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Url {
    pub bucket: String,
    pub key: ObjectPath,
}

/// Parses `s3://bucket/key`; the key must be a plain object key (no
/// empty, `.` or `..` segment).
pub(crate) fn parse(path: &Path) -> io::Result<Url> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, m.to_string());
    let rest = path
        .to_str()
        .and_then(|p| p.strip_prefix(SCHEME))
        .ok_or_else(|| bad("expected s3://bucket/key"))?;
    let (bucket, key) = rest
        .split_once('/')
        .ok_or_else(|| bad("expected s3://bucket/key: no key after the bucket"))?;
    let bucket_ok = !bucket.is_empty()
        && bucket
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b".-_".contains(&c));
    if !bucket_ok {
        return Err(bad(
            "expected a bucket name of letters, digits, '.', '-', '_'",
        ));
    }
    let key = ObjectPath::parse(key)
        .map_err(|_| bad("expected an object key without empty, \".\" or \"..\" segments"))?;
    if key.as_ref().is_empty() {
        return Err(bad("expected s3://bucket/key: the key is empty"));
    }
    Ok(Url {
        bucket: bucket.to_string(),
        key,
    })
}

/// Where file `f`, listed in a metadata.json at object prefix `dir`, is:
/// a key below the prefix; with `anywhere`, also any `s3://` URL or local
/// absolute path. Err is why it is refused.
pub(crate) fn place(dir: &Path, f: &str, anywhere: bool) -> std::result::Result<PathBuf, String> {
    if anywhere && (f.starts_with(SCHEME) || f.starts_with('/')) {
        return Ok(PathBuf::from(f));
    }
    if f.starts_with(SCHEME) || f.starts_with('/') {
        return Err("an absolute path or URL".into());
    }
    let joined = PathBuf::from(format!(
        "{}/{f}",
        dir.to_string_lossy().trim_end_matches('/')
    ));
    match parse(&joined) {
        Ok(_) => Ok(joined),
        Err(_) if f.split('/').any(|s| s == "..") => Err("the path contains \"..\"".into()),
        Err(_) => Err("not a plain object key (an empty or \".\" segment)".into()),
    }
}

/// An object's size and ETag, from one HEAD per session.
#[derive(Clone, Debug)]
pub(crate) struct Head {
    len: u64,
    etag: Option<String>,
}

/// The runtime the blocking reads wait on (rayon threads block on it).
pub(crate) fn runtime() -> io::Result<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("object-store")
        .enable_all()
        .build()?;
    Ok(RT.get_or_init(|| rt))
}

/// Bounded retries with backoff: a dropped connection, a 5xx or a timeout
/// is retried up to 10 times within 60 s, waiting 1 s then up to 8 s
/// (jittered); 4xx answers are not. The e2e tier's server restart showed
/// why the first wait is not shorter: 6 retries from 0.1 s were spent in
/// 0.9 s, long before a restarting server answers again.
fn retry_config() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(8),
            base: 2.0,
        },
        max_retries: 10,
        retry_timeout: Duration::from_secs(60),
    }
}

/// The client of `bucket`, from the environment (as `AmazonS3Builder::from_env`:
/// keys, session token, web identity, region, endpoint, AWS_ALLOW_HTTP; and
/// AWS_CA_BUNDLE); path-style requests unless AWS_VIRTUAL_HOSTED_STYLE_REQUEST
/// is true. With web identity the token is exchanged before it is returned.
pub(crate) fn client(bucket: &str) -> io::Result<Arc<AmazonS3>> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, Arc<AmazonS3>>>> = OnceLock::new();
    // Keyed by the variables too: a test may run processes' worth of
    // configurations in one process.
    let mut key = bucket.to_string();
    for v in CLIENT_VARS {
        key.push('\0');
        key.push_str(&std::env::var(v).unwrap_or_default());
    }
    let clients = CLIENTS.get_or_init(Default::default);
    let mut map = clients.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = map.get(&key) {
        return Ok(c.clone());
    }
    // reqwest's rustls takes the process default provider: ring (the one
    // kube uses too; an error means one is installed already).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let built = setup::builder()?
        .with_bucket_name(bucket)
        .with_retry(retry_config())
        .build()
        .map_err(|e| {
            io::Error::other(format!(
                "cannot configure the S3 client: {}",
                redact(&e.to_string())
            ))
        })?;
    setup::check_web_identity(&built)?;
    let c = Arc::new(built);
    map.insert(key, c.clone());
    Ok(c)
}

/// An error of the store as an `io::Error` whose text is the server's
/// reason (kind NotFound for a missing object, PermissionDenied for 401/403).
pub(crate) fn to_io(e: &object_store::Error) -> io::Error {
    let kind = match e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    let mut text = reason(&with_causes(e));
    let refused = kind == io::ErrorKind::PermissionDenied || text.contains("answered 400");
    let token = std::env::var("AWS_SESSION_TOKEN").unwrap_or_default();
    if refused && !token.is_empty() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        text = format!(
            "{}{}",
            text.trim_end_matches('.'),
            session_note(&token, now)
        );
    }
    io::Error::new(kind, text)
}

/// What a refused request made with a session token should add: servers
/// answer an expired session differently (AWS 400 ExpiredToken, SeaweedFS
/// 403 InvalidAccessKeyId), so the token's own `exp` claim, when it is a
/// JWT (SeaweedFS's and MinIO's are; AWS's are opaque), says whether it
/// expired. Only a time is printed, never the token.
fn session_note(token: &str, now: u64) -> String {
    match token_expiry(token) {
        Some(exp) if exp <= now => format!(
            "; the session token (AWS_SESSION_TOKEN) expired {} s ago",
            now - exp
        ),
        Some(exp) => format!(
            "; the session token (AWS_SESSION_TOKEN) is valid for {} s more",
            exp - now
        ),
        None => "; temporary credentials (AWS_SESSION_TOKEN) are in use: an expired or \
                 revoked session is refused so too"
            .to_string(),
    }
}

/// The `exp` claim of a JWT, if `token` is one.
fn token_expiry(token: &str) -> Option<u64> {
    use base64::Engine;
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&json).ok()?;
    claims.get("exp")?.as_u64()
}

/// `e` and its causes: object_store's text of a transport error stops at
/// "error sending request", its cause (a refused certificate, a refused
/// connection) is in the source chain.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let s = c.to_string();
        if !text.contains(&s) {
            text = format!("{text}: {s}");
        }
        cause = c.source();
    }
    text
}

/// The server's reason from an error's text: `status[, Code: Message]`,
/// else the transport's error; credentials redacted, at most 300 chars.
pub(crate) fn reason(text: &str) -> String {
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find(&format!("</{name}>"))? + start;
        Some(text[start..end].trim().to_string())
    };
    let status = text
        .find("status code: ")
        .map(|i| &text[i + "status code: ".len()..])
        .map(|s| s.split(':').next().unwrap_or(s).trim().to_string());
    let out = match (status, tag("Code"), tag("Message")) {
        (Some(s), Some(c), Some(m)) => format!("the server answered {s}, {c}: {m}"),
        (Some(s), Some(c), None) => format!("the server answered {s}, {c}"),
        (Some(s), None, _) => format!("the server answered {s}"),
        (None, ..) => text.to_string(),
    };
    let clean: String = redact(&out)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect();
    clean
}

/// `text` with every credential value of the environment (and the web
/// identity token, whole or any part but its header) replaced.
pub(crate) fn redact(text: &str) -> String {
    let mut out = text.to_string();
    let vars = SECRET_VARS.iter().filter_map(|v| std::env::var(v).ok());
    // Longest first: the whole token before its parts.
    let mut secrets: Vec<String> = vars.chain(setup::token_secrets()).collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in secrets {
        if secret.len() >= 4 {
            out = out.replace(&secret, "<redacted>");
        }
    }
    out
}

/// The server's reason for a failed object read, for messages that would
/// otherwise drop it (a missing chunk): `""` for a local file.
pub(crate) fn detail(path: &Path, e: &io::Error) -> String {
    if is_object(path) {
        format!(" ({e})")
    } else {
        String::new()
    }
}

/// HEAD of `url` (once per session). A refused HEAD has no body, so the
/// reason is asked again with a one-byte GET, whose error has it.
fn head(path: &Path) -> io::Result<Head> {
    let url = parse(path)?;
    let name = path.to_string_lossy().into_owned();
    if let Some(h) = session().and_then(|s| s.heads.lock().ok()?.get(&name).cloned()) {
        return Ok(h);
    }
    let store = client(&url.bucket)?;
    let rt = runtime()?;
    count(0);
    let meta = match rt.block_on(store.head(&url.key)) {
        Ok(m) => m,
        Err(e) => {
            let opts = GetOptions {
                range: Some(GetRange::Bounded(0..1)),
                ..Default::default()
            };
            count(0);
            return Err(match rt.block_on(store.get_opts(&url.key, opts)) {
                Err(e2) => to_io(&e2),
                Ok(_) => to_io(&e),
            });
        }
    };
    let h = Head {
        len: meta.size,
        etag: meta.e_tag,
    };
    if let Some(s) = session() {
        if let Ok(mut m) = s.heads.lock() {
            m.insert(name, h.clone());
        }
    }
    Ok(h)
}

/// Bytes `offset..offset + buf.len()` of the object, into `buf`.
fn get_into(path: &Path, h: &Head, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let url = parse(path)?;
    let end = offset
        .checked_add(buf.len() as u64)
        .filter(|&e| e <= h.len)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{} bytes at offset {offset} are past the object's end ({} bytes)",
                    buf.len(),
                    h.len
                ),
            )
        })?;
    if buf.is_empty() {
        return Ok(());
    }
    let store = client(&url.bucket)?;
    let opts = GetOptions {
        range: Some(GetRange::Bounded(offset..end)),
        if_match: h.etag.clone(),
        ..Default::default()
    };
    let rt = runtime()?;
    let bytes = rt
        .block_on(async {
            let got = store.get_opts(&url.key, opts).await?;
            got.bytes().await
        })
        .map_err(|e| match e {
            object_store::Error::Precondition { .. } => io::Error::other(
                "the object changed while it was read (its ETag is not the one first seen)",
            ),
            e => to_io(&e),
        })?;
    count(bytes.len() as u64);
    if bytes.len() != buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "asked for {} bytes at offset {offset}, the server sent {}",
                buf.len(),
                bytes.len()
            ),
        ));
    }
    buf.copy_from_slice(&bytes);
    Ok(())
}

/// An object's size and ETag (one HEAD, or the session's): what the
/// partition cache's key takes of a chunk in a bucket.
pub(crate) fn size_and_etag(path: &Path) -> io::Result<(u64, Option<String>)> {
    let h = head(path)?;
    Ok((h.len, h.etag))
}

/// The size of a file or object.
pub(crate) fn len(path: &Path) -> io::Result<u64> {
    if is_object(path) {
        Ok(head(path)?.len)
    } else {
        Ok(std::fs::metadata(path)?.len())
    }
}

/// A whole file or object (metadata.json, a CSV chunk); an object larger
/// than this process may hold is refused before anything is allocated.
pub(crate) fn read(path: &Path) -> io::Result<Vec<u8>> {
    if !is_object(path) {
        return std::fs::read(path);
    }
    let h = head(path)?;
    let limit = super::limits::memory_limit();
    if h.len > limit {
        return Err(io::Error::other(format!(
            "the object has {} bytes, more than the {limit} bytes this process may use",
            h.len
        )));
    }
    let mut out = vec![0u8; h.len as usize];
    let mut at = 0usize;
    while at < out.len() {
        let n = (out.len() - at).min(MAX_GET as usize);
        get_into(path, &h, at as u64, &mut out[at..at + n])?;
        at += n;
    }
    Ok(out)
}

/// The length [`Input::metadata`] reports (as `std::fs::Metadata` does).
pub(crate) struct Len(u64);

impl Len {
    pub fn len(&self) -> u64 {
        self.0
    }
}

/// A file or object open for positioned reads.
#[derive(Debug)]
pub(crate) enum Input {
    Local(File),
    Object {
        path: PathBuf,
        head: Head,
        /// Where `Read` reads next.
        pos: u64,
    },
}

impl Input {
    pub fn open(path: &Path) -> io::Result<Input> {
        if !is_object(path) {
            return File::open(path).map(Input::Local);
        }
        Ok(Input::Object {
            path: path.to_path_buf(),
            head: head(path)?,
            pos: 0,
        })
    }

    pub fn metadata(&self) -> io::Result<Len> {
        match self {
            Input::Local(f) => Ok(Len(f.metadata()?.len())),
            Input::Object { head, .. } => Ok(Len(head.len)),
        }
    }

    /// Exactly `buf.len()` bytes at `offset` (in pieces of at most 64 MiB).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match self {
            Input::Local(f) => f.read_exact_at(buf, offset),
            Input::Object { path, head, .. } => {
                let mut done = 0usize;
                while done < buf.len() {
                    let n = (buf.len() - done).min(MAX_GET as usize);
                    let at = offset.checked_add(done as u64).ok_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidInput, "offset past 2^64")
                    })?;
                    get_into(path, head, at, &mut buf[done..done + n])?;
                    done += n;
                }
                Ok(())
            }
        }
    }

    /// Another handle on the same file or object (its own position).
    pub fn try_clone(&self) -> io::Result<Input> {
        match self {
            Input::Local(f) => f.try_clone().map(Input::Local),
            Input::Object { path, head, .. } => Ok(Input::Object {
                path: path.clone(),
                head: head.clone(),
                pos: 0,
            }),
        }
    }
}

impl Read for Input {
    /// One GET of up to `buf.len()` bytes (at most 64 MiB) per call.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Input::Local(f) => f.read(buf),
            Input::Object { path, head, pos } => {
                let left = head.len.saturating_sub(*pos);
                let n = (buf.len() as u64).min(left).min(MAX_GET) as usize;
                get_into(path, head, *pos, &mut buf[..n])?;
                *pos += n as u64;
                Ok(n)
            }
        }
    }
}

impl Seek for Input {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        match self {
            Input::Local(f) => f.seek(to),
            Input::Object { head, pos, .. } => {
                let new = match to {
                    SeekFrom::Start(p) => Some(p),
                    SeekFrom::End(d) => head.len.checked_add_signed(d),
                    SeekFrom::Current(d) => pos.checked_add_signed(d),
                };
                *pos = new.ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "seek before the start")
                })?;
                Ok(*pos)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_bucket_and_plain_key() {
        let u = parse(Path::new("s3://graphs/mag/metadata.json")).unwrap();
        assert_eq!(u.bucket, "graphs");
        assert_eq!(u.key.as_ref(), "mag/metadata.json");
        for bad in [
            "s3://",
            "s3://graphs",
            "s3://graphs/",
            "s3:///key",
            "s3://gr aphs/k",
            "s3://g/a/../b",
            "s3://g/a//b",
            "/local/file",
        ] {
            assert!(parse(Path::new(bad)).is_err(), "{bad}");
        }
        assert!(is_object(Path::new("s3://g/k")));
        assert!(!is_object(Path::new("/g/k")));
    }

    #[test]
    fn listed_files_stay_below_the_prefix_unless_anywhere() {
        let dir = Path::new("s3://g/graph");
        assert_eq!(
            place(dir, "nodes/feat-0.npy", false).unwrap(),
            Path::new("s3://g/graph/nodes/feat-0.npy")
        );
        assert!(place(dir, "../other/x.npy", false)
            .unwrap_err()
            .contains(".."));
        assert!(place(dir, "/etc/passwd", false).is_err());
        assert!(place(dir, "s3://h/x.npy", false).is_err());
        assert_eq!(
            place(dir, "s3://h/x.npy", true).unwrap(),
            Path::new("s3://h/x.npy")
        );
        assert!(place(dir, "a//b", false).is_err());
    }

    #[test]
    fn the_reason_is_status_code_and_message_without_secrets() {
        let text = "Object at location k not found: Error performing GET http://h/b/k in 2ms - \
                    Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\"?>\
                    <Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we \
                    calculated does not match</Message><AWSAccessKeyId>AKX</AWSAccessKeyId></Error>";
        let r = reason(text);
        assert_eq!(
            r,
            "the server answered 403 Forbidden, SignatureDoesNotMatch: The request signature \
             we calculated does not match"
        );
        assert!(!r.contains("AKX"));
        let r = reason("Server returned non-2xx status code: 404 Not Found: ");
        assert_eq!(r, "the server answered 404 Not Found");
    }

    #[test]
    fn a_transport_error_keeps_its_cause() {
        #[derive(Debug)]
        struct Outer(io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("error sending request")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(io::Error::other("invalid peer certificate: UnknownIssuer"));
        assert_eq!(
            with_causes(&e),
            "error sending request: invalid peer certificate: UnknownIssuer"
        );
        let plain = io::Error::other("refused");
        assert_eq!(with_causes(&plain), "refused");
    }

    #[test]
    fn a_jwt_session_token_says_when_it_expired_and_nothing_else() {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jwt = |claims: &str| format!("{}.{}.c2ln", b64("{\"alg\":\"HS256\"}"), b64(claims));
        let token = jwt("{\"exp\":1000,\"sid\":\"s3cr3t-session\"}");
        assert_eq!(token_expiry(&token), Some(1000));
        let note = session_note(&token, 1060);
        assert_eq!(
            note,
            "; the session token (AWS_SESSION_TOKEN) expired 60 s ago"
        );
        assert!(session_note(&token, 900).contains("valid for 100 s more"));
        // An opaque (AWS) token, or a JWT without exp: a general note.
        for t in [
            "FwoGZXIvYXdzEPr//////////wEaDM",
            &jwt("{\"sub\":\"x\"}"),
            "a.b.c.d",
        ] {
            assert_eq!(token_expiry(t), None, "{t}");
            assert!(session_note(t, 5).contains("are in use"), "{t}");
            assert!(!session_note(t, 5).contains(t));
        }
    }
}
