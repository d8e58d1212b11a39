//! etcd's own integrity check of a snapshot stream.
//!
//! etcd (3.4 and later) appends the sha256 of the database it sent as the
//! last 32 bytes of every `Maintenance.Snapshot` stream, and its restore
//! tools check it. Checking it while streaming catches a truncated or
//! corrupted snapshot before it is stored and recorded as a good backup.
//! The database itself is a whole number of bbolt pages, so a complete
//! snapshot's size is 32 more than a multiple of 512 — the same test
//! `etcdutl snapshot restore` uses to find the hash.

use sha2::{Digest, Sha256};

const HASH_LEN: usize = 32;

/// Hashes everything but the last 32 bytes seen so far, and keeps those.
#[derive(Default)]
pub struct SnapshotCheck {
    hasher: Sha256,
    tail: Vec<u8>,
    total: u64,
}

impl SnapshotCheck {
    pub fn update(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if chunk.len() >= HASH_LEN {
            self.hasher.update(&self.tail);
            let (body, tail) = chunk.split_at(chunk.len() - HASH_LEN);
            self.hasher.update(body);
            self.tail.clear();
            self.tail.extend_from_slice(tail);
        } else {
            self.tail.extend_from_slice(chunk);
            if self.tail.len() > HASH_LEN {
                let excess = self.tail.len() - HASH_LEN;
                self.hasher.update(&self.tail[..excess]);
                self.tail.drain(..excess);
            }
        }
    }

    /// The sha256 (hex) of everything seen so far, trailer included: the
    /// digest of the snapshot stored as etcd sent it, without hashing it
    /// twice.
    pub fn whole_stream_sha256(&self) -> String {
        let mut whole = self.hasher.clone();
        whole.update(&self.tail);
        format!("{:x}", whole.finalize())
    }

    /// Whether the stream was a complete etcd snapshot. The error says why
    /// not.
    pub fn finish(self) -> Result<(), String> {
        if self.total < HASH_LEN as u64 || self.total % 512 != HASH_LEN as u64 {
            return Err(format!(
                "{} bytes is not a database followed by its sha256 (truncated?)",
                self.total
            ));
        }
        let actual = self.hasher.finalize();
        if actual.as_slice() == self.tail.as_slice() {
            Ok(())
        } else {
            Err(format!(
                "the database hashes to {actual:x}, but etcd's trailer says {}",
                hex::encode(&self.tail)
            ))
        }
    }
}

/// A stand-in for an etcd snapshot: `pages` x 512 bytes, then its sha256.
#[cfg(test)]
pub(crate) fn fake_snapshot(pages: usize) -> Vec<u8> {
    snapshot_of((0..pages * 512).map(|i| (i * 7 % 251) as u8).collect())
}

/// `db`, zero-padded to whole 512-byte pages, followed by its sha256: what
/// etcd would stream for a database of that content.
#[cfg(test)]
pub(crate) fn snapshot_of(mut db: Vec<u8>) -> Vec<u8> {
    db.resize(db.len().div_ceil(512) * 512, 0);
    let hash = Sha256::digest(&db);
    db.extend_from_slice(&hash);
    db
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(data: &[u8], chunk: usize) -> Result<(), String> {
        let mut check = SnapshotCheck::default();
        for piece in data.chunks(chunk) {
            check.update(piece);
        }
        check.finish()
    }

    #[test]
    fn accepts_a_complete_snapshot_whatever_the_chunking() {
        let data = fake_snapshot(9);
        for chunk in [1, 5, 31, 32, 33, 64, 500, 4096, data.len()] {
            assert_eq!(check(&data, chunk), Ok(()), "chunk {chunk}");
        }
    }

    #[test]
    fn refuses_truncated_or_corrupted_snapshots() {
        let data = fake_snapshot(9);
        for chunk in [7, 32, 4096] {
            let err = check(&data[..data.len() - 32], chunk).unwrap_err();
            assert!(err.contains("truncated"), "{err}");
            let err = check(&data[..4096], chunk).unwrap_err();
            assert!(err.contains("truncated"), "{err}");
            let mut corrupt = data.clone();
            corrupt[100] ^= 1;
            let err = check(&corrupt, chunk).unwrap_err();
            assert!(err.contains("trailer says"), "{err}");
        }
        assert!(check(&[], 1).is_err());
        assert!(check(b"fake etcd snapshot", 4).is_err());
    }
}
