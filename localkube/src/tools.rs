//! Command-line tools the tests use on the project's packaging (Helm,
//! kustomize), built from the Go module proxy with `go install` and cached
//! like the Kubernetes binaries.

use std::path::PathBuf;

use crate::binaries::{go_command, run_go};
use crate::error::Result;
use crate::util::{self, FileLock};

/// A tool installable with plain `go install module@version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoTool {
    Helm,
    Kustomize,
}

impl GoTool {
    pub fn name(self) -> &'static str {
        match self {
            GoTool::Helm => "helm",
            GoTool::Kustomize => "kustomize",
        }
    }

    pub fn version(self) -> &'static str {
        match self {
            GoTool::Helm => "v3.19.5",
            // v5.8 needs Go 1.27; v5.7 builds with the Go this project pins.
            GoTool::Kustomize => "v5.7.1",
        }
    }

    fn package(self) -> &'static str {
        match self {
            GoTool::Helm => "helm.sh/helm/v3/cmd/helm",
            GoTool::Kustomize => "sigs.k8s.io/kustomize/kustomize/v5",
        }
    }

    /// Stamps the version the way the projects' own release builds do.
    fn ldflags(self) -> String {
        match self {
            GoTool::Helm => format!(
                "-s -w -X helm.sh/helm/v3/internal/version.version={}",
                self.version()
            ),
            GoTool::Kustomize => format!(
                "-s -w -X sigs.k8s.io/kustomize/api/provenance.version={}",
                self.version()
            ),
        }
    }
}

/// Path of the cached tool, built on first use (a few minutes cold).
pub fn ensure_tool(tool: GoTool) -> Result<PathBuf> {
    let dir = util::cache_dir()?
        .join("bin")
        .join(format!("{}-{}", tool.name(), tool.version()));
    let bin = dir.join(tool.name());
    if bin.is_file() {
        return Ok(bin);
    }
    let _lock = FileLock::acquire(
        &dir.with_extension("lock"),
        &format!("{} build", tool.name()),
    )?;
    if bin.is_file() {
        return Ok(bin); // built by whoever held the lock
    }
    let tmp = dir.with_extension("tmp");
    util::remove_dir_all_if_exists(&tmp)?;
    util::create_dir_all(&tmp)?;
    eprintln!(
        "[localkube] building {} {} from the Go module proxy",
        tool.name(),
        tool.version()
    );
    let mut cmd = go_command(&tmp);
    cmd.env("GOBIN", &tmp)
        .env("GOFLAGS", "-buildvcs=false -trimpath")
        .args(["install", "-ldflags", &tool.ldflags()])
        .arg(format!("{}@{}", tool.package(), tool.version()));
    run_go(&mut cmd, tool.name(), &tmp.join("build.log"), None)?;
    util::remove_dir_all_if_exists(&dir)?;
    std::fs::rename(&tmp, &dir).map_err(crate::error::Error::io("renaming into place", &dir))?;
    Ok(bin)
}
