//! A test OIDC issuer, as a cluster's service-account issuer is to IRSA or
//! GKE Workload Identity: an ES256 key made here, its discovery document
//! (`/.well-known/openid-configuration`) and key set (`/openid/v1/jwks`,
//! the paths kube-apiserver serves) on 127.0.0.1 over plain HTTP from one
//! thread, and tokens shaped like projected service-account tokens.
//! The STS that checks them is the real server's ([`super::S3Server`] with
//! [`super::WebIdentityRole`]).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

use crate::error::{Error, Result};

/// Where the key set is served (kube-apiserver's path).
const JWKS_PATH: &str = "/openid/v1/jwks";
/// The discovery document's path (OIDC Discovery 1.0).
const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";

/// What a token says (see [`OidcIssuer::token`]).
#[derive(Clone, Debug)]
pub struct TokenClaims {
    /// `sub`, e.g. `system:serviceaccount:<namespace>:<name>`.
    pub subject: String,
    /// `aud` (one audience, in an array as Kubernetes writes it).
    pub audience: String,
    /// `exp` relative to now: negative for a token that expired that long ago.
    pub expires_in_secs: i64,
}

/// The running issuer; its thread stops when it is dropped.
pub struct OidcIssuer {
    key: EcdsaKeyPair,
    kid: String,
    issuer: String,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    keys_served: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for OidcIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OidcIssuer({}, kid {})", self.issuer, self.kid)
    }
}

