//! Adopting a running etcd cluster that dkv did not create (issue #54):
//! dkv's members join it as learners, take over, and the members already
//! there leave when the user says so.
//!
//! Built so far, as pure decisions with their unit tests: the checks before
//! dkv touches such a cluster and the take-over's quorum rule
//! ([`preflight`]), and the take-over's one next step, including backing
//! out ([`takeover`]). Not yet reachable from the API: no field of the
//! spec asks for a join until the passes that carry these steps out, the
//! members' start beside the old ones and the status are built
//! (docs/architecture.md, "Where a feature lives").

pub mod preflight;
pub mod takeover;
