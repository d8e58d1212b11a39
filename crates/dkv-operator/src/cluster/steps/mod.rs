//! The maintenance that follows the membership step of a pass, as an
//! ordered list of steps ([`ORDER`]). Each is a module with one signature
//! — `run(&Input, &mut Maintained, &Context) -> Result<StepOutcome>` —
//! deciding for itself whether it has anything to do this pass. A step may
//! end the pass ([`StepOutcome::Done`]); one that has work later says when
//! ([`StepOutcome::RequeueAt`]) and the next step runs.
//!
//! A new piece of maintenance (a rollback, a chain rotation, a corruption
//! check) is a new module here and a new entry in [`ORDER`], in the place
//! its preconditions put it.

mod continuous_backup;
mod defragment;
mod disarm_corrupt;
mod enable_auth;
mod grow_volumes;
mod replay;
mod verify_backup;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::context::Context;
use super::dereference::Observed;
use super::error::Result;
use super::membership::Step;
use super::outcome::Outcome;
use super::stage::applied::Applied;
use super::stage::connected::Connected;
use super::stage::executed::Executed;
use super::stage::planned::Planned;
use super::stage::validated::Validated;
use super::volumes::Volumes;
use crate::continuous_backup::Report;

/// The maintenance steps, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaintenanceStep {
    /// The CORRUPT alarm of a member no longer in the cluster is disarmed.
    DisarmCorrupt,
    /// Authentication goes on once the cluster has formed.
    EnableAuth,
    /// A restore from continuous backup replays the recorded changes.
    Replay,
    /// Member volumes grow to `spec.storage.size`.
    GrowVolumes,
    /// The continuous backup agent records.
    ContinuousBackup,
    /// A scratch cluster verifying a backup reports.
    VerifyBackup,
    /// Scheduled defragmentation.
    Defragment,
}

/// The order the steps run in: a stale CORRUPT alarm first (while it
/// stays, etcd serves no reads or writes), authentication before anything
/// reads the data, the replay before clients are let in, verification and
/// defragmentation last, on a cluster that has all its data.
pub const ORDER: [MaintenanceStep; 7] = [
    MaintenanceStep::DisarmCorrupt,
    MaintenanceStep::EnableAuth,
    MaintenanceStep::Replay,
    MaintenanceStep::GrowVolumes,
    MaintenanceStep::ContinuousBackup,
    MaintenanceStep::VerifyBackup,
    MaintenanceStep::Defragment,
];

/// What a step leaves the pass with.
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutcome {
    /// Nothing (more) to do this pass; the next step runs.
    Continue,
    /// Nothing more to do before this moment (a scheduled run, a status
    /// refresh); the next step runs.
    RequeueAt(jiff::Timestamp),
    /// The pass ends here, with this outcome.
    Done(Outcome),
}

/// What the stages of a pass produced, as the steps read it.
pub struct Input<'a> {
    pub observed: &'a Observed,
    pub validated: &'a Validated,
    pub connected: &'a Connected,
    pub planned: &'a Planned,
    pub applied: &'a Applied,
    pub executed: &'a Executed,
    pub now: jiff::Timestamp,
}

impl Input<'_> {
    /// The membership is as the spec asks: no step was due this pass.
    pub fn converged(&self) -> bool {
        matches!(self.planned.plan.step, Step::Converged)
    }

    /// Converged, and no operation pinned.
    pub fn idle(&self) -> bool {
        self.converged() && self.executed.operation.is_none()
    }

    /// The cluster has formed, etcd answers, and a restored cluster has all
    /// its data.
    pub fn formed(&self) -> bool {
        self.connected.admin.is_some()
            && !self.planned.plan.creating
            && self.planned.plan.replay_pending().is_none()
    }
}

/// What the steps did that status shows; each field is written by one
/// step only.
#[derive(Default)]
pub struct Maintained {
    /// [`MaintenanceStep::GrowVolumes`]: where the member volumes stand.
    pub volumes: Option<Volumes>,
    /// [`MaintenanceStep::GrowVolumes`]: the StatefulSet, re-created with
    /// its claim template at the grown size.
    pub statefulset: Option<Arc<StatefulSet>>,
    /// [`MaintenanceStep::ContinuousBackup`]: what the agent reported.
    pub continuous: Option<Report>,
    /// [`MaintenanceStep::Defragment`]: when a run finished this pass.
    pub defragged_at: Option<Time>,
}

/// How the steps ended the pass.
pub enum Finished {
    /// A step ended the pass early.
    Done(Outcome),
    /// Every step ran; the earliest moment one of them has work again.
    Ran { due_at: Option<jiff::Timestamp> },
}

/// Runs the steps of [`ORDER`] until one ends the pass.
pub async fn run(input: &Input<'_>, done: &mut Maintained, ctx: &Context) -> Result<Finished> {
    let mut due_at: Option<jiff::Timestamp> = None;
    for step in ORDER {
        let outcome = match step {
            MaintenanceStep::DisarmCorrupt => disarm_corrupt::run(input, done, ctx).await?,
            MaintenanceStep::EnableAuth => enable_auth::run(input, done, ctx).await?,
            MaintenanceStep::Replay => replay::run(input, done, ctx).await?,
            MaintenanceStep::GrowVolumes => grow_volumes::run(input, done, ctx).await?,
            MaintenanceStep::ContinuousBackup => continuous_backup::run(input, done, ctx).await?,
            MaintenanceStep::VerifyBackup => verify_backup::run(input, done, ctx).await?,
            MaintenanceStep::Defragment => defragment::run(input, done, ctx).await?,
        };
        match outcome {
            StepOutcome::Continue => {}
            StepOutcome::RequeueAt(at) => {
                due_at = Some(due_at.map_or(at, |due| due.min(at)));
            }
            StepOutcome::Done(outcome) => {
                tracing::debug!(?step, "step ended the pass");
                return Ok(Finished::Done(outcome));
            }
        }
    }
    Ok(Finished::Ran { due_at })
}
