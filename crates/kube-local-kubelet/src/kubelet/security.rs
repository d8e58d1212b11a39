//! A container's security context, enforced on its process (when the kubelet
//! runs as root and [`super::KubeletConfig::enforce_security_context`] is on):
//! the user, group and supplementary groups it runs as, `runAsNonRoot`,
//! no new privileges, no capabilities, a read-only root filesystem, and the
//! pod's `fsGroup` on the volumes it writes to, as upstream's kubelet and
//! runtime apply them.
//!
//! Images here are host programs, whose "image user" is root: as upstream
//! for a root image, `runAsNonRoot` without a non-zero `runAsUser` refuses
//! to start the container.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};

/// Who the process runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups: `fsGroup` and `supplementalGroups`.
    pub groups: Vec<u32>,
}

/// What the sandbox enforces on one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enforced {
    /// `None`: root, as the image would run.
    pub identity: Option<Identity>,
    pub read_only_root: bool,
    pub no_new_privileges: bool,
    /// `capabilities.drop` contains `ALL`.
    pub drop_all_capabilities: bool,
}

fn to_id(value: i64, field: &str) -> Result<u32, String> {
    u32::try_from(value).map_err(|_| format!("{field} {value} is not a valid id"))
}

/// The effective settings of `container` in a pod with `spec` (container
/// fields override the pod's); an error is the container's
/// `CreateContainerConfigError` message.
pub fn resolve(spec: &PodSpec, container: &Container, pod: &str) -> Result<Enforced, String> {
    let pod_ctx = spec.security_context.as_ref();
    let ctx = container.security_context.as_ref();
    let run_as_user = ctx
        .and_then(|c| c.run_as_user)
        .or_else(|| pod_ctx.and_then(|p| p.run_as_user));
    let run_as_group = ctx
        .and_then(|c| c.run_as_group)
        .or_else(|| pod_ctx.and_then(|p| p.run_as_group));
    let non_root = ctx
        .and_then(|c| c.run_as_non_root)
        .or_else(|| pod_ctx.and_then(|p| p.run_as_non_root))
        == Some(true);
    if non_root && run_as_user.unwrap_or(0) == 0 {
        return Err(format!(
            "container has runAsNonRoot and image will run as root (pod: \"{pod}\", container: {})",
            container.name
        ));
    }
    let mut groups = Vec::new();
    if let Some(fs_group) = fs_group(spec) {
        groups.push(fs_group);
    }
    for g in pod_ctx
        .and_then(|p| p.supplemental_groups.as_deref())
        .unwrap_or_default()
    {
        groups.push(to_id(*g, "supplementalGroups")?);
    }
    let identity = match (run_as_user, run_as_group) {
        (None, None) if groups.is_empty() => None,
        (user, group) => Some(Identity {
            uid: to_id(user.unwrap_or(0), "runAsUser")?,
            gid: to_id(group.unwrap_or(0), "runAsGroup")?,
            groups,
        }),
    };
    Ok(Enforced {
        identity,
        read_only_root: ctx.and_then(|c| c.read_only_root_filesystem) == Some(true),
        no_new_privileges: ctx.and_then(|c| c.allow_privilege_escalation) == Some(false),
        drop_all_capabilities: ctx
            .and_then(|c| c.capabilities.as_ref())
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|d| d.iter().any(|c| c == "ALL")),
    })
}

/// The pod's `fsGroup`, if it is a valid id.
pub fn fs_group(spec: &PodSpec) -> Option<u32> {
    spec.security_context
        .as_ref()
        .and_then(|p| p.fs_group)
        .and_then(|g| u32::try_from(g).ok())
}

