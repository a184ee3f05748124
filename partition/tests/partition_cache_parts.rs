//! The partition cache filled part by part, as partition mode DistParMETIS
//! does (`Cache::begin`, each worker's `Cache::upload_part`, the launcher's
//! `Cache::commit`), against a real S3 server (SeaweedFS,
//! `localkube::s3::S3Server`, built and cached by the test command's setup):
//!
//! - 3 ranks (the in-process exchange) each write their part into a folder
//!   of their own, as on 3 workers; each folder's part is uploaded from it
//!   (folder 0 also the partition JSON and the assignment);
//! - until the commit the entry is a miss; a commit missing a part, or
//!   listing a size the bucket does not hold, is refused and leaves a miss;
//! - the committed entry is a hit whose every part fetches byte for byte
//!   as its rank wrote it (the partition JSON and `part<i>/`, nothing
//!   else); a flipped byte in a cached part is refused naming the object;
//! - the ranks' key is not the single process's (the driver is in it), a
//!   changed seed is a miss; `begin` of a stored key makes it a miss;
//! - `upload_part` refuses a folder without its part, a part past
//!   `num_parts`, a partition JSON naming another count.
//!
//! One test function: one server for every step, killed when it ends.

#[path = "input_common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dgl_partition::cache::{self, Cache, FileEntry, Key, KeySettings, Owner};
use dgl_partition::config::{AllParts, Config, OwnPart};
use dgl_partition::exchange::{Exchange, Threads};
use dgl_partition::input::{write_chunked, EdgeFormat};
use dgl_partition::rank;
use localkube::s3::S3Server;

const BUCKET: &str = "partcache";
const CACHE: &str = "s3://partcache/dist/cache";
const RANKS: u32 = 3;

/// Each rank writes its part into `<workers>/w<rank>`, as on its worker.
fn partition_on_workers(cfg: &Config<OwnPart>, workers: &Path) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = (0..RANKS).map(|r| workers.join(format!("w{r}"))).collect();
    let results = Threads::run(RANKS, |ex| {
        let mut mine = cfg.clone();
        mine.out_dir = dirs[ex.rank() as usize].clone();
        rank::run(ex, &mine)
    });
    for r in results {
        r.unwrap();
    }
    for (r, d) in dirs.iter().enumerate() {
        let parts: Vec<Owner> = common::files(d)
            .into_keys()
            .filter_map(|p| Owner::of_path(&p))
            .filter(|o| matches!(o, Owner::Part(_)))
            .collect();
        assert!(
            !parts.is_empty() && parts.iter().all(|o| *o == Owner::Part(r as u32)),
            "worker {r} holds only its part: {parts:?}"
        );
    }
    dirs
}

/// Each worker's upload; what part 0 and part 1 report is checked.
fn upload_parts(cache: &Cache, key: &Key, dirs: &[PathBuf]) -> Vec<Vec<FileEntry>> {
    let uploaded: Vec<Vec<FileEntry>> = dirs
        .iter()
        .enumerate()
        .map(|(r, d)| cache.upload_part(key, d, r as u32, RANKS, r == 0).unwrap())
        .collect();
    let owners = |r: usize| -> Vec<Owner> { uploaded[r].iter().map(|f| f.part).collect() };
    assert!(
        owners(0).contains(&Owner::Shared),
        "worker 0 sends the JSON"
    );
    assert!(owners(0).contains(&Owner::Other), "and the assignment");
    assert!(owners(0).contains(&Owner::Part(0)));
    for r in 1..RANKS as usize {
        assert!(
            owners(r).iter().all(|o| *o == Owner::Part(r as u32)),
            "worker {r} sends only its part: {:?}",
            owners(r)
        );
        assert!(!owners(r).is_empty());
    }
    // Every file of a worker's part, with the SHA-256 of its bytes.
    for (r, d) in dirs.iter().enumerate() {
        let want = common::files(d);
        for f in &uploaded[r] {
            let bytes = &want[&f.path];
            let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes));
            assert_eq!(
                (f.size, f.sha256.as_str()),
                (bytes.len() as u64, sha.as_str())
            );
        }
    }
    uploaded
}

/// Commits that must be refused, each leaving the entry a miss.
fn refused_commits(cache: &Cache, key: &Key, uploaded: &[Vec<FileEntry>]) {
    let two: Vec<FileEntry> = uploaded[..2].concat();
    let e = cache.commit(key, RANKS, two).unwrap_err().to_string();
    assert!(
        e.contains("no file of part 2") && e.contains("manifest.json"),
        "{e}"
    );
    let mut lying = uploaded.concat();
    let f = lying.iter_mut().find(|f| f.part == Owner::Part(2)).unwrap();
    f.size += 1;
    let object = format!("s3://{BUCKET}/dist/cache/{key}/{}", f.path);
    let e = cache.commit(key, RANKS, lying).unwrap_err().to_string();
    assert!(e.contains(&object) && e.contains("not committed"), "{e}");
    assert_eq!(
        cache.lookup(key).unwrap(),
        None,
        "a refused commit is a miss"
    );
    println!("refused commits: a missing part, a size the bucket does not hold ({e})");
}

