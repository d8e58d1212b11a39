//! Fetching an artifact for a restore: streamed to a local file (decrypted
//! and decompressed on the way when it was stored so), verified against
//! the recorded sha256 of the stored object and against the sha256 etcd
//! appended to the snapshot itself, and only then put in place under its
//! final name. A file at the destination path is always a verified
//! snapshot: the restore tool can skip its own hash check (which reads the
//! whole file again).

use std::path::{Path, PathBuf};

use futures::StreamExt as _;

use crate::artifact::read_sidecar;
use crate::encoding::CodecError;
use crate::encryption::Keyring;
use crate::error::{Error, Result};
use crate::location::Location;
use crate::store::{Store, StoreConfig};

mod follower;
mod landing;

use follower::{Files, Follower};
use landing::{Landing, Parts};

/// A verified local copy of an artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub path: PathBuf,
    /// Size and sha256 of the stored object.
    pub size_bytes: u64,
    pub sha256: String,
    /// Size of the snapshot written to `path`.
    pub snapshot_bytes: u64,
    /// Whether the object was compressed, and with which key it was
    /// encrypted.
    pub compressed: bool,
    pub encrypted_with: Option<String>,
}

/// Downloads the artifact at `uri` to `destination`, verifying its sha256
/// against `expected_sha256` (hex), or — when `None` — against the `.json`
/// record dkv wrote beside it. On a mismatch the download is removed and
/// [`Error::ChecksumMismatch`] names both digests. An encrypted artifact
/// is decrypted with the key of `keys` it names ([`Error::Codec`] when
/// none is, as soon as its header is read). An existing file at
/// `destination` is replaced only by a verified download.
pub async fn fetch_artifact(
    config: &StoreConfig,
    uri: &str,
    expected_sha256: Option<&str>,
    keys: &Keyring,
    destination: &Path,
) -> Result<Fetched> {
    fetch_in_parts(config, uri, expected_sha256, keys, destination, PARTS).await
}

async fn fetch_in_parts(
    config: &StoreConfig,
    uri: &str,
    expected_sha256: Option<&str>,
    keys: &Keyring,
    destination: &Path,
    parts: Parts,
) -> Result<Fetched> {
    let location = Location::parse(uri)?;
    let expected = match expected_sha256 {
        Some(hex) => normalize_sha256(hex)?,
        None => match read_sidecar(config, uri).await? {
            Some(record) => normalize_sha256(&record.sha256)?,
            None => {
                return Err(Error::NoChecksum {
                    uri: uri.to_owned(),
                });
            }
        },
    };
    let store = Store::open(&location, config)?;
    let files = Files {
        download: partial_path(destination, ".partial")?,
        decoded: partial_path(destination, ".decoded.partial")?,
    };
    let result = download(&store, &location, keys, &files, parts).await;
    let Downloaded {
        content,
        fetched: downloaded,
        undecodable,
        snapshot_check,
    } = match result {
        Ok(done) => done,
        Err(err) => {
            remove_quietly(&files).await;
            return Err(err);
        }
    };
    if downloaded.sha256 != expected {
        remove_quietly(&files).await;
        return Err(Error::ChecksumMismatch {
            uri: location.to_string(),
            expected,
            actual: downloaded.sha256,
        });
    }
    if let Some(cause) = undecodable {
        remove_quietly(&files).await;
        return Err(Error::Codec {
            uri: location.to_string(),
            cause,
        });
    }
    // The object is the one recorded, yet not a whole etcd snapshot: a
    // file that was never one (a member's database copied by hand), or
    // one damaged before it was stored.
    if let Err(reason) = snapshot_check {
        remove_quietly(&files).await;
        return Err(Error::CorruptSnapshot {
            origin: location.to_string(),
            reason,
        });
    }
    if let Err(cause) = tokio::fs::rename(&content, destination).await {
        remove_quietly(&files).await;
        return Err(Error::Io {
            operation: "moving the verified snapshot to",
            path: destination.to_path_buf(),
            cause,
        });
    }
    remove_quietly(&files).await;
    tracing::info!(uri = %location, path = %destination.display(), size = downloaded.size_bytes, snapshot = downloaded.snapshot_bytes, "artifact fetched and verified");
    Ok(Fetched {
        path: destination.to_path_buf(),
        ..downloaded
    })
}

/// Lower-case hex of exactly 32 bytes.
fn normalize_sha256(hex: &str) -> Result<String> {
    let hex = hex.trim().to_ascii_lowercase();
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(hex)
    } else {
        Err(Error::InvalidArgument(format!(
            "{hex:?} is not a sha256 (64 hexadecimal digits)"
        )))
    }
}

