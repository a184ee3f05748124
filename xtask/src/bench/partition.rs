//! `cargo xtask bench partition`: dglrun's native partition pipeline against
//! `dgl.distributed.partition_graph`, on the same R-MAT graph, in one run.
//!
//! The graph (R-MAT, made undirected with `dgl.to_bidirected`, float32
//! features, a 60 % train mask) is generated once per size by
//! `bench/partition_bench.py` in the DGL venv and cached: as `graph.dgl` for
//! DGL and in DGL's chunked format for the pipeline. Then, one after the
//! other on the same machine:
//! - DGL: `partition_graph(METIS, balance_ntypes=train_mask,
//!   balance_edges=True)`, timed around that call (loading graph.dgl is not
//!   counted);
//! - dglrun, partition mode ParMETIS (`dglrun partition --no-serve`, release
//!   build, every core): reading the chunked files, adjacency, METIS with the
//!   same constraints, shuffle, features and graph.dgl, all counted;
//! - DistParMETIS's ranks: `mpirun -n <parts> dgl-partition rank` on this one
//!   machine (ranks oversubscribe the cores; shared memory transport), the
//!   same stages spread over the ranks plus the MPI exchange.
//!
//! Each is a process tree whose resident memory is sampled every 20 ms
//! (peak of the sum over the tree). The edge cut and balance of both outputs
//! are then counted by the same script from the written partitions.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::partition_bucket::{Bucket, Comparison, Input, Run};
use crate::util::{repo_root, run_cmd};

const SCRIPT: &str = include_str!("partition_bench.py");

#[derive(clap::Args, Clone)]
pub struct PartitionArgs {
    /// Nodes of the R-MAT graph.
    #[arg(long, default_value_t = 1_000_000)]
    nodes: u64,
    /// Raw R-MAT edges before making the graph undirected.
    #[arg(long, default_value_t = 10_000_000)]
    edges: u64,
    /// float32 features per node.
    #[arg(long, default_value_t = 64)]
    feat: u32,
    /// Partitions.
    #[arg(long, default_value_t = 4)]
    parts: u32,
    /// Skip DGL's partition_graph (e.g. where its memory is the wall).
    #[arg(long)]
    skip_dgl: bool,
    /// Skip the DistParMETIS ranks (mpirun on this machine).
    #[arg(long)]
    skip_dist: bool,
    /// Give up on a tool after this many seconds (reported as such).
    #[arg(long, default_value_t = 3600)]
    timeout: u64,
    /// Run each tool in a memory cgroup (v1) of this many GiB, so that the
    /// one that needs more is killed alone and reported as such (the 10x
    /// run: DGL's memory is the wall on a 24 GiB machine). Needs root.
    #[arg(long)]
    memory_limit_gib: Option<u64>,
    /// Run every DistParMETIS rank in a memory cgroup (v1) of its own with
    /// this many GiB, as a pod's memory limit would: the table then gives
    /// each rank's peak RSS, bytes per edge, stages and bytes sent, and a
    /// rank over its limit is killed alone and named. Needs root.
    #[arg(long, value_name = "GIB")]
    rank_memory_limit_gib: Option<f64>,
    /// Generate the graph natively (`dgl-partition make-rmat`, in DGL's
    /// chunked format only) instead of with DGL's Python, for sizes DGL's
    /// generator cannot hold; DGL's partition_graph is then skipped (it
    /// would need a graph.dgl). Same R-MAT model, made undirected and simple
    /// as `dgl.to_bidirected` does, with other random features.
    #[arg(long)]
    native_graph: bool,
    /// Skip the single-process pipeline (dglrun, partition mode ParMETIS).
    #[arg(long)]
    skip_native: bool,
    /// Use the dglrun and dgl-partition (built with `--features mpi`) in
    /// this folder instead of building them: to measure a fixed build while
    /// the tree changes.
    #[arg(long, value_name = "DIR")]
    binaries: Option<PathBuf>,
    /// Where the graph and the outputs go [default: <cache>/bench-partition].
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Append the figures as one JSON line to this file, and draw from it
    /// `<stem>.svg` (this run's time and memory per tool) and
    /// `<stem>-ranks.svg` (per-rank memory over the rank counts in the file
    /// for this graph size) beside it.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Use the debug binaries `cargo test --workspace` builds (the test
    /// command's small run) instead of release builds: the figures are then
    /// not for comparison.
    #[arg(long)]
    dev: bool,
    /// After the local-disk rows, run dglrun and the DistParMETIS ranks
    /// again on the same chunked files uploaded to a SeaweedFS server
    /// (built once and cached), and compare per process: time, peak RSS,
    /// bytes and requests fetched, bytes against the process's share.
    #[arg(long)]
    from_bucket: bool,
}