/// Every part of the hit fetches as its rank wrote it; a flipped byte in
/// part 1 is refused naming the object.
fn fetch_every_part(s3: &S3Server, cache: &Cache, key: &Key, dirs: &[PathBuf], tmp: &Path) {
    let hit = cache.lookup(key).unwrap().expect("a hit once committed");
    assert_eq!(hit.num_parts, RANKS);
    for (r, d) in dirs.iter().enumerate() {
        let dest = tmp.join(format!("fetched{r}"));
        let bytes = cache.fetch_part(&hit, r as u32, &dest).unwrap();
        let want: BTreeMap<String, Vec<u8>> = common::files(d)
            .into_iter()
            .filter(|(p, _)| p == "g.json" || p.starts_with(&format!("part{r}/")))
            .collect();
        assert!(
            common::files(&dest) == want,
            "part {r} fetched is the one its rank wrote"
        );
        assert_eq!(bytes, want.values().map(|v| v.len() as u64).sum::<u64>());
    }
    let f = hit.files.iter().find(|f| f.part == Owner::Part(1)).unwrap();
    let rel = format!("dist/cache/{key}/{}", f.path);
    let mut bytes = s3.get(BUCKET, &rel).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    s3.put(BUCKET, &rel, bytes).unwrap();
    let dest = tmp.join("corrupt");
    let e = cache.fetch_part(&hit, 1, &dest).unwrap_err().to_string();
    assert!(
        e.contains(&format!("s3://{BUCKET}/{rel}")) && e.contains("corrupted"),
        "{e}"
    );
    assert!(
        !dest.join(&f.path).exists(),
        "the corrupted file is not kept"
    );
    println!("a flipped byte in part 1: {e}");
}

/// What `upload_part` refuses before sending anything.
fn refused_uploads(cache: &Cache, key: &Key, dirs: &[PathBuf]) {
    let e = cache
        .upload_part(key, &dirs[1], 0, RANKS, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("part0") && e.contains("missing or empty"), "{e}");
    let e = cache
        .upload_part(key, &dirs[0], RANKS, RANKS, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("part 3 of an entry of 3 parts"), "{e}");
    let e = cache
        .upload_part(key, &dirs[0], 0, 4, true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("names 3 parts, expected 4"), "{e}");
}

#[test]
fn parts_uploaded_by_their_workers_commit_to_one_entry() {
    let s3 = S3Server::start(&[BUCKET]).unwrap_or_else(|e| panic!("{e}"));
    for (k, v) in s3.env(&s3.admin) {
        std::env::set_var(k, v);
    }
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("chunked");
    let graph = dgl_partition::rmat::bidirected_graph(3000, 20_000, 8, 5);
    let metadata = write_chunked(&graph, &local, 3, EdgeFormat::Parquet).unwrap();
    let cfg = common::chunked_config(&metadata, &tmp.path().join("unused"), OwnPart::default());
    let dirs = partition_on_workers(&cfg, &tmp.path().join("workers"));

    let key = cache::key(&cfg.source, &KeySettings::of_ranks(&cfg, RANKS, false)).unwrap();
    let single = common::chunked_config(&metadata, tmp.path(), AllParts { num_parts: RANKS });
    let single_key = cache::key(&single.source, &KeySettings::of_run(&single, RANKS, false));
    assert_ne!(single_key.unwrap(), key, "the driver is in the key");
    let cache = Cache::new(CACHE).unwrap();
    cache.begin(&key).unwrap();
    let uploaded = upload_parts(&cache, &key, &dirs);
    assert_eq!(cache.lookup(&key).unwrap(), None, "a miss until committed");
    refused_commits(&cache, &key, &uploaded);
    let m = cache.commit(&key, RANKS, uploaded.concat()).unwrap();
    assert_eq!(m.files.len(), uploaded.iter().map(Vec::len).sum::<usize>());
    println!(
        "committed {} files ({} bytes) uploaded by {RANKS} workers",
        m.files.len(),
        m.total_bytes()
    );
    fetch_every_part(&s3, &cache, &key, &dirs, tmp.path());

    let mut seeded = KeySettings::of_ranks(&cfg, RANKS, false);
    seeded.seed += 1;
    let other = cache::key(&cfg.source, &seeded).unwrap();
    assert_ne!(other, key);
    assert_eq!(cache.lookup(&other).unwrap(), None, "a changed seed misses");
    refused_uploads(&cache, &key, &dirs);
    // A new upload of the key begins by making it a miss.
    cache.begin(&key).unwrap();
    assert_eq!(cache.lookup(&key).unwrap(), None, "begun again: a miss");
}
