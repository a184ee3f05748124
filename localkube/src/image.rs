//! Container images without a registry or an image builder: a static Go
//! binary packed into a single-layer OCI image archive that
//! `ctr images import` loads into the node's containerd.
//!
//! Used for the pod sandbox ("pause") image and for small test images. The
//! archive is written by hand (a minimal ustar writer plus the OCI layout
//! JSON), because nothing more is needed for one layer of a few files and it
//! keeps podman/buildah out of the node's critical path. Every timestamp is
//! zero and every owner root, so the same files always give the same digests:
//! the image reference can carry a content hash and be reused across runs.
use std::path::Path;
use std::process::Command;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::{binaries, host, util};

/// One file of an image layer.
#[derive(Debug, Clone)]
pub struct ImageFile {
    /// Absolute path inside the image, e.g. `/pause`.
    pub path: String,
    /// Permission bits, e.g. `0o755`.
    pub mode: u32,
    pub data: Vec<u8>,
}

/// The runtime part of an image config.
#[derive(Debug, Clone, Default)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    /// `uid[:gid]`; `None` runs as root.
    pub user: Option<String>,
}

/// What [`oci_archive`] produced.
#[derive(Debug, Clone)]
pub struct OciArchive {
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of the image manifest (what containerd shows as the digest).
    pub manifest_digest: String,
    /// `sha256:<hex>` of the image config (the image ID).
    pub config_digest: String,
}

/// The SHA-256 of `bytes`, hex-encoded (image digests, cache keys).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Minimal ustar writer: regular files and directories, root-owned, mtime 0.
struct Tar {
    out: Vec<u8>,
}

impl Tar {
    fn new() -> Tar {
        Tar { out: Vec::new() }
    }

    fn header(&mut self, name: &str, mode: u32, size: usize, kind: u8) -> Result<()> {
        let mut h = [0u8; 512];
        // ustar splits long names into prefix (155) + name (100) at a '/'.
        let (prefix, base) = if name.len() <= 100 {
            ("", name)
        } else {
            let cut = name[..name.len().min(156)]
                .rfind('/')
                .filter(|i| name.len() - i - 1 <= 100)
                .ok_or_else(|| Error::Invalid(format!("path too long for a tar header: {name}")))?;
            (&name[..cut], &name[cut + 1..])
        };
        h[..base.len()].copy_from_slice(base.as_bytes());
        octal(&mut h[100..108], u64::from(mode));
        octal(&mut h[108..116], 0);
        octal(&mut h[116..124], 0);
        octal(&mut h[124..136], size as u64);
        octal(&mut h[136..148], 0);
        h[148..156].copy_from_slice(b"        ");
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[265..269].copy_from_slice(b"root");
        h[297..301].copy_from_slice(b"root");
        h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        let chk = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(chk.as_bytes());
        self.out.extend_from_slice(&h);
        Ok(())
    }

    fn dir(&mut self, name: &str) -> Result<()> {
        self.header(&format!("{}/", name.trim_end_matches('/')), 0o755, 0, b'5')
    }

    fn file(&mut self, name: &str, mode: u32, data: &[u8]) -> Result<()> {
        self.header(name, mode, data.len(), b'0')?;
        self.out.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.out.extend(std::iter::repeat_n(0u8, pad));
        Ok(())
    }

    fn finish(mut self) -> Vec<u8> {
        self.out.extend(std::iter::repeat_n(0u8, 1024));
        self.out
    }
}

/// Writes `value` as zero-padded octal, NUL-terminated, into `field`.
fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let s = format!("{value:0width$o}");
    field[..width].copy_from_slice(&s.as_bytes()[s.len() - width..]);
    field[width] = 0;
}

/// A layer tar holding `files` and their parent directories.
fn layer_tar(files: &[ImageFile]) -> Result<Vec<u8>> {
    let mut tar = Tar::new();
    let mut dirs = std::collections::BTreeSet::new();
    for f in files {
        let rel = f.path.trim_start_matches('/');
        let mut acc = String::new();
        let parts: Vec<&str> = rel.split('/').collect();
        for p in &parts[..parts.len().saturating_sub(1)] {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(p);
            if dirs.insert(acc.clone()) {
                tar.dir(&acc)?;
            }
        }
    }
    for f in files {
        tar.file(f.path.trim_start_matches('/'), f.mode, &f.data)?;
    }
    Ok(tar.finish())
}

