//! `file://` backup locations: a directory on the node. The pod that writes
//! or reads one (a backup agent, a member's restore step) mounts it from
//! the node (`hostPath`), so it works with a read-only root filesystem and
//! sees the node's directory rather than its image's. The directory must be
//! writable by the pods' user (65532) for backups; on `dkv local`, the node
//! is this machine.

use k8s_openapi::api::core::v1::{HostPathVolumeSource, Volume, VolumeMount};

const VOLUME: &str = "node-directory";

/// The directory of a `file://` destination (`file:///backups/` →
/// `/backups`); `None` for other schemes.
pub fn of_destination(uri: &str) -> Option<String> {
    let path = uri.strip_prefix("file://")?;
    let trimmed = path.trim_end_matches('/');
    Some(if trimmed.is_empty() { "/" } else { trimmed }.to_owned())
}

/// The directory holding a `file://` artifact (and the record beside it).
pub fn of_artifact(uri: &str) -> Option<String> {
    let path = uri.strip_prefix("file://")?;
    let parent = std::path::Path::new(path).parent()?;
    Some(parent.display().to_string()).filter(|p| !p.is_empty())
}

/// The pod volume for `directory`; created if missing when the pod writes.
pub fn volume(directory: &str, writes: bool) -> Volume {
    Volume {
        name: VOLUME.to_owned(),
        host_path: Some(HostPathVolumeSource {
            path: directory.to_owned(),
            type_: Some(
                if writes {
                    "DirectoryOrCreate"
                } else {
                    "Directory"
                }
                .to_owned(),
            ),
        }),
        ..Volume::default()
    }
}

/// Mounted at the same path, so the URI means the same inside the pod.
pub fn mount(directory: &str, writes: bool) -> VolumeMount {
    VolumeMount {
        name: VOLUME.to_owned(),
        mount_path: directory.to_owned(),
        read_only: Some(!writes),
        ..VolumeMount::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_file_locations_need_the_nodes_directory() {
        assert_eq!(
            of_destination("file:///var/backups/").as_deref(),
            Some("/var/backups")
        );
        assert_eq!(of_destination("file:///").as_deref(), Some("/"));
        assert_eq!(of_destination("s3://bucket/prefix"), None);
        assert_eq!(
            of_artifact("file:///var/backups/shop/orders/orders-1.db").as_deref(),
            Some("/var/backups/shop/orders")
        );
        assert_eq!(of_artifact("gs://b/x.db"), None);
        let read = mount("/var/backups", false);
        assert_eq!(read.read_only, Some(true));
        let written = volume("/var/backups", true);
        assert_eq!(
            written.host_path.and_then(|h| h.type_).as_deref(),
            Some("DirectoryOrCreate")
        );
    }
}
