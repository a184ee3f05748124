//! `cargo xtask bench-shards`: how fast dglrun ships partition files to the
//! workers, compared with a plain TCP copy of the same bytes on the same
//! machine.
//!
//! Testbed (root only, nothing in the root network namespace): one "switch"
//! namespace holding a Linux bridge, one "partitioner" namespace and N
//! "worker" namespaces, each joined to the bridge by a veth pair (MTU 1500),
//! like pods on a node's CNI bridge. Addresses: partitioner 10.213.1.1,
//! worker i 10.213.1.(10+i), /24. The bridge does no netfilter calls.
//! Unshaped, such a link is as fast as the CPUs copy memory; `--link-gbit`
//! also measures each worker count with the partitioner's egress shaped to a
//! NIC's rate (tc tbf), where the wire, not the two CPUs, is the limit, as
//! on a cluster where every shard leaves the partitioner's node.
//!
//! The dglrun path is the real one, with the release binary:
//! - a synthetic dataset in DGL's layout (`bench.json` with num_parts=N and
//!   `part-<i>` entries naming `part<i>/graph.dgl`, `node_feat.dgl`,
//!   `edge_feat.dgl`; random, incompressible bytes) is written to a
//!   workspace on the `--dir` file system;
//! - `dglrun partition` serves it from the partitioner namespace. Its
//!   partition entry point is a Python script that does nothing (the
//!   partitions are already in the workspace); dglrun then checks the layout,
//!   lists the files (sizes only) and serves them, exactly as after a real
//!   partition step, hashing each 4 MiB chunk when it first serves it (or
//!   earlier on idle cores);
//! - `dglrun worker` agents run in the worker namespaces;
//! - this process, in the partitioner namespace, does what the launcher does
//!   to ship shards: one `PrepareShard` per worker, all at once, each on a
//!   fresh authenticated connection (dglrun's own channel code). Each worker
//!   pulls its shard (the JSON and `part<i>/`) from the partitioner, checks
//!   every chunk against the sha256 the partitioner sent after it (hashing
//!   on another core while the next block arrives) and answers `ShardReady`.
//!   Runs 2 and 3 find the partitioner's sums computed (by run 1 or the idle
//!   hashing), as a restarted job's transfer would.
//! - Right after the agents answer, a `Fetch` of the largest file measures
//!   the time to its first byte (nothing hashed yet but that chunk).
//!
//! Measured: the wall time from the first request until the last worker's
//! `ShardReady`; MB/s = bytes shipped (every worker's shard, 10^6 bytes per
//! MB) / that time; and the CPU seconds of the partitioner and the workers.
//!
//! Baseline, same namespaces, same concurrency: one sender thread per worker
//! in the partitioner namespace and one receiver thread in each worker's
//! namespace (threads enter a namespace with setns(2)). A sender reads the
//! same files and writes them to a plain TCP connection (256 KiB read/write
//! buffers, no sendfile, a small header per file); the receiver writes them to
//! the same file system as the workers' workspaces. No hashing, no fsync.
//!
//! Before each measured transfer the destinations are emptied and `sync(2)`
//! runs, so neither path pays for the other's write-back. Where the kernel
//! reports free pages to a VM's host (virtio balloon), the bench pauses that
//! for its run and touches the free memory once first: otherwise the first
//! write into each page handed back costs a host fault, on whichever path
//! happens to get the page (it skewed the figures by up to 2×).
//!
//! Cleanup: every namespace, process and folder is registered before it is
//! created and removed by a drop guard, and also on SIGINT/SIGTERM/SIGHUP (a
//! dedicated thread waits for them). The dglrun processes get
//! PR_SET_PDEATHSIG, so even a SIGKILLed bench leaves no process behind; its
//! namespaces (`dglbs<pid>-*`) are deleted by the next bench run (or with
//! `ip netns del`), its folder `dgl-bench-shards-<pid>` stays.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use dglrun::net::channel::Token;

use crate::bench::measure::{loadavg, proc_cpu};

mod common;
mod dataset;
mod interrupts;
mod plain;
mod registry;
mod report;
mod shipping;
mod testbed;
#[cfg(test)]
mod tests;

use common::*;
use dataset::{check_sizes, generate_dataset, ShardFile};
use plain::{plain_copy, Plain};
use report::{report, sha256_throughput, Machine};
use shipping::{first_byte, machine_busy, ping_all, prepare_shards};
use testbed::{in_netns, Testbed};

/// The partition step the partitioner runs: nothing, the files are in place.
const NOOP_PARTITION_SCRIPT: &str = "\
# dglrun partition runs this as the partition entry point. The benchmark
# wrote the partitions beforehand, so there is nothing to do: dglrun then
# checks the output, builds the manifest and serves it as after a real
# partition step.
";

