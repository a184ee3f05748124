//! Command-line tools the tests use on the project's packaging (Helm,
//! kustomize), and the peer operator the scale benchmark compares against
//! (Kubeflow's mpi-operator), built from the Go module proxy and cached like
//! the Kubernetes binaries.

use std::path::{Path, PathBuf};

use crate::binaries::{go_command, run_go};
use crate::error::Result;
use crate::util::{self, FileLock};

/// A tool installable with plain `go install module@version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoTool {
    Helm,
    Kustomize,
    /// Kubeflow's mpi-operator (v2beta1 MPIJobs); its CRD is kept next to
    /// the binary (see [`GoTool::module_files`]).
    MpiOperator,
    /// kube-router, run on a node with only its NetworkPolicy controller
    /// (the e2e's policy engine: the node's CNI bridge enforces none).
    KubeRouter,
    /// SeaweedFS's `weed`: the real S3-compatible server of the
    /// object-storage tests ([`crate::s3::S3Server`]).
    SeaweedFs,
}

impl GoTool {
    pub fn name(self) -> &'static str {
        match self {
            GoTool::Helm => "helm",
            GoTool::Kustomize => "kustomize",
            GoTool::MpiOperator => "mpi-operator",
            GoTool::KubeRouter => "kube-router",
            GoTool::SeaweedFs => "weed",
        }
    }

    pub fn version(self) -> &'static str {
        match self {
            GoTool::Helm => "v3.19.5",
            // v5.8 needs Go 1.27; v5.7 builds with the Go this project pins.
            GoTool::Kustomize => "v5.7.1",
            // The newest v0.8.x the module proxy serves (its go.mod says go 1.26).
            GoTool::MpiOperator => "v0.8.2",
            // The version the module proxy here lists for kube-router/v2.
            GoTool::KubeRouter => "v2.1.0",
            // master of 2026-11-09 (SeaweedFS 4.53): the module proxy serves
            // SeaweedFS by pseudo-version only (its tags are not semver).
            GoTool::SeaweedFs => SEAWEEDFS_VERSION,
        }
    }

    fn package(self) -> &'static str {
        match self {
            GoTool::Helm => "helm.sh/helm/v3/cmd/helm",
            GoTool::Kustomize => "sigs.k8s.io/kustomize/kustomize/v5",
            GoTool::MpiOperator => "github.com/kubeflow/mpi-operator/cmd/mpi-operator",
            GoTool::KubeRouter => "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router",
            GoTool::SeaweedFs => "github.com/seaweedfs/seaweedfs/weed",
        }
    }

    /// The module that holds [`Self::package`], when the tool is built in a
    /// wrapper module instead of by `go install pkg@version`.
    fn wrapper_module(self) -> Option<&'static str> {
        match self {
            // `go install ...@v0.8.2` looks up the module's deprecation in
            // its version list, which the proxy here refuses (403); a wrapper
            // module that requires the exact version needs no list.
            GoTool::MpiOperator => Some("github.com/kubeflow/mpi-operator"),
            // Same reason as mpi-operator (its version list is not needed).
            GoTool::KubeRouter => Some("github.com/cloudnativelabs/kube-router/v2"),
            // Its go.mod has a replace line: `go install` refuses it.
            GoTool::SeaweedFs => Some("github.com/seaweedfs/seaweedfs"),
            GoTool::Helm | GoTool::Kustomize => None,
        }
    }

    /// Files of the tool's module copied next to its binary (by their path in
    /// the module; looked up with [`ensure_tool_file`] by file name).
    pub fn module_files(self) -> &'static [&'static str] {
        match self {
            GoTool::MpiOperator => &["manifests/base/kubeflow.org_mpijobs.yaml"],
            GoTool::Helm | GoTool::Kustomize | GoTool::KubeRouter | GoTool::SeaweedFs => &[],
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
            // As upstream's Makefile (LD_FLAGS_V2), without the git fields.
            GoTool::MpiOperator => format!(
                "-s -w -X github.com/kubeflow/mpi-operator/pkg/version.Version={}",
                self.version()
            ),
            GoTool::KubeRouter => format!(
                "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version={}",
                self.version()
            ),
            GoTool::SeaweedFs => format!(
                "-s -w -X github.com/seaweedfs/seaweedfs/weed/util/version.COMMIT={}",
                SEAWEEDFS_COMMIT
            ),
        }
    }

    /// Lines of the wrapper go.mod besides `require`: the main module's Go
    /// version (at least the dependency's) and the dependency's own
    /// `replace` lines (ignored in a dependency, so restated).
    fn wrapper_extra(self) -> (&'static str, &'static str) {
        match self {
            GoTool::SeaweedFs => (
                "1.26.6",
                "replace github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0\n",
            ),
            _ => ("1.26.0", ""),
        }
    }
}

