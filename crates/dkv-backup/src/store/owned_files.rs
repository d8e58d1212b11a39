//! `file://` stores written by a process that serves other users: what it
//! creates (directories and files) is handed to the user the other writers
//! run as, so that whoever writes a destination first, the others can write
//! beside it.
//!
//! `dkv local` runs as root, and runs the continuous-backup agent,
//! retention and verification in its own process, while backup Jobs and
//! member pods run as the pods' user (65532). A directory root created
//! (mode 0755) would refuse every later Job. The modes stay as the umask
//! makes them: nothing is opened to other users of the machine; only the
//! owner changes, to the user the pods write as.

use std::fmt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, UploadPart,
};

/// The user and group that own what a process creates in `file://` stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOwner {
    pub uid: u32,
    pub gid: u32,
}

static PROCESS_OWNER: OnceLock<FileOwner> = OnceLock::new();

/// Makes every `file://` store this process opens from now on hand what it
/// creates to `owner`. Set once, at start, by a process that writes on
/// behalf of pods running as another user (`dkv local` as root); a second
/// call with another owner is refused.
pub fn own_created_files_as(owner: FileOwner) -> Result<(), FileOwner> {
    let set = *PROCESS_OWNER.get_or_init(|| owner);
    if set == owner { Ok(()) } else { Err(set) }
}

/// The owner set by [`own_created_files_as`], if any.
pub(crate) fn process_owner() -> Option<FileOwner> {
    PROCESS_OWNER.get().copied()
}

/// A local file system whose new directories and files are handed to one
/// owner once written.
#[derive(Debug, Clone)]
pub(crate) struct OwnedFiles {
    inner: Arc<LocalFileSystem>,
    owner: FileOwner,
}

impl OwnedFiles {
    pub(crate) fn new(inner: LocalFileSystem, owner: FileOwner) -> Self {
        Self {
            inner: Arc::new(inner),
            owner,
        }
    }

    fn file(&self, location: &Path) -> object_store::Result<PathBuf> {
        self.inner.path_to_filesystem(location)
    }

    /// The directories above `file` that do not exist yet, deepest first:
    /// the ones the write about to happen creates.
    fn missing_parents(file: &FsPath) -> Vec<PathBuf> {
        file.ancestors()
            .skip(1)
            .take_while(|dir| !dir.as_os_str().is_empty() && !dir.exists())
            .map(FsPath::to_path_buf)
            .collect()
    }

    /// Hands `created` (outermost first) to the owner: each path this
    /// process's user still owns, inside a directory the owner owns. The
    /// destination directory is the owner's (as the operations guide sets
    /// it up), so what is created below it is handed on, and nothing above
    /// it: a destination that does not exist, or one left to root, stays
    /// as it is.
    fn hand_over(&self, created: &[PathBuf]) -> object_store::Result<()> {
        use std::os::unix::fs::MetadataExt as _;
        let me = rustix::process::geteuid().as_raw();
        for path in created {
            // A path another writer created meanwhile is the other's.
            match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.uid() == me => {}
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(ownership_error(path, e)),
            }
            let inside_owners = path
                .parent()
                .and_then(|parent| std::fs::symlink_metadata(parent).ok())
                .is_some_and(|parent| parent.is_dir() && parent.uid() == self.owner.uid);
            if !inside_owners {
                continue;
            }
            std::os::unix::fs::lchown(path, Some(self.owner.uid), Some(self.owner.gid))
                .map_err(|e| ownership_error(path, e))?;
        }
        Ok(())
    }

    /// Runs `write` to `location`, then hands over the file and the
    /// directories it created — those also when the write failed after
    /// creating them, or no later write would (they exist by then).
    async fn writing<T>(
        &self,
        location: &Path,
        write: impl Future<Output = object_store::Result<T>>,
    ) -> object_store::Result<T> {
        let file = self.file(location)?;
        let mut created = Self::missing_parents(&file);
        created.reverse();
        let written = write.await;
        if written.is_ok() {
            created.push(file);
        }
        let handed = self.hand_over(&created);
        let written = written?;
        handed?;
        Ok(written)
    }
}

