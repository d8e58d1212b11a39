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
use dkv_etcd::{Change, ChangeKind, Condition, EtcdData, Guard};
use futures::StreamExt as _;
use futures::stream::FuturesOrdered;
use tracing::debug;

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

/// How far [`apply`] took a follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowedTo {
    /// It holds the source's changes up to this revision.
    Reached(i64),
    /// Its data is no longer its source's copy: a change of source revision
    /// `refused` did not find what the source had before it, or its own
    /// revision (`own`, less the offset) is not one the source's changes
    /// account for (something else wrote to it).
    NotACopy {
        reached: i64,
        own: i64,
        refused: i64,
    },
}

/// How many transactions a follower has on their way at once: one. etcd
/// takes concurrent requests in any order, and a guarded transaction
/// refused for arriving before its turn costs a raft round like one
/// applied. Measured with `bench/run.sh --only standby` (2 cores, source
/// and standby of 3 members, about 950 writes/s for 30 s): lag p99 26 s
/// one at a time, 45 s with 16 on their way, 157 s with 32 spread over
/// every member.
pub const IN_FLIGHT: usize = 1;

/// At most this many revisions that only delete are looked back over to
/// guard a transaction; one after a longer run of them waits for every
/// transaction before it instead.
const DELETES_LOOKED_BACK: usize = 16;

/// One source revision's transaction, as [`apply`] sends it.
#[derive(Debug)]
struct Transaction<'a> {
    changes: &'a [Change],
    guards: Vec<Guard>,
    /// Sent only once every transaction before it was applied (its guards
    /// cannot tell whether they were).
    after_the_rest: bool,
}

impl Transaction<'_> {
    fn revision(&self) -> i64 {
        self.changes[0].revision
    }
}

/// Applies `segments` (as [`next_segments`] returned them) to `etcd`,
/// each source revision after `applied` once, in order, as one
/// transaction of its own: the follower's own revision moves by exactly
/// one per source revision, and its position is its revision less
/// `offset`, kept by etcd with the data.
///
/// Up to [`IN_FLIGHT`] transactions are on their way at once, to one
/// member ([`EtcdData::apply_guarded`]), and each is guarded so that etcd
/// applies it only in its place (`transactions`).
/// So a transaction that arrives out of order, or again (a retry of one
/// that timed out but landed), changes nothing; the follower then reads
/// where it stands (`settle`) and goes on from there. A follower cut
/// short anywhere (an error, a restart) goes on exactly where it stopped.
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
    offset: i64,
) -> dkv_backup::Result<FollowedTo> {
    let mut reached = applied;
    for segment in segments {
        let changes: Vec<Change> = read_events(store, segment, keys)
            .await?
            .into_iter()
            .filter(|event| event.revision > reached)
            .map(|event| Change {
                lease: 0,
                ..change_of(event)
            })
            .collect();
        let revisions: Vec<&[Change]> = changes.chunk_by(|a, b| a.revision == b.revision).collect();
        let mut next = 0;
        while next < revisions.len() {
            let sent = transactions(&revisions[next..], offset);
            if in_flight(etcd, &sent).await? {
                reached = sent.last().map_or(reached, Transaction::revision);
                break;
            }
            // Refused: out of order (etcd takes concurrent requests in any
            // order), or something else changed the follower.
            match settle(etcd, &sent, reached, offset).await? {
                FollowedTo::Reached(at) => {
                    next += sent.iter().take_while(|t| t.revision() <= at).count();
                    reached = at;
                }
                no_copy @ FollowedTo::NotACopy { .. } => return Ok(no_copy),
            }
        }
        // The segment's last event is its last revision.
        reached = reached.max(segment.header.last_revision);
    }
    Ok(FollowedTo::Reached(reached))
}