#[derive(clap::Args)]
#[command(
    long_about = "Ships a synthetic DGL partition dataset with the real dglrun binaries \
    (partitioner + worker agents in network namespaces joined by a bridge) and with a plain \
    TCP copy between the same namespaces, and prints MB/s of both and their ratio as a \
    markdown table. Needs root (network namespaces); installs iproute2 when it is missing."
)]
pub struct Args {
    /// Total size of the partition files in MiB, split evenly over the workers.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    total_mib: u64,
    /// Worker counts to measure, comma separated (1 to 64 each).
    #[arg(long, value_delimiter = ',', default_value = "2,4", value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: Vec<u32>,
    /// Measured runs per worker count (each: one dglrun transfer and one plain copy);
    /// the table shows medians, and run 1 (the partitioner's first serving,
    /// hashing as it sends) on its own.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Where the dataset and the destinations go [default: the temp dir]. The
    /// default is on disk like a pod's emptyDir; use /dev/shm for tmpfs.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The dglrun binary [default: target/release/dglrun, built first].
    #[arg(long, value_name = "FILE")]
    dglrun: Option<PathBuf>,
    /// Seconds one transfer (either path) may take before the bench fails.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Keep the work folder (dataset, workspaces, logs) afterwards.
    #[arg(long)]
    keep: bool,
    /// Rates of the partitioner's uplink to measure, in Gbit/s, comma
    /// separated; 0 leaves the link unshaped (then memory and the CPUs are
    /// the only limit). A rate shapes what leaves the partitioner's namespace
    /// with a token bucket (tc tbf), like the NIC of the node all shards
    /// leave from; both paths go through it.
    #[arg(long, value_delimiter = ',', default_value = "0,10", value_parser = parse_link)]
    link_gbit: Vec<f64>,
    /// Leave the kernel's free page reporting on. By default the bench
    /// pauses it for its run (restored at the end, also on Ctrl-C; after a
    /// SIGKILL write the old value back to
    /// /sys/module/page_reporting/parameters/page_reporting_order) and
    /// touches all but 3 GiB of the free memory once: in a VM with a virtio
    /// balloon it hands every page the guest frees back to the host, and the
    /// first write into such a page then costs a host fault, which lands on
    /// whichever path allocates page cache next.
    #[arg(long)]
    keep_page_reporting: bool,
    /// Append the figures (medians per link and worker count) as one JSON
    /// line to this file, and draw this run's dglrun and plain-copy MB/s in
    /// `<stem>.svg` beside it.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn parse_link(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(g) if g.is_finite() && (g == 0.0 || (0.01..=400.0).contains(&g)) => Ok(g),
        _ => Err(format!(
            "{s:?}: expected a link rate in Gbit/s from 0.01 to 400, or 0 for an unshaped link"
        )),
    }
}

pub fn run(args: Args) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("bench-shards creates network namespaces and needs root");
    }
    // Network namespaces (ip) and the shaped link (tc).
    crate::ensure::apt(&["iproute2"])?;
    // Built before the signals are taken over, so that a Ctrl-C stops cargo as usual.
    let dglrun = match &args.dglrun {
        Some(p) => p.clone(),
        None => crate::ensure::release_binary("dglrun", "dglrun")?,
    };
    if !dglrun.is_file() {
        bail!("dglrun binary {} does not exist", dglrun.display());
    }
    // Before any other thread exists, so that every thread inherits the mask.
    interrupts::install()?;
    let _cleanup = CleanupGuard;
    registry::remove_stale_namespaces();
    let reporting = if args.keep_page_reporting {
        PageReporting::observe()
    } else {
        PageReporting::pause()?
    };
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let work = base.join(format!("dgl-bench-shards-{}", std::process::id()));
    if !args.keep {
        registry::track_dir(&work);
    }
    std::fs::create_dir_all(work.join("logs"))
        .with_context(|| format!("cannot create {}", work.display()))?;
    let token_bytes = format!("bench-{}-{}", std::process::id(), nanos());
    let token_file = work.join("token");
    write_private(&token_file, token_bytes.as_bytes())?;
    let token = Token::from_bytes(token_bytes.as_bytes()).expect("non-empty token");
    let script = work.join("noop_partition.py");
    std::fs::write(&script, NOOP_PARTITION_SCRIPT)?;

    let machine = Machine::read(&work);
    eprintln!("==> {}", machine.describe());
    eprintln!("==> sha256 (sha2 crate, as dglrun), MB per CPU second");
    let sha_mbps = sha256_throughput();
    eprintln!("    {sha_mbps:.0} MB per CPU second");

    let files = Files {
        dglrun: &dglrun,
        work: &work,
        token_file: &token_file,
        script: &script,
    };
    let mut rows = Vec::new();
    for &link in &args.link_gbit {
        let link = Link::from_gbit(link);
        for &n in &args.workers {
            rows.push(bench_workers(&args, n, link, files, &token)?);
        }
    }
    let load_after = loadavg();
    // Again: other load on the machine changes it, and the table depends on it.
    let sha_after = sha256_throughput();
    eprintln!("\n==> sha256 again: {sha_after:.0} MB per CPU second");
    let reporting = reporting.describe();
    eprintln!("==> {reporting}");
    println!(
        "{}",
        report(&machine, &load_after, [sha_mbps, sha_after], &rows)
    );
    println!("Free page reporting: {reporting}.");
    if let Some(path) = &args.json {
        write_results(path, &report::json(&machine, &load_after, &rows))?;
    }
    if args.keep {
        eprintln!("kept {}", work.display());
    }
    Ok(())
}

