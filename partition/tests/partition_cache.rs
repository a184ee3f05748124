//! The partition cache (`dgl_partition::cache`) against a real S3 server
//! (SeaweedFS, `localkube::s3::S3Server`, built and cached by the test
//! command's setup; without it this test fails naming the command that
//! builds it):
//!
//! - a graph partitioned into a local folder is uploaded under its key;
//!   lookup finds it; part 1 fetched into a fresh folder is byte for byte
//!   the partition JSON and `part1/` of the original, nothing else;
//! - the key of an input in a bucket (sizes and ETags) is stable and
//!   changes when a chunk is replaced; a changed setting is a miss; an
//!   entry whose manifest is gone is a miss;
//! - a corrupted cached file (other bytes, same or other size) makes
//!   fetch_part fail naming the object and both digests, and leaves no
//!   file behind; a hostile manifest (`../x`, an absurd size, not JSON) is
//!   an error naming manifest.json; an upload without write access fails
//!   naming the object and the server's reason;
//! - the `dgl-partition cache fetch|upload` command as a worker runs it:
//!   part 2 fetched as the reader, a miss (exit 3), a corrupted object
//!   (exit 1, named), an upload lookup then finds;
//! - no error, output or log line (trace level, in-process and the
//!   binary's) holds a credential.
//!
//! One test function: one server for every step, killed when it ends.

#[path = "input_common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dgl_partition::cache::{self, Cache, Key, KeySettings, Manifest, Owner};
use dgl_partition::config::AllParts;
use dgl_partition::input::{write_chunked, EdgeFormat, Source};
use dgl_partition::run;
use localkube::s3::{Credentials, S3Server};

const BUCKET: &str = "partcache";
const INPUT: &str = "graphs";
const CACHE: &str = "s3://partcache/jobs/cache/";
const BIN: &str = env!("CARGO_BIN_EXE_dgl-partition");

/// `dgl-partition cache <args>` as `who`, logs at trace: its exit code and
/// all its output.
fn binary(s3: &S3Server, who: &Credentials, args: &[&str]) -> (i32, String) {
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("cache").args(args).env("RUST_LOG", "trace");
    for (k, v) in s3.env(who) {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code().unwrap_or(-1), text)
}

/// The `dgl-partition cache` command: a worker's fetch of part 2 as the
/// reader, a miss (exit 3), an upload as the admin that lookup then finds.
fn command(s3: &S3Server, cache: &Cache, key: &Key, out: &Path, tmp: &Path) -> String {
    let dest = tmp.join("cli-part2");
    let (code, text) = binary(s3, &s3.reader, &fetch_args(key.as_str(), "2", None));
    // A usage error is clap's exit status 2, a miss 3.
    assert!(
        code == 2 && text.contains("--out"),
        "--out is required:\n{text}"
    );
    let d = dest.to_str().unwrap();
    let args = fetch_args(key.as_str(), "2", Some(d));
    let (code, mut all) = binary(s3, &s3.reader, &args);
    assert_eq!(code, 0, "{all}");
    assert!(
        all.contains("fetched part 2 of entry") && all.contains("verified"),
        "{all}"
    );
    assert!(all.contains("TRACE"), "the logs were captured:\n{all}");
    let want: BTreeMap<String, Vec<u8>> = common::files(out)
        .into_iter()
        .filter(|(p, _)| p == "g.json" || p.starts_with("part2/"))
        .collect();
    assert!(
        common::files(&dest) == want,
        "the command's part 2 is the original's"
    );

    let absent = "e".repeat(64);
    let args = fetch_args(&absent, "0", Some(d));
    let (code, text) = binary(s3, &s3.reader, &args);
    assert_eq!(code, 3, "a miss:\n{text}");
    assert!(text.contains("no entry"), "{text}");
    all.push_str(&text);

    let new = "c".repeat(64);
    let o = out.to_str().unwrap();
    let args = ["upload", "--cache", CACHE, "--key", &new, "--dir", o];
    let (code, text) = binary(s3, &s3.admin, &args);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("uploaded entry") && text.contains("3 parts"),
        "{text}"
    );
    all.push_str(&text);
    let m = cache
        .lookup(&Key::from_hex(&new).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(m.files.len(), common::files(out).len());
    println!(
        "the command: {} lines of output and logs",
        all.lines().count()
    );
    all
}

