//! The in-order half of a fetch: on a blocking thread, reads back what has
//! landed in the download file, from its start and without gaps, hashes it
//! (the digest of the stored object) and, when the object was stored
//! encrypted or compressed, decodes it into a second file. A plain object
//! is its own snapshot and is only read. Either way the snapshot's own
//! integrity hash (the sha256 etcd appends to it) is checked on the way, so
//! that the restore tool need not read it all again: for a plain object the
//! one digest serves both. The bytes read back were written
//! moments before (the downloads wait when they get far ahead), so they
//! are most likely still in the page cache.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::ops::Range;
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;

use super::{Downloaded, Fetched};
use crate::encoding::{CodecError, Decoder};
use crate::encryption::{self, EncryptionError, Keyring};
use crate::error::{Error, Result};
use crate::snapshot_check::SnapshotCheck;

/// What is read back and hashed at a time.
const READ_SIZE: usize = 1 << 20;

/// Content written between two requests to put it on disk in the
/// background, so that the sync which ends the fetch finds little left.
const FLUSH_EVERY: u64 = 64 << 20;

/// The two files of a fetch: where the stored object lands, and where its
/// decoded content goes when it is not plain.
#[derive(Debug, Clone)]
pub(super) struct Files {
    pub download: PathBuf,
    pub decoded: PathBuf,
}

/// Why decoding a piece stopped.
enum Failure {
    Codec(CodecError),
    Write(std::io::Error),
}

impl From<CodecError> for Failure {
    fn from(err: CodecError) -> Failure {
        Failure::Codec(err)
    }
}

/// Where the object's content is.
enum Content {
    /// Not known until the object's first bytes are read.
    Undecided,
    /// The object is plain: the download file is the snapshot.
    InPlace { flusher: Flusher },
    /// Decoded into the second file, written by a thread of its own.
    Decoded { writer: Writer },
}

pub(super) struct Follower {
    files: Files,
    uri: String,
    download: std::fs::File,
    buffer: Vec<u8>,
    /// The stored object: its digest, and the snapshot's own check when
    /// the object is the snapshot as it is.
    stored: SnapshotCheck,
    /// Every byte before it is read and hashed.
    frontier: u64,
    decoder: Decoder,
    undecodable: Option<CodecError>,
    content: Content,
    snapshot_bytes: u64,
    flushed_at: u64,
    /// The frontier, for the downloads that wait for it.
    progress: tokio::sync::watch::Sender<u64>,
}

impl Follower {
    /// `download` is a handle of the download file open for reading and
    /// writing (a decoded object's stored bytes are released behind it).
    pub fn new(
        download: std::fs::File,
        keys: Keyring,
        files: Files,
        uri: String,
        progress: tokio::sync::watch::Sender<u64>,
    ) -> Follower {
        Follower {
            files,
            uri,
            download,
            buffer: vec![0; READ_SIZE],
            stored: SnapshotCheck::default(),
            frontier: 0,
            decoder: Decoder::new(keys),
            undecodable: None,
            content: Content::Undecided,
            snapshot_bytes: 0,
            flushed_at: 0,
            progress,
        }
    }

    /// Takes each range as it lands, in any order, and reads every byte as
    /// soon as all before it have landed; until the sender is done, or the
    /// first failure to read or write, or the object names a key not at
    /// hand.
    pub fn follow(mut self, landed: std::sync::mpsc::Receiver<Range<u64>>) -> Result<Follower> {
        let mut waiting = BTreeMap::new();
        while let Ok(range) = landed.recv() {
            waiting.insert(range.start, range.end);
            while let Some(end) = waiting.remove(&self.frontier) {
                if let Err(err) = self.read(end) {
                    self.abandon();
                    return Err(err);
                }
                self.progress.send_replace(self.frontier);
            }
        }
        Ok(self)
    }

    /// Reads from the frontier to `end`.
    fn read(&mut self, end: u64) -> Result<()> {
        let start = self.frontier;
        while self.frontier < end {
            let length = usize::try_from(end - self.frontier)
                .unwrap_or(usize::MAX)
                .min(READ_SIZE);
            let mut piece = std::mem::take(&mut self.buffer);
            let read = self
                .download
                .read_exact_at(&mut piece[..length], self.frontier)
                .map_err(Error::io("reading", &self.files.download));
            let taken = read.and_then(|()| self.take(&piece[..length]));
            self.buffer = piece;
            taken?;
            self.frontier += length as u64;
        }
        if let Content::Decoded { .. } = self.content {
            self.release(start..end);
        }
        Ok(())
    }

