//! The partition cache: partition once, train many (issue #35 item 4).
//!
//! A finished partition output folder (DGL's partition JSON, each
//! `part<i>/`, GraphBolt files when present) is uploaded to an
//! S3-compatible bucket under `s3://bucket/prefix/<key>/`, where the
//! [`Key`] is a digest of the input, the settings that change the output
//! and the worker count ([`key`]). A later run with the same key finds it
//! ([`Cache::lookup`]) and each worker downloads only the shared files and
//! its own part ([`Cache::fetch_part`]), every file verified by size and
//! SHA-256 as it streams in.
//!
//! - [`key`]: the cache key (a versioned digest format);
//! - [`manifest`]: `manifest.json`, the list of cached files, written last
//!   (a half upload is never a hit) and checked as untrusted input;
//! - [`upload`]: a finished output folder into the bucket, whole or part
//!   by part;
//! - [`fetch`]: lookup and the verified download of one part;
//! - [`cli`]: `dgl-partition cache upload|fetch`.
//!
//! Objects are reached as the pipeline's input is ([`crate::input`]'s
//! store: the `AWS_*` environment, bounded retries); errors name
//! `s3://bucket/key` and the server's reason, never a credential. The calls
//! block (they wait on the store's own runtime): from async code, call them
//! in `spawn_blocking`.
//!
//! dglrun calls it for `spec.partitionCache`: its lookup role, the
//! partitioner (partition mode ParMETIS: [`Cache::upload`] of its output
//! folder), the launcher and workers of partition mode DistParMETIS (each
//! worker's [`Cache::upload_part`] between the launcher's
//! [`Cache::begin`] and [`Cache::commit`]), and every worker's
//! [`Cache::fetch_part`] on a hit.

pub mod cli;
pub mod fetch;
pub mod key;
pub mod manifest;
pub mod upload;

use std::path::{Path, PathBuf};

use object_store::path::Path as ObjectPath;

use crate::input::store;
use crate::{Error, Result};

pub use key::{key, Key, KeySettings, Mode};
pub use manifest::{FileEntry, Manifest, Owner, MANIFEST};

/// A partition cache: a bucket and a key prefix in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    bucket: String,
    /// The prefix without a trailing `/` (empty: the bucket's top).
    prefix: String,
}

impl Cache {
    /// The cache at `s3://bucket[/prefix]` (a trailing `/` is allowed).
    pub fn new(url: &str) -> Result<Cache> {
        let bad = |why: &str| {
            Error::Config(format!(
                "partition cache {url:?}: {why}; expected s3://bucket/prefix"
            ))
        };
        let rest = url
            .strip_prefix(store::SCHEME)
            .ok_or_else(|| bad("not an s3:// URL"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let prefix = prefix.trim_end_matches('/');
        // The bucket and prefix are checked as an input object's are.
        let probe = match prefix.is_empty() {
            true => format!("{}{bucket}/{MANIFEST}", store::SCHEME),
            false => format!("{}{bucket}/{prefix}/{MANIFEST}", store::SCHEME),
        };
        store::parse(Path::new(&probe)).map_err(|e| bad(&e.to_string()))?;
        Ok(Cache {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// `s3://bucket/prefix` as given (without a trailing `/`).
    pub fn url(&self) -> String {
        match self.prefix.is_empty() {
            true => format!("{}{}", store::SCHEME, self.bucket),
            false => format!("{}{}/{}", store::SCHEME, self.bucket, self.prefix),
        }
    }

    /// The object key of `rel` (a checked relative path) under `key`.
    fn object(&self, key: &Key, rel: &str) -> Result<ObjectPath> {
        let full = match self.prefix.is_empty() {
            true => format!("{key}/{rel}"),
            false => format!("{}/{key}/{rel}", self.prefix),
        };
        ObjectPath::parse(&full).map_err(|e| {
            Error::Config(format!(
                "{}{}/{full}: not a plain object key: {e}",
                store::SCHEME,
                self.bucket
            ))
        })
    }

    /// `s3://bucket/key` of an object, for messages.
    fn name(&self, object: &ObjectPath) -> PathBuf {
        PathBuf::from(format!("{}{}/{object}", store::SCHEME, self.bucket))
    }
}

/// The store's error as this crate's, naming the object; the reason is
/// the server's (credentials redacted by the store).
fn store_error(name: &Path, e: &object_store::Error) -> Error {
    Error::io(name, store::to_io(e))
}

/// The runtime object requests wait on (the input's).
fn runtime(name: &Path) -> Result<&'static tokio::runtime::Runtime> {
    store::runtime().map_err(|e| Error::io(name, e))
}

/// The client of the cache's bucket, from the environment.
fn client(cache: &Cache) -> Result<std::sync::Arc<object_store::aws::AmazonS3>> {
    store::client(&cache.bucket).map_err(|e| Error::io(PathBuf::from(cache.url()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_urls_are_a_bucket_and_a_plain_prefix() {
        let c = Cache::new("s3://parts/cache/").unwrap();
        assert_eq!(c.url(), "s3://parts/cache");
        let k = Key::from_hex(&"ab".repeat(32)).unwrap();
        let o = c.object(&k, "part0/graph.dgl").unwrap();
        assert_eq!(o.as_ref(), format!("cache/{k}/part0/graph.dgl"));
        assert_eq!(
            c.name(&o),
            PathBuf::from(format!("s3://parts/cache/{k}/part0/graph.dgl"))
        );
        let top = Cache::new("s3://parts").unwrap();
        assert_eq!(top.url(), "s3://parts");
        assert_eq!(
            top.object(&k, "g.json").unwrap().as_ref(),
            format!("{k}/g.json")
        );
        for bad in [
            "s3:///cache",
            "parts/cache",
            "s3://",
            "s3://pa rts/x",
            "s3://p/a/../b",
            "s3://p/a//b",
        ] {
            let e = Cache::new(bad).unwrap_err().to_string();
            assert!(e.contains("expected s3://bucket/prefix"), "{bad}: {e}");
        }
    }
}
