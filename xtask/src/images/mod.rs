//! `cargo xtask images`: build the project's container images with podman,
//! without a registry, and load them into the node cluster's containerd.
//!
//! 1. Debian packages podman and debootstrap (apt-get, when missing).
//! 2. The base image: `debootstrap --variant=minbase bookworm` into a folder,
//!    slimmed like debian:bookworm-slim, tarred and `podman import`ed as
//!    `localhost/dgl-operator/debian:bookworm-<recipe hash>` (the tarball is
//!    cached under `<cache>/images/base/`).
//! 3. `cargo build --release` of dgl-operator, dglrun, watcher-loop and
//!    dgl-partition (with MPI) on the host (target dir
//!    `<cache>/images/cargo-target`); the binaries are
//!    copied to `<cache>/images/prebuilt/`, the `prebuilt` build context.
//! 4. `podman build` of `Dockerfile` (targets `operator`, `runtime`) with
//!    `BINARIES=prebuilt`, of `examples/graphsage/Dockerfile` with the
//!    wheel cache of `cargo xtask pyenv` as a build context, and of
//!    `examples/graphstorm/Dockerfile` on that image with GraphStorm's
//!    pinned wheels (`graphstorm_env`'s wheelhouse), offline.
//! 5. `podman save | ctr -n k8s.io images import -` into the node of
//!    `--name` (if a node cluster of that name runs), piped so the archive
//!    never lands on disk. The archive is podman's docker-archive format: its
//!    layers are uncompressed, which makes save + import of the 5 GB training
//!    image about twice as fast as an `oci-archive` (gzip on save, gunzip on
//!    import; 174 s against 380 s here).
//! 6. After a build or load: `podman image prune` and the removal of the
//!    node's images no tag names (what earlier builds left), so old 5 GB
//!    training images do not fill the disk the node shares with cargo.
//!
//! Each image carries the label `io.dgl-operator.content-hash`: a sha256 of
//! everything that goes into it (Dockerfile, build args, base image ID,
//! binaries, scripts, the wheel list). An image whose label matches is not
//! rebuilt; an image in containerd with the same label is not re-imported.
//!
//! podman keeps its storage under `<cache>/podman/` (not /var/lib/containers)
//! and builds with `--isolation=chroot`, so builds need no OCI runtime,
//! cgroups or network setup.
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use localkube::image::sha256_hex;

use crate::util::{node_cluster, repo_root};

mod base;
mod names;
mod podman;
mod smoke;
use base::*;
use names::*;
pub use names::{reference, Which, HASH_LABEL};
pub(crate) use podman::copy_out_of_image;
pub use podman::render;
use podman::*;
use smoke::*;

/// The files of the repository the training image (examples/graphsage/
/// Dockerfile) copies: a change to any of them rebuilds it.
const TRAINING_IMAGE_FILES: [&str; 6] = [
    "examples/graphsage/requirements.txt",
    "examples/graphsage/partition.py",
    "examples/graphsage/train.py",
    "examples/launchpy/partition_graph.py",
    "examples/launchpy/train_dist.py",
    "examples/standalone/node_classification.py",
];
/// The files of the repository the GraphStorm image (examples/graphstorm/
/// Dockerfile) copies: a change to any of them rebuilds it.
const GRAPHSTORM_IMAGE_FILES: [&str; 6] = [
    "examples/graphstorm/requirements.txt",
    "examples/graphstorm/make_tables.py",
    "examples/graphstorm/make_chunked.py",
    "examples/graphstorm/gconstruct.json",
    "examples/graphstorm/nc.yaml",
    "examples/graphstorm/progress_hook/sitecustomize.py",
];
const BINARIES: [&str; 4] = ["dgl-operator", "dglrun", "watcher-loop", "dgl-partition"];
/// podman and debootstrap build the images; dgl-partition's MPI build needs
/// OpenMPI's headers and libclang (bindgen) on the host.
const PACKAGES: [&str; 5] = [
    "podman",
    "debootstrap",
    "openmpi-bin",
    "libopenmpi-dev",
    "libclang-dev",
];

