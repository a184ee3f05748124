use super::pods::{add_mount, env_value, mounts_at};
use super::*;
use crate::pure::observe::{ObservedPod, PodState};
use crate::pure::settings::{BuildConfig, GangScheduler};
use crate::pure::validate::valid;
use dgl_api::{PartitionMode, ReplicaType};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, Pod, ResourceRequirements, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub(crate) fn job(yaml: &str) -> DGLJob {
    let mut job: DGLJob = serde_yaml::from_str(yaml).unwrap();
    job.metadata.namespace = Some("ns".into());
    job.metadata.uid = Some("uid-1".into());
    job
}

fn seed() -> DGLJob {
    job(include_str!("../../../../examples/seed-dgljob.yaml"))
}

fn main_container(pod: &Pod) -> &Container {
    &pod.spec.as_ref().unwrap().containers[0]
}

fn env<'a>(c: &'a Container, name: &str) -> Option<&'a EnvVar> {
    c.env.iter().flatten().find(|e| e.name == name)
}

#[test]
fn use_graphbolt_reaches_dglrun_only_when_set() {
    let mut j = seed();
    let cfg = BuildConfig::default();
    let pod = worker_pod(&valid(&j), 0, 0, &cfg);
    assert!(env(main_container(&pod), ENV_USE_GRAPHBOLT).is_none());
    j.spec.use_graphbolt = Some(true);
    for pod in [
        worker_pod(&valid(&j), 0, 0, &cfg),
        launcher_pod(&valid(&j), 0, &cfg),
    ] {
        let e = env(main_container(&pod), ENV_USE_GRAPHBOLT).unwrap();
        assert_eq!(e.value.as_deref(), Some("true"));
    }
}

#[test]
fn worker_keeps_template_and_adds_runtime() {
    let mut j = seed();
    let w = j
        .spec
        .dgl_replica_specs
        .get_mut(&ReplicaType::Worker)
        .unwrap();
    let c = &mut w.template.spec.as_mut().unwrap().containers[0];
    c.resources = Some(ResourceRequirements {
        limits: Some(BTreeMap::from([("memory".into(), Quantity("4Gi".into()))])),
        ..Default::default()
    });
    c.env = Some(vec![env_value("USER_VAR", "kept")]);
    let pod = worker_pod(&valid(&j), 1, 0, &BuildConfig::default());
    assert_eq!(pod.metadata.name.as_deref(), Some("dgl-graphsage-worker-1"));
    let labels = pod.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_JOB_NAME], "dgl-graphsage");
    assert_eq!(labels[LABEL_REPLICA_TYPE], "worker");
    assert_eq!(labels[LABEL_REPLICA_INDEX], "1");
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.kind, "DGLJob");
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let c = main_container(&pod);
    assert_eq!(c.image.as_deref(), Some("dgloperator/graphsage:v0.1.0"));
    assert_eq!(c.command.as_deref(), Some(&["dglrun".to_string()][..]));
    assert_eq!(env(c, "USER_VAR").unwrap().value.as_deref(), Some("kept"));
    assert_eq!(env(c, ENV_ROLE).unwrap().value.as_deref(), Some("Worker"));
    assert_eq!(
        env(c, ENV_WORKER_INDEX).unwrap().value.as_deref(),
        Some("1")
    );
    // /dev/shm is memory-backed, sized at half the 4Gi limit.
    let shm = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == SHM_VOLUME)
        .unwrap();
    let ed = shm.empty_dir.as_ref().unwrap();
    assert_eq!(ed.medium.as_deref(), Some("Memory"));
    assert_eq!(ed.size_limit.as_ref().unwrap().0, "2147483648");
    assert!(mounts_at(c, "/dev/shm"));
    assert!(mounts_at(c, SECRET_DIR) && mounts_at(c, DATASET_PATH));
    // Only the launcher reads the ConfigMap, which exists once a run is
    // launched: a worker mounting it could not start before that.
    assert!(!mounts_at(c, CONFIG_DIR));
    assert!(!spec
        .volumes
        .iter()
        .flatten()
        .any(|v| v.name == CONFIG_VOLUME));
    assert!(c.readiness_probe.is_some());
}

