//! Taking a backup: one etcd snapshot streamed into a multipart upload, with
//! memory bounded by the part size whatever the database size, its sha256
//! and size computed on the way, and nothing left behind on failure.

use std::future::Future;
use std::pin::Pin;

use futures::{FutureExt, Stream, StreamExt};
use jiff::Timestamp;
use object_store::WriteMultipart;
use sha2::{Digest as _, Sha256};

use bytes::Bytes;
use dkv_etcd::EtcdAdmin;

use crate::artifact::{self, Artifact};
use crate::encoding::{Encoder, Encoding};
use crate::error::{Error, Result};
use crate::location::Location;
use crate::snapshot_check::SnapshotCheck;
use crate::source::choose_snapshot_source;
use crate::store::{Store, StoreConfig};

/// S3 refuses parts under 5 MiB (except the last).
pub const MIN_PART_SIZE: usize = 5 * 1024 * 1024;

/// How the upload is cut up. Peak memory is about
/// `part_size * (parts_in_flight + 1)`; one part more to Google Cloud
/// Storage, whose resumable upload holds the newest part back until it
/// knows whether it is the last. The queues between the stages of a backup
/// add up to about 3.5 MiB (`QUEUED_BATCHES` batches of at most `BATCH` of
/// etcd's 32 KiB chunks each way, and one batch in each stage's hands).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadOptions {
    pub part_size: usize,
    /// Parts uploaded concurrently while the next one fills.
    pub parts_in_flight: usize,
}

impl Default for UploadOptions {
    fn default() -> Self {
        Self {
            part_size: 8 * 1024 * 1024,
            parts_in_flight: 2,
        }
    }
}

impl UploadOptions {
    fn check(&self) -> Result<()> {
        if self.part_size < MIN_PART_SIZE || self.parts_in_flight == 0 {
            return Err(Error::InvalidArgument(format!(
                "parts must be at least {MIN_PART_SIZE} bytes with at least one in flight (got {} bytes, {} in flight)",
                self.part_size, self.parts_in_flight
            )));
        }
        Ok(())
    }
}

/// One backup to take.
#[derive(Debug, Clone)]
pub struct BackupRequest {
    pub namespace: String,
    pub cluster: String,
    /// The destination prefix (`s3://bucket/prefix`, ...).
    pub destination: Location,
    /// Client URLs to reach the cluster through (its client Service).
    pub seed_endpoints: Vec<String>,
    /// The time the backup is named after; the caller's clock, so the name
    /// is known (and testable) before anything runs. Truncated to seconds.
    pub taken_at: Timestamp,
    pub upload: UploadOptions,
    /// Compression and encryption of the stored snapshot.
    pub encoding: Encoding,
}

/// What [`upload_snapshot`] stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    pub size_bytes: u64,
    pub sha256: String,
}

/// Takes one backup: picks a member ([`choose_snapshot_source`]), streams
/// its snapshot to `<destination>/<namespace>/<cluster>/<cluster>-<time>.db`
/// (`.zst`, `.enc` added as the encoding says),
/// writes the `.json` record beside it, and returns the [`Artifact`].
/// Refuses to overwrite an existing artifact. On failure nothing is left
/// in the store.
pub async fn take_backup(
    admin: &dyn EtcdAdmin,
    config: &StoreConfig,
    request: &BackupRequest,
) -> Result<Artifact> {
    take_backup_until(admin, config, request, std::future::pending()).await
}