impl PartitionArgs {
    /// The test command's small run: every tool on a 20 k-node graph with the
    /// debug binaries, the outputs evaluated (a tool that fails, fails it).
    pub fn small() -> Self {
        PartitionArgs {
            nodes: 20_000,
            edges: 200_000,
            feat: 16,
            parts: 4,
            skip_dgl: false,
            skip_dist: false,
            timeout: 600,
            memory_limit_gib: None,
            rank_memory_limit_gib: None,
            native_graph: false,
            skip_native: false,
            binaries: None,
            work_dir: None,
            json: None,
            dev: true,
            from_bucket: false,
        }
    }
}

/// One tool's run.
struct Measured {
    tool: String,
    wall: Duration,
    peak_rss: u64,
    ok: bool,
    /// Killed by the kernel for exceeding --memory-limit-gib.
    oom_killed: bool,
    stdout: String,
    stderr: String,
}

pub fn run(args: PartitionArgs) -> Result<()> {
    let python = crate::pyenv::ensure_venv(&repo_root())?;
    let (dglrun, dgl_partition) = match &args.binaries {
        Some(dir) => (dir.join("dglrun"), dir.join("dgl-partition")),
        None => build_binaries(args.dev)?,
    };
    let work = match &args.work_dir {
        Some(w) => w.clone(),
        None => localkube::cache_dir()?.join("bench-partition"),
    };
    let kind = if args.native_graph {
        "rmat-native"
    } else {
        "rmat"
    };
    let graph_dir = work.join(format!(
        "{kind}-{}-{}-{}",
        args.nodes, args.edges, args.feat
    ));
    let script = work.join("partition_bench.py");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    std::fs::write(&script, SCRIPT).with_context(|| format!("writing {}", script.display()))?;
    if args.native_graph {
        ensure_native_graph(&dgl_partition, &graph_dir, &args)?;
    } else {
        ensure_graph(&python, &script, &graph_dir, &args)?;
    }
    let mut rows = Vec::new();
    if !args.skip_dgl && !args.native_graph {
        rows.push(run_dgl(&python, &script, &graph_dir, &work, &args)?);
    }
    let chunked = graph_dir.join("chunked");
    let (mut disk_rows, mut bucket) = (rows.len(), None);
    loop {
        let input = Input::new(&chunked, bucket.as_ref());
        if !args.skip_native {
            let (py, sc) = (&python, &script);
            rows.push(run_native(
                &dglrun, py, sc, &graph_dir, &work, &args, &input,
            )?);
        }
        if !args.skip_dist {
            let (py, sc, dp) = (&python, &script, &dgl_partition);
            rows.push(run_dist(dp, py, sc, &graph_dir, &work, &args, &input)?);
        }
        if !args.from_bucket || bucket.is_some() {
            break;
        }
        // Started after the disk rows: they run without the server.
        (disk_rows, bucket) = (rows.len(), Some(Bucket::start(&chunked)?));
    }
    print_table(&args, &rows);
    let compared = bucket
        .map(|b| Comparison::new(&b, &chunked, &runs(&rows), disk_rows, args.parts))
        .transpose()?;
    if let Some(c) = &compared {
        c.print();
    }
    if let Some(r) = rows.iter().find(|r| !r.m.ok || r.quality.is_none()) {
        bail!("{} did not produce an evaluated partition", r.m.tool);
    }
    if let Some(path) = &args.json {
        append_json(path, &args, &rows, compared.map(|c| c.json()))?;
        draw_charts(path)?;
    }
    Ok(())
}

/// What the `--from-bucket` comparison reads of each row.
fn runs(rows: &[Row]) -> Vec<Run<'_>> {
    rows.iter()
        .map(|r| Run {
            stdout: &r.m.stdout,
            stderr: &r.m.stderr,
            wall: r.m.wall,
            peak_rss: r.m.peak_rss,
            ranks: !r.ranks.is_empty(),
        })
        .collect()
}

