//! The policy versions the learner publishes and the actors fetch.
//!
//! Version `v` is the policy after `v` updates. The learner publishes each new version
//! without waiting for the actors (a Cleanba-style queue of size 1 per actor would make
//! it wait for the slowest); the store keeps the last few so that an actor can ask for
//! an exact version.

use crate::array::Array;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};

/// Which version an actor's rollout must use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Want {
    /// Exactly this version (deterministic runs).
    Exact(u64),
    /// The newest published, waiting until it is at least this one.
    AtLeast(u64),
}

pub type Policy = Arc<Vec<Array>>;

pub struct PolicyStore {
    inner: Mutex<Inner>,
    changed: Condvar,
}

struct Inner {
    versions: BTreeMap<u64, Policy>,
    stopped: bool,
}

/// Versions kept behind the newest: an actor one rollout behind the learner asks for at
/// most the newest but one (see `train::sebulba`), so two would do; one more is slack.
const KEEP: u64 = 3;

impl PolicyStore {
    pub fn new(version: u64, policy: Vec<Array>) -> PolicyStore {
        let versions = BTreeMap::from([(version, Arc::new(policy))]);
        PolicyStore { inner: Mutex::new(Inner { versions, stopped: false }), changed: Condvar::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A thread that panicked while holding the lock left the map consistent (inserts
        // and removals are single calls), so the poison is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn publish(&self, version: u64, policy: Vec<Array>) {
        let mut g = self.lock();
        g.versions.insert(version, Arc::new(policy));
        g.versions.retain(|&v, _| v + KEEP > version);
        self.changed.notify_all();
    }

    /// Wakes every waiting actor with `None`: the run is over.
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.changed.notify_all();
    }

    /// Blocks until a version satisfies `want`; `None` once stopped, or when an exact
    /// version was already dropped (which the lag rule rules out).
    pub fn get(&self, want: Want) -> Option<(u64, Policy)> {
        let mut g = self.lock();
        loop {
            if g.stopped {
                return None;
            }
            let newest = g.versions.last_key_value().map(|(&v, p)| (v, p.clone()));
            match (want, newest) {
                (Want::Exact(v), Some((n, _))) if n >= v => return g.versions.get(&v).map(|p| (v, p.clone())),
                (Want::AtLeast(v), Some((n, p))) if n >= v => return Some((n, p)),
                _ => g = self.changed.wait(g).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }
}
