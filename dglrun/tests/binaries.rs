//! The `dglrun` binary end to end on loopback, without DGL: the roles talk
//! over the real channel, and every failure before training ends the job
//! with a message that names the culprit.
//!
//! - the partition check names what the partition script failed to write;
//! - DistParMETIS: no partitioner; the launcher's mpirun (a stand-in) gets
//!   the rank program and the rsh agent's settings, a failed rank is named,
//!   the marker of `dglrun probe --partitioned` appears only on success;
//! - Skip mode names the missing partition file of the worker concerned;
//! - shards flow partitioner → workers (each gets the JSON and its own part),
//!   then the worker's preflight refuses an interpreter without DGL;
//! - a launcher with the wrong token is refused at once;
//! - the readiness probe answers only for a live agent and the right token;
//! - with a fake DGL interpreter (below): a whole training succeeds with
//!   prefixed progress; a SIGKILLed launcher makes the workers stop every
//!   process, orphans in other sessions included; SIGTERM to one worker
//!   fails the job, names that worker and stops the other.
//!
//! The fake partition script needs `python3` on PATH.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::free_port;

const DGLRUN: &str = env!("CARGO_BIN_EXE_dglrun");

/// Writes the layout partition_graph would write, with knobs for breaking it.
const FAKE_PARTITION_PY: &str = r#"
import argparse, json, os, sys
p = argparse.ArgumentParser()
p.add_argument("--graph_name"); p.add_argument("--workspace")
p.add_argument("--rel_data_path"); p.add_argument("--num_parts", type=int)
p.add_argument("--balance_train", action="store_true")
p.add_argument("--balance_edges", action="store_true")
p.add_argument("--write_parts", type=int, default=None)
p.add_argument("--skip_file", default=None)
a = p.parse_args()
out = os.path.join(a.workspace, a.rel_data_path)
n = a.write_parts if a.write_parts is not None else a.num_parts
meta = {"graph_name": a.graph_name, "num_parts": n}
for i in range(n):
    d = os.path.join(out, f"part{i}")
    os.makedirs(d, exist_ok=True)
    meta[f"part-{i}"] = {k: f"part{i}/{f}" for k, f in
        [("node_feats", "node_feat.dgl"), ("edge_feats", "edge_feat.dgl"), ("part_graph", "graph.dgl")]}
    for f in ["node_feat.dgl", "edge_feat.dgl", "graph.dgl"]:
        rel = f"part{i}/{f}"
        if rel != a.skip_file:
            with open(os.path.join(out, rel), "wb") as fh:
                fh.write(os.urandom(10000 + i))
with open(os.path.join(out, a.graph_name + ".json"), "w") as fh:
    json.dump(meta, fh)
print("fake partitioning done", flush=True)
"#;

/// An interpreter that has no DGL: what the worker's preflight must catch.
const PYTHON_WITHOUT_DGL: &str =
    "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'dgl'\" >&2\nexit 1\n";