#[test]
fn worker_respects_own_shm_and_workspace_mounts() {
    let mut j = seed();
    let w = j
        .spec
        .dgl_replica_specs
        .get_mut(&ReplicaType::Worker)
        .unwrap();
    let spec = w.template.spec.as_mut().unwrap();
    spec.volumes = Some(vec![Volume {
        name: "mine".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }]);
    let c = &mut spec.containers[0];
    add_mount(c, "mine", "/dev/shm", false);
    add_mount(c, "mine", "/dgl_workspace", false);
    let pod = worker_pod(&valid(&j), 0, 0, &BuildConfig::default());
    let spec = pod.spec.as_ref().unwrap();
    assert!(!spec.volumes.iter().flatten().any(|v| v.name == SHM_VOLUME));
    assert!(!spec
        .volumes
        .iter()
        .flatten()
        .any(|v| v.name == DATASET_VOLUME));
}

#[test]
fn every_pod_tells_dglrun_its_run_as_its_label_says() {
    let (j, cfg) = (seed(), BuildConfig::default());
    for run in [0, 3] {
        let pods = [
            partitioner_pod(&valid(&j), run, &cfg),
            worker_pod(&valid(&j), 1, run, &cfg),
            launcher_pod(&valid(&j), run, &cfg),
        ];
        for pod in pods {
            let e = env(main_container(&pod), ENV_RUN).unwrap();
            assert_eq!(e.value.as_deref(), Some(run.to_string().as_str()));
            assert_eq!(e.value.as_ref(), Some(&pod.labels()[LABEL_RUN]));
            let parsed: dgl_api::wire::Run = e.value.as_deref().unwrap().parse().unwrap();
            assert_eq!(parsed, dgl_api::wire::Run(run as u32));
        }
    }
}

#[test]
fn partitioner_runs_the_launchers_command_on_the_worker_template() {
    let pod = partitioner_pod(&valid(&seed()), 0, &BuildConfig::default());
    assert_eq!(
        pod.metadata.name.as_deref(),
        Some("dgl-graphsage-partitioner")
    );
    let c = main_container(&pod);
    assert_eq!(c.command.as_deref(), Some(&["dglrun".to_string()][..]));
    assert_eq!(c.args.as_ref().unwrap()[1], "graphsage");
    assert_eq!(
        env(c, ENV_ROLE).unwrap().value.as_deref(),
        Some("Partitioner")
    );
}

#[test]
fn launcher_waits_for_workers_with_least_privilege() {
    let j = seed();
    let pod = launcher_pod(&valid(&j), 0, &BuildConfig::default());
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some("dgl-graphsage-launcher")
    );
    let init = &spec.init_containers.as_ref().unwrap()[0];
    assert_eq!(
        init.command.as_deref(),
        Some(&["watcher-loop".to_string()][..])
    );
    assert_eq!(init.image.as_deref(), Some("dgloperator/graphsage:v0.1.0"));
    // It waits for the ConfigMap to launch its own run (3 here), read
    // through the API, and writes the files where dglrun reads them.
    let init_env = |name: &str| env(init, name).and_then(|e| e.value.clone());
    let pod3 = launcher_pod(&valid(&j), 3, &BuildConfig::default());
    let init3 = &pod3
        .spec
        .as_ref()
        .unwrap()
        .init_containers
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        env(init3, ENV_WATCHER_RUN)
            .and_then(|e| e.value.clone())
            .as_deref(),
        Some("3")
    );
    assert_eq!(
        init_env(ENV_WATCHER_CONFIG_MAP).as_deref(),
        Some("dgl-graphsage-config")
    );
    assert_eq!(
        init_env(ENV_WATCHER_CONFIG_DIR).as_deref(),
        Some(CONFIG_DIR)
    );
    assert_eq!(
        init_env(ENV_WATCHER_FILE).as_deref(),
        Some("/etc/dgl/hostfile")
    );
    let writable = init.volume_mounts.iter().flatten().any(|m| {
        m.name == CONFIG_VOLUME && m.mount_path == CONFIG_DIR && m.read_only != Some(true)
    });
    assert!(writable, "watcher-loop writes the files");
    let config = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == CONFIG_VOLUME);
    let config = config.unwrap();
    assert!(config.config_map.is_none() && config.empty_dir.is_some());
    assert!(mounts_at(main_container(&pod), CONFIG_DIR));
    let (_, role, binding) = launcher_rbac(&valid(&j));
    let rules = role.rules.unwrap();
    assert_eq!(rules.len(), 3);
    assert_eq!(rules[0].resources.as_deref().unwrap(), ["configmaps"]);
    assert_eq!(rules[0].verbs, vec!["get", "list", "watch"]);
    assert_eq!(
        rules[0].resource_names.as_deref().unwrap(),
        ["dgl-graphsage-config"]
    );
    assert_eq!(rules[1].resources.as_deref().unwrap(), ["pods"]);
    assert_eq!(rules[1].verbs, vec!["get", "list", "watch"]);
    // Not named: watcher-loop waits on every worker with one watch.
    assert_eq!(rules[1].resource_names, None);
    // Its own pod only, for the progress annotation.
    assert_eq!(rules[2].verbs, vec!["patch"]);
    assert_eq!(
        rules[2].resource_names.as_deref().unwrap(),
        ["dgl-graphsage-launcher"]
    );
    assert_eq!(binding.role_ref.name, "dgl-graphsage-launcher");
}

