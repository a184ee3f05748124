//! Builds the control-plane binaries from the Go module proxy and caches them.
//!
//! No container registry or GitHub release download is reachable from the
//! development machines, but the Go module proxy is, and it serves the full
//! Kubernetes and etcd sources. The recipe (see
//! `shared/reference/survey-test-infra.md`, section 7.1/7.2):
//!
//! * Kubernetes: `k8s.io/kubernetes` requires its staging modules at the fake
//!   version `v0.0.0` and resolves them with local `replace` lines that are
//!   ignored when it is a dependency. A throwaway wrapper module therefore
//!   replaces every staging module with its published `v0.<minor>.<patch>`
//!   twin, derived from the release's own go.mod, and builds the `cmd/*`
//!   packages of the dependency in ONE `go build` so the shared packages are
//!   compiled once.
//! * etcd: `go install go.etcd.io/etcd/server/v3@v` refuses (replace lines in
//!   its go.mod), so the same wrapper trick is used.
//! * kwok: its go.mod has no replace lines, plain `go install` works.
//!
//! Each artifact directory carries a stamp file; a build is skipped when the
//! stamp matches and every binary still reports the expected version.
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::util::{self, progress, FileLock};

/// Kubernetes release built for every tier. The newest v1.33 patch the Go
/// module proxy served when this was pinned (`go list -m -versions k8s.io/kubernetes`).
pub const KUBERNETES_VERSION: &str = "v1.33.13";
/// etcd release paired with Kubernetes 1.33 (its go.mod requires the v3.5.21 client).
pub const ETCD_VERSION: &str = "v3.5.21";
/// kwok release built against the Kubernetes 1.33 libraries.
pub const KWOK_VERSION: &str = "v0.7.0";

/// Kubernetes commands built together in one `go build`.
pub const KUBE_COMMANDS: [&str; 5] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
];

const STAMP: &str = ".localkube-stamp.json";

/// Paths of the cached binaries (all verified to exist and report their version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    pub kubernetes_version: String,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kubelet: PathBuf,
    pub kube_proxy: PathBuf,
    pub etcd_version: String,
    pub etcd: PathBuf,
    pub kwok_version: String,
    pub kwok: PathBuf,
    pub kwokctl: PathBuf,
}

impl Binaries {
    /// Every binary with its name, for listings.
    pub fn all(&self) -> Vec<(&'static str, &Path)> {
        vec![
            ("kube-apiserver", &self.kube_apiserver),
            ("kube-controller-manager", &self.kube_controller_manager),
            ("kube-scheduler", &self.kube_scheduler),
            ("kubelet", &self.kubelet),
            ("kube-proxy", &self.kube_proxy),
            ("etcd", &self.etcd),
            ("kwok", &self.kwok),
            ("kwokctl", &self.kwokctl),
        ]
    }
}

/// How to build. `Default` uses the standard cache dir and one Go job per core.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub cache_dir: PathBuf,
    /// `go build -p`: parallel compile jobs.
    pub jobs: usize,
}

impl BuildOptions {
    pub fn new(cache_dir: PathBuf) -> Self {
        let jobs = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        BuildOptions { cache_dir, jobs }
    }

    pub fn from_env() -> Result<Self> {
        Ok(Self::new(util::cache_dir()?))
    }
}

/// One cached build product: a directory of binaries plus a stamp.
struct Artifact {
    component: &'static str,
    version: &'static str,
    dir: PathBuf,
    binaries: Vec<&'static str>,
    /// Substring that `<binary> --version` must print.
    expect: String,
}

