//! The test command's `cargo test`, split in two: one `cargo test --no-run`
//! builds every test binary, then the binaries run a few at a time.
//!
//! `cargo test` runs its binaries one after another, and the slowest ones
//! (real DGL across network namespaces, real `mpirun`) mostly wait on
//! processes they started: two at a time take about half the wall time on
//! two cores. Each binary runs as `cargo test` would run it (in its
//! package's folder, with Cargo's runtime variables), its output held back
//! and printed whole when it ends, so the log reads as before.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::util::run_cmd;

/// One test binary as `cargo test --no-run` reported it.
#[derive(Debug, Clone)]
pub(crate) struct TestBinary {
    /// `package: target kind target name`, as `cargo test` prints it.
    pub label: String,
    pub executable: PathBuf,
    /// The package's folder (the binary's working directory under cargo).
    pub package_dir: PathBuf,
    pub package_name: String,
}

/// Binaries known to take a minute or more: started first, so the lanes
/// end together (longest first).
const SLOW_FIRST: [&str; 6] = [
    "dglrun: test real_dgl",
    "dgl-partition: test dist_memory",
    "dgl-partition: test dist_assign",
    "dglrun: test dist_parmetis",
    "dglrun: test graphstorm",
    "dgl-partition: test real_dgl",
];

/// `cargo test --workspace --no-run` with `build_args`; returns every test
/// executable it built, the slow ones first.
pub(crate) fn build(cargo: &str, build_args: &[String]) -> Result<Vec<TestBinary>> {
    let out = Command::new(cargo)
        .args(["test", "--workspace", "--no-run"])
        .args(["--message-format", "json-render-diagnostics"])
        .args(build_args)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("could not run {cargo}"))?;
    if !out.status.success() {
        bail!("cargo test --no-run failed ({})", out.status);
    }
    let mut bins = parse_artifacts(&String::from_utf8_lossy(&out.stdout))?;
    bins.sort_by_key(|b| {
        SLOW_FIRST
            .iter()
            .position(|s| *s == b.label)
            .unwrap_or(SLOW_FIRST.len())
    });
    Ok(bins)
}

/// The test executables among cargo's JSON messages.
fn parse_artifacts(json_lines: &str) -> Result<Vec<TestBinary>> {
    let mut bins = Vec::new();
    for line in json_lines.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line).context("cargo's JSON message")?;
        if v["reason"] != "compiler-artifact" || v["profile"]["test"] != true {
            continue;
        }
        let Some(exe) = v["executable"].as_str() else {
            continue;
        };
        let manifest = v["manifest_path"]
            .as_str()
            .context("artifact without manifest_path")?;
        let package_dir = Path::new(manifest)
            .parent()
            .context("manifest_path without a folder")?
            .to_path_buf();
        let package_name = package_name(v["package_id"].as_str().unwrap_or_default(), &package_dir);
        let kind = v["target"]["kind"][0].as_str().unwrap_or("test");
        let target = v["target"]["name"].as_str().unwrap_or("?");
        let kind = if kind == "test" { "test" } else { "unittests" };
        bins.push(TestBinary {
            label: format!("{package_name}: {kind} {target}"),
            executable: PathBuf::from(exe),
            package_dir,
            package_name,
        });
    }
    Ok(bins)
}

/// The package's name from a package id: `path+file:///…/api#dgl-api@0.1.0`,
/// or `path+file:///…/dglrun#0.1.0` when the name is the folder's, or the
/// older `dgl-api 0.1.0 (path+file://…)`; else the folder's name.
fn package_name(id: &str, dir: &Path) -> String {
    let folder = || {
        dir.file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    };
    if let Some((url, frag)) = id.rsplit_once('#') {
        return match frag.split_once('@') {
            Some((name, _version)) => name.to_string(),
            None => url
                .rsplit('/')
                .next()
                .filter(|s| !s.is_empty())
                .map_or_else(folder, str::to_string),
        };
    }
    id.split_whitespace()
        .next()
        .filter(|w| !w.contains(':'))
        .map_or_else(folder, str::to_string)
}

/// How one binary ended.
struct Outcome {
    label: String,
    ok: bool,
}

/// Runs every binary (with `test_args` after `--`) and the doc tests,
/// `lanes` at a time; every failure is reported, not only the first.
pub(crate) fn run_all(
    cargo: &str,
    bins: Vec<TestBinary>,
    build_args: &[String],
    test_args: &[String],
    envs: &[(&str, &Path)],
    lanes: usize,
) -> Result<()> {
    let queue = Mutex::new(bins.into_iter().map(Job::Binary).collect::<VecDeque<_>>());
    queue.lock().unwrap().push_back(Job::Doc);
    let outcomes = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..lanes.max(1) {
            scope.spawn(|| loop {
                let Some(job) = queue.lock().unwrap().pop_front() else {
                    break;
                };
                let outcome = job.run(cargo, build_args, test_args, envs);
                outcomes.lock().unwrap().push(outcome);
            });
        }
    });
    let failed: Vec<String> = outcomes
        .into_inner()
        .unwrap()
        .into_iter()
        .filter(|o| !o.ok)
        .map(|o| o.label)
        .collect();
    if !failed.is_empty() {
        bail!("test binaries failed: {}", failed.join(", "));
    }
    Ok(())
}

enum Job {
    Binary(TestBinary),
    /// `cargo test --doc`: rustdoc builds these, there is no binary to run.
    Doc,
}