/// `dgl-partition cache fetch` of `key`'s `part` into `out` (none: the
/// usage error).
fn fetch_args<'a>(key: &'a str, part: &'a str, out: Option<&'a str>) -> Vec<&'a str> {
    let mut args = vec!["fetch", "--cache", CACHE, "--key", key, "--part", part];
    args.extend(out.map(|o| ["--out", o]).into_iter().flatten());
    args
}

/// The log lines of this process (every target at trace level).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn install() -> Logs {
        let logs = Logs::default();
        let writer = logs.clone();
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(sub).unwrap();
        logs
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Puts `bytes` at `key` of the cache's bucket (as the admin).
fn put(s3: &S3Server, key: &str, bytes: Vec<u8>) {
    s3.put(BUCKET, key, bytes).unwrap();
}

fn delete(s3: &S3Server, bucket: &str, key: &str) {
    use object_store::ObjectStoreExt;
    let store = s3.store(bucket, &s3.admin).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(store.delete(&object_store::path::Path::from(key)))
        .unwrap();
}

/// The object key of `rel` in entry `key`.
fn object(key: &Key, rel: &str) -> String {
    format!("jobs/cache/{key}/{rel}")
}

/// Upload, lookup and fetch of part 1: the same bytes as the original.
fn round_trip(cache: &Cache, key: &Key, out: &Path, tmp: &Path) -> Manifest {
    assert_eq!(cache.lookup(key).unwrap(), None, "nothing cached yet");
    let uploaded = cache.upload(key, out).unwrap();
    assert_eq!(uploaded.num_parts, 3);
    let owner = |p: &str| uploaded.files.iter().find(|f| f.path == p).map(|f| f.part);
    assert_eq!(owner("g.json"), Some(Owner::Shared));
    assert_eq!(owner("part1/graph.dgl"), Some(Owner::Part(1)));
    assert_eq!(owner("part1/large.bin"), Some(Owner::Part(1)));
    assert!(
        uploaded.files.iter().any(|f| f.part == Owner::Other),
        "the assignment is kept"
    );
    let all = common::files(out);
    assert_eq!(uploaded.files.len(), all.len(), "every file is listed");

    let hit = cache.lookup(key).unwrap().expect("a hit after the upload");
    assert_eq!(hit, uploaded);
    let dest = tmp.join("fetched1");
    let bytes = cache.fetch_part(&hit, 1, &dest).unwrap();
    let want: BTreeMap<String, Vec<u8>> = all
        .into_iter()
        .filter(|(p, _)| p == "g.json" || p.starts_with("part1/"))
        .collect();
    let got = common::files(&dest);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    assert!(got == want, "part 1 fetched is byte for byte the original");
    assert_eq!(bytes, want.values().map(|v| v.len() as u64).sum::<u64>());
    println!(
        "uploaded {} files ({} bytes); part 1 fetched: {} files, {bytes} bytes",
        uploaded.files.len(),
        uploaded.total_bytes(),
        got.len()
    );
    hit
}

