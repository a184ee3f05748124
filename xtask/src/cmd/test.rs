//! `cargo xtask test`: every check and test of the project, from a fresh
//! machine: installs what is missing (Debian packages, the Kubernetes
//! binaries from the Go module proxy, the DGL venv from PyPI, the images),
//! all cached, so a warm run only runs the tests. Last comes the end-to-end
//! tier (`cargo xtask e2e`): real DGLJobs on a real node.
//!
//! Order, and what overlaps: lint; the venv beside the test control plane;
//! `cargo test --no-run`; then the test binaries (two at a time,
//! `test_binaries`) and the small partition benchmark, while the node
//! cluster starts, the images are built and imported into it (disk and
//! podman, mostly waiting) and the chaos scenario runs there (it mostly
//! waits too: `e2e::BESIDE_THE_TESTS`); then the other e2e scenarios on
//! that stack.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use localkube::ClusterInfo;

use crate::stack::Stack;
use crate::test_binaries::TestBinary;
use crate::util::{done, repo_root, run_cmd, step, WORKSPACE_FEATURES};

#[derive(clap::Args)]
pub struct Args {
    /// Skip `cargo fmt --check` and `cargo clippy`.
    #[arg(long)]
    no_lint: bool,
    /// Leave the test control plane (and the e2e node cluster) running afterwards (faster reruns).
    #[arg(long)]
    keep_cluster: bool,
    /// Skip the end-to-end tier (`cargo xtask e2e`: images, a real node, Helm, real jobs).
    #[arg(long)]
    no_e2e: bool,
    /// Test binaries that run at once (1: a plain `cargo test`, binaries in
    /// a row, with the e2e tier's images built after it).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
    lanes: u32,
    /// e2e scenarios that run side by side (see `cargo xtask e2e --help`;
    /// 2: two lanes planned for the 2-node cluster's CPU).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    parallel: u32,
    /// Extra arguments for `cargo test`: before a `--` for the build (e.g.
    /// `-p dglrun`), after it for the test binaries (e.g. a name filter).
    #[arg(last = true)]
    cargo_test_args: Vec<String>,
}

/// Debian packages the tests need: network namespaces for the real-DGL and
/// MPI tests; OpenMPI for partition mode DistParMETIS (dgl-partition's `mpi`
/// feature builds against libopenmpi-dev through bindgen, hence libclang).
const APT_PACKAGES: &[&str] = &[
    "iproute2",
    "util-linux",
    "openmpi-bin",
    "libopenmpi-dev",
    "libclang-dev",
];

/// Below this much free space a run is likely to fail: a cold build's target
/// dir (about 14 GiB), the training image (5.5 GiB in podman, again in each
/// of the two nodes' containerd, a new one written before the old is gone)
/// and the kubelet's eviction at 1% free, which deletes images not in use
/// (the operator's freshly imported one was, on 2026-11-28) and taints the
/// node.
const LOW_DISK_GIB: f64 = 30.0;

/// Prints the free space where the build and the caches live, and a warning
/// naming what takes it when it is low (the test itself does not fail here).
fn report_free_disk(with_e2e: bool) {
    let Ok(cache) = localkube::cache_dir() else {
        return;
    };
    let _ = std::fs::create_dir_all(&cache);
    let Some(free) = free_gib(&cache) else {
        return;
    };
    println!(
        "    {free:.1} GiB free on the filesystem of {}",
        cache.display()
    );
    if with_e2e && free < LOW_DISK_GIB {
        println!(
            "    warning: under {LOW_DISK_GIB} GiB free; the node cluster evicts at 1% free and the \
             training image needs ~17 GiB (podman + two nodes' containerd). `cargo clean` of other \
             checkouts or removing {}/podman frees space",
            cache.display()
        );
    }
}

fn free_gib(path: &std::path::Path) -> Option<f64> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a plain C struct
    // that statvfs fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as f64 * st.f_frsize as f64 / (1u64 << 30) as f64)
}

/// `cargo fmt --check` and clippy with `-D warnings`.
fn lint(cargo: &str) -> Result<()> {
    let t = step("cargo fmt --check");
    run_cmd(Command::new(cargo).args(["fmt", "--all", "--", "--check"]))?;
    done(t);
    let t = step("cargo clippy --all-targets -- -D warnings");
    run_cmd(Command::new(cargo).args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--features",
        WORKSPACE_FEATURES,
        "--",
        "-D",
        "warnings",
    ]))?;
    done(t);
    Ok(())
}

