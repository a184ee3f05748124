//! One machine's share of the training: preflight checks, the DGL servers,
//! then (once they listen) `torch.distributed.run` with the trainers;
//! supervision until everything ended or a stop was requested.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dgl_api::files;
use dgl_api::names;
use dgl_api::wire::{ExitInfo, OutputLine, Response, Stream, TrainResult, TrainSpec};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::dataset::Layout;
use crate::dgl::dglenv::{self, Machine};
use crate::dgl::preflight;
use crate::procs::Supervisor;

/// The trainer's process name in logs and messages.
pub const TRAINER: &str = "trainer";
/// Name of dglrun's own lines in the output stream.
pub const DGLRUN: &str = "dglrun";

/// Worker-side settings (from the worker's command line).
#[derive(Debug, Clone)]
pub struct TrainContext {
    pub python: String,
    pub workspace: PathBuf,
    pub shm_path: PathBuf,
    /// The worker's configured index, if any; must match the launcher's rank.
    pub index: Option<u32>,
    pub stop_grace: Duration,
    pub server_start_timeout: Duration,
    /// After the local trainers succeeded, how long the servers may take to
    /// exit (they wait for every machine's trainers).
    pub server_exit_timeout: Duration,
    pub omp_threads: Option<u32>,
    /// Time limits of a GraphBolt conversion (partition mode Skip).
    pub graphbolt: crate::dgl::graphbolt::Limits,
}

/// A request to stop, with its reason. `None` while none was made.
pub type StopSignal = watch::Receiver<Option<String>>;

pub(crate) async fn stopped(stop: &mut StopSignal) -> String {
    loop {
        if let Some(r) = stop.borrow_and_update().clone() {
            return r;
        }
        if stop.changed().await.is_err() {
            // Nobody can ask any more: never resolves.
            std::future::pending::<()>().await;
        }
    }
}

/// What torch.distributed.run says about its failed ranks. Its own exit
/// status is 1 for any rank failure; the rank's real status only appears in
/// its log:
/// - at once, when it notices: `[ERROR] failed (exitcode: 3) local_rank: 0 (pid: N)`;
/// - seconds later, as it exits: the "Root Cause" section with `rank` and `exitcode`.
///
/// It also notes whether a rank complained about losing a peer: when one
/// machine's trainer dies, the others fail a moment later with "Connection
/// closed/reset by peer" from gloo, and the launcher should point at the first.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TorchrunReport {
    in_root_cause: bool,
    /// Global rank and exit code from the "Root Cause" section.
    pub rank: Option<i64>,
    pub exitcode: Option<i64>,
    /// The first `[ERROR] failed` line: exit code, local rank, when it was seen.
    pub first_failure: Option<RankFailure>,
    pub lost_peer: bool,
}

/// A rank failure torchrun reported as soon as it noticed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankFailure {
    pub exitcode: i64,
    pub local_rank: Option<i64>,
    /// Unix ms when the line reached dglrun.
    pub seen_at_ms: u64,
}

/// Messages of gloo, tensorpipe and the OS when the other end of a
/// connection went away.
const PEER_LOSS_MARKERS: [&str; 3] = [
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
];

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The integer after `key` in `text` (`key` includes its separator).
fn int_after(text: &str, key: &str) -> Option<i64> {
    let rest = &text[text.find(key)? + key.len()..];
    let end = rest
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(rest.len(), |(i, _)| i);
    rest[..end].parse().ok()
}

impl TorchrunReport {
    pub fn observe(&mut self, line: &str) {
        let t = line.trim();
        if PEER_LOSS_MARKERS.iter().any(|m| t.contains(m)) {
            self.lost_peer = true;
        }
        if self.first_failure.is_none() && t.contains("[ERROR] failed (exitcode: ") {
            if let Some(exitcode) = int_after(t, "failed (exitcode: ") {
                self.first_failure = Some(RankFailure {
                    exitcode,
                    local_rank: int_after(t, "local_rank: "),
                    seen_at_ms: now_ms(),
                });
            }
        }
        if t.starts_with("Root Cause") {
            self.in_root_cause = true;
            return;
        }
        if !self.in_root_cause {
            return;
        }
        let field = |name: &str| -> Option<i64> {
            let rest = t.strip_prefix(name)?.trim_start().strip_prefix(':')?;
            rest.split_whitespace().next()?.parse().ok()
        };
        if self.rank.is_none() {
            self.rank = field("rank");
        }
        if self.exitcode.is_none() {
            self.exitcode = field("exitcode");
        }
    }

