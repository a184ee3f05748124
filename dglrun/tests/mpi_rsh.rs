//! Partition mode DistParMETIS's launch path across three "machines": three
//! network namespaces (each process also with its own host name) on one
//! bridge. `dglrun worker` runs in namespaces a and b; `mpirun` runs in c
//! with `dglrun rsh` as its remote agent (the arguments the launcher uses,
//! `dglrun::mpi::rsh::mpirun_args`), so MPI's daemons start through the workers'
//! authenticated agents, never ssh. The ranks are `dgl-partition selftest`
//! (every collective, each rank checking every element it receives).
//!
//! - `ranks_exchange_across_two_workers`: both ranks pass, each in its own
//!   worker's namespace, with chunked rounds over the network; nothing is
//!   left behind; a worker of another partition mode, a wrong token and a
//!   program other than MPI's daemon are refused.
//! - `a_lost_mpirun_or_a_stopped_worker_ends_the_daemons`: nothing is left
//!   when mpirun and its rsh agents are killed; when only one `dglrun rsh`
//!   dies (mpirun frozen, so MPI itself notices nothing), its worker stops
//!   the daemon and rank; SIGTERM to a worker stops its daemon and the
//!   worker exits 143.
//!
//! Needs root, OpenMPI (`openmpi-bin`) and `dgl-partition` built with MPI
//! next to dglrun (`cargo build -p dgl-partition --features mpi`; the
//! project's test command builds the workspace with that feature), or its
//! path in DGL_PARTITION_BIN. `DGLRUN_TEST_KEEP_LOGS=1` keeps every log.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dglrun::mpi::rsh::{mpirun_args, MpirunPlan};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

mod common;
use common::netns::{kill_all, log_tails, netns_of, wait_timeout, Hosts, Isolation};

static SERIAL: Mutex<()> = Mutex::new(());

const DGLRUN: &str = env!("CARGO_BIN_EXE_dglrun");
const PORT: &str = "30149";

