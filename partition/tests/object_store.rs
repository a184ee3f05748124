//! The pipeline reading its input from a real S3-compatible server
//! (SeaweedFS, `localkube::s3::S3Server`: built and cached by the test
//! command's setup; without it this test fails naming the command that
//! builds it):
//!
//! - a chunked graph in a bucket partitions to exactly the files the same
//!   graph on disk gives, in one process (partition mode ParMETIS) and as
//!   2 and 3 ranks (DistParMETIS, the in-process exchange), for npy,
//!   Parquet and CSV edge chunks;
//! - each rank fetches at most 1.1 times its share of the chunk bytes plus
//!   the metadata (metadata.json, npy headers, Parquet footers);
//! - a hostile graph in the bucket (an npy header claiming more rows than
//!   its object holds) is refused, naming the object;
//! - the storage faults: a missing object, access denied, a wrong secret
//!   key, each named `s3://bucket/key` with the server's reason, through the
//!   `dgl-partition rank` binary as a worker runs it; its error and its
//!   logs (RUST_LOG=trace) never hold the access key or the secret.
//!
//! One test function: one server for every step, killed when it ends.

#[path = "input_common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dgl_partition::config::{AllParts, OwnPart};
use dgl_partition::exchange::Exchange;
use dgl_partition::exchange::Threads;
use dgl_partition::input::{write_chunked, EdgeFormat, Fetched};
use dgl_partition::{rank, run};
use localkube::s3::{Credentials, S3Server};

const BUCKET: &str = "graphs";
const BIN: &str = env!("CARGO_BIN_EXE_dgl-partition");

/// Every file below `dir` (relative path → bytes).
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn assert_same_files(want: &Path, got: &Path, what: &str) {
    let (w, g) = (files(want), files(got));
    assert_eq!(
        w.keys().collect::<Vec<_>>(),
        g.keys().collect::<Vec<_>>(),
        "{what}: the same files"
    );
    for (name, bytes) in &w {
        assert!(&g[name] == bytes, "{what}: {} differs", name.display());
    }
    assert!(w.keys().any(|k| k.ends_with("graph.dgl")), "{what}");
}