#[test]
fn a_standalone_launcher_trains_alone_and_may_only_patch_itself() {
    let mut j = seed();
    j.spec.partition_mode = PartitionMode::Skip;
    j.spec.dgl_replica_specs.remove(&ReplicaType::Worker);
    let pod = launcher_pod(&valid(&j), 0, &BuildConfig::default());
    let spec = pod.spec.as_ref().unwrap();
    assert!(spec.init_containers.is_none(), "no workers to wait for");
    assert_eq!(spec.automount_service_account_token, Some(true));
    let c = main_container(&pod);
    // dglrun reads DGL_OPERATOR_NUM_WORKERS=0 as "train alone".
    assert_eq!(env(c, ENV_NUM_WORKERS).unwrap().value.as_deref(), Some("0"));
    assert_eq!(
        c.args.as_ref().unwrap()[1],
        "graphsage",
        "the template's args kept"
    );
    // Nothing to wait for: no read rule at all.
    let (_, role, _) = launcher_rbac(&valid(&j));
    let rules = role.rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].verbs, ["patch"]);
    assert_eq!(
        rules[0].resource_names.as_deref().unwrap(),
        ["dgl-graphsage-launcher"]
    );
    for launch in [None, Some(0)] {
        let cm = config_map(&valid(&j), &[], launch);
        let keys: Vec<&String> = cm.data.as_ref().unwrap().keys().collect();
        assert_eq!(keys, [LEADFILE], "no hostfile, no ip_config");
    }
    // It reads that ConfigMap as a volume: nothing to wait for.
    let config = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == CONFIG_VOLUME);
    assert!(config.unwrap().config_map.is_some());
    let group = pod_group(&valid(&j), GangScheduler::Volcano);
    assert_eq!(group.data["spec"]["minMember"], 1);
}

#[test]
fn only_a_distparmetis_launcher_is_ready_when_partitioned() {
    let probe = |mode| {
        let mut j = seed();
        j.spec.partition_mode = mode;
        let pod = launcher_pod(&valid(&j), 0, &BuildConfig::default());
        let spec = pod.spec.unwrap();
        let c = spec.containers[0].clone();
        let state = spec
            .volumes
            .unwrap_or_default()
            .into_iter()
            .any(|v| v.name == LAUNCHER_STATE_VOLUME && v.empty_dir.is_some());
        let mounted = mounts_at(&c, LAUNCHER_STATE_DIR);
        (c.readiness_probe, mounted, state)
    };
    let (p, mounted, volume) = probe(PartitionMode::DistParMetis);
    let cmd = p.and_then(|p| p.exec).and_then(|e| e.command).unwrap();
    assert_eq!(cmd, ["dglrun", "probe", "--partitioned"]);
    assert!(mounted && volume);
    assert_eq!(probe(PartitionMode::DglApi), (None, false, false));
}