/// SeaweedFS as the Go module proxy serves it (`go list -m -versions` lists
/// no semver tag; this is master at its 4.53 release).
pub const SEAWEEDFS_VERSION: &str = "v0.0.0-20261109003541-7506e5f91cd6";
/// The commit of [`SEAWEEDFS_VERSION`], stamped into `weed version`.
const SEAWEEDFS_COMMIT: &str = "7506e5f9";

/// Path of a cached tool, without building it: `None` when it is not
/// built yet (tests that must not build name the command that does).
pub fn installed_tool(tool: GoTool) -> Option<PathBuf> {
    let bin = util::cache_dir()
        .ok()?
        .join("bin")
        .join(format!("{}-{}", tool.name(), tool.version()))
        .join(tool.name());
    bin.is_file().then_some(bin)
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
    match tool.wrapper_module() {
        None => {
            let mut cmd = go_command(&tmp);
            cmd.env("GOBIN", &tmp)
                .env("GOFLAGS", "-buildvcs=false -trimpath")
                .args(["install", "-ldflags", &tool.ldflags()])
                .arg(format!("{}@{}", tool.package(), tool.version()));
            run_go(&mut cmd, tool.name(), &tmp.join("build.log"), None)?;
        }
        Some(module) => build_in_wrapper(tool, module, &tmp)?,
    }
    util::remove_dir_all_if_exists(&dir)?;
    std::fs::rename(&tmp, &dir).map_err(crate::error::Error::io("renaming into place", &dir))?;
    Ok(bin)
}

/// A file of the tool's module kept next to its binary (one of
/// [`GoTool::module_files`], by file name); builds the tool first if needed.
pub fn ensure_tool_file(tool: GoTool, file_name: &str) -> Result<PathBuf> {
    let bin = ensure_tool(tool)?;
    let known = tool
        .module_files()
        .iter()
        .any(|f| Path::new(f).file_name().is_some_and(|n| n == file_name));
    let path = bin.with_file_name(file_name);
    if !known || !path.is_file() {
        return Err(crate::error::Error::Invalid(format!(
            "{} {} has no module file {file_name:?} (kept: {:?})",
            tool.name(),
            tool.version(),
            tool.module_files()
        )));
    }
    Ok(path)
}

/// Builds `tool` in a wrapper module (`require module version`) in `tmp`,
/// then copies its module files there.
fn build_in_wrapper(tool: GoTool, module: &str, tmp: &Path) -> Result<()> {
    let (go, replace) = tool.wrapper_extra();
    let gomod = format!(
        "// Generated by localkube: builds {} {} from the Go module proxy.\n\
         module local/dgl-operator/{}\n\ngo {go}\n\nrequire {module} {}\n\n{replace}",
        tool.name(),
        tool.version(),
        tool.name(),
        tool.version()
    );
    let wrapper = tmp.join("wrapper");
    util::create_dir_all(&wrapper)?;
    util::write_atomic(&wrapper.join("go.mod"), gomod.as_bytes(), 0o644)?;
    let log = tmp.join("build.log");
    let mut build = go_command(&wrapper);
    build
        .args(["build", "-trimpath", "-ldflags", &tool.ldflags(), "-o"])
        .arg(tmp.join(tool.name()))
        .arg(tool.package());
    run_go(&mut build, tool.name(), &log, None)?;
    let dir = module_dir(module, tool.version(), &wrapper)?;
    for f in tool.module_files() {
        let src = dir.join(f);
        let name = Path::new(f).file_name().unwrap_or_default();
        std::fs::copy(&src, tmp.join(name))
            .map_err(crate::error::Error::io("copying a module file", &src))?;
    }
    util::remove_dir_all_if_exists(&wrapper)
}

/// The module's directory in the Go module cache (`go mod download -json`).
fn module_dir(module: &str, version: &str, wrapper: &Path) -> Result<PathBuf> {
    let out = go_command(wrapper)
        .args(["mod", "download", "-json", &format!("{module}@{version}")])
        .output()
        .map_err(|source| crate::error::Error::Spawn {
            program: "go".into(),
            source,
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let meta: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| crate::error::Error::GoMetadata {
            context: format!("go mod download -json {module}@{version}"),
            detail: format!("{e}: {text}{}", String::from_utf8_lossy(&out.stderr)),
        })?;
    match meta["Dir"].as_str() {
        Some(d) if out.status.success() => Ok(PathBuf::from(d)),
        _ => Err(crate::error::Error::GoMetadata {
            context: format!("go mod download -json {module}@{version}"),
            detail: meta["Error"].as_str().unwrap_or("no Dir").to_owned(),
        }),
    }
}