#[derive(clap::Args)]
#[command(
    long_about = "Build the operator, runtime, GraphSAGE and GraphStorm training images with podman \
        (no registry needed) and load them into the node cluster's containerd.\n\n\
        Unchanged images (same content hash) are neither rebuilt nor re-imported. \
        Needs root (podman storage, debootstrap, ctr)."
)]
pub struct Args {
    /// Node cluster whose containerd receives the images (skipped when it does not run).
    #[arg(long, default_value = localkube::DEFAULT_CLUSTER)]
    pub name: String,
    /// Only these images (repeatable). graphstorm needs graphsage and graphsage
    /// needs runtime, which are then built too.
    #[arg(long, value_enum)]
    pub only: Vec<Which>,
    /// Build only; do not load into containerd.
    #[arg(long)]
    pub no_load: bool,
    /// Rebuild even when the content hash matches.
    #[arg(long)]
    pub force: bool,
    /// After loading, run every image once as a pod on the node and check its output.
    #[arg(long)]
    pub smoke: bool,
    /// Only build the training image's python-env stage (Python + the venv, no
    /// binaries), as the test command does early; nothing is loaded.
    #[arg(long, conflicts_with_all = ["only", "smoke", "force"])]
    pub python_env_only: bool,
    /// Binaries to put in the images: release (default) or the debug build of `cargo test`.
    #[arg(long, value_enum, default_value_t = Profile::Release)]
    pub profile: Profile,
}

/// Which build of the three binaries goes into the images.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// `cargo build --release` (what users get): own target dir under the cache.
    #[default]
    Release,
    /// The debug binaries `cargo test --workspace` builds (target/debug). The
    /// test command uses them: it has just built them, and a second, release
    /// compile would add minutes to a cold run. Same code, bigger binaries.
    Dev,
    /// `cargo build` (the dev profile) of only the image's binaries: the
    /// quickest cold compile (the demo's default: 11 min cold on 2 cores
    /// beside the Kubernetes build, where the release build took 15).
    /// Same code, unoptimised.
    Debug,
}

// ------------------------------------------------------------------ base image

// ------------------------------------------------------------------ binaries

