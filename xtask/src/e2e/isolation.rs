//! `isolation`: no job can reach another (issue #25, item 5), with the
//! NetworkPolicy enforced on every node by a real engine (kube-router's
//! firewall, one per node, `policy_engine`). While job B trains, a probe pod
//! with job A's labels, in the same namespace, tries B's DGL server, torch
//! and agent ports on worker 0 and must never connect; a probe pod with B's
//! labels must reach B's torch and agent ports in the same minutes (so the
//! scenario fails where nothing is enforced, and where everything is
//! blocked); B must reach Succeeded. On several nodes both probes run on a
//! node other than worker 0's, so what is refused and what connects
//! crosses nodes, and B's workers must sit on different nodes.
//!
//! The fence by run (#34 item 4): B is restarted once (worker 1 deleted
//! while Running) before the probes start, and they aim at run 1's worker
//! 0. The member probe carries B's labels and run 1; a third probe, B's
//! labels and run 0 (a process of the old run left on a node that lost
//! only its link), must never connect either: the operator rewrote the
//! policy for run 1 before run 1's pods existed.
//!
//! The admitted probe never connects to DGL's server port: DGL 2.1.0's
//! server counts every connection as one of its clients.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use dgl_api::names::{
    network_policy_name, worker_name, AGENT_PORT, DGL_SERVER_PORT, LABEL_JOB_NAME,
    LABEL_MANAGED_BY, LABEL_RUN,
};
use dgl_api::{DGLJob, JobPhase, ReplicaType};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, LogParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

mod policy_engine;

use super::scenarios::in_namespace;
use crate::stack::jobs::{apply_job, condition_message, example_job, follow, phase};
use crate::stack::placement::Placement;
use crate::stack::{Stack, JOB_TIMEOUT};
use policy_engine::PolicyEngine;

/// torch.distributed's master port (dglrun's default), on worker 0.
const TORCH_PORT: u16 = 29500;
/// How long a probe keeps trying (it is deleted once the job ends).
const PROBE_SECONDS: u32 = 600;

/// Tries each port once a second (2 s connect timeout) and prints one line
/// per attempt: `<unix time> <port> open|timeout|refused|error-<errno>`.
/// `stop` (1): stop trying a port once it opened.
const PROBE: &str = r#"
import socket, sys, time
ip, ports, stop, deadline = sys.argv[1], [int(p) for p in sys.argv[2].split(',')], sys.argv[3] == '1', time.time() + float(sys.argv[4])
opened = set()
while time.time() < deadline and not (stop and opened == set(ports)):
    for p in ports:
        if stop and p in opened:
            continue
        s = socket.socket()
        s.settimeout(2)
        t = time.time()
        try:
            s.connect((ip, p))
            r = 'open'
            opened.add(p)
        except socket.timeout:
            r = 'timeout'
        except OSError as e:
            r = 'refused' if e.errno == 111 else 'error-%d' % e.errno
        finally:
            s.close()
        print('%.3f %d %s' % (t, p, r), flush=True)
    time.sleep(1)
"#;

pub(super) async fn isolation(stack: &Stack) -> Result<String> {
    let job = "iso-b";
    in_namespace(&stack.client, "e2e-isolation", job, |ns| async move {
        let engines = start_engines(stack).await?;
        let r = isolation_in(&stack.client, &ns, job, &engines).await;
        if let Ok(line) = &r {
            // Printed before the engines stop: their figures stay if a stop fails.
            println!("    {line}");
        }
        let tails: Vec<String> = engines
            .iter()
            .map(|(n, e)| format!("[{n}]\n{}", e.log_tail()))
            .collect();
        let stopped = tokio::task::spawn_blocking(move || {
            engines
                .into_values()
                .map(PolicyEngine::stop)
                .collect::<Result<Vec<()>>>()
        })
        .await?;
        let line = r.with_context(|| format!("kube-router's logs end:\n{}", tails.join("\n")))?;
        stopped.context("stopping kube-router")?;
        Ok(line)
    })
    .await
}

/// kube-router's firewall on every node of the cluster, by node name.
async fn start_engines(stack: &Stack) -> Result<BTreeMap<String, PolicyEngine>> {
    let nodes = stack.cluster.node_summaries();
    ensure!(!nodes.is_empty(), "the cluster has no node");
    let kubeconfig = stack.kubeconfig.clone();
    let log_dir = stack.cluster.log_dir();
    tokio::task::spawn_blocking(move || {
        let mut engines = BTreeMap::new();
        for n in nodes {
            let e = PolicyEngine::start(&kubeconfig, &n.node_name, n.netns.as_deref(), &log_dir)?;
            engines.insert(n.node_name, e);
        }
        Ok(engines)
    })
    .await?
}

