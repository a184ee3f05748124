//! `cargo xtask bench partition --from-bucket`: the same chunked graph read
//! from a real S3 server (SeaweedFS, `localkube::s3::S3Server`) against
//! local disk, in the same run.
//!
//! After the local-disk rows, the graph's `chunked/` folder is uploaded to a
//! fresh server as `s3://bench/rmat/` and dglrun (partition mode ParMETIS)
//! and the DistParMETIS ranks run again on `s3://bench/rmat/metadata.json`,
//! as the reader identity (the environment `S3Server::env` gives; mpirun
//! passes it to the ranks with `-x`). DGL is not run: it cannot read S3.
//!
//! Per process (the single one, or each rank) the comparison gives: wall
//! time, the read stage, peak RSS, the bytes and requests its report says it
//! fetched from object storage, and those bytes against its share of the
//! input. The share is the one the reader takes: of every list of data
//! files in metadata.json (edges, node and edge features), the chunks
//! `split_even(list length, rank, ranks)` (numpy's array_split, as
//! `partition/src/input` and `partition/tests/object_store.rs` define it);
//! the single process's share is every file. The goal is at most
//! 1.1 × the share plus metadata (metadata.json and 512 bytes of npy header
//! or Parquet footer per listed file, the test's allowance): reported,
//! not asserted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;

const BUCKET: &str = "bench";
const PREFIX: &str = "rmat";

/// The running server holding the graph (killed when dropped).
pub(super) struct Bucket {
    server: localkube::s3::S3Server,
    uploaded: u64,
    upload_s: f64,
}

impl Bucket {
    /// Builds SeaweedFS if it is not cached, starts it and uploads the
    /// chunked graph in `chunked`.
    pub(super) fn start(chunked: &Path) -> Result<Bucket> {
        eprintln!("==> SeaweedFS (built from the Go module proxy once, cached)");
        localkube::ensure_tool(localkube::GoTool::SeaweedFs)
            .context("building SeaweedFS's weed")?;
        let server = localkube::s3::S3Server::start(&[BUCKET]).context("starting the S3 server")?;
        eprintln!(
            "==> uploading {} to s3://{BUCKET}/{PREFIX}/",
            chunked.display()
        );
        let started = Instant::now();
        let uploaded = server
            .upload_dir(BUCKET, PREFIX, chunked)
            .with_context(|| format!("uploading {}", chunked.display()))?;
        Ok(Bucket {
            server,
            uploaded,
            upload_s: started.elapsed().as_secs_f64(),
        })
    }

    /// The input URL the tools are given.
    fn url() -> PathBuf {
        PathBuf::from(format!("s3://{BUCKET}/{PREFIX}/metadata.json"))
    }

    /// The environment a reader of the bucket needs (endpoint, keys).
    fn env(&self) -> Vec<(String, String)> {
        self.server.env(&self.server.reader)
    }

    /// The server's resident memory now.
    fn rss(&self) -> Option<u64> {
        self.server.rss_bytes()
    }
}

/// Where the pipelines read the chunked graph: `metadata.json` on disk, or
/// in the bucket with the environment that reaches it.
pub(super) struct Input {
    pub(super) metadata: PathBuf,
    pub(super) env: Vec<(String, String)>,
    bucket: bool,
}

impl Input {
    /// The graph in `chunked` on disk, or in `bucket`.
    pub(super) fn new(chunked: &Path, bucket: Option<&Bucket>) -> Input {
        match bucket {
            None => Input {
                metadata: chunked.join("metadata.json"),
                env: Vec::new(),
                bucket: false,
            },
            Some(b) => Input {
                metadata: Bucket::url(),
                env: b.env(),
                bucket: true,
            },
        }
    }

    /// A tool's name `start)`, `, from SeaweedFS` before the parenthesis
    /// when read from the bucket.
    pub(super) fn tool(&self, start: &str) -> String {
        let from = if self.bucket { ", from SeaweedFS" } else { "" };
        format!("{start}{from})")
    }