    fn take(&mut self, stored: &[u8]) -> Result<()> {
        self.stored.update(stored);
        let mut rest = stored;
        if let Content::Undecided = self.content {
            // The first bytes say how the object was stored (dkv's
            // encryption header, zstd's magic, or neither), and what so
            // few bytes decode to is small.
            let (head, tail) = rest.split_at(rest.len().min(encryption::MAGIC.len()));
            self.decode(head, false)?;
            rest = tail;
        }
        match &self.content {
            Content::InPlace { flusher } => {
                let read = self.frontier + stored.len() as u64;
                if read - self.flushed_at >= FLUSH_EVERY {
                    self.flushed_at = read;
                    flusher.request();
                }
                Ok(())
            }
            Content::Decoded { .. } => self.decode(rest, false),
            // Nothing is left of this piece, or it did not decode.
            Content::Undecided => Ok(()),
        }
    }

    /// Feeds `stored` to the decoder (or ends the object, `at_end`) and
    /// writes what it decodes. What decodes before the object's encoding
    /// is known waits for it.
    fn decode(&mut self, stored: &[u8], at_end: bool) -> Result<()> {
        if self.undecodable.is_some() {
            return Ok(());
        }
        let mut early = Vec::new();
        let fed = {
            let Follower {
                decoder,
                content,
                snapshot_bytes,
                ..
            } = self;
            let mut sink = |piece: &[u8]| {
                *snapshot_bytes += piece.len() as u64;
                match content {
                    Content::Decoded { writer } => {
                        writer.write(piece.to_vec()).map_err(Failure::Write)
                    }
                    Content::Undecided => {
                        early.extend_from_slice(piece);
                        Ok(())
                    }
                    // Its bytes are where they belong.
                    Content::InPlace { .. } => Ok(()),
                }
            };
            if at_end {
                decoder.finish(&mut sink)
            } else {
                decoder.update(stored, &mut sink)
            }
        };
        match fed {
            Ok(()) => {}
            Err(Failure::Write(e)) => return Err(Error::io("writing", &self.files.decoded)(e)),
            // Without the key nothing can be done: say so at once.
            Err(Failure::Codec(
                err @ CodecError::Encryption(EncryptionError::MissingKey { .. }),
            )) => return Err(Error::codec(&self.uri)(err)),
            // Content that does not decode: most likely damaged in the
            // store. The digest of the whole object tells; keep hashing.
            Err(Failure::Codec(err)) => {
                self.undecodable = Some(err);
                return Ok(());
            }
        }
        if let Content::Undecided = self.content {
            self.decided()?;
            if let Content::Decoded { writer } = &mut self.content
                && !early.is_empty()
            {
                writer
                    .write(early)
                    .map_err(Error::io("writing", &self.files.decoded))?;
            }
        }
        Ok(())
    }

    /// Once the decoder knows whether the object is plain, the content
    /// stays where it landed or gets a file of its own.
    fn decided(&mut self) -> Result<()> {
        if !matches!(self.content, Content::Undecided) {
            return Ok(());
        }
        self.content = match self.decoder.is_plain() {
            None => return Ok(()),
            Some(true) => Content::InPlace {
                flusher: Flusher::start(&self.download),
            },
            Some(false) => {
                let path = &self.files.decoded;
                let file = std::fs::File::create(path).map_err(Error::io("creating", path))?;
                let writer = Writer::start(file).map_err(Error::io("writing", path))?;
                Content::Decoded { writer }
            }
        };
        Ok(())
    }

    /// Gives back the disk space of stored bytes already decoded, so that
    /// a decoded object needs little more space than its content: the
    /// download file keeps only what landed ahead of the decoder. Where
    /// the file system cannot, the space is freed when the fetch ends.
    fn release(&self, range: Range<u64>) {
        use rustix::fs::{FallocateFlags, fallocate};
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        if let Err(e) = fallocate(&self.download, flags, range.start, range.end - range.start) {
            tracing::debug!(path = %self.files.download.display(), error = %e, "could not release decoded bytes");
        }
    }