impl Artifact {
    fn kubernetes(cache: &Path) -> Self {
        Artifact {
            component: "kubernetes",
            version: KUBERNETES_VERSION,
            dir: cache.join("bin").join(format!("k8s-{KUBERNETES_VERSION}")),
            binaries: KUBE_COMMANDS.to_vec(),
            expect: format!("Kubernetes {KUBERNETES_VERSION}"),
        }
    }
    fn etcd(cache: &Path) -> Self {
        Artifact {
            component: "etcd",
            version: ETCD_VERSION,
            dir: cache.join("bin").join(format!("etcd-{ETCD_VERSION}")),
            binaries: vec!["etcd"],
            expect: format!("etcd Version: {}", ETCD_VERSION.trim_start_matches('v')),
        }
    }
    fn kwok(cache: &Path) -> Self {
        Artifact {
            component: "kwok",
            version: KWOK_VERSION,
            dir: cache.join("bin").join(format!("kwok-{KWOK_VERSION}")),
            binaries: vec!["kwok", "kwokctl"],
            expect: KWOK_VERSION.trim_start_matches('v').to_owned(),
        }
    }
    fn stamp_path(&self) -> PathBuf {
        self.dir.join(STAMP)
    }
    fn path(&self, bin: &str) -> PathBuf {
        self.dir.join(bin)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Stamp {
    component: String,
    version: String,
    binaries: Vec<String>,
    go_version: String,
    built_at_unix: u64,
    build_seconds: u64,
}

/// Returns the cached binaries, building whatever is missing or stale.
///
/// Blocking; a cold Kubernetes build takes 20+ minutes on 2 cores and prints
/// progress lines to stderr. Concurrent callers (several test binaries) are
/// serialized by a lock file per artifact, and the second one finds the
/// first one's result.
///
/// kwok is not among them (only `bench scale` uses it, and its build costs
/// minutes cold): [`ensure_kwok`] builds it; until then `Binaries::kwok`
/// names a file that does not exist.
pub fn ensure_binaries(opts: &BuildOptions) -> Result<Binaries> {
    let cache = &opts.cache_dir;
    ensure_artifact(&Artifact::etcd(cache), opts, build_etcd)?;
    ensure_artifact(&Artifact::kubernetes(cache), opts, build_kubernetes)?;
    Ok(paths(cache))
}

/// [`ensure_binaries`] plus kwok and kwokctl.
pub fn ensure_kwok(opts: &BuildOptions) -> Result<Binaries> {
    ensure_binaries(opts)?;
    ensure_artifact(&Artifact::kwok(&opts.cache_dir), opts, build_kwok)?;
    Ok(paths(&opts.cache_dir))
}

/// Returns the cached binaries without building; fails with a message naming
/// the missing file if any artifact is absent or stale (kwok is not checked:
/// see [`ensure_binaries`]).
pub fn installed_binaries(cache: &Path) -> Result<Binaries> {
    for a in [Artifact::etcd(cache), Artifact::kubernetes(cache)] {
        verify(&a)?;
    }
    Ok(paths(cache))
}

fn paths(cache: &Path) -> Binaries {
    let k = Artifact::kubernetes(cache);
    let e = Artifact::etcd(cache);
    let w = Artifact::kwok(cache);
    Binaries {
        kubernetes_version: KUBERNETES_VERSION.to_owned(),
        kube_apiserver: k.path("kube-apiserver"),
        kube_controller_manager: k.path("kube-controller-manager"),
        kube_scheduler: k.path("kube-scheduler"),
        kubelet: k.path("kubelet"),
        kube_proxy: k.path("kube-proxy"),
        etcd_version: ETCD_VERSION.to_owned(),
        etcd: e.path("etcd"),
        kwok_version: KWOK_VERSION.to_owned(),
        kwok: w.path("kwok"),
        kwokctl: w.path("kwokctl"),
    }
}

/// Checks the stamp and runs every binary's `--version` (in parallel: it is
/// on the fast path of every `cluster up`).
fn verify(a: &Artifact) -> Result<()> {
    let stamp_path = a.stamp_path();
    let stamp: Stamp = match fs::read(&stamp_path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::BadState {
            path: stamp_path.clone(),
            reason: e.to_string(),
        })?,
        Err(_) => {
            return Err(Error::MissingBinary {
                path: a.path(a.binaries[0]),
                stamp: stamp_path,
            })
        }
    };
    if stamp.version != a.version || stamp.component != a.component {
        return Err(Error::VersionMismatch {
            path: stamp_path,
            got: format!("{} {}", stamp.component, stamp.version),
            expected: format!("{} {}", a.component, a.version),
        });
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = a
            .binaries
            .iter()
            .map(|b| {
                let path = a.path(b);
                let stamp = stamp_path.clone();
                s.spawn(move || check_version(&path, &a.expect, &stamp))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Invalid("version check thread panicked".into())))
            })
            .collect::<Result<Vec<()>>>()
    })?;
    Ok(())
}

fn check_version(path: &Path, expect: &str, stamp: &Path) -> Result<()> {
    if !path.is_file() {
        return Err(Error::MissingBinary {
            path: path.to_owned(),
            stamp: stamp.to_owned(),
        });
    }
    let out = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            program: path.display().to_string(),
            source,
        })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if text.contains(expect) {
        Ok(())
    } else {
        Err(Error::VersionMismatch {
            path: path.to_owned(),
            got: text.trim().to_owned(),
            expected: expect.to_owned(),
        })
    }
}

