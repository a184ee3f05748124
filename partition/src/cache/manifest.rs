//! `manifest.json`: what one cache entry holds, written after every file
//! (an entry without it is a miss, never half a hit).
//!
//! ```json
//! {"format": "dgl-partition-cache/1", "key": "<64 hex>", "num_parts": 2,
//!  "files": [{"path": "g.json", "size": 812, "sha256": "<64 hex>", "part": "shared"},
//!            {"path": "part0/graph.dgl", "size": 4096, "sha256": "...", "part": 0},
//!            {"path": "partition_assignment/_N.txt", ..., "part": "other"}]}
//! ```
//!
//! `part` is the part a file belongs to (a file below `part<i>/`),
//! `"shared"` for a file at the top (the partition JSON: every worker
//! needs it) or `"other"` for any other folder (the assignment in DGL's
//! format: kept, but no worker fetches it). A manifest is untrusted input:
//! [`Manifest::parse`] refuses absolute paths, `..`, sizes past
//! [`MAX_FILE_SIZE`] and a `part` that disagrees with its path.

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The manifest's name in an entry.
pub const MANIFEST: &str = "manifest.json";

/// The manifest format this program writes and reads.
pub const FORMAT: &str = "dgl-partition-cache/1";

/// Largest manifest read (fetched whole).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// Largest file a manifest may list (1 TiB).
pub const MAX_FILE_SIZE: u64 = 1 << 40;

/// Most parts an entry may have.
pub const MAX_PARTS: u32 = 1 << 16;

/// Longest relative path (bytes).
const MAX_PATH: usize = 1024;

/// One cache entry's files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub key: String,
    pub num_parts: u32,
    pub files: Vec<FileEntry>,
}

/// One cached file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Relative to the output folder, `/`-separated.
    pub path: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the content.
    pub sha256: String,
    pub part: Owner,
}

/// Which worker needs a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// At the output's top: every worker (the partition JSON).
    Shared,
    /// Below `part<i>/`: worker `i`.
    Part(u32),
    /// Any other folder: no worker.
    Other,
}

impl Owner {
    /// The owner a path implies (`None`: not a valid relative path).
    pub fn of_path(path: &str) -> Option<Owner> {
        check_path(path).ok()?;
        let Some((first, _)) = path.split_once('/') else {
            return Some(Owner::Shared);
        };
        let digits = first.strip_prefix("part").filter(|d| {
            !d.is_empty()
                && d.bytes().all(|c| c.is_ascii_digit())
                && (d == &"0" || !d.starts_with('0'))
        });
        Some(match digits.and_then(|d| d.parse::<u32>().ok()) {
            Some(i) => Owner::Part(i),
            None => Owner::Other,
        })
    }
}

impl Serialize for Owner {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Owner::Shared => s.serialize_str("shared"),
            Owner::Other => s.serialize_str("other"),
            Owner::Part(i) => s.serialize_u32(*i),
        }
    }
}

impl<'de> Deserialize<'de> for Owner {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Part(u32),
            Name(String),
        }
        match Repr::deserialize(d)? {
            Repr::Part(i) => Ok(Owner::Part(i)),
            Repr::Name(n) if n == "shared" => Ok(Owner::Shared),
            Repr::Name(n) if n == "other" => Ok(Owner::Other),
            Repr::Name(_) => Err(serde::de::Error::custom(
                "expected a part number, \"shared\" or \"other\"",
            )),
        }
    }
}

/// Why `path` is not a plain relative path (`/`-separated, no empty, `.`
/// or `..` segment, not absolute, no backslash or control character).
pub(crate) fn check_path(path: &str) -> std::result::Result<(), String> {
    if path.is_empty() || path.len() > MAX_PATH {
        return Err(format!("expected a path of 1 to {MAX_PATH} bytes"));
    }
    if path.starts_with('/') {
        return Err("an absolute path; expected one relative to the output folder".into());
    }
    if path.chars().any(|c| c.is_control() || c == '\\') {
        return Err("a control character or backslash; expected a plain relative path".into());
    }
    for seg in path.split('/') {
        match seg {
            ".." => return Err("the path contains \"..\"; expected one below the entry".into()),
            "" | "." => {
                return Err("an empty or \".\" segment; expected a plain relative path".into())
            }
            _ => {}
        }
    }
    Ok(())
}

