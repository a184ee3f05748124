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
mod tests;