/// What the tests need installed, as paths the tests are told about.
struct Installed {
    python: PathBuf,
    graphstorm: PathBuf,
    kueue: PathBuf,
    weed: PathBuf,
}

/// The venv, Kueue's manager, SeaweedFS and the test control plane: the
/// downloads on a thread while the Kubernetes build uses the CPU. Returns
/// the runtime the control plane was started on too.
fn install(with_e2e: bool) -> Result<(Installed, ClusterInfo, tokio::runtime::Runtime)> {
    // The venv is mostly downloads and unpacking, the Kubernetes build is
    // CPU: cold, they overlap (about 5 min saved on 2 cores).
    let t = step(
        "Python venv with DGL 2.1.0 + torch 2.2.1 (+ the training image's python-env), Kueue's manager, SeaweedFS, and Kubernetes/etcd binaries \
         + the test control plane (all cached)",
    );
    let venv = std::thread::spawn(move || {
        // Kueue's manager (a Go build, cached) for operator/tests/kueue.rs.
        let kueue = std::thread::spawn(crate::stack::kueue::ensure_binary);
        // SeaweedFS's weed (a Go build, cached): the S3 server of
        // partition/tests/object_store.rs, object_store_sts.rs,
        // object_store_web_identity.rs and partition_cache.rs, which fail
        // without it.
        let weed = std::thread::spawn(|| localkube::ensure_tool(localkube::GoTool::SeaweedFs));
        let python = crate::pyenv::ensure_venv(&repo_root())?;
        // GraphStorm's thin layer on it (dglrun/tests/graphstorm.rs).
        let graphstorm = crate::graphstorm_env::ensure(&repo_root(), &python)?;
        if with_e2e {
            // The training image's Python layers (5 GB of unpacking) from
            // the wheels just downloaded, also while Kubernetes compiles.
            crate::images::prebuild_python_env()
                .context("building the training image's python-env stage")?;
        }
        let kueue = kueue
            .join()
            .map_err(|_| anyhow::anyhow!("the Kueue build thread panicked"))?
            .context("building Kueue's manager")?;
        let weed = weed
            .join()
            .map_err(|_| anyhow::anyhow!("the SeaweedFS build thread panicked"))?
            .context("building SeaweedFS (weed)")?;
        anyhow::Ok((python, graphstorm, kueue, weed))
    });
    let rt = tokio::runtime::Runtime::new()?;
    let info = rt
        .block_on(localkube::ensure_cluster())
        .context("starting the test control plane");
    let (python, graphstorm, kueue, weed) = venv
        .join()
        .map_err(|_| anyhow::anyhow!("the venv thread panicked"))??;
    let info = info?;
    println!("    python: {}", python.display());
    println!("    graphstorm python: {}", graphstorm.display());
    println!("    kueue: {}", kueue.display());
    println!("    weed (SeaweedFS): {}", weed.display());
    println!("    kubeconfig: {}", info.kubeconfig.display());
    done(t);
    let installed = Installed {
        python,
        graphstorm,
        kueue,
        weed,
    };
    Ok((installed, info, rt))
}

/// The outcome of the test binaries, the e2e stack started beside them (if
/// any) with the scenarios run on it meanwhile, and localkube's two-node
/// test binary (when built with lanes).
type TestsRun = (
    Result<()>,
    Result<Option<(Stack, crate::e2e::Ran)>>,
    Option<TestBinary>,
);

/// The workspace's test binaries, `lanes` at a time with the e2e stack
/// started beside them, or `cargo test` in a row for `--lanes 1`.
fn run_tests(
    cargo: &str,
    lanes: usize,
    with_e2e: bool,
    (build_args, test_args): (&[String], &[String]),
    envs: &[(&str, &Path)],
    e2e_rt: &tokio::runtime::Runtime,
    e2e_args: &crate::e2e::Args,
) -> Result<TestsRun> {
    // localkube's two-node test needs the host's node to itself: it runs
    // after the e2e tier has torn its node cluster down.
    let mut multinode = None;
    let result = if lanes > 1 {
        let t = step("cargo test --workspace --no-run");
        let bins = crate::test_binaries::build(cargo, build_args)?;
        multinode = bins.iter().find(|b| b.label == MULTINODE_TEST).cloned();
        done(t);
        std::thread::scope(|scope| {
            // The node, the images and the operator's install, then the
            // scenarios that leave the CPU idle the most, beside the tests.
            let stack = with_e2e.then(|| {
                scope.spawn(|| {
                    let t =
                        step("end-to-end stack (beside the tests): node cluster, images, operator");
                    let s = crate::e2e::start(e2e_rt, e2e_args);
                    done(t);
                    crate::e2e::beside_the_tests(e2e_rt, s?, e2e_args)
                })
            });
            let t = step(&format!("test binaries, {lanes} at a time"));
            let tests =
                crate::test_binaries::run_all(cargo, bins, build_args, test_args, envs, lanes);
            done(t);
            // While the e2e scenarios beside finish.
            let tests = tests.and_then(|()| small_partition_bench());
            let stack = stack.map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("the e2e stack thread panicked"))?
            });
            (tests, stack.transpose())
        })
    } else {
        let t = step("cargo test --workspace");
        let tests = crate::test_binaries::run_in_a_row(cargo, build_args, test_args, envs)
            .and_then(|()| small_partition_bench());
        done(t);
        (tests, Ok(None))
    };
    let (tests, stack) = result;
    Ok((tests, stack, multinode))
}

