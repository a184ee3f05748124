//! How the object store client is made from the environment: the `AWS_*`
//! variables object_store reads (`AmazonS3Builder::from_env`), plus
//! [`CA_BUNDLE_VAR`], CA certificates trusted besides the system's by both
//! the S3 client and the STS client of a web identity exchange (object_store
//! gives the STS client the same client options); and, with web identity,
//! the token exchanged once when the client is made, so that a refused
//! token is named as such rather than as the first object's failure.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::{Certificate, ClientOptions};

/// A PEM file of CA certificates to trust besides the system's, for S3 and
/// the STS (the AWS CLI's and SDKs' name for it).
pub const CA_BUNDLE_VAR: &str = "AWS_CA_BUNDLE";
/// The file of a web identity token (Kubernetes' projected token).
pub(crate) const TOKEN_FILE_VAR: &str = "AWS_WEB_IDENTITY_TOKEN_FILE";
/// The role a web identity token is exchanged for.
pub(crate) const ROLE_ARN_VAR: &str = "AWS_ROLE_ARN";
/// Where the exchange is sent (object_store's default is AWS's STS).
pub(crate) const STS_ENDPOINT_VAR: &str = "AWS_ENDPOINT_URL_STS";

/// Largest CA bundle read (a system's whole bundle is under 1 MiB).
const MAX_CA_BUNDLE: u64 = 4 << 20;
/// Largest web identity token read for redaction and its expiry.
const MAX_TOKEN: u64 = 64 << 10;

/// The builder from the environment, with [`CA_BUNDLE_VAR`]'s certificates.
pub(super) fn builder() -> io::Result<AmazonS3Builder> {
    // from_env's loop, on a builder whose client options hold the CA
    // certificates: with_client_options replaces the options, so it comes
    // first and the variables (AWS_ALLOW_HTTP among them) after.
    let mut b = AmazonS3Builder::new().with_client_options(client_options()?);
    for (key, value) in std::env::vars_os() {
        if let (Some(key), Some(value)) = (key.to_str(), value.to_str()) {
            if key.starts_with("AWS_") {
                if let Ok(k) = key.to_ascii_lowercase().parse() {
                    b = b.with_config(k, value);
                }
            }
        }
    }
    Ok(b)
}

fn client_options() -> io::Result<ClientOptions> {
    let mut opts = ClientOptions::new();
    let Some(path) = std::env::var_os(CA_BUNDLE_VAR).filter(|p| !p.is_empty()) else {
        return Ok(opts);
    };
    for cert in ca_bundle(Path::new(&path))? {
        opts = opts.with_root_certificate(cert);
    }
    Ok(opts)
}

/// The certificates of a PEM bundle; errors name the variable and file.
fn ca_bundle(path: &Path) -> io::Result<Vec<Certificate>> {
    let bad = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{CA_BUNDLE_VAR}={}: {what}", path.display()),
        )
    };
    let pem = read_bounded(path, MAX_CA_BUNDLE).map_err(|e| bad(e.to_string()))?;
    let certs = Certificate::from_pem_bundle(&pem)
        .map_err(|e| bad(format!("expected PEM CA certificates: {e}")))?;
    if certs.is_empty() {
        return Err(bad(
            "expected PEM CA certificates (-----BEGIN CERTIFICATE-----), found none".into(),
        ));
    }
    Ok(certs)
}

/// At most `max` bytes of `path`; a larger file is an error.
fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    File::open(path)?.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(out)
}

/// Whether object_store uses web identity: the token file and role are
/// set and no static key is (static keys come first in its builder).
fn web_identity() -> Option<(String, String)> {
    let statics = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"];
    if statics.iter().any(|v| std::env::var_os(v).is_some()) {
        return None;
    }
    Some((
        std::env::var(TOKEN_FILE_VAR).ok()?,
        std::env::var(ROLE_ARN_VAR).ok()?,
    ))
}

/// With web identity, exchanges the token now (object_store keeps the
/// credentials and renews them before they expire); a failure names the
/// exchange, the role, the STS and its reason, never the token.
pub(super) fn check_web_identity(s3: &AmazonS3) -> io::Result<()> {
    let Some((file, role)) = web_identity() else {
        return Ok(());
    };
    let got = super::runtime()?.block_on(s3.credentials().get_credential());
    let Err(e) = got else { return Ok(()) };
    let sts = std::env::var(STS_ENDPOINT_VAR)
        .unwrap_or_else(|_| format!("AWS's ({STS_ENDPOINT_VAR} unset)"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let note = token(&file).map_or(String::new(), |t| expiry_note(&t, now));
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "exchanging the web identity token ({TOKEN_FILE_VAR}={file}) for role {role} at \
             the STS {sts} (AssumeRoleWithWebIdentity) failed: {}{note}",
            super::reason(&super::with_causes(&e)).trim_end_matches('.')
        ),
    ))
}

/// The web identity token in `file`, if it can be read (bounded).
fn token(file: &str) -> Option<String> {
    let bytes = read_bounded(Path::new(file), MAX_TOKEN).ok()?;
    Some(String::from_utf8_lossy(&bytes).trim().to_string())
}

/// The token's own expiry when it is a JWT (Kubernetes' are): only a time.
fn expiry_note(token: &str, now: u64) -> String {
    match super::token_expiry(token) {
        Some(exp) if exp <= now => format!("; the web identity token expired {} s ago", now - exp),
        _ => String::new(),
    }
}

/// The web identity token and its JWT parts (claims, signature): values
/// no message may hold.
pub(super) fn token_secrets() -> Vec<String> {
    let Some(t) = std::env::var(TOKEN_FILE_VAR).ok().and_then(|f| token(&f)) else {
        return Vec::new();
    };
    let mut out: Vec<String> = t.split('.').skip(1).map(str::to_string).collect();
    out.push(t);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_bundle_must_hold_certificates_and_be_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let e = ca_bundle(&empty).err().unwrap().to_string();
        assert!(
            e.contains("AWS_CA_BUNDLE=") && e.contains("empty.pem"),
            "{e}"
        );
        assert!(e.contains("found none"), "{e}");
        let big = dir.path().join("big.pem");
        std::fs::write(&big, vec![b'x'; (MAX_CA_BUNDLE + 1) as usize]).unwrap();
        let e = ca_bundle(&big).err().unwrap().to_string();
        assert!(e.contains("larger than"), "{e}");
        let e = ca_bundle(&dir.path().join("absent.pem")).err().unwrap();
        assert!(e.to_string().contains("absent.pem"), "{e}");
    }

    #[test]
    fn an_expired_jwt_says_how_long_ago_and_nothing_else() {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let t = format!(
            "{}.{}.c2ln",
            b64("{\"alg\":\"ES256\"}"),
            b64("{\"exp\":100}")
        );
        assert_eq!(
            expiry_note(&t, 160),
            "; the web identity token expired 60 s ago"
        );
        assert_eq!(expiry_note(&t, 50), "");
        assert_eq!(expiry_note("opaque", 50), "");
    }
}