/// Kills the processes it started when dropped (also on test failure).
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Procs {
    fn spawn(&mut self, args: &[String], log: &Path) -> usize {
        let out = std::fs::File::create(log).unwrap();
        let child = Command::new(DGLRUN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        self.0.push(child);
        self.0.len() - 1
    }

    fn wait(&mut self, i: usize, timeout: Duration) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(s) = self.0[i].try_wait().unwrap() {
                return Some(s);
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "loopback-token").unwrap();
        std::fs::write(dir.path().join("other-token"), "another-job").unwrap();
        std::fs::write(dir.path().join("partition.py"), FAKE_PARTITION_PY).unwrap();
        let nodgl = dir.path().join("python-without-dgl");
        std::fs::write(&nodgl, PYTHON_WITHOUT_DGL).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&nodgl, std::fs::Permissions::from_mode(0o755)).unwrap();
        Env { dir }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn s(&self, rel: &str) -> String {
        self.p(rel).display().to_string()
    }

    fn partition(&self, workspace: &str, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = [
            "partition",
            "--python",
            "python3",
            "--token-file",
            &self.s("token"),
            "--workspace",
            &self.s(workspace),
            "--graph-name",
            "g",
            "--partition-entry-point",
            &self.s("partition.py"),
            "--num-partitions",
            "2",
            "--balance-train",
        ]
        .map(String::from)
        .to_vec();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    fn worker(&self, i: usize, port: u16) -> Vec<String> {
        self.worker_on(i, port, "127.0.0.1", &self.s("python-without-dgl"))
    }

    fn worker_on(&self, i: usize, port: u16, ip: &str, python: &str) -> Vec<String> {
        [
            "worker",
            "--python",
            python,
            "--token-file",
            &self.s("token"),
            "--workspace",
            &self.s(&format!("w{i}")),
            "--listen",
            ip,
            "--agent-port",
            &port.to_string(),
            "--index",
            &i.to_string(),
        ]
        .map(String::from)
        .to_vec()
    }

    /// The operator's hostfile format, which carries each agent's port.
    fn hostfile(&self, ports: [u16; 2]) -> String {
        let f = self.p("hostfile");
        std::fs::write(
            &f,
            format!(
                "127.0.0.1 {} job-worker-0 slots=1\n127.0.0.1 {} job-worker-1 slots=1\n",
                ports[0], ports[1]
            ),
        )
        .unwrap();
        f.display().to_string()
    }

    fn launch(&self, hostfile: &str, mode: &str, token: &str, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = [
            "launch",
            "--token-file",
            &self.s(token),
            "--hostfile",
            hostfile,
            "--partition-mode",
            mode,
            "--graph-name",
            "g",
            "--train-entry-point",
            &self.s("partition.py"),
            "--num-epochs",
            "1",
            "--batch-size",
            "10",
            "--wait-timeout",
            "30",
        ]
        .map(String::from)
        .to_vec();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.p(name)).unwrap_or_default()
    }
}