/// Appends the run's line to `path` and draws the chart beside it from it.
fn write_results(path: &Path, line: &serde_json::Value) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{line}").with_context(|| format!("writing {}", path.display()))?;
    let runs = crate::bench::chart::read_lines(path)?;
    let svg = crate::bench::chart::svg_path(path, None);
    crate::bench::chart::shards(runs.last().context("the results file has no line")?, &svg)?;
    println!("chart: {}", svg.display());
    Ok(())
}

/// Removes whatever is still registered when `run` returns, error or not.
struct CleanupGuard;

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        if registry::interrupted() {
            // The signal thread is cleaning up and exits the process when
            // done; returning now could end the process half-way through.
            loop {
                std::thread::park();
            }
        }
        registry::cleanup();
    }
}

/// The files every testbed's processes use.
#[derive(Clone, Copy)]
struct Files<'a> {
    dglrun: &'a Path,
    work: &'a Path,
    token_file: &'a Path,
    script: &'a Path,
}

fn bench_workers(args: &Args, n: u32, link: Link, files: Files, token: &Token) -> Result<Row> {
    eprintln!(
        "\n==> {n} workers, {} MiB, partitioner link {}",
        args.total_mib,
        link.label()
    );
    let root = files.work.join(format!("n{n}"));
    let src_ws = root.join("partitioner");
    let shards = generate_dataset(&src_ws, n, args.total_mib * MIB)?;
    let total_bytes: u64 = shards.iter().flatten().map(|f| f.size).sum();
    // The generated files are dirty page cache; write them back now rather
    // than during a measured transfer.
    sync();

    let mut bed = Testbed::create(n, files.dglrun, link)?;
    let started = Instant::now();
    let agents = start_agents(&mut bed, n, files, &root, &src_ws)?;
    wait_serving(&mut bed, &agents, token, args.timeout, files.work)?;
    let manifest_secs = started.elapsed().as_secs_f64();
    let (tok, partitioner) = (token.clone(), agents.partitioner);
    let first_byte_secs = in_netns(&agents.part_ns, move || first_byte(partitioner, &tok))?;
    eprintln!(
        "    partitioner serving {manifest_secs:.2}s after its start (layout check, sizes of {} MiB), \
         first byte of a file {first_byte_secs:.3}s later",
        total_bytes / MIB
    );

    let plain_root = root.join("plain");
    let mut dglrun_runs = Vec::new();
    let mut plain_runs: Vec<Vec<Run>> = vec![Vec::new(); Plain::ALL.len()];
    for run in 1..=args.runs {
        let d = dglrun_transfer(args, &agents, &shards, token, files.work)?;
        eprintln!("    run {run}: {}", d.describe("dglrun", total_bytes));
        dglrun_runs.push(d);
        for (k, mode) in Plain::ALL.into_iter().enumerate() {
            let p = plain_transfer(&bed, &src_ws, &plain_root, &shards, mode, args.timeout)?;
            eprintln!("           {}", p.describe(mode.label(), total_bytes));
            plain_runs[k].push(p);
        }
        eprintln!("           load average {}", loadavg());
    }
    drop(bed);
    remove_dir(&root)?;
    Ok(Row {
        workers: n,
        link,
        total_bytes,
        manifest_secs,
        first_byte_secs,
        dglrun: dglrun_runs,
        plain: plain_runs,
    })
}

/// dglrun's partitioner and worker agents, started in the testbed.
struct Agents {
    part_ns: String,
    part_pid: u32,
    worker_pids: Vec<u32>,
    worker_ws: Vec<PathBuf>,
    partitioner: SocketAddr,
    workers: Vec<(u32, SocketAddr)>,
}