/// Gives a volume's files to `fs_group` as upstream's volume ownership
/// management does: group-owned, group-writable where the owner may write
/// (writable volumes), directories set-group-id so that new files join the
/// group. `OnRootMismatch` skips a volume whose root already has the group
/// and permissions. Host paths are left alone, as upstream leaves them.
pub fn apply_fs_group(volume: &Volume, path: &Path, fs_group: u32) -> std::io::Result<()> {
    if volume.host_path.is_some() {
        return Ok(());
    }
    let writable = volume.empty_dir.is_some() || volume.persistent_volume_claim.is_some();
    let root = std::fs::metadata(path)?;
    let settled = root.gid() == fs_group && root.mode() & 0o2070 == 0o2070;
    if writable && settled {
        return Ok(());
    }
    walk(path, &mut |p, meta| {
        std::os::unix::fs::chown(p, None, Some(fs_group))?;
        let mut mode = meta.mode() & 0o7777;
        if writable {
            // The group gets what the owner has (rw, and x where the owner has it).
            mode |= (mode & 0o700) >> 3;
        }
        if meta.is_dir() {
            mode |= 0o2000 | 0o050;
        }
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
    })
}

fn walk(
    path: &Path,
    f: &mut impl FnMut(&Path, &std::fs::Metadata) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    f(path, &meta)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            walk(&entry?.path(), f)?;
        }
    }
    Ok(())
}

/// The `exec` line of the sandbox script: `program` as `enforced` says.
pub fn exec_prefix(enforced: &Enforced) -> String {
    let mut prefix = String::new();
    if let Some(id) = &enforced.identity {
        let groups = if id.groups.is_empty() {
            "--clear-groups".to_owned()
        } else {
            format!(
                "--groups={}",
                id.groups
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        // The parent-death signal is reset by the credential change: set again.
        prefix.push_str(&format!(
            "setpriv --reuid={} --regid={} {groups} --pdeathsig=KILL ",
            id.uid, id.gid
        ));
        if enforced.no_new_privileges {
            prefix.push_str("--no-new-privs ");
        }
        if enforced.drop_all_capabilities {
            prefix.push_str("--inh-caps=-all --bounding-set=-all ");
        }
        prefix.push_str("-- ");
    } else if enforced.no_new_privileges || enforced.drop_all_capabilities {
        prefix.push_str("setpriv ");
        if enforced.no_new_privileges {
            prefix.push_str("--no-new-privs ");
        }
        if enforced.drop_all_capabilities {
            prefix.push_str("--inh-caps=-all --bounding-set=-all ");
        }
        prefix.push_str("-- ");
    }
    prefix
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Capabilities, PodSecurityContext, SecurityContext};

    fn hardened() -> (PodSpec, Container) {
        let spec = PodSpec {
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(65532),
                run_as_group: Some(65532),
                fs_group: Some(65532),
                ..PodSecurityContext::default()
            }),
            ..PodSpec::default()
        };
        let container = Container {
            name: "etcd".into(),
            security_context: Some(SecurityContext {
                read_only_root_filesystem: Some(true),
                allow_privilege_escalation: Some(false),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    ..Capabilities::default()
                }),
                ..SecurityContext::default()
            }),
            ..Container::default()
        };
        (spec, container)
    }

    #[test]
    fn container_settings_override_the_pods_and_root_is_refused_to_non_root_pods() {
        let (spec, container) = hardened();
        let enforced = resolve(&spec, &container, "p").unwrap_or_default();
        assert_eq!(
            enforced.identity,
            Some(Identity {
                uid: 65532,
                gid: 65532,
                groups: vec![65532]
            })
        );
        assert!(enforced.read_only_root && enforced.no_new_privileges);
        assert!(exec_prefix(&enforced).starts_with(
            "setpriv --reuid=65532 --regid=65532 --groups=65532 --pdeathsig=KILL --no-new-privs"
        ));

        let mut as_root = container.clone();
        as_root.security_context = Some(SecurityContext {
            run_as_user: Some(0),
            ..SecurityContext::default()
        });
        let refused = resolve(&spec, &as_root, "p").err().unwrap_or_default();
        assert!(
            refused.contains("runAsNonRoot and image will run as root"),
            "{refused}"
        );

        let plain = resolve(&PodSpec::default(), &Container::default(), "p").unwrap_or_default();
        assert_eq!(plain, Enforced::default());
        assert_eq!(exec_prefix(&plain), "");
    }
}