#[test]
fn config_map_lists_workers_in_index_order_and_ip_config_when_complete() {
    let mut j = seed();
    j.spec
        .dgl_replica_specs
        .get_mut(&ReplicaType::Worker)
        .unwrap()
        .replicas = Some(11);
    let pod = |i: i32, ip: Option<&str>| ObservedPod {
        name: worker_name("dgl-graphsage", i),
        role: ReplicaType::Worker,
        index: i,
        epoch: 0,
        state: PodState::Running { ready: true },
        ip: ip.map(String::from),
        progress: None,
        facts: Default::default(),
        not_starting: None,
        cache_lookup: None,
    };
    let mut pods: Vec<ObservedPod> = (0..11)
        .map(|i| pod(i, Some(&format!("10.0.0.{}", 100 + i)).map(|s| s.as_str())))
        .collect();
    pods[10].ip = None;
    let cm = config_map(&valid(&j), &pods, Some(0));
    let data = cm.data.as_ref().unwrap();
    let lines: Vec<&str> = data[HOSTFILE].lines().collect();
    assert_eq!(lines[2], "10.0.0.102 30049 dgl-graphsage-worker-2 slots=1");
    assert_eq!(lines[10], "- 30049 dgl-graphsage-worker-10 slots=1");
    assert!(!data.contains_key(IP_CONFIG));
    pods[10].ip = Some("10.0.0.110".into());
    let cm2 = config_map(&valid(&j), &pods, Some(0));
    let ipc = &cm2.data.as_ref().unwrap()[IP_CONFIG];
    assert_eq!(ipc.lines().nth(10), Some("10.0.0.110 30050"));
    assert_ne!(
        cm.annotations()[HASH_ANNOTATION],
        cm2.annotations()[HASH_ANNOTATION]
    );
}

#[test]
fn the_config_map_holds_ips_and_its_run_only_when_it_launches() {
    let j = seed();
    let observed = |name: String, role: ReplicaType, index: i32, ip: Option<&str>| ObservedPod {
        name,
        role,
        index,
        epoch: 0,
        state: PodState::Running { ready: true },
        ip: ip.map(String::from),
        progress: None,
        facts: Default::default(),
        not_starting: None,
        cache_lookup: None,
    };
    let mut pods: Vec<ObservedPod> = (0..2)
        .map(|i| {
            let name = worker_name("dgl-graphsage", i);
            observed(name, ReplicaType::Worker, i, Some(&format!("10.0.0.{i}")))
        })
        .collect();
    pods.push(observed(
        partitioner_name("dgl-graphsage"),
        ReplicaType::Partitioner,
        0,
        Some("10.0.0.5"),
    ));
    // Before the launch: names only, the same however far the pods are.
    let start = config_map(&valid(&j), &[], None);
    let waiting = config_map(&valid(&j), &pods, None);
    assert_eq!(start, waiting, "no write per pod coming up");
    let data = start.data.clone().unwrap();
    assert!(!data.contains_key(IP_CONFIG) && !data.contains_key(CONFIG_RUN));
    assert_eq!(data[PARTFILE], "- 30049 dgl-graphsage-partitioner\n");
    assert!(!start.metadata.labels.unwrap().contains_key(LABEL_RUN));
    // The launch of run 2: every IP, ip_config and the run (also as a
    // label: the operator's metadata-only cache reads it).
    let launch = config_map(&valid(&j), &pods, Some(2));
    assert_eq!(launch.labels()[LABEL_RUN], "2");
    let data = launch.data.unwrap();
    assert_eq!(data[CONFIG_RUN], "2");
    assert_eq!(data[IP_CONFIG], "10.0.0.0 30050\n10.0.0.1 30050\n");
    assert_eq!(data[PARTFILE], "10.0.0.5 30049 dgl-graphsage-partitioner\n");
}

#[test]
fn the_launchers_ip_does_not_change_the_config_map() {
    let j = seed();
    let launcher = |ip: Option<&str>| ObservedPod {
        name: launcher_name("dgl-graphsage"),
        role: ReplicaType::Launcher,
        index: 0,
        epoch: 0,
        state: PodState::Running { ready: false },
        ip: ip.map(String::from),
        progress: None,
        facts: Default::default(),
        not_starting: None,
        cache_lookup: None,
    };
    let before = config_map(&valid(&j), &[launcher(None)], Some(0));
    let after = config_map(&valid(&j), &[launcher(Some("10.0.0.9"))], Some(0));
    assert_eq!(
        before.annotations()[HASH_ANNOTATION],
        after.annotations()[HASH_ANNOTATION],
        "no rewrite when the launcher gets its IP"
    );
    assert_eq!(
        after.data.as_ref().unwrap()[LEADFILE],
        "- 30049 dgl-graphsage-launcher\n"
    );
}

