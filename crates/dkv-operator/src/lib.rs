//! dkv: a Kubernetes operator that runs replicated etcd clusters
//! (`DistributedKV`) and keeps them safe through their whole life.
//!
//! The binary `dkv` has one subcommand per role ([`cli::Command`]); this
//! library holds them so integration tests can run the same code in-process.
//! The roles that run in member pods (`member-init`, the restore steps) are
//! the member side's, in the `dkv-member` crate.

// Short functions where logic lives: at most 150 lines of code each
// (clippy.toml); a data table that must be longer says so where it stands.
#![warn(clippy::too_many_lines)]

pub mod backoff;
pub mod backup;
pub mod backup_agent;
pub mod cache;
pub mod cli;
pub mod cluster;
pub mod crd;
pub mod etcd_version;
pub mod events;
pub mod leader;
#[cfg(feature = "local")]
pub mod local;
pub mod metrics;
pub mod operator;
pub mod parts;
pub mod pki;
pub mod quantity;
pub mod secret_store;
pub mod server;
pub mod tls_serving;
pub mod webhook;
