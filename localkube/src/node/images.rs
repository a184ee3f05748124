//! Images on a node's containerd: listing, labelling, importing archives,
//! and the one-binary Go images (the pause image among them) built and
//! cached here.
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::ctr::*;
use crate::binaries::{self};
use crate::error::{Error, Result};
use crate::handle::{blocking, LocalCluster};
use crate::host;
use crate::image::{self, ImageConfig, ImageFile};
use crate::settings::PAUSE_REPOSITORY;
use crate::util::{self, progress};

/// The pause image's reference: the tag hashes the Go source and the Go
/// version, so a change of either builds (and configures) a new image.
pub(super) fn pause_reference(go_version: &str) -> String {
    let src = include_str!("../../assets/pause.go");
    let h = image::sha256_hex(format!("{src}\n{go_version}").as_bytes());
    format!("{PAUSE_REPOSITORY}:3.10-{}", &h[..12])
}

impl LocalCluster {
    /// Image references known to node 0's containerd (CRI namespace).
    pub fn node_images(&self) -> Result<Vec<String>> {
        images_at(&self.containerd_socket())
    }

    /// Labels of one image in node 0's containerd, `None` if absent.
    pub fn node_image_labels(&self, reference: &str) -> Result<Option<BTreeMap<String, String>>> {
        image_labels_at(&self.containerd_socket(), reference)
    }

    /// `ctr images import` of an OCI or docker archive into the containerd
    /// of every node (unpacked for the CRI's snapshotter). `base_name` names
    /// images of OCI archives that only carry a tag (podman's `oci-archive`).
    /// Returns ctr's output (the imported references).
    pub fn import_image_archive(&self, archive: &Path, base_name: Option<&str>) -> Result<String> {
        let mut out = String::new();
        for (_, socket) in self.node_sockets() {
            let mut c = ctr_at(&socket);
            c.args(["images", "import"]);
            if let Some(b) = base_name {
                c.args(["--base-name", b]);
            }
            c.arg(archive);
            out.push_str(&host::run(&mut c)?);
        }
        Ok(out)
    }

    /// Removes `reference` from node 0's containerd and waits for its
    /// garbage collection, so that an import that replaces it cannot race
    /// the collector (see [`Error::is_unpack_race`]); absent is fine.
    pub fn remove_node_image(&self, reference: &str) -> Result<()> {
        remove_image_at(&self.containerd_socket(), reference)
    }

    /// `ctr images import -` into node 0's containerd: imports an archive
    /// read from `archive`'s pipe (e.g. `podman save`'s stdout), so no
    /// multi-GiB copy lands on disk. The other nodes of a multi-node cluster
    /// get it from node 0 with [`Self::sync_node_image`].
    pub fn import_image_stream(&self, archive: Stdio, base_name: Option<&str>) -> Result<String> {
        let mut c = self.ctr();
        c.args(["images", "import"]);
        if let Some(b) = base_name {
            c.args(["--base-name", b]);
        }
        c.arg("-");
        host::run_with_stdin(&mut c, archive)
    }

    /// Removes the node's images that no tag names any more: the CRI plugin
    /// keeps an image's `sha256:<id>` and `repo@sha256:` references after its
    /// tag moves to a rebuilt image, and each such image keeps its layers
    /// (GiB for a training image). Returns the references removed.
    /// Every node's containerd is pruned alike.
    pub fn remove_untagged_node_images(&self) -> Result<Vec<String>> {
        let mut all = Vec::new();
        for (_, socket) in self.node_sockets() {
            let out = host::run(ctr_at(&socket).args(["images", "ls"]))?;
            let stale = untagged_image_refs(&out);
            if !stale.is_empty() {
                host::run(ctr_at(&socket).args(["images", "rm"]).args(&stale))?;
            }
            all.extend(stale);
        }
        Ok(all)
    }

    /// Sets a label on an image in node 0's containerd (used as a cache key).
    pub fn label_node_image(&self, reference: &str, key: &str, value: &str) -> Result<()> {
        label_image_at(&self.containerd_socket(), reference, key, value)
    }

