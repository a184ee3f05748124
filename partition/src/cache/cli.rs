//! `dgl-partition cache upload|fetch`: the cache's two transfers from the
//! command line (for a worker's or a user's script; the key comes from
//! [`super::key`] in the program that knows the settings).

use std::path::PathBuf;

use super::{Cache, Key};
use crate::Result;

/// The partition cache's commands.
#[derive(clap::Subcommand, Debug)]
pub enum CacheCommand {
    /// Upload a finished partition output folder (the partition JSON, each
    /// part<i>/, GraphBolt files when present) as entry --key: every file
    /// under <cache>/<key>/, manifest.json last.
    Upload(UploadArgs),
    /// Fetch entry --key's shared files and part --part into --out, each
    /// verified by size and SHA-256 (a corrupted file is an error and is
    /// not kept). Exits 3 when the entry is not cached (no manifest).
    Fetch(FetchArgs),
}

/// Where the cache is and which entry.
#[derive(clap::Args, Debug)]
pub struct EntryArgs {
    /// The cache, s3://bucket/prefix (credentials, region and endpoint
    /// from the AWS_* environment variables, as for --partition-input).
    #[arg(long, value_name = "URL")]
    pub cache: String,
    /// The entry's key (64 hex digits, from the library's cache::key).
    #[arg(long, value_name = "KEY")]
    pub key: String,
}

#[derive(clap::Args, Debug)]
pub struct UploadArgs {
    #[command(flatten)]
    pub entry: EntryArgs,
    /// The finished output folder (<graph>.json and part<i>/).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct FetchArgs {
    #[command(flatten)]
    pub entry: EntryArgs,
    /// The part to fetch (the worker's index).
    #[arg(long, value_name = "I")]
    pub part: u32,
    /// Where the files go, as in the output folder (<graph>.json, part<i>/).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// What a command did: its line for stdout, and whether the entry was
/// there (a fetch of a missing entry is a miss, not an error).
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub line: String,
    pub hit: bool,
}

impl CacheCommand {
    /// Runs the command.
    pub fn run(&self) -> Result<Outcome> {
        match self {
            CacheCommand::Upload(a) => {
                let (cache, key) = open(&a.entry)?;
                let m = cache.upload(&key, &a.dir)?;
                Ok(Outcome {
                    line: format!(
                        "partition cache {}: uploaded entry {key}: {} files, {} bytes, {} parts",
                        cache.url(),
                        m.files.len(),
                        m.total_bytes(),
                        m.num_parts
                    ),
                    hit: true,
                })
            }
            CacheCommand::Fetch(a) => {
                let (cache, key) = open(&a.entry)?;
                let Some(m) = cache.lookup(&key)? else {
                    return Ok(Outcome {
                        line: format!("partition cache {}: no entry {key}", cache.url()),
                        hit: false,
                    });
                };
                let bytes = cache.fetch_part(&m, a.part, &a.out)?;
                Ok(Outcome {
                    line: format!(
                        "partition cache {}: fetched part {} of entry {key} into {}: {} files, \
                         {bytes} bytes, verified",
                        cache.url(),
                        a.part,
                        a.out.display(),
                        m.files_of(a.part).count()
                    ),
                    hit: true,
                })
            }
        }
    }
}

fn open(e: &EntryArgs) -> Result<(Cache, Key)> {
    Ok((Cache::new(&e.cache)?, Key::from_hex(&e.key)?))
}
