//! What every image step names: the images (`Which`, `reference`), their
//! definition (`ImageDef`), the version and the Debian suite and mirror. A
//! leaf the image modules import, so none of them imports `mod.rs`.

use std::path::PathBuf;

pub(super) const SUITE: &str = "bookworm";
pub(super) const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
/// Overrides the Debian mirror debootstrap and the images' apt use.
pub(super) const MIRROR_ENV: &str = "DGL_OPERATOR_DEBIAN_MIRROR";
/// Bump when the base rootfs recipe below changes: the base image is rebuilt.
pub(super) const BASE_RECIPE: &str = "slim-v1";
/// Image label holding the content hash.
pub const HASH_LABEL: &str = "io.dgl-operator.content-hash";
pub(super) const VERSION: &str = env!("CARGO_PKG_VERSION");
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Which {
    /// localhost/dgl-operator:<version> (Dockerfile, target operator)
    Operator,
    /// localhost/dgl-operator-runtime:<version> (Dockerfile, target runtime)
    Runtime,
    /// docker.io/dgloperator/graphsage:v<version> (examples/graphsage/Dockerfile)
    Graphsage,
    /// docker.io/dgloperator/graphstorm:v<version> (examples/graphstorm/Dockerfile, on graphsage)
    Graphstorm,
}

pub(super) fn mirror() -> String {
    std::env::var(MIRROR_ENV)
        .ok()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| DEFAULT_MIRROR.to_owned())
}

pub(super) struct ImageDef {
    pub(super) which: Which,
    pub(super) reference: String,
    pub(super) dockerfile: PathBuf,
    pub(super) target: Option<&'static str>,
    pub(super) build_args: Vec<(String, String)>,
    pub(super) contexts: Vec<(String, PathBuf)>,
    /// `--network=host`: RUN steps that use apt.
    pub(super) network: bool,
    pub(super) hash: String,
}

impl ImageDef {
    pub(super) fn repository(&self) -> &str {
        self.reference
            .rsplit_once(':')
            .map(|(r, _)| r)
            .unwrap_or(&self.reference)
    }
}

pub fn reference(which: Which) -> String {
    match which {
        Which::Operator => format!("localhost/dgl-operator:{VERSION}"),
        Which::Runtime => format!("localhost/dgl-operator-runtime:{VERSION}"),
        Which::Graphsage => format!("docker.io/dgloperator/graphsage:v{VERSION}"),
        Which::Graphstorm => format!("docker.io/dgloperator/graphstorm:v{VERSION}"),
    }
}