#[test]
fn the_network_policy_admits_only_the_jobs_own_pods() {
    let j = seed();
    let first = AdmittedRuns {
        current: 0,
        kept_partitioner: None,
    };
    let np = network_policy(&valid(&j), first);
    let mut got = serde_json::to_value(&np).unwrap();
    let hash = got["metadata"]["annotations"][HASH_ANNOTATION].take();
    assert!(hash.is_string());
    let labels = serde_json::json!({
        "app.kubernetes.io/managed-by": "dgl-operator",
        "dgloperator.io/job-name": "dgl-graphsage",
    });
    let mut of_run_0 = labels.clone();
    of_run_0["dgloperator.io/run"] = "0".into();
    let expected = serde_json::json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "dgl-graphsage-network",
            "namespace": "ns",
            "labels": labels,
            "annotations": {HASH_ANNOTATION: null},
            "ownerReferences": [{
                "apiVersion": "dgloperator.io/v1alpha1",
                "kind": "DGLJob",
                "name": "dgl-graphsage",
                "uid": "uid-1",
                "controller": true,
            }],
        },
        "spec": {
            "podSelector": {"matchLabels": labels},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": of_run_0}}]}],
        },
    });
    assert_eq!(got, expected);
    // Every pod of the job, in every role, is selected.
    let cfg = BuildConfig::default();
    for pod in [
        partitioner_pod(&valid(&j), 0, &cfg),
        worker_pod(&valid(&j), 1, 0, &cfg),
        launcher_pod(&valid(&j), 0, &cfg),
    ] {
        let pod_labels = pod.metadata.labels.unwrap();
        for (k, v) in np
            .spec
            .as_ref()
            .unwrap()
            .pod_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()
        {
            assert_eq!(pod_labels.get(k), Some(v), "{k}");
        }
    }
}

/// A pod of the job by role and run, as the operator's cache sees it.
fn pod_of_run(name: &str, role: ReplicaType, epoch: i32, state: PodState) -> ObservedPod {
    ObservedPod {
        name: name.into(),
        role,
        index: 0,
        epoch,
        state,
        ip: None,
        progress: None,
        facts: Default::default(),
        not_starting: None,
        cache_lookup: None,
    }
}

/// `matchLabels` of each `from` peer of the policy's one ingress rule.
fn peers(np: &k8s_openapi::api::networking::v1::NetworkPolicy) -> Vec<BTreeMap<String, String>> {
    let rule = &np.spec.as_ref().unwrap().ingress.as_ref().unwrap()[0];
    let from = rule.from.as_ref().unwrap();
    from.iter()
        .map(|p| p.pod_selector.clone().unwrap().match_labels.unwrap())
        .collect()
}

#[test]
fn after_a_restart_the_policy_admits_the_new_run_and_the_kept_partitioner_only() {
    let j = seed();
    let running = PodState::Running { ready: true };
    let partitioner = partitioner_name("dgl-graphsage");
    let pods = [
        pod_of_run(&partitioner, ReplicaType::Partitioner, 0, running.clone()),
        pod_of_run(
            "dgl-graphsage-worker-0",
            ReplicaType::Worker,
            0,
            running.clone(),
        ),
        pod_of_run(
            "dgl-graphsage-worker-1",
            ReplicaType::Worker,
            1,
            running.clone(),
        ),
    ];
    // Run 1, the partitioner of run 0 kept: its pods and that partitioner.
    let runs = AdmittedRuns::after(Some(1), &pods, &[]);
    assert_eq!(runs.kept_partitioner, Some(0));
    let got = peers(&network_policy(&valid(&j), runs));
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0][LABEL_RUN], "1");
    assert!(!got[0].contains_key(LABEL_REPLICA_TYPE));
    assert_eq!(got[1][LABEL_RUN], "0");
    assert_eq!(got[1][LABEL_REPLICA_TYPE], "partitioner");
    for peer in &got {
        assert_eq!(peer[LABEL_JOB_NAME], "dgl-graphsage");
    }
    // A worker of run 0 matches no peer: refused.
    let old_worker = worker_pod(&valid(&j), 0, 0, &BuildConfig::default());
    let labels = old_worker.metadata.labels.unwrap();
    assert!(got
        .iter()
        .all(|peer| peer.iter().any(|(k, v)| labels.get(k) != Some(v))));

    // A partitioner this plan deletes, or one being deleted (lost with its
    // node), is not kept: only the new run is admitted.
    let delete = [crate::pure::plan::Step::DeletePod(partitioner.clone())];
    assert_eq!(
        AdmittedRuns::after(Some(1), &pods, &delete).kept_partitioner,
        None
    );
    let mut terminating = pods.clone();
    terminating[0].state = PodState::Terminating;
    let runs = AdmittedRuns::after(Some(1), &terminating, &[]);
    assert_eq!(runs.kept_partitioner, None);
    assert_eq!(peers(&network_policy(&valid(&j), runs)).len(), 1);
    // The first run's own partitioner is the current run's, not a kept one.
    assert_eq!(
        AdmittedRuns::after(None, &pods[..1], &[]).kept_partitioner,
        None
    );
}