/// The charts beside the results file, from its lines: this run's times and
/// memory, and per-rank memory over the rank counts it holds for this graph.
fn draw_charts(json: &Path) -> Result<()> {
    use super::chart;
    let runs = chart::read_lines(json)?;
    let latest = runs.last().context("the results file has no line")?;
    let svg = chart::svg_path(json, None);
    chart::partition(latest, &svg)?;
    println!("\nchart: {}", svg.display());
    let ranks = chart::svg_path(json, Some("ranks"));
    if chart::rank_memory(&runs, latest, &ranks)? {
        println!("chart: {}", ranks.display());
    }
    Ok(())
}

/// dglrun and dgl-partition (with MPI): release builds, or with `dev` the
/// debug ones exactly as `cargo test --workspace` builds them (a no-op then).
fn build_binaries(dev: bool) -> Result<(PathBuf, PathBuf)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let features = ["--features", crate::util::WORKSPACE_FEATURES];
    let profile = if dev {
        eprintln!("==> dglrun and dgl-partition (debug, as cargo test builds them)");
        run_cmd(
            Command::new(&cargo)
                .args(["test", "--workspace", "--no-run", "-q"])
                .args(features),
        )?;
        "debug"
    } else {
        eprintln!("==> building dglrun and dgl-partition (release)");
        run_cmd(
            Command::new(&cargo)
                .args([
                    "build",
                    "--release",
                    "-q",
                    "-p",
                    "dglrun",
                    "-p",
                    "dgl-partition",
                ])
                .args(features),
        )?;
        "release"
    };
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    Ok((
        target.join(profile).join("dglrun"),
        target.join(profile).join("dgl-partition"),
    ))
}

/// Generates the graph once per size (a stamp marks a complete one).
fn ensure_graph(python: &Path, script: &Path, dir: &Path, args: &PartitionArgs) -> Result<()> {
    let stamp = dir.join("complete");
    if stamp.is_file() {
        eprintln!("==> reusing the graph in {}", dir.display());
        return Ok(());
    }
    eprintln!("==> generating the R-MAT graph in {}", dir.display());
    let _ = std::fs::remove_dir_all(dir);
    run_cmd(Command::new(python).arg(script).args([
        "gen",
        "--nodes",
        &args.nodes.to_string(),
        "--edges",
        &args.edges.to_string(),
        "--feat",
        &args.feat.to_string(),
        "--out",
        &dir.display().to_string(),
    ]))?;
    std::fs::write(&stamp, b"").with_context(|| format!("writing {}", stamp.display()))
}