impl Job {
    fn run(
        &self,
        cargo: &str,
        build_args: &[String],
        test_args: &[String],
        envs: &[(&str, &Path)],
    ) -> Outcome {
        let (label, mut cmd) = match self {
            Job::Binary(b) => {
                let mut cmd = Command::new(&b.executable);
                cmd.args(test_args)
                    .current_dir(&b.package_dir)
                    // What cargo sets when it runs a test binary.
                    .env("CARGO_MANIFEST_DIR", &b.package_dir)
                    .env("CARGO_PKG_NAME", &b.package_name);
                (b.label.clone(), cmd)
            }
            Job::Doc => {
                let mut cmd = Command::new(cargo);
                cmd.args(["test", "--workspace", "--doc"])
                    .args(build_args)
                    .arg("--")
                    .args(test_args);
                ("doc tests".to_string(), cmd)
            }
        };
        cmd.env("CARGO", cargo);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let started = Instant::now();
        let out = cmd.stdin(Stdio::null()).output();
        let secs = started.elapsed().as_secs_f64();
        let ok = match &out {
            Ok(o) => o.status.success(),
            Err(_) => false,
        };
        // One block per binary, whole, so lanes do not interleave.
        let mut block = format!(
            "==> {label} ({secs:.1}s){}\n",
            if ok { "" } else { ": FAILED" }
        );
        match out {
            Ok(o) => {
                block.push_str(&String::from_utf8_lossy(&o.stdout));
                block.push_str(&String::from_utf8_lossy(&o.stderr));
            }
            Err(e) => block.push_str(&format!("could not start: {e}\n")),
        }
        print!("{block}");
        Outcome { label, ok }
    }
}

/// Runs one `#[ignore]`d test binary's ignored tests with `envs`, its
/// output streamed: the tests that need the host to themselves (a node
/// cluster of their own), run after the e2e tier has released it.
pub(crate) fn run_ignored(b: &TestBinary, cargo: &str, envs: &[(&str, &str)]) -> Result<()> {
    let mut cmd = Command::new(&b.executable);
    cmd.args(["--ignored", "--nocapture"])
        .current_dir(&b.package_dir)
        .env("CARGO_MANIFEST_DIR", &b.package_dir)
        .env("CARGO_PKG_NAME", &b.package_name)
        .env("CARGO", cargo)
        .stdin(Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let status = cmd
        .status()
        .with_context(|| format!("could not start {}", b.label))?;
    if !status.success() {
        bail!("{} (ignored tests) failed ({status})", b.label);
    }
    Ok(())
}

/// `cargo test` as it was: one command, binaries in a row (for `--lanes 1`).
pub(crate) fn run_in_a_row(
    cargo: &str,
    build_args: &[String],
    test_args: &[String],
    envs: &[(&str, &Path)],
) -> Result<()> {
    let mut cmd = Command::new(cargo);
    // Every failing test in one run, not just the first binary's.
    cmd.args(["test", "--workspace", "--no-fail-fast"])
        .args(build_args)
        .arg("--")
        .args(test_args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    run_cmd(&mut cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_test_executables_from_cargo_json() {
        let json = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/api#dgl-api@0.1.0","manifest_path":"/w/api/Cargo.toml","target":{"kind":["lib"],"name":"dgl_api"},"profile":{"test":true},"executable":"/w/target/debug/deps/dgl_api-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/api#dgl-api@0.1.0","manifest_path":"/w/api/Cargo.toml","target":{"kind":["lib"],"name":"dgl_api"},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","package_id":"dglrun 0.1.0 (path+file:///w/dglrun)","manifest_path":"/w/dglrun/Cargo.toml","target":{"kind":["test"],"name":"real_dgl"},"profile":{"test":true},"executable":"/w/target/debug/deps/real_dgl-2"}
{"reason":"build-finished","success":true}"#;
        let bins = parse_artifacts(json).unwrap();
        assert_eq!(bins.len(), 2);
        assert_eq!(bins[0].label, "dgl-api: unittests dgl_api");
        assert_eq!(bins[0].package_dir, Path::new("/w/api"));
        assert_eq!(bins[1].label, "dglrun: test real_dgl");
        assert_eq!(
            bins[1].executable,
            Path::new("/w/target/debug/deps/real_dgl-2")
        );
    }

    #[test]
    fn package_names_from_every_id_form() {
        let dir = Path::new("/w/x");
        let name = |id| package_name(id, dir);
        assert_eq!(name("path+file:///w/api#dgl-api@0.1.0"), "dgl-api");
        assert_eq!(name("path+file:///w/dglrun#0.1.0"), "dglrun");
        assert_eq!(name("dglrun 0.1.0 (path+file:///w/dglrun)"), "dglrun");
        assert_eq!(name(""), "x");
    }

    #[test]
    fn a_failing_binary_fails_the_run_and_is_named() {
        let bins = vec![
            TestBinary {
                label: "a: test ok".into(),
                executable: "/bin/true".into(),
                package_dir: "/".into(),
                package_name: "a".into(),
            },
            TestBinary {
                label: "b: test bad".into(),
                executable: "/bin/false".into(),
                package_dir: "/".into(),
                package_name: "b".into(),
            },
        ];
        // "cargo" here only runs the doc-test job: `true` stands in for it.
        let e = run_all("/bin/true", bins, &[], &[], &[], 2).unwrap_err();
        assert_eq!(e.to_string(), "test binaries failed: b: test bad");
    }
}