/// `<destination><suffix>`, in the same directory so the final rename is
/// atomic.
fn partial_path(destination: &Path, suffix: &str) -> Result<PathBuf> {
    let name = destination.file_name().ok_or_else(|| {
        Error::InvalidArgument(format!("{} names no file", destination.display()))
    })?;
    let mut partial = name.to_os_string();
    partial.push(suffix);
    Ok(destination.with_file_name(partial))
}

/// What was downloaded, the file that holds its content, and why that
/// content did not decode, if it did not.
struct Downloaded {
    content: PathBuf,
    fetched: Fetched,
    undecodable: Option<CodecError>,
    /// Whether the content ends with the sha256 etcd appends to a
    /// snapshot, and matches it; why not.
    snapshot_check: std::result::Result<(), String>,
}

/// An object is downloaded as 8 MiB ranges, eight at a time: one streamed
/// GET is limited by one connection and by the server's work on one
/// request. From s3s-fs on the same machine, a 1.2 GB object took 6.6 s as
/// one stream, 14.5 s as 8 MiB ranges one at a time (each request waits
/// about 40 ms on that server), 4.8 s four at a time and 3.7-4.0 s eight
/// at a time (ranges written in order, each waiting in memory for the one
/// before it); boto3's `download_file` (8 MiB, ten at a time) took
/// 3.1-4.2 s.
/// No range starts more than 128 MiB past what the follower has read, so
/// that an encoded object's stored bytes never need much more disk than
/// that beside its content, even when one range is slow.
const PARTS: Parts = Parts {
    size: 8 << 20,
    at_once: 8,
    ahead: 128 << 20,
};

/// Downloads the object into `files.download`, the ranges landing at their
/// offsets as they arrive, while a blocking thread follows behind them:
/// hashes, and decodes when the object is not plain. The network, the
/// digest and the disk work at the same time, and memory holds no more than
/// what is in flight.
async fn download(
    store: &Store,
    location: &Location,
    keys: &Keyring,
    files: &Files,
    parts: Parts,
) -> Result<Downloaded> {
    let path = &files.download;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(Error::io("creating", dir))?;
    }
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .await
        .map_err(Error::io("creating", path))?
        .into_std()
        .await;
    let (progress, read) = tokio::sync::watch::channel(0);
    let Landing { size, mut landed } =
        landing::land(store, location.path(), path, parts, read).await?;
    let follower = Follower::new(
        file,
        keys.clone(),
        files.clone(),
        location.to_string(),
        progress,
    );
    let (ranges, received) = std::sync::mpsc::channel();
    let follower = tokio::task::spawn_blocking(move || follower.follow(received));
    let mut failed = None;
    while let Some(range) = landed.next().await {
        match range {
            // A closed channel: the follower stopped, and says why below.
            Ok(range) => {
                if ranges.send(range).is_err() {
                    break;
                }
            }
            Err(err) => {
                failed = Some(err);
                break;
            }
        }
    }
    // Aborts the downloads still in progress.
    drop(landed);
    drop(ranges);
    let follower = joined(follower.await, path)?;
    if let Some(err) = failed {
        // Waits for its writes and syncs: not on this task.
        let _ = tokio::task::spawn_blocking(move || follower.abandon()).await;
        return Err(err);
    }
    joined(
        tokio::task::spawn_blocking(move || follower.finish(size)).await,
        path,
    )
}

/// The result of a blocking task, or why it did not finish.
fn joined<T>(
    result: std::result::Result<Result<T>, tokio::task::JoinError>,
    path: &Path,
) -> Result<T> {
    result.map_err(|e| Error::Io {
        operation: "writing",
        path: path.to_path_buf(),
        cause: std::io::Error::other(e),
    })?
}

/// Removes what a fetch leaves beside its destination, if anything.
async fn remove_quietly(files: &Files) {
    for path in [&files.download, &files.decoded] {
        remove_file_quietly(path).await;
    }
}

