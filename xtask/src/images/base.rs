//! The base image: `debootstrap --variant=minbase`, slimmed like
//! debian:bookworm-slim, tarred and imported into podman (cached).

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use localkube::image::sha256_hex;

use super::names::{mirror, BASE_RECIPE, DEFAULT_MIRROR, SUITE};
use super::podman::{logged, output, Podman};

/// Files a bookworm-slim image leaves out (the official images' dpkg filter).
pub(super) const DPKG_SLIM: &str =
    "# Like debian:bookworm-slim: no docs, man pages or translations in images.\n\
path-exclude /usr/share/doc/*\n\
path-include /usr/share/doc/*/copyright\n\
path-exclude /usr/share/man/*\n\
path-exclude /usr/share/groff/*\n\
path-exclude /usr/share/info/*\n\
path-exclude /usr/share/lintian/*\n\
path-exclude /usr/share/linda/*\n\
path-exclude /usr/share/locale/*\n";

/// apt in images: no package cache, no recommends, no translations.
pub(super) const APT_SLIM: &str = "APT::Install-Recommends \"false\";\n\
APT::Install-Suggests \"false\";\n\
Acquire::Languages \"none\";\n\
DPkg::Post-Invoke { \"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true\"; };\n\
APT::Update::Post-Invoke { \"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true\"; };\n\
Dir::Cache::pkgcache \"\";\n\
Dir::Cache::srcpkgcache \"\";\n";

pub(super) struct Base {
    pub(super) reference: String,
    pub(super) id: String,
}

/// Makes (or finds) the local bookworm base image.
pub(super) fn ensure_base(podman: &Podman, cache: &Path, log_dir: &Path) -> Result<Base> {
    let mirror = mirror();
    let key =
        &sha256_hex(format!("{SUITE}\n{mirror}\n{BASE_RECIPE}\n{DPKG_SLIM}{APT_SLIM}").as_bytes())
            [..12];
    let reference = format!("localhost/dgl-operator/debian:{SUITE}-{key}");
    if !podman.exists(&reference) {
        let dir = cache.join("images").join("base");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let tarball = dir.join(format!("debian-{SUITE}-{key}.tar"));
        if !tarball.is_file() {
            debootstrap(&dir, &tarball, key, &mirror, log_dir)?;
        }
        eprintln!("images: podman import {} as {reference}", tarball.display());
        output(
            podman
                .cmd()
                .arg("import")
                .args([
                    "--change",
                    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                ])
                .args(["--change", "CMD [\"/bin/bash\"]"])
                .arg(&tarball)
                .arg(&reference),
        )?;
    }
    let id = podman.image_id(&reference)?;
    Ok(Base { reference, id })
}

pub(super) fn debootstrap(
    dir: &Path,
    tarball: &Path,
    key: &str,
    mirror: &str,
    log_dir: &Path,
) -> Result<()> {
    let rootfs = dir.join(format!("rootfs-{key}"));
    // A previous run may have died inside debootstrap with /proc mounted in the target.
    localkube::host::unmount_all_under(&rootfs)?;
    if rootfs.exists() {
        fs::remove_dir_all(&rootfs).with_context(|| format!("removing {}", rootfs.display()))?;
    }
    let log = log_dir.join("debootstrap.log");
    let _ = fs::remove_file(&log);
    let t = Instant::now();
    eprintln!(
        "images: debootstrap --variant=minbase {SUITE} from {mirror} (about 1-2 min); log: {}",
        log.display()
    );
    let result = logged(
        Command::new("debootstrap")
            .args(["--variant=minbase", "--components=main", SUITE])
            .arg(&rootfs)
            .arg(mirror),
        &log,
    );
    localkube::host::unmount_all_under(&rootfs)?;
    result?;
    slim_rootfs(&rootfs, mirror)?;
    let tmp = tarball.with_extension("tar.tmp");
    logged(
        Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .args(["--numeric-owner", "--xattrs", "-cf"])
            .arg(&tmp)
            .arg("."),
        &log,
    )?;
    fs::rename(&tmp, tarball).with_context(|| format!("renaming to {}", tarball.display()))?;
    fs::remove_dir_all(&rootfs).with_context(|| format!("removing {}", rootfs.display()))?;
    eprintln!(
        "images: base rootfs ready in {:.0}s ({} MB)",
        t.elapsed().as_secs_f64(),
        fs::metadata(tarball).map(|m| m.len() >> 20).unwrap_or(0)
    );
    Ok(())
}

/// Removes caches and docs and configures dpkg/apt like the official slim images.
pub(super) fn slim_rootfs(rootfs: &Path, mirror: &str) -> Result<()> {
    let write = |rel: &str, text: &str| -> Result<()> {
        let p = rootfs.join(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    write("etc/dpkg/dpkg.cfg.d/dgl-operator-slim", DPKG_SLIM)?;
    write("etc/apt/apt.conf.d/dgl-operator-slim", APT_SLIM)?;
    let security = if mirror == DEFAULT_MIRROR {
        "http://deb.debian.org/debian-security".to_owned()
    } else {
        format!("{}-security", mirror.trim_end_matches('/'))
    };
    write(
        "etc/apt/sources.list",
        &format!(
            "deb {mirror} {SUITE} main\ndeb {mirror} {SUITE}-updates main\ndeb {security} {SUITE}-security main\n"
        ),
    )?;
    for dir in [
        "var/cache/apt/archives",
        "var/lib/apt/lists",
        "usr/share/man",
        "usr/share/info",
        "usr/share/locale",
        "usr/share/lintian",
        "usr/share/linda",
        "usr/share/groff",
    ] {
        let d = rootfs.join(dir);
        if let Ok(rd) = fs::read_dir(&d) {
            for e in rd.flatten() {
                let p = e.path();
                // Keep apt's own "partial" and "auxfiles" directories.
                if p.is_dir()
                    && matches!(
                        p.file_name().and_then(|n| n.to_str()),
                        Some("partial" | "auxfiles")
                    )
                {
                    continue;
                }
                let r = if p.is_dir() && !p.is_symlink() {
                    fs::remove_dir_all(&p)
                } else {
                    fs::remove_file(&p)
                };
                r.with_context(|| format!("removing {}", p.display()))?;
            }
        }
    }
    // Docs except the copyright files (licences must stay).
    if let Ok(rd) = fs::read_dir(rootfs.join("usr/share/doc")) {
        for pkg in rd.flatten() {
            if let Ok(files) = fs::read_dir(pkg.path()) {
                for f in files.flatten() {
                    if f.file_name() != "copyright" {
                        let p = f.path();
                        let _ = if p.is_dir() && !p.is_symlink() {
                            fs::remove_dir_all(&p)
                        } else {
                            fs::remove_file(&p)
                        };
                    }
                }
            }
        }
    }
    Ok(())
}