/// [`take_backup`], given up cleanly when `stop` completes first (the Job
/// pod is being terminated: deleted, or past its deadline): the upload is
/// aborted and [`Error::Cancelled`] returned, so nothing is left behind.
pub async fn take_backup_until(
    admin: &dyn EtcdAdmin,
    config: &StoreConfig,
    request: &BackupRequest,
    stop: impl Future<Output = ()>,
) -> Result<Artifact> {
    let mut stop = std::pin::pin!(stop.fuse());
    // Until the upload starts nothing has been written: dropping the work
    // is enough.
    let prepared = tokio::select! {
        biased;
        () = stop.as_mut() => return Err(Error::Cancelled),
        prepared = prepare(admin, config, request) => prepared?,
    };
    let Prepared {
        store,
        source,
        snapshot,
        taken_at,
    } = prepared;
    // Whether to compress is decided on the snapshot's start; the name
    // says what was decided.
    let (sample, rest) = tokio::select! {
        biased;
        () = stop.as_mut() => return Err(Error::Cancelled),
        sampled = sample(snapshot, SAMPLE_BYTES) => sampled?,
    };
    let encoding = request.encoding.for_sample(&sample);
    if encoding != request.encoding {
        tracing::info!(
            sampled = sample.iter().map(Bytes::len).sum::<usize>(),
            "the snapshot's start does not compress; storing it uncompressed"
        );
    }
    let location = artifact::artifact_location(
        &request.destination,
        &request.namespace,
        &request.cluster,
        taken_at,
        &encoding,
    );
    let snapshot = futures::stream::iter(sample.into_iter().map(Ok)).chain(rest);
    // The key count and hash are read while the store completes the
    // upload: etcd's HashKV and the store's assembly of the parts overlap
    // instead of adding up.
    let (uploaded, content) = upload(
        &store,
        &location,
        &source.endpoint,
        snapshot,
        request.upload,
        &encoding,
        stop.as_mut(),
        content_at(admin, &source.endpoint, source.revision),
    )
    .await?;

    let artifact = Artifact {
        uri: location.to_string(),
        size_bytes: uploaded.size_bytes,
        sha256: uploaded.sha256,
        revision: source.revision,
        etcd_version: source.etcd_version,
        taken_at,
        compression: encoding.compression().map(str::to_owned),
        encryption_key_id: encoding.key_id().map(str::to_owned),
        content,
    };
    if let Err(err) = artifact::write_sidecar(&store, &artifact).await {
        // An unrecorded artifact would be orphaned: no record, no retention.
        if let Err(cleanup) = store.delete(location.path()).await {
            tracing::warn!(uri = %location, error = %cleanup, "could not remove the artifact after its record failed");
        }
        return Err(err);
    }
    tracing::info!(uri = %artifact.uri, size = artifact.size_bytes, sha256 = %artifact.sha256, "backup complete");
    Ok(artifact)
}

/// What the source member holds at `revision`, for a later verification;
/// `None` (and a warning) when it cannot say: the backup is good without it.
async fn content_at(
    admin: &dyn EtcdAdmin,
    endpoint: &str,
    revision: i64,
) -> Option<artifact::Content> {
    match admin.content_digest(endpoint, revision).await {
        Ok(digest) => digest.map(artifact::Content::from),
        Err(err) => {
            tracing::warn!(%endpoint, revision, error = %err, "could not read the key count and hash at the backup's revision; the backup can be restored but not verified against them");
            None
        }
    }
}

type SnapshotChunks = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send>>;

struct Prepared {
    store: Store,
    source: crate::source::SnapshotSource,
    snapshot: SnapshotChunks,
    taken_at: Timestamp,
}

/// How much of the snapshot's start decides whether it is compressed
/// ([`Encoding::for_sample`]): a few hundred etcd pages, a few
/// milliseconds of zstd.
const SAMPLE_BYTES: usize = 4 * 1024 * 1024;

/// The first chunks of `snapshot`, at least `size` bytes of them unless it
/// ends first, and the rest of the stream.
async fn sample(mut snapshot: SnapshotChunks, size: usize) -> Result<(Vec<Bytes>, SnapshotChunks)> {
    let mut chunks = Vec::new();
    let mut taken = 0;
    while taken < size {
        let Some(chunk) = snapshot.next().await else {
            break;
        };
        let chunk = chunk?;
        taken += chunk.len();
        chunks.push(chunk);
    }
    Ok((chunks, snapshot))
}