/// Starts `dglrun partition` (serving the dataset in `src_ws`) and one
/// `dglrun worker` per worker namespace.
fn start_agents(
    bed: &mut Testbed,
    n: u32,
    files: Files,
    root: &Path,
    src_ws: &Path,
) -> Result<Agents> {
    let Files {
        work,
        token_file,
        script,
        ..
    } = files;
    let common = |ws: &Path| -> Vec<String> {
        vec![
            "--token-file".into(),
            token_file.display().to_string(),
            "--workspace".into(),
            ws.display().to_string(),
            "--agent-port".into(),
            AGENT_PORT.to_string(),
        ]
    };
    let mut part = vec!["partition".to_string()];
    part.extend(common(src_ws));
    part.extend([
        "--listen".into(),
        PARTITIONER_IP.to_string(),
        "--graph-name".into(),
        GRAPH.into(),
        "--partition-entry-point".into(),
        script.display().to_string(),
        "--num-partitions".into(),
        n.to_string(),
        "--python".into(),
        "python3".into(),
    ]);
    let part_ns = bed.partitioner_ns.clone();
    let part_pid = bed.spawn(
        &part_ns,
        "partitioner",
        &part,
        &work.join(format!("logs/n{n}-partitioner.log")),
    )?;
    let mut worker_pids = Vec::new();
    let worker_ws: Vec<PathBuf> = (0..n).map(|i| root.join(format!("worker-{i}"))).collect();
    for i in 0..n {
        let mut a = vec!["worker".to_string()];
        a.extend(common(&worker_ws[i as usize]));
        a.extend([
            "--listen".into(),
            worker_ip(i).to_string(),
            "--index".into(),
            i.to_string(),
        ]);
        let ns = bed.worker_ns[i as usize].clone();
        worker_pids.push(bed.spawn(
            &ns,
            &format!("worker-{i}"),
            &a,
            &work.join(format!("logs/n{n}-worker-{i}.log")),
        )?);
    }
    Ok(Agents {
        part_ns,
        part_pid,
        worker_pids,
        worker_ws,
        partitioner: SocketAddr::new(PARTITIONER_IP.into(), AGENT_PORT),
        workers: (0..n)
            .map(|i| (i, SocketAddr::new(worker_ip(i).into(), AGENT_PORT)))
            .collect(),
    })
}

/// Waits until every agent answers; the partitioner answers once it has
/// hashed every file into the manifest.
fn wait_serving(
    bed: &mut Testbed,
    agents: &Agents,
    token: &Token,
    timeout: u64,
    work: &Path,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        bed.check_running(work)?;
        let mut all: Vec<SocketAddr> = vec![agents.partitioner];
        all.extend(agents.workers.iter().map(|w| w.1));
        let tok = token.clone();
        if in_netns(&agents.part_ns, move || ping_all(&all, &tok))? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "the dglrun agents did not answer within {timeout}s; logs in {}",
                work.join("logs").display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One measured dglrun transfer: every worker fetches its shard; checked
/// complete, then the workers' copies are removed again.
fn dglrun_transfer(
    args: &Args,
    agents: &Agents,
    shards: &[Vec<ShardFile>],
    token: &Token,
    work: &Path,
) -> Result<Run> {
    for ws in &agents.worker_ws {
        remove_dir(&ws.join(dgl_api::names::DATASET_DIR))?;
    }
    sync();
    let pids: Vec<u32> = std::iter::once(agents.part_pid)
        .chain(agents.worker_pids.iter().copied())
        .collect();
    let cpu_before: Vec<f64> = pids.iter().map(|p| proc_cpu(*p)).collect::<Result<_>>()?;
    let machine_before = machine_busy()?;
    let (tok, w, partitioner) = (token.clone(), agents.workers.clone(), agents.partitioner);
    let n = agents.workers.len() as u32;
    let timeout = Duration::from_secs(args.timeout);
    let (secs, reports) = in_netns(&agents.part_ns, move || {
        prepare_shards(&w, partitioner, n, &tok, timeout)
    })
    .with_context(|| format!("logs in {}", work.join("logs").display()))?;
    let machine_cpu = machine_busy()? - machine_before;
    let cpu: Vec<f64> = pids
        .iter()
        .zip(&cpu_before)
        .map(|(p, b)| Ok(proc_cpu(*p)? - b))
        .collect::<Result<_>>()?;
    for (i, r) in reports.iter().enumerate() {
        let want: u64 = shards[i].iter().map(|f| f.size).sum();
        if r.transferred_bytes != want || r.reused_files != 0 {
            bail!("worker {i} did not fetch its whole shard: {r:?} (expected {want} bytes)");
        }
        if r.retries != 0 {
            eprintln!("    warning: worker {i} retried {} time(s)", r.retries);
        }
        check_sizes(
            &agents.worker_ws[i].join(dgl_api::names::DATASET_DIR),
            &shards[i],
        )?;
    }
    for ws in &agents.worker_ws {
        remove_dir(&ws.join(dgl_api::names::DATASET_DIR))?;
    }
    Ok(Run {
        secs,
        sender_cpu: cpu[0],
        receiver_cpu: cpu[1..].iter().sum(),
        machine_cpu,
    })
}

/// One plain copy of every shard in `mode`, checked complete and removed.
fn plain_transfer(
    bed: &Testbed,
    src_ws: &Path,
    plain_root: &Path,
    shards: &[Vec<ShardFile>],
    mode: Plain,
    timeout: u64,
) -> Result<Run> {
    remove_dir(plain_root)?;
    sync();
    let p = plain_copy(bed, src_ws, plain_root, shards, mode, timeout)?;
    for (i, files) in shards.iter().enumerate() {
        check_sizes(&plain_dest(plain_root, i as u32), files)?;
    }
    remove_dir(plain_root)?;
    Ok(p)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes)?;
    Ok(())
}