/// Builds an OCI image archive (the `oci-archive` transport's format) for a
/// one-layer linux/amd64 image named `reference` (`repo[:tag]`).
///
/// The index carries `io.containerd.image.name`, so `ctr images import` names
/// the image without `--base-name`.
pub fn oci_archive(
    reference: &str,
    files: &[ImageFile],
    config: &ImageConfig,
) -> Result<OciArchive> {
    let layer = layer_tar(files)?;
    let layer_digest = format!("sha256:{}", sha256_hex(&layer));
    let mut cfg = json!({
        "Env": if config.env.is_empty() {
            vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned()]
        } else {
            config.env.clone()
        },
    });
    if !config.entrypoint.is_empty() {
        cfg["Entrypoint"] = json!(config.entrypoint);
    }
    if !config.cmd.is_empty() {
        cfg["Cmd"] = json!(config.cmd);
    }
    if let Some(user) = &config.user {
        cfg["User"] = json!(user);
    }
    let image_config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": cfg,
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
        "history": [{ "created_by": "localkube (hand-written OCI archive)" }],
    }))
    .map_err(|e| Error::Invalid(e.to_string()))?;
    let config_digest = format!("sha256:{}", sha256_hex(&image_config));
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": image_config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": layer.len(),
        }],
    }))
    .map_err(|e| Error::Invalid(e.to_string()))?;
    let manifest_digest = format!("sha256:{}", sha256_hex(&manifest));
    let tag = reference
        .rsplit_once(':')
        .filter(|(_, t)| !t.contains('/'))
        .map(|(_, t)| t)
        .unwrap_or("latest");
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest.len(),
            "platform": { "architecture": "amd64", "os": "linux" },
            "annotations": {
                "io.containerd.image.name": reference,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }))
    .map_err(|e| Error::Invalid(e.to_string()))?;

    let mut tar = Tar::new();
    tar.file("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    tar.dir("blobs")?;
    tar.dir("blobs/sha256")?;
    for (digest, blob) in [
        (&layer_digest, &layer),
        (&config_digest, &image_config),
        (&manifest_digest, &manifest),
    ] {
        let hex = digest.trim_start_matches("sha256:");
        tar.file(&format!("blobs/sha256/{hex}"), 0o644, blob)?;
    }
    tar.file("index.json", 0o644, &index)?;
    Ok(OciArchive {
        bytes: tar.finish(),
        manifest_digest,
        config_digest,
    })
}