impl Manifest {
    /// The manifest of `files` (their owners from their paths).
    pub fn new(key: &str, num_parts: u32, files: Vec<FileEntry>) -> Manifest {
        Manifest {
            format: FORMAT.to_string(),
            key: key.to_string(),
            num_parts,
            files,
        }
    }

    /// Parses and checks `bytes` (from object `name`) as the manifest of
    /// `key`; every error names `name` and the field.
    pub fn parse(name: &Path, bytes: &[u8], key: &str) -> Result<Manifest> {
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(Error::input(
                name,
                "",
                format!(
                    "{} bytes; expected at most {MAX_MANIFEST_BYTES}",
                    bytes.len()
                ),
            ));
        }
        let m: Manifest = serde_json::from_slice(bytes).map_err(|e| {
            Error::input(
                name,
                format!("line {} column {}", e.line(), e.column()),
                format!("not a partition cache manifest ({e}); expected format {FORMAT}"),
            )
        })?;
        m.check(name, key)?;
        Ok(m)
    }

    /// The checks of [`Manifest::parse`].
    pub(crate) fn check(&self, name: &Path, key: &str) -> Result<()> {
        let err = |at: String, m: String| Err(Error::input(name, at, m));
        if self.format != FORMAT {
            return err(
                "format".into(),
                format!("{:?}; expected {FORMAT:?}", cut(&self.format)),
            );
        }
        if self.key != key {
            return err(
                "key".into(),
                format!("{:?}; expected the entry's key {key}", cut(&self.key)),
            );
        }
        if self.num_parts == 0 || self.num_parts > MAX_PARTS {
            return err(
                "num_parts".into(),
                format!("{}; expected 1 to {MAX_PARTS}", self.num_parts),
            );
        }
        let mut seen = HashSet::new();
        let mut owners = HashSet::new();
        let mut total = 0u64;
        for (i, f) in self.files.iter().enumerate() {
            let at = |field: &str| format!("files[{i}].{field}");
            if let Err(why) = check_path(&f.path) {
                return err(at("path"), format!("{:?}: {why}", cut(&f.path)));
            }
            if !seen.insert(f.path.as_str()) {
                return err(at("path"), format!("{:?} is listed twice", f.path));
            }
            if f.size > MAX_FILE_SIZE {
                return err(
                    at("size"),
                    format!("{}; expected at most {MAX_FILE_SIZE} bytes", f.size),
                );
            }
            total = match total.checked_add(f.size) {
                Some(t) => t,
                None => return err(at("size"), "the sizes' sum overflows".into()),
            };
            if f.sha256.len() != 64
                || !f
                    .sha256
                    .bytes()
                    .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
            {
                return err(at("sha256"), "expected 64 lowercase hex digits".into());
            }
            match (f.part, Owner::of_path(&f.path)) {
                (Owner::Part(p), _) if p >= self.num_parts => {
                    return err(
                        at("part"),
                        format!("{p}; expected below num_parts {}", self.num_parts),
                    )
                }
                (given, Some(implied)) if given == implied => {}
                (given, implied) => {
                    return err(
                        at("part"),
                        format!("{given:?} but the path means {implied:?}"),
                    )
                }
            }
            owners.insert(f.part);
        }
        if !owners.contains(&Owner::Shared) {
            return err(
                "files".into(),
                "no shared file; expected the partition JSON".into(),
            );
        }
        if let Some(p) = (0..self.num_parts).find(|p| !owners.contains(&Owner::Part(*p))) {
            return err(
                "files".into(),
                format!("no file of part {p}; expected part{p}/"),
            );
        }
        Ok(())
    }

    /// The files worker `part` needs: the shared ones and its part's.
    pub fn files_of(&self, part: u32) -> impl Iterator<Item = &FileEntry> {
        self.files
            .iter()
            .filter(move |f| f.part == Owner::Shared || f.part == Owner::Part(part))
    }

    /// Bytes of all listed files (checked to fit by [`Manifest::parse`]).
    pub fn total_bytes(&self) -> u64 {
        self.files
            .iter()
            .fold(0u64, |t, f| t.saturating_add(f.size))
    }
}

