//! Adopting a running etcd cluster that dkv did not create (issue #54):
//! dkv's members join it as learners, take over, and the members already
//! there leave when the user says so.
//!
//! The checks before dkv touches such a cluster and the take-over's quorum
//! rule ([`preflight`]), the take-over's one next step, including backing
//! out ([`takeover`]), both pure, and the passes that carry them out
//! ([`drive`]): while a cluster with `spec.bootstrap.join` is not yet
//! adopted, the pipeline's driver plans and executes through [`drive`]
//! instead of the membership planner, which knows only dkv's members.

pub mod drive;
pub mod preflight;
pub mod takeover;
