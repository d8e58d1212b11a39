//! What a follower applies next and how: given the source's chains as
//! listed and the newest source revision it has applied, which stored
//! segments come next, in order ([`next_segments`]), and applying them
//! ([`apply`]).
//!
//! A follower applies every source revision once, in order. The source
//! starts a new chain from a fresh snapshot now and then; a follower that
//! has applied up to revision `a` goes on in any chain whose base is at or
//! before `a` and which has a segment reaching past `a`: the segments of
//! one source are cut from one stream of changes, so where chains overlap
//! they hold the same events, and the events at or before `a` are skipped
//! when applied. Past the newest point there is nothing to do yet; a
//! revision no chain holds (the source's retention deleted it, or its
//! recording broke) means the follower cannot go on and must be seeded
//! again from a newer base.

use dkv_backup::continuous::archive::read_events;
use dkv_backup::continuous::chain::{Chain, StoredSegment};
use dkv_backup::continuous::recorder::change_of;
use dkv_backup::{Keyring, Store};
use dkv_etcd::EtcdData;

/// What a follower does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Follow {
    /// Apply these segments, in order, each event after the revision
    /// reached so far (at first the applied one).
    Apply(Vec<StoredSegment>),
    /// It has applied everything the source stored.
    UpToDate,
    /// No chain holds the revisions after `applied`; the oldest revision
    /// stored after them is `resumes_after`'s successor (a newer chain's
    /// base).
    Gap { applied: i64, resumes_after: i64 },
    /// Nothing stored continues from `applied`, and a chain it could go on
    /// in is broken there (a segment missing or not the one before the
    /// next): what the source stored after the break cannot be applied.
    Broken {
        applied: i64,
        chain: String,
        why: String,
    },
}

/// The segments that carry a follower on from `applied`, the newest
/// source revision it has applied, through `chains` (as
/// [`dkv_backup::continuous::chain::chains`] lists them), as far as they
/// reach without a break.
pub fn next_segments(chains: &[Chain], applied: i64) -> Follow {
    let mut reached = applied;
    let mut next = Vec::new();
    loop {
        // Of the segments that continue from `reached`, the one of the
        // newest chain (the one the source records into): it reaches
        // farthest or as far.
        let continuing = chains
            .iter()
            .filter(|c| c.base.revision <= reached)
            .flat_map(|c| {
                c.segments.iter().filter(|s| {
                    s.header.after_revision <= reached && reached < s.header.last_revision
                })
            })
            .max_by_key(|s| (s.header.last_revision, s.header.after_revision));
        match continuing {
            Some(segment) => {
                reached = segment.header.last_revision;
                next.push(segment.clone());
            }
            None => break,
        }
    }
    if !next.is_empty() {
        return Follow::Apply(next);
    }
    if let Some(chain) = chains
        .iter()
        .find(|c| c.base.revision <= applied && c.last_revision() <= applied && c.broken.is_some())
    {
        return Follow::Broken {
            applied,
            chain: chain.base.chain.clone(),
            why: chain.broken.clone().unwrap_or_default(),
        };
    }
    let newest = chains.iter().map(Chain::last_revision).max();
    match newest {
        Some(newest) if newest > applied => Follow::Gap {
            applied,
            resumes_after: chains
                .iter()
                .filter(|c| c.base.revision > applied)
                .map(|c| c.base.revision)
                .min()
                .unwrap_or(newest),
        },
        _ => Follow::UpToDate,
    }
}

