//! Desired objects, computed from the job alone: plain functions, no I/O.
//!
//! The user's pod templates are kept (image, resources, volumes, env); the
//! operator only adds what its programs need: env, volumes, labels, ports, a
//! readiness probe and a command where the template has none.

use std::collections::BTreeMap;

use dgl_api::files::{render_hosts, render_ip_config, HostLine};
use dgl_api::names::*;
use dgl_api::{DGLJob, PartitionMode, ReplicaType};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, ExecAction, ObjectFieldSelector, Pod, PodSpec, Probe, ResourceRequirements,
    Secret, SecretVolumeSource, ServiceAccount, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::ByteString;
use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use crate::observe::ObservedPod;

/// Annotation holding the hash of what the operator last applied to a child,
/// so an unchanged child is not written again.
pub const HASH_ANNOTATION: &str = "dgloperator.io/applied-hash";

/// Volume names the operator adds.
pub const CONFIG_VOLUME: &str = "dgl-config";
pub const TOKEN_VOLUME: &str = "dgl-token";
pub const SHM_VOLUME: &str = "dgl-shm";
pub const DATASET_VOLUME: &str = "dgl-dataset";
/// The launcher's state folder (DistParMETIS: the "partitioned" marker).
pub const LAUNCHER_STATE_VOLUME: &str = "dgl-launcher-state";

/// Operator-wide settings that shape the children.
#[derive(Debug, Clone, Default)]
pub struct BuildConfig {
    /// Image for the launcher's watcher-loop init container; default: the
    /// launcher's own image (the runtime binaries ship in the training image).
    pub watcher_image: Option<String>,
    /// Gang scheduler in use, if any.
    pub gang: Option<GangScheduler>,
    /// ServiceAccounts no job's pod may run as (the operator's own first).
    pub protected_service_accounts: Vec<crate::validate::ProtectedServiceAccount>,
    /// Give every job a NetworkPolicy admitting only its own pods
    /// ([`network_policy`]).
    pub network_policy: bool,
}

/// Supported gang schedulers (their PodGroup CRDs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GangScheduler {
    /// `podgroups.scheduling.volcano.sh`
    Volcano,
    /// `podgroups.scheduling.x-k8s.io` (kubernetes-sigs/scheduler-plugins)
    SchedulerPlugins,
}

impl GangScheduler {
    /// The API group of its PodGroup.
    pub fn group(self) -> &'static str {
        match self {
            GangScheduler::Volcano => "scheduling.volcano.sh",
            GangScheduler::SchedulerPlugins => "scheduling.x-k8s.io",
        }
    }

    /// The version of its PodGroup this operator writes.
    pub fn version(self) -> &'static str {
        match self {
            GangScheduler::Volcano => "v1beta1",
            GangScheduler::SchedulerPlugins => "v1alpha1",
        }
    }

    /// The name of its PodGroup CRD, which tells whether it is installed.
    pub fn crd_name(self) -> String {
        format!("podgroups.{}", self.group())
    }

    /// Its PodGroup resource, for an untyped API.
    pub fn pod_group_resource(self) -> ApiResource {
        let gvk = GroupVersionKind::gvk(self.group(), self.version(), "PodGroup");
        ApiResource::from_gvk_with_plural(&gvk, "podgroups")
    }
}

/// The controller ownerReference every child carries.
pub fn owner_ref(job: &DGLJob) -> OwnerReference {
    job.controller_owner_ref(&())
        .expect("a DGLJob from the API server has a name and uid")
}

/// Labels every child of a job carries.
pub fn job_labels(job: &DGLJob) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_JOB_NAME.to_string(), job.name_any()),
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
    ])
}

fn meta(job: &DGLJob, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: job.namespace(),
        labels: Some(labels),
        owner_references: Some(vec![owner_ref(job)]),
        ..Default::default()
    }
}

/// Stamps the hash of an object's content into its annotations.
pub fn with_hash<T: serde::Serialize + Resource>(mut obj: T) -> T {
    let json = serde_json::to_vec(&obj).expect("k8s objects serialize");
    let hash = hex::encode(&Sha256::digest(&json)[..12]);
    obj.annotations_mut()
        .insert(HASH_ANNOTATION.to_string(), hash);
    obj
}

