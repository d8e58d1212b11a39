//! The key-value changes of a cluster: watched from a revision (what a
//! continuous backup records) and written again in order (what a
//! point-in-time restore replays).

use std::collections::{BTreeSet, HashSet};
use std::ops::Range;

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, LeaseGrantOptions, PutOptions, Txn, TxnOp,
    WatchOptions,
};

use crate::error::{Error, Result};
use crate::grpc::GrpcAdmin;

/// What a change did to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Put,
    Delete,
}

/// One key's change at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub revision: i64,
    pub kind: ChangeKind,
    pub key: Vec<u8>,
    /// The new value of a put; empty for a delete.
    pub value: Vec<u8>,
    /// The lease of a put (0: none).
    pub lease: i64,
}

/// What a guarded transaction ([`EtcdData::apply_guarded`]) requires of
/// one key before it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    pub key: Vec<u8>,
    pub condition: Condition,
}

/// A condition on one key's state, as etcd compares it (an absent key has
/// modification revision 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// It was last changed at exactly this revision.
    ChangedAt(i64),
    /// It was last changed before this revision, or is absent.
    ChangedBefore(i64),
    /// It exists.
    Present,
    /// It does not exist.
    Absent,
    /// It exists with this value.
    ValueIs(Vec<u8>),
}

impl Guard {
    pub fn new(key: impl Into<Vec<u8>>, condition: Condition) -> Self {
        Self {
            key: key.into(),
            condition,
        }
    }

    fn compare(&self) -> Compare {
        let key = self.key.clone();
        match &self.condition {
            Condition::ChangedAt(revision) => {
                Compare::mod_revision(key, CompareOp::Equal, *revision)
            }
            Condition::ChangedBefore(revision) => {
                Compare::mod_revision(key, CompareOp::Less, *revision)
            }
            Condition::Present => Compare::version(key, CompareOp::Greater, 0),
            Condition::Absent => Compare::version(key, CompareOp::Equal, 0),
            Condition::ValueIs(value) => Compare::value(key, CompareOp::Equal, value.clone()),
        }
    }
}

/// What one watch response brought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedChanges {
    /// The changes, in revision order (several may share a revision).
    pub changes: Vec<Change>,
    /// The cluster's revision when the response was sent: every change up
    /// to it has been delivered once a response with no changes (a progress
    /// notification) arrives.
    pub header_revision: i64,
}

/// The data itself, as continuous backup reads it and a point-in-time
/// restore writes it again: the seam [`GrpcAdmin`] and, in tests, `FakeEtcd`
/// implement.
#[async_trait]
pub trait EtcdData: Send + Sync {
    /// Watches every key from `from_revision` (inclusive), with progress
    /// notifications.
    async fn watch_changes(&self, from_revision: i64) -> Result<ChangeWatch>;

    /// The cluster's current revision.
    async fn current_revision(&self) -> Result<i64>;

    /// Writes `changes` again, in order (see [`GrpcAdmin`]'s for how they
    /// are grouped into transactions). A lease a put names that does not
    /// exist yet is granted with that ID and `lease_ttl_seconds`.
    async fn apply_changes(&self, changes: &[Change], lease_ttl_seconds: i64) -> Result<()>;

    /// Writes `changes` (without their leases) as one transaction if every
    /// one of `guards` holds when etcd applies it; whether it wrote. With
    /// no changes it only checks.
    async fn apply_guarded(&self, changes: &[Change], guards: &[Guard]) -> Result<bool>;
}

/// A watch of every key from a revision.
pub struct ChangeWatch {
    source: WatchSource,
}

enum WatchSource {
    // Boxed: the stream is several times the size of the fake's.
    Grpc(Box<etcd_client::WatchStream>),
    /// A watch of an in-memory cluster: its responses, and its revision for
    /// progress notifications.
    #[cfg(feature = "fake")]
    Fake {
        responses: tokio::sync::mpsc::UnboundedReceiver<Result<WatchedChanges>>,
        revision: std::sync::Arc<std::sync::atomic::AtomicI64>,
        progress_requested: bool,
    },
}

impl ChangeWatch {
    #[cfg(feature = "fake")]
    pub(crate) fn fake(
        responses: tokio::sync::mpsc::UnboundedReceiver<Result<WatchedChanges>>,
        revision: std::sync::Arc<std::sync::atomic::AtomicI64>,
    ) -> Self {
        Self {
            source: WatchSource::Fake {
                responses,
                revision,
                progress_requested: false,
            },
        }
    }