type BuildFn = fn(&Artifact, &BuildOptions, &Path) -> Result<()>;

fn ensure_artifact(a: &Artifact, opts: &BuildOptions, build: BuildFn) -> Result<()> {
    if verify(a).is_ok() {
        return Ok(());
    }
    let lock_path = opts
        .cache_dir
        .join("locks")
        .join(format!("build-{}-{}.lock", a.component, a.version));
    let _lock = FileLock::acquire(&lock_path, &format!("the {} build", a.component))?;
    // Another process may have finished the build while we waited for the lock.
    match verify(a) {
        Ok(()) => return Ok(()),
        Err(_) if !a.stamp_path().exists() => {
            progress!("{} {} is not in the cache yet", a.component, a.version)
        }
        Err(e) => progress!("{} {} will be rebuilt: {e}", a.component, a.version),
    }

    let started = Instant::now();
    let parent = a.dir.parent().unwrap_or(&opts.cache_dir);
    util::create_dir_all(parent)?;
    // Build into a scratch directory and rename, so an interrupted build never
    // leaves a directory that looks complete.
    let tmp = parent.join(format!(
        ".{}-{}.tmp-{}",
        a.component,
        a.version,
        std::process::id()
    ));
    util::remove_dir_all_if_exists(&tmp)?;
    util::create_dir_all(&tmp)?;
    build(a, opts, &tmp)?;

    let go_version = go_output(&["env", "GOVERSION"], &opts.cache_dir)?;
    let stamp = Stamp {
        component: a.component.to_owned(),
        version: a.version.to_owned(),
        binaries: a.binaries.iter().map(|b| (*b).to_owned()).collect(),
        go_version: go_version.trim().to_owned(),
        built_at_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        build_seconds: started.elapsed().as_secs(),
    };
    for b in &a.binaries {
        check_version(&tmp.join(b), &a.expect, &tmp.join(STAMP))?;
    }
    let json = serde_json::to_vec_pretty(&stamp).map_err(|e| Error::Invalid(e.to_string()))?;
    util::write_atomic(&tmp.join(STAMP), &json, 0o644)?;
    util::remove_dir_all_if_exists(&a.dir)?;
    fs::rename(&tmp, &a.dir).map_err(Error::io("renaming into place", &a.dir))?;
    progress!(
        "{} {} ready in {} ({})",
        a.component,
        a.version,
        util::human(started.elapsed()),
        a.dir.display()
    );
    Ok(())
}

/// Environment shared by every `go` invocation. The caller's GOPROXY/GOSUMDB
/// are kept (they point at the reachable proxy); everything that could make
/// the build depend on the caller's shell is pinned.
pub(crate) fn go_command(dir: &Path) -> Command {
    let mut cmd = Command::new("go");
    cmd.current_dir(dir)
        // Never let a dependency's `toolchain` line trigger a toolchain download.
        .env("GOTOOLCHAIN", "local")
        // Static binaries like upstream's release builds; no C toolchain needed.
        .env("CGO_ENABLED", "0")
        // A go.work somewhere above the cache dir must not capture the wrapper module.
        .env("GOWORK", "off")
        .env("GO111MODULE", "on")
        // The wrapper directories are not git checkouts; -mod=mod lets `go build`
        // fill in go.sum lines `go get` did not record instead of failing.
        .env("GOFLAGS", "-mod=mod -buildvcs=false")
        .stdin(Stdio::null());
    cmd
}

