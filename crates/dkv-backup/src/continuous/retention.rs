//! Retention of a cluster's continuous backup: whole chains go, once every
//! point they can restore to is older than the maximum age, or once newer
//! chains fill the maximum count. The newest chain never goes (it is being
//! recorded and holds the newest points), so a restore point that is kept
//! never loses a segment or the base snapshot it needs.

use jiff::{SignedDuration, Timestamp};

use super::archive::{BASE_RECORD, chain_location, newest_segment, read_bases};
use crate::artifact::delete_artifact;
use crate::encryption::Keyring;
use crate::error::{Error, Result};
use crate::location::Location;
use crate::store::{Store, StoreConfig};

/// A stored chain as retention sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainAge {
    pub chain: String,
    /// The chain's base snapshot.
    pub base_uri: String,
    /// The newest point the chain can restore to.
    pub newest_time: Timestamp,
}

/// How many chains, and how old, retention keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChainRetention {
    /// A chain whose every point is older than this goes.
    pub max_age: Option<SignedDuration>,
    /// Only this many of the newest chains stay (at least the newest).
    pub max_chains: Option<u32>,
}

/// The chains of `chains` (oldest first) that expire at `now`: every point
/// of theirs is older than the maximum age, or at least the maximum count
/// of chains is newer. The newest chain never expires.
pub fn expired(chains: &[ChainAge], keep: ChainRetention, now: Timestamp) -> Vec<&ChainAge> {
    let Some((_newest, older)) = chains.split_last() else {
        return Vec::new();
    };
    let kept_older = keep
        .max_chains
        .map_or(usize::MAX, |n| (n.max(1) - 1) as usize);
    let beyond_count = older.len().saturating_sub(kept_older);
    older
        .iter()
        .enumerate()
        .filter(|(i, c)| {
            *i < beyond_count
                || keep
                    .max_age
                    .is_some_and(|max_age| now.duration_since(c.newest_time) > max_age)
        })
        .map(|(_, c)| c)
        .collect()
}

/// The chains under `continuous`, oldest first, each with the time of the
/// newest point it reaches (its newest segment's end: one object read per
/// chain; the base's time for a chain without segments). A chain whose
/// newest segment `keys` cannot decrypt counts as new: it is kept until
/// its age can be read.
pub async fn chain_ages(
    store: &Store,
    continuous: &Location,
    keys: &Keyring,
) -> Result<Vec<ChainAge>> {
    let mut out = Vec::new();
    for base in read_bases(store, continuous).await? {
        let dir = chain_location(continuous, &base.chain);
        let newest_time = match newest_segment(store, &dir, keys).await {
            Ok(newest) => newest.map_or(base.taken_at, |s| s.header.last_time),
            Err(Error::Codec { uri, cause }) => {
                tracing::warn!(%uri, error = %cause, "cannot read the age of a continuous backup chain; keeping it");
                Timestamp::now()
            }
            Err(err) => return Err(err),
        };
        out.push(ChainAge {
            newest_time,
            chain: base.chain,
            base_uri: base.uri,
        });
    }
    Ok(out)
}

/// Deletes one chain: its record first (from then on no agent resumes it
/// and no restore plans over it), then its segments, then its base
/// snapshot with the snapshot's record. Deleting again after a failure
/// part-way finishes the job.
pub async fn delete_chain(
    store: &Store,
    config: &StoreConfig,
    continuous: &Location,
    chain: &ChainAge,
) -> Result<()> {
    let dir = chain_location(continuous, &chain.chain);
    store.delete(dir.join(BASE_RECORD).path()).await?;
    for path in store.list(dir.path()).await? {
        store.delete(&path).await?;
    }
    delete_artifact(config, &chain.base_uri).await
}

#[cfg(test)]
mod tests {
    use super::super::archive::{continuous_location, read_chain};
    use super::*;
    use crate::artifact::sidecar_location;
    use crate::testing::write_chain;

    fn at(hours: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + hours * 3600).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn chain(name: &str, newest_hour: i64) -> ChainAge {
        ChainAge {
            chain: name.to_owned(),
            base_uri: format!("file:///b/{name}.db"),
            newest_time: at(newest_hour),
        }
    }

    #[test]
    fn only_whole_chains_older_than_the_age_go_and_never_the_newest() {
        let chains = [chain("a", 0), chain("b", 10), chain("c", 30)];
        let day = ChainRetention {
            max_age: Some(SignedDuration::from_hours(24)),
            max_chains: None,
        };
        // At hour 40: a ended 40 h ago, b 30 h ago (both past 24 h), c is
        // the newest.
        let names = |v: Vec<&ChainAge>| v.iter().map(|c| c.chain.clone()).collect::<Vec<_>>();
        assert_eq!(names(expired(&chains, day, at(40))), ["a", "b"]);
        // At hour 30: b ended exactly 20 h ago: kept.
        assert_eq!(names(expired(&chains, day, at(30))), ["a"]);
        // The newest chain stays however old it is.
        assert!(expired(&chains[2..], day, at(1000)).is_empty());
        assert!(expired(&[], day, at(1000)).is_empty());
    }