    /// Rewrites a worker's result with what torchrun said. A trainer that
    /// failed on its own before a stop arrived (torchrun takes seconds to
    /// exit after a rank died) is a failure, not "stopped": otherwise the
    /// root cause of a job's failure could be reported as a mere stop.
    pub fn explain(&self, mut result: TrainResult) -> TrainResult {
        let trainer_failed = result.failed_process.as_deref() == Some(TRAINER);
        let failed_before_stop = result.stopped && self.first_failure.is_some();
        if !(trainer_failed || failed_before_stop) {
            return result;
        }
        let (who, code) = match (self.exitcode, &self.first_failure) {
            (Some(code), _) => (self.rank.map(|r| format!("rank {r}")), code),
            (None, Some(f)) => (f.local_rank.map(|r| format!("local rank {r}")), f.exitcode),
            (None, None) => return result,
        };
        let who = who.unwrap_or_else(|| "a rank".into());
        let rank_exit = if code < 0 {
            ExitInfo::signal(i32::try_from(-code).unwrap_or(0))
        } else {
            ExitInfo::code(i32::try_from(code).unwrap_or(1))
        };
        result.message = if failed_before_stop {
            format!(
                "{who} of the trainer exited with {rank_exit} (before the processes were {})",
                result.message
            )
        } else {
            format!(
                "{who} of the trainer exited with {rank_exit} (torch.distributed.run: {})",
                result.exit
            )
        };
        if !rank_exit.success() {
            result.exit = rank_exit;
        }
        result.failed_process = Some(TRAINER.into());
        result.stopped = false;
        result.lost_peer = self.lost_peer;
        if let Some(f) = &self.first_failure {
            result.failed_at_ms = Some(f.seen_at_ms);
        }
        result
    }
}

/// Copies process output to this worker's stdout and to the launcher.
async fn pump(
    mut rx: mpsc::Receiver<OutputLine>,
    events: mpsc::Sender<Response>,
    report: Arc<Mutex<TorchrunReport>>,
) {
    while let Some(l) = rx.recv().await {
        if l.process == TRAINER && l.stream == Stream::Stderr {
            report
                .lock()
                .expect("no panics under this lock")
                .observe(&l.line);
        }
        println!("[{}] {}", l.process, l.line);
        // The launcher may be gone; the local log still has the line.
        let _ = events.send(Response::Output(l)).await;
    }
}

async fn say(events: &mpsc::Sender<Response>, msg: String) {
    tracing::info!("{msg}");
    let _ = events
        .send(Response::Output(OutputLine {
            process: DGLRUN.into(),
            stream: Stream::Stdout,
            line: msg,
        }))
        .await;
}

fn failed(process: &str, exit: ExitInfo, message: String) -> TrainResult {
    TrainResult {
        exit,
        failed_process: Some(process.to_string()),
        message,
        stopped: false,
        failed_at_ms: Some(now_ms()),
        lost_peer: false,
    }
}

fn stopped_result(reason: String) -> TrainResult {
    TrainResult {
        exit: ExitInfo::signal(libc::SIGTERM),
        failed_process: None,
        message: format!("stopped: {reason}"),
        stopped: true,
        failed_at_ms: None,
        lost_peer: false,
    }
}

/// Runs the training on this machine and reports how it ended. Never leaves
/// a process behind.
pub async fn run(
    ctx: &TrainContext,
    spec: TrainSpec,
    events: mpsc::Sender<Response>,
    mut stop: StopSignal,
) -> TrainResult {
    let (sink_tx, sink_rx) = mpsc::channel(1024);
    let report = Arc::new(Mutex::new(TorchrunReport::default()));
    let pump = tokio::spawn(pump(sink_rx, events.clone(), report.clone()));
    let mut sup = Supervisor::new(sink_tx);
    let result = supervise(ctx, &spec, &events, &mut sup, &mut stop).await;
    // Whatever still runs (servers after a trainer failure, everything on a
    // stop) is stopped here, on every path.
    for e in sup.stop_all(ctx.stop_grace).await {
        let _ = events.send(Response::Exited(e)).await;
    }
    drop(sup);
    let _ = tokio::time::timeout(Duration::from_secs(5), pump).await;
    let report = report.lock().expect("no panics under this lock").clone();
    report.explain(result)
}

/// A step's value, or how the training ended early (failed or stopped).
type Step<T> = Result<T, TrainResult>;

