//! Turning a verified snapshot into one member's data directory, with the
//! restore tool of the member's etcd version: `etcdutl snapshot restore`
//! from 3.5 on, `etcdctl snapshot restore` (API v3) for 3.4.
//!
//! Every member of the new cluster restores the same snapshot with its own
//! name and the new cluster's `--initial-cluster` and token, then starts
//! with `initial-cluster-state=new`; the result is a new cluster (new
//! cluster ID) holding exactly the snapshot's keys.
//!
//! The tool writes into a sibling staging directory that is renamed into
//! place only when it succeeded: a restore interrupted halfway never
//! leaves a data directory a member would start from.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::error::{Error, Result};

/// The program that restores snapshots for one etcd version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreTool {
    /// etcd 3.5 and later.
    Etcdutl(PathBuf),
    /// etcd 3.4 (its etcdctl restores; etcdutl did not exist yet).
    Etcdctl(PathBuf),
}

impl RestoreTool {
    /// The tool for etcd `version` (`3.5.16`, `v3.4.23`, `3.5.16-0`) in
    /// `bin_dir` (where the etcd image or package keeps its binaries).
    pub fn for_version(version: &str, bin_dir: &Path) -> Result<Self> {
        let text = version.trim().trim_start_matches('v');
        let mut parts = text.split(['.', '-', '+']);
        let major: Option<u32> = parts.next().and_then(|p| p.parse().ok());
        let minor: Option<u32> = parts.next().and_then(|p| p.parse().ok());
        match (major, minor) {
            (Some(3), Some(4)) => Ok(Self::Etcdctl(bin_dir.join("etcdctl"))),
            (Some(3), Some(minor)) if minor >= 5 => Ok(Self::Etcdutl(bin_dir.join("etcdutl"))),
            _ => Err(Error::InvalidArgument(format!(
                "cannot restore for etcd version {version:?}: dkv restores 3.4 and later"
            ))),
        }
    }

    pub fn program(&self) -> &Path {
        match self {
            Self::Etcdutl(p) | Self::Etcdctl(p) => p,
        }
    }

    /// The program's name, for running it from the `PATH` of an etcd image.
    pub fn file_name(&self) -> &'static str {
        match self {
            Self::Etcdutl(_) => "etcdutl",
            Self::Etcdctl(_) => "etcdctl",
        }
    }

    /// Environment the tool needs: etcdctl of 3.4 restores only through
    /// its v3 API.
    pub fn env(&self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Etcdutl(_) => None,
            Self::Etcdctl(_) => Some(("ETCDCTL_API", "3")),
        }
    }
}

/// One member's restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRestore {
    /// A verified snapshot ([`crate::fetch_artifact`]).
    pub snapshot: PathBuf,
    /// This member's name, as in `initial_cluster`.
    pub name: String,
    /// `name=peerURL,...` of every member of the new cluster.
    pub initial_cluster: String,
    /// This member's peer URL(s), comma-separated.
    pub initial_advertise_peer_urls: String,
    /// The new cluster's token: a restored cluster must not be mistaken
    /// for the one the snapshot came from.
    pub initial_cluster_token: String,
    /// The member's data directory; must not exist or be empty. Not a
    /// volume's mount point itself (it is replaced by a rename).
    pub data_dir: PathBuf,
    /// Revisions to add to the snapshot's, marking every revision below
    /// the result compacted (etcdutl 3.5.10 and later): a client that
    /// resumes a watch from a revision of the source cluster is told its
    /// revision was compacted, and relists, instead of missing changes or
    /// seeing revisions it already saw with other contents.
    pub revision_bump: Option<i64>,
    /// The snapshot's own sha256 (the one etcd appends) was checked when it
    /// was fetched ([`crate::fetch_artifact`] does): the tool skips its
    /// check, which reads the whole file once more (0.7 of 1.8 s of
    /// `etcdutl snapshot restore` for a 1.3 GB snapshot).
    pub snapshot_checked: bool,
}

impl MemberRestore {
    /// Arguments of the restore tool that writes this member's data into
    /// `into` (which must not exist).
    pub fn tool_args(&self, into: &Path) -> Vec<String> {
        vec![
            "snapshot".to_owned(),
            "restore".to_owned(),
            self.snapshot.display().to_string(),
            format!("--name={}", self.name),
            format!("--initial-cluster={}", self.initial_cluster),
            format!(
                "--initial-advertise-peer-urls={}",
                self.initial_advertise_peer_urls
            ),
            format!("--initial-cluster-token={}", self.initial_cluster_token),
            format!("--data-dir={}", into.display()),
        ]
        .into_iter()
        .chain(
            self.snapshot_checked
                .then(|| "--skip-hash-check".to_owned()),
        )
        .chain(self.revision_bump.into_iter().flat_map(|bump| {
            [
                format!("--bump-revision={bump}"),
                "--mark-compacted".to_owned(),
            ]
        }))
        .collect()
    }
}

