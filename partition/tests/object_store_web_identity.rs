//! Web identity (issue #35 item 1), as IRSA and GKE Workload Identity give
//! it to a pod: `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN` +
//! `AWS_ENDPOINT_URL_STS`, no key. Against a real S3-compatible server with
//! its STS (SeaweedFS, `localkube::s3::S3Server` with a `WebIdentityRole`),
//! over HTTPS (object_store sends the exchange only over HTTPS): the server's
//! certificate is from a CA made for the test, which the client trusts
//! through `AWS_CA_BUNDLE`. The tokens are signed by a test OIDC issuer
//! (`localkube::s3::oidc`) whose discovery document and keys the server
//! fetches; the role trusts one subject and may read the test bucket.
//!
//! - a valid token reads the graph through `dgl-partition rank`;
//! - without the CA the exchange is refused on the certificate;
//! - a token for another audience, an expired one, one signed with another
//!   key and one of another subject are each refused, the error naming the
//!   exchange, the role, the STS and the server's reason;
//! - an `AWS_CA_BUNDLE` without a certificate is named;
//! - no token (nor any part of one but the header) and no issued credential
//!   is in any output (RUST_LOG=trace).

#[path = "input_common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use dgl_partition::input::{write_chunked, EdgeFormat, CA_BUNDLE_VAR};
use localkube::s3::oidc::{OidcIssuer, TokenClaims};
use localkube::s3::{S3Options, S3Server, WebIdentityRole};

const BUCKET: &str = "graphs";
const BIN: &str = env!("CARGO_BIN_EXE_dgl-partition");
/// The audience EKS's pod identity webhook asks for.
const AUDIENCE: &str = "sts.amazonaws.com";
const SUBJECT: &str = "system:serviceaccount:team-a:graph-reader";
const ROLE_ARN: &str = "arn:aws:iam::000000000000:role/graph-reader";

struct Fixture {
    oidc: OidcIssuer,
    s3: S3Server,
    url: String,
    dir: tempfile::TempDir,
    /// Every token written, for the output checks.
    tokens: Vec<String>,
}

impl Fixture {
    fn start() -> Fixture {
        let oidc = OidcIssuer::start().unwrap_or_else(|e| panic!("{e}"));
        let role = WebIdentityRole {
            issuer: oidc.issuer().to_string(),
            audience: AUDIENCE.into(),
            subject: SUBJECT.into(),
            role_arn: ROLE_ARN.into(),
        };
        let opts = S3Options {
            https: true,
            web_identity: Some(role),
            ..Default::default()
        };
        let s3 = S3Server::start_with(&[BUCKET], &opts).unwrap_or_else(|e| panic!("{e}"));
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("graph");
        write_chunked(&common::homogeneous(), &local, 2, EdgeFormat::Npy).unwrap();
        // Put over plain HTTP as the admin; the reads under test are HTTPS.
        s3.upload_dir(BUCKET, "wi", &local).unwrap();
        Fixture {
            oidc,
            s3,
            url: format!("s3://{BUCKET}/wi/metadata.json"),
            dir,
            tokens: Vec::new(),
        }
    }

    /// A token file of `claims` (signed with the issuer's key, or forged).
    fn token_file(&mut self, name: &str, claims: &TokenClaims, forged: bool) -> PathBuf {
        let token = match forged {
            false => self.oidc.token(claims),
            true => self.oidc.forged(claims),
        }
        .unwrap();
        let path = self.dir.path().join(name);
        std::fs::write(&path, &token).unwrap();
        self.tokens.push(token);
        path
    }

