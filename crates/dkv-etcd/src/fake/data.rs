//! The keys of [`FakeEtcd`]: a revision, the history of changes and the
//! watches on it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use super::FakeEtcd;
use crate::changes::{Change, ChangeKind, ChangeWatch, Condition, EtcdData, Guard, WatchedChanges};
use crate::error::{Error, Result};

#[derive(Debug, Default)]
pub(super) struct FakeData {
    /// Each key's value, lease and the revision it was last changed at.
    keys: BTreeMap<Vec<u8>, (Vec<u8>, i64, i64)>,
    /// Every change from revision 2 on (etcd's first write is revision 2).
    history: Vec<Change>,
    /// The current revision, shared with the watches (their progress
    /// notifications carry it).
    revision: Arc<AtomicI64>,
    /// Revisions up to this one are compacted away.
    compacted: i64,
    leases: BTreeSet<i64>,
    watches: Vec<UnboundedSender<Result<WatchedChanges>>>,
}

impl FakeData {
    fn revision(&self) -> i64 {
        // A new cluster is at revision 1.
        self.revision.load(Ordering::SeqCst).max(1)
    }

    /// Whether `guard` holds now.
    fn holds(&self, guard: &Guard) -> bool {
        let key = self.keys.get(&guard.key);
        let changed = key.map_or(0, |(_, _, at)| *at);
        match &guard.condition {
            Condition::ChangedAt(revision) => changed == *revision,
            Condition::ChangedBefore(revision) => changed < *revision,
            Condition::Present => key.is_some(),
            Condition::Absent => key.is_none(),
            Condition::ValueIs(value) => key.is_some_and(|(v, _, _)| v == value),
        }
    }

    /// Applies `changes` (one source revision) as the next revision.
    fn commit(&mut self, changes: impl IntoIterator<Item = Change>) -> i64 {
        let revision = self.revision() + 1;
        let committed: Vec<Change> = changes
            .into_iter()
            .map(|change| {
                match change.kind {
                    ChangeKind::Put => {
                        self.keys.insert(
                            change.key.clone(),
                            (change.value.clone(), change.lease, revision),
                        );
                    }
                    ChangeKind::Delete => {
                        self.keys.remove(&change.key);
                    }
                }
                Change { revision, ..change }
            })
            .collect();
        self.history.extend(committed.iter().cloned());
        self.revision.store(revision, Ordering::SeqCst);
        let response = WatchedChanges {
            changes: committed,
            header_revision: revision,
        };
        self.watches
            .retain(|watch| watch.send(Ok(response.clone())).is_ok());
        revision
    }
}

impl FakeEtcd {
    fn data(&self) -> std::sync::MutexGuard<'_, FakeData> {
        self.data.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `key` = `value` (a client's put); returns its revision.
    pub fn put(&self, key: &[u8], value: &[u8]) -> i64 {
        self.data().commit([Change {
            revision: 0,
            kind: ChangeKind::Put,
            key: key.to_vec(),
            value: value.to_vec(),
            lease: 0,
        }])
    }

    /// Deletes `key` (a client's delete, even of a key that is not there);
    /// returns its revision.
    pub fn delete(&self, key: &[u8]) -> i64 {
        self.data().commit([Change {
            revision: 0,
            kind: ChangeKind::Delete,
            key: key.to_vec(),
            value: Vec::new(),
            lease: 0,
        }])
    }

    /// Every key and its value.
    pub fn key_values(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.data()
            .keys
            .iter()
            .map(|(key, (value, _, _))| (key.clone(), value.clone()))
            .collect()
    }

    /// The leases granted by [`EtcdData::apply_changes`].
    pub fn leases(&self) -> Vec<i64> {
        self.data().leases.iter().copied().collect()
    }

    /// Ends every watch, as a server that closes its watches does.
    pub fn close_watches(&self) {
        self.data().watches.clear();
    }

    pub(super) fn compact_history(&self, revision: i64) {
        let mut data = self.data();
        data.compacted = data.compacted.max(revision);
        data.history.retain(|c| c.revision > revision);
    }
}

#[async_trait]
impl EtcdData for FakeEtcd {
    async fn watch_changes(&self, from_revision: i64) -> Result<ChangeWatch> {
        let mut data = self.data();
        if from_revision <= data.compacted {
            return Err(Error::Compacted {
                compact_revision: data.compacted,
            });
        }
        let (sender, responses) = unbounded_channel();
        let backlog: Vec<Change> = data
            .history
            .iter()
            .filter(|c| c.revision >= from_revision)
            .cloned()
            .collect();
        if !backlog.is_empty() {
            let header_revision = data.revision();
            // Receiver held below: the send cannot fail.
            let _ = sender.send(Ok(WatchedChanges {
                changes: backlog,
                header_revision,
            }));
        }
        data.watches.push(sender);
        Ok(ChangeWatch::fake(responses, Arc::clone(&data.revision)))
    }