    /// An output folder's name (another for the bucket's run).
    pub(super) fn dir(&self, name: &str) -> String {
        let s3 = if self.bucket { "-s3" } else { "" };
        format!("{name}{s3}")
    }
}

/// What the comparison reads of one tool's run (a row of the table).
pub(super) struct Run<'a> {
    pub(super) stdout: &'a str,
    pub(super) stderr: &'a str,
    pub(super) wall: Duration,
    /// Of the process tree.
    pub(super) peak_rss: u64,
    /// The DistParMETIS ranks (else the single process).
    pub(super) ranks: bool,
}

/// One process's figures from one run (disk or bucket).
#[derive(Default)]
struct Proc {
    wall_s: Option<f64>,
    read_s: Option<f64>,
    peak_rss: Option<u64>,
    /// Bytes and requests fetched from object storage.
    fetched: Option<(u64, u64)>,
}

impl Proc {
    /// The single process: wall and peak of its tree, the rest from its log.
    fn native(run: &Run) -> Proc {
        let lines: Vec<&str> = run.stderr.lines().collect();
        Proc {
            wall_s: Some(run.wall.as_secs_f64()),
            read_s: read_stage(&lines),
            peak_rss: Some(run.peak_rss),
            fetched: fetched(&lines),
        }
    }

    /// Rank `rank`: its own report's lines (`rank R of W: ...`).
    fn rank(run: &Run, rank: u32) -> Proc {
        let prefix = format!("rank {rank} of ");
        let lines: Vec<&str> = run
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|l| l.split_once(": ").map(|(_, rest)| rest))
            .collect();
        let total = lines.iter().find_map(|l| {
            let rest = l.split_once(" ranks in ")?.1;
            rest.trim().trim_end_matches('s').parse().ok()
        });
        Proc {
            wall_s: total,
            read_s: read_stage(&lines),
            peak_rss: lines.iter().find_map(|l| {
                let rest = l.strip_prefix("peak RSS: ")?;
                rest.strip_suffix(" bytes")?.parse().ok()
            }),
            fetched: fetched(&lines),
        }
    }
}

/// `stage read: 1.23s` → 1.23.
fn read_stage(lines: &[&str]) -> Option<f64> {
    lines.iter().find_map(|l| {
        let rest = l.split_once("stage read: ")?.1;
        rest.split('s').next()?.trim().parse().ok()
    })
}

/// `input fetched from object storage: N bytes in M requests` → (N, M).
fn fetched(lines: &[&str]) -> Option<(u64, u64)> {
    lines.iter().find_map(|l| {
        let rest = l
            .split_once("input fetched from object storage: ")?
            .1
            .trim();
        let (bytes, rest) = rest.split_once(" bytes in ")?;
        let requests = rest.strip_suffix(" requests")?;
        Some((bytes.parse().ok()?, requests.parse().ok()?))
    })
}

/// A process's share of the input (see the module's documentation).
#[derive(Clone, Copy, Debug)]
struct Share {
    bytes: u64,
    /// metadata.json and 512 bytes per listed file.
    metadata: u64,
}