fn remove_dir(p: &Path) -> Result<()> {
    match std::fs::remove_dir_all(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", p.display()))
        }
        _ => Ok(()),
    }
}

fn sync() {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
}

/// Touches all but 3 GiB of the available memory once and frees it again:
/// with free page reporting paused, the host then backs every page the
/// transfers will write into, whichever path gets which page.
fn touch_free_memory() {
    let available_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    let bytes = (available_kib * 1024).saturating_sub(3 << 30);
    let piece = 256 * MIB as usize;
    let started = Instant::now();
    let held: Vec<Vec<u8>> = (0..bytes / piece as u64)
        .map(|_| vec![1u8; piece])
        .collect();
    let touched = held.len() as u64 * piece as u64;
    drop(std::hint::black_box(held));
    eprintln!(
        "==> touched {} GiB of free memory once in {:.1}s",
        touched >> 30,
        started.elapsed().as_secs_f64()
    );
}

/// The kernel's free page reporting (virtio balloon): how much it handed
/// to the host during the run, and whether the bench paused it.
struct PageReporting {
    /// `page_reporting_order` and its value before the run, when paused.
    paused: Option<(PathBuf, String)>,
    reported_kib_before: Option<u64>,
}

const REPORTING: &str = "/sys/module/page_reporting/parameters";

impl PageReporting {
    fn reported_kib() -> Option<u64> {
        std::fs::read_to_string(format!("{REPORTING}/reported_kib"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn observe() -> PageReporting {
        PageReporting {
            paused: None,
            reported_kib_before: Self::reported_kib(),
        }
    }

    /// Raises the order of free blocks it reports above the largest the
    /// buddy allocator has (10 on x86-64), so that it reports none, then
    /// has the host back the memory it was given before.
    fn pause() -> Result<PageReporting> {
        let path = PathBuf::from(format!("{REPORTING}/page_reporting_order"));
        let Ok(original) = std::fs::read_to_string(&path) else {
            return Ok(Self::observe());
        };
        let original = original.trim().to_string();
        registry::track_setting(&path, &original);
        std::fs::write(&path, "11").with_context(|| {
            format!(
                "cannot pause free page reporting ({}); --keep-page-reporting runs with it",
                path.display()
            )
        })?;
        eprintln!(
            "==> free page reporting paused for the run (page_reporting_order {original} -> 11)"
        );
        touch_free_memory();
        Ok(PageReporting {
            paused: Some((path, original)),
            reported_kib_before: Self::reported_kib(),
        })
    }

    fn describe(&self) -> String {
        let during = match (self.reported_kib_before, Self::reported_kib()) {
            (Some(a), Some(b)) => format!(
                "{} MiB handed to the host during the run",
                b.saturating_sub(a) / 1024
            ),
            _ => "not in this kernel".into(),
        };
        match &self.paused {
            Some((_, original)) => {
                format!("paused (page_reporting_order {original} -> 11), {during}")
            }
            None => format!("left as it was, {during}"),
        }
    }
}

impl Drop for PageReporting {
    fn drop(&mut self) {
        if let Some((path, original)) = self.paused.take() {
            if std::fs::write(&path, &original).is_ok() {
                registry::untrack_setting(&path);
            }
        }
    }
}