fn dgl_partition() -> PathBuf {
    let p = std::env::var_os("DGL_PARTITION_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(DGLRUN).with_file_name("dgl-partition"));
    assert!(
        p.exists(),
        "{} is missing: build it with `cargo build -p dgl-partition --features mpi` (or set DGL_PARTITION_BIN)",
        p.display()
    );
    p
}

/// Three namespaces on a bridge (in c): a = .2, b = .3, c = .1.
struct Net {
    hosts: Hosts,
    ips: [String; 3],
    cidr: String,
    dir: tempfile::TempDir,
    token: PathBuf,
    children: Vec<Child>,
}

impl Net {
    fn create(tag: &str) -> Net {
        let id = format!("{}{tag}", std::process::id() % 100_000);
        let ips = ["10.77.0.2", "10.77.0.3", "10.77.0.1"];
        // Interface names are limited to 15 characters.
        let hosts = Hosts::bridged(&format!("dglmpi-{id}"), &format!("vm{id}"), &ips, 24);
        // DGLRUN_TEST_KEEP_LOGS=1 keeps the logs for a look.
        let keep = std::env::var_os("DGLRUN_TEST_KEEP_LOGS").is_some();
        let dir = tempfile::Builder::new()
            .prefix("dglrun-mpi-")
            .disable_cleanup(keep)
            .tempdir()
            .unwrap();
        if keep {
            eprintln!("keeping logs in {}", dir.path().display());
        }
        let token = dir.path().join("token");
        std::fs::write(&token, format!("mpi-token-{}\n", std::process::id())).unwrap();
        for x in ["a", "b", "c"] {
            std::fs::create_dir_all(dir.path().join(format!("tmp-{x}"))).unwrap();
        }
        Net {
            hosts,
            ips: ips.map(String::from),
            cidr: "10.77.0.0/24".into(),
            dir,
            token,
            children: Vec::new(),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// `program` on machine `i` (0 = a, 1 = b, 2 = c): in its network
    /// namespace, with its own host name and TMPDIR (OpenMPI keeps its
    /// session files there), marked so that leftovers can be found.
    fn command(&self, i: usize, program: &str, args: &[String]) -> Command {
        let x = ["a", "b", "c"][i];
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("TMPDIR", self.path(&format!("tmp-{x}")))
            .env("DGL_OPERATOR_TOKEN_FILE", &self.token)
            .env("DGLRUN_AGENT_PORT", PORT)
            .env("DGL_OPERATOR_CONFIG_DIR", self.dir.path())
            .stdin(Stdio::null());
        let isolation = Isolation {
            hostname: Some(format!("mpi-{x}")),
            private_shm: false,
        };
        self.hosts.enter(&mut cmd, i, isolation);
        cmd
    }

    /// Starts a program with its output in `<dir>/<log>`.
    fn spawn(&mut self, i: usize, program: &str, args: &[String], log: &str) -> usize {
        let out = File::create(self.path(log)).unwrap();
        let child = self
            .command(i, program, args)
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap();
        self.children.push(child);
        self.children.len() - 1
    }

    /// A `dglrun worker` in namespace `i` (partition mode `mode`) at `port`.
    fn worker(&mut self, i: usize, mode: &str, port: &str) -> usize {
        let args: Vec<String> = [
            "worker",
            "--listen",
            &self.ips[i],
            "--agent-port",
            port,
            "--index",
            &i.to_string(),
            "--partition-mode",
            mode,
            "--stop-grace",
            "3",
            "--workspace",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([self.path(&format!("ws{i}")).display().to_string()])
        .collect();
        let idx = self.spawn(i, DGLRUN, &args, &format!("worker-{i}-{port}.log"));
        let addr = format!("{}:{port}", self.ips[i]);
        let end = Instant::now() + Duration::from_secs(20);
        while !self
            .output(
                2,
                DGLRUN,
                &["probe", "--addr", &addr, "--token-file"],
                &[&self.token.display().to_string()],
            )
            .status
            .success()
        {
            assert!(
                Instant::now() < end,
                "worker {i} never answered{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        idx
    }

    fn output(&self, i: usize, program: &str, args: &[&str], more: &[&str]) -> Output {
        let all: Vec<String> = args.iter().chain(more).map(|s| s.to_string()).collect();
        self.command(i, program, &all).output().unwrap()
    }

    /// mpirun in namespace c running `program` on the two workers.
    fn mpirun(&mut self, program: Vec<String>, log: &str) -> usize {
        let plan = MpirunPlan {
            hosts: vec![self.ips[0].parse().unwrap(), self.ips[1].parse().unwrap()],
            dglrun: DGLRUN.into(),
            network: Some(self.cidr.clone()),
            workdir: self.dir.path().to_path_buf(),
            forward_env: vec!["DGLRUN_TEST_MARKER".into()],
            program,
        };
        self.spawn(2, "mpirun", &mpirun_args(&plan), log)
    }

    fn wait(&mut self, idx: usize, timeout: Duration) -> Option<ExitStatus> {
        wait_timeout(&mut self.children[idx], timeout)
    }

    /// Marked processes whose command line contains `needle`.
    fn find(&self, needle: &str) -> Vec<i32> {
        self.marked_except(&[])
            .iter()
            .filter(|p| p.contains(needle))
            .filter_map(|p| p.split_whitespace().next()?.parse().ok())
            .collect()
    }

    fn pid(&self, idx: usize) -> i32 {
        self.children[idx].id() as i32
    }

    /// Live processes carrying the marker, except the children listed.
    fn marked_except(&self, keep: &[usize]) -> Vec<String> {
        let keep: Vec<i32> = keep.iter().map(|&i| self.pid(i)).collect();
        self.hosts.marked_except(&keep)
    }

    /// Waits until only the `keep` children carry the marker.
    fn wait_for_no_leftovers(&self, keep: &[usize], timeout: Duration) {
        let end = Instant::now() + timeout;
        loop {
            let left = self.marked_except(keep);
            if left.is_empty() {
                return;
            }
            assert!(
                Instant::now() < end,
                "left behind after {timeout:?}: {left:?}{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn read(&self, log: &str) -> String {
        std::fs::read_to_string(self.path(log)).unwrap_or_default()
    }

    fn logs(&self) -> String {
        log_tails(self.dir.path(), 40)
    }

    fn netns_of(&self, idx: usize) -> String {
        netns_of(self.children[idx].id())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Then `hosts` kills whatever is left and deletes the namespaces.
        kill_all(&mut self.children);
    }
}

#[test]
fn ranks_exchange_across_two_workers() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bin = dgl_partition();
    let mut net = Net::create("x");
    let wa = net.worker(0, "DistParMETIS", PORT);
    let wb = net.worker(1, "DistParMETIS", PORT);

    let program = [bin.display().to_string()]
        .into_iter()
        .chain(["selftest", "--scale", "2000", "--max-count", "1000"].map(String::from))
        .collect();
    let m = net.mpirun(program, "mpirun.log");
    let status = net.wait(m, Duration::from_secs(120));
    let log = net.read("mpirun.log");
    assert!(
        !log.contains("built without mpi"),
        "{} was built without MPI: build it with `cargo build -p dgl-partition --features mpi`",
        bin.display()
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "mpirun: {status:?}{}",
        net.logs()
    );
    let mut ok: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("selftest ok: "))
        .collect();
    ok.sort();
    assert_eq!(ok.len(), 2, "{log}");
    for (rank, worker) in [(0, wa), (1, wb)] {
        let l = ok[rank];
        assert!(
            l.starts_with(&format!("selftest ok: rank {rank} of 2: ")) && l.contains("(mpi, "),
            "{l}"
        );
        // Rank i ran in worker i's namespace, started through its agent.
        assert!(
            l.contains(&net.netns_of(worker)),
            "rank {rank} is not in worker {rank}'s namespace: {l}"
        );
        let words: Vec<&str> = l.split_whitespace().collect();
        let transfers: u64 = words[words.iter().position(|w| *w == "transfers").unwrap() - 1]
            .parse()
            .unwrap();
        assert!(transfers > 20, "the count limit should force rounds: {l}");
    }
    for i in 0..2 {
        let w = net.read(&format!("worker-{i}-{PORT}.log"));
        assert!(
            w.contains("started for dglrun rsh") && w.contains("process=orted"),
            "{w}"
        );
    }
    net.wait_for_no_leftovers(&[wa, wb], Duration::from_secs(15));
    assert!(
        net.wait(wa, Duration::ZERO).is_none() && net.wait(wb, Duration::ZERO).is_none(),
        "the workers keep serving"
    );

    // A worker of another partition mode never starts the daemon.
    let wd = net.worker(0, "DGL-API", "30150");
    let out = net.output(
        2,
        DGLRUN,
        &["rsh", "--agent-port", "30150", &net.ips[0], "orted"],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(255), "{err}");
    assert!(err.contains("only in partition mode DistParMETIS"), "{err}");
    // dglrun rsh is no general remote shell.
    let out = net.output(2, DGLRUN, &["rsh", &net.ips[0], "sh", "-c", "id"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(255), "{err}");
    assert!(err.contains("only starts MPI's daemon"), "{err}");
    // Without the job's token nothing runs.
    std::fs::write(net.path("wrong"), "other").unwrap();
    let wrong = net.path("wrong").display().to_string();
    let out = net.output(
        2,
        DGLRUN,
        &["rsh", "--token-file", &wrong, &net.ips[1], "orted"],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(255), "{err}");
    assert!(err.contains("token"), "{err}");
    net.wait_for_no_leftovers(&[wa, wb, wd], Duration::from_secs(5));
}

fn signal(pid: i32, sig: Signal) {
    nix::sys::signal::kill(Pid::from_raw(pid), sig).unwrap();
}

fn killpg(pgid: i32, sig: Signal) {
    nix::sys::signal::killpg(Pid::from_raw(pgid), sig).unwrap();
}

/// Starts `sleep` as the rank program and waits until both ranks run.
fn start_sleeping_ranks(net: &mut Net, log: &str) -> usize {
    let m = net.mpirun(vec!["sleep".into(), "300".into()], log);
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let marked = net.marked_except(&[]);
        let sleeps = marked.iter().filter(|p| p.contains("(sleep 300")).count();
        let orteds = marked.iter().filter(|p| p.contains("(orted")).count();
        if sleeps == 2 && orteds == 2 {
            return m;
        }
        assert!(
            net.wait(m, Duration::ZERO).is_none(),
            "mpirun ended early{}",
            net.logs()
        );
        assert!(
            Instant::now() < end,
            "the ranks never started: {marked:?}{}",
            net.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_lost_mpirun_or_a_stopped_worker_ends_the_daemons() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut net = Net::create("k");
    let wa = net.worker(0, "DistParMETIS", PORT);
    let wb = net.worker(1, "DistParMETIS", PORT);

    // mpirun and its dglrun rsh agents die at once: the daemons lose
    // their link to mpirun and end, and so do the ranks under them.
    let m = start_sleeping_ranks(&mut net, "mpirun-1.log");
    killpg(net.pid(m), Signal::SIGKILL);
    net.wait(m, Duration::from_secs(5))
        .expect("mpirun was killed");
    net.wait_for_no_leftovers(&[wa, wb], Duration::from_secs(30));

    // Only the dglrun rsh agent of worker a dies while mpirun is frozen
    // (its daemons' links stay open): worker a alone must stop its daemon
    // and rank; worker b's keep running.
    let m = start_sleeping_ranks(&mut net, "mpirun-2.log");
    signal(net.pid(m), Signal::SIGSTOP);
    let agent = net.find(&format!("rsh {} ", net.ips[0]));
    assert_eq!(agent.len(), 1, "{:?}", net.marked_except(&[]));
    signal(agent[0], Signal::SIGKILL);
    let end = Instant::now() + Duration::from_secs(20);
    while net.find("(orted").len() != 1 || net.find("(sleep 300").len() != 1 {
        assert!(
            Instant::now() < end,
            "worker a kept its daemon: {:?}{}",
            net.marked_except(&[]),
            net.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let w = net.read(&format!("worker-0-{PORT}.log"));
    assert!(w.contains("dglrun rsh disconnected"), "{w}");
    killpg(net.pid(m), Signal::SIGKILL);
    net.wait(m, Duration::from_secs(5))
        .expect("mpirun was killed");
    net.wait_for_no_leftovers(&[wa, wb], Duration::from_secs(30));
    assert!(
        net.wait(wa, Duration::ZERO).is_none() && net.wait(wb, Duration::ZERO).is_none(),
        "the workers keep serving{}",
        net.logs()
    );

    // The workers take the next mpirun; SIGTERM to worker a stops its
    // daemon (and so the job): the worker exits 143, nothing remains.
    let m = start_sleeping_ranks(&mut net, "mpirun-3.log");
    signal(net.pid(wa), Signal::SIGTERM);
    let status = net.wait(wa, Duration::from_secs(30));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(143),
        "worker a: {status:?}{}",
        net.logs()
    );
    let status = net.wait(m, Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| !s.success()),
        "mpirun must fail when a daemon is stopped: {status:?}{}",
        net.logs()
    );
    net.wait_for_no_leftovers(&[wb], Duration::from_secs(30));
}