fn run(args: &[String]) -> Output {
    Command::new(DGLRUN).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_partition_check_names_what_is_missing() {
    let env = Env::new();
    let ok = run(&env.partition("good", &["--no-serve"]));
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(text(&ok).contains("[partition] fake partitioning done"));

    let wrong_count = run(&env.partition(
        "count",
        &[
            "--no-serve",
            "--partition-arg",
            "--write_parts",
            "--partition-arg",
            "1",
        ],
    ));
    assert!(!wrong_count.status.success());
    let t = text(&wrong_count);
    assert!(
        t.contains("num_parts=1") && t.contains("2 partitions were requested"),
        "{t}"
    );

    let missing = run(&env.partition(
        "missing",
        &[
            "--no-serve",
            "--partition-arg=--skip_file",
            "--partition-arg=part1/graph.dgl",
        ],
    ));
    assert!(!missing.status.success());
    let t = text(&missing);
    assert!(
        t.contains("part1/graph.dgl") && t.contains("part-1.part_graph"),
        "{t}"
    );
}

/// A stand-in for mpirun: records its arguments and environment, then
/// prints what `dgl-partition rank` would (FAKE_MPIRUN_OUT) and exits with
/// FAKE_MPIRUN_EXIT.
const FAKE_MPIRUN: &str = r#"#!/bin/sh
printf '%s\n' "$*" > "$FAKE_MPIRUN_DIR/args"
env > "$FAKE_MPIRUN_DIR/env"
printf '%b' "$FAKE_MPIRUN_OUT"
exit "$FAKE_MPIRUN_EXIT"
"#;

#[test]
fn distparmetis_runs_ranks_from_the_launcher_and_names_a_failed_rank() {
    let env = Env::new();
    // No partitioner pod in this mode.
    let o = run(&env.partition("w", &["--partition-mode", "DistParMETIS"]));
    assert!(!o.status.success());
    assert!(
        text(&o).contains("DistParMETIS has no partitioner"),
        "{}",
        text(&o)
    );
    // A worker is accepted (here it stops at the missing token).
    let o = Command::new(DGLRUN)
        .env("DGL_OPERATOR_PHASE_ENV", "Worker")
        .env("DGL_OPERATOR_PARTITION_MODE", "DistParMETIS")
        .env("DGL_OPERATOR_TOKEN_FILE", env.dir.path().join("no-token"))
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o).contains("no-token"));
    // Every worker reads the chunked graph itself: no loader script.
    let hf = env.hostfile([free_port(), free_port()]);
    let o = run(&env.launch(
        &hf,
        "DistParMETIS",
        "token",
        &["--partition-entry-point", "load.py"],
    ));
    assert!(
        !o.status.success() && text(&o).contains("runs no loader script"),
        "{}",
        text(&o)
    );

    let mpirun = env.p("fake-mpirun");
    std::fs::write(&mpirun, FAKE_MPIRUN).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&mpirun, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ports = [free_port(), free_port()];
    let hf = env.hostfile(ports);
    let state = env.s("state");
    let probe = || {
        run(&[
            "probe".to_string(),
            "--partitioned".into(),
            "--state-dir".into(),
            state.clone(),
        ])
    };
    let launch = |out: &str, exit: &str| {
        let args = env.launch(
            &hf,
            "DistParMETIS",
            "token",
            &[
                "--mpirun",
                &mpirun.display().to_string(),
                "--dgl-partition",
                "/opt/bin/dgl-partition",
                "--state-dir",
                &state,
                "--partition-input",
                "/data/g/metadata.json",
                "--balance-train",
                "--partition-seed",
                "5",
            ],
        );
        Command::new(DGLRUN)
            .args(args)
            .env("FAKE_MPIRUN_DIR", env.dir.path())
            .env("FAKE_MPIRUN_OUT", out)
            .env("FAKE_MPIRUN_EXIT", exit)
            .output()
            .unwrap()
    };
    let mut procs = Procs(Vec::new());
    let workers = |procs: &mut Procs, tag: &str| -> [usize; 2] {
        let mut w = [0; 2];
        for (i, slot) in w.iter_mut().enumerate() {
            let mut a = env.worker(i, ports[i]);
            a.extend(["--partition-mode".to_string(), "DistParMETIS".into()]);
            *slot = procs.spawn(&a, &env.p(&format!("worker-{i}-{tag}.log")));
        }
        w
    };

    // Rank 1 fails: the launcher names it and its worker, writes no
    // marker, and the workers are told to exit.
    let w = workers(&mut procs, "fail");
    let o = launch(
        "rank 0 of 2: partitioning\ndgl-partition rank 1 of 2 failed: /data/g/edges-1.csv, line 17: 3 columns, expected 2\n",
        "1",
    );
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("partitioning failed on rank 1 on worker-1")
            && t.contains("edges-1.csv, line 17"),
        "{t}"
    );
    assert!(t.contains("[partition] rank 0 of 2: partitioning"), "{t}");
    assert!(!probe().status.success(), "no marker after a failure");
    for i in w {
        let s = procs
            .wait(i, Duration::from_secs(20))
            .expect("worker exits");
        assert!(!s.success());
    }
    let args = std::fs::read_to_string(env.p("args")).unwrap();
    for want in [
        "-n 2 --host 127.0.0.1:1,127.0.0.1:1".to_string(),
        format!("--mca plm_rsh_agent {DGLRUN} rsh"),
        "/opt/bin/dgl-partition rank --graph-name g --part-method metis --python python3 --seed 5 --input /data/g/metadata.json --balance-train=train_mask".into(),
    ] {
        assert!(args.contains(&want), "{want:?} not in {args}");
    }
    let menv = std::fs::read_to_string(env.p("env")).unwrap();
    assert!(
        menv.contains(&format!("DGL_OPERATOR_TOKEN_FILE={}", env.s("token"))),
        "{menv}"
    );
    assert!(
        menv.contains(&format!("DGLRUN_RSH_HOSTFILE={hf}")),
        "{menv}"
    );

    // Every rank reports its part: the marker appears, then the training
    // starts as in Skip mode, which here finds no partition on worker 0.
    let w = workers(&mut procs, "ok");
    let o = launch(
        "rank 0 of 2: part 0: 1 inner nodes\nrank 1 of 2: part 1: 1 inner nodes\n",
        "0",
    );
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(probe().status.success(), "the marker is written: {t}");
    assert!(
        t.contains("every worker holds its partition") && t.contains("partition mode DistParMETIS"),
        "{t}"
    );
    for i in w {
        procs
            .wait(i, Duration::from_secs(20))
            .expect("worker exits");
    }
}

