//! The key-value changes of a cluster: watched from a revision (what a
//! continuous backup records) and written again in order (what a
//! point-in-time restore replays).

use std::collections::BTreeSet;

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

/// A watch of every key from a revision.
pub struct ChangeWatch {
    stream: etcd_client::WatchStream,
}

impl ChangeWatch {
    /// The next response; `Ok(None)` when the server closed the watch.
    /// [`Error::Compacted`] when the start revision is no longer in etcd's
    /// history.
    pub async fn next(&mut self) -> Result<Option<WatchedChanges>> {
        loop {
            let Some(response) = self
                .stream
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

    /// Asks the server for a progress notification (a response without
    /// changes that carries the current revision).
    pub async fn request_progress(&mut self) -> Result<()> {
        self.stream
            .request_progress()
            .await
            .map_err(|e| Error::from_client("watch progress", e, None))
    }
}

/// The largest watch response accepted: well above the largest request
/// etcd accepts (`--max-request-bytes`, which bounds one event and the
/// fragments of a fragmented response).
pub const MAX_WATCH_MESSAGE_BYTES: usize = 256 << 20;

impl GrpcAdmin {
    /// Watches every key from `from_revision` (inclusive), with progress
    /// notifications.
    ///
    /// A watch that catches up from an old revision receives many events
    /// per response (etcd batches up to a thousand revisions): the server
    /// is asked to fragment responses larger than its request limit, and
    /// the client accepts messages up to [`MAX_WATCH_MESSAGE_BYTES`] (etcd's
    /// own client accepts any size; gRPC's default of 4 MiB fails such a
    /// watch for good once values are large).
    pub async fn watch_changes(&self, from_revision: i64) -> Result<ChangeWatch> {
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
        Ok(ChangeWatch { stream })
    }

    /// The cluster's current revision.
    pub async fn current_revision(&self) -> Result<i64> {
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

    /// Writes `changes` again, one transaction per source revision, in
    /// order. A lease a put names that does not exist yet is granted with
    /// that ID and `lease_ttl_seconds` (the source's remaining time is not
    /// known), so keys that shared a lease expire together.
    ///
    /// Up to [`REPLAY_PIPELINE`] transactions are in flight at once, so
    /// that etcd commits them in shared batches instead of one disk sync
    /// each. Order is kept all the same: every transaction but the first
    /// applies only if the one before it has (it compares a key the one
    /// before wrote: its modification revision, or its absence for a
    /// delete), and one that arrived early is sent again. Each applied
    /// transaction is still exactly one revision, in source order.
    pub async fn replay(&self, changes: &[Change], lease_ttl_seconds: i64) -> Result<()> {
        let mut client = self.client_for("replay").await?;
        let mut granted: BTreeSet<i64> = BTreeSet::new();
        let mut revisions: Vec<&[Change]> = Vec::new();
        let mut rest = changes;
        while let Some(first) = rest.first() {
            let n = rest
                .iter()
                .position(|c| c.revision != first.revision)
                .unwrap_or(rest.len());
            let (one, after) = rest.split_at(n);
            for change in one {
                if change.kind == ChangeKind::Put
                    && change.lease != 0
                    && granted.insert(change.lease)
                {
                    grant_lease(&mut client, change.lease, lease_ttl_seconds).await?;
                }
            }
            revisions.push(one);
            rest = after;
        }
        let start = self.current_revision().await?;
        let mut applied = 0;
        while applied < revisions.len() {
            let window = applied..revisions.len().min(applied + REPLAY_PIPELINE);
            let sent = window.clone().map(|i| {
                let mut client = client.clone();
                // Transaction `i` applies at revision `start + i + 1`, and
                // only then: once the one before it has, and not twice.
                let mut guards = vec![not_applied_guard(revisions[i], start + i as i64 + 1)];
                if let Some(before) = i.checked_sub(1) {
                    guards.push(applied_guard(revisions[before], start + i as i64));
                }
                let txn = replay_txn(revisions[i], guards);
                async move { client.txn(txn).await }
            });
            let answers = futures::future::join_all(sent).await;
            // What applied is read back from the revision (an answer lost
            // to a timeout may still have applied).
            let now = self.current_revision().await? - start;
            let reached = usize::try_from(now).unwrap_or(0).min(revisions.len());
            if reached <= applied
                && let Some(Err(e)) = answers.into_iter().find(Result::is_err)
            {
                return Err(Error::from_client("replay", e, None));
            }
            applied = reached.max(applied);
        }
        Ok(())
    }
}

/// How many replay transactions are in flight at once.
pub const REPLAY_PIPELINE: usize = 32;

/// The transaction of one source revision's changes, applied when
/// `guards` hold.
fn replay_txn(changes: &[Change], guards: Vec<Compare>) -> Txn {
    let operations: Vec<TxnOp> = changes
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
        .collect();
    Txn::new().when(guards).and_then(operations)
}

/// What holds once the changes of one source revision applied at
/// `revision`: a key it put has that modification revision, or a key it
/// deleted is gone (it existed before: the delete was an event).
fn applied_guard(changes: &[Change], revision: i64) -> Compare {
    match changes.iter().find(|c| c.kind == ChangeKind::Put) {
        Some(put) => Compare::mod_revision(put.key.clone(), CompareOp::Equal, revision),
        None => Compare::version(first_key(changes), CompareOp::Equal, 0),
    }
}

/// What holds until the changes of one source revision applied at
/// `revision`: a key it puts was last modified before, or a key it deletes
/// is still there.
fn not_applied_guard(changes: &[Change], revision: i64) -> Compare {
    match changes.iter().find(|c| c.kind == ChangeKind::Put) {
        Some(put) => Compare::mod_revision(put.key.clone(), CompareOp::Less, revision),
        None => Compare::version(first_key(changes), CompareOp::Greater, 0),
    }
}

fn first_key(changes: &[Change]) -> Vec<u8> {
    changes.first().map(|c| c.key.clone()).unwrap_or_default()
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