fn go_output(args: &[&str], dir: &Path) -> Result<String> {
    let out = go_command(dir)
        .args(args)
        .output()
        .map_err(|source| Error::Spawn {
            program: "go".into(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::GoMetadata {
            context: format!("go {}", args.join(" ")),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a go command with output appended to `log`. When `expected_packages`
/// is set the command is expected to run with `-v` (one line per compiled
/// package) and a progress line is printed every 30 s.
pub(crate) fn run_go(
    cmd: &mut Command,
    label: &str,
    log: &Path,
    expected_packages: Option<usize>,
) -> Result<()> {
    let rendered = format!("{cmd:?}");
    let mut log_file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(Error::io("opening log", log))?;
    writeln!(log_file, "\n$ {rendered}").map_err(Error::io("writing", log))?;
    let log_file = Arc::new(Mutex::new(log_file));

    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Spawn {
            program: "go".into(),
            source,
        })?;
    let lines = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let log_file = Arc::clone(&log_file);
        let lines = Arc::clone(&lines);
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(|l| l.ok()) {
                lines.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut f) = log_file.lock() {
                    let _ = writeln!(f, "{line}");
                }
            }
        }));
    }

    let started = Instant::now();
    let mut last_report = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(Error::io("waiting for go", log)(e)),
        }
        std::thread::sleep(Duration::from_millis(250));
        if last_report.elapsed() >= Duration::from_secs(30) {
            last_report = Instant::now();
            let done = lines.load(Ordering::Relaxed);
            let detail = match expected_packages {
                Some(total) => format!(", {done} of ~{total} packages compiled"),
                None => String::new(),
            };
            progress!(
                "  {label}: still running, {} elapsed{detail}",
                util::human(started.elapsed())
            );
        }
    };
    for r in readers {
        let _ = r.join();
    }
    if status.success() {
        Ok(())
    } else {
        Err(Error::CommandFailed {
            command: rendered,
            status: status.to_string(),
            log: log.to_owned(),
            tail: util::tail(log, 30),
        })
    }
}

fn build_log(opts: &BuildOptions, a: &Artifact) -> Result<PathBuf> {
    let dir = opts.cache_dir.join("logs");
    util::create_dir_all(&dir)?;
    let log = dir.join(format!("build-{}-{}.log", a.component, a.version));
    // Start each build with a fresh log so the tail in an error is this attempt's.
    util::remove_file_if_exists(&log)?;
    Ok(log)
}

/// The module directory for a wrapper module; kept between builds so a
/// retried build reuses its go.sum.
fn wrapper_dir(opts: &BuildOptions, a: &Artifact) -> Result<PathBuf> {
    let dir = opts
        .cache_dir
        .join("gobuild")
        .join(format!("{}-{}", a.component, a.version));
    util::create_dir_all(&dir)?;
    Ok(dir)
}

/// Staging version for a Kubernetes release: v1.33.13 -> v0.33.13.
pub(crate) fn staging_version(k8s_version: &str) -> Result<String> {
    k8s_version
        .strip_prefix("v1.")
        .map(|rest| format!("v0.{rest}"))
        .ok_or_else(|| Error::Invalid(format!("not a v1.x Kubernetes version: {k8s_version}")))
}

/// Staging modules from a k8s.io/kubernetes go.mod: every `k8s.io/* v0.0.0`
/// requirement and every `=> ./staging/...` replacement (the union: a replace
/// for a module outside the build graph is ignored, a missing one breaks it).
pub(crate) fn staging_modules(gomod: &str) -> Vec<String> {
    let mut mods: Vec<String> = gomod
        .lines()
        .filter_map(|line| {
            let line = line.trim().trim_start_matches("require").trim();
            let mut words = line.split_whitespace();
            let module = words.next()?;
            if !module.starts_with("k8s.io/") {
                return None;
            }
            match (words.next(), words.next()) {
                (Some("v0.0.0"), None) => Some(module.to_owned()),
                (Some("=>"), Some(target)) if target.starts_with("./staging/") => {
                    Some(module.to_owned())
                }
                _ => None,
            }
        })
        .collect();
    mods.sort();
    mods.dedup();
    mods
}

/// The wrapper go.mod for the Kubernetes build.
pub(crate) fn kubernetes_wrapper_gomod(k8s_version: &str, staging: &[String]) -> Result<String> {
    let sv = staging_version(k8s_version)?;
    let mut s = String::from(
        "// Generated by localkube: a wrapper module that builds Kubernetes from the Go\n\
         // module proxy. Do not edit; it is rewritten on every build.\n\
         module local/dgl-operator/k8sbins\n\n\
         // Mimic upstream 1.33's language version and GODEBUG defaults: only the\n\
         // main module's go/godebug lines count, not the dependency's.\n\
         go 1.24.0\n\n\
         godebug default=go1.24\n\n",
    );
    s.push_str(&format!("require k8s.io/kubernetes {k8s_version}\n\n"));
    s.push_str("replace (\n");
    for m in staging {
        s.push_str(&format!("\t{m} => {m} {sv}\n"));
    }
    s.push_str(")\n");
    Ok(s)
}

