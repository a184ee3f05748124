use super::*;
use crate::pure::builders::{launcher_pod, partitioner_pod, worker_pod};
use crate::pure::settings::{BuildConfig, GangScheduler};
use crate::pure::validate::valid;
use dgl_api::{DGLJob, PartitionMode, ReplicaType};
use k8s_openapi::api::core::v1::Pod;

fn job(mode: PartitionMode) -> DGLJob {
    let mut job: DGLJob =
        serde_yaml::from_str(include_str!("../../../../examples/seed-dgljob.yaml")).unwrap();
    job.metadata.namespace = Some("ns".into());
    job.metadata.uid = Some("uid-1".into());
    job.spec.partition_mode = mode;
    job
}

/// The containers of `pod` that no template of `job` has (by name).
fn injected(job: &DGLJob, pod: &Pod) -> Vec<Container> {
    let from_templates: Vec<&str> = ReplicaType::ALL
        .iter()
        .filter_map(|r| job.spec.replica_spec(*r))
        .filter_map(|s| s.template.spec.as_ref())
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .map(|c| c.name.as_str())
        .collect();
    let spec = pod.spec.as_ref().unwrap();
    assert!(spec.ephemeral_containers.is_none());
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter(|c| !from_templates.contains(&c.name.as_str()))
        .cloned()
        .collect()
}

#[test]
fn every_injected_container_of_every_role_and_mode_passes_restricted() {
    let configs = [
        BuildConfig::default(),
        BuildConfig {
            watcher_image: Some("watcher:1".into()),
            gang: Some(GangScheduler::Volcano),
            ..Default::default()
        },
    ];
    let modes = [
        PartitionMode::DglApi,
        PartitionMode::ParMetis,
        PartitionMode::DistParMetis,
        PartitionMode::Skip,
    ];
    let mut checked = 0;
    for cfg in &configs {
        for mode in modes {
            let j = job(mode);
            let mut pods = vec![
                launcher_pod(&valid(&j), 0, cfg),
                worker_pod(&valid(&j), 1, 2, cfg),
            ];
            if j.spec.has_partitioner() {
                pods.push(partitioner_pod(&valid(&j), 0, cfg));
            }
            for pod in &pods {
                for c in injected(&j, pod) {
                    let broken = restricted_violations(&c);
                    assert!(
                        broken.is_empty(),
                        "{mode:?} pod {:?} container {}: {broken:?}",
                        pod.metadata.name,
                        c.name
                    );
                    checked += 1;
                }
            }
        }
    }
    // The launcher's watcher-loop, in each mode and configuration.
    assert_eq!(checked, configs.len() * modes.len());
}

#[test]
fn the_rules_catch_what_restricted_refuses() {
    assert!(!restricted_violations(&Container::default()).is_empty());
    let mut c = Container {
        security_context: Some(restricted()),
        ..Default::default()
    };
    assert!(restricted_violations(&c).is_empty());
    let sc = c.security_context.as_mut().unwrap();
    sc.run_as_user = Some(0);
    sc.allow_privilege_escalation = None;
    sc.capabilities.as_mut().unwrap().add = Some(vec!["SYS_ADMIN".into()]);
    sc.seccomp_profile = None;
    assert_eq!(restricted_violations(&c).len(), 4);
}
