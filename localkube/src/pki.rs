//! Certificates and keys for the local control plane, generated in pure Rust
//! (rcgen) so no openssl binary is needed.
//!
//! Layout mirrors what envtest builds: one CA that signs the apiserver's
//! serving certificate and the admin client certificate (client-cert auth,
//! group `system:masters`), plus a separate key pair for signing service
//! account tokens. All keys are ECDSA P-256: rcgen can generate them without
//! extra crypto backends, and every Kubernetes component accepts them
//! (ES256 for service-account tokens).
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::util;

/// The first address of the service range `10.96.0.0/16`: the ClusterIP of
/// `kubernetes.default`, which in-cluster clients dial (later tiers).
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// SANs of the apiserver serving certificate, before any extra ones.
pub const DEFAULT_APISERVER_SANS: [&str; 7] = [
    "127.0.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    KUBERNETES_SERVICE_IP,
];

/// Common name and group of the admin client certificate.
pub const ADMIN_USER: &str = "localkube-admin";
pub const ADMIN_GROUP: &str = "system:masters";

/// PEM material of a freshly generated PKI (pure data; see [`generate`]).
#[derive(Debug, Clone)]
pub struct GeneratedPki {
    pub ca_cert: String,
    pub ca_key: String,
    pub apiserver_cert: String,
    pub apiserver_key: String,
    pub admin_cert: String,
    pub admin_key: String,
    /// Service-account token signing key (private, PKCS#8) and its public half.
    pub sa_key: String,
    pub sa_pub: String,
}

/// Paths of the PKI files in a cluster's state directory.
#[derive(Debug, Clone)]
pub struct PkiFiles {
    pub dir: PathBuf,
}

impl PkiFiles {
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    pub fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }
    pub fn apiserver_cert(&self) -> PathBuf {
        self.dir.join("apiserver.crt")
    }
    pub fn apiserver_key(&self) -> PathBuf {
        self.dir.join("apiserver.key")
    }
    pub fn admin_cert(&self) -> PathBuf {
        self.dir.join("admin.crt")
    }
    pub fn admin_key(&self) -> PathBuf {
        self.dir.join("admin.key")
    }
    pub fn sa_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }
    pub fn sa_pub(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }
    fn manifest(&self) -> PathBuf {
        self.dir.join("pki.json")
    }
    fn all(&self) -> [PathBuf; 8] {
        [
            self.ca_cert(),
            self.ca_key(),
            self.apiserver_cert(),
            self.apiserver_key(),
            self.admin_cert(),
            self.admin_key(),
            self.sa_key(),
            self.sa_pub(),
        ]
    }
}

/// Records what the files were generated for, so a change of SANs regenerates them.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Manifest {
    apiserver_sans: Vec<String>,
}

/// The full SAN list for the apiserver certificate.
pub fn apiserver_sans(extra: &[String]) -> Vec<String> {
    let mut sans: Vec<String> = DEFAULT_APISERVER_SANS
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    for s in extra {
        if !sans.contains(s) {
            sans.push(s.clone());
        }
    }
    sans
}

fn params(cn: &str, org: Option<&str>) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    if let Some(org) = org {
        dn.push(DnType::OrganizationName, org);
    }
    dn.push(DnType::CommonName, cn);
    p.distinguished_name = dn;
    // Fixed, generous validity: a developer's cluster should never hit expiry,
    // and avoiding "now" keeps clock skew out of the picture.
    p.not_before = date_time_ymd(2020, 1, 1);
    p.not_after = date_time_ymd(2099, 12, 31);
    p
}

fn san(s: &str) -> Result<SanType> {
    Ok(match s.parse::<IpAddr>() {
        Ok(ip) => SanType::IpAddress(ip),
        Err(_) => SanType::DnsName(s.to_owned().try_into()?),
    })
}

/// The CA's parameters. Deterministic (fixed name and validity), so an issuer
/// for new leaf certificates can be rebuilt later from these and the CA key
/// on disk without parsing the CA certificate.
fn ca_params() -> CertificateParams {
    let mut ca_params = params("localkube-ca", None);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params
}