/// The partition benchmark's small run: DGL's partition_graph, the
/// ParMETIS pipeline and DistParMETIS's ranks on one 20 k-node graph, each
/// output loaded and evaluated (the full run: `cargo xtask bench partition`;
/// its figures, not these, go in docs/benchmarks.md).
fn small_partition_bench() -> Result<()> {
    let t = step("partition benchmark, small (cargo xtask bench partition --dev)");
    crate::bench::partition::run(crate::bench::partition::PartitionArgs::small())?;
    done(t);
    Ok(())
}

/// Stops the control plane the tests used (its name is its state dir's).
fn stop_test_control_plane(rt: &tokio::runtime::Runtime, info: &ClusterInfo) -> Result<()> {
    if let Some(dir) = info.state_dir.as_ref() {
        let t = step("stopping the test control plane");
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(localkube::TEST_CLUSTER)
            .to_string();
        let cluster = localkube::LocalCluster::new(localkube::ClusterConfig::new(&name)?)?;
        rt.block_on(cluster.down(false))?;
        done(t);
    }
    Ok(())
}

/// The e2e tier on its stack (started now if not beside the tests), then
/// localkube's two-node test once that node cluster is down.
fn e2e_then_multinode(
    cargo: &str,
    stack: Option<(Stack, crate::e2e::Ran)>,
    multinode: Option<TestBinary>,
    e2e_rt: &tokio::runtime::Runtime,
    e2e_args: &crate::e2e::Args,
) -> Result<()> {
    let t = step("end-to-end: cargo xtask e2e");
    let (stack, ran) = match stack {
        Some(s) => s,
        None => (crate::e2e::start(e2e_rt, e2e_args)?, Default::default()),
    };
    crate::e2e::finish(e2e_rt, stack, e2e_args, (Instant::now(), ran))?;
    done(t);
    if let (Some(bin), false) = (multinode, e2e_args.keep_cluster) {
        let t = step(
            "two nodes (localkube --nodes 2): pods across nodes by pod IP and Service, teardown clean",
        );
        let envs = [
            ("LOCALKUBE_SMOKE_CLUSTER", "multinode"),
            ("LOCALKUBE_SMOKE_NODES", "2"),
        ];
        crate::test_binaries::run_ignored(&bin, cargo, &envs)?;
        done(t);
    }
    Ok(())
}

