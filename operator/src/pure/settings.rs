//! The operator's settings that the pure stage reads: what shapes the
//! children ([`BuildConfig`], from the operator's flags) and what a job may
//! not use. Its own module so that `builders` and `validate` both read it
//! without importing each other.

use std::str::FromStr;

use kube::api::ApiResource;
use kube::core::GroupVersionKind;

/// Operator-wide settings that shape the children.
#[derive(Debug, Clone, Default)]
pub struct BuildConfig {
    /// Image for the launcher's watcher-loop init container; default: the
    /// launcher's own image (the runtime binaries ship in the training image).
    pub watcher_image: Option<String>,
    /// Gang scheduler in use, if any.
    pub gang: Option<GangScheduler>,
    /// ServiceAccounts no job's pod may run as (the operator's own first).
    pub protected_service_accounts: Vec<ProtectedServiceAccount>,
    /// Give every job a NetworkPolicy admitting only its own pods
    /// ([`network_policy`](super::builders::network_policy)).
    pub network_policy: bool,
    /// Kueue's external-framework contract for jobs labelled
    /// `kueue.x-k8s.io/queue-name` (`--kueue`; pure::kueue).
    pub kueue: bool,
    /// The key every job's control-channel token is derived from (the
    /// binary always has one; None: a random token per job).
    pub token_key: Option<TokenKey>,
}

/// The operator's key for the jobs' tokens (`--token-key-secret`); never
/// shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenKey(pub Vec<u8>);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenKey({} bytes)", self.0.len())
    }
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

/// A ServiceAccount no job's pod may run as: `namespace/name`, or `name`
/// alone for that name in every namespace. The operator's own is one
/// (a pod running as it would hold the operator's token and rights).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedServiceAccount {
    pub namespace: Option<String>,
    pub name: String,
}

impl FromStr for ProtectedServiceAccount {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (namespace, name) = match s.split_once('/') {
            Some((ns, name)) => (Some(ns.to_string()), name),
            None => (None, s),
        };
        let valid = |x: &str| !x.is_empty() && !x.contains('/');
        if !valid(name) || namespace.as_deref().is_some_and(|ns| !valid(ns)) {
            return Err(format!(
                "{s:?}: expected <namespace>/<name> or <name> of a ServiceAccount"
            ));
        }
        Ok(ProtectedServiceAccount {
            namespace,
            name: name.to_string(),
        })
    }
}

impl ProtectedServiceAccount {
    pub fn matches(&self, namespace: &str, name: &str) -> bool {
        self.name == name && self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }
}

#[cfg(test)]
mod tests;
