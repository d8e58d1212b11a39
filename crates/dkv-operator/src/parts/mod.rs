//! Parts of what dkv builds and reads that more than one controller uses:
//! the names of a cluster's objects, its TLS settings and where pods find
//! the certificates, hardened pods, node directories, the backup encryption
//! keys, the root credentials as agents use them, the backup agent's pod,
//! the one writer of a backup record's status and the retention policy of
//! `spec.backup`. The cluster controller
//! ([`crate::cluster`]) and the backup controllers ([`crate::backup`])
//! build from them; nothing here imports either controller.

pub mod backup_agent;
pub mod backup_keys;
pub mod backup_status;
pub mod credentials;
pub mod hardening;
pub mod naming;
pub mod node_directory;
pub mod retention;
pub mod tls;
