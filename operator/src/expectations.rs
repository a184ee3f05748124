//! Expectations: writes this operator made that its watches have not shown
//! yet (as in Kubernetes' own controllers). One store serves the three kinds
//! the operator keeps: pods it created or deleted ([`crate::cache::PodCache`]),
//! children it applied ([`crate::cache::ChildCache`]) and the status it wrote
//! (the controller).
//!
//! They are an optimisation only: they save writes that a lagging cache
//! would otherwise repeat (all of them are idempotent). Each expires after
//! [`EXPECTATION_TTL`]; a restarted operator starts without them and gets the
//! same result from the cluster.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a write of this operator counts as done without its watch event.
/// The event normally arrives within a second; this bounds the effect of
/// one that never comes (the object was changed again, or removed, first).
pub const EXPECTATION_TTL: Duration = Duration::from_secs(60);

/// One group's expectations: each value with when it was written.
type Group<K, V> = HashMap<K, (Instant, V)>;

/// What this operator wrote and has not seen back yet: `value`s by `group`
/// (e.g. a job) and `key` (e.g. a pod of it), each with when it was written.
/// Stores with one value per group use `()` as the key.
#[derive(Debug)]
pub struct Expectations<G, K, V> {
    groups: Mutex<HashMap<G, Group<K, V>>>,
}

impl<G, K, V> Default for Expectations<G, K, V> {
    fn default() -> Self {
        Expectations {
            groups: Mutex::new(HashMap::new()),
        }
    }
}

fn expired(at: Instant) -> bool {
    at.elapsed() > EXPECTATION_TTL
}

impl<G: Eq + Hash + Clone, K: Eq + Hash, V> Expectations<G, K, V> {
    /// Records a write made now (replacing an earlier one of the same key).
    pub fn expect(&self, group: &G, key: K, value: V) {
        self.expect_at(group, key, value, Instant::now());
    }

    /// [`Expectations::expect`] with the time of the write given.
    pub fn expect_at(&self, group: &G, key: K, value: V, at: Instant) {
        let mut groups = self.groups.lock().expect("expectations lock");
        groups
            .entry(group.clone())
            .or_default()
            .insert(key, (at, value));
    }

    /// The expected value, unless it expired.
    pub fn get(&self, group: &G, key: &K) -> Option<V>
    where
        V: Clone,
    {
        let groups = self.groups.lock().expect("expectations lock");
        match groups.get(group)?.get(key) {
            Some((at, v)) if !expired(*at) => Some(v.clone()),
            _ => None,
        }
    }

    /// Visits the group's expectations that have not expired (expired ones
    /// are dropped); `keep` returns false for those the watch has shown.
    pub fn retain(&self, group: &G, mut keep: impl FnMut(&K, &V) -> bool) {
        let mut groups = self.groups.lock().expect("expectations lock");
        let Some(g) = groups.get_mut(group) else {
            return;
        };
        g.retain(|k, (at, v)| !expired(*at) && keep(k, v));
        if g.is_empty() {
            groups.remove(group);
        }
    }

    /// Drops the expectation on `key` when `seen(value, expired)` says the
    /// watch has shown it (or it no longer matters); returns what was dropped.
    pub fn remove_if(&self, group: &G, key: &K, seen: impl FnOnce(&V, bool) -> bool) -> Option<V> {
        let mut groups = self.groups.lock().expect("expectations lock");
        let g = groups.get_mut(group)?;
        let (at, v) = g.get(key)?;
        let removed = if seen(v, expired(*at)) {
            g.remove(key).map(|(_, v)| v)
        } else {
            None
        };
        if g.is_empty() {
            groups.remove(group);
        }
        removed
    }

    /// Forgets the expectation on `key` (its object is gone).
    pub fn forget(&self, group: &G, key: &K) {
        self.remove_if(group, key, |_, _| true);
    }

    /// Writes not seen back yet, over all groups.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        let groups = self.groups.lock().expect("expectations lock");
        groups.values().map(HashMap::len).sum()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