#[test]
fn skip_mode_names_the_missing_partition_file_of_the_worker() {
    let env = Env::new();
    // Both workspaces get partitions; worker 1's lacks a file of part 1.
    let o = run(&env.partition("w0", &["--no-serve"]));
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&env.partition(
        "w1",
        &[
            "--no-serve",
            "--partition-arg=--skip_file",
            "--partition-arg=part1/node_feat.dgl",
        ],
    ));
    assert!(
        !o.status.success(),
        "the partitioner itself refuses this output"
    );

    let ports = [free_port(), free_port()];
    let hostfile = env.hostfile(ports);
    let mut procs = Procs(Vec::new());
    let w0 = procs.spawn(&env.worker(0, ports[0]), &env.p("worker-0.log"));
    let w1 = procs.spawn(&env.worker(1, ports[1]), &env.p("worker-1.log"));
    let l = procs.spawn(
        &env.launch(&hostfile, "Skip", "token", &[]),
        &env.p("launcher.log"),
    );
    let status = procs
        .wait(l, Duration::from_secs(30))
        .expect("the launcher ends");
    let log = env.log("launcher.log");
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("getting worker-1 (pod job-worker-1"),
        "names the worker: {log}"
    );
    assert!(log.contains("partition mode Skip"), "{log}");
    assert!(log.contains("part1/node_feat.dgl"), "names the file: {log}");
    // The workers were told to shut down and report the job as not done.
    for w in [w0, w1] {
        let s = procs
            .wait(w, Duration::from_secs(15))
            .expect("workers exit");
        assert_eq!(s.code(), Some(1));
    }
}

#[test]
fn shards_flow_to_the_workers_and_preflight_refuses_a_python_without_dgl() {
    let env = Env::new();
    let ports = [free_port(), free_port()];
    let part_port = free_port();
    let hostfile = env.hostfile(ports);
    let mut procs = Procs(Vec::new());
    let args = env.partition(
        "partitioner",
        &[
            "--listen",
            "127.0.0.1",
            "--agent-port",
            &part_port.to_string(),
        ],
    );
    let partitioner = procs.spawn(&args, &env.p("partitioner.log"));
    let w0 = procs.spawn(&env.worker(0, ports[0]), &env.p("worker-0.log"));
    let w1 = procs.spawn(&env.worker(1, ports[1]), &env.p("worker-1.log"));
    let partitioner_addr = format!("127.0.0.1:{part_port}");
    let l = procs.spawn(
        &env.launch(
            &hostfile,
            "DGL-API",
            "token",
            &["--partitioner", &partitioner_addr],
        ),
        &env.p("launcher.log"),
    );
    let status = procs
        .wait(l, Duration::from_secs(60))
        .expect("the launcher ends");
    let log = env.log("launcher.log");
    assert!(!status.success(), "{log}");
    assert!(log.contains("shard ready"), "{log}");
    // Each worker got the JSON and its own part, byte for byte.
    for (w, mine, other) in [("w0", 0, 1), ("w1", 1, 0)] {
        let ds = env.p(&format!("{w}/dataset"));
        assert!(ds.join("g.json").is_file(), "{w}");
        assert!(
            !ds.join(format!("part{other}")).exists(),
            "{w} got part{other}"
        );
        for f in ["graph.dgl", "node_feat.dgl", "edge_feat.dgl"] {
            let rel = format!("part{mine}/{f}");
            assert_eq!(
                std::fs::read(ds.join(&rel)).unwrap(),
                std::fs::read(env.p("partitioner/dataset").join(&rel)).unwrap(),
                "{w}/{rel}"
            );
        }
    }
    // The first worker to fail is named, with the reason.
    assert!(log.contains("training failed: worker-"), "{log}");
    assert!(log.contains("DGL is not installed"), "{log}");
    assert!(log.contains("No module named 'dgl'"), "{log}");
    for w in [w0, w1] {
        let s = procs
            .wait(w, Duration::from_secs(15))
            .expect("workers exit");
        assert!(!s.success());
    }
    // The job failed: the partitioner keeps serving for a restarted run.
    assert!(procs.0[partitioner].try_wait().unwrap().is_none());
}