/// `cargo build --release` of the binaries, copied to `<cache>/images/prebuilt/`.
fn host_binaries(
    root: &Path,
    cache: &Path,
    profile: Profile,
) -> Result<(PathBuf, BTreeMap<String, String>)> {
    let t = Instant::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(root);
    let bin_dir = match profile {
        Profile::Release => {
            // A target dir of our own: other `cargo build`s in the workspace (with
            // other packages, hence other feature sets) neither block on our lock
            // nor make us rebuild, so an unchanged tree is a no-op here.
            let target = cache.join("images").join("cargo-target");
            cmd.env("CARGO_TARGET_DIR", &target)
                .args(["build", "--release", "--locked"])
                .args(BINARIES.iter().flat_map(|b| ["-p", *b]))
                // dgl-partition's ranks talk MPI (links the host's libmpi,
                // bookworm's OpenMPI as in the training image).
                .args(["--features", crate::util::WORKSPACE_FEATURES]);
            target.join("release")
        }
        Profile::Dev => {
            // Exactly the build of `cargo test --workspace` (same packages,
            // same features), so right after the tests this is a no-op.
            cmd.args(["test", "--workspace", "--no-run", "--locked"])
                .args(["--features", crate::util::WORKSPACE_FEATURES]);
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target"));
            target.join("debug")
        }
        Profile::Debug => {
            cmd.args(["build", "--locked"])
                .args(BINARIES.iter().flat_map(|b| ["-p", *b]))
                .args(["--features", crate::util::WORKSPACE_FEATURES]);
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target"));
            target.join("debug")
        }
    };
    let shown = render(&cmd);
    eprintln!("images: {shown}");
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .with_context(|| format!("could not run {cargo}"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    let target = bin_dir;
    let out = cache.join("images").join("prebuilt");
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut hashes = BTreeMap::new();
    for b in BINARIES {
        let src = target.join(b);
        let dst = out.join(b);
        let tmp = out.join(format!(".{b}.tmp"));
        if profile == Profile::Release {
            // Stripped by the profile already.
            fs::copy(&src, &tmp)
                .with_context(|| format!("copying {} to {}", src.display(), tmp.display()))?;
        } else {
            strip_debug(&src, &tmp)?;
        }
        let h = file_sha256(&tmp)?;
        if file_sha256(&dst).ok().as_deref() != Some(h.as_str()) {
            fs::rename(&tmp, &dst).with_context(|| format!("renaming to {}", dst.display()))?;
        } else {
            fs::remove_file(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
        }
        hashes.insert(b.to_owned(), h);
    }
    eprintln!(
        "images: binaries ready in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    Ok((out, hashes))
}

/// Copies a debug build without its debug info: the line tables name the
/// checkout's path (the compile's working dir), so two clones of one commit
/// would give the images, keyed by the binaries' SHA-256, different bytes and
/// every node a new import of the training image. Panics still name file and
/// line (those are in the code, relative to the workspace).
fn strip_debug(src: &Path, dst: &Path) -> Result<()> {
    let status = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(src)
        .arg(dst)
        .status()
        .context("running objcopy (binutils, installed with the C toolchain cargo links with)")?;
    if !status.success() {
        bail!(
            "objcopy --strip-debug {} {} failed ({status})",
            src.display(),
            dst.display()
        );
    }
    Ok(())
}

// ------------------------------------------------------------------ images

/// Builds `img` unless an image with its content hash exists. Returns
/// whether it was built, and how long that took.
fn ensure_image(
    podman: &Podman,
    img: &ImageDef,
    root: &Path,
    log_dir: &Path,
    force: bool,
) -> Result<Option<Duration>> {
    if !force && podman.label(&img.reference).as_deref() == Some(img.hash.as_str()) {
        return Ok(None);
    }
    let log = log_dir.join(format!(
        "image-{}.log",
        img.reference
            .rsplit('/')
            .next()
            .unwrap_or("image")
            .replace(':', "-")
    ));
    let _ = fs::remove_file(&log);
    eprintln!(
        "images: building {} (log: {})",
        img.reference,
        log.display()
    );
    let t = Instant::now();
    let mut c = podman.cmd();
    c.arg("build")
        // No OCI runtime, cgroups or network namespace needed for RUN steps.
        .arg("--isolation=chroot")
        // Every FROM is local (our base image, earlier stages, scratch).
        .arg("--pull=never")
        .arg("--layers")
        .arg("-f")
        .arg(&img.dockerfile)
        .arg("-t")
        .arg(&img.reference)
        .arg("--label")
        .arg(format!("{HASH_LABEL}={}", img.hash));
    if img.network {
        c.arg("--network=host");
    }
    if let Some(t) = img.target {
        c.args(["--target", t]);
    }
    for (k, v) in &img.build_args {
        c.arg("--build-arg").arg(format!("{k}={v}"));
    }
    for (k, v) in &img.contexts {
        c.arg("--build-context").arg(format!("{k}={}", v.display()));
    }
    c.arg(root);
    logged(&mut c, &log)?;
    Ok(Some(t.elapsed()))
}

/// Loads `img` into every node's containerd that does not hold the same
/// content hash: from podman into node 0's, then from node 0's into each
/// other node's (a multi-node cluster pays the import once per node; the
/// time of each copy is printed). Returns the total time spent. The
/// GraphStorm image stays on node 0 (its scenario's jobs are held there):
/// a second 6 GB copy would not fit the disk beside the training image's.
fn load(
    cluster: &localkube::LocalCluster,
    podman: &Podman,
    img: &ImageDef,
    log_dir: &Path,
) -> Result<Option<Duration>> {
    let mut took = load_node0(cluster, podman, img, log_dir)?;
    if img.which == Which::Graphstorm {
        return Ok(took);
    }
    let copies = cluster
        .sync_node_image(&img.reference, Some((HASH_LABEL, img.hash.as_str())))
        .with_context(|| {
            format!(
                "copying {} to the other nodes (if a node's store stays inconsistent, e.g. \
                 after a full disk, stop the cluster and remove \
                 <cache>/node-images/containerd-n<i>; the next run copies the images again)",
                img.reference
            )
        })?;
    for (node, d) in copies {
        if let Some(d) = d {
            eprintln!(
                "images: {} copied to node {node} in {:.0}s",
                img.reference,
                d.as_secs_f64()
            );
            took = Some(took.unwrap_or_default() + d);
        }
    }
    Ok(took)
}

/// [`load`] into node 0's containerd, straight from `podman save`.
fn load_node0(
    cluster: &localkube::LocalCluster,
    podman: &Podman,
    img: &ImageDef,
    log_dir: &Path,
) -> Result<Option<Duration>> {
    let labels = cluster.node_image_labels(&img.reference)?;
    if labels.as_ref().and_then(|l| l.get(HASH_LABEL)) == Some(&img.hash) {
        return Ok(None);
    }
    let t = Instant::now();
    eprintln!(
        "images: loading {} into the node's containerd",
        img.reference
    );
    // The stale image goes first, its collection awaited, so the import
    // cannot race containerd's collector over shared layers.
    if labels.is_some() {
        cluster.remove_node_image(&img.reference)?;
    }
    let mut attempt = 1;
    let imported = loop {
        match save_into_node0(cluster, podman, img, log_dir)? {
            Err(e) if e.is_unpack_race() && attempt < 3 => {
                eprintln!(
                    "images: {}: unpack raced containerd's GC ({e}); importing again",
                    img.reference
                );
                std::thread::sleep(Duration::from_secs(2));
                attempt += 1;
            }
            r => {
                break r.with_context(|| {
                    format!(
                        "importing {} into {}",
                        img.reference,
                        cluster.containerd_socket().display()
                    )
                })?
            }
        }
    };
    tracing::debug!(%imported, "ctr import");
    if !cluster.node_images()?.iter().any(|r| r == &img.reference) {
        bail!(
            "ctr import of {} did not create it (it printed: {})",
            img.reference,
            imported.trim()
        );
    }
    cluster.label_node_image(&img.reference, HASH_LABEL, &img.hash)?;
    Ok(Some(t.elapsed()))
}

/// One `podman save | ctr import -` into node 0. The outer error is
/// podman's; the inner one ctr's, which the caller may retry.
fn save_into_node0(
    cluster: &localkube::LocalCluster,
    podman: &Podman,
    img: &ImageDef,
    log_dir: &Path,
) -> Result<std::result::Result<String, localkube::Error>> {
    // `podman save | ctr import -`: the training image's archive is 5.5 GiB
    // that would otherwise sit on the disk the node and cargo share.
    let log = log_dir.join(format!("save-{:?}.log", img.which).to_lowercase());
    let mut save = podman
        .cmd()
        .args(["save", "--quiet", "--format", "docker-archive"])
        .arg(&img.reference)
        .stdout(Stdio::piped())
        .stderr(fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?)
        .spawn()
        .context("running podman save")?;
    let archive = save.stdout.take().context("podman save has no stdout")?;
    // The archive's RepoTags carry the full name. --base-name only matters for
    // OCI archives that name images by tag alone, but keeps ctr from inventing
    // an "import-<date>" name if podman ever writes one.
    // The archive is about the image's size (uncompressed layers).
    let size = podman
        .inspect(&img.reference, "{{.Size}}")
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let what = format!("loading {} into node 0", img.reference);
    let (stdin, pump) = localkube::host::metered(archive, what, size)?;
    let imported = cluster.import_image_stream(stdin, Some(img.repository()));
    // The pump's error only says ctr stopped reading; ctr's own is the news.
    let _ = pump.join();
    let saved = save.wait().context("waiting for podman save")?;
    if !saved.success() {
        bail!(
            "podman save {} failed ({saved}); see {}",
            img.reference,
            log.display()
        );
    }
    Ok(imported)
}

/// Drops what a rebuild leaves behind, best effort: podman's untagged
/// images (old builds; the layer cache of the tagged ones stays) and, when
/// `cluster` is given, the node's images no tag names. Each old training
/// image keeps GiB the next CI run's build needs.
fn prune(podman: &Podman, cluster: Option<&localkube::LocalCluster>) {
    match output(podman.cmd().args(["image", "prune", "--force"])).map(|o| o.lines().count()) {
        Ok(0) => {}
        Ok(n) => eprintln!("images: removed {n} untagged podman image(s)"),
        Err(e) => eprintln!("images: warning: podman image prune: {e:#}"),
    }
    if let Some(cluster) = cluster {
        match cluster.remove_untagged_node_images() {
            Ok(gone) if !gone.is_empty() => eprintln!(
                "images: removed {} untagged image reference(s) from the node's containerd",
                gone.len()
            ),
            Ok(_) => {}
            Err(e) => eprintln!("images: warning: removing the node's untagged images: {e:#}"),
        }
    }
}

/// The wheels `cargo xtask pyenv` downloads; downloaded (not installed on
/// the host) when torch is missing.
fn wheels(root: &Path, cache: &Path) -> Result<(PathBuf, String)> {
    let dir = cache.join("wheels");
    let has_torch = fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("torch-2.2.1-"))
        })
        .unwrap_or(false);
    if !has_torch {
        eprintln!(
            "images: {} lacks the torch wheel; downloading the wheels first",
            dir.display()
        );
        crate::pyenv::ensure_wheels(root)?;
    }
    Ok((dir.clone(), wheel_listing_hash(&dir)?))
}

/// GraphStorm's pinned wheels, in `graphstorm_env`'s wheelhouse; filled
/// through that venv's build (on the DGL venv) when GraphStorm's is missing.
fn graphstorm_wheels(root: &Path, cache: &Path) -> Result<(PathBuf, String)> {
    let dir = cache.join(crate::graphstorm_env::WHEELS_DIR);
    let has = |dir: &Path| {
        fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with("graphstorm-"))
            })
            .unwrap_or(false)
    };
    if !has(&dir) {
        eprintln!(
            "images: {} lacks the graphstorm wheel; building the GraphStorm venv first",
            dir.display()
        );
        let python = crate::pyenv::ensure_venv(root)?;
        crate::graphstorm_env::ensure(root, &python)?;
    }
    if !has(&dir) {
        bail!(
            "{} has no graphstorm wheel after building the GraphStorm venv; \
             remove <cache>/venv/graphstorm-* so it downloads them again",
            dir.display()
        );
    }
    Ok((dir.clone(), wheel_listing_hash(&dir)?))
}