    async fn current_revision(&self) -> Result<i64> {
        Ok(self.data().revision())
    }

    async fn apply_changes(&self, changes: &[Change], _lease_ttl_seconds: i64) -> Result<()> {
        let mut data = self.data();
        let mut start = 0;
        while start < changes.len() {
            let revision = changes[start].revision;
            let end = changes[start..]
                .iter()
                .position(|c| c.revision != revision)
                .map_or(changes.len(), |n| start + n);
            for change in &changes[start..end] {
                if change.kind == ChangeKind::Put && change.lease != 0 {
                    data.leases.insert(change.lease);
                }
            }
            data.commit(changes[start..end].iter().cloned());
            start = end;
        }
        Ok(())
    }

    async fn apply_guarded(&self, changes: &[Change], guards: &[Guard]) -> Result<bool> {
        let mut data = self.data();
        if !guards.iter().all(|g| data.holds(g)) {
            return Ok(false);
        }
        if !changes.is_empty() {
            data.commit(changes.iter().map(|c| Change {
                lease: 0,
                ..c.clone()
            }));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    #[test]
    fn a_watch_sees_the_history_from_its_revision_then_what_follows() {
        block_on(async {
            let etcd = FakeEtcd::default();
            assert_eq!(etcd.put(b"a", b"1"), 2);
            assert_eq!(etcd.put(b"b", b"2"), 3);
            let mut watch = etcd.watch_changes(3).await.unwrap();
            let backlog = watch.next().await.unwrap().unwrap();
            assert_eq!(backlog.changes.len(), 1);
            assert_eq!(backlog.changes[0].key, b"b");
            etcd.delete(b"a");
            let next = watch.next().await.unwrap().unwrap();
            assert_eq!(next.changes[0].kind, ChangeKind::Delete);
            assert_eq!(next.header_revision, 4);
            watch.request_progress().await.unwrap();
            let progress = watch.next().await.unwrap().unwrap();
            assert!(progress.changes.is_empty());
            assert_eq!(progress.header_revision, 4);
            etcd.close_watches();
            assert!(watch.next().await.unwrap().is_none());
        });
    }

    #[test]
    fn a_watch_from_a_compacted_revision_is_refused() {
        block_on(async {
            let etcd = FakeEtcd::default();
            for n in 0..5u8 {
                etcd.put(b"k", &[n]);
            }
            crate::EtcdAdmin::compact(&etcd, 4).await.unwrap();
            assert!(matches!(
                etcd.watch_changes(3).await,
                Err(Error::Compacted {
                    compact_revision: 4
                })
            ));
            assert!(etcd.watch_changes(5).await.is_ok());
        });
    }

    #[test]
    fn changes_written_again_leave_the_same_keys() {
        block_on(async {
            let source = FakeEtcd::default();
            source.put(b"a", b"1");
            source.put(b"b", b"2");
            source.delete(b"a");
            let mut watch = source.watch_changes(1).await.unwrap();
            let changes = watch.next().await.unwrap().unwrap().changes;
            let restored = FakeEtcd::default();
            restored.apply_changes(&changes, 60).await.unwrap();
            assert_eq!(restored.key_values(), source.key_values());
            assert_eq!(restored.current_revision().await.unwrap(), 4);
        });
    }
}