/// A value from the manifest, cut for a message.
fn cut(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn entry(path: &str, part: Owner) -> FileEntry {
        FileEntry {
            path: path.into(),
            size: 10,
            sha256: "a".repeat(64),
            part,
        }
    }

    fn good() -> Manifest {
        Manifest::new(
            KEY,
            2,
            vec![
                entry("g.json", Owner::Shared),
                entry("part0/graph.dgl", Owner::Part(0)),
                entry("part1/graph.dgl", Owner::Part(1)),
                entry("part1/fused_csc_sampling_graph.pt", Owner::Part(1)),
                entry("partition_assignment/_N.txt", Owner::Other),
            ],
        )
    }

    fn parse(m: &Manifest) -> Result<Manifest> {
        let bytes = serde_json::to_vec(m).unwrap();
        Manifest::parse(Path::new("s3://b/c/k/manifest.json"), &bytes, KEY)
    }

    #[test]
    fn a_manifest_round_trips_and_says_who_needs_what() {
        let m = good();
        assert_eq!(parse(&m).unwrap(), m);
        let text = serde_json::to_string(&m).unwrap();
        assert!(
            text.contains("\"part\":\"shared\"") && text.contains("\"part\":1"),
            "{text}"
        );
        let of1: Vec<_> = m.files_of(1).map(|f| f.path.as_str()).collect();
        assert_eq!(
            of1,
            [
                "g.json",
                "part1/graph.dgl",
                "part1/fused_csc_sampling_graph.pt"
            ]
        );
        assert_eq!(m.total_bytes(), 50);
        assert_eq!(Owner::of_path("part12/x"), Some(Owner::Part(12)));
        assert_eq!(Owner::of_path("part012/x"), Some(Owner::Other));
        assert_eq!(Owner::of_path("parts/x"), Some(Owner::Other));
        assert_eq!(Owner::of_path("../x"), None);
    }

    #[test]
    fn hostile_manifests_are_refused_naming_the_field() {
        type Edit = fn(&mut Manifest);
        let cases: [(Edit, &str); 13] = [
            (|m| m.files[1].path = "../x".into(), "files[1].path"),
            (|m| m.files[1].path = "part0/../../x".into(), "\"..\""),
            (|m| m.files[0].path = "/etc/passwd".into(), "absolute"),
            (|m| m.files[0].path = "a//b".into(), "empty"),
            (|m| m.files[0].path = "a\\b".into(), "backslash"),
            (|m| m.files[1].size = u64::MAX, "files[1].size"),
            (|m| m.files[1].sha256 = "XYZ".into(), "files[1].sha256"),
            (|m| m.files[1].part = Owner::Part(1), "files[1].part"),
            (|m| m.files[2].part = Owner::Part(7), "below num_parts"),
            (|m| m.files[2].path = "part0/graph.dgl".into(), "twice"),
            (|m| m.num_parts = 3, "no file of part 2"),
            (|m| m.key = "0".repeat(64), "key"),
            (|m| m.format = "other/2".into(), "format"),
        ];
        for (edit, piece) in cases {
            let mut m = good();
            edit(&mut m);
            let e = parse(&m).unwrap_err().to_string();
            assert!(
                e.contains("s3://b/c/k/manifest.json") && e.contains(piece),
                "{piece}: {e}"
            );
        }
        let name = Path::new("s3://b/c/k/manifest.json");
        let e = Manifest::parse(name, b"{\"format\": 3", KEY)
            .unwrap_err()
            .to_string();
        assert!(e.contains("manifest.json") && e.contains("line 1"), "{e}");
        let e = Manifest::parse(
            name,
            br#"{"format":"x","key":"k","num_parts":1,"files":[],"extra":1}"#,
            KEY,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("extra"), "{e}");
    }
}
