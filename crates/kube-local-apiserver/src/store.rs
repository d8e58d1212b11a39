//! Object storage with one global, increasing resourceVersion and a bounded history of changes for watches: in
//! memory, and with a data directory also on disk (see [`persistence`]).

pub mod persistence;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::watch;

use crate::meta;
use crate::registry::StorageResource;
use persistence::{Journal, PersistError};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub storage: StorageResource,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    /// The key of the namespace `name`.
    pub fn namespace(name: &str) -> ObjectKey {
        ObjectKey {
            storage: StorageResource {
                group: String::new(),
                resource: "namespaces".into(),
            },
            namespace: String::new(),
            name: name.to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One committed change. `prev` is the object before the change (needed to tell selector enter/leave).
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub kind: ChangeKind,
    pub key: ObjectKey,
    pub object: Arc<Value>,
    pub prev: Option<Arc<Value>>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StoreError {
    #[error("object already exists")]
    AlreadyExists,
    #[error("object not found")]
    NotFound,
    #[error("object was modified (have resourceVersion {current})")]
    Conflict { current: u64 },
    #[error("persisting the change: {0}")]
    Persist(String),
}

/// Too old to replay: the history no longer holds every change after the requested version.
#[derive(Debug, thiserror::Error)]
#[error("too old resource version: {requested} ({oldest})")]
pub struct Expired {
    pub requested: u64,
    pub oldest: u64,
}

struct Inner {
    rv: u64,
    objects: BTreeMap<ObjectKey, Arc<Value>>,
    uids: HashMap<String, ObjectKey>,
    history: VecDeque<Change>,
    history_limit: usize,
    /// Every change with a version above this one is still in `history`.
    floor: u64,
    /// Where changes are written before they are applied, for a persistent store.
    journal: Option<Journal>,
}

impl Inner {
    /// The stored object at `key`.
    fn existing(&self, key: &ObjectKey) -> Result<Arc<Value>, StoreError> {
        self.objects.get(key).cloned().ok_or(StoreError::NotFound)
    }

    /// Writes a change to the journal (a no-op in memory); it must succeed before the change is applied.
    fn persist(
        &mut self,
        rv: u64,
        key: &ObjectKey,
        object: Option<&Value>,
    ) -> Result<(), StoreError> {
        match &mut self.journal {
            Some(j) => j
                .append(rv, key, object)
                .map_err(|e| StoreError::Persist(e.to_string())),
            None => Ok(()),
        }
    }

    /// Rewrites the snapshot when the journal has grown (or `force`); failures are logged, the journal stays valid.
    fn compact_journal(&mut self, force: bool) {
        let Inner {
            journal: Some(journal),
            objects,
            rv,
            ..
        } = self
        else {
            return;
        };
        if !force && !journal.wants_compaction() {
            return;
        }
        if let Err(e) = journal.compact(*rv, objects.iter()) {
            tracing::error!(error = %e, "writing the store snapshot; the journal keeps every change");
        }
    }
}

pub struct Store {
    inner: Mutex<Inner>,
    latest: watch::Sender<u64>,
}

/// A consistent view of one storage resource.
pub struct Snapshot {
    pub rv: u64,
    pub objects: Vec<Arc<Value>>,
}

impl Store {
    pub fn new(history_limit: usize) -> Self {
        let (latest, _) = watch::channel(0);
        Store {
            inner: Mutex::new(Inner {
                rv: 0,
                objects: BTreeMap::new(),
                uids: HashMap::new(),
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                floor: 0,
                journal: None,
            }),
            latest,
        }
    }

    /// A store kept in `dir`: what was there is loaded, and resourceVersions continue after the last one used. The
    /// change history starts empty (as after an etcd compaction): watches from earlier versions get 410.
    pub fn open(history_limit: usize, dir: &std::path::Path) -> Result<Self, PersistError> {
        let (journal, loaded) = Journal::open(dir)?;
        let uids = loaded
            .objects
            .iter()
            .filter(|(_, o)| !meta::uid(o).is_empty())
            .map(|(k, o)| (meta::uid(o).to_string(), k.clone()))
            .collect();
        let (latest, _) = watch::channel(loaded.rv);
        Ok(Store {
            inner: Mutex::new(Inner {
                rv: loaded.rv,
                objects: loaded.objects,
                uids,
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                floor: loaded.rv,
                journal: Some(journal),
            }),
            latest,
        })
    }

    /// Writes a fresh snapshot of a persistent store (on shutdown).
    pub fn flush(&self) {
        self.lock().compact_journal(true);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.latest.subscribe()
    }

    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        self.lock().objects.get(key).cloned()
    }

    pub fn contains_uid(&self, uid: &str) -> bool {
        self.lock().uids.contains_key(uid)
    }

    pub fn key_of_uid(&self, uid: &str) -> Option<ObjectKey> {
        self.lock().uids.get(uid).cloned()
    }

    /// Objects of `storage`, optionally in one namespace, in key order.
    pub fn list(&self, storage: &StorageResource, namespace: Option<&str>) -> Snapshot {
        let inner = self.lock();
        let objects = inner
            .objects
            .range(range_start(storage, namespace)..)
            .take_while(|(k, _)| {
                &k.storage == storage && namespace.is_none_or(|ns| k.namespace == ns)
            })
            .map(|(_, v)| v.clone())
            .collect();
        Snapshot {
            rv: inner.rv,
            objects,
        }
    }

    /// Every stored object (controllers scan this).
    pub fn all(&self) -> Vec<(ObjectKey, Arc<Value>)> {
        self.lock()
            .objects
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn create(&self, key: ObjectKey, mut obj: Value) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        if inner.objects.contains_key(&key) {
            return Err(StoreError::AlreadyExists);
        }
        let rv = inner.rv + 1;
        meta::set_meta(&mut obj, "resourceVersion", Value::String(rv.to_string()));
        inner.persist(rv, &key, Some(&obj))?;
        let obj = Arc::new(obj);
        let uid = meta::uid(&obj).to_string();
        if !uid.is_empty() {
            inner.uids.insert(uid, key.clone());
        }
        inner.objects.insert(key.clone(), obj.clone());
        self.commit(
            inner,
            Change {
                rv,
                kind: ChangeKind::Added,
                key,
                object: obj.clone(),
                prev: None,
            },
        );
        Ok(obj)
    }

    /// Replaces the object if it is still at `expected_rv`.
    pub fn update(
        &self,
        key: &ObjectKey,
        expected_rv: u64,
        mut obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        let prev = inner.existing(key)?;
        let current = rv_of(&prev);
        if current != expected_rv {
            return Err(StoreError::Conflict { current });
        }
        let rv = inner.rv + 1;
        meta::set_meta(&mut obj, "resourceVersion", Value::String(rv.to_string()));
        inner.persist(rv, key, Some(&obj))?;
        let obj = Arc::new(obj);
        inner.objects.insert(key.clone(), obj.clone());
        self.commit(
            inner,
            Change {
                rv,
                kind: ChangeKind::Modified,
                key: key.clone(),
                object: obj.clone(),
                prev: Some(prev),
            },
        );
        Ok(obj)
    }

    /// Removes the object if it is still at `expected_rv`; the returned object carries the deletion's version.
    pub fn delete(
        &self,
        key: &ObjectKey,
        expected_rv: Option<u64>,
    ) -> Result<Arc<Value>, StoreError> {
        let mut inner = self.lock();
        let prev = inner.existing(key)?;
        let current = rv_of(&prev);
        if let Some(expected) = expected_rv
            && expected != current
        {
            return Err(StoreError::Conflict { current });
        }
        let rv = inner.rv + 1;
        inner.persist(rv, key, None)?;
        inner.objects.remove(key);
        inner.uids.remove(meta::uid(&prev));
        let mut last = (*prev).clone();
        meta::set_meta(&mut last, "resourceVersion", Value::String(rv.to_string()));
        let last = Arc::new(last);
        self.commit(
            inner,
            Change {
                rv,
                kind: ChangeKind::Deleted,
                key: key.clone(),
                object: last.clone(),
                prev: Some(prev),
            },
        );
        Ok(last)
    }

    fn commit(&self, mut inner: MutexGuard<'_, Inner>, change: Change) {
        let rv = change.rv;
        inner.rv = rv;
        inner.history.push_back(change);
        while inner.history.len() > inner.history_limit {
            if let Some(dropped) = inner.history.pop_front() {
                inner.floor = dropped.rv;
            }
        }
        inner.compact_journal(false);
        drop(inner);
        self.latest.send_replace(rv);
    }

    /// Forgets all history, as an etcd compaction would: watches from any earlier version now get 410.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.floor = inner.rv;
    }

    /// Changes after `rv` matching `filter`, or `Expired` if some are no longer kept.
    pub fn changes_since(
        &self,
        rv: u64,
        filter: impl Fn(&Change) -> bool,
    ) -> Result<(Vec<Change>, u64), Expired> {
        let inner = self.lock();
        if rv < inner.floor {
            return Err(Expired {
                requested: rv,
                oldest: inner.floor + 1,
            });
        }
        let start = inner.history.partition_point(|c| c.rv <= rv);
        let out = inner
            .history
            .range(start..)
            .filter(|c| filter(c))
            .cloned()
            .collect();
        Ok((out, inner.rv))
    }

    /// The state of a storage resource as of `rv`, rebuilt by undoing later changes; `Expired` if history is gone.
    pub fn list_at(
        &self,
        storage: &StorageResource,
        namespace: Option<&str>,
        rv: u64,
    ) -> Result<Snapshot, Expired> {
        let inner = self.lock();
        if rv < inner.floor {
            return Err(Expired {
                requested: rv,
                oldest: inner.floor + 1,
            });
        }
        let in_scope =
            |k: &ObjectKey| &k.storage == storage && namespace.is_none_or(|ns| k.namespace == ns);
        let mut state: BTreeMap<ObjectKey, Arc<Value>> = inner
            .objects
            .range(range_start(storage, namespace)..)
            .take_while(|(k, _)| in_scope(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for change in inner.history.iter().rev().take_while(|c| c.rv > rv) {
            if !in_scope(&change.key) {
                continue;
            }
            match (&change.kind, &change.prev) {
                (ChangeKind::Added, _) => {
                    state.remove(&change.key);
                }
                (_, Some(prev)) => {
                    state.insert(change.key.clone(), prev.clone());
                }
                (_, None) => {}
            }
        }
        Ok(Snapshot {
            rv: rv.min(inner.rv),
            objects: state.into_values().collect(),
        })
    }
}

fn range_start(storage: &StorageResource, namespace: Option<&str>) -> ObjectKey {
    ObjectKey {
        storage: storage.clone(),
        namespace: namespace.unwrap_or("").to_string(),
        name: String::new(),
    }
}

pub fn rv_of(obj: &Value) -> u64 {
    meta::resource_version(obj).parse().unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    /// ConfigMap `name` in `default`.
    pub(crate) fn key(name: &str) -> ObjectKey {
        ObjectKey {
            storage: StorageResource {
                group: String::new(),
                resource: "configmaps".into(),
            },
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[test]
    fn versions_increase_and_conflicts_are_detected() {
        let s = Store::new(10);
        let a = s
            .create(key("a"), json!({"metadata": {"name": "a", "uid": "u1"}}))
            .unwrap();
        assert_eq!(rv_of(&a), 1);
        assert_eq!(
            s.create(key("a"), json!({})).unwrap_err(),
            StoreError::AlreadyExists
        );
        let a2 = s
            .update(
                &key("a"),
                1,
                json!({"metadata": {"name": "a", "uid": "u1"}}),
            )
            .unwrap();
        assert_eq!(rv_of(&a2), 2);
        assert_eq!(
            s.update(&key("a"), 1, json!({})).unwrap_err(),
            StoreError::Conflict { current: 2 }
        );
        assert!(s.contains_uid("u1"));
        s.delete(&key("a"), None).unwrap();
        assert!(!s.contains_uid("u1"));
    }

    #[test]
    fn a_reopened_store_has_its_objects_and_never_reuses_a_version() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Store::open(10, dir.path()).unwrap();
            s.create(key("a"), json!({"metadata": {"name": "a", "uid": "u1"}}))
                .unwrap();
            s.create(key("b"), json!({"metadata": {"name": "b"}}))
                .unwrap();
            // The deletion uses version 3: the next store must not hand it out again.
            s.delete(&key("b"), None).unwrap();
        }
        let s = Store::open(10, dir.path()).unwrap();
        assert_eq!(s.current_rv(), 3);
        assert!(s.get(&key("b")).is_none());
        assert_eq!(rv_of(&s.get(&key("a")).unwrap()), 1);
        assert!(s.contains_uid("u1"));
        let c = s
            .create(key("c"), json!({"metadata": {"name": "c"}}))
            .unwrap();
        assert_eq!(rv_of(&c), 4);
        // History restarts at the loaded version.
        assert!(s.changes_since(2, |_| true).is_err());
        assert_eq!(s.changes_since(3, |_| true).unwrap().0.len(), 1);
    }

    #[test]
    fn bounded_history_expires_old_versions() {
        let s = Store::new(2);
        for n in ["a", "b", "c"] {
            s.create(key(n), json!({"metadata": {"name": n}})).unwrap();
        }
        assert!(s.changes_since(0, |_| true).is_err());
        let (changes, rv) = s.changes_since(1, |_| true).unwrap();
        assert_eq!(changes.len(), 2);
        assert_eq!(rv, 3);
        s.compact();
        assert!(s.changes_since(2, |_| true).is_err());
        assert!(s.changes_since(3, |_| true).unwrap().0.is_empty());
    }
}
