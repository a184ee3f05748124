//! Temporary credentials (issue #35 item 3) against a real S3-compatible
//! server with its STS on (SeaweedFS, `localkube::s3::S3Server::start_with_sts`;
//! the `weed` binary as for tests/object_store.rs):
//!
//! - a session from the server's own STS (AssumeRole, SigV4-signed) reads
//!   the graph through `dgl-partition rank` with `AWS_SESSION_TOKEN`, and
//!   its keys without the token are refused;
//! - the same session expired (its token's `exp` a minute in the past,
//!   signed again with the server's key) fails the rank with an error naming
//!   `s3://bucket/key` and the server's reason, quickly (a 4xx is not
//!   retried); neither the error nor the logs (RUST_LOG=trace) hold a key,
//!   a secret or a token.

#[path = "input_common/mod.rs"]
mod common;

use std::path::Path;
use std::time::Duration;

use dgl_partition::input::{write_chunked, EdgeFormat};
use localkube::s3::S3Server;

const BUCKET: &str = "graphs";
const BIN: &str = env!("CARGO_BIN_EXE_dgl-partition");

/// `dgl-partition rank` of `url` with exactly the AWS variables `env`,
/// logs at trace: success, all its output, how long it ran.
fn rank_binary(env: &[(String, String)], url: &str) -> (bool, String, Duration) {
    common::rank_with_aws_env(BIN, env, url)
}

fn upload_graph(s3: &S3Server, tmp: &Path) -> String {
    let local = tmp.join("sts");
    write_chunked(&common::homogeneous(), &local, 2, EdgeFormat::Npy).unwrap();
    s3.upload_dir(BUCKET, "sts", &local).unwrap();
    format!("s3://{BUCKET}/sts/metadata.json")
}

#[test]
fn sessions_read_and_an_expired_session_is_named_without_credentials() {
    let s3 = S3Server::start_with_sts(&[BUCKET]).unwrap_or_else(|e| panic!("{e}"));
    let tmp = tempfile::tempdir().unwrap();
    let url = upload_graph(&s3, tmp.path());

    // The static identities keep working with the STS on.
    let (ok, text, _) = rank_binary(&s3.env(&s3.reader), &url);
    assert!(ok, "the reader's keys:\n{text}");

    let session = s3
        .assume_role(&s3.admin, 900)
        .unwrap_or_else(|e| panic!("{e}\n{}", s3.log_tail(20)));
    println!("the server's STS issued {session:?}");
    let (ok, text, took) = rank_binary(&s3.session_env(&session), &url);
    assert!(ok, "the session's keys and token:\n{text}");
    assert!(text.contains("input fetched from object storage"), "{text}");
    println!(
        "a valid session read the graph in {:.2}s",
        took.as_secs_f64()
    );

    // The token is what makes the session's keys valid.
    let (ok, text, _) = rank_binary(&s3.env(&session.keys), &url);
    assert!(!ok && text.contains(&url) && text.contains("403"), "{text}");

    let expired = s3.expired(&session, Duration::from_secs(60)).unwrap();
    let (ok, text, took) = rank_binary(&s3.session_env(&expired), &url);
    assert!(!ok, "an expired session must fail:\n{text}");
    let line = text
        .lines()
        .find(|l| l.contains("failed") || l.contains("rror"))
        .unwrap_or("");
    println!(
        "an expired session failed in {:.2}s: {line}",
        took.as_secs_f64()
    );
    assert!(text.contains(&url), "names {url}:\n{text}");
    assert!(
        text.contains("the server answered 4"),
        "the server's reason:\n{text}"
    );
    // SeaweedFS answers 403 InvalidAccessKeyId (not ExpiredToken): the
    // token's own expiry says why.
    assert!(
        text.contains("the session token (AWS_SESSION_TOKEN) expired 6"),
        "says the session expired (60 s ago):\n{text}"
    );
    let mut secrets = vec![
        s3.admin.access_key.clone(),
        s3.admin.secret_key.clone(),
        session.keys.access_key.clone(),
        session.keys.secret_key.clone(),
    ];
    for token in [&session.session_token, &expired.session_token] {
        secrets.push(token.clone());
        // Any part of the JWT (header, claims, signature) but the header,
        // which is the same for every HS256 token.
        secrets.extend(token.split('.').skip(1).map(String::from));
    }
    for s in &secrets {
        assert!(
            !text.contains(s.as_str()),
            "a credential is in the output:\n{text}"
        );
    }
    assert!(
        took < Duration::from_secs(10),
        "a 4xx is not retried: {took:?}"
    );
}