#[test]
fn a_launcher_with_the_wrong_token_is_refused_at_once() {
    let env = Env::new();
    let ports = [free_port(), free_port()];
    let hostfile = env.hostfile(ports);
    let mut procs = Procs(Vec::new());
    procs.spawn(&env.worker(0, ports[0]), &env.p("worker-0.log"));
    procs.spawn(&env.worker(1, ports[1]), &env.p("worker-1.log"));
    let started = Instant::now();
    let l = procs.spawn(
        &env.launch(&hostfile, "Skip", "other-token", &[]),
        &env.p("launcher.log"),
    );
    let status = procs
        .wait(l, Duration::from_secs(20))
        .expect("the launcher ends");
    let log = env.log("launcher.log");
    assert!(!status.success(), "{log}");
    assert!(log.contains("different job tokens"), "{log}");
    assert!(log.contains("worker-"), "{log}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "no retries on a wrong token"
    );
    // A worker logged the refusal, without the token. The launcher talks to
    // the workers concurrently and stops at the first refusal, so either one
    // may be the one that refused; the line is written as the connection
    // closes, maybe after the launcher exited: wait for it, boundedly.
    let deadline = Instant::now() + Duration::from_secs(5);
    let read = || env.log("worker-0.log") + &env.log("worker-1.log");
    let mut w = read();
    while !w.contains("refused a connection") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        w = read();
    }
    assert!(w.contains("refused a connection"), "{w}");
    assert!(!w.contains("another-job") && !w.contains("loopback-token"));
}

// ---------------------------------------------------------------------------
// Orchestration with a fake DGL: an interpreter that plays DGL's processes
// the way dglrun starts them (docs/dgl-runtime-notes.md), so that stopping,
// killing and orphan handling are tested in seconds. Both "machines" are
// 127.0.0.1 with their own agent and DGL ports (real DGL could not tell them
// apart; the fake does not need to).

/// `-c ...`: the preflight's `import dgl`. `-m torch.distributed.run ...`:
/// starts one rank in a new session (as torchrun does), forwards SIGTERM to
/// it and exits 143 without waiting. A rank prints `epoch=` lines and writes
/// `done-<rank>` to $FAKE_DONE_DIR. A server listens on its ip_config port
/// and exits 0 once every machine's rank is done, like a DGL server.
const FAKE_DGL_PY: &str = r#"#!/usr/bin/env python3
import os, signal, socket, subprocess, sys, time
args = sys.argv[1:]
if args[:1] == ["-c"]:
    print("2.1.0-fake"); sys.exit(0)
if args[:2] == ["-m", "torch.distributed.run"]:
    rank = [a.split("=")[1] for a in args if a.startswith("--node_rank=")][0]
    child = subprocess.Popen([sys.executable, __file__, "rank", rank], start_new_session=True)
    def forward(sig, frame):
        child.send_signal(sig)
        os._exit(143)
    signal.signal(signal.SIGTERM, forward)
    rc = child.wait()
    if rc != 0:
        print(f"[ERROR] failed (exitcode: {rc}) local_rank: 0 (pid: {child.pid})", file=sys.stderr, flush=True)
    sys.exit(1 if rc else 0)