/// A client certificate (`CN=cn`, `O=org`) and key signed by the CA, as PEM.
pub fn client_cert(ca_key_pem: &str, cn: &str, org: Option<&str>) -> Result<(String, String)> {
    let ca_key = KeyPair::from_pem(ca_key_pem)?;
    let ca = ca_params();
    let issuer = Issuer::from_params(&ca, &ca_key);
    let key = KeyPair::generate()?;
    let mut p = params(cn, org);
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.use_authority_key_identifier_extension = true;
    let cert = p.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A fresh CA and a serving certificate for `sans` (IPs or DNS names)
/// signed by it: what a test server needs to speak HTTPS to clients that
/// trust only that CA.
#[derive(Clone)]
pub struct ServerTls {
    pub ca_cert: String,
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for ServerTls {
    // The private key never reaches a test's output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls(<ca>, <cert>, <key>)")
    }
}

/// [`ServerTls`] for a server named `cn` at `sans`.
pub fn server_tls(cn: &str, sans: &[String]) -> Result<ServerTls> {
    let ca_key = KeyPair::generate()?;
    let mut ca = params(&format!("{cn}-ca"), None);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::from_params(&ca, &ca_key);
    let key = KeyPair::generate()?;
    let mut p = params(cn, None);
    p.subject_alt_names = sans.iter().map(|s| san(s)).collect::<Result<_>>()?;
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    let cert = p.signed_by(&key, &issuer)?;
    Ok(ServerTls {
        ca_cert: ca_cert.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Makes sure `<dir>/<stem>.crt` and `.key` hold a client certificate for
/// `cn`/`org` signed by the current CA, (re)generating them when missing or
/// when the CA changed (recorded as the CA's sha256 in `<stem>.ca`).
pub fn ensure_client_cert(
    files: &PkiFiles,
    stem: &str,
    cn: &str,
    org: Option<&str>,
) -> Result<(PathBuf, PathBuf)> {
    let crt = files.dir.join(format!("{stem}.crt"));
    let key = files.dir.join(format!("{stem}.key"));
    let stamp = files.dir.join(format!("{stem}.ca"));
    let ca_pem = util::read_to_string(&files.ca_cert())?;
    let want = format!(
        "{}\n{cn}\n{}\n",
        crate::image::sha256_hex(ca_pem.as_bytes()),
        org.unwrap_or("")
    );
    let have = std::fs::read_to_string(&stamp).ok();
    if have.as_deref() == Some(want.as_str()) && crt.is_file() && key.is_file() {
        return Ok((crt, key));
    }
    let (cert_pem, key_pem) = client_cert(&util::read_to_string(&files.ca_key())?, cn, org)?;
    util::write_atomic(&crt, cert_pem.as_bytes(), 0o644)?;
    util::write_atomic(&key, key_pem.as_bytes(), 0o600)?;
    util::write_atomic(&stamp, want.as_bytes(), 0o644)?;
    Ok((crt, key))
}

/// Generates a complete PKI in memory.
pub fn generate(apiserver_sans: &[String]) -> Result<GeneratedPki> {
    let ca_key = KeyPair::generate()?;
    let ca_params = ca_params();
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);

    let server_key = KeyPair::generate()?;
    let mut server = params("kube-apiserver", None);
    server.subject_alt_names = apiserver_sans
        .iter()
        .map(|s| san(s))
        .collect::<Result<_>>()?;
    server.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server.use_authority_key_identifier_extension = true;
    let server_cert = server.signed_by(&server_key, &issuer)?;

    let admin_key = KeyPair::generate()?;
    let mut admin = params(ADMIN_USER, Some(ADMIN_GROUP));
    admin.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    admin.use_authority_key_identifier_extension = true;
    let admin_cert = admin.signed_by(&admin_key, &issuer)?;

    let sa = KeyPair::generate()?;

    Ok(GeneratedPki {
        ca_cert: ca_cert.pem(),
        ca_key: ca_key.serialize_pem(),
        apiserver_cert: server_cert.pem(),
        apiserver_key: server_key.serialize_pem(),
        admin_cert: admin_cert.pem(),
        admin_key: admin_key.serialize_pem(),
        sa_key: sa.serialize_pem(),
        sa_pub: sa.public_key_pem(),
    })
}

/// Reuses the PKI in `dir` if it is complete and was made for the same SANs,
/// otherwise generates and writes a new one. Reuse keeps a kubeconfig that a
/// developer copied elsewhere valid across `down`/`up`.
pub fn ensure(dir: &Path, apiserver_sans: &[String]) -> Result<(PkiFiles, bool)> {
    let files = PkiFiles {
        dir: dir.to_owned(),
    };
    let want = Manifest {
        apiserver_sans: apiserver_sans.to_vec(),
    };
    let current = std::fs::read(files.manifest())
        .ok()
        .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok());
    if current.as_ref() == Some(&want) && files.all().iter().all(|p| p.is_file()) {
        return Ok((files, false));
    }
    util::create_dir_all(dir)?;
    let pki = generate(apiserver_sans)?;
    let writes: [(PathBuf, &str, u32); 8] = [
        (files.ca_cert(), &pki.ca_cert, 0o644),
        (files.ca_key(), &pki.ca_key, 0o600),
        (files.apiserver_cert(), &pki.apiserver_cert, 0o644),
        (files.apiserver_key(), &pki.apiserver_key, 0o600),
        (files.admin_cert(), &pki.admin_cert, 0o644),
        (files.admin_key(), &pki.admin_key, 0o600),
        (files.sa_key(), &pki.sa_key, 0o600),
        (files.sa_pub(), &pki.sa_pub, 0o644),
    ];
    for (path, pem, mode) in writes {
        util::write_atomic(&path, pem.as_bytes(), mode)?;
    }
    let json = serde_json::to_vec_pretty(&want).map_err(|e| Error::Invalid(e.to_string()))?;
    // The manifest goes last: it marks the set as complete.
    util::write_atomic(&files.manifest(), &json, 0o644)?;
    Ok((files, true))
}
