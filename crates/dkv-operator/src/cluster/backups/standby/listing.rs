//! The source's chains as stored, read again on every round of a follower
//! without reading again what it read before: each segment object's header
//! is read once (objects are stored whole and never rewritten), and what
//! the source's retention deleted leaves the listing.

use std::collections::{HashMap, HashSet};

use dkv_backup::continuous::archive::{chain_location, read_bases};
use dkv_backup::continuous::chain::{Chain, StoredSegment, chains};
use dkv_backup::continuous::segment::{self, ENCRYPTED_SUFFIX, SEGMENT_SUFFIX, SegmentError};
use dkv_backup::{Keyring, Location, Store};

/// The segments a follower has read the headers of, by object path.
#[derive(Default)]
pub struct Listing {
    known: HashMap<String, StoredSegment>,
}

impl Listing {
    /// Every chain under `continuous` (the source's continuous-backup
    /// location), with the segments stored now.
    pub async fn refresh(
        &mut self,
        store: &Store,
        continuous: &Location,
        keys: &Keyring,
    ) -> dkv_backup::Result<Vec<Chain>> {
        let bases = read_bases(store, continuous).await?;
        let mut listed = HashSet::new();
        for base in &bases {
            let dir = chain_location(continuous, &base.chain);
            for path in store.list(dir.path()).await? {
                let Some(name) = path.filename() else {
                    continue;
                };
                if !name
                    .strip_suffix(ENCRYPTED_SUFFIX)
                    .unwrap_or(name)
                    .ends_with(SEGMENT_SUFFIX)
                {
                    continue;
                }
                let key = path.to_string();
                listed.insert(key.clone());
                if self.known.contains_key(&key) {
                    continue;
                }
                let location = store.location(&path);
                let bytes = store.get_small(&path).await?;
                let (header, _) =
                    segment::decode(&bytes, keys).map_err(|e| unreadable(&location, e))?;
                self.known.insert(
                    key,
                    StoredSegment {
                        header,
                        uri: location.to_string(),
                        sha256: segment::hex_sha256(&bytes),
                    },
                );
            }
        }
        self.known.retain(|key, _| listed.contains(key));
        let segments: Vec<StoredSegment> = self.known.values().cloned().collect();
        Ok(chains(&bases, &segments))
    }
}

/// A segment that cannot be read, named.
fn unreadable(location: &Location, err: SegmentError) -> dkv_backup::Error {
    match err {
        // A missing key is a configuration problem, not a damaged segment.
        SegmentError::Codec(cause) => dkv_backup::Error::Codec {
            uri: location.to_string(),
            cause,
        },
        err => dkv_backup::Error::InvalidSegment {
            uri: location.to_string(),
            reason: err.to_string(),
        },
    }
}