/// The share of rank `rank` of `world` of the chunked graph in `dir`.
fn share(dir: &Path, rank: u64, world: u64) -> Result<Share> {
    let path = dir.join("metadata.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let meta: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let mut lists: Vec<&Value> = Vec::new();
    for e in meta["edges"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
    {
        lists.push(&e["data"]);
    }
    for key in ["node_data", "edge_data"] {
        for feats in meta[key].as_object().into_iter().flat_map(|m| m.values()) {
            for f in feats.as_object().into_iter().flat_map(|m| m.values()) {
                lists.push(&f["data"]);
            }
        }
    }
    let (mut bytes, mut listed) = (0u64, 0u64);
    for list in lists {
        let list = list
            .as_array()
            .with_context(|| format!("{}: a \"data\" that is not a list", path.display()))?;
        listed += list.len() as u64;
        for k in split_even(list.len() as u64, rank, world) {
            let name = list[k as usize].as_str().with_context(|| {
                format!("{}: a data file name that is not a string", path.display())
            })?;
            let file = dir.join(name);
            let len = std::fs::metadata(&file)
                .with_context(|| format!("{} (listed in {})", file.display(), path.display()))?
                .len();
            bytes = bytes.checked_add(len).context("share over 2^64 bytes")?;
        }
    }
    Ok(Share {
        bytes,
        metadata: (text.len() as u64).saturating_add(listed.saturating_mul(512)),
    })
}

/// The items of `0..n` rank `r` of `w` takes (numpy's array_split).
fn split_even(n: u64, r: u64, w: u64) -> std::ops::Range<u64> {
    let (base, extra) = (n / w, n % w);
    let start = r * base + r.min(extra);
    start..start + base + u64::from(r < extra)
}

/// One process on disk and from the bucket.
struct Pair {
    tool: &'static str,
    process: String,
    disk: Proc,
    bucket: Proc,
    share: Share,
}

/// The side-by-side figures of a run with `--from-bucket`.
pub(super) struct Comparison {
    uploaded: u64,
    upload_s: f64,
    server_rss: Option<u64>,
    pairs: Vec<Pair>,
}

impl Comparison {
    /// Pairs each bucket row with the same tool's disk row (the rows of
    /// `rows` after `disk_rows` are the bucket's, in the same order).
    pub(super) fn new(
        bucket: &Bucket,
        chunked: &Path,
        rows: &[Run],
        disk_rows: usize,
        parts: u32,
    ) -> Result<Comparison> {
        let (disk, from_bucket) = rows.split_at(disk_rows);
        let mut pairs = Vec::new();
        for b in from_bucket {
            // The disk row of the same tool: the ones DGL's row is not.
            let Some(d) = disk.iter().rev().find(|d| d.ranks == b.ranks) else {
                continue;
            };
            if !b.ranks {
                pairs.push(Pair {
                    tool: "dglrun ParMETIS",
                    process: "the process".into(),
                    disk: Proc::native(d),
                    bucket: Proc::native(b),
                    share: share(chunked, 0, 1)?,
                });
                continue;
            }
            for r in 0..parts {
                pairs.push(Pair {
                    tool: "DistParMETIS",
                    process: format!("rank {r}"),
                    disk: Proc::rank(d, r),
                    bucket: Proc::rank(b, r),
                    share: share(chunked, r.into(), parts.into())?,
                });
            }
        }
        Ok(Comparison {
            uploaded: bucket.uploaded,
            upload_s: bucket.upload_s,
            server_rss: bucket.rss(),
            pairs,
        })
    }

    pub(super) fn print(&self) {
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
        let kib = |b: u64| format!("{:.1} KiB", b as f64 / 1024.0);
        let opt = |v: Option<f64>| v.map_or("-".into(), |s| format!("{s:.2}"));
        let gib = |b: Option<u64>| {
            b.map_or("-".into(), |b| {
                format!("{:.2}", b as f64 / (1u64 << 30) as f64)
            })
        };
        println!(
            "\nfrom SeaweedFS ({}, {} uploaded in {:.1} s; server RSS {} GiB at the end) \
             against local disk, per process (a rank's wall is its report's total):",
            Bucket::url().display(),
            mib(self.uploaded),
            self.upload_s,
            gib(self.server_rss)
        );
        println!(
            "| tool | process | wall s disk / S3 | read s disk / S3 | peak RSS GiB disk / S3 \
             | fetched | requests | share + metadata | fetched / share | within 1.1x + metadata |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for p in &self.pairs {
            let (fetched, requests) = p
                .bucket
                .fetched
                .map_or(("-".into(), "-".into()), |(b, r)| (mib(b), r.to_string()));
            let (ratio, within) = p.ratio();
            println!(
                "| {} | {} | {} / {} | {} / {} | {} / {} | {fetched} | {requests} | {} + {} \
                 | {} | {} |",
                p.tool,
                p.process,
                opt(p.disk.wall_s),
                opt(p.bucket.wall_s),
                opt(p.disk.read_s),
                opt(p.bucket.read_s),
                gib(p.disk.peak_rss),
                gib(p.bucket.peak_rss),
                mib(p.share.bytes),
                kib(p.share.metadata),
                ratio.map_or("-".into(), |r| format!("{r:.4}")),
                within.map_or("-", |w| if w { "yes" } else { "no" }),
            );
        }
    }

    /// The figures for the results file.
    pub(super) fn json(&self) -> Value {
        let proc = |p: &Proc| {
            serde_json::json!({
                "wall_s": p.wall_s, "read_s": p.read_s, "peak_rss": p.peak_rss,
                "fetched_bytes": p.fetched.map(|f| f.0), "requests": p.fetched.map(|f| f.1),
            })
        };
        serde_json::json!({
            "url": Bucket::url(), "uploaded_bytes": self.uploaded, "upload_s": self.upload_s,
            "server_rss": self.server_rss,
            "processes": self.pairs.iter().map(|p| {
                let (ratio, within) = p.ratio();
                serde_json::json!({
                    "tool": p.tool, "process": p.process,
                    "disk": proc(&p.disk), "bucket": proc(&p.bucket),
                    "share_bytes": p.share.bytes, "metadata_bytes": p.share.metadata,
                    "fetched_over_share": ratio, "within_goal": within,
                })
            }).collect::<Vec<_>>(),
        })
    }
}

impl Pair {
    /// Bytes fetched over the share, and whether they are within the goal
    /// (1.1 × the share plus metadata).
    fn ratio(&self) -> (Option<f64>, Option<bool>) {
        let Some((bytes, _)) = self.bucket.fetched else {
            return (None, None);
        };
        let s = self.share;
        let ratio = (s.bytes > 0).then(|| bytes as f64 / s.bytes as f64);
        let limit = s
            .bytes
            .saturating_add(s.bytes / 10)
            .saturating_add(s.metadata);
        (ratio, Some(bytes <= limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let p = std::env::temp_dir().join(format!("xtask-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn reads_the_report_lines() {
        let lines = [
            "stage read: 1.25s (cpu 2.00s)",
            "input fetched from object storage: 12345 bytes in 17 requests",
        ];
        assert_eq!(read_stage(&lines), Some(1.25));
        assert_eq!(fetched(&lines), Some((12345, 17)));
        assert_eq!(fetched(&["input fetched from object storage rank=0"]), None);
    }

    #[test]
    fn a_share_is_the_ranks_chunks_of_every_list() {
        let dir = TempDir::new("share");
        let meta = serde_json::json!({
            "edges": {"_N:_E:_N": {"data": ["e0", "e1", "e2"]}},
            "node_data": {"_N": {"feat": {"data": ["f0", "f1", "f2"]}}},
        });
        std::fs::write(dir.path().join("metadata.json"), meta.to_string()).unwrap();
        for (name, len) in [("e0", 10), ("e1", 20), ("e2", 40), ("f0", 1), ("f1", 2)] {
            std::fs::write(dir.path().join(name), vec![0u8; len]).unwrap();
        }
        std::fs::write(dir.path().join("f2"), vec![0u8; 4]).unwrap();
        // Rank 0 of 2 takes chunks 0 and 1; rank 1 chunk 2.
        assert_eq!(share(dir.path(), 0, 2).unwrap().bytes, 33);
        assert_eq!(share(dir.path(), 1, 2).unwrap().bytes, 44);
        assert_eq!(share(dir.path(), 0, 1).unwrap().bytes, 77);
        let m = share(dir.path(), 0, 1).unwrap().metadata;
        assert_eq!(m, meta.to_string().len() as u64 + 6 * 512);
        std::fs::remove_file(dir.path().join("e1")).unwrap();
        let e = share(dir.path(), 0, 2).unwrap_err();
        assert!(format!("{e:#}").contains("e1"), "{e:#}");
    }
}