/// Everything up to an open snapshot stream: the name, the store, the
/// source member.
async fn prepare(
    admin: &dyn EtcdAdmin,
    config: &StoreConfig,
    request: &BackupRequest,
) -> Result<Prepared> {
    request.upload.check()?;
    let taken_at = artifact::whole_seconds(request.taken_at);
    // Either name the backup may take ([`Encoding::for_sample`]): a backup
    // taken again at the same second never overwrites, nor adds a second
    // artifact beside, the first.
    let named = |encoding: &Encoding| {
        artifact::artifact_location(
            &request.destination,
            &request.namespace,
            &request.cluster,
            taken_at,
            encoding,
        )
    };
    let uncompressed = Encoding {
        compress: false,
        ..request.encoding.clone()
    };
    let store = Store::open(&named(&request.encoding), config)?;
    for location in [named(&request.encoding), named(&uncompressed)] {
        if store.exists(location.path()).await? {
            return Err(Error::AlreadyExists {
                uri: location.to_string(),
            });
        }
    }

    let source = choose_snapshot_source(admin, &request.seed_endpoints).await?;
    tracing::info!(
        endpoint = %source.endpoint,
        member = %source.member,
        leader = source.is_leader,
        revision = source.revision,
        "streaming snapshot"
    );
    let snapshot = admin
        .snapshot(&source.endpoint)
        .await
        .map_err(|cause| Error::Etcd {
            operation: "snapshot",
            cause,
        })?;
    let snapshot = snapshot
        .map(|chunk| {
            chunk.map_err(|cause| Error::Etcd {
                operation: "snapshot",
                cause,
            })
        })
        .boxed();
    Ok(Prepared {
        store,
        source,
        snapshot,
        taken_at,
    })
}

/// Streams `snapshot` (as produced by etcd, `source` naming where from)
/// into a multipart upload at `location`, encoded as `encoding` says,
/// checking etcd's trailing sha256 and computing the stored object's own.
/// The upload is aborted on any failure, so no partial object becomes
/// visible.
pub async fn upload_snapshot(
    store: &Store,
    location: &Location,
    source: &str,
    snapshot: impl Stream<Item = Result<Bytes>>,
    options: UploadOptions,
    encoding: &Encoding,
) -> Result<Uploaded> {
    let never = std::pin::pin!(std::future::pending::<()>().fuse());
    let (uploaded, ()) = upload(
        store,
        location,
        source,
        snapshot,
        options,
        encoding,
        never,
        async {},
    )
    .await?;
    Ok(uploaded)
}

/// [`upload_snapshot`], stopped by `stop`, with `while_completing` run
/// once the whole snapshot is sent, alongside the store's completion of
/// the upload (which, for a large object, can take seconds).
#[allow(clippy::too_many_arguments)]
async fn upload<S: Future<Output = ()>, C: Future>(
    store: &Store,
    location: &Location,
    source: &str,
    snapshot: impl Stream<Item = Result<Bytes>>,
    options: UploadOptions,
    encoding: &Encoding,
    stop: Pin<&mut futures::future::Fuse<S>>,
    while_completing: C,
) -> Result<(Uploaded, C::Output)> {
    options.check()?;
    store.check_same_bucket(location)?;
    let encoder = encoding.encoder().map_err(Error::codec(location))?;
    let path = location.path();
    let upload = store.start_multipart(path).await?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, options.part_size);
    let plain = *encoding == Encoding::plain();
    let streamed = stream_into(
        &mut writer,
        snapshot,
        encoder,
        plain,
        store,
        location,
        options,
        stop,
    )
    .await;
    let streamed = streamed.and_then(|digest| {
        digest.finish().map_err(|reason| Error::CorruptSnapshot {
            origin: source.to_owned(),
            reason,
        })
    });
    let uploaded = match streamed {
        Ok(uploaded) => uploaded,
        Err(err) => {
            if let Err(abort) = writer.abort().await {
                tracing::warn!(uri = %location, error = %store.scrub(&abort.to_string()), "could not abort the multipart upload; the store's lifecycle rule for incomplete uploads must clean it up");
            }
            return Err(err);
        }
    };
    // `finish` aborts the upload itself when completing fails.
    let (finished, alongside) = tokio::join!(writer.finish(), while_completing);
    finished.map_err(|e| store.error("multipart upload", path, &e))?;
    Ok((uploaded, alongside))
}

/// etcd's check of what it sent, and the digest and size of what is stored.
struct Digest256 {
    check: SnapshotCheck,
    /// The stored object's digest; `None` when it is the snapshot as etcd
    /// sent it, whose digest the check computes already.
    sha256: Option<Sha256>,
    size: u64,
}

impl Digest256 {
    fn new(plain: bool) -> Digest256 {
        Digest256 {
            check: SnapshotCheck::default(),
            sha256: (!plain).then(Sha256::new),
            size: 0,
        }
    }

    fn stored(&mut self, bytes: &[u8]) {
        if let Some(sha256) = &mut self.sha256 {
            sha256.update(bytes);
        }
        self.size += bytes.len() as u64;
    }