/// Other bytes at one cached file: fetch_part names it and keeps nothing.
fn corrupted(
    logs: &mut String,
    s3: &S3Server,
    cache: &Cache,
    hit: &Manifest,
    key: &Key,
    out: &Path,
    tmp: &Path,
) {
    for (rel, same_size) in [("part1/graph.dgl", true), ("part1/node_feat.dgl", false)] {
        let entry = hit.files.iter().find(|f| f.path == rel).unwrap();
        let mut bytes = vec![0u8; entry.size as usize];
        if !same_size {
            bytes.push(1);
        }
        put(s3, &object(key, rel), bytes.clone());
        let dest = tmp.join(format!("corrupt-{same_size}"));
        let e = cache.fetch_part(hit, 1, &dest).unwrap_err().to_string();
        let name = format!("s3://{BUCKET}/{}", object(key, rel));
        assert!(e.contains(&name), "{e}");
        // The command as a worker runs it: exit 1, the object named.
        let d = dest.to_str().unwrap();
        let args = [
            "fetch",
            "--cache",
            CACHE,
            "--key",
            key.as_str(),
            "--part",
            "1",
            "--out",
            d,
        ];
        let (code, text) = binary(s3, &s3.reader, &args);
        assert!(code == 1 && text.contains(&name), "{text}");
        logs.push_str(&text);
        if same_size {
            let actual = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
            assert!(e.contains(&entry.sha256) && e.contains(&actual), "{e}");
            assert!(e.contains("corrupted"), "{e}");
        } else {
            assert!(e.contains("the manifest says"), "{e}");
        }
        let left = common::files(&dest.join("part1"));
        assert!(
            !left
                .keys()
                .any(|k| Some(k.as_str()) == rel.strip_prefix("part1/") || k.contains("partial")),
            "{rel}: no corrupted or partial file is left: {:?}",
            left.keys().collect::<Vec<_>>()
        );
        println!("corrupted {rel}: {e}");
        // Parts that do not hold the file still fetch.
        assert!(cache
            .fetch_part(hit, 0, &tmp.join(format!("p0-{same_size}")))
            .is_ok());
        put(s3, &object(key, rel), std::fs::read(out.join(rel)).unwrap());
    }
    // Restored, part 1 fetches again.
    assert!(cache.fetch_part(hit, 1, &tmp.join("restored")).is_ok());
}

/// Manifests that lie: each an error naming manifest.json.
fn hostile(s3: &S3Server, cache: &Cache, hit: &Manifest, key: &Key, tmp: &Path) {
    let name = format!("s3://{BUCKET}/{}", object(key, "manifest.json"));
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit); 3] = [
        ("../x", |m| m["files"][1]["path"] = "../x".into()),
        ("size", |m| m["files"][1]["size"] = u64::MAX.into()),
        ("absolute", |m| m["files"][0]["path"] = "/etc/passwd".into()),
    ];
    for (what, edit) in cases {
        let mut m = serde_json::to_value(hit).unwrap();
        edit(&mut m);
        put(
            s3,
            &object(key, "manifest.json"),
            serde_json::to_vec(&m).unwrap(),
        );
        let e = cache.lookup(key).unwrap_err().to_string();
        assert!(e.contains(&name) && e.contains("files["), "{what}: {e}");
        println!("hostile manifest ({what}): {e}");
    }
    // A manifest built or changed by a caller is checked by fetch_part too.
    let mut bad = hit.clone();
    bad.files[1].path = "../escaped".into();
    let e = cache
        .fetch_part(&bad, 1, &tmp.join("hostile/dest"))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&name) && e.contains("\"..\""), "{e}");
    assert!(!tmp.join("hostile/escaped").exists() && !tmp.join("hostile/dest").exists());
    put(
        s3,
        &object(key, "manifest.json"),
        b"<html>not json".to_vec(),
    );
    let e = cache.lookup(key).unwrap_err().to_string();
    assert!(
        e.contains(&name) && e.contains("not a partition cache manifest"),
        "{e}"
    );
}