async fn remove_file_quietly(path: &Path) {
    if let Err(e) = tokio::fs::remove_file(path).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "could not remove a partial download");
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use jiff::Timestamp;

    use sha2::{Digest as _, Sha256};

    use super::*;
    use crate::artifact::{Artifact, write_sidecar};
    use crate::snapshot_check::{fake_snapshot, snapshot_of};

    struct Fixture {
        dir: tempfile::TempDir,
        uri: String,
        sha256: String,
    }

    async fn fixture(content: &[u8], with_record: bool) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let uri = format!("file://{}/store/a.db", dir.path().display());
        let location = Location::parse(&uri).unwrap();
        let store = Store::open(&location, &StoreConfig::default()).unwrap();
        store
            .put_small(location.path(), Bytes::copy_from_slice(content))
            .await
            .unwrap();
        let sha256 = format!("{:x}", Sha256::digest(content));
        if with_record {
            let artifact = Artifact {
                uri: uri.clone(),
                size_bytes: content.len() as u64,
                sha256: sha256.clone(),
                revision: 1,
                etcd_version: "3.5.16".to_owned(),
                taken_at: Timestamp::UNIX_EPOCH,
                compression: None,
                encryption_key_id: None,
                content: None,
            };
            write_sidecar(&store, &artifact).await.unwrap();
        }
        Fixture { dir, uri, sha256 }
    }

    /// `content` stored in `dir` as `encoding` writes it: its URI, the
    /// stored bytes and their sha256.
    async fn store_encoded(
        dir: &Path,
        encoding: &crate::encoding::Encoding,
        content: &[u8],
    ) -> (String, Vec<u8>, String) {
        let stored = encoding.encode_all(content).unwrap();
        let uri = format!("file://{}/store/a.db{}", dir.display(), encoding.suffix());
        let location = Location::parse(&uri).unwrap();
        let store = Store::open(&location, &StoreConfig::default()).unwrap();
        store
            .put_small(location.path(), Bytes::from(stored.clone()))
            .await
            .unwrap();
        let sha256 = format!("{:x}", Sha256::digest(&stored));
        (uri, stored, sha256)
    }

    #[tokio::test]
    async fn fetches_and_verifies_against_the_given_digest() {
        let snapshot = fake_snapshot(3);
        let f = fixture(&snapshot, false).await;
        let out = f.dir.path().join("restore/snapshot.db");
        let fetched = fetch_artifact(
            &StoreConfig::default(),
            &f.uri,
            Some(&f.sha256.to_uppercase()),
            &Keyring::default(),
            &out,
        )
        .await
        .unwrap();
        assert_eq!(fetched.path, out);
        assert_eq!(fetched.size_bytes, snapshot.len() as u64);
        assert_eq!(fetched.sha256, f.sha256);
        assert!(std::fs::read(&out).unwrap() == snapshot);
        assert!(!f.dir.path().join("restore/snapshot.db.partial").exists());
    }

    /// The recorded object, intact, that is not a whole etcd snapshot
    /// (damaged before it was stored, or a database copied by hand):
    /// refused before the restore tool sees it, and nothing is kept.
    #[tokio::test]
    async fn an_object_that_is_not_an_intact_snapshot_is_refused() {
        let mut damaged = fake_snapshot(3);
        damaged[700] ^= 1;
        for (content, why) in [
            (damaged, "trailer says"),
            (b"a member's db file".to_vec(), "truncated"),
        ] {
            let f = fixture(&content, false).await;
            let out = f.dir.path().join("snapshot.db");
            let err = fetch_artifact(
                &StoreConfig::default(),
                &f.uri,
                Some(&f.sha256),
                &Keyring::default(),
                &out,
            )
            .await
            .unwrap_err();
            assert!(matches!(err, Error::CorruptSnapshot { .. }), "{err}");
            assert!(err.to_string().contains(why), "{err}");
            assert!(err.to_string().contains(&f.uri), "{err}");
            assert!(!out.exists() && !f.dir.path().join("snapshot.db.partial").exists());
        }
    }

    #[tokio::test]
    async fn a_mismatch_names_both_digests_and_leaves_no_file() {
        let f = fixture(b"snapshot bytes", false).await;
        let out = f.dir.path().join("snapshot.db");
        let wrong = "0".repeat(64);
        let err = fetch_artifact(
            &StoreConfig::default(),
            &f.uri,
            Some(&wrong),
            &Keyring::default(),
            &out,
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&wrong) && text.contains(&f.sha256), "{text}");
        assert!(matches!(err, Error::ChecksumMismatch { .. }));
        assert!(!out.exists());
        assert!(!f.dir.path().join("snapshot.db.partial").exists());
    }

    #[tokio::test]
    async fn without_a_digest_the_record_beside_the_artifact_is_used() {
        let f = fixture(&fake_snapshot(2), true).await;
        let out = f.dir.path().join("snapshot.db");
        let fetched = fetch_artifact(
            &StoreConfig::default(),
            &f.uri,
            None,
            &Keyring::default(),
            &out,
        )
        .await
        .unwrap();
        assert_eq!(fetched.sha256, f.sha256);

        let bare = fixture(b"snapshot bytes", false).await;
        let err = fetch_artifact(
            &StoreConfig::default(),
            &bare.uri,
            None,
            &Keyring::default(),
            &out,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, Error::NoChecksum { .. }), "{err}");
    }

    #[tokio::test]
    async fn an_encrypted_artifact_is_decoded_with_its_key_and_refused_without_it() {
        use crate::encoding::Encoding;
        use crate::encryption::Key;
        let dir = tempfile::tempdir().unwrap();
        let key = Key::parse(&[9; 32]).unwrap();
        let content = snapshot_of(b"etcd snapshot pages ".repeat(1000));
        let encoding = Encoding {
            compress: true,
            key: Some(key.clone()),
        };
        let (uri, stored, sha256) = store_encoded(dir.path(), &encoding, &content).await;
        let out = dir.path().join("snapshot.db");

        for keys in [
            Keyring::default(),
            Keyring::from(Key::parse(&[8; 32]).unwrap()),
        ] {
            let err = fetch_artifact(&StoreConfig::default(), &uri, Some(&sha256), &keys, &out)
                .await
                .unwrap_err();
            assert_eq!(err.category(), crate::Category::Configuration, "{err}");
            assert!(err.to_string().contains(key.id()), "{err}");
            assert!(!out.exists() && !dir.path().join("snapshot.db.partial").exists());
        }

        let fetched = fetch_artifact(
            &StoreConfig::default(),
            &uri,
            Some(&sha256),
            &Keyring::from(key.clone()),
            &out,
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), content);
        assert_eq!(fetched.snapshot_bytes, content.len() as u64);
        assert_eq!(fetched.size_bytes, stored.len() as u64);
        assert!(fetched.compressed);
        assert_eq!(fetched.encrypted_with.as_deref(), Some(key.id()));
    }

    #[tokio::test]
    async fn an_object_in_many_ranges_is_put_together_whatever_its_encoding() {
        use crate::encoding::Encoding;
        use crate::encryption::Key;
        let dir = tempfile::tempdir().unwrap();
        let key = Key::parse(&[7; 32]).unwrap();
        let content = snapshot_of(
            (0..200_000u32)
                .flat_map(|i| format!("{{\"id\":{i}}}").into_bytes())
                .collect(),
        );
        let encodings = [
            Encoding::plain(),
            Encoding {
                compress: true,
                key: None,
            },
            Encoding {
                compress: false,
                key: Some(key.clone()),
            },
            Encoding {
                compress: true,
                key: Some(key.clone()),
            },
        ];
        for encoding in encodings {
            let (uri, stored, sha256) = store_encoded(dir.path(), &encoding, &content).await;
            let out = dir.path().join("restore/snapshot.db");
            // Ranges far smaller than the object, so that they land out of
            // order and the decoder follows many of them.
            let parts = Parts {
                size: 4096,
                at_once: 5,
                ahead: 16 << 10,
            };
            let fetched = fetch_in_parts(
                &StoreConfig::default(),
                &uri,
                Some(&sha256),
                &Keyring::from(key.clone()),
                &out,
                parts,
            )
            .await
            .unwrap();
            assert!(std::fs::read(&out).unwrap() == content, "{encoding:?}");
            assert_eq!(fetched.size_bytes, stored.len() as u64);
            assert_eq!(fetched.snapshot_bytes, content.len() as u64);
            assert_eq!(fetched.compressed, encoding.compress);
            let names: Vec<_> = std::fs::read_dir(dir.path().join("restore"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, ["snapshot.db"], "{encoding:?}");
        }
    }

    #[tokio::test]
    async fn a_missing_artifact_or_a_malformed_digest_is_a_clear_error() {
        let f = fixture(b"x", false).await;
        let out = f.dir.path().join("snapshot.db");
        let missing = format!("file://{}/store/none.db", f.dir.path().display());
        let err = fetch_artifact(
            &StoreConfig::default(),
            &missing,
            Some(&f.sha256),
            &Keyring::default(),
            &out,
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("none.db"), "{err}");
        assert!(!out.exists() && !f.dir.path().join("snapshot.db.partial").exists());
        let err = fetch_artifact(
            &StoreConfig::default(),
            &f.uri,
            Some("abc"),
            &Keyring::default(),
            &out,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
}