async fn isolation_in(
    client: &Client,
    ns: &str,
    name: &str,
    engines: &BTreeMap<String, PolicyEngine>,
) -> Result<String> {
    // Apart as a rule: the spread is checked, beside other scenarios.
    let mut job = crate::stack::placement::spread_workers(example_job(name)?)?;
    job.spec
        .run_policy
        .get_or_insert_with(Default::default)
        .backoff_limit = Some(1);
    apply_job(client, ns, &job).await?;
    let restarted = restart_once(client, ns, name).await?;
    let (ip, node) = worker_ip(client, ns, name).await?;
    let engine = engines
        .get(&node)
        .with_context(|| format!("worker 0 is on {node}, which runs no kube-router"))?;
    let ip_at = restarted.elapsed();
    wait_guarded(engine, ns, name, &ip).await?;
    let guarded_at = restarted.elapsed();
    // The probes go where worker 0 is not, when there is such a node.
    let probe_node = engines.keys().find(|n| **n != node).cloned();
    let on = probe_node.as_deref();

    let a_labels = labels_of("iso-a", None);
    let old_run = labels_of(name, Some(0));
    let b_labels = labels_of(name, Some(1));
    let all = [DGL_SERVER_PORT, TORCH_PORT, AGENT_PORT];
    probe(client, ns, "probe-job-a", &a_labels, &ip, &all, false, on).await?;
    probe(client, ns, "probe-old-run", &old_run, &ip, &all, false, on).await?;
    let b_ports = [TORCH_PORT, AGENT_PORT];
    probe(
        client,
        ns,
        "probe-job-b",
        &b_labels,
        &ip,
        &b_ports,
        true,
        on,
    )
    .await?;

    let mut placement = Placement::default();
    let done = follow(
        client,
        ns,
        name,
        JOB_TIMEOUT,
        |p| p.is_some_and(JobPhase::is_terminal),
        |_, pods, _| placement.observe(pods),
    )
    .await?;
    if phase(&done) != Some(JobPhase::Succeeded) {
        bail!(
            "DGLJob {ns}/{name} ended {:?}: {:?}",
            phase(&done),
            condition_message(&done, JobPhase::Failed)
        );
    }
    let workers = replicas(&job, ReplicaType::Worker);
    let placed = placement.check_workers_spread(name, workers, engines.len())?;
    let intruder = attempts(client, ns, "probe-job-a").await?;
    let stale = attempts(client, ns, "probe-old-run").await?;
    let member = attempts(client, ns, "probe-job-b").await?;
    let judged = judge("job A's probe", &intruder, &member)?;
    let fenced = judge("the probe of B's run 0", &stale, &member)?;
    let probes = probe_node.map_or("worker 0's node".into(), |n| {
        format!("{n}, worker 0 on {node}")
    });
    Ok(format!(
        "B Succeeded under kube-router after a restart; {judged}; {fenced}; run 1's worker 0 had its IP \
         {:.1} s after restartCount 1 and kube-router guarded it {:.1} s after that; kube-router \
         on {} node(s), probes on {probes} ({placed})",
        ip_at.as_secs_f64(),
        (guarded_at - ip_at).as_secs_f64(),
        engines.len()
    ))
}

/// Restarts `job` once: worker 1 deleted once it is Running (training
/// launched), as ChaosJob does. Returns when `restartCount` is 1.
async fn restart_once(client: &Client, ns: &str, job: &str) -> Result<std::time::Instant> {
    let running = follow(
        client,
        ns,
        job,
        JOB_TIMEOUT,
        |p| p == Some(JobPhase::Running) || p.is_some_and(JobPhase::is_terminal),
        |_, _, _| {},
    )
    .await?;
    ensure!(
        phase(&running) == Some(JobPhase::Running),
        "DGLJob {ns}/{job} ended {:?} before it ran",
        phase(&running)
    );
    let worker = worker_name(job, 1);
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete(&worker, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting {worker}"))?;
    println!("    deleted {worker} while Running: B restarts as run 1");
    let jobs: Api<DGLJob> = Api::namespaced(client.clone(), ns);
    for _ in 0..240 {
        let j = jobs.get(job).await?;
        if j.status.as_ref().and_then(|s| s.restart_count) == Some(1) {
            return Ok(std::time::Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("DGLJob {ns}/{job} did not restart within 60 s of {worker}'s deletion")
}

fn replicas(job: &dgl_api::DGLJob, role: ReplicaType) -> usize {
    job.spec
        .dgl_replica_specs
        .get(&role)
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(0) as usize
}

/// A job's pod labels, with `run` when given.
fn labels_of(job: &str, run: Option<i32>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (LABEL_JOB_NAME.to_string(), job.to_string()),
        (LABEL_MANAGED_BY.to_string(), "dgl-operator".to_string()),
    ]);
    if let Some(run) = run {
        labels.insert(LABEL_RUN.to_string(), run.to_string());
    }
    labels
}

/// Run 1's worker 0: its pod IP and node, once it has them.
async fn worker_ip(client: &Client, ns: &str, job: &str) -> Result<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let name = worker_name(job, 0);
    for _ in 0..600 {
        let pod = pods
            .get_opt(&name)
            .await?
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.labels().get(LABEL_RUN).map(String::as_str) == Some("1"));
        let node = pod
            .as_ref()
            .and_then(|p| p.spec.as_ref()?.node_name.clone());
        let ip = pod.and_then(|p| p.status?.pod_ip);
        if let (Some(ip), Some(node)) = (ip, node) {
            return Ok((ip, node));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("{name} of run 1 got no IP within 300 s")
}

/// kube-router guards worker 0 (at `ip`) with the job's NetworkPolicy.
async fn wait_guarded(engine: &PolicyEngine, ns: &str, job: &str, ip: &str) -> Result<()> {
    let (pod, policy) = (worker_name(job, 0), network_policy_name(job));
    for _ in 0..120 {
        if engine.guards(ns, &pod, ip, &policy)? {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("kube-router did not guard {ns}/{pod} at {ip} with {policy} within 60 s")
}

/// A pod running [`PROBE`] against `ip`'s `ports`, labelled `labels`, on
/// node `node` (`None`: where the scheduler puts it).
#[allow(clippy::too_many_arguments)]
async fn probe(
    client: &Client,
    ns: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
    ip: &str,
    ports: &[u16],
    stop: bool,
    node: Option<&str>,
) -> Result<()> {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let image = crate::images::reference(crate::images::Which::Graphsage);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "probe",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["python3", "-c", PROBE, ip, ports.join(","), if stop { "1" } else { "0" }, PROBE_SECONDS.to_string()],
            }],
        },
    }))?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating probe pod {name}"))?;
    Ok(())
}