pub fn run(args: Args) -> Result<()> {
    let all = Instant::now();
    // Every build below runs once per invocation: incremental caches gain a
    // fresh clone nothing and take GiB of the disk the test node shares (its
    // kubelet evicts at 1% free). A value the user set wins.
    if std::env::var_os("CARGO_INCREMENTAL").is_none() {
        std::env::set_var("CARGO_INCREMENTAL", "0");
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Before the lint: clippy's dependency metadata is cached there too.
    // Held to the end: the dir's lock (see test_target).
    let _target = super::test_target::choose(&cargo)?;

    // First: the lint already compiles against OpenMPI's headers.
    let with_e2e = !args.no_e2e;
    let t = step("Debian packages");
    crate::ensure::apt(APT_PACKAGES)?;
    done(t);
    report_free_disk(with_e2e);

    if !args.no_lint {
        lint(&cargo)?;
    }

    let (installed, info, rt) = install(with_e2e)?;

    let (build_args, mut test_args) = split_test_args(&args.cargo_test_args);
    if with_e2e {
        skip_covered_by_e2e(&mut test_args);
    }
    // DGL_OPERATOR_TEST_STRICT: a test whose prerequisite is missing fails
    // here instead of skipping (everything it needs was just installed).
    let envs: [(&str, &Path); 5] = [
        ("DGLRUN_TEST_PYTHON", &installed.python),
        ("DGLRUN_TEST_GRAPHSTORM_PYTHON", &installed.graphstorm),
        ("DGL_OPERATOR_KUEUE_BIN", &installed.kueue),
        (localkube::s3::WEED_BIN_ENV, &installed.weed),
        ("DGL_OPERATOR_TEST_STRICT", Path::new("1")),
    ];
    let e2e_args = crate::e2e::Args {
        name: crate::stack::DEFAULT_CLUSTER.into(),
        // The multi-node scenarios (#34): workers on different nodes.
        nodes: 2,
        keep_cluster: args.keep_cluster,
        only: Vec::new(),
        // The binaries `cargo test` just built: no second (release) compile.
        profile: crate::images::Profile::Dev,
        parallel: args.parallel,
        // Heavy suites run small here and whole from their own command.
        small_chaos: true,
    };
    let e2e_rt = crate::stack::runtime()?;
    let lanes = args.lanes as usize;

    let (tests, stack, multinode) = run_tests(
        &cargo,
        lanes,
        with_e2e,
        (&build_args, &test_args),
        &envs,
        &e2e_rt,
        &e2e_args,
    )?;

    if !args.keep_cluster {
        stop_test_control_plane(&rt, &info)?;
    }
    if let Err(e) = tests {
        stop_node(&e2e_rt, &e2e_args, stack.is_ok_and(|s| s.is_some()));
        return Err(e);
    }
    let stack = stack?;

    if with_e2e {
        e2e_then_multinode(&cargo, stack, multinode, &e2e_rt, &e2e_args)?;
    }
    println!(
        "\nall checks passed in {:.0}s; the steps:",
        all.elapsed().as_secs_f64()
    );
    print!("{}", crate::util::step_summary());
    Ok(())
}

/// The test binary of localkube's several-nodes test (`#[ignore]`d: it
/// needs root and the host's node to itself).
const MULTINODE_TEST: &str = "localkube: test multinode";

/// Host tests that train what an e2e scenario of the same run trains on
/// the node: the same dglrun, DGL and example, the same outcome checked,
/// with Kubernetes around it. With the e2e tier they are skipped, so each
/// path trains once per run (about 5 CPU-minutes saved on 2 cores); with
/// `--no-e2e`, and under plain `cargo test`, they run. Each name is one
/// test of the workspace (`--skip` matches substrings).
const COVERED_BY_E2E: [(&str, &str); 8] = [
    ("a_crashing_trainer_stops_the_job", "fail"),
    ("a_launcher_without_workers_trains_alone", "standalone"),
    ("graphsage_trains_on_native_partitions", "parmetis"),
    ("graphsage_trains_on_two_machines", "train"),
    ("graphsage_trains_with_graphbolt", "graphbolt"),
    ("launchpy_commands_train_on_two_machines", "launchpy"),
    (
        "graphstorm_node_classification_trains_on_two_machines",
        "graphstorm",
    ),
    (
        "graphstorm_trains_on_native_partitions_then_infers_embeddings",
        "graphstorm",
    ),
];

fn skip_covered_by_e2e(test_args: &mut Vec<String>) {
    println!("    host tests trained again by an e2e scenario of this run, skipped here:");
    for (test, scenario) in COVERED_BY_E2E {
        println!("      {test} (e2e {scenario})");
        test_args.extend(["--skip".to_owned(), test.to_owned()]);
    }
}

/// `cargo_test_args` split at `--`: cargo's build arguments, then the test
/// binaries' arguments.
fn split_test_args(all: &[String]) -> (Vec<String>, Vec<String>) {
    let mut build = vec!["--features".to_string(), WORKSPACE_FEATURES.to_string()];
    match all.iter().position(|a| a == "--") {
        Some(i) => {
            build.extend_from_slice(&all[..i]);
            (build, all[i + 1..].to_vec())
        }
        None => {
            build.extend_from_slice(all);
            (build, Vec::new())
        }
    }
}

/// Stops the node cluster started beside the tests when a later step failed
/// (unless asked to keep it).
fn stop_node(rt: &tokio::runtime::Runtime, args: &crate::e2e::Args, started: bool) {
    if !started || args.keep_cluster {
        return;
    }
    if let Ok(c) = crate::util::node_cluster_n(&args.name, args.nodes as usize) {
        if let Err(e) = rt.block_on(c.down(false)) {
            eprintln!("test: stopping node cluster {:?}: {e:#}", args.name);
        }
    }
}
