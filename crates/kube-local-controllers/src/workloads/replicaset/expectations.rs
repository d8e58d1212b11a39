//! Creations and deletions a ReplicaSet controller has made but its pod cache does not show yet, after upstream's
//! `ControllerExpectations`. Pods get random names, so acting on a cache that lags its own writes would create (or
//! delete) twice; a ReplicaSet with outstanding expectations is not resized until the cache has caught up, or until
//! the expectations expire.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

/// How long unobserved writes hold a ReplicaSet back (upstream waits five minutes; a local cluster's watch lags by
/// milliseconds, so a lost event should not stall it for long).
const TTL: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Pending {
    /// Names of pods created and not yet seen.
    creates: HashSet<String>,
    /// UIDs of pods deleted and still seen without a deletion timestamp.
    deletes: HashSet<String>,
    since: Instant,
}

/// Outstanding writes per ReplicaSet UID.
#[derive(Debug, Default)]
pub struct Expectations(Mutex<HashMap<String, Pending>>);

/// What the cache says about one pod, for [`Expectations::satisfied`].
pub struct Seen<'a> {
    pub name: &'a str,
    pub uid: &'a str,
    pub deleting: bool,
}

impl<'a> Seen<'a> {
    pub fn of(pod: &'a Pod) -> Seen<'a> {
        Seen {
            name: pod.metadata.name.as_deref().unwrap_or_default(),
            uid: pod.metadata.uid.as_deref().unwrap_or_default(),
            deleting: pod.metadata.deletion_timestamp.is_some(),
        }
    }
}

impl Expectations {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Pending>) -> T) -> T {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut map)
    }

    fn entry<'m>(map: &'m mut HashMap<String, Pending>, rs: &str) -> &'m mut Pending {
        map.entry(rs.to_string()).or_insert_with(|| Pending {
            creates: HashSet::new(),
            deletes: HashSet::new(),
            since: Instant::now(),
        })
    }

    /// Records a pod created for `rs`.
    pub fn created(&self, rs: &str, pod_name: &str) {
        self.with(|m| {
            let p = Self::entry(m, rs);
            p.creates.insert(pod_name.to_string());
            p.since = Instant::now();
        });
    }

    /// Records a pod of `rs` deleted.
    pub fn deleted(&self, rs: &str, pod_uid: &str) {
        self.with(|m| {
            let p = Self::entry(m, rs);
            p.deletes.insert(pod_uid.to_string());
            p.since = Instant::now();
        });
    }

    /// Whether the cache (the namespace's pods, `seen`) shows every write made for `rs`; forgets those it shows.
    pub fn satisfied<'a>(&self, rs: &str, seen: impl IntoIterator<Item = Seen<'a>>) -> bool {
        self.with(|m| {
            let Some(p) = m.get_mut(rs) else {
                return true;
            };
            let mut live_uids = HashSet::new();
            for s in seen {
                p.creates.remove(s.name);
                if !s.deleting {
                    live_uids.insert(s.uid.to_string());
                }
            }
            p.deletes.retain(|uid| live_uids.contains(uid));
            let done = (p.creates.is_empty() && p.deletes.is_empty()) || p.since.elapsed() > TTL;
            if done {
                m.remove(rs);
            }
            done
        })
    }

    /// Forgets a ReplicaSet that is gone.
    pub fn forget_all_but(&self, live: &HashSet<String>) {
        self.with(|m| m.retain(|uid, _| live.contains(uid)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_the_cache_to_show_its_writes() {
        let e = Expectations::default();
        assert!(e.satisfied("rs", []));
        e.created("rs", "web-abcde");
        e.deleted("rs", "uid-1");
        let live = |deleting| Seen {
            name: "web-old",
            uid: "uid-1",
            deleting,
        };
        assert!(!e.satisfied("rs", [live(false)]));
        // The created pod shows up; the deleted one is still there, not yet terminating.
        assert!(!e.satisfied(
            "rs",
            [
                live(false),
                Seen {
                    name: "web-abcde",
                    uid: "uid-2",
                    deleting: false
                }
            ]
        ));
        assert!(e.satisfied("rs", [live(true)]));
        assert!(e.satisfied("rs", []));
    }
}