/// One connection attempt of a probe.
#[derive(Debug, Clone, PartialEq)]
struct Attempt {
    at: f64,
    port: u16,
    result: String,
}

fn parse_attempts(log: &str) -> Vec<Attempt> {
    log.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some(Attempt {
                at: f.next()?.parse().ok()?,
                port: f.next()?.parse().ok()?,
                result: f.next()?.to_string(),
            })
        })
        .collect()
}

/// A probe's attempts so far (its log), then the probe deleted.
async fn attempts(client: &Client, ns: &str, name: &str) -> Result<Vec<Attempt>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let log = pods
        .logs(name, &LogParams::default())
        .await
        .with_context(|| format!("log of {name}"))?;
    pods.delete(name, &DeleteParams::default()).await?;
    Ok(parse_attempts(&log))
}

/// The intruder never connected, and tried each port after the member
/// connected to it; the member reached both of its ports.
fn judge(who: &str, intruder: &[Attempt], member: &[Attempt]) -> Result<String> {
    let opened: Vec<&Attempt> = intruder.iter().filter(|a| a.result == "open").collect();
    ensure!(opened.is_empty(), "{who} reached job B: {opened:?}");
    let mut lines = Vec::new();
    for port in [TORCH_PORT, AGENT_PORT] {
        let Some(first) = member.iter().find(|a| a.port == port && a.result == "open") else {
            bail!("the pod with job B's labels never reached B's port {port}: {member:?}");
        };
        let after: Vec<&Attempt> = intruder
            .iter()
            .filter(|a| a.port == port && a.at >= first.at)
            .collect();
        ensure!(
            !after.is_empty(),
            "{who} made no attempt on port {port} after B's probe reached it"
        );
        lines.push(format!(
            "{port}: B's probe in, A's refused {}x after ({})",
            after.len(),
            after[0].result
        ));
    }
    let server = intruder
        .iter()
        .filter(|a| a.port == DGL_SERVER_PORT)
        .count();
    ensure!(server > 0, "{who} made no attempt on DGL's server port");
    Ok(format!(
        "{who}: {} attempts, 0 connected ({server} on {DGL_SERVER_PORT}); {}",
        intruder.len(),
        lines.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(at: f64, port: u16, result: &str) -> Attempt {
        Attempt {
            at,
            port,
            result: result.into(),
        }
    }

    #[test]
    fn a_probe_log_parses_and_junk_is_skipped() {
        let log = "1.5 29500 timeout\nTraceback (most recent call last):\n2.0 30049 open\n";
        assert_eq!(
            parse_attempts(log),
            [a(1.5, 29500, "timeout"), a(2.0, 30049, "open")]
        );
    }

    #[test]
    fn the_judgement_fails_on_an_intruder_in_or_a_member_out() {
        let member = [a(10.0, TORCH_PORT, "open"), a(11.0, AGENT_PORT, "open")];
        let refused = [
            a(12.0, DGL_SERVER_PORT, "timeout"),
            a(12.0, TORCH_PORT, "timeout"),
            a(12.0, AGENT_PORT, "refused"),
        ];
        assert!(judge("A", &refused, &member).is_ok());
        let mut broke_in = refused.to_vec();
        broke_in.push(a(13.0, TORCH_PORT, "open"));
        assert!(judge("A", &broke_in, &member).is_err());
        // Everything blocked: the member is refused too.
        let blocked = [
            a(10.0, TORCH_PORT, "timeout"),
            a(11.0, AGENT_PORT, "timeout"),
        ];
        assert!(judge("A", &refused, &blocked).is_err());
        // The intruder only tried before the port was up.
        let early = [
            a(1.0, DGL_SERVER_PORT, "refused"),
            a(1.0, TORCH_PORT, "refused"),
            a(1.0, AGENT_PORT, "refused"),
        ];
        assert!(judge("A", &early, &member).is_err());
    }
}