#[derive(Deserialize)]
struct ModDownload {
    #[serde(rename = "GoMod")]
    go_mod: Option<String>,
    #[serde(rename = "Info")]
    info: Option<String>,
    #[serde(rename = "Error")]
    error: Option<String>,
}

#[derive(Deserialize)]
struct ModInfo {
    #[serde(rename = "Time")]
    time: Option<String>,
}

/// The release's staging modules (from its own go.mod, fetched from the
/// proxy) and its commit time, the reproducible buildDate.
fn kubernetes_release(version: &str, dir: &Path) -> Result<(Vec<String>, String)> {
    // 1. The release's own go.mod lists its staging modules.
    progress!("  fetching k8s.io/kubernetes@{version} metadata");
    // `go mod download` needs a module context; a bare go.mod is enough.
    util::write_atomic(
        &dir.join("go.mod"),
        b"module local/dgl-operator/k8sbins\n\ngo 1.24.0\n",
        0o644,
    )?;
    let json = go_output(
        &[
            "mod",
            "download",
            "-json",
            &format!("k8s.io/kubernetes@{version}"),
        ],
        dir,
    )?;
    let meta: ModDownload = serde_json::from_str(&json).map_err(|e| Error::GoMetadata {
        context: "go mod download -json".into(),
        detail: format!("{e}: {json}"),
    })?;
    if let Some(err) = meta.error {
        return Err(Error::GoMetadata {
            context: format!("k8s.io/kubernetes@{version}"),
            detail: err,
        });
    }
    let gomod_path = PathBuf::from(meta.go_mod.ok_or_else(|| Error::GoMetadata {
        context: "go mod download -json".into(),
        detail: format!("no GoMod path in {json}"),
    })?);
    let staging = staging_modules(&util::read_to_string(&gomod_path)?);
    if staging.len() < 20 {
        return Err(Error::GoMetadata {
            context: gomod_path.display().to_string(),
            detail: format!("found only {} staging modules: {staging:?}", staging.len()),
        });
    }
    // The release's commit time from the proxy: a reproducible buildDate.
    let build_date = meta
        .info
        .and_then(|p| fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<ModInfo>(&b).ok())
        .and_then(|i| i.time)
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned());
    Ok((staging, build_date))
}

/// `-ldflags` stamping the version like hack/lib/version.sh.
fn version_ldflags(version: &str, build_date: &str) -> String {
    let minor = version.split('.').nth(1).unwrap_or("0");
    let mut ldflags = String::from("-s -w");
    for pkg in [
        "k8s.io/client-go/pkg/version",
        "k8s.io/component-base/version",
    ] {
        ldflags.push_str(&format!(
            " -X {pkg}.gitVersion={version} -X {pkg}.gitMajor=1 -X {pkg}.gitMinor={minor} \
             -X {pkg}.gitTreeState=clean -X {pkg}.buildDate={build_date}"
        ));
    }
    ldflags
}

fn build_kubernetes(a: &Artifact, opts: &BuildOptions, out: &Path) -> Result<()> {
    let log = build_log(opts, a)?;
    let dir = wrapper_dir(opts, a)?;
    let version = a.version;
    progress!("building Kubernetes {version} from the Go module proxy (cold: ~20-30 min on 2 cores); log: {}",
        log.display()
    );

    let (staging, build_date) = kubernetes_release(version, &dir)?;

    // 2. The wrapper module.
    let gomod = kubernetes_wrapper_gomod(version, &staging)?;
    util::write_atomic(&dir.join("go.mod"), gomod.as_bytes(), 0o644)?;
    let packages: Vec<String> = KUBE_COMMANDS
        .iter()
        .map(|c| format!("k8s.io/kubernetes/cmd/{c}"))
        .collect();

    // 3. Resolve the full dependency graph. Every package gets an explicit
    //    @version: a bare `go get pkg` means @upgrade and would move
    //    k8s.io/kubernetes to the newest release.
    progress!(
        "  resolving modules ({} staging modules replaced with {})",
        staging.len(),
        staging_version(version)?
    );
    let mut get = go_command(&dir);
    get.arg("get");
    get.args(packages.iter().map(|p| format!("{p}@{version}")));
    run_go(&mut get, "go get", &log, None)?;

    // 4. Count packages for the progress display (best effort).
    let mut list_args = vec!["list", "-deps", "-tags", "selinux,notest"];
    list_args.extend(packages.iter().map(String::as_str));
    let total = go_output(&list_args, &dir).map(|s| s.lines().count()).ok();

    // 5. One build for all commands, version-stamped like hack/lib/version.sh.
    let ldflags = version_ldflags(version, &build_date);
    progress!(
        "  compiling {} with go build -p {}",
        KUBE_COMMANDS.join(", "),
        opts.jobs
    );
    let mut build = go_command(&dir);
    build
        .arg("build")
        .arg("-v")
        .arg("-p")
        .arg(opts.jobs.to_string())
        .arg("-trimpath")
        .args(["-tags", "selinux,notest"])
        .arg("-ldflags")
        .arg(&ldflags)
        .arg("-o")
        // A trailing slash makes `go build` write one binary per main package.
        .arg(format!("{}/", out.display()))
        .args(&packages);
    run_go(&mut build, "go build", &log, total)
}