fn ownership_error(path: &FsPath, source: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalFileSystem",
        source: format!(
            "handing {} to the pods' user (a file:// destination other writers share): {source}",
            path.display()
        )
        .into(),
    }
}

impl fmt::Display for OwnedFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (new files owned by {}:{})",
            self.inner, self.owner.uid, self.owner.gid
        )
    }
}

/// A multipart upload whose file is handed over once complete (its
/// directories were handed over when it started).
#[derive(Debug)]
struct OwnedUpload {
    inner: Box<dyn MultipartUpload>,
    file: PathBuf,
    store: OwnedFiles,
}

#[async_trait]
impl MultipartUpload for OwnedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let result = self.inner.complete().await?;
        self.store.hand_over(std::slice::from_ref(&self.file))?;
        Ok(result)
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[async_trait]
impl ObjectStore for OwnedFiles {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let store = self;
        store
            .writing(location, store.inner.put_opts(location, payload, opts))
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let store = self;
        let file = store.file(location)?;
        let mut created = OwnedFiles::missing_parents(&file);
        let inner = store.inner.put_multipart_opts(location, opts).await;
        // The upload's parts are staged beside the file from now on: its
        // directories are handed over before any other writer needs them
        // (and if the upload could not start, whatever it created).
        created.reverse();
        let handed = store.hand_over(&created);
        let inner = inner?;
        handed?;
        Ok(Box::new(OwnedUpload {
            inner,
            file,
            store: self.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[std::ops::Range<u64>],
    ) -> object_store::Result<Vec<bytes::Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let store = self;
        store
            .writing(to, store.inner.copy_opts(from, to, options))
            .await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        let store = self;
        store
            .writing(to, store.inner.rename_opts(from, to, options))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use object_store::ObjectStoreExt as _;

    use super::*;

    /// Run as root (as CI does), writes hand what they create to another
    /// user; the directory that existed before keeps its owner.
    #[tokio::test]
    async fn what_a_write_creates_is_handed_to_the_owner() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: handing files to another user needs root");
            return;
        }
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("destination");
        let owner = FileOwner {
            uid: 65532,
            gid: 65532,
        };
        // A destination left to root: nothing created in it is handed over.
        let root_owned = OwnedFiles::new(
            LocalFileSystem::new_with_prefix(parent.path()).unwrap(),
            owner,
        );
        root_owned
            .put(
                &Path::from("elsewhere/x.json"),
                PutPayload::from_static(b"{}"),
            )
            .await
            .unwrap();
        assert_eq!(
            std::fs::metadata(parent.path().join("elsewhere"))
                .unwrap()
                .uid(),
            0,
            "nothing above or beside a destination the owner owns is handed over"
        );
        // The destination as the operations guide sets it up.
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65532), Some(65532)).unwrap();
        let dir = tempfile::TempDir::new_in(&dir).unwrap();
        std::os::unix::fs::chown(dir.path(), Some(65532), Some(65532)).unwrap();
        let store = OwnedFiles::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap(), owner);
        let owned = |p: &FsPath| {
            let meta = std::fs::metadata(p).unwrap();
            (meta.uid(), meta.gid())
        };
        store
            .put(
                &Path::from("ns/orders/record.json"),
                PutPayload::from_static(b"{}"),
            )
            .await
            .unwrap();
        let mut upload = store
            .put_multipart(&Path::from("ns/orders/chain/base.db"))
            .await
            .unwrap();
        assert_eq!(owned(&dir.path().join("ns/orders/chain")), (65532, 65532));
        upload
            .put_part(PutPayload::from_static(b"snapshot"))
            .await
            .unwrap();
        upload.complete().await.unwrap();
        for created in [
            "ns",
            "ns/orders",
            "ns/orders/record.json",
            "ns/orders/chain",
            "ns/orders/chain/base.db",
        ] {
            assert_eq!(
                owned(&dir.path().join(created)),
                (65532, 65532),
                "{created}"
            );
        }
        assert_eq!(
            owned(dir.path()),
            (65532, 65532),
            "the destination itself keeps its owner"
        );
        // The modes are the umask's: nothing opened to others.
        let mode = std::fs::metadata(dir.path().join("ns/orders/record.json"))
            .unwrap()
            .mode();
        assert_eq!(mode & 0o022, 0, "{mode:o}");
    }
}