/// Generates the graph natively once per size, in the chunked format only.
fn ensure_native_graph(dgl_partition: &Path, dir: &Path, args: &PartitionArgs) -> Result<()> {
    let stamp = dir.join("complete");
    if stamp.is_file() {
        eprintln!("==> reusing the graph in {}", dir.display());
        return Ok(());
    }
    eprintln!(
        "==> generating the R-MAT graph natively in {}",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(dir);
    run_cmd(
        Command::new(dgl_partition)
            .arg("make-rmat")
            .args(["--nodes", &args.nodes.to_string()])
            .args(["--edges", &args.edges.to_string()])
            .args(["--feat", &args.feat.to_string()])
            .args(["--chunks", &args.parts.to_string()])
            .arg("--out")
            .arg(dir.join("chunked")),
    )?;
    std::fs::write(&stamp, b"").with_context(|| format!("writing {}", stamp.display()))
}

fn run_dgl(
    python: &Path,
    script: &Path,
    graph: &Path,
    work: &Path,
    args: &PartitionArgs,
) -> Result<Row> {
    let out = work.join("out-dgl");
    let _ = std::fs::remove_dir_all(&out);
    eprintln!("==> DGL partition_graph (METIS, balance train nodes + edges)");
    let mut cmd = Command::new(python);
    cmd.arg(script)
        .args(["dgl", "--parts", &args.parts.to_string()]);
    cmd.arg("--graph")
        .arg(graph.join("graph.dgl"))
        .arg("--out")
        .arg(&out);
    let m = measure("dgl.distributed.partition_graph", &mut cmd, args)?;
    let call = last_json(&m.stdout).and_then(|v| v["seconds"].as_f64());
    let quality =
        m.ok.then(|| evaluate(python, script, &out.join("rmat.json"), graph))
            .transpose()?;
    Ok(Row {
        m,
        inner_seconds: call,
        quality,
        stages: Vec::new(),
        ranks: Vec::new(),
    })
}

fn run_native(
    dglrun: &Path,
    python: &Path,
    script: &Path,
    graph: &Path,
    work: &Path,
    args: &PartitionArgs,
    input: &Input,
) -> Result<Row> {
    let ws = work.join(input.dir("ws-native"));
    let _ = std::fs::remove_dir_all(&ws);
    eprintln!(
        "==> dglrun ParMETIS (native pipeline) on {}",
        input.metadata.display()
    );
    let mut cmd = Command::new(dglrun);
    cmd.args([
        "partition",
        "--partition-mode",
        "ParMETIS",
        "--no-serve",
        "--graph-name",
        "rmat",
    ])
    .args([
        "--num-partitions",
        &args.parts.to_string(),
        "--balance-train",
        "--balance-edges",
    ])
    .arg("--partition-input")
    .arg(&input.metadata)
    .arg("--workspace")
    .arg(&ws)
    .arg("--python")
    .arg(python)
    .env("RUST_LOG", "info")
    .envs(input.env.iter().map(|(k, v)| (k, v)));
    let m = measure(&input.tool("dglrun ParMETIS (native"), &mut cmd, args)?;
    let config = ws.join("dataset/rmat.json");
    let quality =
        m.ok.then(|| evaluate(python, script, &config, graph))
            .transpose()?;
    let stages = m
        .stderr
        .lines()
        .filter_map(|l| l.split_once("stage ").map(|(_, s)| s.trim().to_string()))
        .collect();
    Ok(Row {
        m,
        inner_seconds: None,
        quality,
        stages,
        ranks: Vec::new(),
    })
}

/// DistParMETIS on one machine: one rank per part under mpirun, all writing
/// into one folder (each its part, every rank the same JSON).
fn run_dist(
    dgl_partition: &Path,
    python: &Path,
    script: &Path,
    graph: &Path,
    work: &Path,
    args: &PartitionArgs,
    input: &Input,
) -> Result<Row> {
    let out = work.join(input.dir("out-dist"));
    let _ = std::fs::remove_dir_all(&out);
    eprintln!(
        "==> mpirun -n {} dgl-partition rank (DistParMETIS ranks) on {}",
        args.parts,
        input.metadata.display()
    );
    let threads =
        (std::thread::available_parallelism().map_or(1, |p| p.get()) / args.parts as usize).max(1);
    let groups = args
        .rank_memory_limit_gib
        .map(|gib| rank_cgroups(args.parts, gib))
        .transpose()?;
    let mut cmd = Command::new("mpirun");
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
    ])
    .args(["-n", &args.parts.to_string()])
    .args(["--mca", "btl", "self,vader", "--mca", "pml", "ob1"]);
    for (k, v) in &input.env {
        cmd.arg("-x").arg(k).env(k, v);
    }
    if let Some(g) = &groups {
        // Each rank moves itself into its own group before it execs, as a
        // pod's container starts inside its limit.
        let prefix = g[0]
            .dir
            .to_string_lossy()
            .trim_end_matches("-0")
            .to_string();
        let enter =
            format!("echo $$ > {prefix}-$OMPI_COMM_WORLD_RANK/cgroup.procs && exec \"$0\" \"$@\"");
        cmd.args(["sh", "-c", &enter]);
    }
    cmd.arg(dgl_partition)
        .args(["rank", "--graph-name", "rmat", "--part-method", "metis"])
        .args(["--balance-train=train_mask", "--balance-edges"])
        .args(["--threads", &threads.to_string()])
        .arg("--input")
        .arg(&input.metadata)
        .arg("--out")
        .arg(&out)
        .arg("--workspace")
        .arg(work)
        .arg("--python")
        .arg(python);
    let tool = input.tool("DistParMETIS ranks (mpirun, 1 machine");
    let m = measure(&tool, &mut cmd, args)?;
    let ranks = (0..args.parts)
        .map(|r| RankFigures::read(r, &m.stdout, groups.as_ref().map(|g| &g[r as usize])))
        .collect();
    let quality =
        m.ok.then(|| evaluate(python, script, &out.join("rmat.json"), graph))
            .transpose()?;
    let stages = m
        .stdout
        .lines()
        .filter(|l| l.starts_with("rank 0 of") && l.contains("stage "))
        .filter_map(|l| l.split_once("stage ").map(|(_, s)| s.trim().to_string()))
        .collect();
    Ok(Row {
        m,
        inner_seconds: None,
        quality,
        stages,
        ranks,
    })
}

