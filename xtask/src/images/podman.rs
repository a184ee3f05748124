//! podman with its storage in our cache, the small command runners the
//! build uses, and the content hash every image is labelled with.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use localkube::image::sha256_hex;

use super::names::{reference, Which, HASH_LABEL};

/// podman with its storage in our cache and no systemd/journald assumptions.
pub(super) struct Podman {
    pub(super) base: PathBuf,
}

impl Podman {
    pub(super) fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.arg("--root")
            .arg(self.base.join("root"))
            .arg("--runroot")
            .arg(self.base.join("runroot"))
            .arg("--tmpdir")
            .arg(self.base.join("tmp"))
            .args([
                "--storage-driver",
                "overlay",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
            ])
            .stdin(Stdio::null());
        c
    }

    pub(super) fn exists(&self, reference: &str) -> bool {
        self.cmd()
            .args(["image", "exists", reference])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    pub(super) fn inspect(&self, reference: &str, format: &str) -> Result<String> {
        output(
            self.cmd()
                .args(["image", "inspect", "--format", format, reference]),
        )
    }

    /// The image's id (`podman image inspect --format {{.Id}}`).
    pub(super) fn image_id(&self, reference: &str) -> Result<String> {
        Ok(self.inspect(reference, "{{.Id}}")?.trim().to_owned())
    }

    pub(super) fn label(&self, reference: &str) -> Option<String> {
        if !self.exists(reference) {
            return None;
        }
        self.inspect(
            reference,
            &format!("{{{{index .Labels \"{HASH_LABEL}\"}}}}"),
        )
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty() && s != "<no value>")
    }
}

/// Runs a short command, returning stdout; the error names the command and shows stderr.
/// Copies `path` out of image `which` (as built, from podman's storage)
/// to `dest`: a container created and removed, nothing run.
pub(crate) fn copy_out_of_image(which: Which, path: &str, dest: &Path) -> Result<()> {
    let podman = Podman {
        base: localkube::cache_dir()?.join("podman"),
    };
    let reference = reference(which);
    let id = output(podman.cmd().args(["create", &reference]))?;
    let id = id.trim();
    let copied = output(podman.cmd().arg("cp").arg(format!("{id}:{path}")).arg(dest));
    let removed = output(podman.cmd().args(["rm", id]));
    copied.with_context(|| format!("copying {path} out of {reference}"))?;
    removed.map(drop)
}

pub(super) fn output(cmd: &mut Command) -> Result<String> {
    let rendered = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not run {rendered}"))?;
    if !out.status.success() {
        bail!(
            "{rendered} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a long command with its output appended to `log`; on failure the
/// error names the command and shows the log's last lines.
pub(super) fn logged(cmd: &mut Command, log: &Path) -> Result<()> {
    let rendered = format!("{cmd:?}");
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    writeln!(file, "\n$ {rendered}").ok();
    let err = file.try_clone()?;
    let status = cmd
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .status()
        .with_context(|| format!("could not run {rendered}"))?;
    if !status.success() {
        let text = fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(25)..].join("\n");
        bail!(
            "{rendered} failed ({status}); log: {}\n--- last lines ---\n{tail}",
            log.display()
        );
    }
    Ok(())
}

/// `program arg arg ...`, for messages.
pub fn render(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

pub(super) fn file_sha256(path: &Path) -> Result<String> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(sha256_hex(&bytes))
}

/// A content hash over named parts, order-independent of how they were collected.
#[derive(Default)]
pub(super) struct Hasher {
    parts: BTreeMap<String, String>,
}

impl Hasher {
    pub(super) fn add(&mut self, name: &str, value: impl Into<String>) {
        self.parts.insert(name.to_owned(), value.into());
    }
    pub(super) fn add_file(&mut self, name: &str, path: &Path) -> Result<()> {
        self.add(name, file_sha256(path)?);
        Ok(())
    }
    pub(super) fn finish(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.parts {
            s.push_str(&format!("{k}={v}\n"));
        }
        sha256_hex(s.as_bytes())
    }
}