#[test]
fn quantities() {
    assert_eq!(parse_quantity_bytes("512Mi"), Some(512 * 1024 * 1024));
    assert_eq!(parse_quantity_bytes("2G"), Some(2_000_000_000));
    assert_eq!(parse_quantity_bytes("1e9"), Some(1_000_000_000));
    assert_eq!(parse_quantity_bytes("bad"), None);
}

fn watcher_env(j: &DGLJob) -> Option<String> {
    let pod = launcher_pod(&valid(j), 0, &BuildConfig::default());
    let init = pod.spec.unwrap().init_containers.unwrap();
    let w = init.iter().find(|c| c.name == WATCHER_CONTAINER).unwrap();
    w.env
        .iter()
        .flatten()
        .find(|e| e.name == ENV_WATCHER_TIMEOUT)
        .and_then(|e| e.value.clone())
}

/// The launcher's watcher-loop gives up (exit 3) at the job's
/// activeDeadlineSeconds (issue #36 item 2): it cannot outlive the job.
#[test]
fn the_watcher_times_out_at_the_jobs_active_deadline() {
    let mut j = seed();
    assert_eq!(watcher_env(&j), None, "no deadline, no timeout");
    j.spec.run_policy = Some(dgl_api::RunPolicy {
        active_deadline_seconds: Some(3600),
        ..Default::default()
    });
    assert_eq!(watcher_env(&j).as_deref(), Some("3600s"));
}

/// `spec.partitionCache`: the launcher looks the partitions up first, in
/// its own image with dglrun's lookup role and no probe; every pod gets the
/// cache's URL and the credentials Secret by name.
#[test]
fn a_cached_job_looks_up_first_and_every_pod_gets_the_cache() {
    let mut j = seed();
    j.spec.partition_mode = PartitionMode::ParMetis;
    j.spec.partition_cache = Some(dgl_api::PartitionCacheSpec {
        url: "s3://graphs/cache".into(),
        credentials_secret: Some("cache-keys".into()),
    });
    let cfg = BuildConfig::default();
    let v = valid(&j);
    let launcher = launcher_pod(&v, 0, &cfg);
    let spec = launcher.spec.as_ref().unwrap();
    let inits = spec.init_containers.as_ref().unwrap();
    assert_eq!(inits[0].name, CACHE_LOOKUP_CONTAINER);
    assert_eq!(inits[1].name, WATCHER_CONTAINER);
    let lookup = &inits[0];
    let main = &spec.containers[0];
    assert_eq!((&lookup.image, &lookup.args), (&main.image, &main.args));
    assert_eq!(
        env(lookup, ENV_ROLE).and_then(|e| e.value.as_deref()),
        Some(ROLE_CACHE_LOOKUP)
    );
    assert!(lookup.readiness_probe.is_none() && lookup.ports.is_none());
    assert!(mounts_at(lookup, LAUNCHER_STATE_DIR) && mounts_at(main, LAUNCHER_STATE_DIR));
    for pod in [
        launcher,
        worker_pod(&v, 1, 0, &cfg),
        partitioner_pod(&v, 0, &cfg),
    ] {
        let c = main_container(&pod);
        let url = env(c, ENV_PARTITION_CACHE).and_then(|e| e.value.as_deref());
        assert_eq!(url, Some("s3://graphs/cache"), "{}", pod.name_any());
        let secret = c
            .env_from
            .iter()
            .flatten()
            .filter_map(|e| e.secret_ref.as_ref());
        let names: Vec<_> = secret.map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["cache-keys"], "{}", pod.name_any());
    }
    // Without the field nothing of it appears.
    let plain = launcher_pod(&valid(&seed()), 0, &cfg);
    assert!(env(main_container(&plain), ENV_PARTITION_CACHE).is_none());
    let inits = plain.spec.unwrap().init_containers.unwrap();
    assert!(inits.iter().all(|c| c.name != CACHE_LOOKUP_CONTAINER));
}