    /// What was stored, once etcd's check holds.
    fn finish(self) -> std::result::Result<Uploaded, String> {
        let whole = self.check.whole_stream_sha256();
        self.check.finish()?;
        let sha256 = match self.sha256 {
            Some(sha256) => format!("{:x}", sha256.finalize()),
            None => whole,
        };
        Ok(Uploaded {
            size_bytes: self.size,
            sha256,
        })
    }
}

/// Batches of snapshot chunks waiting to be encoded, and of encoded pieces
/// waiting to be uploaded: the three stages run at the same time, and
/// memory holds a few batches of etcd's chunks besides the parts in
/// flight.
const QUEUED_BATCHES: usize = 2;

/// At most this many of etcd's chunks (32 KiB) travel together, so that
/// the stages meet once per half MiB rather than once per chunk. Batches
/// of 64 chunks (2 MiB) cost 8 MiB more at the peak and were no faster.
const BATCH: usize = 16;

/// Streams the snapshot through three stages that run at the same time:
/// this task receives etcd's chunks and checks them against etcd's
/// trailing sha256, a blocking thread encodes them and hashes what is
/// stored ([`encode`]), and this task again puts what is encoded into the
/// upload, waiting while `parts_in_flight` parts are uploading.
#[allow(clippy::too_many_arguments)]
async fn stream_into<S: Future<Output = ()>>(
    writer: &mut WriteMultipart,
    snapshot: impl Stream<Item = Result<Bytes>>,
    encoder: Encoder,
    plain: bool,
    store: &Store,
    location: &Location,
    options: UploadOptions,
    stop: Pin<&mut futures::future::Fuse<S>>,
) -> Result<Digest256> {
    let (chunks, received) = tokio::sync::mpsc::channel::<Vec<Bytes>>(QUEUED_BATCHES);
    let (pieces, mut encoded) = tokio::sync::mpsc::channel::<Vec<Bytes>>(QUEUED_BATCHES);
    let uri = location.to_string();
    let encoding =
        tokio::task::spawn_blocking(move || encode(received, pieces, encoder, plain, &uri));
    let feed = async move {
        let mut check = SnapshotCheck::default();
        let mut batches = std::pin::pin!(snapshot.ready_chunks(BATCH));
        while let Some(batch) = batches.next().await {
            let batch = batch.into_iter().collect::<Result<Vec<Bytes>>>()?;
            for chunk in &batch {
                check.update(chunk);
            }
            // A closed channel: the encoder stopped, and says why.
            if chunks.send(batch).await.is_err() {
                break;
            }
        }
        Ok(check)
    };
    let upload = async {
        while let Some(batch) = encoded.recv().await {
            for piece in batch {
                // Back-pressure: the next part only starts filling once
                // fewer than `parts_in_flight` uploads are running, which
                // bounds memory.
                writer
                    .wait_for_capacity(options.parts_in_flight)
                    .await
                    .map_err(|e| store.error("multipart upload", location.path(), &e))?;
                writer.put(piece);
            }
        }
        Ok::<_, Error>(())
    };
    let check = tokio::select! {
        biased;
        () = stop => return Err(Error::Cancelled),
        streamed = async { tokio::try_join!(feed, upload) } => streamed?.0,
    };
    let mut digest = encoding.await.map_err(|e| Error::Io {
        operation: "encoding the snapshot for",
        path: location.to_string().into(),
        cause: std::io::Error::other(e),
    })??;
    digest.check = check;
    Ok(digest)
}

/// The middle stage of [`stream_into`], on a blocking thread: the encoding
/// (a plain snapshot passes through without a copy) and the digest of what
/// is stored (for a plain snapshot, etcd's check computes it). Its check is
/// left empty for the caller's.
fn encode(
    mut chunks: tokio::sync::mpsc::Receiver<Vec<Bytes>>,
    pieces: tokio::sync::mpsc::Sender<Vec<Bytes>>,
    mut encoder: Encoder,
    plain: bool,
    uri: &str,
) -> Result<Digest256> {
    let mut digest = Digest256::new(plain);
    while let Some(batch) = chunks.blocking_recv() {
        let mut out = Vec::with_capacity(batch.len());
        for chunk in batch {
            let piece = if plain {
                chunk
            } else {
                Bytes::from(encoder.update(&chunk).map_err(Error::codec(uri))?)
            };
            if !piece.is_empty() {
                digest.stored(&piece);
                out.push(piece);
            }
        }
        if !out.is_empty() && pieces.blocking_send(out).is_err() {
            return Err(upload_stopped(uri));
        }
    }
    let last = encoder.finish().map_err(Error::codec(uri))?;
    if !last.is_empty() {
        digest.stored(&last);
        if pieces.blocking_send(vec![Bytes::from(last)]).is_err() {
            return Err(upload_stopped(uri));
        }
    }
    Ok(digest)
}