if args[:1] == ["rank"]:
    rank = args[1]
    if os.environ.get("FAKE_RANK_IGNORES_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.environ.get("FAKE_NOISY"):
        # 10 MiB without a newline, every byte escaped in JSON (20 MiB in a
        # frame), then a progress bar that only ever writes "\r".
        sys.stdout.write('\\"' * (5 << 20)); sys.stdout.flush()
        for pct in range(0, 101, 25):
            sys.stdout.write(f"\r{pct:3d}%|progress"); sys.stdout.flush(); time.sleep(0.05)
        sys.stdout.write("\n"); sys.stdout.flush()
    for e in range(int(os.environ.get("FAKE_EPOCHS", "3"))):
        print(f"epoch={e} loss={1.0 / (e + 1):.4f} rank={rank}", flush=True)
        time.sleep(0.2)
    open(os.path.join(os.environ["FAKE_DONE_DIR"], f"done-{rank}"), "w").close()
    print(f"training done rank={rank}", flush=True)
    sys.exit(0)
machines = [l.split() for l in open(os.environ["DGL_IP_CONFIG"]) if l.strip()]
sid, n = int(os.environ["DGL_SERVER_ID"]), int(os.environ["DGL_NUM_SERVER"])
ip, port = machines[sid // n][0], int(machines[sid // n][1]) + sid % n
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ip, port)); s.listen()
print(f"fake server {sid} listening on {ip}:{port}", flush=True)
done = os.environ["FAKE_DONE_DIR"]
while len([f for f in os.listdir(done) if f.startswith("done-")]) < len(machines):
    time.sleep(0.1)
sys.exit(0)
"#;

struct FakeJob {
    env: Env,
    procs: Procs,
    marker: String,
    workers: [usize; 2],
}

impl FakeJob {
    /// Two fake machines with Skip-mode partitions and their workers running.
    fn start(epochs: u32, worker_env: &[(&str, &str)]) -> FakeJob {
        let env = Env::new();
        for w in ["w0", "w1"] {
            let o = run(&env.partition(w, &["--no-serve"]));
            assert!(o.status.success(), "{}", text(&o));
        }
        let py = env.p("fake-dgl");
        std::fs::write(&py, FAKE_DGL_PY).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir_all(env.p("done")).unwrap();
        let agents = [free_port(), free_port()];
        std::fs::write(
            env.p("hostfile"),
            format!(
                "127.0.0.1 {} job-worker-0\n127.0.0.1 {} job-worker-1\n",
                agents[0], agents[1]
            ),
        )
        .unwrap();
        std::fs::write(
            env.p("ip_config"),
            format!("127.0.0.1 {}\n127.0.0.1 {}\n", free_port(), free_port()),
        )
        .unwrap();
        let marker = format!(
            "fake-{}-{}",
            std::process::id(),
            std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos()
        );
        let mut procs = Procs(Vec::new());
        let mut workers = [0; 2];
        for (i, port) in agents.into_iter().enumerate() {
            let mut args = env.worker_on(i, port, "127.0.0.1", &py.display().to_string());
            args.extend(["--stop-grace".into(), "2".into()]);
            let log = std::fs::File::create(env.p(&format!("worker-{i}.log"))).unwrap();
            let child = Command::new(DGLRUN)
                .args(&args)
                .env("DGLRUN_TEST_MARKER", &marker)
                .env("FAKE_DONE_DIR", env.p("done"))
                .env("FAKE_EPOCHS", epochs.to_string())
                .envs(worker_env.iter().copied())
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap();
            procs.0.push(child);
            workers[i] = procs.0.len() - 1;
        }
        FakeJob {
            env,
            procs,
            marker,
            workers,
        }
    }

    fn launch(&mut self) -> usize {
        let hostfile = self.env.s("hostfile");
        let master_port = free_port().to_string();
        let ip_config = self.env.s("ip_config");
        let mut args = self.env.launch(
            &hostfile,
            "Skip",
            "token",
            &[
                "--stop-grace",
                "2",
                "--ip-config",
                &ip_config,
                "--master-port",
                &master_port,
            ],
        );
        args.extend(["--".into(), "--extra".into(), "passed-through".into()]);
        self.procs.spawn(&args, &self.env.p("launcher.log"))
    }

