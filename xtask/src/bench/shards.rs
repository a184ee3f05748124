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

use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use dgl_api::wire::{Request, Response, ShardReport, ShardRequest, ShardSource};
use dglrun::net::channel::{Channel, Token};
use sha2::{Digest, Sha256};

use super::measure::{loadavg, median, proc_cpu};

const GRAPH: &str = "bench";
/// Both dglrun agents listen on the default agent port in their own namespace.
const AGENT_PORT: u16 = dgl_api::names::AGENT_PORT;
/// The plain copy's receivers.
const PLAIN_PORT: u16 = 30100;
const PARTITIONER_IP: Ipv4Addr = Ipv4Addr::new(10, 213, 1, 1);
/// Read/write buffer of the plain copy (dglrun's receive buffer is also 256 KiB).
const PLAIN_BUF: usize = 256 * 1024;
const MB: f64 = 1e6;
const MIB: u64 = 1 << 20;
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
    if args.keep {
        eprintln!("kept {}", work.display());
    }
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

/// The partitioner's uplink: unshaped, or a token bucket of this rate.
#[derive(Clone, Copy)]
enum Link {
    Unshaped,
    Gbit(f64),
}

impl Link {
    fn from_gbit(g: f64) -> Link {
        if g == 0.0 {
            Link::Unshaped
        } else {
            Link::Gbit(g)
        }
    }

    fn label(&self) -> String {
        match self {
            Link::Unshaped => "unshaped".into(),
            Link::Gbit(g) => format!("{g} Gbit/s"),
        }
    }