async fn supervise(
    ctx: &TrainContext,
    spec: &TrainSpec,
    events: &mpsc::Sender<Response>,
    sup: &mut Supervisor,
    stop: &mut StopSignal,
) -> TrainResult {
    let steps = async {
        // Where am I in the job?
        let place = locate(ctx, spec)?;
        let ip_config_path = ctx.workspace.join(names::IP_CONFIG);
        let part_config_path = Layout::new(&ctx.workspace, &spec.graph_name).json_path();
        let paths = dglenv::Paths {
            workspace: &ctx.workspace,
            ip_config: &ip_config_path,
            part_config: &part_config_path,
            num_machines: place.num_machines,
        };
        let (program, script) = dglenv::user_command(spec, &ctx.python, paths)
            .map_err(|e| preflight_failed(e.to_string()))?;
        // Preflight: everything that would otherwise fail later and obscurely.
        let user = (program.as_str(), script.as_slice());
        let ifname = preflight_checks(ctx, spec, &place, user, events, stop).await?;
        if let Err(e) = std::fs::write(&ip_config_path, &spec.ip_config) {
            return Err(preflight_failed(format!(
                "cannot write {}: {e}",
                ip_config_path.display()
            )));
        }
        let trainer_threads = ctx.omp_threads.unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
            (cpus / spec.num_trainers.max(1)).max(1)
        });
        let machine = Machine {
            program: &program,
            script: &script,
            ip_config_path: &ip_config_path,
            part_config_path: &part_config_path,
            num_machines: place.num_machines,
            master_addr: place.master_addr,
            ifname: Some(&ifname),
            trainer_threads,
        };
        // DGL servers first; trainers only once every local server listens.
        start_servers(ctx, spec, &machine, &place, events, sup, stop).await?;
        run_trainers(ctx, spec, &machine, events, sup, stop).await
    };
    steps.await.unwrap_or_else(|ended| ended)
}

/// This machine in the job, from the launcher's ip_config and rank.
struct Place {
    rank: u32,
    my_ip: IpAddr,
    /// The first DGL server's port.
    dgl_port: u16,
    num_machines: u32,
    /// Machine 0's IP: torch.distributed's master.
    master_addr: IpAddr,
}

fn preflight_failed(message: String) -> TrainResult {
    failed("preflight", ExitInfo::code(1), message)
}

fn locate(ctx: &TrainContext, spec: &TrainSpec) -> Step<Place> {
    let machines = match files::parse_ip_config("ip_config", &spec.ip_config) {
        Ok(m) if !m.is_empty() => m,
        Ok(_) => {
            return Err(preflight_failed(
                "the launcher sent an empty ip_config".into(),
            ))
        }
        Err(e) => return Err(preflight_failed(e.to_string())),
    };
    let rank = spec.machine_rank;
    if let Some(index) = ctx.index {
        if index != rank {
            return Err(preflight_failed(format!(
                "this worker has index {index} but the launcher started it as machine {rank}; the hostfile order and the worker indexes disagree"
            )));
        }
    }
    let Some(&(my_ip, dgl_port)) = machines.get(rank as usize) else {
        return Err(preflight_failed(format!(
            "machine {rank} is not in ip_config ({} lines)",
            machines.len()
        )));
    };
    Ok(Place {
        rank,
        my_ip,
        dgl_port,
        num_machines: machines.len() as u32,
        master_addr: machines[0].0,
    })
}

/// The checks before DGL starts: interface, entry point, shard, shared
/// memory, ports, DGL itself (with the user's interpreter). Gives the
/// interface's name.
async fn preflight_checks(
    ctx: &TrainContext,
    spec: &TrainSpec,
    place: &Place,
    (program, script): (&str, &[String]),
    events: &mpsc::Sender<Response>,
    stop: &mut StopSignal,
) -> Step<String> {
    let pre = |e: &dyn std::fmt::Display| preflight_failed(e.to_string());
    let Place { rank, my_ip, .. } = *place;
    let ifname = preflight::interface_of(my_ip).map_err(|e| pre(&e))?;
    // The script, unless the command runs a module (`python -m pkg`).
    if let Some(script) = script.first().filter(|s| *s != "-m") {
        preflight::check_entry_point(script).map_err(|e| pre(&e))?;
    }
    let layout = Layout::new(&ctx.workspace, &spec.graph_name).with_graphbolt(spec.use_graphbolt);
    layout
        .check_shard(rank, Some(place.num_machines))
        .map_err(|e| pre(&e))?;
    let need = layout
        .shard_bytes(rank)
        .map_err(|e| preflight_failed(format!("cannot size partition {rank}: {e}")))?;
    let free = preflight::check_shm(&ctx.shm_path, need).map_err(|e| pre(&e))?;
    say(
        events,
        format!(
            "shared memory {}: {free} bytes free, partition {rank} needs {need}",
            ctx.shm_path.display()
        ),
    )
    .await;
    for i in 0..spec.num_servers {
        let Some(port) = place.dgl_port.checked_add(i as u16) else {
            return Err(preflight_failed(format!(
                "DGL server port {}+{i} overflows",
                place.dgl_port
            )));
        };
        preflight::check_port_free(my_ip, port, &format!("DGL server {i}")).map_err(|e| pre(&e))?;
    }
    if rank == 0 {
        preflight::check_port_free(my_ip, spec.master_port, "torch.distributed master")
            .map_err(|e| pre(&e))?;
    }
    let version = tokio::select! {
        v = preflight::dgl_version(program) => v,
        r = stopped(stop) => return Err(stopped_result(r)),
    };
    let v = version.map_err(|e| pre(&e))?;
    say(
        events,
        format!(
            "DGL {v} ({program}), machine {rank} of {} at {my_ip} on {ifname}",
            place.num_machines
        ),
    )
    .await;
    Ok(ifname)
}

