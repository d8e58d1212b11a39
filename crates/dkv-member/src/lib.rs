//! The member side of dkv: what the operator's image runs inside member
//! pods, beside etcd. `dkv member-init` (the init container of every
//! member, which writes etcd's configuration and decides how the member
//! starts) and the restore steps (`dkv restore-fetch`, `dkv
//! restore-member`) of a cluster created from a backup.
//!
//! A member keeps the image it started with until it restarts, so members
//! run this code from an older build than the operator's for as long as a
//! member-side rollout takes (`--member-upgrades-per-minute`), and longer
//! when the rollout waits. Two things follow:
//!
//! - This crate holds everything that code uses, and nothing of the
//!   operator: dkv-operator's `build.rs` hashes this crate, the workspace
//!   crates it depends on and their dependencies' versions, and a new hash
//!   rolls the member side out. A member-side change outside this set
//!   would never roll out.
//! - What the operator hands members (the membership record, member-init's
//!   arguments, the file layout in the pod) and what members report back
//!   (termination messages) is a versioned contract ([`contract`]), with
//!   golden fixtures of every released format (`tests/contract/`).

pub mod contract;
pub mod etcd_flags;
pub mod etcd_version;
pub mod init;
pub mod layout;
pub mod logging;
pub mod message;
pub mod naming;
pub mod record;
pub mod report;
pub mod restore;
pub mod store_args;

use clap::Subcommand;

/// The member side's subcommands of the `dkv` binary.
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once per process, then run"
)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Prepare one etcd member's configuration (init container of each member pod).
    MemberInit(init::MemberInitArgs),
    /// Download a backup artifact and verify its sha256 (restore init step).
    RestoreFetch(restore::RestoreFetchArgs),
    /// Turn a verified snapshot into this member's data directory with the
    /// etcd version's restore tool (restore init step, after restore-fetch).
    RestoreMember(restore::RestoreMemberArgs),
}

/// Runs a member-side subcommand.
pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::MemberInit(args) => init::run(&args),
        Command::RestoreFetch(args) => restore::fetch(&args).await,
        Command::RestoreMember(args) => restore::restore_member(&args).await,
    }
}