    /// `tc` arguments after `qdisc add dev eth0 root`. The bucket holds 1 ms
    /// of the rate (at least 256 KiB: veth hands over 64 KiB GSO packets, a
    /// smaller bucket would cap the rate below what is asked); the queue
    /// holds 20 ms, so TCP sees a deep NIC queue, not drops.
    fn tbf_args(&self) -> Option<Vec<String>> {
        let Link::Gbit(g) = self else { return None };
        let bytes_per_sec = g * 1e9 / 8.0;
        let burst = ((bytes_per_sec / 1000.0) as u64).max(256 * 1024);
        Some(vec![
            "tbf".into(),
            "rate".into(),
            format!("{}kbit", (g * 1e6).round() as u64),
            "burst".into(),
            burst.to_string(),
            "latency".into(),
            "20ms".into(),
        ])
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

/// One worker count's results on one link.
struct Row {
    workers: u32,
    link: Link,
    total_bytes: u64,
    /// Partitioner start → it answers (its partition step does nothing).
    manifest_secs: f64,
    /// Then: connect, manifest, `Fetch` of the largest file → its first byte.
    first_byte_secs: f64,
    dglrun: Vec<Run>,
    /// One list per `Plain::ALL` mode.
    plain: Vec<Vec<Run>>,
}

/// One measured transfer.
#[derive(Clone, Copy)]
struct Run {
    secs: f64,
    /// CPU seconds of the sending side (dglrun: the partitioner process).
    sender_cpu: f64,
    /// CPU seconds of the receiving side (dglrun: the worker processes).
    receiver_cpu: f64,
    /// Busy CPU seconds of the whole machine over the transfer (every
    /// process, kernel threads and softirqs too): shows how close to all
    /// CPUs a path ran, which the per-process figures miss.
    machine_cpu: f64,
}

impl Run {
    fn mbps(&self, bytes: u64) -> f64 {
        bytes as f64 / MB / self.secs
    }

    fn describe(&self, what: &str, bytes: u64) -> String {
        format!(
            "{what}: {:.2}s, {:.0} MB/s, CPU s sender {:.2} + receivers {:.2}, machine {:.2} ({:.2} CPUs busy)",
            self.secs,
            self.mbps(bytes),
            self.sender_cpu,
            self.receiver_cpu,
            self.machine_cpu,
            self.machine_cpu / self.secs
        )
    }
}

fn bench_workers(args: &Args, n: u32, link: Link, files: Files, token: &Token) -> Result<Row> {
    let Files {
        dglrun,
        work,
        token_file,
        script,
    } = files;
    eprintln!(
        "\n==> {n} workers, {} MiB, partitioner link {}",
        args.total_mib,
        link.label()
    );
    let root = work.join(format!("n{n}"));
    let src_ws = root.join("partitioner");
    let shards = generate_dataset(&src_ws, n, args.total_mib * MIB)?;
    let total_bytes: u64 = shards.iter().flatten().map(|f| f.size).sum();
    // The generated files are dirty page cache; write them back now rather
    // than during a measured transfer.
    sync();

    let mut bed = Testbed::create(n, dglrun, link)?;
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
    part.extend(common(&src_ws));
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
    let started = Instant::now();
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
    // The partitioner answers once it has hashed every file into the manifest.
    let partitioner = SocketAddr::new(PARTITIONER_IP.into(), AGENT_PORT);
    let workers: Vec<(u32, SocketAddr)> = (0..n)
        .map(|i| (i, SocketAddr::new(worker_ip(i).into(), AGENT_PORT)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    loop {
        bed.check_running(work)?;
        let mut all: Vec<SocketAddr> = vec![partitioner];
        all.extend(workers.iter().map(|w| w.1));
        let tok = token.clone();
        if in_netns(&part_ns, move || ping_all(&all, &tok))? {
            break;
        }
        if Instant::now() >= deadline {
            bail!(
                "the dglrun agents did not answer within {}s; logs in {}",
                args.timeout,
                work.join("logs").display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let manifest_secs = started.elapsed().as_secs_f64();
    let tok = token.clone();
    let first_byte_secs = in_netns(&part_ns, move || first_byte(partitioner, &tok))?;
    eprintln!(
        "    partitioner serving {manifest_secs:.2}s after its start (layout check, sizes of {} MiB), \
         first byte of a file {first_byte_secs:.3}s later",
        total_bytes / MIB
    );

    let plain_root = root.join("plain");
    let mut dglrun_runs = Vec::new();
    let mut plain_runs: Vec<Vec<Run>> = vec![Vec::new(); Plain::ALL.len()];
    for run in 1..=args.runs {
        // dglrun
        for ws in &worker_ws {
            remove_dir(&ws.join(dgl_api::names::DATASET_DIR))?;
        }
        sync();
        let pids: Vec<u32> = std::iter::once(part_pid)
            .chain(worker_pids.iter().copied())
            .collect();
        let cpu_before: Vec<f64> = pids.iter().map(|p| proc_cpu(*p)).collect::<Result<_>>()?;
        let machine_before = machine_busy()?;
        let tok = token.clone();
        let w = workers.clone();
        let timeout = Duration::from_secs(args.timeout);
        let (secs, reports) = in_netns(&part_ns, move || {
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
            check_sizes(&worker_ws[i].join(dgl_api::names::DATASET_DIR), &shards[i])?;
        }
        let d = Run {
            secs,
            sender_cpu: cpu[0],
            receiver_cpu: cpu[1..].iter().sum(),
            machine_cpu,
        };
        for ws in &worker_ws {
            remove_dir(&ws.join(dgl_api::names::DATASET_DIR))?;
        }
        eprintln!("    run {run}: {}", d.describe("dglrun", total_bytes));
        dglrun_runs.push(d);

        for (k, mode) in Plain::ALL.into_iter().enumerate() {
            remove_dir(&plain_root)?;
            sync();
            let p = plain_copy(&bed, &src_ws, &plain_root, &shards, mode, args.timeout)?;
            for (i, files) in shards.iter().enumerate() {
                check_sizes(&plain_dest(&plain_root, i as u32), files)?;
            }
            remove_dir(&plain_root)?;
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

fn worker_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(
        10,
        213,
        1,
        10 + u8::try_from(i).expect("at most 64 workers"),
    )
}

fn plain_dest(root: &Path, i: u32) -> PathBuf {
    root.join(format!("worker-{i}"))
        .join(dgl_api::names::DATASET_DIR)
}

fn nanos() -> u128 {
    std::time::UNIX_EPOCH
        .elapsed()
        .map(|d| d.as_nanos())
        .unwrap_or(0)
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

// ---------------------------------------------------------------------------
// Dataset

/// One file of a worker's shard, relative to the dataset folder.
#[derive(Clone, Debug)]
struct ShardFile {
    rel: String,
    size: u64,
}

/// Writes `<ws>/dataset/bench.json` and `part<i>/{graph,node_feat,edge_feat}.dgl`
/// (`total` bytes in all, random) and returns every worker's file list: the
/// JSON and its part's files, as `Manifest::shard_files` selects them.
fn generate_dataset(ws: &Path, parts: u32, total: u64) -> Result<Vec<Vec<ShardFile>>> {
    let dir = ws.join(dgl_api::names::DATASET_DIR);
    let json_name = dgl_api::wire::partition_json_name(GRAPH);
    let mut json = serde_json::json!({
        "graph_name": GRAPH,
        "part_method": "random",
        "num_parts": parts,
        "halo_hops": 1,
    });
    let per_part = total / u64::from(parts);
    let mut rng = Rng(0x5EED ^ nanos() as u64);
    let mut buf = vec![0u8; 4 << 20];
    let mut shards = Vec::new();
    let started = Instant::now();
    for i in 0..parts {
        let part_dir = dgl_api::wire::part_dir_name(i);
        std::fs::create_dir_all(dir.join(&part_dir))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // Roughly DGL's proportions: node features dominate.
        let graph = per_part / 4;
        let node = per_part * 3 / 5;
        let edge = per_part - graph - node;
        let mut files = Vec::new();
        for (name, size) in [
            ("graph.dgl", graph),
            ("node_feat.dgl", node),
            ("edge_feat.dgl", edge),
        ] {
            let rel = format!("{part_dir}/{name}");
            let path = dir.join(&rel);
            let mut f =
                File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut left = size;
            while left > 0 {
                let k = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                rng.fill(&mut buf[..k]);
                f.write_all(&buf[..k])
                    .with_context(|| format!("cannot write {}", path.display()))?;
                left -= k as u64;
            }
            files.push(ShardFile { rel, size });
        }
        json[format!("part-{i}")] = serde_json::json!({
            "part_graph": format!("{part_dir}/graph.dgl"),
            "node_feats": format!("{part_dir}/node_feat.dgl"),
            "edge_feats": format!("{part_dir}/edge_feat.dgl"),
        });
        shards.push(files);
    }
    let text = serde_json::to_string_pretty(&json)?;
    std::fs::write(dir.join(&json_name), &text)?;
    for files in &mut shards {
        files.insert(
            0,
            ShardFile {
                rel: json_name.clone(),
                size: text.len() as u64,
            },
        );
    }
    eprintln!(
        "    dataset: {parts} parts x {} MiB in {} ({:.1}s)",
        per_part / MIB,
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(shards)
}

/// splitmix64: fast, and its output does not compress.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next().to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }
}

/// Every file is there with its size (the content was checked by the
/// receiver: sha256 for dglrun, byte counts for the plain copy).
fn check_sizes(dataset: &Path, files: &[ShardFile]) -> Result<()> {
    for f in files {
        let p = dataset.join(&f.rel);
        let len = std::fs::metadata(&p)
            .with_context(|| format!("{} is missing after the transfer", p.display()))?
            .len();
        if len != f.size {
            bail!("{} has {len} bytes, expected {}", p.display(), f.size);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Network namespaces

/// The switch, partitioner and worker namespaces and the dglrun processes in
/// them. Drop stops the processes and deletes the namespaces (which deletes
/// the veth pairs and the bridge).
struct Testbed {
    dglrun: PathBuf,
    namespaces: Vec<String>,
    partitioner_ns: String,
    worker_ns: Vec<String>,
    children: Vec<(String, Child)>,
}

fn ip(args: &[&str]) -> Result<()> {
    iproute2("ip", args)
}

/// Runs `ip` or `tc`, failing with its stderr.
fn iproute2(tool: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(tool)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {tool}"))?;
    if !out.status.success() {
        bail!(
            "{tool} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Testbed {
    fn create(workers: u32, dglrun: &Path, link: Link) -> Result<Testbed> {
        // The pid keeps names unique between concurrent benches; the worker
        // count between the testbeds of one bench.
        let prefix = format!("dglbs{}-n{workers}", std::process::id());
        let switch = format!("{prefix}-sw");
        let partitioner_ns = format!("{prefix}-part");
        let worker_ns: Vec<String> = (0..workers).map(|i| format!("{prefix}-w{i}")).collect();
        let mut bed = Testbed {
            dglrun: dglrun.to_path_buf(),
            namespaces: Vec::new(),
            partitioner_ns: partitioner_ns.clone(),
            worker_ns: worker_ns.clone(),
            children: Vec::new(),
        };
        for ns in std::iter::once(&switch)
            .chain(std::iter::once(&partitioner_ns))
            .chain(&worker_ns)
        {
            // Registered first: an interrupt between the two steps still deletes it.
            registry::track_ns(ns);
            bed.namespaces.push(ns.clone());
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &switch, "link", "set", "br0", "up"])?;
        // A wire, not a firewall: bridged frames skip iptables (best effort,
        // the knob exists only with br_netfilter loaded).
        let _ = Command::new("ip")
            .args(["netns", "exec", &switch, "sysctl", "-qw"])
            .args([
                "net.bridge.bridge-nf-call-iptables=0",
                "net.bridge.bridge-nf-call-ip6tables=0",
                "net.bridge.bridge-nf-call-arptables=0",
            ])
            .stderr(Stdio::null())
            .status();
        let mut hosts = vec![(partitioner_ns.clone(), "part".to_string(), PARTITIONER_IP)];
        for (i, ns) in worker_ns.iter().enumerate() {
            hosts.push((ns.clone(), format!("w{i}"), worker_ip(i as u32)));
        }
        for (ns, port, addr) in &hosts {
            // Both ends are created directly in their namespaces: nothing
            // ever appears in the root namespace.
            ip(&[
                "link", "add", "name", "eth0", "netns", ns, "type", "veth", "peer", "name", port,
                "netns", &switch,
            ])?;
            ip(&["-n", &switch, "link", "set", port, "master", "br0", "up"])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        }
        if let Some(tbf) = link.tbf_args() {
            let mut tc = vec!["-n", &partitioner_ns, "qdisc", "add", "dev", "eth0", "root"];
            tc.extend(tbf.iter().map(String::as_str));
            iproute2("tc", &tc).context(
                "cannot shape the partitioner's link (the kernel needs the tbf qdisc, sch_tbf); \
                 --link-gbit 0 measures the unshaped link only",
            )?;
        }
        Ok(bed)
    }

    /// Starts dglrun with `args` in namespace `ns`, output to `log`.
    fn spawn(&mut self, ns: &str, name: &str, args: &[String], log: &Path) -> Result<u32> {
        let nsfile = File::open(netns_path(ns))
            .with_context(|| format!("cannot open network namespace {ns}"))?;
        let fd = nsfile.as_raw_fd();
        let out = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        let mut cmd = Command::new(&self.dglrun);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            // Its own process group: a Ctrl-C at the terminal reaches only
            // the bench, which stops the agents in order.
            .process_group(0);
        // SAFETY: only async-signal-safe system calls run between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // This thread blocks the signals the bench handles itself
                // (see `interrupts`), and a child inherits the mask: dglrun
                // must get its SIGTERM.
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                if libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::other("cannot reset the signal mask"));
                }
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Dies with the bench even when the bench is SIGKILLed and
                // no cleanup code runs. (Spawned from the main thread, which
                // lives as long as the bench.)
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {} for the {name}", self.dglrun.display()))?;
        drop(nsfile);
        let pid = child.id();
        registry::track_pid(pid);
        self.children.push((name.to_string(), child));
        Ok(pid)
    }

    /// Fails, with the end of its log, when a dglrun process has exited.
    fn check_running(&mut self, work: &Path) -> Result<()> {
        for (name, child) in &mut self.children {
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_dir(work.join("logs"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .find(|p| p.to_string_lossy().ends_with(&format!("-{name}.log")));
                let tail = log
                    .map(|p| {
                        let text = std::fs::read_to_string(&p).unwrap_or_default();
                        let lines: Vec<&str> = text.lines().collect();
                        lines[lines.len().saturating_sub(20)..].join("\n")
                    })
                    .unwrap_or_default();
                bail!("dglrun {name} exited early ({status}):\n{tail}");
            }
        }
        Ok(())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if registry::interrupted() {
            return; // the signal thread removes everything
        }
        for (_, child) in &mut self.children {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for (name, child) in &mut self.children {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        eprintln!("    {name} ignored SIGTERM; killing it");
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
            registry::untrack_pid(child.id());
        }
        registry::delete_namespaces(&self.namespaces);
    }
}

fn netns_path(ns: &str) -> String {
    format!("/var/run/netns/{ns}")
}

/// Runs `f` on a new thread that has entered network namespace `ns`: every
/// socket it creates lives there.
fn in_netns<T, F>(ns: &str, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let nsfile = File::open(netns_path(ns))
        .with_context(|| format!("cannot open network namespace {ns}"))?;
    let ns_name = ns.to_string();
    std::thread::Builder::new()
        .name(format!("netns-{ns}"))
        .spawn(move || {
            // SAFETY: setns(2) with a namespace fd we own; it changes only
            // this thread's network namespace.
            if unsafe { libc::setns(nsfile.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("cannot enter network namespace {ns_name}"));
            }
            drop(nsfile);
            f()
        })?
        .join()
        .map_err(|_| anyhow!("a thread in namespace {ns} panicked"))?
}

// ---------------------------------------------------------------------------
// The dglrun path

fn current_thread_runtime() -> Result<tokio::runtime::Runtime> {
    // One thread: every socket is created on this (namespaced) thread.
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Whether every agent answers an authenticated ping.
fn ping_all(addrs: &[SocketAddr], token: &Token) -> Result<bool> {
    current_thread_runtime()?.block_on(async {
        for &addr in addrs {
            let ping = async {
                let mut ch = Channel::connect(addr, token, Duration::from_secs(2)).await?;
                ch.call::<_, Response>(&Request::Ping).await
            };
            match tokio::time::timeout(Duration::from_secs(3), ping).await {
                Ok(Ok(Response::Pong(_))) => {}
                Ok(Ok(other)) => bail!("{addr} answered a ping with {other:?}"),
                Ok(Err(e)) if !e.is_transient() => bail!("{addr}: {e}"),
                _ => return Ok(false),
            }
        }
        Ok(true)
    })
}

/// Connects to the partitioner, gets its manifest and asks for its largest
/// file: the seconds until the file's first byte arrives (its first chunk
/// is hashed on demand, nothing else is).
fn first_byte(partitioner: SocketAddr, token: &Token) -> Result<f64> {
    current_thread_runtime()?.block_on(async {
        let started = Instant::now();
        let mut ch = Channel::connect(partitioner, token, Duration::from_secs(10)).await?;
        let Response::Manifest(m) = ch.call::<_, Response>(&Request::GetManifest).await? else {
            bail!("the partitioner did not send its manifest");
        };
        let big = m
            .files
            .iter()
            .max_by_key(|f| f.size)
            .ok_or_else(|| anyhow!("empty manifest"))?;
        let req = Request::Fetch {
            path: big.path.clone(),
            offset: 0,
        };
        let Response::File(_) = ch.call::<_, Response>(&req).await? else {
            bail!("the partitioner did not send {}", big.path);
        };
        let mut one = [0u8; 1];
        tokio::io::AsyncReadExt::read_exact(ch.reader.get_mut(), &mut one).await?;
        Ok(started.elapsed().as_secs_f64())
    })
}

/// The launcher's shard step: `PrepareShard` to every worker at once; the
/// time until the last `ShardReady`.
fn prepare_shards(
    workers: &[(u32, SocketAddr)],
    partitioner: SocketAddr,
    n: u32,
    token: &Token,
    timeout: Duration,
) -> Result<(f64, Vec<ShardReport>)> {
    current_thread_runtime()?.block_on(async {
        let started = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for &(i, addr) in workers {
            let req = Request::PrepareShard(ShardRequest {
                graph_name: GRAPH.into(),
                part_id: i,
                num_parts: n,
                source: ShardSource::Partitioner {
                    addr: partitioner.to_string(),
                },
                use_graphbolt: false,
            });
            let token = token.clone();
            set.spawn(async move {
                let r = async {
                    let mut ch = Channel::connect(addr, &token, Duration::from_secs(10)).await?;
                    ch.send(&req).await?;
                    // Progress reports come every 2 s until the answer.
                    loop {
                        match ch.expect::<Response>().await? {
                            Response::ShardProgress(_) => continue,
                            other => break Ok::<_, dglrun::net::channel::ChannelError>(other),
                        }
                    }
                }
                .await;
                (i, r)
            });
        }
        let mut reports = vec![None; workers.len()];
        let collect = async {
            while let Some(joined) = set.join_next().await {
                let (i, r) = joined.expect("shard tasks do not panic");
                match r {
                    Ok(Response::ShardReady(rep)) => reports[i as usize] = Some(rep),
                    Ok(Response::Error { message }) => bail!("worker {i}: {message}"),
                    Ok(other) => bail!("worker {i}: unexpected reply {other:?}"),
                    Err(e) => bail!("worker {i}: {e}"),
                }
            }
            Ok(())
        };
        tokio::time::timeout(timeout, collect)
            .await
            .map_err(|_| anyhow!("the shards were not ready within {timeout:?}"))??;
        let secs = started.elapsed().as_secs_f64();
        Ok((
            secs,
            reports
                .into_iter()
                .map(|r| r.expect("every worker answered"))
                .collect(),
        ))
    })
}

/// Busy CPU seconds of the whole machine since boot: user, nice, system,
/// irq and softirq of the `cpu` line of /proc/stat (guest time is already
/// in user; steal is the hypervisor's, not ours).
fn machine_busy() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("cannot read /proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| anyhow!("/proc/stat has no cpu line"))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|t| t.parse::<u64>())
        .collect::<Result<_, _>>()
        .context("/proc/stat: cpu line")?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    let busy: u64 = ticks
        .iter()
        .take(7)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(busy as f64 / hz)
}

// ---------------------------------------------------------------------------
// The plain TCP copy

/// What a baseline receiver does besides writing the bytes. `Copy` is the
/// baseline; the other two add dglrun's per-file steps one at a time (fsync,
/// then sha256 of the written file, read back as dglrun does) to show where
/// dglrun's time goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Plain {
    Copy,
    Fsync,
    FsyncSha256,
}

impl Plain {
    const ALL: [Plain; 3] = [Plain::Copy, Plain::Fsync, Plain::FsyncSha256];

    fn label(self) -> &'static str {
        match self {
            Plain::Copy => "plain TCP",
            Plain::Fsync => "plain + fsync",
            Plain::FsyncSha256 => "plain + fsync + sha256",
        }
    }
}

/// CPU seconds (user + system) of the calling thread.
fn thread_cpu() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Copies every worker's files from the partitioner namespace to the
/// worker's namespace over plain TCP, all workers at once.
fn plain_copy(
    bed: &Testbed,
    src_ws: &Path,
    dest_root: &Path,
    shards: &[Vec<ShardFile>],
    mode: Plain,
    timeout_secs: u64,
) -> Result<Run> {
    let timeout = Duration::from_secs(timeout_secs);
    let src = src_ws.join(dgl_api::names::DATASET_DIR);
    let n = shards.len();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
    let mut receivers = Vec::new();
    for (i, files) in shards.iter().enumerate() {
        let addr = SocketAddr::new(IpAddr::V4(worker_ip(i as u32)), PLAIN_PORT);
        let dest = plain_dest(dest_root, i as u32);
        let expect: u64 = files.iter().map(|f| f.size).sum();
        let ns = bed.worker_ns[i].clone();
        let ready = ready_tx.clone();
        receivers.push(std::thread::spawn(move || {
            in_netns(&ns, move || {
                receive(addr, &dest, expect, mode, timeout, ready)
            })
        }));
    }
    drop(ready_tx);
    for _ in 0..n {
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| anyhow!("the plain-copy receivers did not start"))??;
    }
    // Senders enter their namespace and open their files first; the clock
    // starts when all of them are released at once.
    let gate = Arc::new(Barrier::new(n + 1));
    let mut senders = Vec::new();
    for (i, files) in shards.iter().enumerate() {
        let addr = SocketAddr::new(IpAddr::V4(worker_ip(i as u32)), PLAIN_PORT);
        let (gate, src, files) = (gate.clone(), src.clone(), files.clone());
        let ns = bed.partitioner_ns.clone();
        senders.push(std::thread::spawn(move || -> Result<f64> {
            in_netns(&ns, move || {
                let opened: Result<Vec<(ShardFile, File)>> = files
                    .into_iter()
                    .map(|f| {
                        let file = File::open(src.join(&f.rel))
                            .with_context(|| format!("cannot open {}", f.rel))?;
                        Ok((f, file))
                    })
                    .collect();
                // Always reach the gate, or the main thread would wait forever.
                gate.wait();
                send(addr, opened?)
            })
        }));
    }
    gate.wait();
    let started = Instant::now();
    let machine_before = machine_busy()?;
    let mut finished = started;
    let (mut sender_cpu, mut receiver_cpu) = (0.0, 0.0);
    let mut errors = Vec::new();
    for (i, r) in receivers.into_iter().enumerate() {
        match r.join().map_err(|_| anyhow!("receiver panicked"))? {
            Ok((at, cpu)) => {
                finished = finished.max(at);
                receiver_cpu += cpu;
            }
            Err(e) => errors.push(format!("receiver {i}: {e:#}")),
        }
    }
    for (i, s) in senders.into_iter().enumerate() {
        match s.join().map_err(|_| anyhow!("sender panicked"))? {
            Ok(cpu) => sender_cpu += cpu,
            Err(e) => errors.push(format!("sender {i}: {e:#}")),
        }
    }
    if !errors.is_empty() {
        bail!("{} failed: {}", mode.label(), errors.join("; "));
    }
    Ok(Run {
        secs: (finished - started).as_secs_f64(),
        sender_cpu,
        receiver_cpu,
        machine_cpu: machine_busy()? - machine_before,
    })
}

/// Sends files: per file a header (path length u16, path, size u64, big
/// endian), then its bytes. Returns the thread's CPU seconds.
fn send(addr: SocketAddr, files: Vec<(ShardFile, File)>) -> Result<f64> {
    let cpu = thread_cpu();
    let mut sock = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .with_context(|| format!("cannot connect to {addr}"))?;
    let mut buf = vec![0u8; PLAIN_BUF];
    for (f, mut file) in files {
        let mut header = Vec::new();
        header.extend_from_slice(&(f.rel.len() as u16).to_be_bytes());
        header.extend_from_slice(f.rel.as_bytes());
        header.extend_from_slice(&f.size.to_be_bytes());
        sock.write_all(&header)?;
        let mut left = f.size;
        while left > 0 {
            let k = file.read(&mut buf)?;
            if k == 0 {
                bail!("{} ended {left} bytes early", f.rel);
            }
            let k = k.min(usize::try_from(left).unwrap_or(usize::MAX));
            sock.write_all(&buf[..k])?;
            left -= k as u64;
        }
    }
    sock.shutdown(std::net::Shutdown::Write)?;
    Ok(thread_cpu() - cpu)
}

/// Accepts one connection and writes what `send` sends below `dest`;
/// returns when the last file is closed, with the thread's CPU seconds.
fn receive(
    addr: SocketAddr,
    dest: &Path,
    expect: u64,
    mode: Plain,
    timeout: Duration,
    ready: mpsc::Sender<Result<()>>,
) -> Result<(Instant, f64)> {
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(anyhow!("cannot listen on {addr}: {e}")));
            bail!("cannot listen on {addr}: {e}");
        }
    };
    let _ = ready.send(Ok(()));
    // A sender that never comes must not hang the bench.
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + timeout;
    let mut sock = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    bail!("no sender connected to {addr}");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let cpu = thread_cpu();
    sock.set_nonblocking(false)?;
    sock.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut buf = vec![0u8; PLAIN_BUF];
    let mut got = 0u64;
    loop {
        let mut len = [0u8; 2];
        match sock.read_exact(&mut len) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            r => r?,
        }
        let mut rel = vec![0u8; usize::from(u16::from_be_bytes(len))];
        sock.read_exact(&mut rel)?;
        let rel = String::from_utf8(rel)?;
        let mut size = [0u8; 8];
        sock.read_exact(&mut size)?;
        let mut left = u64::from_be_bytes(size);
        let path = dest.join(&rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut file =
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let k = sock.read(&mut buf[..want])?;
            if k == 0 {
                bail!("connection closed with {left} bytes of {rel} to go");
            }
            file.write_all(&buf[..k])?;
            left -= k as u64;
            got += k as u64;
        }
        if mode != Plain::Copy {
            file.sync_all()?;
        }
        drop(file);
        if mode == Plain::FsyncSha256 {
            // dglrun's own function, as its worker runs it on a received file.
            std::hint::black_box(dglrun::dataset::sha256_file(&path)?);
        }
    }
    let at = Instant::now();
    if got != expect {
        bail!("received {got} bytes, expected {expect}");
    }
    Ok((at, thread_cpu() - cpu))
}

// ---------------------------------------------------------------------------
// Machine and report

/// sha256 throughput of one core in MB per CPU second (best of three over
/// 256 MiB). CPU time rather than wall time, so that other load on the
/// machine does not lower it.
fn sha256_throughput() -> f64 {
    let mut buf = vec![0u8; 256 << 20];
    Rng(42).fill(&mut buf);
    (0..3)
        .map(|_| {
            let cpu = thread_cpu();
            std::hint::black_box(Sha256::digest(&buf));
            buf.len() as f64 / MB / (thread_cpu() - cpu).max(1e-3)
        })
        .fold(0.0, f64::max)
}

struct Machine {
    cpus: usize,
    cpu_model: String,
    mem_gib: f64,
    kernel: String,
    load_before: String,
    /// File system type and device of the work folder.
    fs: String,
}

impl Machine {
    fn read(work: &Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        let mem_kib: f64 = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        // The mount with the longest prefix of the work folder.
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let fs = mounts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 3 && work.starts_with(f[1])).then(|| (f[1].len(), f[2], f[0]))
            })
            .max_by_key(|m| m.0)
            .map(|(_, ty, dev)| format!("{ty} ({dev})"))
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            mem_gib: mem_kib / (1024.0 * 1024.0),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            load_before: loadavg(),
            fs,
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} CPUs ({}), {:.1} GiB memory, Linux {}, load average {}, work folder on {}",
            self.cpus, self.cpu_model, self.mem_gib, self.kernel, self.load_before, self.fs
        )
    }
}

fn report(m: &Machine, load_after: &str, sha_mbps: [f64; 2], rows: &[Row]) -> String {
    let mut s = String::new();
    let args: Vec<String> = std::env::args().skip(1).collect();
    s.push_str(&format!("Command: `cargo xtask {}`\n\n", args.join(" ")));
    s.push_str(&format!(
        "Machine: {} CPUs ({}), {:.1} GiB memory, Linux {}; load average {} before, {} after; \
         files on {}. sha256 (sha2 crate, one core): {:.0} MB per CPU second before, {:.0} after.\n\n",
        m.cpus,
        m.cpu_model,
        m.mem_gib,
        m.kernel,
        m.load_before,
        load_after,
        m.fs,
        sha_mbps[0],
        sha_mbps[1]
    ));
    s.push_str(
        "| partitioner link | workers | total MiB | dglrun MB/s | plain TCP MB/s | ratio | run 1 ratio (first serving) | plain + fsync MB/s | plain + fsync + sha256 MB/s | dglrun CPU s (partitioner + workers) | plain TCP CPU s (senders + receivers) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let mbps = |runs: &[Run]| median(runs.iter().map(|x| x.mbps(r.total_bytes)).collect());
        let cpu = |runs: &[Run]| {
            format!(
                "{:.2} + {:.2}",
                median(runs.iter().map(|x| x.sender_cpu).collect()),
                median(runs.iter().map(|x| x.receiver_cpu).collect())
            )
        };
        let d = mbps(&r.dglrun);
        let p: Vec<f64> = r.plain.iter().map(|runs| mbps(runs)).collect();
        // Run 1 alone: the partitioner hashes every chunk as it first
        // serves it, as in a job's one transfer after partitioning.
        let first = r.dglrun[0].mbps(r.total_bytes) / r.plain[0][0].mbps(r.total_bytes);
        s.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} | {} | {} |\n",
            r.link.label(),
            r.workers,
            r.total_bytes / MIB,
            d,
            p[0],
            d / p[0],
            first,
            p[1],
            p[2],
            cpu(&r.dglrun),
            cpu(&r.plain[0]),
        ));
    }
    s.push_str("\nEvery run, seconds:\n");
    for r in rows {
        let list = |runs: &[Run]| {
            runs.iter()
                .map(|x| format!("{:.2}", x.secs))
                .collect::<Vec<_>>()
                .join(", ")
        };
        s.push_str(&format!(
            "- {} link, workers {}: dglrun {}",
            r.link.label(),
            r.workers,
            list(&r.dglrun)
        ));
        for (mode, runs) in Plain::ALL.iter().zip(&r.plain) {
            s.push_str(&format!("; {} {}", mode.label(), list(runs)));
        }
        s.push_str(&format!(
            "; the partitioner answered {:.2}s after its start (layout check and file sizes, no hashing), \
             and the first byte of its largest file came {:.3}s after that (connect, manifest, `Fetch`, first chunk hashed)\n",
            r.manifest_secs, r.first_byte_secs
        ));
    }
    s
}

// ---------------------------------------------------------------------------
// Cleanup registry and interrupts

/// What the bench created and must remove: filled before each thing is
/// created, emptied as things are removed, emptied entirely by `cleanup`
/// (drop guard or signal).
mod registry {
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    static INTERRUPTED: AtomicBool = AtomicBool::new(false);