/// `<job>-config`: hostfile, partfile, leadfile (the launcher's name; its
/// IP is never written); workers listed by index (partition order).
///
/// `launch`: the run this ConfigMap launches. `None` gives the content the
/// job starts with, a function of the spec alone (names, no IPs), so that
/// pods coming up do not cost a write each. `Some(run)` adds every IP the
/// pods have, DGL's ip_config once every worker has one, and
/// [`CONFIG_RUN`]: the launcher's watcher-loop starts training only when it
/// reads its own run there.
pub fn config_map(job: &DGLJob, pods: &[ObservedPod], launch: Option<i32>) -> ConfigMap {
    let name = job.name_any();
    let ip_of = |pod_name: &str| {
        launch?;
        pods.iter()
            .find(|p| p.name == pod_name)
            .and_then(|p| p.ip.as_deref())
            .and_then(|ip| ip.parse().ok())
    };
    let workers: Vec<HostLine> = (0..job.spec.num_workers())
        .map(|i| {
            let pod = worker_name(&name, i);
            HostLine {
                ip: ip_of(&pod),
                port: AGENT_PORT,
                pod,
                slots: Some(job.spec.slots_per_worker() as u32),
            }
        })
        .collect();
    let single = |pod: String| {
        render_hosts(&[HostLine {
            ip: ip_of(&pod),
            port: AGENT_PORT,
            pod,
            slots: None,
        }])
    };
    // The leadfile names the launcher without its IP: nothing reads that
    // IP, and writing it would cost every job one more ConfigMap write.
    let lead = render_hosts(&[HostLine {
        ip: None,
        port: AGENT_PORT,
        pod: launcher_name(&name),
        slots: None,
    }]);
    let mut data = BTreeMap::from([(LEADFILE.to_string(), lead)]);
    // A job without workers has no hostfile and no ip_config: its launcher
    // trains alone, reading this ConfigMap as a volume (nothing to wait for).
    if job.spec.is_standalone() {
        return with_hash(ConfigMap {
            metadata: meta(job, config_name(&name), job_labels(job)),
            data: Some(data),
            ..Default::default()
        });
    }
    data.insert(HOSTFILE.to_string(), render_hosts(&workers));
    if job.spec.has_partitioner() {
        data.insert(PARTFILE.to_string(), single(partitioner_name(&name)));
    }
    let ips: Option<Vec<_>> = workers
        .iter()
        .map(|w| w.ip.map(|ip| (ip, DGL_SERVER_PORT)))
        .collect();
    if let Some(ips) = ips {
        data.insert(IP_CONFIG.to_string(), render_ip_config(&ips));
    }
    let mut labels = job_labels(job);
    if let Some(run) = launch {
        data.insert(CONFIG_RUN.to_string(), run.to_string());
        // Also in the metadata, which the operator's cache keeps: once a run
        // is launched, a pod of it replaced is a failure of that run.
        labels.insert(LABEL_RUN.to_string(), run.to_string());
    }
    with_hash(ConfigMap {
        metadata: meta(job, config_name(&name), labels),
        data: Some(data),
        ..Default::default()
    })
}