/// The transactions of `revisions` (consecutive source revisions, the
/// first right after what the follower holds), each guarded:
///
/// - *not applied yet*: a key it puts was last changed before its own
///   revision; or a key it deletes exists and was last changed before it
///   (after, it is gone, or put again later);
/// - *the one before it applied*: a key that one put was last changed at
///   that one's own revision. A revision that only deletes proves nothing
///   alone (its key was absent before it was ever put, too): its deleted
///   key absent, and the same of the revision before it, back to one that
///   puts or to the first (the follower read that it holds what comes
///   before, and its position only moves on). After a run of more than
///   [`DELETES_LOOKED_BACK`] of them, a transaction is sent after the
///   rest instead.
///
/// So each lands only right after the one before it, once.
fn transactions<'a>(revisions: &[&'a [Change]], offset: i64) -> Vec<Transaction<'a>> {
    revisions
        .iter()
        .enumerate()
        .map(|(i, changes)| {
            let own = changes[0].revision + offset;
            let mut guards = match changes.iter().find(|c| c.kind == ChangeKind::Put) {
                Some(put) => vec![Guard::new(put.key.clone(), Condition::ChangedBefore(own))],
                None => vec![
                    Guard::new(changes[0].key.clone(), Condition::Present),
                    Guard::new(changes[0].key.clone(), Condition::ChangedBefore(own)),
                ],
            };
            let not_yet = guards.len();
            let mut after_the_rest = false;
            for before in revisions[..i].iter().rev() {
                let puts = before.iter().any(|c| c.kind == ChangeKind::Put);
                if !puts && guards.len() - not_yet == DELETES_LOOKED_BACK {
                    after_the_rest = true;
                    guards.truncate(not_yet);
                    break;
                }
                guards.push(applied_guard(before, offset));
                if puts {
                    break;
                }
            }
            Transaction {
                changes,
                guards,
                after_the_rest,
            }
        })
        .collect()
}

/// What holds once the source revision of `changes` is applied, until the
/// next one is: a key it put changed at its own revision, or a key it
/// deleted absent.
fn applied_guard(changes: &[Change], offset: i64) -> Guard {
    let change = changes
        .iter()
        .find(|c| c.kind == ChangeKind::Put)
        .unwrap_or(&changes[0]);
    applied_guard_of(change, offset)
}

/// [`applied_guard`] for each of `changes` (up to [`CHECKED_KEYS`]), and
/// each put's value.
fn applied_guards(changes: &[Change], offset: i64) -> Vec<Guard> {
    changes
        .iter()
        .take(CHECKED_KEYS)
        .flat_map(|c| {
            let value = (c.kind == ChangeKind::Put)
                .then(|| Guard::new(c.key.clone(), Condition::ValueIs(c.value.clone())));
            std::iter::once(applied_guard_of(c, offset)).chain(value)
        })
        .collect()
}

/// At most this many keys of a revision are checked to tell where a
/// follower stands (etcd takes up to 128 comparisons in a transaction).
const CHECKED_KEYS: usize = 32;

fn applied_guard_of(change: &Change, offset: i64) -> Guard {
    match change.kind {
        ChangeKind::Put => Guard::new(
            change.key.clone(),
            Condition::ChangedAt(change.revision + offset),
        ),
        ChangeKind::Delete => Guard::new(change.key.clone(), Condition::Absent),
    }
}