    /// Ends the object, of `size` bytes: the last of the content written
    /// and, when it decoded, everything on disk before it is declared good
    /// (a restore may follow at once).
    pub fn finish(mut self, size: u64) -> Result<Downloaded> {
        if self.frontier != size {
            let err = Error::Io {
                operation: "reading",
                path: self.files.download.clone(),
                cause: std::io::Error::other(format!(
                    "{} of the object's {size} bytes arrived",
                    self.frontier
                )),
            };
            self.abandon();
            return Err(err);
        }
        self.decode(&[], true)?;
        // The caller compares the digest first: a damaged object is
        // reported as such, an intact one that does not decode as that.
        let undecodable = self.undecodable.take();
        let sha256 = self.stored.whole_stream_sha256();
        let (content, snapshot_bytes, snapshot_check) = match self.content {
            Content::Undecided => (
                self.files.download.clone(),
                self.frontier,
                self.stored.finish(),
            ),
            Content::InPlace { flusher } => {
                flusher
                    .stop()
                    .map_err(Error::io("syncing", &self.files.download))?;
                if undecodable.is_none() {
                    self.download
                        .sync_all()
                        .map_err(Error::io("syncing", &self.files.download))?;
                }
                (
                    self.files.download.clone(),
                    self.frontier,
                    self.stored.finish(),
                )
            }
            Content::Decoded { writer } => {
                let path = &self.files.decoded;
                let (file, check) = writer.finish().map_err(Error::io("writing", path))?;
                if undecodable.is_none() {
                    file.sync_all().map_err(Error::io("syncing", path))?;
                }
                (path.clone(), self.snapshot_bytes, check.finish())
            }
        };
        Ok(Downloaded {
            content,
            fetched: Fetched {
                path: PathBuf::new(),
                size_bytes: self.frontier,
                sha256,
                snapshot_bytes,
                compressed: self.decoder.compressed(),
                encrypted_with: self.decoder.encrypted_with().map(str::to_owned),
            },
            undecodable,
            snapshot_check,
        })
    }

    /// Stops without finishing: the caller removes the files.
    pub fn abandon(self) {
        match self.content {
            Content::Undecided => {}
            Content::InPlace { flusher } => {
                let _ = flusher.stop();
            }
            Content::Decoded { writer } => {
                let _ = writer.finish();
            }
        }
    }
}

/// Writes decoded content on a thread of its own, so that decoding the
/// next piece and writing this one happen at the same time (on JSON
/// documents zstd decodes about 1 GB/s, and writing as much again into the
/// page cache took as long as the decoding). The same thread checks the
/// snapshot's own hash as the content goes by.
struct Writer {
    pieces: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<(std::fs::File, SnapshotCheck)>>>,
}

/// Decoded pieces waiting for the writer (each is what one read of
/// [`READ_SIZE`] stored bytes decoded to).
const QUEUED_PIECES: usize = 4;

impl Writer {
    fn start(mut file: std::fs::File) -> std::io::Result<Writer> {
        let (pieces, received) = std::sync::mpsc::sync_channel::<Vec<u8>>(QUEUED_PIECES);
        let thread = std::thread::Builder::new()
            .name("fetch-write".to_owned())
            .spawn(move || {
                let flusher = Flusher::start(&file);
                let mut check = SnapshotCheck::default();
                let (mut written, mut flushed_at) = (0u64, 0u64);
                let mut wrote = Ok(());
                while let Ok(piece) = received.recv() {
                    check.update(&piece);
                    wrote = file.write_all(&piece);
                    if wrote.is_err() {
                        break;
                    }
                    written += piece.len() as u64;
                    if written - flushed_at >= FLUSH_EVERY {
                        flushed_at = written;
                        flusher.request();
                    }
                }
                let flushed = flusher.stop();
                wrote.and(flushed).map(|()| (file, check))
            })?;
        Ok(Writer {
            pieces: Some(pieces),
            thread: Some(thread),
        })
    }

    /// Queues `piece`; when the thread has stopped, why it did.
    fn write(&mut self, piece: Vec<u8>) -> std::io::Result<()> {
        match self.pieces.as_ref().map(|pieces| pieces.send(piece)) {
            Some(Ok(())) => Ok(()),
            _ => self
                .join()
                .map(|_| ())
                .and(Err(std::io::Error::other("the writing thread stopped"))),
        }
    }

