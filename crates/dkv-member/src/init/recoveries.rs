//! What a recovery asks of the member's volume: a quorum recovery's epoch (the survivor forced once, data that
//! predates it set aside), and the data a restore from backup staged beside the data directory.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::record::{ClusterState, MembershipRecord};

/// Epochs of recoveries that recreate the cluster from a backup start with
/// this: during one, a member only ever starts from the restored data.
pub const RESTORE_EPOCH_PREFIX: &str = "restore-";

/// What a quorum recovery asks of this member (see
/// [`MembershipRecord::epoch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Nothing: no recovery concerns this member's data.
    None,
    /// This member is the survivor and has not yet restarted alone under the
    /// record's epoch: start once with `--force-new-cluster`.
    ForceNewCluster { epoch: String },
    /// The data predates the recovery: move it aside and start without it.
    StaleData { epoch: String },
}

/// The epoch marker lives beside the data directory, on the same volume.
pub(super) fn epoch_file(data_dir: &Path) -> PathBuf {
    data_dir.with_file_name("dkv-epoch")
}

/// Decides what a recovery recorded in `record` means for this member.
pub fn recovery(
    member: &str,
    has_data: bool,
    data_epoch: Option<&str>,
    record: Option<&MembershipRecord>,
) -> Recovery {
    let Some(epoch) = record.and_then(|r| r.epoch.as_deref()) else {
        return Recovery::None;
    };
    if !has_data || data_epoch == Some(epoch) {
        return Recovery::None;
    }
    if record.and_then(|r| r.recover_from.as_deref()) == Some(member) {
        Recovery::ForceNewCluster {
            epoch: epoch.to_owned(),
        }
    } else {
        Recovery::StaleData {
            epoch: epoch.to_owned(),
        }
    }
}

/// The note of the replacement this volume's data was written for lives
/// beside the data directory, on the same volume.
pub(super) fn replacement_file(data_dir: &Path) -> PathBuf {
    data_dir.with_file_name("dkv-replacement")
}

/// What a replacement of this member (see
/// [`crate::record::RecordedMember::replacement`]) asks
/// of its volume: data from before the replacement is moved aside, never
/// deleted (it may be the only copy of something), and the replacement is
/// noted, so that the data the new member then writes stays on later
/// starts. The replacement's token, while there is one.
pub(super) fn set_aside_for_replacement(
    member: &str,
    data_dir: &Path,
    record: Option<&MembershipRecord>,
) -> anyhow::Result<Option<String>> {
    let Some(token) = record
        .and_then(|r| r.member(member))
        .and_then(|m| m.replacement.as_deref())
    else {
        return Ok(None);
    };
    let marker = replacement_file(data_dir);
    let noted = std::fs::read_to_string(&marker).ok();
    if noted.as_deref().map(str::trim) != Some(token) {
        if data_dir.join("member").is_dir() {
            let aside = data_dir.with_file_name(format!("data.before-{token}"));
            std::fs::rename(data_dir, &aside).with_context(|| {
                format!(
                    "moving {member}'s data from before replacement {token} aside to {}",
                    aside.display()
                )
            })?;
            eprintln!(
                "member-init: {member} is being replaced ({token}); its data was moved to {} and it joins without it",
                aside.display()
            );
        }
        std::fs::write(&marker, token).with_context(|| format!("writing {}", marker.display()))?;
    }
    Ok(Some(token.to_owned()))
}

/// Where the restore steps of a cluster created from a backup leave their
/// work, beside the data directory on the same volume (see
/// `dkv restore-fetch` and the restore tool, [`crate::layout`]).
pub fn restore_dir(data_dir: &Path) -> PathBuf {
    data_dir.with_file_name("dkv-restore")
}

/// Takes the data directory the restore steps staged, if there is one: it
/// becomes the member's data only when the member has none (a member that
/// already started keeps what it has). Once the cluster exists, the
/// restore's leftovers (the snapshot) are removed.
pub(super) fn adopt_restored_data(
    member: &str,
    data_dir: &Path,
    record: Option<&MembershipRecord>,
) -> anyhow::Result<()> {
    let work = restore_dir(data_dir);
    let staged = work.join("data");
    if staged.join("member").is_dir() {
        if data_dir.join("member").is_dir() {
            std::fs::remove_dir_all(&staged)
                .with_context(|| format!("removing {}", staged.display()))?;
            eprintln!("member-init: {member} already has data; the restored copy is not used");
        } else {
            if data_dir.exists() {
                // No etcd data in it (checked above): set aside, never lost.
                let aside = data_dir.with_file_name("data.before-restore");
                std::fs::rename(data_dir, &aside).with_context(|| {
                    format!("moving {} aside to {}", data_dir.display(), aside.display())
                })?;
            }
            std::fs::rename(&staged, data_dir).with_context(|| {
                format!(
                    "moving the restored data {} to {}",
                    staged.display(),
                    data_dir.display()
                )
            })?;
            eprintln!(
                "member-init: {member} starts from the restored backup ({})",
                data_dir.display()
            );
        }
    }
    if record.is_some_and(|r| r.state == ClusterState::Existing) && work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    Ok(())
}
