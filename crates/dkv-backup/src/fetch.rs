//! Fetching an artifact for a restore: streamed to a local file (decrypted
//! and decompressed on the way when it was stored so), verified against
//! the recorded sha256 of the stored object, and only then put in place
//! under its final name. A file at the destination path is always a
//! verified snapshot.

use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};

use crate::artifact::read_sidecar;
use crate::encoding::{CodecError, Decoder};
use crate::encryption::{EncryptionError, Keyring};
use crate::error::{Error, Result};
use crate::location::Location;
use crate::store::{Parts, Store, StoreConfig};

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

/// Pieces received from the store and not yet written (a piece is one
/// range of [`PARTS`], or what one read of a small object returned):
/// while the disk is slower than the network the download waits, rather
/// than holding more.
const QUEUED_CHUNKS: usize = 2;

/// A large object is downloaded as 8 MiB ranges, eight at a time: one
/// streamed GET is limited by one connection and by the server's work on
/// one request. From s3s-fs on the same machine, a 1.2 GB object took
/// 6.6 s as one stream, 14.5 s as 8 MiB ranges one at a time, 4.8 s four
/// at a time, 4.1-4.4 s six and 3.7-4.0 s eight at a time; boto3's
/// `download_file` (8 MiB, ten at a time) took 3.1-4.2 s. The price is
/// memory: ranges that arrive before their turn wait in it, and the fetch
/// peaked at 155-180 MiB (one stream: 30 MiB).
const PARTS: Parts = Parts {
    size: 8 << 20,
    at_once: 8,
};

/// Content written between two requests to put it on disk in the
/// background, so that the sync which ends the download finds little left.
const FLUSH_EVERY: u64 = 64 << 20;