/// sha256 of the names and sizes of the `.whl` files in `dir`.
fn wheel_listing_hash(dir: &Path) -> Result<String> {
    let mut listing: Vec<String> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".whl"))
        .map(|e| {
            let len = e.metadata().map(|m| m.len()).unwrap_or(0);
            format!("{} {len}", e.file_name().to_string_lossy())
        })
        .collect();
    listing.sort();
    Ok(sha256_hex(listing.join("\n").as_bytes()))
}

/// Builds the training image's `python-env` stage: Debian's Python 3.11 and
/// the venv from the cached wheels, without the project's binaries or
/// scripts. It is most of the training image (5 GB of unpacking, little
/// CPU), so the test command runs it while the Kubernetes binaries compile;
/// the full build later reuses these layers and adds only small ones.
pub fn prebuild_python_env() -> Result<()> {
    let t = Instant::now();
    let Setup {
        root,
        cache,
        log_dir,
        podman,
    } = setup()?;
    let base = ensure_base(&podman, &cache, &log_dir)?;
    let (wheel_dir, wheel_hash) = wheels(&root, &cache)?;
    let dockerfile = root.join("examples/graphsage/Dockerfile");
    let mut h = Hasher::default();
    h.add_file("Dockerfile", &dockerfile)?;
    h.add_file(
        "requirements.txt",
        &root.join("examples/graphsage/requirements.txt"),
    )?;
    h.add("base", base.id.clone());
    h.add("wheels", wheel_hash);
    let img = ImageDef {
        which: Which::Graphsage,
        reference: format!("localhost/dgl-operator/graphsage-python-env:{VERSION}"),
        dockerfile,
        target: Some("python-env"),
        build_args: vec![
            ("DEBIAN_IMAGE".into(), base.reference.clone()),
            // Not used by this stage; it only has to name an image that exists.
            ("RUNTIME_IMAGE".into(), base.reference.clone()),
        ],
        contexts: vec![("wheels".into(), wheel_dir)],
        network: true,
        hash: h.finish(),
    };
    match ensure_image(&podman, &img, &root, &log_dir, false)? {
        Some(took) => eprintln!(
            "images: {} built in {:.0}s",
            img.reference,
            took.as_secs_f64()
        ),
        None => eprintln!("images: {} unchanged (cached)", img.reference),
    }
    eprintln!(
        "images: python-env ready in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn human_bytes(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.2} GiB", n as f64 / f64::from(1u32 << 30))
    } else {
        format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20))
    }
}

