//! The key-value changes of a cluster: watched from a revision (what a
//! continuous backup records) and written again in order (what a
//! point-in-time restore replays).

use std::collections::BTreeSet;

use etcd_client::{EventType, GetOptions, LeaseGrantOptions, PutOptions, Txn, TxnOp, WatchOptions};

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
    pub async fn replay(&self, changes: &[Change], lease_ttl_seconds: i64) -> Result<()> {
        let mut client = self.client_for("replay").await?;
        let mut granted: BTreeSet<i64> = BTreeSet::new();
        let mut start = 0;
        while start < changes.len() {
            let revision = changes[start].revision;
            let end = changes[start..]
                .iter()
                .position(|c| c.revision != revision)
                .map_or(changes.len(), |n| start + n);
            let mut operations = Vec::new();
            for change in &changes[start..end] {
                match change.kind {
                    ChangeKind::Put => {
                        let mut options = PutOptions::new();
                        if change.lease != 0 {
                            if granted.insert(change.lease) {
                                grant_lease(&mut client, change.lease, lease_ttl_seconds).await?;
                            }
                            options = options.with_lease(change.lease);
                        }
                        operations.push(TxnOp::put(
                            change.key.clone(),
                            change.value.clone(),
                            Some(options),
                        ));
                    }
                    ChangeKind::Delete => operations.push(TxnOp::delete(change.key.clone(), None)),
                }
            }
            client
                .txn(Txn::new().and_then(operations))
                .await
                .map_err(|e| Error::from_client("replay", e, None))?;
            start = end;
        }
        Ok(())
    }
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