    #[test]
    fn a_count_keeps_the_newest_chains_whatever_their_age() {
        let chains = [
            chain("a", 0),
            chain("b", 10),
            chain("c", 30),
            chain("d", 31),
        ];
        let names = |v: Vec<&ChainAge>| v.iter().map(|c| c.chain.clone()).collect::<Vec<_>>();
        let two = ChainRetention {
            max_age: None,
            max_chains: Some(2),
        };
        assert_eq!(names(expired(&chains, two, at(32))), ["a", "b"]);
        // Zero is read as one: the newest chain always stays.
        let none = ChainRetention {
            max_age: None,
            max_chains: Some(0),
        };
        assert_eq!(names(expired(&chains, none, at(32))), ["a", "b", "c"]);
        // Both limits apply.
        let both = ChainRetention {
            max_age: Some(SignedDuration::from_hours(24)),
            max_chains: Some(3),
        };
        assert_eq!(names(expired(&chains, both, at(40))), ["a", "b"]);
        assert!(expired(&chains, ChainRetention::default(), at(1000)).is_empty());
    }

    #[tokio::test]
    async fn an_expired_chain_goes_whole_and_the_newest_stays() {
        let dir = tempfile::tempdir().unwrap();
        let destination = Location::parse(&format!("file://{}/", dir.path().display())).unwrap();
        let store = Store::open(&destination, &StoreConfig::default()).unwrap();
        let continuous = continuous_location(&destination, "shop", "orders");
        let old_base = write_chain(&store, &destination, &continuous, "old", 100, at(0)).await;
        let new_base = write_chain(&store, &destination, &continuous, "new", 200, at(30)).await;

        let ages = chain_ages(&store, &continuous, &Keyring::default())
            .await
            .unwrap();
        let names: Vec<&str> = ages.iter().map(|c| c.chain.as_str()).collect();
        assert_eq!(names, ["old", "new"]);
        assert_eq!(ages[0].newest_time, at(0));
        let keep = ChainRetention {
            max_age: Some(SignedDuration::from_hours(24)),
            max_chains: None,
        };
        let gone = expired(&ages, keep, at(40));
        assert_eq!(gone, [&ages[0]]);
        delete_chain(&store, &StoreConfig::default(), &continuous, gone[0])
            .await
            .unwrap();

        // The old chain, its base and the base's record are gone; the new
        // chain is whole.
        let left = chain_ages(&store, &continuous, &Keyring::default())
            .await
            .unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].chain, "new");
        assert!(
            store
                .list(chain_location(&continuous, "old").path())
                .await
                .unwrap()
                .is_empty()
        );
        for path in [
            old_base.path().clone(),
            sidecar_location(&old_base).path().clone(),
        ] {
            assert!(
                store.get_small(&path).await.is_err(),
                "{path} is still there"
            );
        }
        assert!(store.get_small(new_base.path()).await.is_ok());
        assert_eq!(
            read_chain(
                &store,
                &chain_location(&continuous, "new"),
                &Keyring::default()
            )
            .await
            .unwrap()
            .len(),
            2
        );
    }

    /// Thirty days of daily chains under `maxAge: 7d`, pruned after each
    /// as the operator does: the store holds the last seven days and the
    /// newest chain, and stops growing once the first week has passed.
    #[tokio::test]
    async fn with_daily_chains_and_a_week_of_retention_the_store_stops_growing() {
        let dir = tempfile::tempdir().unwrap();
        let destination = Location::parse(&format!("file://{}/", dir.path().display())).unwrap();
        let store = Store::open(&destination, &StoreConfig::default()).unwrap();
        let continuous = continuous_location(&destination, "shop", "orders");
        let week = ChainRetention {
            max_age: Some(SignedDuration::from_hours(7 * 24)),
            max_chains: None,
        };
        let mut stored = Vec::new();
        for day in 0..30i64 {
            let name = format!("day-{day:02}");
            write_chain(
                &store,
                &destination,
                &continuous,
                &name,
                100 * (day + 1),
                at(24 * day),
            )
            .await;
            let now = at(24 * day + 1);
            let ages = chain_ages(&store, &continuous, &Keyring::default())
                .await
                .unwrap();
            for chain in expired(&ages, week, now) {
                delete_chain(&store, &StoreConfig::default(), &continuous, chain)
                    .await
                    .unwrap();
            }
            let left = chain_ages(&store, &continuous, &Keyring::default())
                .await
                .unwrap();
            stored.push((
                left.len(),
                store.total_size(destination.path()).await.unwrap(),
            ));
        }
        // From the eighth day on: the chains of the last seven days (each
        // holds points up to the next one's start), and the same bytes
        // (within the few bytes by which records of other revisions differ).
        let (chains, bytes) = stored[7];
        assert_eq!(chains, 7, "{stored:?}");
        assert!(
            stored[7..]
                .iter()
                .all(|(n, b)| *n == chains && b.abs_diff(bytes) * 100 < bytes),
            "{stored:?}"
        );
    }
}
