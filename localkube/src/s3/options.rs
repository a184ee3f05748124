//! What a test server runs besides plain-HTTP S3 with its three identities:
//! the STS, HTTPS, and a role for web identity tokens.
//!
//! SeaweedFS's STS (`-s3.iam.config`) takes OIDC providers (issuer, client
//! ids = accepted audiences; keys found through the issuer's discovery
//! document), roles with trust policies, and policies; its S3 port serves
//! HTTPS too on `-s3.port.https` with `-s3.cert.file`/`-s3.key.file`.

use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::error::Result;
use crate::pki;
use crate::util;

/// How [`super::S3Server::start_with`] starts the server.
#[derive(Clone, Debug, Default)]
pub struct S3Options {
    /// The server's STS (AssumeRole: [`super::S3Server::assume_role`]).
    pub sts: bool,
    /// S3 and STS over HTTPS too, on a second port, with a certificate of
    /// a CA made for this server ([`super::S3Server::https_endpoint`],
    /// [`super::S3Server::ca_file`]).
    pub https: bool,
    /// A role that tokens of an OIDC issuer may assume with
    /// AssumeRoleWithWebIdentity (turns the STS on).
    pub web_identity: Option<WebIdentityRole>,
}

impl S3Options {
    pub(super) fn with_sts(&self) -> bool {
        self.sts || self.web_identity.is_some()
    }
}

/// A role that may read and list the server's test buckets, assumable with
/// a token of `issuer` for `audience` whose subject is `subject` (its trust
/// policy), as an IRSA role trusts one service account.
#[derive(Clone, Debug)]
pub struct WebIdentityRole {
    /// The OIDC issuer URL (`iss`); its keys are found through its
    /// `/.well-known/openid-configuration`.
    pub issuer: String,
    /// The audience tokens must name (`aud`).
    pub audience: String,
    /// The only subject (`sub`) the role trusts.
    pub subject: String,
    /// `arn:aws:iam::<account>:role/<name>`.
    pub role_arn: String,
}

/// The provider's name in the config (trust policies name it).
const PROVIDER: &str = "localkube-oidc";
/// The issuer written into the STS config (the server checks it).
const ISSUER: &str = "localkube-sts";
/// The policy the web identity role gets.
const READ_POLICY: &str = "read-test-buckets";

/// The `-s3.iam.config` file: the STS with `key` as its signing key, and
/// with `web` its provider, role and policy (else no roles or providers:
/// a caller assumes a session of itself).
pub(super) fn iam_config(key: &[u8], web: Option<&WebIdentityRole>, buckets: &[&str]) -> String {
    let mut config = serde_json::json!({
        "sts": {
            "tokenDuration": "1h",
            "maxSessionLength": "12h",
            "issuer": ISSUER,
            "signingKey": base64::engine::general_purpose::STANDARD.encode(key),
        },
        "policy": {"defaultEffect": "Deny"},
    });
    if let Some(w) = web {
        config["providers"] = serde_json::json!([{
            "name": PROVIDER,
            "type": "oidc",
            "enabled": true,
            "config": {"issuer": w.issuer, "clientId": w.audience},
        }]);
        config["roles"] = serde_json::json!([role(w)]);
        config["policies"] = serde_json::json!([{
            "name": READ_POLICY,
            "document": read_policy(buckets),
        }]);
    }
    config.to_string()
}

fn role(w: &WebIdentityRole) -> serde_json::Value {
    let name = w.role_arn.rsplit('/').next().unwrap_or(&w.role_arn);
    serde_json::json!({
        "roleName": name,
        "roleArn": w.role_arn,
        "trustPolicy": {
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow",
                "Principal": {"Federated": PROVIDER},
                "Action": ["sts:AssumeRoleWithWebIdentity"],
                "Condition": {"StringEquals": {"oidc:sub": w.subject}},
            }],
        },
        "attachedPolicies": [READ_POLICY],
    })
}

fn read_policy(buckets: &[&str]) -> serde_json::Value {
    let resources: Vec<String> = buckets
        .iter()
        .flat_map(|b| [format!("arn:aws:s3:::{b}"), format!("arn:aws:s3:::{b}/*")])
        .collect();
    serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": resources,
        }],
    })
}

/// Writes a fresh CA and a certificate for `ip` into `dir`, adds the HTTPS
/// port's flags to `args`; the endpoint and the CA's file.
pub(super) fn https_args(
    ip: &str,
    port: u16,
    dir: &Path,
    args: &mut Vec<String>,
) -> Result<(String, PathBuf)> {
    let tls = pki::server_tls("localkube-s3", &[ip.to_string()])?;
    let (ca, cert, key) = (dir.join("ca.crt"), dir.join("s3.crt"), dir.join("s3.key"));
    util::write_atomic(&ca, tls.ca_cert.as_bytes(), 0o644)?;
    util::write_atomic(&cert, tls.cert.as_bytes(), 0o644)?;
    util::write_atomic(&key, tls.key.as_bytes(), 0o600)?;
    args.push(format!("-s3.port.https={port}"));
    args.push(format!("-s3.cert.file={}", cert.display()));
    args.push(format!("-s3.key.file={}", key.display()));
    Ok((format!("https://{ip}:{port}"), ca))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_trusts_one_subject_and_reads_only_the_buckets() {
        let w = WebIdentityRole {
            issuer: "http://127.0.0.1:1".into(),
            audience: "sts.amazonaws.com".into(),
            subject: "system:serviceaccount:ns:reader".into(),
            role_arn: "arn:aws:iam::000000000000:role/graph-reader".into(),
        };
        let c: serde_json::Value =
            serde_json::from_str(&iam_config(b"k", Some(&w), &["graphs"])).unwrap();
        assert_eq!(c["providers"][0]["config"]["clientId"], "sts.amazonaws.com");
        let r = &c["roles"][0];
        assert_eq!(r["roleName"], "graph-reader");
        let cond = &r["trustPolicy"]["Statement"][0]["Condition"]["StringEquals"];
        assert_eq!(cond["oidc:sub"], w.subject);
        let res = &c["policies"][0]["document"]["Statement"][0]["Resource"];
        assert_eq!(
            res,
            &serde_json::json!(["arn:aws:s3:::graphs", "arn:aws:s3:::graphs/*"])
        );
        let plain: serde_json::Value = serde_json::from_str(&iam_config(b"k", None, &[])).unwrap();
        assert!(plain.get("roles").is_none() && plain.get("providers").is_none());
    }
}