/// The key of the graph in a bucket: stable, and another when a chunk is
/// replaced.
fn object_input_key(s3: &S3Server, local: &Path, settings: &KeySettings) {
    s3.upload_dir(INPUT, "g", local).unwrap();
    let source = Source::Chunked {
        metadata: PathBuf::from(format!("s3://{INPUT}/g/metadata.json")),
    };
    let k1 = cache::key(&source, settings).unwrap();
    assert_eq!(cache::key(&source, settings).unwrap(), k1, "stable");
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(local.join("metadata.json")).unwrap()).unwrap();
    let rel = meta["edges"]["_N:_E:_N"]["data"][0].as_str().unwrap();
    let mut bytes = std::fs::read(local.join(rel)).unwrap();
    bytes.push(0);
    s3.put(INPUT, &format!("g/{rel}"), bytes).unwrap();
    assert_ne!(
        cache::key(&source, settings).unwrap(),
        k1,
        "a replaced chunk"
    );
    delete(s3, INPUT, &format!("g/{rel}"));
    let e = cache::key(&source, settings).unwrap_err().to_string();
    assert!(
        e.contains(&format!("s3://{INPUT}/g/{rel}")) && e.contains("404"),
        "{e}"
    );
}

#[test]
fn partitions_are_cached_fetched_verified_and_refused_when_corrupted() {
    let s3 = S3Server::start(&[BUCKET, INPUT]).unwrap_or_else(|e| panic!("{e}"));
    let logs = Logs::install();
    // The cache writes: the admin's keys (this is the only test of the
    // binary: nothing else reads the environment meanwhile).
    for (k, v) in s3.env(&s3.admin) {
        std::env::set_var(k, v);
    }
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("chunked");
    let graph = dgl_partition::rmat::bidirected_graph(3000, 20_000, 8, 5);
    let metadata = write_chunked(&graph, &local, 3, EdgeFormat::Parquet).unwrap();
    let out = tmp.path().join("out");
    let cfg = common::chunked_config(&metadata, &out, AllParts { num_parts: 3 });
    run::run(&cfg).unwrap();
    // A file above the single-PUT size: uploaded in parts, fetched as a
    // stream of chunks.
    let large: Vec<u8> = (0..12u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(out.join("part1/large.bin"), large).unwrap();

    let settings = KeySettings::of_run(&cfg, 3, false);
    let key = cache::key(&cfg.source, &settings).unwrap();
    let cache = Cache::new(CACHE).unwrap();
    let hit = round_trip(&cache, &key, &out, tmp.path());

    // A changed setting is another key: a miss.
    let mut other = settings.clone();
    other.seed = 8;
    let other_key = cache::key(&cfg.source, &other).unwrap();
    assert_ne!(other_key, key);
    assert_eq!(
        cache.lookup(&other_key).unwrap(),
        None,
        "a changed setting misses"
    );
    object_input_key(&s3, &local, &settings);

    let mut outputs = command(&s3, &cache, &key, &out, tmp.path());
    corrupted(&mut outputs, &s3, &cache, &hit, &key, &out, tmp.path());
    hostile(&s3, &cache, &hit, &key, tmp.path());
    // Without its manifest (an upload cut short) the entry is a miss.
    delete(&s3, BUCKET, &object(&key, "manifest.json"));
    assert_eq!(cache.lookup(&key).unwrap(), None, "no manifest, no hit");

    // The reader may not write: the upload fails naming the object.
    for (k, v) in s3.env(&s3.reader) {
        std::env::set_var(k, v);
    }
    let e = cache.upload(&other_key, &out).unwrap_err().to_string();
    assert!(
        e.contains(&format!("s3://{BUCKET}/jobs/cache/{other_key}/")),
        "{e}"
    );
    // (The earlier manifest's delete is refused first: a bulk delete,
    // whose answer is 200 with the refusal inside.)
    assert!(e.contains("AccessDenied"), "{e}");
    println!("upload as the reader: {e}");
    let secrets = [
        &s3.admin.access_key,
        &s3.admin.secret_key,
        &s3.reader.access_key,
        &s3.reader.secret_key,
    ];
    let text = logs.text() + &outputs;
    assert!(
        text.contains("partitions uploaded to the partition cache"),
        "{text}"
    );
    assert!(
        text.contains("partitions fetched from the partition cache"),
        "{text}"
    );
    for s in secrets {
        assert!(!text.contains(s.as_str()), "a credential is in the logs");
        assert!(!e.contains(s.as_str()), "a credential is in the error");
    }
    println!("{} log lines, no credential in them", text.lines().count());
}
