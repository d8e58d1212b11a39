//! Files and directories only their owner may read: the data directory of an environment, its keys, its store and
//! its kubeconfig hold every Secret of the cluster and the admin's credentials.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

/// Mode of a private directory: its owner may list and enter it, nobody else.
pub const DIR_MODE: u32 = 0o700;
/// Mode of a private file.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` (and missing parents) as a private directory, or makes an existing one private.
pub fn create_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    // An existing directory keeps its mode through `create`; a directory made before this release was 0755.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
}

/// Writes `contents` to `path` readable and writable by its owner only, replacing what was there at once: written
/// to a new private file beside it, synced, then renamed over it, so a crash leaves the old contents or the new,
/// never a torn file.
pub fn write(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let temporary = path.with_file_name(name);
    let _ = std::fs::remove_file(&temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(&temporary)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)
}

/// Opens `path` for writing, private: created with mode 0600, or an existing file set to it. `append` keeps what
/// the file holds and writes after it; otherwise the file is truncated.
pub fn open(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.create(true).mode(FILE_MODE);
    if append {
        options.append(true);
    } else {
        options.write(true).truncate(true);
    }
    let file = options.open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .map(|m| m.mode() & 0o777)
            .unwrap_or(0)
    }

    #[test]
    fn directories_and_files_are_made_private_new_or_existing() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let dir = root.path().join("a/b");
        create_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mode(&dir), 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        create_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mode(&dir), 0o700, "an existing directory is made private");

        let file = dir.join("kubeconfig");
        std::fs::write(&file, "old").unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
            .unwrap_or_else(|e| panic!("{e}"));
        write(&file, b"new").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mode(&file), 0o600);
        assert_eq!(std::fs::read(&file).unwrap_or_default(), b"new");
    }
}
