//! Temporary credentials from the test server's own STS (SeaweedFS's
//! embedded STS, enabled by an `-s3.iam.config` whose signing key this
//! module writes): [`S3Server::assume_role`] asks the server for a session
//! (a SigV4-signed `AssumeRole`), and [`S3Server::expired`] turns such a
//! session into one whose expiry is in the past.
//!
//! SeaweedFS's session tokens are HS256 JWTs signed with the configured key,
//! and the session's access key and secret are derived from the token's
//! session id; so the server's own token with `exp` moved back and signed
//! again with that key is exactly what the server would have issued that
//! long ago (AssumeRole refuses lifetimes under 900 s: waiting for a real
//! expiry would take 15 minutes).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::{Credentials, S3Server};
use crate::error::{Error, Result};

/// A session from the server's STS: keys, session token, expiry.
#[derive(Clone, PartialEq, Eq)]
pub struct TempCredentials {
    pub keys: Credentials,
    pub session_token: String,
    /// As the server wrote it (RFC 3339).
    pub expiration: String,
}

impl std::fmt::Debug for TempCredentials {
    // Neither the secret nor the token reaches a test's output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TempCredentials({}, <secret>, <token>, expires {})",
            self.keys.access_key, self.expiration
        )
    }
}

impl S3Server {
    /// A session of `who` (no role: the caller's own permissions) lasting
    /// `seconds` (AssumeRole allows 900..=43200), from the server's STS.
    pub fn assume_role(&self, who: &Credentials, seconds: u32) -> Result<TempCredentials> {
        if self.sts_key.is_none() {
            return Err(Error::Invalid(
                "the S3 server was started without STS (S3Server::start_with_sts)".into(),
            ));
        }
        let body = format!(
            "Action=AssumeRole&Version=2011-06-15&RoleSessionName=localkube-test\
             &DurationSeconds={seconds}"
        );
        let host = self.endpoint.trim_start_matches("http://").to_string();
        let headers = sign_v4(who, &host, body.as_bytes(), SystemTime::now());
        let client = reqwest::Client::new();
        let mut req = client.post(format!("{}/", self.endpoint)).body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let (status, text) = self
            .rt
            .block_on(async {
                let resp = req.send().await?;
                let status = resp.status();
                Ok::<_, reqwest::Error>((status, resp.text().await?))
            })
            .map_err(|e| Error::Invalid(format!("AssumeRole at {}: {e}", self.endpoint)))?;
        let field = |name: &'static str| tag(&text, name).ok_or(name);
        let got = (|| {
            Ok::<_, &'static str>(TempCredentials {
                keys: Credentials {
                    access_key: field("AccessKeyId")?,
                    secret_key: field("SecretAccessKey")?,
                },
                session_token: field("SessionToken")?,
                expiration: field("Expiration")?,
            })
        })();
        got.map_err(|missing| {
            // The answer holds no secret when a field is missing (an error).
            Error::Invalid(format!(
                "AssumeRole answered {status} without <{missing}>: {}",
                text.chars().take(500).collect::<String>()
            ))
        })
    }

    /// `session` with its expiry `ago` in the past (issued 900 s before
    /// that), signed again with the server's key: same session id, so the
    /// same access key and secret.
    pub fn expired(&self, session: &TempCredentials, ago: Duration) -> Result<TempCredentials> {
        let key = self
            .sts_key
            .as_deref()
            .ok_or_else(|| Error::Invalid("the S3 server was started without STS".into()))?;
        let bad = |what: &str| Error::Invalid(format!("the server's session token: {what}"));
        let mut parts = session.session_token.split('.');
        let (Some(header), Some(payload), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("expected a JWT (three dot-separated parts)"));
        };
        let json = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| bad("payload is not base64url"))?;
        let mut claims: serde_json::Value =
            serde_json::from_slice(&json).map_err(|_| bad("payload is not JSON"))?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let exp = now.saturating_sub(ago.as_secs());
        let obj = claims
            .as_object_mut()
            .ok_or_else(|| bad("payload is not an object"))?;
        obj.insert("exp".into(), exp.into());
        obj.insert("iat".into(), exp.saturating_sub(900).into());
        obj.insert("nbf".into(), exp.saturating_sub(900).into());
        let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signed = format!("{header}.{payload}");
        let sig = URL_SAFE_NO_PAD.encode(hmac(key, signed.as_bytes()));
        Ok(TempCredentials {
            keys: session.keys.clone(),
            session_token: format!("{signed}.{sig}"),
            expiration: format!("{exp} (unix seconds)"),
        })
    }

    /// [`S3Server::env`] of a session: its keys and `AWS_SESSION_TOKEN`.
    pub fn session_env(&self, session: &TempCredentials) -> Vec<(String, String)> {
        let mut env = self.env(&session.keys);
        env.push(("AWS_SESSION_TOKEN".into(), session.session_token.clone()));
        env
    }
}

/// The text of the first `<name>` element of `xml`.
fn tag(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(xml[start..end].trim().to_string())
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length: new_from_slice cannot fail.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// The headers of an AWS Signature V4 POST of a form `body` to `/` of
/// `host` (service sts, region us-east-1) as `who` at `at`.
fn sign_v4(who: &Credentials, host: &str, body: &[u8], at: SystemTime) -> Vec<(String, String)> {
    let (date, stamp) = amz_date(at);
    let payload = hex::encode(Sha256::digest(body));
    let ctype = "application/x-www-form-urlencoded";
    let signed = "content-type;host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "POST\n/\n\ncontent-type:{ctype}\nhost:{host}\nx-amz-content-sha256:{payload}\n\
         x-amz-date:{stamp}\n\n{signed}\n{payload}"
    );
    let scope = format!("{date}/us-east-1/sts/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(
        format!("AWS4{}", who.secret_key).as_bytes(),
        date.as_bytes(),
    );
    for part in ["us-east-1", "sts", "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let signature = hex::encode(hmac(&key, to_sign.as_bytes()));
    let auth = format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
        who.access_key
    );
    [
        ("content-type", ctype.to_string()),
        ("x-amz-content-sha256", payload),
        ("x-amz-date", stamp),
        ("authorization", auth),
    ]
    .map(|(k, v)| (k.to_string(), v))
    .to_vec()
}

/// `YYYYMMDD` and `YYYYMMDDTHHMMSSZ` of `at` (UTC).
fn amz_date(at: SystemTime) -> (String, String) {
    let secs = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let date = format!("{year:04}{month:02}{day:02}");
    let stamp = format!(
        "{date}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    (date, stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amz_dates_are_utc_civil_dates() {
        let at = UNIX_EPOCH + Duration::from_secs(1_709_251_199); // 2024-02-29T23:59:59Z
        assert_eq!(amz_date(at), ("20240229".into(), "20240229T235959Z".into()));
        assert_eq!(amz_date(UNIX_EPOCH).1, "19700101T000000Z");
    }

    #[test]
    fn hmac_is_rfc_4231_hmac_sha256() {
        // RFC 4231 test case 2: HMAC-SHA256("Jefe", "what do ya want...").
        assert_eq!(
            hex::encode(hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
