//! The security settings of every pod dkv creates (members, restore steps,
//! backup agents): not root, no privilege escalation, no capabilities, a
//! read-only root filesystem, the runtime's default seccomp profile. Each
//! writes only to its volumes (data, the etcd configuration); Secrets are
//! mounted read-only.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, SeccompProfile, SecurityContext,
};

/// The user and group every container runs as (the distroless "nonroot"
/// user); the group owns the volumes (`fsGroup`), so the data volume is
/// writable and the TLS Secret readable without root.
pub const RUN_AS: i64 = 65532;

fn seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        ..SeccompProfile::default()
    }
}

pub fn pod() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS),
        run_as_group: Some(RUN_AS),
        fs_group: Some(RUN_AS),
        // Ownership of a large data volume is fixed once, not on every start.
        fs_group_change_policy: Some("OnRootMismatch".to_owned()),
        seccomp_profile: Some(seccomp()),
        ..PodSecurityContext::default()
    }
}

pub fn container() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Capabilities::default()
        }),
        seccomp_profile: Some(seccomp()),
        ..SecurityContext::default()
    }
}

/// `containers` with [`container`]'s settings.
pub fn harden(containers: Vec<Container>) -> Vec<Container> {
    containers
        .into_iter()
        .map(|c| Container {
            security_context: Some(container()),
            ..c
        })
        .collect()
}
