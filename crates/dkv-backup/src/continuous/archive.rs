//! Chains in object storage: where a cluster's segments go, storing a
//! sealed segment, and reading a chain back (headers verified, digests
//! computed from the stored bytes).

use std::collections::BTreeMap;

use bytes::Bytes;

use super::chain::{Base, Chain, PlanError, ReplayPlan, StoredSegment, Target, chains, plan};
use super::cutter::Sealed;
use super::segment::{self, ENCRYPTED_SUFFIX, Event, SEGMENT_SUFFIX, SegmentError};
use crate::artifact::Artifact;
use crate::encryption::Keyring;
use crate::error::{Error, Result};
use crate::location::Location;
use crate::store::Store;

/// The record of a chain's full snapshot, in the chain's directory.
pub const BASE_RECORD: &str = "base.json";

/// The directory of `cluster`'s chains under a backup `destination`.
pub fn continuous_location(destination: &Location, namespace: &str, cluster: &str) -> Location {
    destination.join(namespace).join(cluster).join("continuous")
}

/// The directory of one chain.
pub fn chain_location(continuous: &Location, chain: &str) -> Location {
    continuous.join(chain)
}

/// Stores a sealed segment in its chain's directory; returns it as listed.
pub async fn store_segment(
    store: &Store,
    chain_dir: &Location,
    sealed: &Sealed,
) -> Result<StoredSegment> {
    let location = chain_dir.join(&segment::object_name(
        &sealed.header,
        sealed.encoded.encrypted,
    ));
    store
        .put_small(location.path(), Bytes::from(sealed.encoded.bytes.clone()))
        .await?;
    Ok(StoredSegment {
        header: sealed.header.clone(),
        uri: location.to_string(),
        sha256: sealed.encoded.sha256.clone(),
    })
}

/// The bases of every chain under `continuous`.
pub async fn read_bases(store: &Store, continuous: &Location) -> Result<Vec<Base>> {
    let mut bases = Vec::new();
    for path in store.list(continuous.path()).await? {
        let Some(dir) = path.as_ref().strip_suffix(&format!("/{BASE_RECORD}")) else {
            continue;
        };
        let chain = dir.rsplit('/').next().unwrap_or_default().to_owned();
        let bytes = store.get_small(&path).await?;
        let artifact: Artifact = serde_json::from_slice(&bytes).map_err(|e| Error::BadSidecar {
            uri: store.location(&path).to_string(),
            message: e.to_string(),
        })?;
        bases.push(Base {
            chain,
            revision: artifact.revision,
            taken_at: artifact.taken_at,
            uri: artifact.uri,
        });
    }
    bases.sort_by_key(|b| b.revision);
    Ok(bases)
}

/// Plans a restore to `target` reading as little as it can: the bases,
/// then the segments of the one chain the target falls in (the newest
/// whose base is at or before it), however many chains are stored. Only
/// when that chain does not reach the target are the others read, for the
/// plan over all of them or the precise reason there is none (too early,
/// too late, in a gap).
pub async fn plan_restore(
    store: &Store,
    continuous: &Location,
    keys: &Keyring,
    target: Target,
) -> Result<std::result::Result<ReplayPlan, PlanError>> {
    let bases = read_bases(store, continuous).await?;
    let candidate = bases.iter().rev().find(|base| match target {
        Target::Latest => true,
        Target::Revision(r) => base.revision <= r,
        Target::Time(t) => base.taken_at <= t,
    });
    if let Some(base) = candidate {
        let segments = read_chain(store, &chain_location(continuous, &base.chain), keys).await?;
        if let Ok(planned) = plan(&chains(std::slice::from_ref(base), &segments), target) {
            return Ok(Ok(planned));
        }
    }
    Ok(plan(
        &read_chains(store, continuous, keys, &bases).await?,
        target,
    ))
}

/// Every chain of `bases`, read whole.
pub async fn read_chains(
    store: &Store,
    continuous: &Location,
    keys: &Keyring,
    bases: &[Base],
) -> Result<Vec<Chain>> {
    let mut segments = Vec::new();
    for base in bases {
        segments.extend(read_chain(store, &chain_location(continuous, &base.chain), keys).await?);
    }
    Ok(chains(bases, &segments))
}

/// Reads every segment of the chain in `chain_dir`, in chain order: each
/// object's header, with the sha256 of its stored bytes. An object that is
/// not a readable segment is an error naming it. Encrypted segments are
/// read with `keys`.
pub async fn read_chain(
    store: &Store,
    chain_dir: &Location,
    keys: &Keyring,
) -> Result<Vec<StoredSegment>> {
    let mut out = Vec::new();
    for path in store.list(chain_dir.path()).await? {
        if path.filename().and_then(name_parts).is_none() {
            continue;
        }
        let location = store.location(&path);
        let bytes = store.get_small(&path).await?;
        let (header, _) = segment::decode(&bytes, keys).map_err(|e| unreadable(&location, e))?;
        out.push(StoredSegment {
            header,
            uri: location.to_string(),
            sha256: segment::hex_sha256(&bytes),
        });
    }
    out.sort_by_key(|s| s.header.sequence);
    Ok(out)
}