    /// A signal arrived; its thread owns the cleanup from then on.
    pub fn interrupted() -> bool {
        INTERRUPTED.load(Ordering::SeqCst)
    }

    pub fn set_interrupted() {
        INTERRUPTED.store(true, Ordering::SeqCst);
    }

    struct Registry {
        namespaces: Vec<String>,
        pids: Vec<u32>,
        dirs: Vec<PathBuf>,
        /// Kernel settings changed for the run, with their values before.
        settings: Vec<(PathBuf, String)>,
        /// Set by `cleanup`: whatever is tracked later is removed at once.
        closed: bool,
    }

    static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
        namespaces: Vec::new(),
        pids: Vec::new(),
        dirs: Vec::new(),
        settings: Vec::new(),
        closed: false,
    });

    fn lock() -> std::sync::MutexGuard<'static, Registry> {
        REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn track_ns(name: &str) {
        lock().namespaces.push(name.to_string());
    }

    pub fn track_pid(pid: u32) {
        let mut r = lock();
        if r.closed {
            kill(pid, libc::SIGKILL);
        } else {
            r.pids.push(pid);
        }
    }

    pub fn untrack_pid(pid: u32) {
        lock().pids.retain(|p| *p != pid);
    }

    pub fn track_dir(dir: &Path) {
        lock().dirs.push(dir.to_path_buf());
    }

    pub fn track_setting(path: &Path, original: &str) {
        lock()
            .settings
            .push((path.to_path_buf(), original.to_string()));
    }

    pub fn untrack_setting(path: &Path) {
        lock().settings.retain(|(p, _)| p != path);
    }

    fn kill(pid: u32, sig: libc::c_int) {
        if let Ok(pid) = i32::try_from(pid) {
            // SAFETY: kill(2) on a pid this bench started.
            unsafe { libc::kill(pid, sig) };
        }
    }

    /// Kills what still runs in the namespaces (only the bench's processes
    /// can be there) and deletes them; the veth pairs and the bridge go with them.
    pub fn delete_namespaces(names: &[String]) {
        for ns in names {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for p in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if let Ok(pid) = p.parse() {
                        kill(pid, libc::SIGKILL);
                    }
                }
            }
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        lock().namespaces.retain(|n| !names.contains(n));
    }

    /// Deletes the namespaces of earlier benches that were SIGKILLed (no
    /// cleanup code ran): named `dglbs<pid>-...` after a pid that is gone.
    pub fn remove_stale_namespaces() {
        let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
            return;
        };
        let stale: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|name| {
                name.strip_prefix("dglbs")
                    .and_then(|r| r.split_once('-'))
                    .and_then(|(pid, _)| pid.parse::<u32>().ok())
                    .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
            })
            .map(str::to_string)
            .collect();
        if !stale.is_empty() {
            eprintln!(
                "==> deleting namespaces of a killed bench: {}",
                stale.join(" ")
            );
            delete_namespaces(&stale);
        }
    }

    fn alive(pid: u32) -> bool {
        // A zombie (exited, not yet reaped) counts as gone.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| !r.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    }

    /// Stops every tracked process (SIGTERM, SIGKILL after 5 s), deletes the
    /// namespaces and the folders.
    pub fn cleanup() {
        let (pids, namespaces, dirs, settings) = {
            let mut r = lock();
            r.closed = true;
            (
                std::mem::take(&mut r.pids),
                r.namespaces.clone(),
                std::mem::take(&mut r.dirs),
                std::mem::take(&mut r.settings),
            )
        };
        for (path, original) in settings {
            let _ = std::fs::write(path, original);
        }
        for &p in &pids {
            kill(p, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        for &p in &pids {
            if alive(p) {
                kill(p, libc::SIGKILL);
            }
        }
        delete_namespaces(&namespaces);
        for d in dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// SIGINT/SIGTERM/SIGHUP: clean up, then exit 128 + signal.
mod interrupts {
    use anyhow::Result;

    pub fn install() -> Result<()> {
        // SAFETY: plain sigset manipulation on a local set.
        let set = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, s);
            }
            set
        };
        // Blocked in this thread, and so in every thread started after it;
        // only the waiter below receives them. Children inherit the mask:
        // `Testbed::spawn` clears it for the dglrun processes.
        // SAFETY: `set` is initialised.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            anyhow::bail!(
                "cannot block signals: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                let mut sig: libc::c_int = 0;
                // SAFETY: `set` is initialised; `sig` is written by sigwait.
                if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                    return;
                }
                super::registry::set_interrupted();
                eprintln!(
                    "\nbench-shards: signal {sig}: cleaning up (namespaces, processes, files)"
                );
                super::registry::cleanup();
                std::process::exit(128 + sig);
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_fills_every_byte() {
        let mut buf = [0u8; 13];
        Rng(1).fill(&mut buf);
        assert!(buf[8..].iter().any(|&b| b != 0), "{buf:?}");
    }

    /// The synthetic dataset passes dglrun's own checks, and every worker's
    /// file list is what the partitioner's manifest gives that worker.
    #[test]
    fn synthetic_dataset_is_what_dglrun_serves() {
        let ws = std::env::temp_dir().join(format!("bench-shards-test-{}", std::process::id()));
        let shards = generate_dataset(&ws, 3, 3 * MIB + 5).unwrap();
        let layout = dglrun::dataset::Layout::new(&ws, GRAPH);
        let checked = layout.check_all(3);
        let manifest = layout.build_manifest(3);
        std::fs::remove_dir_all(&ws).unwrap();
        assert_eq!(checked.unwrap().referenced.len(), 9);
        let manifest = manifest.unwrap();
        for (i, files) in shards.iter().enumerate() {
            let mut want: Vec<(String, u64)> = manifest
                .shard_files(i as u32)
                .into_iter()
                .map(|f| (f.path, f.size))
                .collect();
            let mut got: Vec<(String, u64)> =
                files.iter().map(|f| (f.rel.clone(), f.size)).collect();
            want.sort();
            got.sort();
            assert_eq!(got, want);
        }
        let total: u64 = shards.iter().flatten().map(|f| f.size).sum();
        assert!(total >= 3 * MIB, "{total}");
    }
}
