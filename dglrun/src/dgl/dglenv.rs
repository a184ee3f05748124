//! DGL's launch contract (docs/runtime-design.md, "Worker process tree";
//! what DGL 2.1.0 does with it: docs/dgl-runtime-notes.md) as pure
//! functions: the command lines and environments of one machine's DGL
//! servers and of its `torch.distributed.run`.

use std::net::IpAddr;
use std::path::Path;

use dgl_api::wire::TrainSpec;

use crate::dgl::command::{self, CommandError, Value, Values};
use crate::procs::ProcSpec;

/// torchrun checks its children this often (seconds). Its default, 5 s,
/// delays every failure report by up to that; 1 s keeps the stop prompt.
const TORCHRUN_MONITOR_INTERVAL: &str = "1";

/// Everything one machine needs besides the launcher's [`TrainSpec`].
#[derive(Debug, Clone)]
pub struct Machine<'a> {
    /// The user's program (the Python interpreter) and its arguments (the
    /// script and the script's arguments): [`user_command`].
    pub program: &'a str,
    pub script: &'a [String],
    pub ip_config_path: &'a Path,
    pub part_config_path: &'a Path,
    pub num_machines: u32,
    /// IP of machine 0 (torch.distributed's master).
    pub master_addr: IpAddr,
    /// Network interface holding this machine's IP, for gloo and tensorpipe.
    pub ifname: Option<&'a str>,
    /// OMP_NUM_THREADS of the trainers.
    pub trainer_threads: u32,
}

/// DGL_NUM_CLIENT: every trainer and every sampler process of every machine
/// connects to the servers.
pub fn num_clients(spec: &TrainSpec, machines: u32) -> u32 {
    spec.num_trainers * (1 + spec.num_samplers) * machines
}

/// The flag of the launch.py convention's training command.
pub const TRAIN_COMMAND_FLAG: &str = "--train-command";

/// Where one machine's files are, for the placeholders.
#[derive(Debug, Clone, Copy)]
pub struct Paths<'a> {
    pub workspace: &'a Path,
    pub ip_config: &'a Path,
    pub part_config: &'a Path,
    pub num_machines: u32,
}

/// The placeholders of a training command and their values on one machine.
pub fn train_values(spec: &TrainSpec, p: Paths) -> Values {
    let given = |v: u32, flag| Value::from_flag((v > 0).then_some(v), flag);
    vec![
        ("ip_config", Value::of(p.ip_config.display())),
        ("part_config", Value::of(p.part_config.display())),
        ("graph_name", Value::of(&spec.graph_name)),
        ("workspace", Value::of(p.workspace.display())),
        ("num_trainers", Value::of(spec.num_trainers)),
        ("num_samplers", Value::of(spec.num_samplers)),
        ("num_servers", Value::of(spec.num_servers)),
        ("num_machines", Value::of(p.num_machines)),
        ("machine_rank", Value::of(spec.machine_rank)),
        ("num_epochs", given(spec.num_epochs, "--num-epochs")),
        ("batch_size", given(spec.batch_size, "--batch-size")),
        ("use_graphbolt", Value::of(spec.use_graphbolt)),
    ]
}

/// The user's program and its arguments on this machine. The seed's
/// convention: `python` with the entry point and the arguments the earlier
/// operator passed (plus --part_config), then the pass-through arguments.
/// The launch.py convention: the user's command, placeholders filled,
/// nothing added.
pub fn user_command(
    spec: &TrainSpec,
    python: &str,
    p: Paths,
) -> Result<(String, Vec<String>), CommandError> {
    if let Some(words) = &spec.command {
        let filled = command::fill_words(TRAIN_COMMAND_FLAG, words, &train_values(spec, p))?;
        command::python_script(TRAIN_COMMAND_FLAG, &filled)?;
        return Ok((filled[0].clone(), filled[1..].to_vec()));
    }
    let mut a = vec![
        spec.entry_point.clone(),
        "--graph_name".into(),
        spec.graph_name.clone(),
        "--ip_config".into(),
        p.ip_config.display().to_string(),
        "--part_config".into(),
        p.part_config.display().to_string(),
        "--num_epochs".into(),
        spec.num_epochs.to_string(),
        "--batch_size".into(),
        spec.batch_size.to_string(),
        "--num_workers".into(),
        spec.num_samplers.to_string(),
    ];
    if spec.use_graphbolt {
        // DGL's examples' flag: the script passes it to
        // dgl.distributed.initialize(use_graphbolt=...), servers and trainers.
        a.push("--use_graphbolt".into());
    }
    a.extend(spec.extra_args.iter().cloned());
    Ok((python.to_string(), a))
}