/// What every image build needs: paths, the Debian packages, root, podman.
struct Setup {
    root: PathBuf,
    cache: PathBuf,
    log_dir: PathBuf,
    podman: Podman,
}

fn setup() -> Result<Setup> {
    let root = repo_root();
    let cache = localkube::cache_dir()?;
    let log_dir = cache.join("logs");
    fs::create_dir_all(&log_dir)?;
    localkube::host::ensure_packages(&PACKAGES, &log_dir)?;
    if !localkube::host::is_root() {
        bail!("`cargo xtask images` needs root: podman's storage, debootstrap and ctr");
    }
    let podman = Podman {
        base: cache.join("podman"),
    };
    Ok(Setup {
        root,
        cache,
        log_dir,
        podman,
    })
}

/// The images to build: `--only` (or all), plus the training images each
/// one is built on, in enum order.
fn wanted_images(only: &[Which]) -> Vec<Which> {
    let mut wanted: Vec<Which> = if only.is_empty() {
        vec![
            Which::Operator,
            Which::Runtime,
            Which::Graphsage,
            Which::Graphstorm,
        ]
    } else {
        only.to_vec()
    };
    // Each training image is built on the one before (enum order).
    if wanted.contains(&Which::Graphstorm) && !wanted.contains(&Which::Graphsage) {
        wanted.push(Which::Graphsage);
    }
    if wanted.contains(&Which::Graphsage) && !wanted.contains(&Which::Runtime) {
        wanted.push(Which::Runtime);
    }
    wanted.sort();
    wanted.dedup();
    wanted
}