    /// Waits for everything queued to be written; the file, and the check
    /// of everything written to it.
    fn finish(mut self) -> std::io::Result<(std::fs::File, SnapshotCheck)> {
        self.join()
    }

    fn join(&mut self) -> std::io::Result<(std::fs::File, SnapshotCheck)> {
        drop(self.pieces.take());
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(std::io::Error::other("the writing thread panicked")),
            None => Err(std::io::Error::other("the writing thread stopped")),
        }
    }
}

/// Puts what was written on disk in the background (`fdatasync` through a
/// second handle of the file) while the fetch goes on. A failure is kept
/// and reported when the fetch ends: the final sync on the same open file
/// may not report a write-back error twice.
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

#[cfg(test)]
mod tests {
    use sha2::{Digest as _, Sha256};

    use super::*;
    use crate::encoding::Encoding;
    use crate::snapshot_check::fake_snapshot;

    /// A follower of `stored`, already whole in its download file.
    fn follower_of(dir: &std::path::Path, stored: &[u8]) -> Follower {
        let files = Files {
            download: dir.join("a.db.partial"),
            decoded: dir.join("a.db.decoded.partial"),
        };
        std::fs::write(&files.download, stored).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&files.download)
            .unwrap();
        let (progress, _) = tokio::sync::watch::channel(0);
        Follower::new(
            file,
            Keyring::default(),
            files,
            "file:///a.db".into(),
            progress,
        )
    }

    /// Follows `stored`, its ranges landing last first.
    fn follow_backwards(dir: &std::path::Path, stored: &[u8]) -> Downloaded {
        let follower = follower_of(dir, stored);
        let size = stored.len() as u64;
        let (ranges, received) = std::sync::mpsc::channel();
        let starts: Vec<u64> = (0..size).step_by(1000).collect();
        for &start in starts.iter().rev() {
            ranges.send(start..size.min(start + 1000)).unwrap();
        }
        drop(ranges);
        follower.follow(received).unwrap().finish(size).unwrap()
    }

    #[test]
    fn ranges_that_land_in_any_order_are_read_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let content = fake_snapshot(800);
        for encoding in [Encoding::plain(), Encoding::default()] {
            let stored = encoding.encode_all(&content).unwrap();
            let downloaded = follow_backwards(dir.path(), &stored);
            assert_eq!(
                downloaded.fetched.sha256,
                format!("{:x}", Sha256::digest(&stored))
            );
            assert_eq!(downloaded.fetched.snapshot_bytes, content.len() as u64);
            assert!(std::fs::read(&downloaded.content).unwrap() == content);
            assert_eq!(downloaded.fetched.compressed, encoding.compress);
            assert_eq!(downloaded.snapshot_check, Ok(()));
            let _ = std::fs::remove_file(dir.path().join("a.db.decoded.partial"));
        }
    }

    #[test]
    fn content_that_is_not_an_intact_snapshot_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let mut damaged = fake_snapshot(800);
        damaged[5000] ^= 1;
        let not_a_snapshot: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
        for encoding in [Encoding::plain(), Encoding::default()] {
            for (content, why) in [(&damaged, "trailer says"), (&not_a_snapshot, "truncated")] {
                let stored = encoding.encode_all(content).unwrap();
                let downloaded = follow_backwards(dir.path(), &stored);
                // The object itself arrived whole.
                assert_eq!(
                    downloaded.fetched.sha256,
                    format!("{:x}", Sha256::digest(&stored))
                );
                let reason = downloaded.snapshot_check.unwrap_err();
                assert!(reason.contains(why), "{reason}");
                let _ = std::fs::remove_file(dir.path().join("a.db.decoded.partial"));
            }
        }
    }

    #[test]
    fn an_object_that_did_not_all_arrive_is_not_finished() {
        let dir = tempfile::tempdir().unwrap();
        let follower = follower_of(dir.path(), &[7; 3000]);
        let (ranges, received) = std::sync::mpsc::channel();
        ranges.send(0..1000).unwrap();
        // 1000..2000 never lands.
        ranges.send(2000..3000).unwrap();
        drop(ranges);
        let err = follower
            .follow(received)
            .unwrap()
            .finish(3000)
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("1000 of the object's 3000 bytes"),
            "{err}"
        );
    }
}