/// The newest stored segment of the chain in `chain_dir` (highest
/// sequence, from the object names; only that object is read), or `None`
/// for a chain without segments. What a restarted agent resumes after: it
/// reads one object however long the chain is.
pub async fn newest_segment(
    store: &Store,
    chain_dir: &Location,
    keys: &Keyring,
) -> Result<Option<StoredSegment>> {
    let newest = store
        .list(chain_dir.path())
        .await?
        .into_iter()
        .filter_map(|path| {
            let sequence = name_parts(path.filename()?)?.0;
            Some((sequence, path))
        })
        .max_by_key(|(sequence, _)| *sequence);
    let Some((_, path)) = newest else {
        return Ok(None);
    };
    let location = store.location(&path);
    let bytes = store.get_small(&path).await?;
    let (header, _) = segment::decode(&bytes, keys).map_err(|e| unreadable(&location, e))?;
    Ok(Some(StoredSegment {
        header,
        uri: location.to_string(),
        sha256: segment::hex_sha256(&bytes),
    }))
}

/// The newest revision each chain directory under `continuous` reaches,
/// from segment names alone (no object is read): `(chain, last revision)`
/// for chains with at least one segment, in name order.
pub async fn chain_ends(store: &Store, continuous: &Location) -> Result<Vec<(String, i64)>> {
    let mut ends: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    for path in store.list(continuous.path()).await? {
        let parts: Vec<_> = path.parts().collect();
        let [.., dir, file] = parts.as_slice() else {
            continue;
        };
        let Some((sequence, last)) = name_parts(file.as_ref()) else {
            continue;
        };
        let entry = ends
            .entry(dir.as_ref().to_owned())
            .or_insert((sequence, last));
        if sequence >= entry.0 {
            *entry = (sequence, last);
        }
    }
    Ok(ends
        .into_iter()
        .map(|(chain, (_, last))| (chain, last))
        .collect())
}

/// `(sequence, last revision)` from a segment object's name (see
/// [`segment::object_name`]); `None` for any other object.
fn name_parts(name: &str) -> Option<(u64, i64)> {
    let name = name.strip_suffix(ENCRYPTED_SUFFIX).unwrap_or(name);
    let stem = name.strip_suffix(SEGMENT_SUFFIX)?;
    let mut parts = stem.split('-');
    let sequence = parts.next()?.parse().ok()?;
    let _after: i64 = parts.next()?.parse().ok()?;
    let last = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((sequence, last))
}

/// The events of a stored segment, checked against the digest the chain
/// recorded for it, decrypted with `keys` when encrypted.
pub async fn read_events(
    store: &Store,
    segment: &StoredSegment,
    keys: &Keyring,
) -> Result<Vec<Event>> {
    let location = Location::parse(&segment.uri)?;
    let bytes = store.get_small(location.path()).await?;
    let actual = segment::hex_sha256(&bytes);
    if actual != segment.sha256 {
        return Err(Error::ChecksumMismatch {
            uri: segment.uri.clone(),
            expected: segment.sha256.clone(),
            actual,
        });
    }
    let (_, events) = segment::decode(&bytes, keys).map_err(|e| unreadable(&location, e))?;
    Ok(events)
}

fn unreadable(location: &Location, err: SegmentError) -> Error {
    match err {
        // A missing key is a configuration problem, not a damaged segment.
        SegmentError::Codec(cause) => Error::Codec {
            uri: location.to_string(),
            cause,
        },
        err => Error::InvalidSegment {
            uri: location.to_string(),
            reason: err.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jiff::Timestamp;

    use super::super::chain::{Base, Target, chains, plan};
    use super::super::cutter::{CutSettings, Cutter};
    use super::super::segment::EventKind;
    use super::*;
    use crate::store::StoreConfig;

    fn put(revision: i64, key: &str) -> Event {
        Event {
            revision,
            kind: EventKind::Put,
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
            lease: 0,
            received_ms: revision,
        }
    }

    #[tokio::test]
    async fn a_chain_written_segment_by_segment_reads_back_and_plans_a_restore() {
        let dir = tempfile::tempdir().unwrap();
        let destination = Location::parse(&format!("file://{}/", dir.path().display())).unwrap();
        let store = Store::open(&destination, &StoreConfig::default()).unwrap();
        let continuous = continuous_location(&destination, "shop", "orders");
        let chain_dir = chain_location(&continuous, "base-100");
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let settings = CutSettings {
            interval: Duration::from_secs(10),
            max_segment_bytes: 1 << 20,
            ..CutSettings::default()
        };
        let mut cutter = Cutter::start("base-100", 100, settings, now);
        for (revision, key) in [(101, "a"), (102, "b"), (103, "c")] {
            cutter.push(put(revision, key)).unwrap();
            let sealed = cutter.seal(now).unwrap();
            store_segment(&store, &chain_dir, &sealed).await.unwrap();
            cutter.stored();
        }
        let listed = read_chain(&store, &chain_dir, &Keyring::default())
            .await
            .unwrap();
        assert_eq!(listed.len(), 3);
        let newest = newest_segment(&store, &chain_dir, &Keyring::default())
            .await
            .unwrap();
        assert_eq!(newest.as_ref(), listed.last());
        assert_eq!(
            chain_ends(&store, &continuous).await.unwrap(),
            vec![("base-100".to_owned(), 103)]
        );
        let base = Base {
            chain: "base-100".into(),
            revision: 100,
            taken_at: now,
            uri: "file:///base.db".into(),
        };
        let built = chains(&[base], &listed);
        assert_eq!(built[0].broken, None);
        let to_102 = plan(&built, Target::Revision(102)).unwrap();
        assert_eq!(to_102.segments.len(), 2);
        let events = read_events(&store, &to_102.segments[1], &Keyring::default())
            .await
            .unwrap();
        assert_eq!(events, vec![put(102, "b")]);

        // A segment changed in the store no longer matches its chain.
        let mut tampered = listed[1].clone();
        tampered.sha256 = "0".repeat(64);
        assert!(matches!(
            read_events(&store, &tampered, &Keyring::default()).await,
            Err(Error::ChecksumMismatch { .. })
        ));
    }
}
