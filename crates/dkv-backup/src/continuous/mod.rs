//! Continuous backup: between full snapshots, every change of the cluster as
//! a chain of compressed segments, so that a restore can go to any revision
//! or time the chain covers (point-in-time restore).
//!
//! - [`segment`]: the stored form of a run of events (format, encoding,
//!   checks) and its object name.
//! - [`chain`]: from the listing of a destination, the chains, the
//!   recoverable window and the plan of a restore to a point (pure).
//! - [`archive`]: segments stored in, and chains read back from, object
//!   storage.
//! - [`cutter`]: watched events cut into a chain's segments by interval or
//!   size (pure: the agent feeds it and stores what it seals).
//! - [`recorder`]: the agent's loop: watch, cut, store.
//! - [`agent`]: one cluster's agent: resume the newest chain or start one
//!   from a full snapshot, record, start over after a compaction gap.
//! - [`replay`]: a plan's segments written into a restored cluster.
//! - [`retention`]: which whole chains have expired, and deleting them.
//! - [`rotation`]: when a chain ends and the next starts from a fresh full
//!   snapshot (by age, or by its changes against its base).
//!
//! Layout under a cluster's backup prefix:
//!
//! ```text
//! <prefix>/<namespace>/<cluster>/continuous/<chain>/<sequence>-<after>-<last>.jsonl.zst
//! ```
//!
//! where `<chain>` names the full snapshot the chain continues.

pub mod agent;
pub mod archive;
pub mod chain;
pub mod cutter;
pub mod recorder;
pub mod replay;
pub mod retention;
pub mod rotation;
pub mod segment;