/// Applies `segments` (as [`next_segments`] returned them) to `etcd`,
/// each source revision after `applied` once, in order, as one
/// transaction of its own; returns the newest source revision applied. So
/// the follower's own revision moves by exactly one per source revision,
/// and its position is its revision less a fixed offset, kept by etcd
/// with the data: a follower cut short anywhere (an error, a restart)
/// goes on exactly where it stopped.
///
/// A follower keeps the source's keys without their leases: the source's
/// lease ends show as deletes, which it applies like any other (a lease of
/// its own would expire keys whose source lease is still kept alive).
pub async fn apply(
    etcd: &dyn EtcdData,
    store: &Store,
    segments: &[StoredSegment],
    keys: &Keyring,
    applied: i64,
) -> dkv_backup::Result<i64> {
    let mut reached = applied;
    for segment in segments {
        let changes: Vec<dkv_etcd::Change> = read_events(store, segment, keys)
            .await?
            .into_iter()
            .filter(|event| event.revision > reached)
            .map(|event| dkv_etcd::Change {
                lease: 0,
                ..change_of(event)
            })
            .collect();
        for revision in changes.chunk_by(|a, b| a.revision == b.revision) {
            // No lease is named, so none is granted: the TTL is unused.
            etcd.apply_changes(revision, 0)
                .await
                .map_err(|cause| dkv_backup::Error::Etcd {
                    operation: "applying the source's changes to a standby",
                    cause,
                })?;
            reached = revision[0].revision;
        }
        // The segment's last event is its last revision.
        reached = reached.max(segment.header.last_revision);
    }
    Ok(reached)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dkv_backup::continuous::chain::Base;
    use dkv_backup::continuous::segment::SegmentHeader;
    use jiff::Timestamp;

    /// A chain whose base is at `base` and whose segments end at `ends`.
    fn chain(name: &str, base: i64, ends: &[i64]) -> Chain {
        let mut after = base;
        let segments = ends
            .iter()
            .enumerate()
            .map(|(i, &last)| {
                let header = SegmentHeader {
                    format: "test".to_owned(),
                    chain: name.to_owned(),
                    sequence: i as u64 + 1,
                    after_revision: after,
                    last_revision: last,
                    previous_sha256: String::new(),
                    first_time: Timestamp::UNIX_EPOCH,
                    last_time: Timestamp::UNIX_EPOCH,
                    events: 1,
                };
                after = last;
                StoredSegment {
                    header,
                    uri: format!("{name}/{}", i + 1),
                    sha256: String::new(),
                }
            })
            .collect();
        Chain {
            base: Base {
                chain: name.to_owned(),
                revision: base,
                taken_at: Timestamp::UNIX_EPOCH,
                uri: format!("{name}/base"),
            },
            segments,
            broken: None,
        }
    }

    fn uris(follow: &Follow) -> Vec<&str> {
        match follow {
            Follow::Apply(segments) => segments.iter().map(|s| s.uri.as_str()).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn a_follower_applies_the_segments_after_what_it_has_in_order() {
        let chains = [chain("a", 10, &[20, 30, 40])];
        assert_eq!(uris(&next_segments(&chains, 10)), ["a/1", "a/2", "a/3"]);
        // Part of a segment applied (a replay cut short): that segment
        // again, its older events skipped.
        assert_eq!(uris(&next_segments(&chains, 25)), ["a/2", "a/3"]);
        assert_eq!(next_segments(&chains, 40), Follow::UpToDate);
    }

    #[test]
    fn a_follower_goes_on_in_the_next_chain_across_a_rotation() {
        // Chain b starts from a snapshot at 35, while a still recorded up
        // to 40. A follower at 20 needs a's segments up to 40 (b's hold
        // only what came after 35), then b's; one at 38 goes on in b (its
        // segment 1 holds 36-50, the events up to 38 skipped).
        let chains = [chain("a", 10, &[20, 30, 40]), chain("b", 35, &[50, 60])];
        assert_eq!(
            uris(&next_segments(&chains, 20)),
            ["a/2", "a/3", "b/1", "b/2"]
        );
        assert_eq!(uris(&next_segments(&chains, 38)), ["b/1", "b/2"]);
        assert_eq!(uris(&next_segments(&chains, 50)), ["b/2"]);
        assert_eq!(next_segments(&chains, 60), Follow::UpToDate);
    }

    #[test]
    fn revisions_no_chain_holds_stop_the_follower() {
        // Chain a was deleted by retention up to 40; chain b's base is at
        // 45: a follower at 30 cannot go on.
        let chains = [chain("b", 45, &[50])];
        assert_eq!(
            next_segments(&chains, 30),
            Follow::Gap {
                applied: 30,
                resumes_after: 45
            }
        );
        // A break inside what the chains hold: it goes as far as they
        // reach, then stops there.
        let chains = [chain("a", 10, &[20]), chain("b", 30, &[40])];
        assert_eq!(uris(&next_segments(&chains, 10)), ["a/1"]);
        assert_eq!(
            next_segments(&chains, 20),
            Follow::Gap {
                applied: 20,
                resumes_after: 30
            }
        );
    }

    /// Against the in-memory etcd, through a store in a directory: the
    /// source's changes recorded in two rounds reach a follower in two
    /// rounds, which then holds the source's keys and values each time.
    #[tokio::test]
    async fn a_follower_holds_the_sources_keys_after_each_round() {
        use dkv_backup::continuous::archive::{chain_location, continuous_location, read_chain};
        use dkv_backup::continuous::chain::chains;
        use dkv_backup::continuous::cutter::{CutSettings, Cutter};
        use dkv_backup::continuous::recorder::{Until, record};
        use dkv_backup::{Location, StoreConfig};
        use dkv_etcd::FakeEtcd;

        let dir = tempfile::tempdir().expect("a temporary directory");
        let destination = Location::parse(&format!("file://{}/", dir.path().display()))
            .expect("a file destination");
        let store = Store::open(&destination, &StoreConfig::default()).expect("a file store");
        let chain_dir = chain_location(&continuous_location(&destination, "shop", "orders"), "c1");
        let keys = Keyring::default();
        let base = Base {
            chain: "c1".to_owned(),
            revision: 1,
            taken_at: Timestamp::UNIX_EPOCH,
            uri: "c1/base".to_owned(),
        };
        let source = FakeEtcd::default();
        let follower = FakeEtcd::default();
        let settings = CutSettings {
            interval: std::time::Duration::from_millis(20),
            ..CutSettings::default()
        };
        let mut cutter = Cutter::start("c1", 1, settings, Timestamp::now());
        let mut applied = 1;
        for round in 0..2u8 {
            source.put(b"a", &[round]);
            source.put(b"b", b"kept");
            source.delete(b"a");
            let through = source.put(b"c", &[round, round]);
            record(
                &source,
                &store,
                &chain_dir,
                &mut cutter,
                std::future::pending(),
                Until::Stored(through),
                |_| {},
            )
            .await
            .expect("recording the source");
            let listed = read_chain(&store, &chain_dir, &keys)
                .await
                .expect("listing the chain");
            let chains = chains(std::slice::from_ref(&base), &listed);
            let Follow::Apply(segments) = next_segments(&chains, applied) else {
                panic!("round {round}: segments to apply after {applied}");
            };
            applied = apply(&follower, &store, &segments, &keys, applied)
                .await
                .expect("applying");
            assert_eq!(applied, through, "round {round}");
            assert_eq!(follower.key_values(), source.key_values(), "round {round}");
            // One revision of the follower's per source revision: its
            // position is its own revision.
            assert_eq!(
                follower.current_revision().await.expect("its revision"),
                source.current_revision().await.expect("its revision"),
                "round {round}"
            );
            assert_eq!(next_segments(&chains, applied), Follow::UpToDate);
        }
    }

    #[test]
    fn a_break_where_the_follower_stands_stops_it() {
        // Chain a holds 20 and 30, then its segment 3 went missing while
        // the source recorded on (4 and 5 are stored).
        let mut broken = chain("a", 10, &[20, 30]);
        broken.broken = Some("segment 3 is missing".to_owned());
        let chains = [broken];
        assert_eq!(uris(&next_segments(&chains, 10)), ["a/1", "a/2"]);
        assert_eq!(
            next_segments(&chains, 30),
            Follow::Broken {
                applied: 30,
                chain: "a".to_owned(),
                why: "segment 3 is missing".to_owned()
            }
        );
        // A newer chain that goes on from there: nothing is lost.
        let mut old = chain("a", 10, &[20, 30]);
        old.broken = Some("segment 3 is missing".to_owned());
        let chains = [old, chain("b", 25, &[40])];
        assert_eq!(uris(&next_segments(&chains, 30)), ["b/1"]);
    }

    #[test]
    fn a_new_chain_with_no_segments_yet_asks_nothing() {
        let chains = [chain("a", 10, &[20]), chain("b", 20, &[])];
        assert_eq!(next_segments(&chains, 20), Follow::UpToDate);
    }
}
