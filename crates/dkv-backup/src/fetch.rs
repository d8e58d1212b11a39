//! Fetching an artifact for a restore: streamed to a local file (decrypted
//! and decompressed on the way when it was stored so), verified against
//! the recorded sha256 of the stored object, and only then put in place
//! under its final name. A file at the destination path is always a
//! verified snapshot.

use std::path::{Path, PathBuf};

use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::artifact::read_sidecar;
use crate::encoding::{CodecError, Decoder};
use crate::encryption::{EncryptionError, Keyring};
use crate::error::{Error, Result};
use crate::location::Location;
use crate::store::{Store, StoreConfig};

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
/// none is, before anything is written). An existing file at
/// `destination` is replaced only by a verified download.
pub async fn fetch_artifact(
    config: &StoreConfig,
    uri: &str,
    expected_sha256: Option<&str>,
    keys: &Keyring,
    destination: &Path,
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
    let partial = partial_path(destination)?;
    let result = download(&store, &location, keys, &partial).await;
    let Downloaded {
        fetched: downloaded,
        undecodable,
    } = match result {
        Ok(done) => done,
        Err(err) => {
            remove_quietly(&partial).await;
            return Err(err);
        }
    };
    if downloaded.sha256 != expected {
        remove_quietly(&partial).await;
        return Err(Error::ChecksumMismatch {
            uri: location.to_string(),
            expected,
            actual: downloaded.sha256,
        });
    }
    if let Some(cause) = undecodable {
        remove_quietly(&partial).await;
        return Err(Error::Codec {
            uri: location.to_string(),
            cause,
        });
    }
    if let Err(cause) = tokio::fs::rename(&partial, destination).await {
        remove_quietly(&partial).await;
        return Err(Error::Io {
            operation: "moving the verified snapshot to",
            path: destination.to_path_buf(),
            cause,
        });
    }
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

/// `<destination>.partial`, in the same directory so the final rename is
/// atomic.
fn partial_path(destination: &Path) -> Result<PathBuf> {
    let name = destination.file_name().ok_or_else(|| {
        Error::InvalidArgument(format!("{} names no file", destination.display()))
    })?;
    let mut partial = name.to_os_string();
    partial.push(".partial");
    Ok(destination.with_file_name(partial))
}

/// What was downloaded, and why its content did not decode, if it did not.
struct Downloaded {
    fetched: Fetched,
    undecodable: Option<CodecError>,
}

async fn download(
    store: &Store,
    location: &Location,
    keys: &Keyring,
    path: &Path,
) -> Result<Downloaded> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(Error::io("creating", dir))?;
    }
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(Error::io("creating", path))?;
    let mut stream = store.get_stream(location.path()).await?;
    let mut sha256 = Sha256::new();
    let mut size = 0u64;
    let mut snapshot_bytes = 0u64;
    let mut decoder = Decoder::new(keys.clone());
    let mut undecodable = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        sha256.update(&chunk);
        size += chunk.len() as u64;
        if undecodable.is_some() {
            continue;
        }
        match decoder.update(&chunk) {
            Ok(content) => {
                snapshot_bytes += content.len() as u64;
                file.write_all(&content)
                    .await
                    .map_err(Error::io("writing", path))?;
            }
            // Without the key nothing can be done: say so at once.
            Err(err @ CodecError::Encryption(EncryptionError::MissingKey { .. })) => {
                return Err(Error::codec(location)(err));
            }
            // Content that does not decode: most likely damaged in the
            // store. The digest of the whole object tells; keep hashing.
            Err(err) => undecodable = Some(err),
        }
    }
    let content = match undecodable {
        Some(err) => Err(err),
        None => decoder.finish(),
    };
    let sha256 = format!("{:x}", sha256.finalize());
    let content = match content {
        Ok(content) => content,
        // The caller compares the digest first: a damaged object is
        // reported as such, an intact one that does not decode as that.
        Err(err) => {
            return Ok(Downloaded {
                fetched: Fetched {
                    path: path.to_path_buf(),
                    size_bytes: size,
                    sha256,
                    snapshot_bytes,
                    compressed: decoder.compressed(),
                    encrypted_with: decoder.encrypted_with().map(str::to_owned),
                },
                undecodable: Some(err),
            });
        }
    };
    snapshot_bytes += content.len() as u64;
    file.write_all(&content)
        .await
        .map_err(Error::io("writing", path))?;
    // On disk before it is declared good: a restore may follow at once.
    file.sync_all().await.map_err(Error::io("syncing", path))?;
    Ok(Downloaded {
        fetched: Fetched {
            path: path.to_path_buf(),
            size_bytes: size,
            sha256,
            snapshot_bytes,
            compressed: decoder.compressed(),
            encrypted_with: decoder.encrypted_with().map(str::to_owned),
        },
        undecodable: None,
    })
}

async fn remove_quietly(path: &Path) {
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

    use super::*;
    use crate::artifact::{Artifact, write_sidecar};

    struct Fixture {
        dir: tempfile::TempDir,
        uri: String,
        sha256: String,
    }

    async fn fixture(content: &'static [u8], with_record: bool) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let uri = format!("file://{}/store/a.db", dir.path().display());
        let location = Location::parse(&uri).unwrap();
        let store = Store::open(&location, &StoreConfig::default()).unwrap();
        store
            .put_small(location.path(), Bytes::from_static(content))
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

    #[tokio::test]
    async fn fetches_and_verifies_against_the_given_digest() {
        let f = fixture(b"snapshot bytes", false).await;
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
        assert_eq!(fetched.size_bytes, 14);
        assert_eq!(fetched.sha256, f.sha256);
        assert_eq!(std::fs::read(&out).unwrap(), b"snapshot bytes");
        assert!(!f.dir.path().join("restore/snapshot.db.partial").exists());
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
        let f = fixture(b"snapshot bytes", true).await;
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
        let content = b"etcd snapshot pages ".repeat(1000);
        let stored = Encoding {
            compress: true,
            key: Some(key.clone()),
        }
        .encode_all(&content)
        .unwrap();
        let uri = format!("file://{}/store/a.db.zst.enc", dir.path().display());
        let location = Location::parse(&uri).unwrap();
        let store = Store::open(&location, &StoreConfig::default()).unwrap();
        store
            .put_small(location.path(), Bytes::from(stored.clone()))
            .await
            .unwrap();
        let sha256 = format!("{:x}", Sha256::digest(&stored));
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
