//! The contract between the operator and the member side, and its version.
//!
//! A member runs the member side of the build that started it, while the
//! operator may be a newer build (until the member-side rollout reaches the
//! member) or an older one (an operator rolled back). What crosses between
//! them:
//!
//! | from | to | what | where |
//! |---|---|---|---|
//! | operator | `member-init` | the membership record | [`crate::record`], a ConfigMap mounted at [`crate::layout::MEMBERS_MOUNT`] |
//! | operator | `member-init`, restore steps | arguments and environment | the pod template |
//! | operator | member side | the file layout in the pod | [`crate::layout`] |
//! | `member-init` | operator | how the member started, or why it refused | termination messages ([`crate::message::InitMessage`]) |
//! | `member-init` | `member-init` of a later build | markers beside the data directory | the epoch and replacement files, data set aside ([`crate::init`]) |
//!
//! The arguments travel with the image that reads them: a template the
//! operator changes gets the operator's own image, and a template kept for
//! a member-side rollout that waits for its turn is kept whole, image
//! included. The record does not: the operator of the day writes it and
//! whichever member side runs reads it, so it carries the version it was
//! written in ([`crate::record::MembershipRecord::contract`]).
//!
//! The rules:
//! - the member side reads every format of every version up to its own;
//!   a record of a newer version is read for what this version knows;
//! - a change a member of the version before would misread (a field it
//!   would ignore while it matters, a path that moves, a message it does
//!   not write) is a new version, and the operator may use it only once
//!   every member runs a member side of that version (the first such change
//!   adds the version to the members' template, where the operator reads
//!   it);
//! - each released format is a golden fixture in `tests/contract/`:
//!   `record/` (the membership record), `args/` (member-init's arguments
//!   for one sample cluster), `messages/` (member-init's termination
//!   messages) and `statefulset/` (the annotations the operator writes on
//!   the members' StatefulSet and reads back on its next pass, whichever
//!   build wrote them). This crate's tests read every one as the member
//!   side; the operator's (`cluster::member_contract`) read what members
//!   and earlier operators wrote, and check that what this build writes is
//!   the newest fixture, so a format change fails until its fixture is
//!   added.
//!
//! Versions:
//! - 1: every format since the record was introduced. Fields added before
//!   versioning (`epoch` and `recoverFrom` on 2026-11-22, a member's
//!   `replacement` on 2026-11-27) are in every build since; a record
//!   without `contract` is version 1.

/// The contract this build speaks.
pub const VERSION: u32 = 1;

/// The version of a record that names none.
pub const UNVERSIONED: u32 = 1;