    /// The next response; `Ok(None)` when the server closed the watch.
    /// [`Error::Compacted`] when the start revision is no longer in etcd's
    /// history.
    pub async fn next(&mut self) -> Result<Option<WatchedChanges>> {
        match &mut self.source {
            WatchSource::Grpc(stream) => next_response(stream).await,
            #[cfg(feature = "fake")]
            WatchSource::Fake {
                responses,
                revision,
                progress_requested,
            } => {
                if let Ok(response) = responses.try_recv() {
                    return response.map(Some);
                }
                if std::mem::take(progress_requested) {
                    return Ok(Some(WatchedChanges {
                        changes: Vec::new(),
                        header_revision: revision.load(std::sync::atomic::Ordering::SeqCst),
                    }));
                }
                responses.recv().await.transpose()
            }
        }
    }

    /// Asks the server for a progress notification (a response without
    /// changes that carries the current revision).
    pub async fn request_progress(&mut self) -> Result<()> {
        match &mut self.source {
            WatchSource::Grpc(stream) => stream
                .request_progress()
                .await
                .map_err(|e| Error::from_client("watch progress", e, None)),
            #[cfg(feature = "fake")]
            WatchSource::Fake {
                progress_requested, ..
            } => {
                *progress_requested = true;
                Ok(())
            }
        }
    }
}

/// The next response of a gRPC watch (see [`ChangeWatch::next`]).
async fn next_response(stream: &mut etcd_client::WatchStream) -> Result<Option<WatchedChanges>> {
    loop {
        let Some(response) = stream
            .message()
            .await
            .map_err(|e| Error::from_client("watch", e, None))?
        else {
            return Ok(None);
        };
        if response.compact_revision() > 0 {
            return Err(Error::Compacted {
                compact_revision: response.compact_revision(),
            });
        }
        if response.canceled() {
            return Err(Error::Refused {
                operation: "watch",
                message: format!("the watch was cancelled: {}", response.cancel_reason()),
            });
        }
        if response.created() && response.events().is_empty() {
            continue;
        }
        let header_revision = response.header().map_or(0, |h| h.revision());
        let changes = response
            .events()
            .iter()
            .filter_map(|event| {
                let kv = event.kv()?;
                Some(match event.event_type() {
                    EventType::Put => Change {
                        revision: kv.mod_revision(),
                        kind: ChangeKind::Put,
                        key: kv.key().to_vec(),
                        value: kv.value().to_vec(),
                        lease: kv.lease(),
                    },
                    EventType::Delete => Change {
                        revision: kv.mod_revision(),
                        kind: ChangeKind::Delete,
                        key: kv.key().to_vec(),
                        value: Vec::new(),
                        lease: 0,
                    },
                })
            })
            .collect();
        return Ok(Some(WatchedChanges {
            changes,
            header_revision,
        }));
    }
}

/// The largest watch response accepted: well above the largest request
/// etcd accepts (`--max-request-bytes`, which bounds one event and the
/// fragments of a fragmented response).
pub const MAX_WATCH_MESSAGE_BYTES: usize = 256 << 20;

#[async_trait]
impl EtcdData for GrpcAdmin {
    /// Watches every key from `from_revision` (inclusive), with progress
    /// notifications.
    ///
    /// A watch that catches up from an old revision receives many events
    /// per response (etcd batches up to a thousand revisions): the server
    /// is asked to fragment responses larger than its request limit, and
    /// the client accepts messages up to [`MAX_WATCH_MESSAGE_BYTES`] (etcd's
    /// own client accepts any size; gRPC's default of 4 MiB fails such a
    /// watch for good once values are large).
    async fn watch_changes(&self, from_revision: i64) -> Result<ChangeWatch> {
        let client = self.client_for("watch").await?;
        let options = WatchOptions::new()
            .with_all_keys()
            .with_start_revision(from_revision)
            .with_progress_notify()
            .with_fragment();
        let stream = client
            .watch_client()
            .max_decoding_message_size(MAX_WATCH_MESSAGE_BYTES)
            .watch("", Some(options))
            .await
            .map_err(|e| Error::from_client("watch", e, None))?;
        Ok(ChangeWatch {
            source: WatchSource::Grpc(Box::new(stream)),
        })
    }

    /// The cluster's current revision.
    async fn current_revision(&self) -> Result<i64> {
        let mut client = self.client_for("revision").await?;
        let response = client
            .get(
                "",
                Some(GetOptions::new().with_all_keys().with_count_only()),
            )
            .await
            .map_err(|e| Error::from_client("revision", e, None))?;
        Ok(response.header().map_or(0, |h| h.revision()))
    }

