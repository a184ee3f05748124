//! The job's supporting objects: ConfigMap, Secret, the launcher's RBAC,
//! NetworkPolicy, PodGroup.

use std::collections::BTreeMap;

use dgl_api::files::{render_hosts, render_ip_config, HostLine};
use dgl_api::names::*;
use dgl_api::{DGLJob, ReplicaType};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::ByteString;
use kube::ResourceExt;

use crate::pure::observe::ObservedPod;
use crate::pure::settings::{GangScheduler, TokenKey};
use crate::pure::validate::ValidJob;

use super::{job_labels, meta, with_hash};

/// `<job>-config`: hostfile, partfile, leadfile (the launcher's name; its
/// IP is never written); workers listed by index (partition order).
///
/// `launch`: the run this ConfigMap launches. `None` gives the content the
/// job starts with, a function of the spec alone (names, no IPs), so that
/// pods coming up do not cost a write each. `Some(run)` adds every IP the
/// pods have, DGL's ip_config once every worker has one, and
/// [`CONFIG_RUN`]: the launcher's watcher-loop starts training only when it
/// reads its own run there.
pub fn config_map(valid: &ValidJob<'_>, pods: &[ObservedPod], launch: Option<i32>) -> ConfigMap {
    let job = valid.job();
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

/// `<job>-token`: the control channel's shared secret. Never rewritten
/// (rewriting would cut running pods off), and immutable, so nobody else
/// can either; deleted, it is created again with the same token when the
/// token is [`job_token`]'s.
pub fn secret(valid: &ValidJob<'_>, token: &str) -> Secret {
    let job = valid.job();
    Secret {
        metadata: meta(job, secret_name(&job.name_any()), job_labels(job)),
        type_: Some("Opaque".into()),
        immutable: Some(true),
        data: Some(BTreeMap::from([(
            SECRET_TOKEN_KEY.to_string(),
            ByteString(token.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

/// The job's token: HMAC-SHA256 of its UID under the operator's key, in
/// hex (64 characters, as the random tokens were). A function of the key
/// and the UID alone, so a deleted Secret is restored byte for byte and the
/// running pods' token stays valid; a job of the same name created again
/// has a new UID, so a new token. None for a job without a UID (one the
/// API server has not stored).
pub fn job_token(key: &TokenKey, job: &DGLJob) -> Option<String> {
    use hmac::{Hmac, Mac};
    let uid = job.metadata.uid.as_deref()?;
    // Any key length is valid for HMAC: this cannot fail.
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key.0).ok()?;
    mac.update(b"dgl-operator job token\0");
    mac.update(uid.as_bytes());
    Some(hex::encode(mac.finalize().into_bytes()))
}

/// ServiceAccount, Role and RoleBinding of the launcher: its watcher-loop
/// init container reads (get/list/watch) the job's ConfigMap, named by
/// resourceNames, and the namespace's pods, and dglrun patches its own pod
/// (the training's progress annotation). Nothing else: no exec, no other
/// writes, no cluster-wide rights. Pods are readable without resourceNames
/// (as mpi-operator's launcher Role has them) so that watcher-loop waits on
/// all workers with one label-selected watch: named pods would cost one
/// watch, and one connection, per worker (issue #36 item 8).
pub fn launcher_rbac(valid: &ValidJob<'_>) -> (ServiceAccount, Role, RoleBinding) {
    let job = valid.job();
    let job_name = job.name_any();
    let name = rbac_name(&job_name, ReplicaType::Launcher);
    let sa = with_hash(ServiceAccount {
        metadata: meta(job, name.clone(), job_labels(job)),
        automount_service_account_token: Some(false),
        ..Default::default()
    });
    let rule = |resource: &str, verbs: &[&str], names: Option<Vec<String>>| PolicyRule {
        api_groups: Some(vec!["".into()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        resource_names: names,
        ..Default::default()
    };
    let read = ["get", "list", "watch"];
    let mut rules = vec![rule(
        "pods",
        &["patch"],
        Some(vec![launcher_name(&job_name)]),
    )];
    // No workers, no read rules: a launcher training alone waits for
    // nothing and reads its ConfigMap as a volume.
    if job.spec.num_workers() > 0 {
        rules.insert(0, rule("pods", &read, None));
        rules.insert(
            0,
            rule("configmaps", &read, Some(vec![config_name(&job_name)])),
        );
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

/// The runs whose pods the job's NetworkPolicy admits: the current run's,
/// and the partitioner kept from an earlier run (it serves every run's
/// shards). A pod of any other run (one left running on a node that lost
/// only its link, until its kubelet returns) is refused, DGL's own RPC
/// included, where a policy engine enforces the policy (#34 item 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmittedRuns {
    pub current: i32,
    pub kept_partitioner: Option<i32>,
}

impl AdmittedRuns {
    /// The runs admitted once `steps` have run: the status's run, and the
    /// partitioner of an earlier run that stays (not being deleted, nor
    /// deleted by one of the steps).
    pub fn after(
        restart_count: Option<i32>,
        pods: &[ObservedPod],
        steps: &[crate::pure::plan::Step],
    ) -> Self {
        let current = restart_count.unwrap_or(0);
        let deleted = |name: &str| {
            steps
                .iter()
                .any(|s| s.deleted_pods().iter().any(|d| d == name))
        };
        let kept_partitioner = pods
            .iter()
            .filter(|p| p.role == ReplicaType::Partitioner && p.epoch < current)
            .filter(|p| p.state != crate::pure::observe::PodState::Terminating)
            .filter(|p| !deleted(&p.name))
            .map(|p| p.epoch)
            .max();
        AdmittedRuns {
            current,
            kept_partitioner,
        }
    }
}

/// `<job>-network`: the job's pods take traffic (any port) only from the
/// job's pods of the runs admitted (see [`AdmittedRuns`]); rewritten when
/// a restart moves the run, before the new run's pods are created. Their
/// egress is not restricted (DNS, the API server for the launcher's
/// watcher-loop, the user's data). Enforced only where the cluster's
/// network plugin implements NetworkPolicy.
pub fn network_policy(valid: &ValidJob<'_>, runs: AdmittedRuns) -> NetworkPolicy {
    let job = valid.job();
    let selector = |extra: &[(&str, String)]| {
        let mut labels = job_labels(job);
        labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        LabelSelector {
            match_labels: Some(labels),
            ..Default::default()
        }
    };
    let peer = |extra: &[(&str, String)]| NetworkPolicyPeer {
        pod_selector: Some(selector(extra)),
        ..Default::default()
    };
    let mut from = vec![peer(&[(LABEL_RUN, runs.current.to_string())])];
    if let Some(kept) = runs.kept_partitioner {
        from.push(peer(&[
            (
                LABEL_REPLICA_TYPE,
                ReplicaType::Partitioner.label_value().to_string(),
            ),
            (LABEL_RUN, kept.to_string()),
        ]));
    }
    with_hash(NetworkPolicy {
        metadata: meta(job, network_policy_name(&job.name_any()), job_labels(job)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(&[])),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(from),
                ports: None,
            }]),
            egress: None,
        }),
    })
}

/// A PodGroup for the gang scheduler in use (an untyped object: the CRDs are
/// optional and not in k8s-openapi).
pub fn pod_group(valid: &ValidJob<'_>, gang: GangScheduler) -> kube::api::DynamicObject {
    let job = valid.job();
    let total = job
        .spec
        .num_workers()
        // With a partition cache the partitioner may never be made (a
        // hit): the gang must not wait for it.
        .saturating_add(
            1 + i32::from(job.spec.has_partitioner() && job.spec.partition_cache.is_none()),
        );
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
