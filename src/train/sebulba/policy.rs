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

pub type PolicyParams = Arc<Vec<Array>>;

/// Why [`PolicyStore::get`] gave no policy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NoPolicy {
    /// The run is over.
    Stopped,
    /// The exact version asked for was already dropped; `oldest` is the oldest kept.
    Evicted { version: u64, oldest: u64 },
}

pub struct PolicyStore {
    inner: Mutex<Inner>,
    changed: Condvar,
}

struct Inner {
    versions: BTreeMap<u64, PolicyParams>,
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

    /// Wakes every waiting actor with [`NoPolicy::Stopped`]: the run is over.
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.changed.notify_all();
    }

    /// Blocks until a version satisfies `want`, or the run stops, or an exact version
    /// turns out to be dropped already (which the lag rule rules out).
    pub fn get(&self, want: Want) -> Result<(u64, PolicyParams), NoPolicy> {
        let mut g = self.lock();
        loop {
            if g.stopped {
                return Err(NoPolicy::Stopped);
            }
            let newest = g.versions.last_key_value().map(|(&v, p)| (v, p.clone()));
            match (want, newest) {
                (Want::Exact(v), Some((n, _))) if n >= v => {
                    return match g.versions.get(&v) {
                        Some(p) => Ok((v, p.clone())),
                        None => {
                            let oldest = *g.versions.keys().next().expect("the newest is kept");
                            Err(NoPolicy::Evicted { version: v, oldest })
                        }
                    };
                }
                (Want::AtLeast(v), Some((n, p))) if n >= v => return Ok((n, p)),
                _ => g = self.changed.wait(g).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(x: f32) -> Vec<Array> {
        vec![Array::f32(vec![], vec![x])]
    }

    #[test]
    fn get_says_why_it_has_no_policy() {
        let store = PolicyStore::new(0, policy(0.0));
        for v in 1..=KEEP + 1 {
            store.publish(v, policy(v as f32));
        }
        let (v, p) = store.get(Want::Exact(KEEP + 1)).unwrap();
        assert_eq!((v, p[0].clone()), (KEEP + 1, Array::f32(vec![], vec![(KEEP + 1) as f32])));
        assert_eq!(store.get(Want::AtLeast(1)).unwrap().0, KEEP + 1);
        assert_eq!(store.get(Want::Exact(0)).unwrap_err(), NoPolicy::Evicted { version: 0, oldest: 2 });
        store.stop();
        assert_eq!(store.get(Want::Exact(KEEP + 1)).unwrap_err(), NoPolicy::Stopped);
    }

    #[test]
    fn stop_wakes_a_waiting_get() {
        let store = Arc::new(PolicyStore::new(0, policy(0.0)));
        let waiting = std::thread::spawn({
            let store = store.clone();
            move || store.get(Want::AtLeast(5)).map(|(v, _)| v)
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        store.stop();
        assert_eq!(waiting.join().unwrap(), Err(NoPolicy::Stopped));
    }
}