/// The upload stage ended before taking everything: it returns why, and
/// the digest of what it did not take must not be used.
fn upload_stopped(uri: &str) -> Error {
    Error::Store {
        operation: "multipart upload",
        uri: uri.to_owned(),
        kind: crate::error::StoreErrorKind::Other,
        message: "the upload stopped before the whole snapshot was given to it".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::Mutex;

    use async_trait::async_trait;
    use dkv_etcd::{Alarm, EndpointStatus, FakeEtcd, Member, MemberId, SnapshotStream};

    use super::*;
    use crate::snapshot_check::fake_snapshot;

    /// A one-member cluster whose snapshot is `data`, optionally failing
    /// after `fail_after` chunks.
    struct OneMember {
        data: Vec<u8>,
        chunk: usize,
        fail_after: Option<usize>,
        stall_after: Option<usize>,
        snapshots: Mutex<usize>,
    }

    impl OneMember {
        fn new(data: Vec<u8>) -> Self {
            Self {
                data,
                chunk: 32 * 1024,
                fail_after: None,
                stall_after: None,
                snapshots: Mutex::new(0),
            }
        }
    }

    fn refused() -> dkv_etcd::Error {
        dkv_etcd::Error::Refused {
            operation: "test",
            message: "not used".to_owned(),
        }
    }

    #[async_trait]
    impl EtcdAdmin for OneMember {
        async fn member_list(&self) -> dkv_etcd::Result<Vec<Member>> {
            Ok(vec![Member {
                id: MemberId(1),
                name: "m0".to_owned(),
                peer_urls: vec!["http://m0:2380".to_owned()],
                client_urls: vec!["http://m0:2379".to_owned()],
                is_learner: false,
            }])
        }
        async fn add_learner(&self, _: &[String]) -> dkv_etcd::Result<Member> {
            Err(refused())
        }
        async fn promote(&self, _: MemberId) -> dkv_etcd::Result<()> {
            Err(refused())
        }
        async fn remove(&self, _: MemberId) -> dkv_etcd::Result<()> {
            Err(refused())
        }
        async fn status(&self, endpoint: &str) -> dkv_etcd::Result<EndpointStatus> {
            Ok(EndpointStatus {
                endpoint: endpoint.to_owned(),
                member_id: MemberId(1),
                cluster_id: 7,
                leader: MemberId(1),
                version: "3.5.16".to_owned(),
                db_size: self.data.len() as i64,
                db_size_in_use: 0,
                raft_index: 10,
                raft_applied_index: 10,
                raft_term: 2,
                revision: 42,
                is_learner: false,
                errors: Vec::new(),
                storage_version: String::new(),
                downgrade_target: None,
            })
        }
        async fn move_leader(&self, _: &str, _: MemberId) -> dkv_etcd::Result<()> {
            Err(refused())
        }
        async fn alarms(&self) -> dkv_etcd::Result<Vec<Alarm>> {
            Ok(Vec::new())
        }
        async fn disarm(&self, _: Alarm) -> dkv_etcd::Result<()> {
            Err(refused())
        }
        async fn compact(&self, _: i64) -> dkv_etcd::Result<()> {
            Err(refused())
        }
        async fn defragment(&self, _: &str) -> dkv_etcd::Result<()> {
            Err(refused())
        }
        async fn enable_auth(&self, _: &str) -> dkv_etcd::Result<()> {
            Err(refused())
        }
        async fn snapshot(&self, _: &str) -> dkv_etcd::Result<SnapshotStream> {
            *self.snapshots.lock().unwrap() += 1;
            let mut chunks: Vec<dkv_etcd::Result<Bytes>> = self
                .data
                .chunks(self.chunk)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            if let Some(n) = self.fail_after {
                chunks.truncate(n);
                chunks.push(Err(dkv_etcd::Error::Unavailable {
                    operation: "snapshot",
                    message: "connection reset".to_owned(),
                }));
            }
            if let Some(n) = self.stall_after {
                chunks.truncate(n);
                let stalled = futures::stream::iter(chunks).chain(futures::stream::pending());
                return Ok(Box::pin(stalled));
            }
            let stream: Pin<Box<_>> = Box::pin(futures::stream::iter(chunks));
            Ok(stream)
        }
    }

    fn request(dir: &std::path::Path) -> BackupRequest {
        BackupRequest {
            namespace: "shop".to_owned(),
            cluster: "orders".to_owned(),
            destination: Location::parse(&format!("file://{}/backups", dir.display())).unwrap(),
            seed_endpoints: vec!["http://orders-client.shop.svc:2379".to_owned()],
            taken_at: "2026-11-22T06:00:12.5Z".parse().unwrap(),
            upload: UploadOptions {
                part_size: MIN_PART_SIZE,
                parts_in_flight: 2,
            },
            encoding: Encoding::plain(),
        }
    }

    fn files_under(dir: &std::path::Path) -> Vec<String> {
        let mut found = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    found.push(path.strip_prefix(dir).unwrap().display().to_string());
                }
            }
        }
        found.sort();
        found
    }

    #[tokio::test]
    async fn a_backup_is_the_snapshot_bytes_with_their_record() {
        let dir = tempfile::tempdir().unwrap();
        // Spans three parts of 5 MiB.
        let data = fake_snapshot(24 * 1024);
        let admin = OneMember::new(data.clone());
        let artifact = take_backup(&admin, &StoreConfig::default(), &request(dir.path()))
            .await
            .unwrap();
        let object = dir
            .path()
            .join("backups/shop/orders/orders-20261122-060012.db");
        assert_eq!(artifact.uri, format!("file://{}", object.display()));
        assert_eq!(std::fs::read(&object).unwrap(), data);
        assert_eq!(artifact.size_bytes, data.len() as u64);
        assert_eq!(artifact.sha256, format!("{:x}", Sha256::digest(&data)));
        assert_eq!(artifact.revision, 42);
        assert_eq!(artifact.etcd_version, "3.5.16");
        assert_eq!(artifact.taken_at, "2026-11-22T06:00:12Z".parse().unwrap());
        let record: Artifact =
            serde_json::from_slice(&std::fs::read(object.with_extension("db.json")).unwrap())
                .unwrap();
        assert_eq!(record, artifact);

        // Same second again: refused, the first artifact untouched.
        let err = take_backup(&admin, &StoreConfig::default(), &request(dir.path()))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
        assert_eq!(*admin.snapshots.lock().unwrap(), 1);
        assert_eq!(std::fs::read(&object).unwrap(), data);
    }

    /// A backup of `data` asked to be compressed and encrypted, and its key.
    async fn compressed_and_encrypted(
        dir: &std::path::Path,
        data: &[u8],
    ) -> (Artifact, crate::encryption::Key) {
        let admin = OneMember::new(data.to_vec());
        let key = crate::encryption::Key::parse(&[42; 32]).unwrap();
        let mut request = request(dir);
        request.encoding = Encoding {
            compress: true,
            key: Some(key.clone()),
        };
        let artifact = take_backup(&admin, &StoreConfig::default(), &request)
            .await
            .unwrap();
        (artifact, key)
    }

    #[tokio::test]
    async fn a_compressed_and_encrypted_backup_decodes_to_the_snapshot_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let data = fake_snapshot(24 * 1024);
        let (artifact, key) = compressed_and_encrypted(dir.path(), &data).await;
        let object = dir
            .path()
            .join("backups/shop/orders/orders-20261122-060012.db.zst.enc");
        assert_eq!(artifact.uri, format!("file://{}", object.display()));
        let stored = std::fs::read(&object).unwrap();
        assert_eq!(artifact.size_bytes, stored.len() as u64);
        assert_eq!(artifact.sha256, format!("{:x}", Sha256::digest(&stored)));
        assert_eq!(artifact.compression.as_deref(), Some("zstd"));
        assert_eq!(artifact.encryption_key_id.as_deref(), Some(key.id()));
        assert!(crate::encryption::is_encrypted(&stored));
        let keys = crate::encryption::Keyring::from(key);
        assert_eq!(crate::encoding::decode_all(&keys, &stored).unwrap(), data);
    }

    /// An etcd-like snapshot of `len` bytes of noise, then its sha256.
    fn incompressible_snapshot(len: usize) -> Vec<u8> {
        let mut db = crate::testing::incompressible(3, len);
        let hash = Sha256::digest(&db);
        db.extend_from_slice(&hash);
        db
    }

    #[tokio::test]
    async fn a_snapshot_that_does_not_compress_is_stored_uncompressed_and_named_so() {
        let dir = tempfile::tempdir().unwrap();
        // Larger than the sample: the decision holds for the whole stream.
        let data = incompressible_snapshot(SAMPLE_BYTES + 3 * MIN_PART_SIZE);
        let (artifact, key) = compressed_and_encrypted(dir.path(), &data).await;
        let object = dir
            .path()
            .join("backups/shop/orders/orders-20261122-060012.db.enc");
        assert_eq!(artifact.uri, format!("file://{}", object.display()));
        assert_eq!(artifact.compression, None);
        assert_eq!(artifact.encryption_key_id.as_deref(), Some(key.id()));
        let stored = std::fs::read(&object).unwrap();
        assert_eq!(artifact.sha256, format!("{:x}", Sha256::digest(&stored)));
        let keys = crate::encryption::Keyring::from(key.clone());
        assert_eq!(crate::encoding::decode_all(&keys, &stored).unwrap(), data);

        // Taken again at the same second, under either name: refused.
        let compressible = OneMember::new(fake_snapshot(24 * 1024));
        let mut request = request(dir.path());
        request.encoding = Encoding {
            compress: true,
            key: Some(key),
        };
        let again = take_backup(&compressible, &StoreConfig::default(), &request).await;
        assert!(
            matches!(again, Err(Error::AlreadyExists { .. })),
            "{again:?}"
        );
    }

    #[tokio::test]
    async fn a_stream_broken_midway_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut admin = OneMember::new(fake_snapshot(24 * 1024));
        // After 6 MiB: one part uploaded, the next one filling.
        admin.fail_after = Some(192);
        let err = take_backup(&admin, &StoreConfig::default(), &request(dir.path()))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Etcd { .. }), "{err}");
        assert_eq!(files_under(dir.path()), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_stop_request_mid_stream_aborts_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut admin = OneMember::new(fake_snapshot(24 * 1024));
        // 6 MiB arrive, then etcd goes quiet; the pod is told to stop.
        admin.stall_after = Some(192);
        let stop = tokio::time::sleep(std::time::Duration::from_millis(300));
        let err = take_backup_until(&admin, &StoreConfig::default(), &request(dir.path()), stop)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Cancelled), "{err}");
        assert_eq!(files_under(dir.path()), Vec::<String>::new());
        // A stop that never comes changes nothing.
        let admin = OneMember::new(fake_snapshot(64));
        take_backup_until(
            &admin,
            &StoreConfig::default(),
            &request(dir.path()),
            std::future::pending(),
        )
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn a_snapshot_failing_etcds_own_check_is_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let mut data = fake_snapshot(64);
        data[1000] ^= 0x40;
        let admin = OneMember::new(data);
        let err = take_backup(&admin, &StoreConfig::default(), &request(dir.path()))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::CorruptSnapshot { .. }), "{err}");
        assert_eq!(err.category(), crate::Category::Integrity);
        assert_eq!(files_under(dir.path()), Vec::<String>::new());

        // FakeEtcd's placeholder snapshot is no etcd snapshot either.
        let fake = FakeEtcd::with_members(&["m0"], "3.5.16");
        let err = take_backup(&fake, &StoreConfig::default(), &request(dir.path()))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        assert_eq!(files_under(dir.path()), Vec::<String>::new());
    }

    #[tokio::test]
    async fn parts_below_the_s3_minimum_are_refused_up_front() {
        let dir = tempfile::tempdir().unwrap();
        let admin = OneMember::new(fake_snapshot(8));
        let mut request = request(dir.path());
        request.upload.part_size = 1024 * 1024;
        let err = take_backup(&admin, &StoreConfig::default(), &request)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert_eq!(*admin.snapshots.lock().unwrap(), 0);
    }
}