/// Starts the DGL servers and waits until every one listens.
async fn start_servers(
    ctx: &TrainContext,
    spec: &TrainSpec,
    machine: &Machine<'_>,
    place: &Place,
    events: &mpsc::Sender<Response>,
    sup: &mut Supervisor,
    stop: &mut StopSignal,
) -> Step<()> {
    for s in dglenv::server_specs(spec, machine) {
        if let Err(e) = sup.spawn(&s) {
            return Err(failed(&s.name, ExitInfo::code(1), e.to_string()));
        }
    }
    let my_ip = place.my_ip;
    let ports: Vec<u16> = (0..spec.num_servers)
        .map(|i| place.dgl_port + i as u16)
        .collect();
    let deadline = crate::clock::after(ctx.server_start_timeout);
    loop {
        if ports.iter().all(|&p| is_listening(my_ip, p)) {
            break;
        }
        tokio::select! {
            e = sup.next_exit() => {
                let Some(e) = e else { break };
                let _ = events.send(Response::Exited(e.clone())).await;
                return Err(failed(&e.process, failure_exit(e.exit), format!(
                    "{} exited with {} before listening on its port", e.process, e.exit
                )));
            }
            r = stopped(stop) => return Err(stopped_result(r)),
            _ = tokio::time::sleep_until(deadline) => {
                return Err(failed("server-0", ExitInfo::code(1), format!(
                    "the DGL servers did not listen on {my_ip} ports {ports:?} within {:?}",
                    ctx.server_start_timeout
                )));
            }
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
    say(
        events,
        format!("DGL servers listening on {my_ip} ports {ports:?}; starting the trainers"),
    )
    .await;
    Ok(())
}

/// Starts the trainers (`torch.distributed.run`) and follows every process
/// until all exited: success only if every one exited 0.
async fn run_trainers(
    ctx: &TrainContext,
    spec: &TrainSpec,
    machine: &Machine<'_>,
    events: &mpsc::Sender<Response>,
    sup: &mut Supervisor,
    stop: &mut StopSignal,
) -> Step<TrainResult> {
    let trainer = dglenv::trainer_spec(spec, machine);
    if let Err(e) = sup.spawn(&trainer) {
        return Err(failed(TRAINER, ExitInfo::code(1), e.to_string()));
    }
    let mut server_deadline: Option<Instant> = None;
    loop {
        let servers_late = async {
            match server_deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            e = sup.next_exit() => {
                let Some(e) = e else { break };
                let _ = events.send(Response::Exited(e.clone())).await;
                if !e.exit.success() {
                    return Err(failed(&e.process, failure_exit(e.exit), format!("{} failed with {}", e.process, e.exit)));
                }
                if e.process == TRAINER {
                    // DGL servers exit once every machine's trainers are done.
                    server_deadline = Some(crate::clock::after(ctx.server_exit_timeout));
                }
                if sup.running().is_empty() {
                    break;
                }
            }
            r = stopped(stop) => return Err(stopped_result(r)),
            _ = servers_late => {
                // The training itself succeeded; servers that linger are
                // stopped by the caller, and that is not a failure.
                say(events, format!(
                    "the DGL servers did not exit within {:?} after the trainers; stopping them",
                    ctx.server_exit_timeout
                )).await;
                break;
            }
        }
    }
    Ok(TrainResult {
        exit: ExitInfo::SUCCESS,
        failed_process: None,
        message: "training finished; every process exited 0".into(),
        stopped: false,
        failed_at_ms: None,
        lost_peer: false,
    })
}

/// A failure must never read as success: a process that "exited 0" where
/// that is an error (a server before listening) is reported as code 1.
fn failure_exit(e: ExitInfo) -> ExitInfo {
    if e.success() {
        ExitInfo::code(1)
    } else {
        e
    }
}

/// Whether something listens on `ip:port` in this network namespace, read
/// from /proc/net/tcp{,6}. Connecting to find out is not an option: DGL's
/// socket receiver would accept the probe as one of its clients.
fn is_listening(ip: IpAddr, port: u16) -> bool {
    let table = match ip {
        IpAddr::V4(_) => "/proc/net/tcp",
        IpAddr::V6(_) => "/proc/net/tcp6",
    };
    std::fs::read_to_string(table)
        .map(|t| listening_in(&t, ip, port))
        .unwrap_or(false)
}

/// Parses a /proc/net/tcp table: a LISTEN (state 0A) socket bound to `ip`
/// or to the unspecified address on `port`.
fn listening_in(table: &str, ip: IpAddr, port: u16) -> bool {
    table.lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || f[3] != "0A" {
            return false;
        }
        let Some((addr, p)) = f[1].split_once(':') else {
            return false;
        };
        if u16::from_str_radix(p, 16).ok() != Some(port) {
            return false;
        }
        match parse_proc_addr(addr) {
            Some(a) => a == ip || a.is_unspecified(),
            None => false,
        }
    })
}