/// Compiles a single-file Go `main` package into a static binary
/// (`CGO_ENABLED=0`, stripped, no build id, so the output only changes with
/// the source or the Go version). `work_dir` receives a throwaway module;
/// the build output goes to `log`.
pub fn build_static_go(main_go: &str, out: &Path, work_dir: &Path, log: &Path) -> Result<()> {
    util::create_dir_all(work_dir)?;
    if let Some(p) = log.parent() {
        util::create_dir_all(p)?;
    }
    util::write_atomic(&work_dir.join("main.go"), main_go.as_bytes(), 0o644)?;
    util::write_atomic(
        &work_dir.join("go.mod"),
        b"module localkube.local/tool\n\ngo 1.21\n",
        0o644,
    )?;
    let mut build: Command = binaries::go_command(work_dir);
    build
        .args(["build", "-trimpath", "-ldflags", "-s -w -buildid=", "-o"])
        .arg(out)
        .arg(".");
    host::run_logged(&mut build, log)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads back (name, type, size, data) from our tar output, checking each
    /// header checksum the way `tar` does.
    fn entries(tar: &[u8]) -> Vec<(String, u8, Vec<u8>)> {
        let mut out = Vec::new();
        let mut off = 0;
        while off + 512 <= tar.len() {
            let h = &tar[off..off + 512];
            if h.iter().all(|b| *b == 0) {
                break;
            }
            let mut sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
            sum -= h[148..156].iter().map(|b| u32::from(*b)).sum::<u32>();
            sum += 8 * u32::from(b' ');
            let stored = u32::from_str_radix(
                std::str::from_utf8(&h[148..154])
                    .unwrap()
                    .trim_matches('\0'),
                8,
            )
            .unwrap();
            assert_eq!(sum, stored, "checksum at offset {off}");
            let name_end = h[..100].iter().position(|b| *b == 0).unwrap_or(100);
            let name = String::from_utf8(h[..name_end].to_vec()).unwrap();
            let size = u64::from_str_radix(
                std::str::from_utf8(&h[124..135])
                    .unwrap()
                    .trim_matches('\0'),
                8,
            )
            .unwrap() as usize;
            let data = tar[off + 512..off + 512 + size].to_vec();
            out.push((name, h[156], data));
            off += 512 + size.div_ceil(512) * 512;
        }
        out
    }

    #[test]
    fn archive_is_a_valid_oci_layout_with_stable_digests() {
        let files = vec![ImageFile {
            path: "/usr/local/bin/hello".into(),
            mode: 0o755,
            data: b"#!/bin/true\n".to_vec(),
        }];
        let cfg = ImageConfig {
            entrypoint: vec!["/usr/local/bin/hello".into()],
            user: Some("65532:65532".into()),
            ..Default::default()
        };
        let a = oci_archive("localhost/t/hello:1", &files, &cfg).unwrap();
        let b = oci_archive("localhost/t/hello:1", &files, &cfg).unwrap();
        assert_eq!(a.manifest_digest, b.manifest_digest, "deterministic");
        assert_eq!(a.bytes, b.bytes);

        let ents = entries(&a.bytes);
        let names: Vec<&str> = ents.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(names[0], "oci-layout");
        let index = ents.iter().find(|e| e.0 == "index.json").unwrap();
        let index: serde_json::Value = serde_json::from_slice(&index.2).unwrap();
        let m = &index["manifests"][0];
        assert_eq!(m["digest"], a.manifest_digest.as_str());
        assert_eq!(
            m["annotations"]["io.containerd.image.name"],
            "localhost/t/hello:1"
        );
        assert_eq!(m["annotations"]["org.opencontainers.image.ref.name"], "1");
        // Every blob is stored under its own digest.
        for (name, kind, data) in &ents {
            if let Some(hex) = name.strip_prefix("blobs/sha256/") {
                if *kind == b'0' {
                    assert_eq!(sha256_hex(data), *hex, "{name}");
                }
            }
        }
        // The layer holds the parent directories before the file.
        let manifest = ents
            .iter()
            .find(|e| e.0 == format!("blobs/sha256/{}", &a.manifest_digest[7..]))
            .unwrap();
        let manifest: serde_json::Value = serde_json::from_slice(&manifest.2).unwrap();
        let layer_hex = manifest["layers"][0]["digest"].as_str().unwrap()[7..].to_owned();
        let layer = ents
            .iter()
            .find(|e| e.0 == format!("blobs/sha256/{layer_hex}"))
            .unwrap();
        let layer_names: Vec<String> = entries(&layer.2).into_iter().map(|e| e.0).collect();
        assert_eq!(
            layer_names,
            vec![
                "usr/",
                "usr/local/",
                "usr/local/bin/",
                "usr/local/bin/hello"
            ]
        );
    }

    #[test]
    fn long_names_use_the_ustar_prefix() {
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(50));
        let mut t = Tar::new();
        t.file(&long, 0o644, b"x").unwrap();
        let bytes = t.finish();
        let name_end = bytes[..100].iter().position(|b| *b == 0).unwrap();
        assert_eq!(&bytes[..name_end], "f".repeat(50).as_bytes());
        assert_eq!(&bytes[345..465], "d".repeat(120).as_bytes());
        let mut t = Tar::new();
        assert!(t.file(&"x".repeat(300), 0o644, b"").is_err());
    }
}