/// `<job>-token`: the control channel's shared secret. Created once with a
/// random token and never rewritten (rewriting would cut running pods off).
pub fn secret(job: &DGLJob, token: &str) -> Secret {
    Secret {
        metadata: meta(job, secret_name(&job.name_any()), job_labels(job)),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            SECRET_TOKEN_KEY.to_string(),
            ByteString(token.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

/// ServiceAccount, Role and RoleBinding of the launcher: its watcher-loop
/// init container reads (get/list/watch) the job's ConfigMap and worker
/// pods, named by resourceNames, and dglrun patches its own pod (the
/// training's progress annotation). Nothing else: no exec, no other writes,
/// no cluster-wide rights.
pub fn launcher_rbac(job: &DGLJob) -> (ServiceAccount, Role, RoleBinding) {
    let job_name = job.name_any();
    let name = rbac_name(&job_name, ReplicaType::Launcher);
    let workers: Vec<String> = (0..job.spec.num_workers())
        .map(|i| worker_name(&job_name, i))
        .collect();
    let sa = with_hash(ServiceAccount {
        metadata: meta(job, name.clone(), job_labels(job)),
        automount_service_account_token: Some(false),
        ..Default::default()
    });
    let rule = |resource: &str, verbs: &[&str], names: Vec<String>| PolicyRule {
        api_groups: Some(vec!["".into()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        resource_names: Some(names),
        ..Default::default()
    };
    let read = ["get", "list", "watch"];
    let mut rules = vec![rule("pods", &["patch"], vec![launcher_name(&job_name)])];
    // No workers, no read rules: an empty resourceNames would grant every
    // pod, and a launcher training alone reads its ConfigMap as a volume.
    if !workers.is_empty() {
        rules.insert(0, rule("pods", &read, workers));
        rules.insert(0, rule("configmaps", &read, vec![config_name(&job_name)]));
    }
    let role = with_hash(Role {
        metadata: meta(job, name.clone(), job_labels(job)),
        rules: Some(rules),
    });
    let binding = with_hash(RoleBinding {
        metadata: meta(job, name.clone(), job_labels(job)),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name,
            namespace: job.namespace(),
            ..Default::default()
        }]),
    });
    (sa, role, binding)
}

/// `<job>-network`: the job's pods take traffic (any port) from the job's
/// own pods only; their egress is not restricted (DNS, the API server for
/// the launcher's watcher-loop, the user's data). Enforced only where the
/// cluster's network plugin implements NetworkPolicy.
pub fn network_policy(job: &DGLJob) -> NetworkPolicy {
    let pods = LabelSelector {
        match_labels: Some(job_labels(job)),
        ..Default::default()
    };
    with_hash(NetworkPolicy {
        metadata: meta(job, network_policy_name(&job.name_any()), job_labels(job)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(pods.clone()),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(pods),
                    ..Default::default()
                }]),
                ports: None,
            }]),
            egress: None,
        }),
    })
}

fn env_value(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

fn env_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Sets env vars on a container; the operator's values win over the template's.
fn set_env(c: &mut Container, vars: Vec<EnvVar>) {
    let env = c.env.get_or_insert_with(Vec::new);
    for v in vars {
        env.retain(|e| e.name != v.name);
        env.push(v);
    }
}

fn mounts_at(c: &Container, path: &str) -> bool {
    c.volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path.trim_end_matches('/') == path)
}

fn add_mount(c: &mut Container, name: &str, path: &str, read_only: bool) {
    c.volume_mounts
        .get_or_insert_with(Vec::new)
        .push(VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            read_only: read_only.then_some(true),
            ..Default::default()
        });
}

fn add_volume(spec: &mut PodSpec, v: Volume) {
    let vols = spec.volumes.get_or_insert_with(Vec::new);
    if !vols.iter().any(|x| x.name == v.name) {
        vols.push(v);
    }
}

fn add_port(c: &mut Container, name: &str, port: u16) {
    let ports = c.ports.get_or_insert_with(Vec::new);
    if !ports.iter().any(|p| p.container_port == port as i32) {
        ports.push(ContainerPort {
            name: Some(name.into()),
            container_port: port as i32,
            protocol: Some("TCP".into()),
            ..Default::default()
        });
    }
}

/// Size of the worker's /dev/shm: half the main container's memory limit
/// (docs/user-guide.md; DGL servers and trainers share the partition there; the
/// container default of 64 MiB fails later as a SIGBUS).
pub fn shm_size_limit(resources: Option<&ResourceRequirements>) -> Option<Quantity> {
    let limit = resources?.limits.as_ref()?.get("memory")?;
    let bytes = parse_quantity_bytes(&limit.0)?;
    Some(Quantity(format!("{}", bytes / 2)))
}

/// Parses a memory quantity (`512Mi`, `2G`, `1e9`, `1073741824`) into bytes.
pub fn parse_quantity_bytes(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let mult: f64 = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "m" => 1e-3,
        _ => return None,
    };
    let n: f64 = num.parse().ok()?;
    (n >= 0.0).then_some((n * mult) as u64)
}

fn readiness_probe() -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["dglrun".into(), "probe".into(), "--ready".into()]),
        }),
        period_seconds: Some(2),
        failure_threshold: Some(1),
        ..Default::default()
    }
}

