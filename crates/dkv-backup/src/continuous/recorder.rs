//! The recording loop of a continuous backup agent: watch the cluster from
//! where the chain stands, cut segments, store them, until told to stop,
//! until the chain should end ([`Until::ChainEnds`]), or until the chain is
//! stored through a revision ([`Until::Stored`]: the tail of a chain that
//! ends, up to the next chain's base).
//!
//! A segment that fails to upload is kept and retried at the next tick (the
//! chain cannot move past it); the watch keeps feeding the open segment
//! meanwhile. Losing the watch, or a compacted start revision, ends the
//! loop with the error: the caller restarts it ([`Cutter::resume`]) or,
//! for [`dkv_etcd::Error::Compacted`], starts a new chain from a new full
//! snapshot.

use std::future::Future;
use std::time::Duration;

use dkv_etcd::{Change, ChangeKind, EtcdData};
use jiff::Timestamp;
use tracing::{info, warn};

use super::archive::store_segment;
use super::chain::StoredSegment;
use super::cutter::Cutter;
use super::rotation::{ChainEnd, ChainExtent};
use super::segment::{Event, EventKind};
use crate::error::{Error, Result};
use crate::location::Location;
use crate::store::Store;
use backon::{BackoffBuilder, ExponentialBuilder};

/// How often the loop looks at the clock when no event arrives.
const TICK: Duration = Duration::from_millis(500);

/// When recording ends, besides its stop.
#[derive(Debug)]
pub enum Until<'a> {
    /// Only at the stop.
    Stopped,
    /// When the chain should end (`CutSettings::new_chain`); the extent
    /// grows with each stored segment.
    ChainEnds(&'a mut ChainExtent),
    /// Once the chain is stored through this revision.
    Stored(i64),
}

/// Why recording ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Stopped; what was pending is stored.
    Stopped,
    /// The chain should end; what was pending is stored.
    ChainEnds(ChainEnd),
    /// The chain is stored through the revision of [`Until::Stored`].
    Reached,
}

/// Records until `stop` completes or `until` holds, then seals and stores
/// what is pending. Calls `on_stored` with each segment once it is durable
/// (the agent reports the chain's progress from it).
pub async fn record(
    etcd: &dyn EtcdData,
    store: &Store,
    chain_dir: &Location,
    cutter: &mut Cutter,
    stop: impl Future<Output = ()>,
    mut until: Until<'_>,
    mut on_stored: impl FnMut(&StoredSegment),
) -> Result<Ended> {
    if let Until::Stored(through) = until
        && cutter.resume_revision() > through
    {
        store_pending(store, chain_dir, cutter, &mut on_stored).await?;
        return Ok(Ended::Reached);
    }
    let from = cutter.resume_revision();
    let mut watch = etcd
        .watch_changes(from)
        .await
        .map_err(|cause| Error::Etcd {
            operation: "watch for continuous backup",
            cause,
        })?;
    info!(chain = cutter.chain(), from, "recording changes");
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    let ended = loop {
        tokio::select! {
            () = &mut stop => break Ended::Stopped,
            watched = watch.next() => {
                let watched = watched.map_err(|cause| Error::Etcd {
                    operation: "watch for continuous backup",
                    cause,
                })?;
                let Some(watched) = watched else {
                    return Err(Error::Etcd {
                        operation: "watch for continuous backup",
                        cause: dkv_etcd::Error::Unavailable {
                            operation: "watch",
                            message: "the server closed the watch".to_owned(),
                        },
                    });
                };
                let received_ms = Timestamp::now().as_millisecond();
                for change in watched.changes {
                    cutter
                        .push(event_of(change, received_ms))
                        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
                }
                if let Until::Stored(through) = until
                    && cutter.resume_revision() > through
                {
                    break Ended::Reached;
                }
            }
            _ = tick.tick() => {}
        }
        if cutter.due(Timestamp::now()) {
            match seal_and_store(store, chain_dir, cutter, &mut on_stored).await {
                Ok(bytes) => {
                    if let Until::ChainEnds(extent) = &mut until {
                        **extent = extent.grown(bytes, cutter.resume_revision() - 1);
                        let limits = cutter.settings().new_chain;
                        if let Some(end) = extent.end(&limits, Timestamp::now()) {
                            break Ended::ChainEnds(end);
                        }
                    }
                }
                Err(e) => {
                    warn!(chain = cutter.chain(), error = %e, "storing a segment failed; retrying");
                }
            }
        }
    };
    store_pending(store, chain_dir, cutter, &mut on_stored).await?;
    Ok(ended)
}

/// Seals what is pending and stores it, in up to three tries 0.2 s and
/// 0.4 s apart.
async fn store_pending(
    store: &Store,
    chain_dir: &Location,
    cutter: &mut Cutter,
    on_stored: &mut impl FnMut(&StoredSegment),
) -> Result<()> {
    let mut delays = ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(200))
        .with_max_times(2)
        .build();
    loop {
        let stored = seal_and_store(store, chain_dir, cutter, on_stored)
            .await
            .map(drop);
        match (stored, delays.next()) {
            (Err(_), Some(delay)) => tokio::time::sleep(delay).await,
            (done, _) => return done,
        }
    }
}