fn build_etcd(a: &Artifact, opts: &BuildOptions, out: &Path) -> Result<()> {
    let log = build_log(opts, a)?;
    let dir = wrapper_dir(opts, a)?;
    let version = a.version;
    progress!(
        "building etcd {version} from the Go module proxy (~2-4 min); log: {}",
        log.display()
    );
    let gomod = format!(
        "// Generated by localkube: wraps go.etcd.io/etcd/server/v3, whose own go.mod\n\
         // has replace lines that make `go install ...@version` refuse it.\n\
         module local/dgl-operator/etcdbin\n\n\
         go 1.23\n\n\
         require go.etcd.io/etcd/server/v3 {version}\n"
    );
    util::write_atomic(&dir.join("go.mod"), gomod.as_bytes(), 0o644)?;
    let mut get = go_command(&dir);
    get.arg("get")
        .arg(format!("go.etcd.io/etcd/server/v3@{version}"));
    run_go(&mut get, "go get", &log, None)?;
    let mut build = go_command(&dir);
    build
        .arg("build")
        .arg("-p")
        .arg(opts.jobs.to_string())
        .arg("-trimpath")
        .args(["-ldflags", "-s -w"])
        .arg("-o")
        .arg(out.join("etcd"))
        .arg("go.etcd.io/etcd/server/v3");
    run_go(&mut build, "go build etcd", &log, None)
}

fn build_kwok(a: &Artifact, opts: &BuildOptions, out: &Path) -> Result<()> {
    let log = build_log(opts, a)?;
    let version = a.version;
    progress!(
        "building kwok {version} with go install (~3-6 min); log: {}",
        log.display()
    );
    // `go install pkg@version` runs outside any module; -mod=mod is not allowed there.
    let mut install = go_command(&opts.cache_dir);
    install
        .env("GOBIN", out)
        .env("GOFLAGS", "-buildvcs=false")
        .arg("install")
        .arg("-p")
        .arg(opts.jobs.to_string())
        .arg("-trimpath")
        .args(["-ldflags", "-s -w"])
        .arg(format!("sigs.k8s.io/kwok/cmd/kwok@{version}"))
        .arg(format!("sigs.k8s.io/kwok/cmd/kwokctl@{version}"));
    run_go(&mut install, "go install kwok", &log, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"module k8s.io/kubernetes

go 1.24.0

godebug default=go1.24

require (
	github.com/foo/bar v1.2.3
	k8s.io/api v0.0.0
	k8s.io/klog/v2 v2.130.1
	k8s.io/kubelet v0.0.0
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/sample-controller => ./staging/src/k8s.io/sample-controller
)
"#;

    #[test]
    fn staging_modules_are_the_union_of_fake_requires_and_local_replaces() {
        assert_eq!(
            staging_modules(SAMPLE),
            vec!["k8s.io/api", "k8s.io/kubelet", "k8s.io/sample-controller"]
        );
    }

    #[test]
    fn wrapper_gomod_replaces_with_published_versions() {
        let mods = staging_modules(SAMPLE);
        let gomod = kubernetes_wrapper_gomod("v1.33.13", &mods).unwrap();
        assert!(gomod.contains("require k8s.io/kubernetes v1.33.13\n"));
        assert!(gomod.contains("\tk8s.io/api => k8s.io/api v0.33.13\n"));
        assert!(gomod.contains("go 1.24.0\n"));
        assert!(gomod.contains("godebug default=go1.24\n"));
        assert!(staging_version("v2.0.0").is_err());
    }
}