/// Runs the restore for one member. Fails without touching `data_dir` if it
/// already holds data.
pub async fn restore_member(tool: &RestoreTool, member: &MemberRestore) -> Result<()> {
    let data_dir = &member.data_dir;
    if has_entries(data_dir).await? {
        return Err(Error::InvalidArgument(format!(
            "{} already holds data; refusing to restore over a member's data",
            data_dir.display()
        )));
    }
    let staging = staging_dir(data_dir)?;
    if tokio::fs::try_exists(&staging)
        .await
        .map_err(Error::io("checking", &staging))?
    {
        // Left by an interrupted attempt: never started from, safe to drop.
        tokio::fs::remove_dir_all(&staging)
            .await
            .map_err(Error::io("removing the stale staging directory", &staging))?;
    }
    if let Some(parent) = staging.parent().filter(|p| !p.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(Error::io("creating", parent))?;
    }

    let program = tool.program();
    let mut command = tokio::process::Command::new(program);
    if let Some((name, value)) = tool.env() {
        command.env(name, value);
    }
    command
        .args(member.tool_args(&staging))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = command
        .output()
        .await
        .map_err(Error::io("running", program))?;
    if !output.status.success() {
        let _ = tokio::fs::remove_dir_all(&staging).await;
        return Err(Error::RestoreTool {
            tool: program.display().to_string(),
            status: output.status.to_string(),
            stderr: last_lines(&output.stderr, 20),
        });
    }
    if tokio::fs::try_exists(data_dir)
        .await
        .map_err(Error::io("checking", data_dir))?
    {
        // Empty (checked above); rename needs it gone.
        tokio::fs::remove_dir(data_dir)
            .await
            .map_err(Error::io("replacing the empty data directory", data_dir))?;
    }
    tokio::fs::rename(&staging, data_dir)
        .await
        .map_err(Error::io(
            "moving the restored data into place at",
            data_dir,
        ))?;
    tracing::info!(member = %member.name, data_dir = %data_dir.display(), tool = %program.display(), "member restored from snapshot");
    Ok(())
}

async fn has_entries(dir: &Path) -> Result<bool> {
    match tokio::fs::read_dir(dir).await {
        Ok(mut entries) => Ok(entries
            .next_entry()
            .await
            .map_err(Error::io("reading", dir))?
            .is_some()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(cause) => Err(Error::Io {
            operation: "reading",
            path: dir.to_path_buf(),
            cause,
        }),
    }
}

fn staging_dir(data_dir: &Path) -> Result<PathBuf> {
    let name = data_dir.file_name().ok_or_else(|| {
        Error::InvalidArgument(format!("{} names no directory", data_dir.display()))
    })?;
    let mut staging = name.to_os_string();
    staging.push(".restoring");
    Ok(data_dir.with_file_name(staging))
}

fn last_lines(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_follows_the_version() {
        let bin = Path::new("/opt/etcd");
        for (version, tool) in [
            ("3.4.23", RestoreTool::Etcdctl(bin.join("etcdctl"))),
            ("v3.4.0", RestoreTool::Etcdctl(bin.join("etcdctl"))),
            ("3.5.16", RestoreTool::Etcdutl(bin.join("etcdutl"))),
            ("3.5.16-0", RestoreTool::Etcdutl(bin.join("etcdutl"))),
            ("3.6.1", RestoreTool::Etcdutl(bin.join("etcdutl"))),
        ] {
            assert_eq!(
                RestoreTool::for_version(version, bin).unwrap(),
                tool,
                "{version}"
            );
        }
        for version in ["3.3.25", "2.3.8", "latest", ""] {
            assert!(RestoreTool::for_version(version, bin).is_err(), "{version}");
        }
    }

    #[test]
    fn a_checked_snapshot_is_not_hashed_again() {
        let dir = Path::new("/data/restore");
        let unchecked = request(dir).tool_args(dir);
        assert!(!unchecked.contains(&"--skip-hash-check".to_owned()));
        let checked = MemberRestore {
            snapshot_checked: true,
            ..request(dir)
        }
        .tool_args(dir);
        assert!(checked.contains(&"--skip-hash-check".to_owned()));
    }

    #[test]
    fn a_bump_moves_revisions_up_and_marks_the_rest_compacted() {
        let dir = Path::new("/data/restore");
        let plain = request(dir).tool_args(dir);
        assert!(!plain.iter().any(|a| a.starts_with("--bump-revision")));
        let bumped = MemberRestore {
            revision_bump: Some(1_000_000_000),
            ..request(dir)
        }
        .tool_args(dir);
        assert_eq!(
            bumped[bumped.len() - 2..],
            ["--bump-revision=1000000000", "--mark-compacted"]
        );
    }

    fn request(dir: &Path) -> MemberRestore {
        MemberRestore {
            snapshot: dir.join("snapshot.db"),
            name: "m0".to_owned(),
            initial_cluster: "m0=http://127.0.0.1:2380".to_owned(),
            initial_advertise_peer_urls: "http://127.0.0.1:2380".to_owned(),
            initial_cluster_token: "t".to_owned(),
            data_dir: dir.join("data"),
            revision_bump: None,
            snapshot_checked: false,
        }
    }

    #[tokio::test]
    async fn refuses_to_restore_over_existing_data() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data/member")).unwrap();
        let tool = RestoreTool::Etcdutl(PathBuf::from("/nonexistent/etcdutl"));
        let err = restore_member(&tool, &request(dir.path()))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("already holds data"), "{err}");
        assert!(dir.path().join("data/member").exists());
    }

    #[tokio::test]
    async fn a_failing_tool_leaves_no_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        // `false` exits 1 whatever its arguments: a tool that failed.
        let tool = RestoreTool::Etcdutl(PathBuf::from("/bin/false"));
        let err = restore_member(&tool, &request(dir.path()))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::RestoreTool { .. }), "{err}");
        assert!(!dir.path().join("data").exists());
        assert!(!dir.path().join("data.restoring").exists());
    }
}