/// Seals a segment and stores it; returns its stored size.
async fn seal_and_store(
    store: &Store,
    chain_dir: &Location,
    cutter: &mut Cutter,
    on_stored: &mut impl FnMut(&StoredSegment),
) -> Result<u64> {
    let sealed = cutter
        .seal(Timestamp::now())
        .map_err(|e| Error::InvalidArgument(format!("sealing a segment: {e}")))?;
    let stored = store_segment(store, chain_dir, &sealed).await?;
    cutter.stored();
    on_stored(&stored);
    Ok(sealed.encoded.bytes.len() as u64)
}

/// A watched change as a segment event.
pub fn event_of(change: Change, received_ms: i64) -> Event {
    Event {
        revision: change.revision,
        kind: match change.kind {
            ChangeKind::Put => EventKind::Put,
            ChangeKind::Delete => EventKind::Delete,
        },
        key: change.key,
        value: change.value,
        lease: change.lease,
        received_ms,
    }
}

/// A segment event as a change to replay.
pub fn change_of(event: Event) -> Change {
    Change {
        revision: event.revision,
        kind: match event.kind {
            EventKind::Put => ChangeKind::Put,
            EventKind::Delete => ChangeKind::Delete,
        },
        key: event.key,
        value: event.value,
        lease: event.lease,
    }
}

#[cfg(test)]
mod tests {
    use dkv_etcd::FakeEtcd;

    use super::super::archive::{chain_location, continuous_location, read_chain, read_events};
    use super::super::cutter::CutSettings;
    use super::*;
    use crate::StoreConfig;

    /// A store in a new directory, and the directory of chain `c1` of
    /// `shop/orders` in it.
    fn chain_in_a_directory() -> (tempfile::TempDir, Store, Location) {
        let dir = tempfile::tempdir().unwrap();
        let destination = Location::parse(&format!("file://{}/", dir.path().display())).unwrap();
        let store = Store::open(&destination, &StoreConfig::default()).unwrap();
        let chain_dir = chain_location(&continuous_location(&destination, "shop", "orders"), "c1");
        (dir, store, chain_dir)
    }

    /// Through the seam, against the in-memory cluster: what the recorder
    /// stores from a watch, written again into an empty cluster, leaves the
    /// same keys and values.
    #[tokio::test]
    async fn what_is_recorded_replays_into_the_same_keys() {
        let (_dir, store, chain_dir) = chain_in_a_directory();
        let source = FakeEtcd::default();
        source.put(b"a", b"1");
        source.put(b"b", b"2");
        source.delete(b"a");
        let through = source.put(b"c", b"3");
        let settings = CutSettings {
            interval: Duration::from_millis(50),
            ..CutSettings::default()
        };
        let mut cutter = Cutter::start("c1", 1, settings, Timestamp::now());
        let mut stored = Vec::new();
        let ended = record(
            &source,
            &store,
            &chain_dir,
            &mut cutter,
            std::future::pending(),
            Until::Stored(through),
            |segment| stored.push(segment.uri.clone()),
        )
        .await
        .unwrap();
        assert_eq!(ended, Ended::Reached);
        assert!(!stored.is_empty());

        let keys = crate::Keyring::default();
        let restored = FakeEtcd::default();
        for segment in read_chain(&store, &chain_dir, &keys).await.unwrap() {
            let changes: Vec<Change> = read_events(&store, &segment, &keys)
                .await
                .unwrap()
                .into_iter()
                .map(change_of)
                .collect();
            restored.apply_changes(&changes, 60).await.unwrap();
        }
        assert_eq!(restored.key_values(), source.key_values());
        assert_eq!(restored.key_values().len(), 2);
    }

    /// A watch from a revision etcd compacted away ends recording with
    /// etcd's reason (the agent then starts a new chain).
    #[tokio::test]
    async fn a_compacted_start_is_an_etcd_error() {
        let (_dir, store, chain_dir) = chain_in_a_directory();
        let source = FakeEtcd::default();
        for n in 0..5u8 {
            source.put(b"k", &[n]);
        }
        dkv_etcd::EtcdAdmin::compact(&source, 4).await.unwrap();
        let mut cutter = Cutter::start("c1", 1, CutSettings::default(), Timestamp::now());
        let failed = record(
            &source,
            &store,
            &chain_dir,
            &mut cutter,
            std::future::pending(),
            Until::Stored(6),
            |_| {},
        )
        .await;
        assert!(
            matches!(
                failed,
                Err(Error::Etcd {
                    cause: dkv_etcd::Error::Compacted { .. },
                    ..
                })
            ),
            "{failed:?}"
        );
    }
}