    /// The pod's environment: endpoint, region, token file, role, STS,
    /// and the CA when `ca`; no key.
    fn env(&self, token_file: &Path, ca: bool) -> Vec<(String, String)> {
        let https = self.s3.https_endpoint().unwrap().to_string();
        let mut env = vec![
            ("AWS_ENDPOINT", https.clone()),
            ("AWS_REGION", "us-east-1".into()),
            (
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                token_file.display().to_string(),
            ),
            ("AWS_ROLE_ARN", ROLE_ARN.into()),
            ("AWS_ENDPOINT_URL_STS", https),
        ];
        if ca {
            let file = self.s3.ca_file().unwrap().display().to_string();
            env.push((CA_BUNDLE_VAR, file));
        }
        env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// A rank that must fail; its error line, after the common checks: it
    /// names the object, the exchange, the role and the STS, and no output
    /// holds a token.
    fn refused(&self, what: &str, env: &[(String, String)]) -> String {
        let (ok, text, took) = common::rank_with_aws_env(BIN, env, &self.url);
        assert!(!ok, "{what} must fail:\n{text}");
        let line = text
            .lines()
            .find(|l| l.contains("web identity token ("))
            .unwrap_or_else(|| panic!("{what}: no line names the exchange:\n{text}"));
        println!("{what}: failed in {:.2}s: {line}", took.as_secs_f64());
        let sts = self.s3.https_endpoint().unwrap();
        for part in [&self.url, ROLE_ARN, "AssumeRoleWithWebIdentity", sts] {
            assert!(line.contains(part), "{what}: names {part}:\n{line}");
        }
        self.assert_no_secret(what, &text);
        line.to_string()
    }

    fn assert_no_secret(&self, what: &str, text: &str) {
        for t in &self.tokens {
            // The whole token, its claims and its signature (the header is
            // the same for every token of the issuer).
            for part in std::iter::once(t.as_str()).chain(t.split('.').skip(1)) {
                assert!(
                    !text.contains(part),
                    "{what}: a token is in the output:\n{text}"
                );
            }
        }
        for tag in ["<SecretAccessKey>", "<SessionToken>", "<AccessKeyId>"] {
            assert!(
                !text.contains(tag),
                "{what}: issued credentials in the output"
            );
        }
    }
}

fn claims(audience: &str, subject: &str, expires_in_secs: i64) -> TokenClaims {
    TokenClaims {
        subject: subject.into(),
        audience: audience.into(),
        expires_in_secs,
    }
}

#[test]
fn a_web_identity_token_reads_over_https_and_refused_tokens_are_named_without_them() {
    let mut f = Fixture::start();
    let good = f.token_file("good", &claims(AUDIENCE, SUBJECT, 3600), false);

    let (ok, text, took) = common::rank_with_aws_env(BIN, &f.env(&good, true), &f.url);
    assert!(
        ok,
        "a valid token over HTTPS:\n{text}\n{}",
        f.s3.log_tail(30)
    );
    assert!(text.contains("input fetched from object storage"), "{text}");
    assert!(
        f.oidc.keys_served() >= 1,
        "the STS fetched the issuer's keys"
    );
    f.assert_no_secret("a valid token", &text);
    println!(
        "a valid token read the graph over HTTPS in {:.2}s",
        took.as_secs_f64()
    );

    // The certificate is checked: without the CA the exchange fails on it.
    let line = f.refused("without AWS_CA_BUNDLE", &f.env(&good, false));
    assert!(
        line.contains("invalid peer certificate: UnknownIssuer"),
        "{line}"
    );

    let cases: [(&str, TokenClaims, bool, &str); 4] = [
        (
            "another audience",
            claims("someone-else", SUBJECT, 3600),
            false,
            "audience",
        ),
        (
            "an expired token",
            claims(AUDIENCE, SUBJECT, -120),
            false,
            "the web identity token expired 12",
        ),
        (
            "a forged signature",
            claims(AUDIENCE, SUBJECT, 3600),
            true,
            "signature",
        ),
        (
            "another subject",
            claims(AUDIENCE, "system:serviceaccount:team-b:other", 3600),
            false,
            "trust policy",
        ),
    ];
    for (i, (what, c, forged, reason)) in cases.into_iter().enumerate() {
        let file = f.token_file(&format!("bad-{i}"), &c, forged);
        let line = f.refused(what, &f.env(&file, true));
        assert!(
            line.contains("the server answered 4"),
            "{what}: the STS's answer:\n{line}"
        );
        assert!(line.contains(reason), "{what}: says {reason:?}:\n{line}");
    }
    // A CA bundle without a certificate is named before any request.
    let not_pem = f.dir.path().join("not-a-ca.pem");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let mut env = f.env(&good, false);
    env.push((CA_BUNDLE_VAR.to_string(), not_pem.display().to_string()));
    let (ok, text, _) = common::rank_with_aws_env(BIN, &env, &f.url);
    let want = format!("{CA_BUNDLE_VAR}={}: expected PEM", not_pem.display());
    assert!(
        !ok && text.contains(&want) && text.contains("found none"),
        "{text}"
    );
    // The valid token still reads after the refusals (nothing was cached).
    let (ok, text, _) = common::rank_with_aws_env(BIN, &f.env(&good, true), &f.url);
    assert!(ok, "{text}");
}
