//! Adopting a running etcd cluster that dkv did not create (issue #54):
//! dkv's members join it as learners, take over, and the members already
//! there leave when the user says so.
//!
//! Built so far: the checks before dkv touches such a cluster and the
//! take-over's quorum rule ([`preflight`]). Not yet reachable from the API:
//! no field of the spec asks for a join until the take-over itself is
//! built (docs/architecture.md, "Where a feature lives").

pub mod preflight;