/// The common part of every pod: template kept, labels, env, config + token
/// volumes, `restartPolicy: Never`.
fn base_pod(
    job: &DGLJob,
    role: ReplicaType,
    index: i32,
    epoch: i32,
    template_role: ReplicaType,
    cfg: &BuildConfig,
) -> Pod {
    let job_name = job.name_any();
    let template = job
        .spec
        .replica_spec(template_role)
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let mut labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.extend(job_labels(job));
    labels.insert(LABEL_REPLICA_TYPE.into(), role.label_value().into());
    labels.insert(LABEL_REPLICA_INDEX.into(), index.to_string());
    labels.insert(LABEL_RUN.into(), epoch.to_string());
    let mut annotations = template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    spec.restart_policy = Some("Never".into());
    if let Some(gang) = cfg.gang {
        match gang {
            GangScheduler::Volcano => {
                annotations.insert("scheduling.k8s.io/group-name".into(), job_name.clone());
                spec.scheduler_name.get_or_insert_with(|| "volcano".into());
            }
            GangScheduler::SchedulerPlugins => {
                labels.insert(format!("{}/pod-group", gang.group()), job_name.clone());
            }
        }
    }
    add_config_and_token(&mut spec, job, role);
    if let Some(c) = spec.containers.first_mut() {
        set_env(c, pod_env(job, role, index));
        if c.command.as_ref().is_none_or(|cmd| cmd.is_empty()) {
            c.command = Some(vec!["dglrun".into()]);
        }
        if role == ReplicaType::Launcher && !mounts_at(c, CONFIG_DIR) {
            add_mount(c, CONFIG_VOLUME, CONFIG_DIR, true);
        }
        if !mounts_at(c, SECRET_DIR) {
            add_mount(c, TOKEN_VOLUME, SECRET_DIR, true);
        }
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(&job_name, role, index)),
            namespace: job.namespace(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![owner_ref(job)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The job's token Secret as a volume of every pod, and the config volume
/// of the launcher: the job's ConfigMap when it trains alone (created with
/// the job, complete from the start), else an emptyDir that its
/// watcher-loop fills with the launch of its run, read through the API (see
/// [`launcher_pod`]). The partitioner and the workers read nothing from the
/// ConfigMap, which exists only once a run is launched.
fn add_config_and_token(spec: &mut PodSpec, job: &DGLJob, role: ReplicaType) {
    let job_name = job.name_any();
    if role == ReplicaType::Launcher {
        let config = if job.spec.is_standalone() {
            Volume {
                name: CONFIG_VOLUME.into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: config_name(&job_name),
                    ..Default::default()
                }),
                ..Default::default()
            }
        } else {
            Volume {
                name: CONFIG_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }
        };
        add_volume(spec, config);
    }
    add_volume(
        spec,
        Volume {
            name: TOKEN_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret_name(&job_name)),
                default_mode: Some(0o444),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
}

/// The environment dglrun reads in every pod (names in `dgl_api::names`).
fn pod_env(job: &DGLJob, role: ReplicaType, index: i32) -> Vec<EnvVar> {
    let mut env = vec![
        env_value(ENV_ROLE, role.as_str()),
        env_value(ENV_JOB_NAME, job.name_any()),
        env_field(ENV_NAMESPACE, "metadata.namespace"),
        env_field(ENV_POD_NAME, "metadata.name"),
        env_field(ENV_POD_IP, "status.podIP"),
        env_value(ENV_NUM_WORKERS, job.spec.num_workers().to_string()),
        env_value(ENV_PARTITION_MODE, job.spec.partition_mode.as_str()),
        env_value(ENV_CONFIG_DIR, CONFIG_DIR),
        env_value(ENV_TOKEN_FILE, format!("{SECRET_DIR}/{SECRET_TOKEN_KEY}")),
    ];
    if role == ReplicaType::Worker {
        env.push(env_value(ENV_WORKER_INDEX, index.to_string()));
    }
    // Only when asked: the pods of every other job stay as they were.
    if job.spec.use_graphbolt() {
        env.push(env_value(ENV_USE_GRAPHBOLT, "true"));
    }
    env
}

/// Adds the dataset volume (partitions), agent port and readiness probe that
/// the partitioner and the workers share.
fn add_data_plane(spec: &mut PodSpec) {
    let Some(c) = spec.containers.first_mut() else {
        return;
    };
    add_port(c, "dgl-agent", AGENT_PORT);
    if c.readiness_probe.is_none() {
        c.readiness_probe = Some(readiness_probe());
    }
    let need_dataset = !mounts_at(c, DATASET_PATH) && !mounts_at(c, WORKSPACE);
    if need_dataset {
        add_mount(c, DATASET_VOLUME, DATASET_PATH, false);
    }
    // These pods never call the API server.
    spec.automount_service_account_token.get_or_insert(false);
    if need_dataset {
        add_volume(
            spec,
            Volume {
                name: DATASET_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
        );
    }
}

/// `<job>-partitioner`: from the Partitioner template if given, else the
/// Worker template (the training image and the workers' resources) running
/// the Launcher's command and arguments (docs/user-guide.md).
pub fn partitioner_pod(job: &DGLJob, epoch: i32, cfg: &BuildConfig) -> Pod {
    let own_template = job.spec.replica_spec(ReplicaType::Partitioner).is_some();
    let template_role = if own_template {
        ReplicaType::Partitioner
    } else {
        ReplicaType::Worker
    };
    let mut pod = base_pod(job, ReplicaType::Partitioner, 0, epoch, template_role, cfg);
    let spec = pod.spec.as_mut().expect("base_pod sets a spec");
    if !own_template {
        let launcher_main = job
            .spec
            .replica_spec(ReplicaType::Launcher)
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.containers.first());
        if let (Some(c), Some(l)) = (spec.containers.first_mut(), launcher_main) {
            c.command = l.command.clone().or_else(|| Some(vec!["dglrun".into()]));
            c.args = l.args.clone();
            c.ports = None;
        }
    }
    add_data_plane(spec);
    pod
}

/// `<job>-worker-<i>`: holds the DGL servers and trainers under dglrun.
pub fn worker_pod(job: &DGLJob, index: i32, epoch: i32, cfg: &BuildConfig) -> Pod {
    let mut pod = base_pod(
        job,
        ReplicaType::Worker,
        index,
        epoch,
        ReplicaType::Worker,
        cfg,
    );
    let spec = pod.spec.as_mut().expect("base_pod sets a spec");
    add_data_plane(spec);
    if let Some(c) = spec.containers.first_mut() {
        add_port(c, "dgl-server", DGL_SERVER_PORT);
        if !mounts_at(c, "/dev/shm") {
            let size_limit = shm_size_limit(c.resources.as_ref());
            add_mount(c, SHM_VOLUME, "/dev/shm", false);
            add_volume(
                spec,
                Volume {
                    name: SHM_VOLUME.into(),
                    empty_dir: Some(EmptyDirVolumeSource {
                        medium: Some("Memory".into()),
                        size_limit,
                    }),
                    ..Default::default()
                },
            );
        }
    }
    pod
}

/// `<job>-launcher`: created with the workers, so that its image pull and
/// start overlap theirs. Its watcher-loop init container waits until the
/// job's ConfigMap launches this run (read through the API: a ConfigMap
/// volume is refreshed in a running pod only after the kubelet's sync
/// period), writes its files into the pod's `/etc/dgl` (an emptyDir here)
/// and waits for every worker to be Ready; then dglrun drives the whole job
/// and exits with its outcome.
pub fn launcher_pod(job: &DGLJob, epoch: i32, cfg: &BuildConfig) -> Pod {
    let job_name = job.name_any();
    let mut pod = base_pod(
        job,
        ReplicaType::Launcher,
        0,
        epoch,
        ReplicaType::Launcher,
        cfg,
    );
    let spec = pod.spec.as_mut().expect("base_pod sets a spec");
    spec.service_account_name = Some(rbac_name(&job_name, ReplicaType::Launcher));
    // Its token patches its own pod (progress) and, with workers, lets
    // watcher-loop read theirs.
    spec.automount_service_account_token = Some(true);
    if job.spec.is_standalone() {
        // Nothing to wait for: it trains alone.
        return pod;
    }
    let image = cfg
        .watcher_image
        .clone()
        .or_else(|| spec.containers.first().and_then(|c| c.image.clone()));
    let mut watcher = Container {
        name: WATCHER_CONTAINER.into(),
        image,
        command: Some(vec!["watcher-loop".into()]),
        security_context: Some(crate::pod_security::restricted()),
        env: Some(vec![
            env_value(ENV_WATCHER_CONFIG_MAP, config_name(&job_name)),
            env_value(ENV_WATCHER_RUN, epoch.to_string()),
            env_value(ENV_WATCHER_CONFIG_DIR, CONFIG_DIR),
            env_value(ENV_WATCHER_FILE, format!("{CONFIG_DIR}/{HOSTFILE}")),
            env_value(ENV_WATCHER_MODE, "ready"),
            env_field(ENV_WATCHER_NAMESPACE, "metadata.namespace"),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("10m".into())),
                ("memory".into(), Quantity("32Mi".into())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".into(),
                Quantity("128Mi".into()),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    };
    // It writes the ConfigMap's files, complete for this run.
    add_mount(&mut watcher, CONFIG_VOLUME, CONFIG_DIR, false);
    spec.init_containers
        .get_or_insert_with(Vec::new)
        .push(watcher);
    if job.spec.partition_mode == PartitionMode::DistParMetis {
        add_partitioned_probe(spec);
    }
    pod
}

/// DistParMETIS: the launcher drives the workers' partitioning and turns
/// Ready when it is done (a marker in an emptyDir of its own), which is how
/// the operator learns it without any API write from the pod.
fn add_partitioned_probe(spec: &mut PodSpec) {
    add_volume(
        spec,
        Volume {
            name: LAUNCHER_STATE_VOLUME.into(),
            empty_dir: Some(Default::default()),
            ..Default::default()
        },
    );
    let Some(c) = spec.containers.first_mut() else {
        return;
    };
    add_mount(c, LAUNCHER_STATE_VOLUME, LAUNCHER_STATE_DIR, false);
    c.readiness_probe.get_or_insert(Probe {
        exec: Some(ExecAction {
            command: Some(vec![
                "dglrun".into(),
                "probe".into(),
                "--partitioned".into(),
            ]),
        }),
        period_seconds: Some(2),
        failure_threshold: Some(1),
        ..Default::default()
    });
}

/// A PodGroup for the gang scheduler in use (an untyped object: the CRDs are
/// optional and not in k8s-openapi).
pub fn pod_group(job: &DGLJob, gang: GangScheduler) -> kube::api::DynamicObject {
    let total = job
        .spec
        .num_workers()
        .saturating_add(1 + i32::from(job.spec.has_partitioner()));
    let policy = job.spec.run_policy().scheduling_policy.unwrap_or_default();
    let min = policy.min_available.unwrap_or(total);
    let mut spec = match gang {
        GangScheduler::Volcano => serde_json::json!({
            "minMember": min,
            "queue": policy.queue,
            "priorityClassName": policy.priority_class,
        }),
        GangScheduler::SchedulerPlugins => serde_json::json!({
            "minMember": min,
            "scheduleTimeoutSeconds": policy.schedule_timeout_seconds,
        }),
    };
    if let Some(obj) = spec.as_object_mut() {
        obj.retain(|_, v| !v.is_null());
    }
    let resource = gang.pod_group_resource();
    let mut obj = kube::api::DynamicObject {
        types: Some(kube::api::TypeMeta {
            api_version: resource.api_version,
            kind: resource.kind,
        }),
        metadata: meta(job, job.name_any(), job_labels(job)),
        data: serde_json::json!({ "spec": spec }),
    };
    obj = with_hash(obj);
    obj
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::PodState;

    pub(crate) fn job(yaml: &str) -> DGLJob {
        let mut job: DGLJob = serde_yaml::from_str(yaml).unwrap();
        job.metadata.namespace = Some("ns".into());
        job.metadata.uid = Some("uid-1".into());
        job
    }

    fn seed() -> DGLJob {
        job(include_str!("../../examples/seed-dgljob.yaml"))
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
        let pod = worker_pod(&j, 0, 0, &cfg);
        assert!(env(main_container(&pod), ENV_USE_GRAPHBOLT).is_none());
        j.spec.use_graphbolt = Some(true);
        for pod in [worker_pod(&j, 0, 0, &cfg), launcher_pod(&j, 0, &cfg)] {
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
        let pod = worker_pod(&j, 1, 0, &BuildConfig::default());
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
        let pod = worker_pod(&j, 0, 0, &BuildConfig::default());
        let spec = pod.spec.as_ref().unwrap();
        assert!(!spec.volumes.iter().flatten().any(|v| v.name == SHM_VOLUME));
        assert!(!spec
            .volumes
            .iter()
            .flatten()
            .any(|v| v.name == DATASET_VOLUME));
    }

    #[test]
    fn partitioner_runs_the_launchers_command_on_the_worker_template() {
        let pod = partitioner_pod(&seed(), 0, &BuildConfig::default());
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
        let pod = launcher_pod(&j, 0, &BuildConfig::default());
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
        let pod3 = launcher_pod(&j, 3, &BuildConfig::default());
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
        let (_, role, binding) = launcher_rbac(&j);
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
        assert_eq!(
            rules[1].resource_names.as_deref().unwrap(),
            ["dgl-graphsage-worker-0", "dgl-graphsage-worker-1"]
        );
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
        let pod = launcher_pod(&j, 0, &BuildConfig::default());
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
        // An empty resourceNames would mean every pod: no read rule at all.
        let (_, role, _) = launcher_rbac(&j);
        let rules = role.rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, ["patch"]);
        assert_eq!(
            rules[0].resource_names.as_deref().unwrap(),
            ["dgl-graphsage-launcher"]
        );
        for launch in [None, Some(0)] {
            let cm = config_map(&j, &[], launch);
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
        let group = pod_group(&j, GangScheduler::Volcano);
        assert_eq!(group.data["spec"]["minMember"], 1);
    }

    #[test]
    fn only_a_distparmetis_launcher_is_ready_when_partitioned() {
        let probe = |mode| {
            let mut j = seed();
            j.spec.partition_mode = mode;
            let pod = launcher_pod(&j, 0, &BuildConfig::default());
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
        };
        let mut pods: Vec<ObservedPod> = (0..11)
            .map(|i| pod(i, Some(&format!("10.0.0.{}", 100 + i)).map(|s| s.as_str())))
            .collect();
        pods[10].ip = None;
        let cm = config_map(&j, &pods, Some(0));
        let data = cm.data.as_ref().unwrap();
        let lines: Vec<&str> = data[HOSTFILE].lines().collect();
        assert_eq!(lines[2], "10.0.0.102 30049 dgl-graphsage-worker-2 slots=1");
        assert_eq!(lines[10], "- 30049 dgl-graphsage-worker-10 slots=1");
        assert!(!data.contains_key(IP_CONFIG));
        pods[10].ip = Some("10.0.0.110".into());
        let cm2 = config_map(&j, &pods, Some(0));
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
        let observed =
            |name: String, role: ReplicaType, index: i32, ip: Option<&str>| ObservedPod {
                name,
                role,
                index,
                epoch: 0,
                state: PodState::Running { ready: true },
                ip: ip.map(String::from),
                progress: None,
                facts: Default::default(),
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
        let start = config_map(&j, &[], None);
        let waiting = config_map(&j, &pods, None);
        assert_eq!(start, waiting, "no write per pod coming up");
        let data = start.data.clone().unwrap();
        assert!(!data.contains_key(IP_CONFIG) && !data.contains_key(CONFIG_RUN));
        assert_eq!(data[PARTFILE], "- 30049 dgl-graphsage-partitioner\n");
        assert!(!start.metadata.labels.unwrap().contains_key(LABEL_RUN));
        // The launch of run 2: every IP, ip_config and the run (also as a
        // label: the operator's metadata-only cache reads it).
        let launch = config_map(&j, &pods, Some(2));
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
        };
        let before = config_map(&j, &[launcher(None)], Some(0));
        let after = config_map(&j, &[launcher(Some("10.0.0.9"))], Some(0));
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
        let np = network_policy(&j);
        let mut got = serde_json::to_value(&np).unwrap();
        let hash = got["metadata"]["annotations"][HASH_ANNOTATION].take();
        assert!(hash.is_string());
        let labels = serde_json::json!({
            "app.kubernetes.io/managed-by": "dgl-operator",
            "dgloperator.io/job-name": "dgl-graphsage",
        });
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
                "ingress": [{"from": [{"podSelector": {"matchLabels": labels}}]}],
            },
        });
        assert_eq!(got, expected);
        // Every pod of the job, in every role, is selected.
        let cfg = BuildConfig::default();
        for pod in [
            partitioner_pod(&j, 0, &cfg),
            worker_pod(&j, 1, 0, &cfg),
            launcher_pod(&j, 0, &cfg),
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

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity_bytes("512Mi"), Some(512 * 1024 * 1024));
        assert_eq!(parse_quantity_bytes("2G"), Some(2_000_000_000));
        assert_eq!(parse_quantity_bytes("1e9"), Some(1_000_000_000));
        assert_eq!(parse_quantity_bytes("bad"), None);
    }
}