/// `world` ranks on threads; each rank's bytes fetched.
fn ranks(metadata: &Path, out: &Path, world: u32) -> Vec<Fetched> {
    let cfg = common::chunked_config(metadata, out, OwnPart::default());
    Threads::run(world, |ex| {
        let r = rank::run(ex, &cfg)?;
        assert_eq!(r.parts().len(), 1, "rank {}", ex.rank());
        Ok(r.fetched)
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

/// The items of `0..n` rank `r` of `w` takes (numpy's array_split).
fn split_even(n: u64, r: u64, w: u64) -> std::ops::Range<u64> {
    let (base, extra) = (n / w, n % w);
    let start = r * base + r.min(extra);
    start..start + base + u64::from(r < extra)
}

/// Bytes of the data files rank `r` of `w` owns (chunk k of every list:
/// the writer aligns features with their nodes' and edges' chunks), and
/// the number of files listed.
fn share_bytes(dir: &Path, r: u64, w: u64) -> (u64, u64) {
    let meta = common::load_json(&dir.join("metadata.json"));
    let mut lists = Vec::new();
    for e in meta["edges"].as_object().unwrap().values() {
        lists.push(e["data"].clone());
    }
    for key in ["node_data", "edge_data"] {
        for feats in meta[key].as_object().unwrap().values() {
            for f in feats.as_object().unwrap().values() {
                lists.push(f["data"].clone());
            }
        }
    }
    let (mut bytes, mut count) = (0, 0);
    for list in lists {
        let list = list.as_array().unwrap();
        count += list.len() as u64;
        for k in split_even(list.len() as u64, r, w) {
            let f = dir.join(list[k as usize].as_str().unwrap());
            bytes += std::fs::metadata(f).unwrap().len();
        }
    }
    (bytes, count)
}

/// The graph, on disk and under `s3://graphs/<prefix>/`, partitions alike
/// in one process and as 2 and 3 ranks; the ranks fetch only their share.
fn same_as_local(s3: &S3Server, tmp: &Path, format: EdgeFormat, prefix: &str) {
    let graph = dgl_partition::rmat::bidirected_graph(6000, 40_000, 16, 3);
    let local = tmp.join(prefix);
    let metadata = write_chunked(&graph, &local, 6, format).unwrap();
    let uploaded = s3.upload_dir(BUCKET, prefix, &local).unwrap();
    let url = PathBuf::from(format!("s3://{BUCKET}/{prefix}/metadata.json"));
    let meta_len = std::fs::metadata(&metadata).unwrap().len();

    let (want, got) = (
        tmp.join(format!("{prefix}-want")),
        tmp.join(format!("{prefix}-got")),
    );
    run::run(&common::chunked_config(
        &metadata,
        &want,
        AllParts { num_parts: 3 },
    ))
    .unwrap();
    let report = run::run(&common::chunked_config(
        &url,
        &got,
        AllParts { num_parts: 3 },
    ))
    .unwrap();
    assert_same_files(&want, &got, &format!("{prefix}: one process"));
    assert!(
        report.fetched.bytes >= uploaded - meta_len,
        "{prefix}: {:?}",
        report.fetched
    );
    let line = report
        .lines()
        .into_iter()
        .find(|l| l.contains("object storage"));
    assert!(line.is_some(), "{prefix}: the report says what was fetched");
    println!(
        "{prefix}: one process fetched {} bytes in {} requests ({} bytes uploaded)",
        report.fetched.bytes, report.fetched.requests, uploaded
    );

    for world in [2u32, 3] {
        let want = tmp.join(format!("{prefix}-want{world}"));
        let got = tmp.join(format!("{prefix}-got{world}"));
        ranks(&metadata, &want, world);
        let fetched = ranks(&url, &got, world);
        assert_same_files(&want, &got, &format!("{prefix}: {world} ranks"));
        for (r, f) in fetched.iter().enumerate() {
            let (share, listed) = share_bytes(&local, r as u64, u64::from(world));
            // Headers and footers every rank reads: 512 bytes per listed
            // file (an npy header is about 140).
            let allowance = meta_len + 512 * listed;
            let limit = share + share / 10 + allowance;
            println!(
                "{prefix}: rank {r} of {world} fetched {} bytes in {} requests; share {share} \
                 bytes (+10% + {allowance} of metadata = {limit})",
                f.bytes, f.requests
            );
            assert!(f.bytes >= share, "{prefix}: rank {r} read its whole share");
            assert!(
                f.bytes <= limit,
                "{prefix}: rank {r} of {world} fetched too much"
            );
        }
    }
}

/// An npy feature chunk whose header claims more rows than the object
/// holds is refused, naming the object.
fn hostile_header(s3: &S3Server, tmp: &Path) {
    let graph = common::homogeneous();
    let local = tmp.join("hostile");
    let metadata = write_chunked(&graph, &local, 2, EdgeFormat::Npy).unwrap();
    let meta = common::load_json(&metadata);
    let rel = meta["node_data"]["_N"]["feat"]["data"][1]
        .as_str()
        .unwrap()
        .to_string();
    let path = local.join(&rel);
    let mut bytes = std::fs::read(&path).unwrap();
    // The rows' first digit becomes 9: the header keeps its length.
    let needle = b"'shape': (";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
        + needle.len();
    assert!(bytes[at].is_ascii_digit() && bytes[at] != b'9');
    bytes[at] = b'9';
    std::fs::write(&path, &bytes).unwrap();
    s3.upload_dir(BUCKET, "hostile", &local).unwrap();
    let url = PathBuf::from(format!("s3://{BUCKET}/hostile/metadata.json"));
    let out = tmp.join("hostile-out");
    let e = run::run(&common::chunked_config(
        &url,
        &out,
        AllParts { num_parts: 2 },
    ))
    .unwrap_err()
    .to_string();
    let object = format!("s3://{BUCKET}/hostile/{rel}");
    assert!(e.contains(&object) && e.contains("header"), "{e}");
    assert!(
        e.contains("needs") && e.contains("bytes after the header"),
        "{e}"
    );
    println!("hostile header refused: {e}");
}

/// `dgl-partition rank` of `url` as `who` (secret replaced by `secret`
/// when given), logs at trace; its exit status and all its output.
fn rank_binary(
    s3: &S3Server,
    url: &str,
    who: &Credentials,
    secret: Option<&str>,
) -> (bool, String) {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = common::rank_command(BIN, url, out.path());
    for (k, v) in s3.env(who) {
        cmd.env(k, v);
    }
    if let Some(s) = secret {
        cmd.env("AWS_SECRET_ACCESS_KEY", s);
    }
    common::output_text(&cmd.output().unwrap())
}

/// The storage faults, each named with the object and the server's reason,
/// never with a credential.
fn storage_faults(s3: &S3Server, tmp: &Path) {
    let graph = common::homogeneous();
    let local = tmp.join("faults");
    let metadata = write_chunked(&graph, &local, 2, EdgeFormat::Parquet).unwrap();
    s3.upload_dir(BUCKET, "faults", &local).unwrap();
    let meta = common::load_json(&metadata);
    let url = format!("s3://{BUCKET}/faults/metadata.json");
    let wrong = "wrongSecretKey0123456789abcdefghijklmnopq";
    let secrets = [
        &s3.admin.access_key,
        &s3.admin.secret_key,
        &s3.reader.access_key,
        &s3.reader.secret_key,
        &s3.outsider.access_key,
        &s3.outsider.secret_key,
    ];
    let no_secret = |text: &str, case: &str| {
        for s in secrets.iter().map(|s| s.as_str()).chain([wrong]) {
            assert!(
                !text.contains(s),
                "{case}: a credential is in the output:\n{text}"
            );
        }
    };

    // The reader reads the whole graph: the binary works against the bucket.
    let (ok, text) = rank_binary(s3, &url, &s3.reader, None);
    assert!(ok, "the reader partitions the graph:\n{text}");
    assert!(text.contains("input fetched from object storage"), "{text}");
    // The logs were captured (RUST_LOG=trace: the HTTP client's too).
    assert!(text.contains("TRACE") && text.contains("INFO"), "{text}");
    println!(
        "the reader's run: {} lines of output and logs",
        text.lines().count()
    );
    no_secret(&text, "success");

    // (case, input, identity, secret instead of its own, what it says)
    type Fault<'a> = (
        &'a str,
        String,
        &'a Credentials,
        Option<&'a str>,
        &'a [&'a str],
    );
    let cases: [Fault; 4] = [
        (
            "missing metadata.json",
            format!("s3://{BUCKET}/faults/nothing-here/metadata.json"),
            &s3.reader,
            None,
            &["404", "NoSuchKey"],
        ),
        (
            "access denied",
            url.clone(),
            &s3.outsider,
            None,
            &["403", "AccessDenied"],
        ),
        (
            "wrong secret key",
            url.clone(),
            &s3.reader,
            Some(wrong),
            &["403", "SignatureDoesNotMatch"],
        ),
        (
            "missing chunk",
            url.clone(),
            &s3.reader,
            None,
            &["missing", "404", "NoSuchKey"],
        ),
    ];
    for (case, input, who, secret, pieces) in cases {
        let mut object = input.clone();
        if case == "missing chunk" {
            let rel = meta["edges"]["_N:_E:_N"]["data"][1].as_str().unwrap();
            object = format!("s3://{BUCKET}/faults/{rel}");
            delete(s3, &format!("faults/{rel}"));
        }
        let (ok, text) = rank_binary(s3, &input, who, secret);
        assert!(!ok, "{case}: must fail:\n{text}");
        assert!(text.contains(&object), "{case}: names {object}:\n{text}");
        for p in pieces {
            assert!(text.contains(p), "{case}: says {p:?}:\n{text}");
        }
        no_secret(&text, case);
        let line = text.lines().find(|l| l.contains("failed")).unwrap_or("");
        println!("{case}: {line}");
    }
}

fn delete(s3: &S3Server, key: &str) {
    use object_store::ObjectStoreExt;
    let store = s3.store(BUCKET, &s3.admin).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(store.delete(&object_store::path::Path::from(key)))
        .unwrap();
}

#[test]
fn graphs_in_a_bucket_partition_as_on_disk_and_storage_faults_are_named() {
    let s3 = S3Server::start(&[BUCKET]).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "SeaweedFS answered S3 in {:.2}s, {} MiB resident",
        s3.start_time.as_secs_f64(),
        s3.rss_bytes().unwrap_or(0) >> 20
    );
    // The in-process readers take the usual variables (this is the only
    // test of the binary: nothing else reads the environment meanwhile).
    for (k, v) in s3.env(&s3.reader) {
        std::env::set_var(k, v);
    }
    let tmp = tempfile::tempdir().unwrap();
    same_as_local(&s3, tmp.path(), EdgeFormat::Npy, "npy");
    same_as_local(&s3, tmp.path(), EdgeFormat::Parquet, "parquet");
    same_as_local(&s3, tmp.path(), EdgeFormat::Csv, "csv");
    hostile_header(&s3, tmp.path());
    storage_faults(&s3, tmp.path());
    println!(
        "SeaweedFS at the end: {} MiB resident",
        s3.rss_bytes().unwrap_or(0) >> 20
    );
}
