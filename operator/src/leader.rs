//! Leader election with a coordination.k8s.io Lease, so several replicas can
//! run and exactly one reconciles. The holder renews every `renew` period;
//! another replica takes over once `duration` passes without a renewal.
//! The holder steps down once `renew_deadline` (shorter than `duration`)
//! passes without a successful renewal, each attempt bounded by what is
//! left of it, so an old leader has stopped before a standby can take over
//! even when the API server is slow.
//!
//! Clocks are not trusted across machines: a replica that does not hold the
//! lease never compares the lease's renewTime with its own wall clock.
//! As client-go's leader election does, it notes when (on its own monotonic
//! clock) it last saw the lease record change (holder, renewTime,
//! resourceVersion), and judges it expired once the lease's duration has
//! passed on that clock without a change. A holder whose clock runs hours
//! ahead or behind is then neither waited for for hours nor robbed while it
//! renews. The cost, as in client-go: a replica that starts (or first sees
//! a lease) waits a full lease duration before it may take it over.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use tracing::{info, warn};

/// Lease settings.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
    /// Longest time without a successful renewal before stepping down.
    pub renew_deadline: Duration,
    pub renew: Duration,
}

pub struct LeaderElector {
    api: Api<Lease>,
    cfg: LeaderConfig,
    /// The lease record last seen and when it was first seen so, on this
    /// process's monotonic clock.
    observed: Mutex<Option<(Record, Instant)>>,
}

/// What identifies one renewal of a lease: any renewal changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: String,
    renew_time: Option<MicroTime>,
    resource_version: Option<String>,
}

impl LeaderElector {
    pub fn new(client: Client, cfg: LeaderConfig) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: Mutex::new(None),
        }
    }

    /// Whether `lease`'s holder has gone its lease duration without a
    /// renewal, as this process has watched it (never by the timestamps).
    fn expired(&self, lease: &Lease, now: Instant) -> bool {
        let spec = lease.spec.clone().unwrap_or_default();
        let record = Record {
            holder: spec.holder_identity.unwrap_or_default(),
            renew_time: spec.renew_time,
            resource_version: lease.metadata.resource_version.clone(),
        };
        let secs = spec.lease_duration_seconds.unwrap_or(15);
        let duration = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
        let mut observed = self.observed.lock().expect("leader lock");
        let since = match observed.as_ref() {
            Some((seen, at)) if *seen == record => *at,
            _ => {
                *observed = Some((record, now));
                now
            }
        };
        now.saturating_duration_since(since) >= duration
    }

    /// Tries once to take or renew the lease; true when this replica holds it.
    pub async fn try_acquire(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let mut lease = match self.api.get_opt(&self.cfg.name).await? {
            Some(l) => l,
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(now, now, 0)),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                };
            }
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.cfg.identity;
        if !mine && !holder.is_empty() && !self.expired(&lease, Instant::now()) {
            return Ok(false);
        }
        let acquire = if mine {
            spec.acquire_time.map(|t| t.0).unwrap_or(now)
        } else {
            now
        };
        let transitions = spec
            .lease_transitions
            .unwrap_or(0)
            .saturating_add(i32::from(!mine));
        lease.spec = Some(self.spec(acquire, now, transitions));
        // replace() carries the resourceVersion: a concurrent writer loses with 409.
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn spec(&self, acquire: Timestamp, renew: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.cfg.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(acquire)),
            renew_time: Some(MicroTime(renew)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Blocks until this replica holds the lease.
    pub async fn acquire(&self) {
        info!(lease = %self.cfg.name, identity = %self.cfg.identity, "waiting for leadership");
        loop {
            match self.try_acquire().await {
                Ok(true) => {
                    info!(lease = %self.cfg.name, "became leader");
                    return;
                }
                Ok(false) => {}
                Err(e) => warn!(error = %e, "leader election: lease request failed"),
            }
            tokio::time::sleep(self.cfg.renew).await;
        }
    }

    /// Renews every `renew` period; returns (to step down) when the lease
    /// went to another replica or when `renew_deadline` passed since the
    /// last successful renewal: an attempt that hangs is cut off there.
    pub async fn hold(&self) {
        let mut last_ok = Instant::now();
        loop {
            tokio::time::sleep(self.cfg.renew).await;
            let left = self.cfg.renew_deadline.saturating_sub(last_ok.elapsed());
            match tokio::time::timeout(left, self.try_acquire()).await {
                Ok(Ok(true)) => last_ok = Instant::now(),
                Ok(Ok(false)) => {
                    warn!("leadership lost to another replica");
                    return;
                }
                Ok(Err(e)) => warn!(error = %e, "lease renewal failed"),
                Err(_) => warn!("lease renewal did not answer before the renew deadline"),
            }
            if last_ok.elapsed() >= self.cfg.renew_deadline {
                warn!(deadline = ?self.cfg.renew_deadline, "no renewal within the renew deadline: stepping down");
                return;
            }
        }
    }

    /// Gives the lease up (on shutdown) so a successor need not wait for it
    /// to expire.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await {
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() == Some(&self.cfg.identity) {
                spec.holder_identity = None;
                spec.renew_time = None;
                if let Err(e) = self
                    .api
                    .replace(&self.cfg.name, &PostParams::default(), &lease)
                    .await
                {
                    warn!(error = %e, "could not release the lease");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