/// One memory group per rank, `dgl-bench-ranks-<pid>-<rank>`.
fn rank_cgroups(ranks: u32, gib: f64) -> Result<Vec<MemoryCgroup>> {
    let bytes = (gib * (1u64 << 30) as f64) as u64;
    (0..ranks)
        .map(|r| {
            let name = format!("dgl-bench-ranks-{}-{r}", std::process::id());
            MemoryCgroup::create(&name, bytes)
        })
        .collect()
}

/// What one rank reported, and what its memory group saw.
struct RankFigures {
    rank: u32,
    /// The rank's own high-water mark (VmHWM), from its log.
    peak_rss: Option<u64>,
    /// The group's peak, page cache included (cgroup v1 charges it).
    group_peak: Option<u64>,
    limit: Option<u64>,
    oom_killed: bool,
    /// This rank's share of the edges (edges / ranks) and bytes it sent.
    edges: Option<u64>,
    bytes_sent: Option<u64>,
    stages: Vec<String>,
}

impl RankFigures {
    fn read(rank: u32, stdout: &str, group: Option<&MemoryCgroup>) -> Self {
        let prefix = format!("rank {rank} of ");
        let lines: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|l| l.split_once(": ").map(|(_, rest)| rest))
            .collect();
        let number_after = |key: &str| {
            lines.iter().find_map(|l| {
                let rest = l.split_once(key)?.1.trim_start();
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
        };
        let world: Option<u64> = stdout.lines().find_map(|l| {
            l.strip_prefix(&prefix)?
                .split(':')
                .next()?
                .trim()
                .parse()
                .ok()
        });
        let edges = lines
            .iter()
            .find_map(|l| {
                let (_, rest) = l.split_once(" nodes, ")?;
                rest.split(' ').next()?.parse::<u64>().ok()
            })
            .zip(world)
            .and_then(|(e, w)| e.checked_div(w));
        RankFigures {
            rank,
            peak_rss: number_after("peak RSS:"),
            group_peak: group.and_then(|g| g.read_u64("memory.max_usage_in_bytes")),
            limit: group.and_then(|g| g.read_u64("memory.limit_in_bytes")),
            oom_killed: group.is_some_and(|g| g.oom_kills() > 0),
            edges,
            bytes_sent: number_after("bytes sent:"),
            stages: lines
                .iter()
                .filter_map(|l| l.strip_prefix("stage "))
                .map(str::to_string)
                .collect(),
        }
    }

    fn row(&self) -> String {
        let gib = |b: u64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
        let peak = self.peak_rss.map_or("-".into(), gib);
        let per_edge = self
            .peak_rss
            .zip(self.edges.filter(|&e| e > 0))
            .map_or("-".into(), |(p, e)| format!("{:.1}", p as f64 / e as f64));
        let group = match (self.oom_killed, self.group_peak, self.limit) {
            (true, _, Some(l)) => format!("killed at the {} limit", gib(l)),
            (_, Some(p), Some(l)) => format!("{} of {}", gib(p), gib(l)),
            _ => "-".into(),
        };
        let sent = self.bytes_sent.map_or("-".into(), |b| {
            format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
        });
        format!(
            "| {} | {peak} | {per_edge} | {group} | {sent} | {} |",
            self.rank,
            self.stages.join(", ")
        )
    }
}

struct Row {
    m: Measured,
    /// DGL: the partition_graph call alone.
    inner_seconds: Option<f64>,
    quality: Option<Value>,
    stages: Vec<String>,
    /// DistParMETIS: one entry per rank.
    ranks: Vec<RankFigures>,
}

fn evaluate(python: &Path, script: &Path, config: &Path, graph: &Path) -> Result<Value> {
    let out = Command::new(python)
        .arg(script)
        .arg("eval")
        .arg("--config")
        .arg(config)
        .arg("--graph")
        .arg(whole_graph(graph))
        .stderr(Stdio::inherit())
        .output()
        .context("running the evaluation script")?;
    if !out.status.success() {
        bail!("evaluating {} failed ({})", config.display(), out.status);
    }
    last_json(&String::from_utf8_lossy(&out.stdout))
        .with_context(|| format!("no JSON from the evaluation of {}", config.display()))
}

/// What the evaluation reads the whole graph from: graph.dgl where DGL
/// generated it, else the chunked files.
fn whole_graph(graph: &Path) -> PathBuf {
    let dgl = graph.join("graph.dgl");
    if dgl.is_file() {
        dgl
    } else {
        graph.join("chunked/metadata.json")
    }
}

fn last_json(text: &str) -> Option<Value> {
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
}

/// Runs `cmd` to its end (or the timeout), sampling the resident memory of
/// its whole process tree.
fn measure(tool: &str, cmd: &mut Command, args: &PartitionArgs) -> Result<Measured> {
    let timeout = args.timeout;
    // The tool before wrote its parts: flushed now, its writeback is not
    // charged to this one (the tools run in a fixed order).
    let _ = Command::new("sync").status();
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {tool}"))?;
    let pid = child.id();
    let cgroup = args
        .memory_limit_gib
        .map(|gib| MemoryCgroup::enter(pid, gib))
        .transpose()?;
    let peak = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut tree = TreeSampler::new(pid);
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(tree.sample(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let mut stdout = child.stdout.take().context("stdout")?;
    let mut stderr = child.stderr.take().context("stderr")?;
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if started.elapsed() > Duration::from_secs(timeout) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let wall = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let ok = status.is_some_and(|s| s.success());
    let oom_killed = cgroup.is_some_and(|c| c.oom_kills() > 0);
    if !ok {
        eprintln!(
            "{tool} did not finish ({status:?}, killed for memory: {oom_killed}); its stderr ends:\n{}",
            tail(&stderr, 30)
        );
    }
    Ok(Measured {
        tool: tool.to_string(),
        wall,
        peak_rss: peak.load(Ordering::Relaxed),
        ok,
        oom_killed,
        stdout,
        stderr,
    })
}

/// A cgroup-v1 memory group holding one tool's process tree; removed when
/// dropped (after the tree has exited).
struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    fn enter(pid: u32, gib: u64) -> Result<Self> {
        let cg = Self::create(&format!("dgl-bench-{pid}"), gib << 30)?;
        cg.write("cgroup.procs", &pid.to_string())?;
        Ok(cg)
    }

    /// An empty group `name` limited to `bytes`.
    fn create(name: &str, bytes: u64) -> Result<Self> {
        let dir = PathBuf::from(format!("/sys/fs/cgroup/memory/{name}"));
        std::fs::create_dir(&dir)
            .with_context(|| format!("creating {} (root, cgroup v1)", dir.display()))?;
        let cg = MemoryCgroup { dir };
        cg.write("memory.limit_in_bytes", &bytes.to_string())?;
        Ok(cg)
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.dir.join(file);
        std::fs::write(&path, value)
            .with_context(|| format!("writing {value} to {}", path.display()))
    }

    /// The kernel's count of OOM kills in this group.
    fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("memory.oom_control"))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("oom_kill ")
                        .and_then(|v| v.trim().parse().ok())
                })
            })
            .unwrap_or(0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The peak of the summed VmRSS of a process tree. Walking all of /proc
/// every 20 ms took a few percent of a CPU from the tool measured (most
/// from the one that keeps both cores busy), so the tree is found again
/// only every half second and its known members are read in between.
struct TreeSampler {
    root: u32,
    members: Vec<u32>,
    found: Option<Instant>,
}

impl TreeSampler {
    fn new(root: u32) -> Self {
        TreeSampler {
            root,
            members: vec![root],
            found: None,
        }
    }

    fn sample(&mut self) -> u64 {
        if self
            .found
            .is_none_or(|t| t.elapsed() > Duration::from_millis(500))
        {
            self.members = tree_members(self.root);
            self.found = Some(Instant::now());
        }
        self.members
            .iter()
            .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
            .map(|status| status_kib(&status, "VmRSS:").unwrap_or(0) * 1024)
            .sum()
    }
}

fn status_kib(status: &str, key: &str) -> Option<u64> {
    let v = status.lines().find_map(|l| l.strip_prefix(key))?;
    v.trim().trim_end_matches("kB").trim().parse().ok()
}

/// `root` and every descendant.
fn tree_members(root: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![root];
    };
    let mut parent = std::collections::HashMap::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        if let Some(pp) = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse::<u32>().ok())
        {
            parent.insert(pid, pp);
        }
    }
    let in_tree = |mut p: u32| {
        for _ in 0..64 {
            if p == root {
                return true;
            }
            match parent.get(&p) {
                Some(&q) if q != 0 => p = q,
                _ => return false,
            }
        }
        false
    };
    parent.keys().copied().filter(|&p| in_tree(p)).collect()
}

