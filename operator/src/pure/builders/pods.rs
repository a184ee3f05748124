//! The job's pods: the user's template kept, what dglrun needs added.

use std::collections::BTreeMap;

use dgl_api::names::*;
use dgl_api::{DGLJob, PartitionMode, ReplicaType};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvFromSource, EnvVar,
    EnvVarSource, ExecAction, ObjectFieldSelector, Pod, PodSpec, Probe, ResourceRequirements,
    SecretEnvSource, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::pure::settings::{BuildConfig, GangScheduler};
use crate::pure::validate::ValidJob;

use super::{
    job_labels, owner_ref, CONFIG_VOLUME, DATASET_VOLUME, LAUNCHER_STATE_VOLUME, SHM_VOLUME,
    TOKEN_VOLUME,
};

pub(super) fn env_value(name: &str, value: impl Into<String>) -> EnvVar {
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

pub(super) fn mounts_at(c: &Container, path: &str) -> bool {
    c.volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path.trim_end_matches('/') == path)
}

pub(super) fn add_mount(c: &mut Container, name: &str, path: &str, read_only: bool) {
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
        set_env(c, pod_env(job, role, index, epoch));
        add_cache_credentials(c, job);
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
/// dglrun's env; [`ENV_RUN`] is the pod's run, which dglrun binds into its
/// handshake so that this pod refuses an older run's and is refused by a
/// newer run's.
fn pod_env(job: &DGLJob, role: ReplicaType, index: i32, epoch: i32) -> Vec<EnvVar> {
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
        env_value(ENV_RUN, epoch.to_string()),
    ];
    if role == ReplicaType::Worker {
        env.push(env_value(ENV_WORKER_INDEX, index.to_string()));
    }
    // Only when asked: the pods of every other job stay as they were.
    if job.spec.use_graphbolt() {
        env.push(env_value(ENV_USE_GRAPHBOLT, "true"));
    }
    if let Some(cache) = &job.spec.partition_cache {
        env.push(env_value(ENV_PARTITION_CACHE, cache.url.clone()));
    }
    env
}

/// `spec.partitionCache.credentialsSecret` as the container's environment
/// (`envFrom`, after the template's: its keys win). The operator names the
/// Secret; it never reads it.
fn add_cache_credentials(c: &mut Container, job: &DGLJob) {
    let Some(secret) = job
        .spec
        .partition_cache
        .as_ref()
        .and_then(|p| p.credentials_secret.clone())
    else {
        return;
    };
    c.env_from.get_or_insert_with(Vec::new).push(EnvFromSource {
        secret_ref: Some(SecretEnvSource {
            name: secret,
            optional: Some(false),
        }),
        ..Default::default()
    });
}

/// `spec.partitionCache`: the launcher's first init container looks the
/// job's partitions up (dglrun's lookup role, the launcher's image, command
/// and flags), answers in its termination message, which the operator
/// reads before it makes a partitioner, and in the state folder, which the
/// launcher reads to ship from the cache.
fn add_cache_lookup(spec: &mut PodSpec) {
    let Some(main) = spec.containers.first_mut() else {
        return;
    };
    if !mounts_at(main, LAUNCHER_STATE_DIR) {
        add_mount(main, LAUNCHER_STATE_VOLUME, LAUNCHER_STATE_DIR, false);
    }
    let mut lookup = Container {
        name: CACHE_LOOKUP_CONTAINER.into(),
        ports: None,
        readiness_probe: None,
        liveness_probe: None,
        startup_probe: None,
        lifecycle: None,
        restart_policy: None,
        termination_message_path: Some(TERMINATION_LOG.into()),
        ..main.clone()
    };
    if let Some(role) = lookup.env.iter_mut().flatten().find(|e| e.name == ENV_ROLE) {
        role.value = Some(ROLE_CACHE_LOOKUP.into());
    }
    add_state_volume(spec);
    spec.init_containers
        .get_or_insert_with(Vec::new)
        .insert(0, lookup);
}

/// The launcher's own state folder (an emptyDir), once.
fn add_state_volume(spec: &mut PodSpec) {
    add_volume(
        spec,
        Volume {
            name: LAUNCHER_STATE_VOLUME.into(),
            empty_dir: Some(Default::default()),
            ..Default::default()
        },
    );
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
pub fn partitioner_pod(valid: &ValidJob<'_>, epoch: i32, cfg: &BuildConfig) -> Pod {
    let job = valid.job();
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
pub fn worker_pod(valid: &ValidJob<'_>, index: i32, epoch: i32, cfg: &BuildConfig) -> Pod {
    let job = valid.job();
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
    super::placement::add_worker_spread(spec, job);
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
pub fn launcher_pod(valid: &ValidJob<'_>, epoch: i32, cfg: &BuildConfig) -> Pod {
    let job = valid.job();
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
        security_context: Some(crate::pure::pod_security::restricted()),
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
    // Bounded by the job's deadline: it gives up (exit 3) that long after it
    // starts rather than wait on (issue #36 item 2). No deadline: no limit, as
    // partitioning may take hours; the operator judges the pods it waits on.
    if let Some(secs) = job.spec.run_policy().active_deadline_seconds {
        if let Some(env) = watcher.env.as_mut() {
            env.push(env_value(ENV_WATCHER_TIMEOUT, format!("{}s", secs.max(1))));
        }
    }
    // It writes the ConfigMap's files, complete for this run.
    add_mount(&mut watcher, CONFIG_VOLUME, CONFIG_DIR, false);
    spec.init_containers
        .get_or_insert_with(Vec::new)
        .push(watcher);
    if job.spec.partition_mode == PartitionMode::DistParMetis {
        add_partitioned_probe(spec);
    }
    if job.spec.partition_cache.is_some() {
        add_cache_lookup(spec);
    }
    pod
}

/// DistParMETIS: the launcher drives the workers' partitioning and turns
/// Ready when it is done (a marker in an emptyDir of its own), which is how
/// the operator learns it without any API write from the pod.
fn add_partitioned_probe(spec: &mut PodSpec) {
    add_state_volume(spec);
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