/// The operator or runtime image: a target of the root `Dockerfile` with
/// the prebuilt host binaries.
fn binary_image(
    h: &mut Hasher,
    which: Which,
    dockerfile: &Path,
    base: &Base,
    prebuilt: &Path,
    bin_hashes: &BTreeMap<String, String>,
) -> Result<ImageDef> {
    let target = if which == Which::Operator {
        "operator"
    } else {
        "runtime"
    };
    h.add_file("Dockerfile", dockerfile)?;
    h.add("base", base.id.clone());
    h.add("target", target);
    let bins: &[&str] = if which == Which::Operator {
        &["dgl-operator"]
    } else {
        &["dglrun", "watcher-loop", "dgl-partition"]
    };
    for b in bins {
        h.add(b, bin_hashes[*b].clone());
    }
    Ok(ImageDef {
        which,
        reference: reference(which),
        dockerfile: dockerfile.to_path_buf(),
        target: Some(target),
        build_args: vec![
            ("BINARIES".into(), "prebuilt".into()),
            ("DEBIAN_IMAGE".into(), base.reference.clone()),
        ],
        contexts: vec![("prebuilt".into(), prebuilt.to_path_buf())],
        network: false,
        hash: String::new(),
    })
}

/// The GraphSAGE image: the runtime image (must be in `built`) plus Python,
/// DGL's wheels and the example's files.
fn graphsage_image(
    h: &mut Hasher,
    root: &Path,
    cache: &Path,
    podman: &Podman,
    base: &Base,
    built: &BTreeMap<Which, ImageDef>,
) -> Result<ImageDef> {
    let which = Which::Graphsage;
    let df = root.join("examples/graphsage/Dockerfile");
    h.add_file("Dockerfile", &df)?;
    h.add("base", base.id.clone());
    for f in TRAINING_IMAGE_FILES {
        h.add_file(f, &root.join(f))?;
    }
    let runtime = &built[&Which::Runtime];
    h.add("runtime", podman.image_id(&runtime.reference)?);
    let (wheel_dir, wheel_hash) = wheels(root, cache)?;
    h.add("wheels", wheel_hash);
    Ok(ImageDef {
        which,
        reference: reference(which),
        dockerfile: df,
        target: None,
        build_args: vec![
            ("DEBIAN_IMAGE".into(), base.reference.clone()),
            ("RUNTIME_IMAGE".into(), runtime.reference.clone()),
        ],
        contexts: vec![("wheels".into(), wheel_dir)],
        // apt-get install python3.11 from the Debian mirror.
        network: true,
        hash: String::new(),
    })
}