    /// Writes `changes` again, in order. Consecutive source revisions that
    /// touch different keys travel together in one transaction, up to
    /// [`REPLAY_TRANSACTION_OPERATIONS`] and [`REPLAY_TRANSACTION_BYTES`]
    /// (a revision is never split): every write costs etcd a raft round
    /// and a sync to disk, so small changes replay many times faster than
    /// one transaction per revision, and the restored cluster ends in the
    /// same state. Its revisions are its own and fewer than the source's.
    /// A transaction of several revisions that fails is tried again one
    /// revision at a time (a cluster with lower request limits than etcd's
    /// defaults refuses the larger one). Applying a change again leaves the
    /// same keys and values, so a replay may start before where an earlier
    /// one stopped.
    ///
    /// A lease a put names that does not exist yet is granted with that ID
    /// and `lease_ttl_seconds` (the source's remaining time is not known),
    /// so keys that shared a lease expire together.
    async fn apply_changes(&self, changes: &[Change], lease_ttl_seconds: i64) -> Result<()> {
        let mut client = self.client_for("replay").await?;
        let mut granted: BTreeSet<i64> = BTreeSet::new();
        for group in replay_transactions(changes) {
            let group = &changes[group];
            for change in group {
                if change.kind == ChangeKind::Put
                    && change.lease != 0
                    && granted.insert(change.lease)
                {
                    grant_lease(&mut client, change.lease, lease_ttl_seconds).await?;
                }
            }
            let together = group
                .first()
                .zip(group.last())
                .is_some_and(|(first, last)| first.revision != last.revision);
            match client.txn(transaction(group)).await {
                Ok(_) => {}
                Err(_) if together => {
                    for revision in revisions(group) {
                        client
                            .txn(transaction(&group[revision]))
                            .await
                            .map_err(|e| Error::from_client("replay", e, None))?;
                    }
                }
                Err(e) => return Err(Error::from_client("replay", e, None)),
            }
        }
        Ok(())
    }

    /// Sent to one member, the same for every call while it answers (the
    /// next one in order when it does not): the balanced connection would
    /// send concurrent calls to different members, whose proposals reach
    /// the leader in another order than they were sent.
    async fn apply_guarded(&self, changes: &[Change], guards: &[Guard]) -> Result<bool> {
        self.on_one_member(
            "guarded write",
            &|mut client: etcd_client::Client| async move {
                client.txn(guarded_transaction(changes, guards)).await
            },
        )
        .await
        .map(|response| response.succeeded())
    }
}

/// The transaction [`EtcdData::apply_guarded`] sends.
fn guarded_transaction(changes: &[Change], guards: &[Guard]) -> Txn {
    let unleased: Vec<Change> = changes
        .iter()
        .map(|c| Change {
            lease: 0,
            ..c.clone()
        })
        .collect();
    Txn::new()
        .when(guards.iter().map(Guard::compare).collect::<Vec<_>>())
        .and_then(operations(&unleased))
}

/// At most this many operations in one replayed transaction: half etcd's
/// default `--max-txn-ops` (128).
pub const REPLAY_TRANSACTION_OPERATIONS: usize = 64;

/// At most this many bytes of keys and values in one replayed transaction:
/// two thirds of etcd's default `--max-request-bytes` (1.5 MiB).
pub const REPLAY_TRANSACTION_BYTES: usize = 1024 * 1024;

/// The ranges of `changes` (in revision order) that [`GrpcAdmin`]'s
/// [`EtcdData::apply_changes`]
/// writes as one transaction each: whole source revisions, consecutive,
/// together while no key repeats (etcd refuses a transaction that names a
/// key twice) and within the limits above. A revision over a limit on its
/// own is a transaction of its own, as the source wrote it.
pub fn replay_transactions(changes: &[Change]) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    let mut keys: HashSet<&[u8]> = HashSet::new();
    let mut bytes = 0;
    for revision in revisions(changes) {
        let these = &changes[revision.clone()];
        let size: usize = these.iter().map(|c| c.key.len() + c.value.len()).sum();
        let fits = revision.start > start
            && revision.end - start <= REPLAY_TRANSACTION_OPERATIONS
            && bytes + size <= REPLAY_TRANSACTION_BYTES
            && these.iter().all(|c| !keys.contains(c.key.as_slice()));
        if !fits && revision.start > start {
            groups.push(start..revision.start);
            start = revision.start;
            keys.clear();
            bytes = 0;
        }
        keys.extend(these.iter().map(|c| c.key.as_slice()));
        bytes += size;
    }
    if start < changes.len() {
        groups.push(start..changes.len());
    }
    groups
}

/// The ranges of `changes` that share a source revision, in order.
fn revisions(changes: &[Change]) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let mut start = 0;
    while start < changes.len() {
        let end = changes[start..]
            .iter()
            .position(|c| c.revision != changes[start].revision)
            .map_or(changes.len(), |n| start + n);
        ranges.push(start..end);
        start = end;
    }
    ranges
}

/// `changes` as one transaction: puts (with their lease) and deletes.
fn transaction(changes: &[Change]) -> Txn {
    Txn::new().and_then(operations(changes))
}