fn print_table(args: &PartitionArgs, rows: &[Row]) {
    if args.dev {
        println!("\n(debug binaries: a smoke run of every tool, not figures to compare)");
    }
    println!(
        "\nR-MAT {} nodes, {} raw edges, {} float32 features, {} parts; {} CPUs, load {}",
        args.nodes,
        args.edges,
        args.feat,
        args.parts,
        std::thread::available_parallelism().map_or(1, |p| p.get()),
        load_average()
    );
    println!("| tool | wall s | peak RSS (tree) | edge cut | balance nodes / train / edges |");
    println!("|---|---|---|---|---|");
    for r in rows {
        let q = r.quality.as_ref();
        let f = |k: &str| {
            q.and_then(|q| q.get(k))
                .map_or("-".into(), |v| v.to_string())
        };
        let wall = if r.m.ok {
            format!("{:.1}", r.m.wall.as_secs_f64())
        } else if r.m.oom_killed {
            format!(
                "killed at the {} GiB memory limit after {:.0} s",
                args.memory_limit_gib.unwrap_or(0),
                r.m.wall.as_secs_f64()
            )
        } else {
            format!("did not finish ({:.0} s)", r.m.wall.as_secs_f64())
        };
        let inner = r
            .inner_seconds
            .map_or(String::new(), |s| format!(" (call {s:.1})"));
        println!(
            "| {} | {wall}{inner} | {:.2} GiB | {} | {} / {} / {} |",
            r.m.tool,
            r.m.peak_rss as f64 / (1u64 << 30) as f64,
            f("edge_cut"),
            f("balance_nodes"),
            f("balance_train"),
            f("balance_edges")
        );
        for s in &r.stages {
            println!("|   stage {s} | | | | |");
        }
    }
    for r in rows.iter().filter(|r| !r.ranks.is_empty()) {
        println!("\n{} per rank:", r.m.tool);
        println!("| rank | peak RSS | bytes per edge | memory group (peak, page cache included) | sent | stages |");
        println!("|---|---|---|---|---|---|");
        for f in &r.ranks {
            println!("{}", f.row());
        }
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// `s3`: the `--from-bucket` comparison, when run.
fn append_json(path: &Path, args: &PartitionArgs, rows: &[Row], s3: Option<Value>) -> Result<()> {
    use std::io::Write;
    let line = serde_json::json!({
        "nodes": args.nodes, "edges": args.edges, "feat": args.feat, "parts": args.parts,
        "load": load_average(), "from_bucket": s3,
        "rows": rows.iter().map(|r| serde_json::json!({
            "tool": r.m.tool, "ok": r.m.ok, "oom_killed": r.m.oom_killed,
            "memory_limit_gib": args.memory_limit_gib, "wall_s": r.m.wall.as_secs_f64(),
            "call_s": r.inner_seconds, "peak_rss": r.m.peak_rss, "quality": r.quality,
            "stages": r.stages,
            "rank_memory_limit_gib": args.rank_memory_limit_gib,
            "ranks": r.ranks.iter().map(|f| serde_json::json!({
                "rank": f.rank, "peak_rss": f.peak_rss, "group_peak": f.group_peak,
                "oom_killed": f.oom_killed, "edges": f.edges, "bytes_sent": f.bytes_sent,
                "stages": f.stages,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{line}").with_context(|| format!("writing {}", path.display()))
}
