//! Fetching an artifact for a restore: streamed to a local file, verified
//! against the recorded sha256, and only then put in place under its final
//! name. A file at the destination path is always a verified snapshot.

use std::path::{Path, PathBuf};

use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::artifact::read_sidecar;
use crate::error::{Error, Result};
use crate::location::Location;
use crate::store::{Store, StoreConfig};

/// A verified local copy of an artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub path: PathBuf,
    pub size_bytes: u64,
    pub sha256: String,
}

/// Downloads the artifact at `uri` to `destination`, verifying its sha256
/// against `expected_sha256` (hex), or — when `None` — against the `.json`
/// record dkv wrote beside it. On a mismatch the download is removed and
/// [`Error::ChecksumMismatch`] names both digests. An existing file at
/// `destination` is replaced only by a verified download.
pub async fn fetch_artifact(
    config: &StoreConfig,
    uri: &str,
    expected_sha256: Option<&str>,
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
    let result = download(&store, &location, &partial).await;
    let (size_bytes, actual) = match result {
        Ok(done) => done,
        Err(err) => {
            remove_quietly(&partial).await;
            return Err(err);
        }
    };
    if actual != expected {
        remove_quietly(&partial).await;
        return Err(Error::ChecksumMismatch {
            uri: location.to_string(),
            expected,
            actual,
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
    tracing::info!(uri = %location, path = %destination.display(), size = size_bytes, "artifact fetched and verified");
    Ok(Fetched {
        path: destination.to_path_buf(),
        size_bytes,
        sha256: actual,
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

async fn download(store: &Store, location: &Location, path: &Path) -> Result<(u64, String)> {
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
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        sha256.update(&chunk);
        size += chunk.len() as u64;
        file.write_all(&chunk)
            .await
            .map_err(Error::io("writing", path))?;
    }
    // On disk before it is declared good: a restore may follow at once.
    file.sync_all().await.map_err(Error::io("syncing", path))?;
    Ok((size, format!("{:x}", sha256.finalize())))
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
        let err = fetch_artifact(&StoreConfig::default(), &f.uri, Some(&wrong), &out)
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
        let fetched = fetch_artifact(&StoreConfig::default(), &f.uri, None, &out)
            .await
            .unwrap();
        assert_eq!(fetched.sha256, f.sha256);

        let bare = fixture(b"snapshot bytes", false).await;
        let err = fetch_artifact(&StoreConfig::default(), &bare.uri, None, &out)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NoChecksum { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_missing_artifact_or_a_malformed_digest_is_a_clear_error() {
        let f = fixture(b"x", false).await;
        let out = f.dir.path().join("snapshot.db");
        let missing = format!("file://{}/store/none.db", f.dir.path().display());
        let err = fetch_artifact(&StoreConfig::default(), &missing, Some(&f.sha256), &out)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("none.db"), "{err}");
        assert!(!out.exists() && !f.dir.path().join("snapshot.db.partial").exists());
        let err = fetch_artifact(&StoreConfig::default(), &f.uri, Some("abc"), &out)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
}