fn common_env(spec: &TrainSpec, m: &Machine) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "DGL_NUM_CLIENT".to_string(),
            num_clients(spec, m.num_machines).to_string(),
        ),
        ("DGL_NUM_SAMPLER".into(), spec.num_samplers.to_string()),
        ("DGL_NUM_SERVER".into(), spec.num_servers.to_string()),
        (
            "DGL_CONF_PATH".into(),
            m.part_config_path.display().to_string(),
        ),
        (
            "DGL_IP_CONFIG".into(),
            m.ip_config_path.display().to_string(),
        ),
        ("DGL_GRAPH_FORMAT".into(), "csc".into()),
        // Lines reach the launcher's log as they are printed, not when a
        // pipe buffer fills.
        ("PYTHONUNBUFFERED".into(), "1".into()),
    ];
    if let Some(ifname) = m.ifname {
        // gloo otherwise picks its interface from the host name, which
        // outside a pod may not resolve to the machine's ip_config address.
        env.push(("GLOO_SOCKET_IFNAME".into(), ifname.into()));
        env.push(("TP_SOCKET_IFNAME".into(), ifname.into()));
    }
    env
}

/// The `num_servers` DGL server processes of machine `spec.machine_rank`.
pub fn server_specs(spec: &TrainSpec, m: &Machine) -> Vec<ProcSpec> {
    (0..spec.num_servers)
        .map(|i| {
            let mut env = common_env(spec, m);
            env.extend([
                ("DGL_ROLE".to_string(), "server".to_string()),
                (
                    "DGL_SERVER_ID".into(),
                    (spec.machine_rank * spec.num_servers + i).to_string(),
                ),
                ("OMP_NUM_THREADS".into(), "1".into()),
            ]);
            ProcSpec {
                name: format!("server-{i}"),
                program: m.program.to_string(),
                args: m.script.to_vec(),
                env,
                cwd: None,
            }
        })
        .collect()
}