/// The table printed after a run: each image's size, build and import.
fn print_report(report: &[(String, u64, Option<Duration>)], loaded: &[(String, Option<Duration>)]) {
    println!("{:<48}{:>12}  {:<22}CONTAINERD", "IMAGE", "SIZE", "BUILD");
    for (r, size, took) in report {
        let build = match took {
            Some(d) => format!("built in {:.0}s", d.as_secs_f64()),
            None => "unchanged (cached)".into(),
        };
        let load = loaded
            .iter()
            .find(|(l, _)| l == r)
            .map(|(_, d)| match d {
                Some(d) => format!("imported in {:.0}s", d.as_secs_f64()),
                None => "already loaded".into(),
            })
            .unwrap_or_else(|| "-".into());
        println!("{r:<48}{:>12}  {build:<22}{load}", human_bytes(*size));
    }
}

/// The arguments that build the images `only` without loading them (the
/// demo's build beside the node cluster's start).
pub fn build_only(name: &str, only: Vec<Which>, profile: Profile) -> Args {
    Args {
        name: name.to_owned(),
        only,
        no_load: true,
        force: false,
        smoke: false,
        python_env_only: false,
        profile,
    }
}

pub fn run(args: Args) -> Result<()> {
    if args.python_env_only {
        return prebuild_python_env();
    }
    let started = Instant::now();
    let Setup {
        root,
        cache,
        log_dir,
        podman,
    } = setup()?;
    let wanted = wanted_images(&args.only);

    let base = ensure_base(&podman, &cache, &log_dir)?;
    // Cold, the training image's python-env stage (the wheels over the
    // network, then 3.6 GB unpacked: little CPU) builds beside the compile;
    // the training image below then reuses its layers. Warm, a no-op.
    let (prebuilt, bin_hashes) = std::thread::scope(|s| {
        let env = wanted
            .contains(&Which::Graphsage)
            .then(|| s.spawn(prebuild_python_env));
        let bins = host_binaries(&root, &cache, args.profile);
        if let Some(env) = env {
            env.join()
                .map_err(|_| anyhow::anyhow!("the python-env build thread panicked"))?
                .context("building the training image's python-env stage")?;
        }
        bins
    })?;
    let dockerfile = root.join("Dockerfile");

    let mut report = Vec::new();
    let mut built: BTreeMap<Which, ImageDef> = BTreeMap::new();
    for which in wanted {
        let mut h = Hasher::default();
        let img = match which {
            Which::Operator | Which::Runtime => {
                binary_image(&mut h, which, &dockerfile, &base, &prebuilt, &bin_hashes)?
            }
            Which::Graphsage => graphsage_image(&mut h, &root, &cache, &podman, &base, &built)?,
            Which::Graphstorm => graphstorm_image(&mut h, &root, &cache, &podman, &built)?,
        };
        let img = ImageDef {
            hash: h.finish(),
            ..img
        };
        let took = ensure_image(&podman, &img, &root, &log_dir, args.force)?;
        let size: u64 = podman
            .inspect(&img.reference, "{{.Size}}")?
            .trim()
            .parse()
            .unwrap_or(0);
        report.push((img.reference.clone(), size, took));
        built.insert(which, img);
    }

    let mut loaded = Vec::new();
    let cluster = node_cluster(&args.name)?;
    if args.no_load {
        eprintln!("images: --no-load: not loading into containerd");
    } else if !cluster.node_running() {
        eprintln!(
            "images: no node cluster {:?} is running; not loaded (start it with `cargo xtask cluster up --node --name {}` and rerun)",
            args.name, args.name
        );
    } else {
        for img in built.values() {
            loaded.push((
                img.reference.clone(),
                load(&cluster, &podman, img, &log_dir)?,
            ));
        }
    }
    if report.iter().any(|(_, _, took)| took.is_some())
        || loaded.iter().any(|(_, took)| took.is_some())
    {
        let running = !args.no_load && cluster.node_running();
        prune(&podman, running.then_some(&cluster));
    }

    print_report(&report, &loaded);
    eprintln!("images: done in {:.1}s", started.elapsed().as_secs_f64());

    if args.smoke {
        if loaded.is_empty() {
            bail!("--smoke needs the images loaded into a running node cluster");
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        rt.block_on(smoke(&cluster, &built))?;
    }
    Ok(())
}

/// The GraphStorm image: the GraphSAGE image (must be in `built`) plus
/// GraphStorm's wheels, the example's files and its tables, built offline.
fn graphstorm_image(
    h: &mut Hasher,
    root: &Path,
    cache: &Path,
    podman: &Podman,
    built: &BTreeMap<Which, ImageDef>,
) -> Result<ImageDef> {
    let df = root.join("examples/graphstorm/Dockerfile");
    h.add_file("Dockerfile", &df)?;
    for f in GRAPHSTORM_IMAGE_FILES {
        h.add_file(f, &root.join(f))?;
    }
    let below = built
        .get(&Which::Graphsage)
        .context("the GraphStorm image needs the GraphSAGE image built first")?;
    h.add("graphsage", podman.image_id(&below.reference)?);
    let (wheel_dir, wheel_hash) = graphstorm_wheels(root, cache)?;
    h.add("wheels", wheel_hash);
    Ok(ImageDef {
        which: Which::Graphstorm,
        reference: reference(Which::Graphstorm),
        dockerfile: df,
        target: None,
        build_args: vec![("BASE_IMAGE".into(), below.reference.clone())],
        contexts: vec![("wheels".into(), wheel_dir)],
        // Every wheel is in the context (pip --no-index); nothing is fetched.
        network: false,
        hash: String::new(),
    })
}

#[cfg(test)]
mod tests;