/// Receives the object on this task while a blocking thread hashes,
/// decodes and writes what arrived: the network and the disk work at the
/// same time.
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
    let file = tokio::fs::File::create(path)
        .await
        .map_err(Error::io("creating", path))?
        .into_std()
        .await;
    let mut stream = store.get_in_parts(location.path(), PARTS).await?;
    let sink = Sink::new(file, keys.clone(), path, location);
    let (chunks, received) = tokio::sync::mpsc::channel::<Bytes>(QUEUED_CHUNKS);
    let writer = tokio::task::spawn_blocking(move || sink.drain(received));
    let mut failed = None;
    while let Some(chunk) = stream.next().await {
        match chunk {
            // A closed channel: the writer stopped, and says why below.
            Ok(chunk) => {
                if chunks.send(chunk).await.is_err() {
                    break;
                }
            }
            Err(err) => {
                failed = Some(err);
                break;
            }
        }
    }
    drop(chunks);
    let sink = joined(writer.await, path)?;
    if let Some(err) = failed {
        sink.abandon();
        return Err(err);
    }
    joined(
        tokio::task::spawn_blocking(move || sink.finish()).await,
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

/// The writing half of a download.
struct Sink {
    path: PathBuf,
    uri: String,
    file: BufWriter<std::fs::File>,
    flusher: Flusher,
    sha256: Sha256,
    size: u64,
    snapshot_bytes: u64,
    flushed_at: u64,
    decoder: Decoder,
    undecodable: Option<CodecError>,
}

impl Sink {
    fn new(file: std::fs::File, keys: Keyring, path: &Path, location: &Location) -> Sink {
        Sink {
            path: path.to_path_buf(),
            uri: location.to_string(),
            flusher: Flusher::start(&file),
            file: BufWriter::with_capacity(1 << 20, file),
            sha256: Sha256::new(),
            size: 0,
            snapshot_bytes: 0,
            flushed_at: 0,
            decoder: Decoder::new(keys),
            undecodable: None,
        }
    }

    /// Takes every chunk until the sender is done; stops at the first
    /// failure to write, or when the object names a key not at hand.
    fn drain(mut self, mut chunks: tokio::sync::mpsc::Receiver<Bytes>) -> Result<Sink> {
        while let Some(chunk) = chunks.blocking_recv() {
            if let Err(err) = self.take(&chunk) {
                self.abandon();
                return Err(err);
            }
        }
        Ok(self)
    }

    fn take(&mut self, chunk: &[u8]) -> Result<()> {
        self.sha256.update(chunk);
        self.size += chunk.len() as u64;
        if self.undecodable.is_some() {
            return Ok(());
        }
        match self.decoder.update(chunk) {
            Ok(content) => self.write(&content),
            // Without the key nothing can be done: say so at once.
            Err(err @ CodecError::Encryption(EncryptionError::MissingKey { .. })) => {
                Err(Error::codec(&self.uri)(err))
            }
            // Content that does not decode: most likely damaged in the
            // store. The digest of the whole object tells; keep hashing.
            Err(err) => {
                self.undecodable = Some(err);
                Ok(())
            }
        }
    }

    fn write(&mut self, content: &[u8]) -> Result<()> {
        self.file
            .write_all(content)
            .map_err(Error::io("writing", &self.path))?;
        self.snapshot_bytes += content.len() as u64;
        if self.snapshot_bytes - self.flushed_at >= FLUSH_EVERY {
            self.flushed_at = self.snapshot_bytes;
            self.flusher.request();
        }
        Ok(())
    }

    /// Ends the object: the last of the content written and, when it
    /// decoded, everything on disk before it is declared good (a restore
    /// may follow at once).
    fn finish(mut self) -> Result<Downloaded> {
        let content = match self.undecodable.take() {
            Some(err) => Err(err),
            None => self.decoder.finish(),
        };
        let undecodable = match content {
            Ok(content) => {
                self.write(&content)?;
                None
            }
            // The caller compares the digest first: a damaged object is
            // reported as such, an intact one that does not decode as that.
            Err(err) => Some(err),
        };
        let file = self
            .file
            .into_inner()
            .map_err(|e| Error::io("writing", &self.path)(e.into_error()))?;
        self.flusher
            .stop()
            .map_err(Error::io("syncing", &self.path))?;
        if undecodable.is_none() {
            file.sync_all().map_err(Error::io("syncing", &self.path))?;
        }
        Ok(Downloaded {
            fetched: Fetched {
                path: self.path,
                size_bytes: self.size,
                sha256: format!("{:x}", self.sha256.finalize()),
                snapshot_bytes: self.snapshot_bytes,
                compressed: self.decoder.compressed(),
                encrypted_with: self.decoder.encrypted_with().map(str::to_owned),
            },
            undecodable,
        })
    }

    /// Stops without finishing: the caller removes the file.
    fn abandon(self) {
        let _ = self.flusher.stop();
    }
}

/// Puts what was written on disk in the background (`fdatasync` through a
/// second handle of the file) while the download goes on. A failure is
/// kept and reported when the download ends: the final sync on the same
/// open file may not report a write-back error twice.
struct Flusher {
    requests: Option<std::sync::mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Flusher {
    fn start(file: &std::fs::File) -> Flusher {
        // Without a second handle or a thread, the final sync does it all.
        let idle = Flusher {
            requests: None,
            thread: None,
        };
        let Ok(handle) = file.try_clone() else {
            return idle;
        };
        let (requests, received) = std::sync::mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("fetch-flush".to_owned())
            .spawn(move || {
                while received.recv().is_ok() {
                    handle.sync_data()?;
                }
                Ok(())
            });
        match thread {
            Ok(thread) => Flusher {
                requests: Some(requests),
                thread: Some(thread),
            },
            Err(_) => idle,
        }
    }

    /// Asks for a flush unless one is already waiting.
    fn request(&self) {
        if let Some(requests) = &self.requests {
            let _ = requests.try_send(());
        }
    }

    /// Waits for the flush in progress; the first failure, if any.
    fn stop(mut self) -> std::io::Result<()> {
        drop(self.requests.take());
        match self.thread.take().map(std::thread::JoinHandle::join) {
            None => Ok(()),
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(std::io::Error::other("the flushing thread panicked")),
        }
    }
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