fn operations(changes: &[Change]) -> Vec<TxnOp> {
    changes
        .iter()
        .map(|change| match change.kind {
            ChangeKind::Put => {
                let mut options = PutOptions::new();
                if change.lease != 0 {
                    options = options.with_lease(change.lease);
                }
                TxnOp::put(change.key.clone(), change.value.clone(), Some(options))
            }
            ChangeKind::Delete => TxnOp::delete(change.key.clone(), None),
        })
        .collect()
}

/// Grants lease `id`; one that already exists (restored with the snapshot)
/// is kept as it is.
async fn grant_lease(client: &mut etcd_client::Client, id: i64, ttl: i64) -> Result<()> {
    match client
        .lease_grant(ttl, Some(LeaseGrantOptions::new().with_id(id)))
        .await
    {
        Ok(_) => Ok(()),
        Err(etcd_client::Error::GRpcStatus(status))
            if status.message().contains("lease already exists") =>
        {
            Ok(())
        }
        Err(e) => Err(Error::from_client("lease grant", e, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(revision: i64, key: &str, value_bytes: usize) -> Change {
        Change {
            revision,
            kind: ChangeKind::Put,
            key: key.as_bytes().to_vec(),
            value: vec![b'v'; value_bytes],
            lease: 0,
        }
    }

    fn delete(revision: i64, key: &str) -> Change {
        Change {
            revision,
            kind: ChangeKind::Delete,
            key: key.as_bytes().to_vec(),
            value: Vec::new(),
            lease: 0,
        }
    }

    #[test]
    fn small_changes_to_different_keys_travel_together() {
        let changes: Vec<Change> = (0..10).map(|i| put(i, &format!("k{i}"), 10)).collect();
        assert_eq!(replay_transactions(&changes), vec![0..10]);
        assert!(replay_transactions(&[]).is_empty());
    }

    #[test]
    fn a_key_named_again_starts_the_next_transaction() {
        let changes = vec![
            put(1, "a", 1),
            put(2, "b", 1),
            delete(3, "a"),
            put(4, "c", 1),
            put(5, "c", 1),
        ];
        assert_eq!(replay_transactions(&changes), vec![0..2, 2..4, 4..5]);
    }

    #[test]
    fn a_revision_is_never_split_and_limits_hold() {
        // Revision 2 has three operations: it stays whole.
        let changes = vec![
            put(1, "a", 1),
            put(2, "b", 1),
            put(2, "c", 1),
            delete(2, "d"),
            put(3, "e", 1),
        ];
        assert_eq!(replay_transactions(&changes), vec![0..5]);

        // 200 KiB values: five fit in 1 MiB, the sixth starts a new one.
        let big: Vec<Change> = (0..12)
            .map(|i| put(i, &format!("k{i:02}"), 200 * 1024))
            .collect();
        let groups = replay_transactions(&big);
        assert_eq!(groups, vec![0..5, 5..10, 10..12]);

        // A value over the limit on its own is a transaction of its own.
        let huge = vec![put(1, "a", 1), put(2, "b", 2 << 20), put(3, "c", 1)];
        assert_eq!(replay_transactions(&huge), vec![0..1, 1..2, 2..3]);

        // At most REPLAY_TRANSACTION_OPERATIONS operations.
        let many: Vec<Change> = (0..150).map(|i| put(i, &format!("k{i:03}"), 1)).collect();
        let groups = replay_transactions(&many);
        assert!(
            groups
                .iter()
                .all(|g| g.len() <= REPLAY_TRANSACTION_OPERATIONS)
        );
        assert_eq!(groups.iter().map(|g| g.len()).sum::<usize>(), 150);
    }

    #[test]
    fn the_transactions_cover_every_change_once_in_order() {
        let changes: Vec<Change> = (0..300)
            .map(|i| {
                let key = format!("k{}", (i * 7) % 23);
                if i % 5 == 0 {
                    delete(i / 2, &key)
                } else {
                    put(i / 2, &key, (i as usize * 37) % 90_000)
                }
            })
            .collect();
        // Changes sharing a revision must name different keys, as etcd
        // requires of the source too.
        let changes: Vec<Change> = revisions(&changes)
            .into_iter()
            .flat_map(|r| {
                let mut seen = HashSet::new();
                changes[r]
                    .iter()
                    .filter(|c| seen.insert(c.key.clone()))
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        let groups = replay_transactions(&changes);
        let mut next = 0;
        for group in &groups {
            assert_eq!(group.start, next, "consecutive, no gap, no overlap");
            next = group.end;
            let these = &changes[group.clone()];
            let keys: HashSet<&[u8]> = these.iter().map(|c| c.key.as_slice()).collect();
            assert_eq!(keys.len(), these.len(), "no key twice in {group:?}");
            if group.start > 0 {
                assert_ne!(
                    changes[group.start - 1].revision,
                    changes[group.start].revision
                );
            }
        }
        assert_eq!(next, changes.len());
    }
}
