//! Where things are in a member pod: the volumes the operator mounts and
//! the files the member side reads and writes in them. Part of the
//! contract ([`crate::contract`]): a path that moves is a new version of
//! it, since the members of the build before keep reading the old one.

/// The container that runs etcd in a member pod.
pub const MEMBER_CONTAINER: &str = "etcd";

/// The member's volume (its claim template is `data`).
pub const DATA_MOUNT: &str = "/var/lib/etcd";
/// etcd's data directory: a subdirectory of the volume, because a fresh
/// filesystem's root may hold `lost+found`, which etcd refuses as a data dir.
pub const DATA_DIR: &str = "/var/lib/etcd/data";
/// The volume `member-init` writes etcd's configuration into.
pub const CONFIG_MOUNT: &str = "/var/run/dkv";
/// etcd's configuration file, written by `member-init`.
pub const CONFIG_FILE: &str = "/var/run/dkv/etcd.conf.yml";
/// Where the membership record's ConfigMap is mounted.
pub const MEMBERS_MOUNT: &str = "/etc/dkv/members";

/// Working directory of the restore steps, in the member's volume beside
/// the data directory.
pub const RESTORE_DIR: &str = "/var/lib/etcd/dkv-restore";
/// The snapshot `restore-fetch` verified.
pub const SNAPSHOT_FILE: &str = "/var/lib/etcd/dkv-restore/snapshot.db";
/// Where the restore tool writes the member's data directory; `member-init`
/// moves it into place.
pub const STAGING_DIR: &str = "/var/lib/etcd/dkv-restore/data";

/// Where a member pod mounts its certificate when one serves both
/// transports.
pub const MEMBER_TLS_DIR: &str = "/etc/dkv/tls/member";
/// Where a member pod mounts each certificate when peers and clients have
/// their own.
pub const PEER_TLS_DIR: &str = "/etc/dkv/tls/peer";
pub const SERVER_TLS_DIR: &str = "/etc/dkv/tls/server";
/// The files of every mounted certificate.
pub const CA_CERT: &str = "ca.crt";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