/// The kernel prints addresses as 32-bit words in host byte order.
fn parse_proc_addr(hex: &str) -> Option<IpAddr> {
    let word = |s: &str| u32::from_str_radix(s, 16).ok().map(u32::to_ne_bytes);
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(hex)?))),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(&hex[i * 8..i * 8 + 8])?);
            }
            let v6 = Ipv6Addr::from(b);
            Some(match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchrun_root_cause_is_parsed() {
        let text = "\
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-01_10:00:00
  host      : w1
  rank      : 1 (local_rank: 0)
  exitcode  : 3 (pid: 4242)
  error_file: <N/A>";
        let mut r = TorchrunReport::default();
        for l in text.lines() {
            r.observe(l);
        }
        assert_eq!((r.rank, r.exitcode), (Some(1), Some(3)));
        assert_eq!(r.first_failure, None);
        assert!(!r.lost_peer);
        r.observe("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.213.0.14]:49387");
        assert!(r.lost_peer);
    }

    #[test]
    fn a_rank_failure_seen_before_a_stop_is_a_failure() {
        let mut r = TorchrunReport::default();
        r.observe("[2026-11-22 13:25:50,806] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 3) local_rank: 0 (pid: 29230) of binary: /venv/bin/python");
        let f = r.first_failure.clone().unwrap();
        assert_eq!((f.exitcode, f.local_rank), (3, Some(0)));
        let got = r.explain(stopped_result("launcher: worker-0 failed".into()));
        assert!(!got.stopped);
        assert_eq!(got.exit, ExitInfo::code(3));
        assert_eq!(got.failed_process.as_deref(), Some(TRAINER));
        assert!(
            got.message
                .contains("local rank 0 of the trainer exited with exit code 3"),
            "{}",
            got.message
        );
        assert_eq!(got.failed_at_ms, Some(f.seen_at_ms));
        // A plain stop without any failure stays a stop.
        let plain = TorchrunReport::default().explain(stopped_result("x".into()));
        assert!(plain.stopped);
        // Signals show as such.
        let mut k = TorchrunReport::default();
        k.observe("[ERROR] failed (exitcode: -9) local_rank: 1 (pid: 1)");
        let got = k.explain(failed(TRAINER, ExitInfo::code(1), "trainer failed".into()));
        assert_eq!(got.exit, ExitInfo::signal(9));
    }

    #[test]
    fn proc_net_tcp_listen_sockets() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:7562 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0900D50A:7563 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   2: 0900D50A:7564 0A00D50A:1234 01 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0";
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let ip: IpAddr = "10.213.0.9".parse().unwrap();
        assert!(listening_in(table, lo, 0x7562));
        assert!(listening_in(table, ip, 0x7563));
        assert!(!listening_in(table, ip, 0x7562));
        assert!(
            !listening_in(table, ip, 0x7564),
            "established is not listening"
        );
    }

    #[test]
    fn a_real_listener_is_seen() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(is_listening("127.0.0.1".parse().unwrap(), port));
        drop(l);
        assert!(!is_listening("127.0.0.1".parse().unwrap(), port));
    }
}
