//! Pod Security "restricted" for the containers the operator adds to a
//! job's pods (the launcher's watcher-loop init container): a namespace that
//! enforces the profile admits them whatever the user's templates say about
//! their own containers (which stay the user's to make compliant).
//!
//! The rules are Kubernetes' (Pod Security Standards, "restricted"):
//! no privilege escalation, every capability dropped, a non-root user, the
//! runtime's default seccomp profile. Each is set on the container itself,
//! so it holds without any pod-level setting.

use k8s_openapi::api::core::v1::{Capabilities, Container, SeccompProfile, SecurityContext};

/// The uid and gid the operator's own containers run as: not root, and not
/// the image's user (the launcher's image may run as root).
pub const NON_ROOT_ID: i64 = 65532;

/// The securityContext of every container the operator adds.
pub fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        run_as_non_root: Some(true),
        run_as_user: Some(NON_ROOT_ID),
        run_as_group: Some(NON_ROOT_ID),
        read_only_root_filesystem: Some(true),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

/// The "restricted" rules `c`'s own securityContext breaks (empty: none).
pub fn restricted_violations(c: &Container) -> Vec<&'static str> {
    let Some(sc) = c.security_context.as_ref() else {
        return vec!["securityContext: not set"];
    };
    let mut broken = Vec::new();
    if sc.allow_privilege_escalation != Some(false) {
        broken.push("allowPrivilegeEscalation: must be false");
    }
    if sc.privileged == Some(true) {
        broken.push("privileged: must not be true");
    }
    let caps = sc.capabilities.as_ref();
    if !caps
        .and_then(|c| c.drop.as_ref())
        .is_some_and(|d| d.iter().any(|x| x == "ALL"))
    {
        broken.push("capabilities.drop: must contain ALL");
    }
    if caps
        .and_then(|c| c.add.as_ref())
        .is_some_and(|a| a.iter().any(|x| x != "NET_BIND_SERVICE"))
    {
        broken.push("capabilities.add: only NET_BIND_SERVICE");
    }
    if sc.run_as_non_root != Some(true) {
        broken.push("runAsNonRoot: must be true");
    }
    if sc.run_as_user == Some(0) {
        broken.push("runAsUser: must not be 0");
    }
    let seccomp = sc.seccomp_profile.as_ref().map(|p| p.type_.as_str());
    if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
        broken.push("seccompProfile.type: must be RuntimeDefault or Localhost");
    }
    broken
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::{launcher_pod, partitioner_pod, worker_pod, BuildConfig, GangScheduler};
    use dgl_api::{DGLJob, PartitionMode, ReplicaType};
    use k8s_openapi::api::core::v1::Pod;

    fn job(mode: PartitionMode) -> DGLJob {
        let mut job: DGLJob =
            serde_yaml::from_str(include_str!("../../examples/seed-dgljob.yaml")).unwrap();
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
                let mut pods = vec![launcher_pod(&j, 0, cfg), worker_pod(&j, 1, 2, cfg)];
                if j.spec.has_partitioner() {
                    pods.push(partitioner_pod(&j, 0, cfg));
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
}