impl OidcIssuer {
    /// A fresh key, served at a free port of 127.0.0.1.
    pub fn start() -> Result<OidcIssuer> {
        let key = new_key()?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(Error::io("binding the OIDC issuer", Path::new("127.0.0.1")))?;
        let addr = listener.local_addr().map_err(Error::io(
            "reading the OIDC issuer's port",
            Path::new("127.0.0.1"),
        ))?;
        let issuer = format!("http://{addr}");
        let kid = hex::encode(&ring_digest(key.public_key().as_ref())[..8]);
        let docs = Arc::new(Documents {
            discovery: discovery(&issuer),
            jwks: jwks(&key, &kid)?,
        });
        let stop = Arc::new(AtomicBool::new(false));
        let keys_served = Arc::new(AtomicU64::new(0));
        let (s, k) = (stop.clone(), keys_served.clone());
        let thread = std::thread::Builder::new()
            .name("oidc-issuer".into())
            .spawn(move || serve(listener, &docs, &s, &k))
            .map_err(Error::io(
                "starting the OIDC issuer",
                Path::new("127.0.0.1"),
            ))?;
        Ok(OidcIssuer {
            key,
            kid,
            issuer,
            addr,
            stop,
            keys_served,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:<port>`: the `iss` of its tokens.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// How many times the key set was fetched (the STS fetched it).
    pub fn keys_served(&self) -> u64 {
        self.keys_served.load(Ordering::Relaxed)
    }

    /// A token of this issuer signed with its key.
    pub fn token(&self, claims: &TokenClaims) -> Result<String> {
        sign(&self.key, &self.kid, &self.claims_json(claims))
    }

    /// The same token signed with another key under this issuer's key id:
    /// what a forger without the key could make.
    pub fn forged(&self, claims: &TokenClaims) -> Result<String> {
        sign(&new_key()?, &self.kid, &self.claims_json(claims))
    }

    fn claims_json(&self, c: &TokenClaims) -> serde_json::Value {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs() as i64;
        let exp = now.saturating_add(c.expires_in_secs);
        let iat = exp.saturating_sub(3600).min(now);
        serde_json::json!({
            "iss": self.issuer,
            "sub": c.subject,
            "aud": [c.audience],
            "exp": exp,
            "iat": iat,
            "nbf": iat,
        })
    }
}

impl Drop for OidcIssuer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Documents {
    discovery: String,
    jwks: String,
}

fn new_key() -> Result<EcdsaKeyPair> {
    let rng = SystemRandom::new();
    let bad = |what: &str| Error::Invalid(format!("the OIDC issuer's ES256 key: {what}"));
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .map_err(|_| bad("generating failed"))?;
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|e| bad(&e.to_string()))
}

fn ring_digest(bytes: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .to_vec()
}

/// `header.claims.signature`, ES256 (the fixed 64-byte r||s JWS wants).
fn sign(key: &EcdsaKeyPair, kid: &str, claims: &serde_json::Value) -> Result<String> {
    let header = serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": kid});
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let sig = key
        .sign(&SystemRandom::new(), signed.as_bytes())
        .map_err(|_| Error::Invalid("signing a test token failed".into()))?;
    Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref())))
}

fn discovery(issuer: &str) -> String {
    serde_json::json!({
        "issuer": issuer,
        "jwks_uri": format!("{issuer}{JWKS_PATH}"),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    })
    .to_string()
}

/// The key set: the public point's x and y (the key's uncompressed
/// encoding is 0x04 || x || y, 32 bytes each).
fn jwks(key: &EcdsaKeyPair, kid: &str) -> Result<String> {
    let point = key.public_key().as_ref();
    if point.len() != 65 || point[0] != 4 {
        return Err(Error::Invalid(format!(
            "the OIDC issuer's public key: expected 65 bytes starting 0x04, got {}",
            point.len()
        )));
    }
    Ok(serde_json::json!({"keys": [{
        "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
        "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&point[33..]),
    }]})
    .to_string())
}

/// Answers GETs of the two documents, one connection at a time.
fn serve(listener: TcpListener, docs: &Documents, stop: &AtomicBool, served: &AtomicU64) {
    for conn in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut s) = conn else { continue };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let path = request_path(&mut s).unwrap_or_default();
        let (status, body) = match path.as_str() {
            DISCOVERY_PATH => ("200 OK", docs.discovery.as_str()),
            JWKS_PATH => {
                served.fetch_add(1, Ordering::Relaxed);
                ("200 OK", docs.jwks.as_str())
            }
            _ => ("404 Not Found", ""),
        };
        let _ = write!(
            s,
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

/// The path of the request on `s` (its head read up to 8 KiB).
fn request_path(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = s.read(&mut buf).ok().filter(|&n| n > 0)?;
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let path = text.lines().next()?.split(' ').nth(1)?;
    Some(path.split('?').next().unwrap_or(path).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};

    fn claims(expires_in_secs: i64) -> TokenClaims {
        TokenClaims {
            subject: "system:serviceaccount:ns:reader".into(),
            audience: "sts.amazonaws.com".into(),
            expires_in_secs,
        }
    }

    fn get(addr: &str, path: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn tokens_verify_with_the_served_key_and_forgeries_do_not() {
        let issuer = OidcIssuer::start().unwrap();
        let addr = issuer.issuer().trim_start_matches("http://").to_string();
        let disc = get(&addr, DISCOVERY_PATH);
        assert!(disc.starts_with("HTTP/1.1 200"), "{disc}");
        assert!(disc.contains(&format!("{}{JWKS_PATH}", issuer.issuer())));
        let keys = get(&addr, JWKS_PATH);
        let body: serde_json::Value =
            serde_json::from_str(keys.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        let jwk = &body["keys"][0];
        assert_eq!(issuer.keys_served(), 1);
        let point: Vec<u8> = [vec![4u8], b64(&jwk["x"]), b64(&jwk["y"])].concat();
        let public = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point);
        let check = |token: &str| {
            let (signed, sig) = token.rsplit_once('.').unwrap();
            let header: serde_json::Value = serde_json::from_slice(
                &URL_SAFE_NO_PAD
                    .decode(signed.split('.').next().unwrap())
                    .unwrap(),
            )
            .unwrap();
            assert_eq!(header["kid"], jwk["kid"]);
            public
                .verify(signed.as_bytes(), &URL_SAFE_NO_PAD.decode(sig).unwrap())
                .is_ok()
        };
        assert!(check(&issuer.token(&claims(600)).unwrap()));
        assert!(!check(&issuer.forged(&claims(600)).unwrap()));
        assert!(get(&addr, "/other").starts_with("HTTP/1.1 404"));
    }

    #[test]
    fn an_expired_token_says_so_in_its_claims() {
        let issuer = OidcIssuer::start().unwrap();
        let t = issuer.token(&claims(-60)).unwrap();
        let payload = URL_SAFE_NO_PAD
            .decode(t.split('.').nth(1).unwrap())
            .unwrap();
        let c: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let exp = c["exp"].as_i64().unwrap();
        assert!((now - 62..=now - 58).contains(&exp), "{exp} vs {now}");
        assert!(c["iat"].as_i64().unwrap() < exp);
        assert_eq!(c["aud"][0], "sts.amazonaws.com");
        assert_eq!(c["iss"], issuer.issuer());
    }

    fn b64(v: &serde_json::Value) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(v.as_str().unwrap()).unwrap()
    }
}