    fn wait_for_log(&self, file: &str, needle: &str) {
        let end = Instant::now() + Duration::from_secs(30);
        while !self.env.log(file).contains(needle) {
            assert!(
                Instant::now() < end,
                "{needle:?} never appeared in {file}:\n{}",
                self.env.log(file)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Live processes carrying this test's marker (workers' descendants).
    fn leftovers(&self) -> Vec<String> {
        let needle = format!("DGLRUN_TEST_MARKER={}", self.marker);
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let pid = e.file_name().to_string_lossy().into_owned();
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rfind(')')
                .is_some_and(|i| stat[i + 1..].trim_start().starts_with('Z'));
            if !zombie && environ.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()) {
                let cmd =
                    std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                out.push(format!("{pid} {}", cmd.replace('\0', " ")));
            }
        }
        out
    }

    fn assert_no_leftovers(&self) {
        // Give exiting processes a moment to be reaped.
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let left = self.leftovers();
            if left.is_empty() {
                return;
            }
            assert!(Instant::now() < end, "processes left behind: {left:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn logs(&self) -> String {
        ["launcher.log", "worker-0.log", "worker-1.log"]
            .iter()
            .map(|f| format!("\n===== {f}\n{}", self.env.log(f)))
            .collect()
    }
}

impl Drop for FakeJob {
    fn drop(&mut self) {
        for p in self.leftovers() {
            if let Some(pid) = p.split_whitespace().next().and_then(|p| p.parse().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

#[test]
fn fake_training_succeeds_with_prefixed_progress_and_exit_0_everywhere() {
    let mut job = FakeJob::start(3, &[]);
    let l = job.launch();
    let s = job
        .procs
        .wait(l, Duration::from_secs(60))
        .expect("the launcher ends");
    let all = job.logs();
    assert!(s.success(), "{all}");
    let log = job.env.log("launcher.log");
    for w in 0..2 {
        assert!(
            log.contains(&format!("[worker-{w}] epoch=2 loss=0.3333 rank={w}")),
            "{all}"
        );
        assert!(
            log.contains(&format!(
                "[worker-{w}] [server-0] fake server {w} listening"
            )),
            "{all}"
        );
    }
    assert!(log.contains("DGL 2.1.0-fake"), "{all}");
    for w in job.workers {
        let s = job
            .procs
            .wait(w, Duration::from_secs(15))
            .expect("workers exit");
        assert!(s.success(), "{all}");
    }
    // The training arguments reached the script, pass-through ones last.
    let w0 = job.env.log("worker-0.log");
    assert!(
        w0.contains("--num_epochs 1 --batch_size 10 --num_workers 0 --extra passed-through"),
        "{w0}"
    );
    job.assert_no_leftovers();
}

#[test]
fn a_huge_line_and_a_progress_bar_do_not_stop_the_training() {
    let mut job = FakeJob::start(2, &[("FAKE_NOISY", "1")]);
    let l = job.launch();
    let s = job
        .procs
        .wait(l, Duration::from_secs(90))
        .expect("the launcher ends");
    let log = job.env.log("launcher.log");
    let short = |t: &str| t.chars().take(4000).collect::<String>();
    assert!(s.success(), "{}", short(&job.logs()));
    for w in 0..2 {
        // The cut line shows, with its marker; each update of the bar is a line.
        let cut = log
            .lines()
            .find(|l| l.starts_with(&format!("[worker-{w}] \\\"")))
            .unwrap_or_else(|| panic!("no cut line of worker-{w}: {}", short(&log)));
        assert!(
            cut.ends_with(dglrun::procs::TRUNCATED_MARKER),
            "{}",
            short(cut)
        );
        assert!(cut.len() < dglrun::procs::MAX_LINE + 200, "{}", cut.len());
        for pct in [" 50%|progress", "100%|progress"] {
            assert!(
                log.contains(&format!("[worker-{w}] {pct}\n")),
                "{pct} of worker-{w}: {}",
                short(&log)
            );
        }
        assert!(log.contains(&format!("[worker-{w}] epoch=1 loss=0.5000 rank={w}")));
    }
    // Bounded: the launcher saw 64 KiB of each 10 MiB line, not all of it.
    assert!(log.len() < 1 << 20, "{} bytes", log.len());
    job.assert_no_leftovers();
}

#[test]
fn a_killed_launcher_makes_the_workers_stop_everything() {
    // Ranks ignore SIGTERM and live in their own session: only the worker's
    // SIGKILL and its orphan sweep can end them.
    let mut job = FakeJob::start(100_000, &[("FAKE_RANK_IGNORES_TERM", "1")]);
    let l = job.launch();
    job.wait_for_log("launcher.log", "[worker-1] epoch=3");
    job.procs.0[l].kill().unwrap();
    let killed = Instant::now();
    // A bound only against hanging; how fast workers notice is not asserted
    // here (it depends on the machine's load), only that they do.
    for w in job.workers {
        let s = job.procs.wait(w, Duration::from_secs(60));
        let all = job.logs();
        let s = s.unwrap_or_else(|| panic!("a worker outlived its launcher{all}"));
        assert_eq!(s.code(), Some(143), "{all}");
    }
    eprintln!(
        "workers stopped {:?} after the launcher was killed",
        killed.elapsed()
    );
    let all = job.logs();
    assert!(
        job.env
            .log("worker-0.log")
            .contains("the launcher disconnected"),
        "{all}"
    );
    assert!(
        job.env
            .log("worker-0.log")
            .contains("killing a leftover process"),
        "{all}"
    );
    job.assert_no_leftovers();
}

#[test]
fn sigterm_to_one_worker_fails_the_job_and_stops_the_other() {
    let mut job = FakeJob::start(100_000, &[]);
    let l = job.launch();
    job.wait_for_log("launcher.log", "[worker-0] epoch=3");
    let w1 = nix::unistd::Pid::from_raw(job.procs.0[job.workers[1]].id() as i32);
    nix::sys::signal::kill(w1, nix::sys::signal::Signal::SIGTERM).unwrap();
    let s = job
        .procs
        .wait(l, Duration::from_secs(20))
        .unwrap_or_else(|| panic!("the launcher did not end{}", job.logs()));
    let all = job.logs();
    assert!(!s.success(), "{all}");
    let log = job.env.log("launcher.log");
    let msg = log
        .lines()
        .find(|l| l.contains("training failed"))
        .unwrap_or_else(|| panic!("{all}"));
    assert!(
        msg.contains("training failed: worker-1") && msg.contains("SIGTERM"),
        "{msg}"
    );
    for w in job.workers {
        let s = job
            .procs
            .wait(w, Duration::from_secs(15))
            .expect("workers exit");
        assert!(!s.success(), "{all}");
    }
    job.assert_no_leftovers();
}

#[test]
fn the_probe_is_ready_only_when_the_agent_answers_with_the_token() {
    let env = Env::new();
    let port = free_port();
    let probe = |token: &str| {
        Command::new(DGLRUN)
            .args([
                "probe",
                "--ready",
                "--timeout",
                "2",
                "--agent-port",
                &port.to_string(),
            ])
            .args(["--token-file", &env.s(token)])
            .output()
            .unwrap()
    };
    let o = probe("token");
    assert!(!o.status.success());
    assert!(text(&o).contains("not ready"), "{}", text(&o));

    let mut procs = Procs(Vec::new());
    procs.spawn(&env.worker(0, port), &env.p("worker-0.log"));
    let end = Instant::now() + Duration::from_secs(10);
    let o = loop {
        let o = probe("token");
        if o.status.success() || Instant::now() > end {
            break o;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("ready: Worker agent"), "{}", text(&o));
    let o = probe("other-token");
    assert!(!o.status.success());
    assert!(text(&o).contains("different job tokens"), "{}", text(&o));
}

#[test]
fn a_partition_count_other_than_the_worker_count_is_refused_before_partitioning() {
    let env = Env::new();
    let o = Command::new(DGLRUN)
        .args(env.partition("w", &["--no-serve"]))
        .env("DGL_OPERATOR_NUM_WORKERS", "3")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("--num-partitions is 2 but the job has 3 worker(s)"),
        "{t}"
    );
    assert!(!env.p("w/dataset").exists(), "nothing was partitioned: {t}");
}