/// Sends `transactions` in order, up to [`IN_FLIGHT`] at once (one that
/// must go after the rest once those are applied); whether every one was
/// applied. After the first one refused, no more are sent, and those on
/// their way are waited for; an error is returned once they are.
async fn in_flight(
    etcd: &dyn EtcdData,
    transactions: &[Transaction<'_>],
) -> dkv_backup::Result<bool> {
    let mut unsent = transactions.iter().peekable();
    let mut sent = FuturesOrdered::new();
    let mut outcome = Ok(true);
    loop {
        while outcome.as_ref().is_ok_and(|all| *all) && sent.len() < IN_FLIGHT {
            let Some(next) = unsent.next_if(|t| !t.after_the_rest || sent.is_empty()) else {
                break;
            };
            sent.push_back(etcd.apply_guarded(next.changes, &next.guards));
        }
        let Some(result) = sent.next().await else {
            return outcome;
        };
        match result {
            Ok(true) => {}
            Ok(false) => {
                if outcome.is_ok() {
                    outcome = Ok(false);
                }
            }
            Err(cause) => {
                if outcome.is_ok() {
                    outcome = Err(dkv_backup::Error::Etcd {
                        operation: "applying the source's changes to a standby",
                        cause,
                    });
                }
            }
        }
    }
}

/// Where a follower that held source revision `reached` stands after one
/// of `transactions` was refused: its own revision, less `offset`, if the
/// changes of that source revision are what it holds. Nothing is on its
/// way any more, so when nothing of these landed, the first is sent once
/// more, alone: refused again, the follower is not its source's copy.
async fn settle(
    etcd: &dyn EtcdData,
    transactions: &[Transaction<'_>],
    reached: i64,
    offset: i64,
) -> dkv_backup::Result<FollowedTo> {
    let own = || async {
        etcd.current_revision()
            .await
            .map(|r| r - offset)
            .map_err(|cause| dkv_backup::Error::Etcd {
                operation: "reading the standby's revision",
                cause,
            })
    };
    let mut at = own().await?;
    debug!(
        holds = reached,
        stands_at = at,
        "a standby's transaction was refused; finding where it stands"
    );
    let mut refused = reached + 1;
    if at == reached
        && let Some(first) = transactions.first()
    {
        let sent = etcd.apply_guarded(first.changes, &first.guards).await;
        match sent.map_err(|cause| dkv_backup::Error::Etcd {
            operation: "applying the source's changes to a standby",
            cause,
        })? {
            true => return Ok(FollowedTo::Reached(first.revision())),
            false => at = own().await?,
        }
        if at == reached {
            return Ok(FollowedTo::NotACopy {
                reached,
                own: at,
                refused,
            });
        }
    }
    if let Some(landed) = transactions.iter().find(|t| t.revision() == at) {
        let check = etcd
            .apply_guarded(&[], &applied_guards(landed.changes, offset))
            .await;
        if check.map_err(|cause| dkv_backup::Error::Etcd {
            operation: "checking a standby's position",
            cause,
        })? {
            return Ok(FollowedTo::Reached(at));
        }
        refused = at;
    }
    Ok(FollowedTo::NotACopy {
        reached,
        own: at,
        refused,
    })
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
            applied = match apply(&follower, &store, &segments, &keys, applied, 0)
                .await
                .expect("applying")
            {
                FollowedTo::Reached(reached) => reached,
                other => panic!("round {round}: {other:?}"),
            };
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

    fn put(revision: i64, key: &str, value: &str) -> Change {
        Change {
            revision,
            kind: ChangeKind::Put,
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
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

    /// The guards make a follower's transaction apply only in its place:
    /// not before the one before it, and never twice.
    #[tokio::test]
    async fn a_transaction_out_of_order_or_again_changes_nothing() {
        use dkv_etcd::FakeEtcd;
        // The source: revision 2 puts a, 3 puts b and c, 4 deletes c, 5
        // puts d, 6 deletes a, 7 puts a.
        let revisions = [
            vec![put(2, "a", "1")],
            vec![put(3, "b", "2"), put(3, "c", "2")],
            vec![delete(4, "c")],
            vec![put(5, "d", "3")],
            vec![delete(6, "a")],
            vec![put(7, "a", "4")],
        ];
        let slices: Vec<&[Change]> = revisions.iter().map(Vec::as_slice).collect();
        let sent = transactions(&slices, 0);
        let follower = FakeEtcd::default();
        let send = async |i: usize| {
            follower
                .apply_guarded(sent[i].changes, &sent[i].guards)
                .await
                .expect("the fake answers")
        };
        assert!(!send(1).await, "revision 3 before 2");
        assert!(send(0).await);
        assert!(!send(0).await, "revision 2 again");
        // c was never put: its delete's absence alone would let 5 through.
        assert!(!send(3).await, "revision 5 before 3 and 4");
        assert!(!send(2).await, "revision 4 before 3");
        assert!(send(1).await);
        assert!(!send(3).await, "revision 5 before 4");
        assert!(send(2).await);
        assert!(!send(2).await, "the delete again");
        assert!(!send(1).await, "revision 3 again, after 4");
        assert!(send(3).await);
        assert!(send(4).await);
        assert!(send(5).await);
        assert!(!send(4).await, "a delete again, its key put again since");
        assert_eq!(follower.current_revision().await.expect("its revision"), 7);
        assert_eq!(
            follower.key_values(),
            [
                (b"a".to_vec(), b"4".to_vec()),
                (b"b".to_vec(), b"2".to_vec()),
                (b"d".to_vec(), b"3".to_vec())
            ]
            .into()
        );
    }

    /// After a long run of revisions that only delete, a transaction waits
    /// for every one before it; a shorter run is looked back over.
    #[test]
    fn a_long_run_of_deletes_is_waited_for() {
        let mut revisions = vec![vec![put(2, "p", "1")]];
        for i in 0..=DELETES_LOOKED_BACK as i64 {
            revisions.push(vec![delete(3 + i, &format!("d{i}"))]);
        }
        revisions.push(vec![put(4 + DELETES_LOOKED_BACK as i64, "q", "2")]);
        let slices: Vec<&[Change]> = revisions.iter().map(Vec::as_slice).collect();
        let sent = transactions(&slices, 0);
        let waits: Vec<bool> = sent.iter().map(|t| t.after_the_rest).collect();
        let mut expected = vec![false; sent.len()];
        expected[sent.len() - 1] = true;
        assert_eq!(waits, expected);
        // The first: nothing to look back on; a put's successor (a
        // delete: two of its own): the put; the next: the delete and the
        // put; the last delete of the run: every delete before it, then the
        // put.
        assert_eq!(sent[0].guards.len(), 1);
        assert_eq!(sent[1].guards.len(), 3);
        assert_eq!(sent[2].guards.len(), 4);
        let last_delete = &sent[sent.len() - 2];
        assert_eq!(last_delete.guards.len(), 3 + DELETES_LOOKED_BACK);
        assert_eq!(sent[sent.len() - 1].guards.len(), 1);
    }

    /// A transaction that timed out but landed: the follower finds itself
    /// further on than it thought, and goes on from there. A write of
    /// someone else's, or a key the source had missing here: it is not its
    /// source's copy any more.
    #[tokio::test]
    async fn a_follower_goes_on_where_it_stands_and_stops_where_it_is_no_copy() {
        use dkv_etcd::FakeEtcd;
        let revisions = [
            vec![put(2, "a", "1")],
            vec![put(3, "b", "2")],
            vec![put(4, "c", "3")],
            vec![put(5, "d", "4")],
            vec![delete(6, "z")],
        ];
        let slices: Vec<&[Change]> = revisions.iter().map(Vec::as_slice).collect();
        let transactions = transactions(&slices, 0);
        let follower = FakeEtcd::default();
        assert!(
            in_flight(&follower, &transactions[..1])
                .await
                .expect("sent")
        );
        // Revision 3 landed, its answer lost: sent again (with 4, when
        // several are on their way), refused; the follower stands at 3, or
        // at 4 if 4 was on its way too.
        let stale = &transactions[1];
        let landed = follower.apply_guarded(stale.changes, &stale.guards).await;
        assert!(landed.expect("sent"));
        assert!(
            !in_flight(&follower, &transactions[1..3])
                .await
                .expect("sent")
        );
        let settled = settle(&follower, &transactions[1..3], 2, 0).await;
        let stands = follower.current_revision().await.expect("its revision");
        assert_eq!(settled.expect("settled"), FollowedTo::Reached(stands));
        if stands == 3 {
            let rest = in_flight(&follower, &transactions[2..3]).await;
            assert!(rest.expect("sent"));
        }
        // Someone writes d before the follower does.
        follower.put(b"d", b"mine");
        assert!(
            !in_flight(&follower, &transactions[3..4])
                .await
                .expect("sent")
        );
        let settled = settle(&follower, &transactions[3..4], 4, 0).await;
        let no_copy = FollowedTo::NotACopy {
            reached: 4,
            own: 5,
            refused: 5,
        };
        assert_eq!(settled.expect("settled"), no_copy);
        // The source deletes z, which this follower never had: refused,
        // and refused again alone.
        let other = FakeEtcd::default();
        for landed in &transactions[..4] {
            other
                .apply_changes(landed.changes, 0)
                .await
                .expect("applied");
        }
        assert!(!in_flight(&other, &transactions[4..]).await.expect("sent"));
        let settled = settle(&other, &transactions[4..], 5, 0).await;
        let no_copy = FollowedTo::NotACopy {
            reached: 5,
            own: 5,
            refused: 6,
        };
        assert_eq!(settled.expect("settled"), no_copy);
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
