//! An object downloaded into a local file as ranges, several at a time,
//! each written at its own offset as its bytes arrive: no range waits for
//! the one before it, and nothing waits in memory for its turn.

use std::ops::Range;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::BytesMut;
use futures::stream::BoxStream;
use futures::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path as ObjectPath;
use tokio_util::task::AbortOnDropHandle;

use crate::error::{Error, Result, StoreErrorKind};
use crate::store::Store;

/// How an object is downloaded: in ranges of `size` bytes, `at_once` of
/// them at a time, none starting more than `ahead` bytes past what the
/// reader of the file has read (what lands waits on disk for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Parts {
    pub size: u64,
    pub at_once: usize,
    pub ahead: u64,
}

/// What one range task gathers from the network before writing it: large
/// enough that a write is one call for many of the HTTP client's chunks.
const WRITE_SIZE: usize = 1 << 20;

/// An object on its way into a file.
pub(super) struct Landing {
    /// The object's size when the download started.
    pub size: u64,
    /// Each range once all its bytes are written, in the order they
    /// finish. Dropping it aborts the downloads in progress (a write
    /// already under way on a blocking thread still completes).
    pub landed: BoxStream<'static, Result<Range<u64>>>,
}

/// Starts downloading `object` into `file` (which must exist), each byte
/// at its offset in the object; `read` is how far the file's reader has
/// read. The ranges are not tied to one version of the object: the caller
/// checks the digest of what landed (the artifacts dkv reads are never
/// rewritten under the same name).
pub(super) async fn land(
    store: &Store,
    object: &ObjectPath,
    file: &Path,
    parts: Parts,
    read: tokio::sync::watch::Receiver<u64>,
) -> Result<Landing> {
    let size = store.size(object).await?;
    let handle = tokio::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .await
        .map_err(Error::io("opening", file))?
        .into_std()
        .await;
    let target = Target {
        store: store.clone(),
        object: object.clone(),
        file: Arc::new(handle),
        path: file.to_path_buf(),
    };
    let step = parts.size.max(1);
    let ranges = (0..size)
        .step_by(usize::try_from(step).unwrap_or(usize::MAX))
        .map(move |start| start..size.min(start.saturating_add(step)));
    let landed = futures::stream::iter(ranges)
        .then(move |range| {
            let mut read = read.clone();
            async move {
                // A reader that is gone no longer holds anything back.
                let _ = read
                    .wait_for(|&done| range.start <= done.saturating_add(parts.ahead))
                    .await;
                range
            }
        })
        .map(move |range| {
            let uri = target.store.location(&target.object).to_string();
            let task = AbortOnDropHandle::new(tokio::spawn(target.clone().land(range)));
            async move {
                task.await.unwrap_or_else(|e| {
                    Err(Error::Store {
                        operation: "get",
                        uri,
                        kind: StoreErrorKind::Other,
                        message: format!("the download of a range ended: {e}"),
                    })
                })
            }
        })
        .buffer_unordered(parts.at_once.max(1))
        .boxed();
    Ok(Landing { size, landed })
}

/// Where the ranges of one object come from and go to.
#[derive(Clone)]
struct Target {
    store: Store,
    object: ObjectPath,
    file: Arc<std::fs::File>,
    path: PathBuf,
}

impl Target {
    /// Downloads `range` and writes it at its offset.
    async fn land(self, range: Range<u64>) -> Result<Range<u64>> {
        let mut chunks = self.store.get_range(&self.object, range.clone()).await?;
        let mut pending = BytesMut::with_capacity(WRITE_SIZE);
        let mut written = range.start;
        let mut received = range.start;
        while let Some(chunk) = chunks.try_next().await? {
            received += chunk.len() as u64;
            if received > range.end {
                break;
            }
            pending.extend_from_slice(&chunk);
            if pending.len() >= WRITE_SIZE {
                pending = self.write_at(pending, &mut written).await?;
            }
        }
        if received != range.end {
            return Err(Error::Store {
                operation: "get",
                uri: self.store.location(&self.object).to_string(),
                kind: StoreErrorKind::Other,
                message: format!(
                    "asked for bytes {}..{} of the object, received {}",
                    range.start,
                    range.end,
                    received - range.start
                ),
            });
        }
        if !pending.is_empty() {
            self.write_at(pending, &mut written).await?;
        }
        Ok(range)
    }

    /// Writes `piece` at `at` on a blocking thread, moves `at` past it, and
    /// gives the buffer back empty.
    async fn write_at(&self, piece: BytesMut, at: &mut u64) -> Result<BytesMut> {
        let file = Arc::clone(&self.file);
        let offset = *at;
        let written =
            tokio::task::spawn_blocking(move || file.write_all_at(&piece, offset).map(|()| piece))
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        let mut piece = written.map_err(Error::io("writing", &self.path))?;
        *at += piece.len() as u64;
        piece.clear();
        Ok(piece)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::location::Location;
    use crate::store::StoreConfig;

    #[tokio::test]
    async fn every_range_lands_at_its_offset_whatever_the_split() {
        let dir = tempfile::tempdir().unwrap();
        let uri = format!("file://{}/a.db", dir.path().display());
        let location = Location::parse(&uri).unwrap();
        let store = Store::open(&location, &StoreConfig::default()).unwrap();
        let content: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        store
            .put_small(location.path(), Bytes::from(content.clone()))
            .await
            .unwrap();
        let file = dir.path().join("out");
        // Ranges that divide the object, that leave a short last one, one
        // range for the whole object, one larger than it, and no
        // concurrency asked for.
        let (_reader, read) = tokio::sync::watch::channel(u64::MAX);
        for (size, at_once) in [(100, 3), (7, 4), (999, 2), (1000, 1), (4096, 4), (1, 0)] {
            let parts = Parts {
                size,
                at_once,
                ahead: 0,
            };
            std::fs::write(&file, b"").unwrap();
            let landing = land(&store, location.path(), &file, parts, read.clone())
                .await
                .unwrap();
            assert_eq!(landing.size, 1000);
            let mut landed: Vec<Range<u64>> = landing.landed.try_collect().await.unwrap();
            landed.sort_by_key(|r| r.start);
            let covered: u64 = landed.iter().map(|r| r.end - r.start).sum();
            assert_eq!(covered, 1000, "{parts:?}");
            assert!(landed.windows(2).all(|w| w[0].end == w[1].start));
            assert_eq!(std::fs::read(&file).unwrap(), content, "{parts:?}");
        }
        let missing = ObjectPath::from(format!("{}/none.db", dir.path().display()));
        let parts = Parts {
            size: 7,
            at_once: 2,
            ahead: 0,
        };
        let err = land(&store, &missing, &file, parts, read)
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("none.db"), "{err}");
    }
}