/// The machine's `python -m torch.distributed.run` with `num_trainers` processes.
pub fn trainer_spec(spec: &TrainSpec, m: &Machine) -> ProcSpec {
    let mut env = common_env(spec, m);
    env.extend([
        ("DGL_DIST_MODE".to_string(), "distributed".to_string()),
        ("DGL_ROLE".into(), "client".into()),
        ("DGL_GROUP_ID".into(), "0".into()),
        ("OMP_NUM_THREADS".into(), m.trainer_threads.to_string()),
    ]);
    let mut args = vec![
        "-m".to_string(),
        "torch.distributed.run".into(),
        format!("--nproc_per_node={}", spec.num_trainers),
        format!("--nnodes={}", m.num_machines),
        format!("--node_rank={}", spec.machine_rank),
        format!("--master_addr={}", m.master_addr),
        format!("--master_port={}", spec.master_port),
        format!("--monitor-interval={TORCHRUN_MONITOR_INTERVAL}"),
    ];
    args.extend(m.script.iter().cloned());
    ProcSpec {
        name: "trainer".into(),
        program: m.program.to_string(),
        args,
        env,
        cwd: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> TrainSpec {
        TrainSpec {
            graph_name: "g".into(),
            entry_point: "train.py".into(),
            num_epochs: 3,
            batch_size: 100,
            num_trainers: 2,
            num_samplers: 1,
            num_servers: 2,
            machine_rank: 1,
            ip_config: String::new(),
            master_port: 29500,
            extra_args: vec!["--lr".into(), "0.1".into()],
            command: None,
            use_graphbolt: false,
        }
    }

    fn paths() -> Paths<'static> {
        Paths {
            workspace: Path::new("/w"),
            ip_config: Path::new("/w/ip_config"),
            part_config: Path::new("/w/dataset/g.json"),
            num_machines: 3,
        }
    }

    fn machine<'a>(program: &'a str, script: &'a [String]) -> Machine<'a> {
        Machine {
            program,
            script,
            ip_config_path: Path::new("/w/ip_config"),
            part_config_path: Path::new("/w/dataset/g.json"),
            num_machines: 3,
            master_addr: "10.0.0.1".parse().unwrap(),
            ifname: Some("eth0"),
            trainer_threads: 4,
        }
    }

    fn env_of(p: &ProcSpec, k: &str) -> Option<String> {
        p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn servers_and_trainers_follow_dgls_contract() {
        let s = spec();
        let (program, script) = user_command(&s, "/venv/bin/python", paths()).unwrap();
        assert_eq!(program, "/venv/bin/python");
        let m = machine(&program, &script);
        let servers = server_specs(&s, &m);
        assert_eq!(servers.len(), 2);
        assert_eq!(env_of(&servers[1], "DGL_SERVER_ID").as_deref(), Some("3"));
        assert_eq!(env_of(&servers[0], "DGL_ROLE").as_deref(), Some("server"));
        // trainers * (1 + samplers) * machines
        assert_eq!(env_of(&servers[0], "DGL_NUM_CLIENT").as_deref(), Some("12"));
        assert_eq!(env_of(&servers[0], "OMP_NUM_THREADS").as_deref(), Some("1"));
        assert_eq!(env_of(&servers[0], "DGL_DIST_MODE"), None);
        assert_eq!(servers[0].args[0], "train.py");

        let t = trainer_spec(&s, &m);
        for (k, v) in [
            ("DGL_DIST_MODE", "distributed"),
            ("DGL_ROLE", "client"),
            ("DGL_GROUP_ID", "0"),
            ("DGL_NUM_SAMPLER", "1"),
            ("DGL_NUM_SERVER", "2"),
            ("DGL_NUM_CLIENT", "12"),
            ("DGL_CONF_PATH", "/w/dataset/g.json"),
            ("DGL_IP_CONFIG", "/w/ip_config"),
            ("DGL_GRAPH_FORMAT", "csc"),
            ("OMP_NUM_THREADS", "4"),
            ("GLOO_SOCKET_IFNAME", "eth0"),
            ("TP_SOCKET_IFNAME", "eth0"),
        ] {
            assert_eq!(env_of(&t, k).as_deref(), Some(v), "{k}");
        }
        let args = t.args.join(" ");
        assert!(args.starts_with(
            "-m torch.distributed.run --nproc_per_node=2 --nnodes=3 --node_rank=1 --master_addr=10.0.0.1 --master_port=29500"
        ), "{args}");
        assert!(args.ends_with(
            "train.py --graph_name g --ip_config /w/ip_config --part_config /w/dataset/g.json --num_epochs 3 --batch_size 100 --num_workers 1 --lr 0.1"
        ), "{args}");
    }

    /// GraphBolt: the seed convention appends DGL's examples' flag (before
    /// the pass-through arguments); launch.py's fills {use_graphbolt}.
    #[test]
    fn graphbolt_reaches_the_script() {
        let mut s = spec();
        s.use_graphbolt = true;
        let (_, script) = user_command(&s, "python3", paths()).unwrap();
        assert!(
            script
                .join(" ")
                .ends_with("--num_workers 1 --use_graphbolt --lr 0.1"),
            "{script:?}"
        );
        let m = machine("python3", &script);
        assert!(server_specs(&s, &m)[0]
            .args
            .contains(&"--use_graphbolt".into()));
        assert!(trainer_spec(&s, &m)
            .args
            .contains(&"--use_graphbolt".into()));
        let line = "python3 t.py --use_graphbolt={use_graphbolt}";
        s.command = Some(
            crate::dgl::command::Template::parse(TRAIN_COMMAND_FLAG, line)
                .unwrap()
                .words,
        );
        let (_, a) = user_command(&s, "python3", paths()).unwrap();
        assert_eq!(a, ["t.py", "--use_graphbolt=true"]);
        s.use_graphbolt = false;
        let (_, a) = user_command(&s, "python3", paths()).unwrap();
        assert_eq!(a, ["t.py", "--use_graphbolt=false"]);
    }

    /// launch.py's convention: the user's words, placeholders filled, and
    /// nothing else; the same DGL environment as the seed's convention.
    #[test]
    fn a_users_command_runs_as_written() {
        let mut s = spec();
        s.num_epochs = 0;
        let line = "python3 node_classification.py --graph_name {graph_name} --ip_config {ip_config} --part_config={part_config} --num_epochs 30 --note {{x}}";
        s.command = Some(
            crate::dgl::command::Template::parse(TRAIN_COMMAND_FLAG, line)
                .unwrap()
                .words,
        );
        let (program, script) = user_command(&s, "/venv/bin/python", paths()).unwrap();
        assert_eq!(
            program, "python3",
            "the interpreter is the user's, not --python"
        );
        assert_eq!(
            script.join(" "),
            "node_classification.py --graph_name g --ip_config /w/ip_config --part_config=/w/dataset/g.json --num_epochs 30 --note {x}"
        );
        let m = machine(&program, &script);
        let server = &server_specs(&s, &m)[0];
        assert_eq!(
            (server.program.as_str(), &server.args),
            ("python3", &script)
        );
        assert_eq!(
            env_of(server, "DGL_CONF_PATH").as_deref(),
            Some("/w/dataset/g.json")
        );
        let t = trainer_spec(&s, &m);
        assert_eq!(t.program, "python3");
        assert_eq!(&t.args[..2], ["-m", "torch.distributed.run"]);
        assert!(t.args.join(" ").ends_with(&script.join(" ")));
        assert_eq!(env_of(&t, "DGL_IP_CONFIG").as_deref(), Some("/w/ip_config"));
        assert_eq!(env_of(&t, "DGL_NUM_SERVER").as_deref(), Some("2"));

        // Every documented placeholder has a value on a worker.
        let all = "python3 t.py {ip_config} {part_config} {graph_name} {workspace} {num_trainers} {num_samplers} {num_servers} {num_machines} {machine_rank}";
        s.command = Some(
            crate::dgl::command::Template::parse(TRAIN_COMMAND_FLAG, all)
                .unwrap()
                .words,
        );
        let (_, a) = user_command(&s, "python3", paths()).unwrap();
        assert_eq!(
            a.join(" "),
            "t.py /w/ip_config /w/dataset/g.json g /w 2 1 2 3 1"
        );
        // {num_epochs} without --num-epochs, an unknown name, no script.
        for (line, want) in [
            (
                "python3 t.py {num_epochs}",
                "placeholder {num_epochs} has no value here: --num-epochs was not given",
            ),
            ("python3 t.py {ip}", "unknown placeholder {ip}"),
            (
                "bash -c {ip_config}",
                "must start with the Python interpreter",
            ),
        ] {
            s.command = Some(
                crate::dgl::command::Template::parse(TRAIN_COMMAND_FLAG, line)
                    .unwrap()
                    .words,
            );
            let e = user_command(&s, "python3", paths())
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("--train-command: ") && e.contains(want),
                "{line}: {e}"
            );
        }
    }
}