    /// Builds (once, cached) and loads a one-layer image made of a static Go
    /// program into the node's containerd. `main_go` is a complete `package
    /// main` source; the tag is a hash of it and the Go version. Returns the
    /// image reference (`<repository>:<hash>`). For test images.
    pub async fn load_go_image(&self, repository: &str, main_go: &str) -> Result<String> {
        let cache = self.config().cache_dir.clone();
        let repository = repository.to_owned();
        let main_go = main_go.to_owned();
        let this = self.clone();
        blocking(move || {
            let go_version = go_version(&cache)?;
            let h = image::sha256_hex(format!("{main_go}\n{go_version}").as_bytes());
            let reference = format!("{repository}:{}", &h[..12]);
            let archive = ensure_go_image_archive(&cache, &reference, &main_go, &h[..12])?;
            for (_, socket) in this.node_sockets() {
                if !images_at(&socket)?.contains(&reference) {
                    host::run(ctr_at(&socket).args(["images", "import"]).arg(&archive))?;
                }
            }
            Ok(reference)
        })
        .await
    }
}

pub(super) fn go_version(cache: &Path) -> Result<String> {
    let mut c = binaries::go_command(cache);
    c.args(["env", "GOVERSION"]);
    Ok(host::run(&mut c)?.trim().to_owned())
}

/// The archive of a one-binary image, built and cached under
/// `<cache>/images/localkube/` (keyed by `key`).
pub(super) fn ensure_go_image_archive(
    cache: &Path,
    reference: &str,
    main_go: &str,
    key: &str,
) -> Result<PathBuf> {
    let dir = cache.join("images").join("localkube");
    let name = reference
        .rsplit('/')
        .next()
        .unwrap_or("image")
        .replace(':', "-");
    let archive = dir.join(format!("{name}.oci.tar"));
    if archive.is_file() {
        return Ok(archive);
    }
    let work = dir.join(format!("build-{key}"));
    let bin = work.join("app");
    let log = cache.join("logs").join(format!("go-image-{name}.log"));
    progress!(
        "building image {reference} (static Go binary); log: {}",
        log.display()
    );
    image::build_static_go(main_go, &bin, &work, &log)?;
    let data = fs::read(&bin).map_err(Error::io("reading", &bin))?;
    // The binary is named after the repository's last segment: ".../pause" -> /pause.
    let repo = reference
        .rsplit_once(':')
        .map(|(r, _)| r)
        .unwrap_or(reference);
    let exe = format!("/{}", repo.rsplit('/').next().unwrap_or("app"));
    let oci = image::oci_archive(
        reference,
        &[ImageFile {
            path: exe.clone(),
            mode: 0o755,
            data,
        }],
        &ImageConfig {
            entrypoint: vec![exe],
            ..Default::default()
        },
    )?;
    util::write_atomic(&archive, &oci.bytes, 0o644)?;
    util::remove_dir_all_if_exists(&work)?;
    Ok(archive)
}

/// The references in `ctr images ls` output (columns REF TYPE DIGEST ...)
/// that are not tags and whose target no tag shares: an image ID
/// (`sha256:...`) or a repo digest (`repo@sha256:...`) left behind.
pub(super) fn untagged_image_refs(ls: &str) -> Vec<String> {
    let rows: Vec<(&str, &str)> = ls
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            let reference = cols.next()?;
            let digest = cols.nth(1)?;
            Some((reference, digest))
        })
        .collect();
    let untagged = |r: &str| r.starts_with("sha256:") || r.contains("@sha256:");
    let tagged: BTreeSet<&str> = rows
        .iter()
        .filter(|(r, _)| !untagged(r))
        .map(|(_, d)| *d)
        .collect();
    rows.iter()
        .filter(|(r, d)| untagged(r) && !tagged.contains(d))
        .map(|(r, _)| (*r).to_owned())
        .collect()
}
