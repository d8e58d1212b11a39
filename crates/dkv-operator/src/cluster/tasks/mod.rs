//! The maintenance that follows the membership step of a pass, as an
//! ordered list of tasks ([`ORDER`]). Each is a module with one signature
//! — `run(&Input, &mut Maintained, &Context) -> Result<TaskOutcome>` —
//! deciding for itself whether it has anything to do this pass. A task may
//! end the pass ([`TaskOutcome::Done`]); one that has work later says when
//! ([`TaskOutcome::RequeueAt`]) and the next task runs.
//!
//! A new piece of maintenance (a rollback, a chain rotation, a corruption
//! check) is a new module here (calling into its feature's folder) and a new entry in [`ORDER`], in the place
//! its preconditions put it.

mod continuous_backup;
mod defragment;
mod disarm_corrupt;
mod enable_auth;
mod grow_volumes;
mod replay;
mod standby;
mod verify_backup;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::dereference::Observed;
use super::error::Result;
use super::membership::Step;
use super::outcome::Outcome;
use super::stage::applied::Applied;
use super::stage::connected::Connected;
use super::stage::executed::Executed;
use super::stage::planned::Planned;
use super::stage::validated::Validated;
use crate::cluster::backups::agents::Report;
use crate::cluster::context::Context;
use crate::cluster::maintenance::volumes::Volumes;

/// The maintenance tasks, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaintenanceTask {
    /// The CORRUPT alarm of a member no longer in the cluster is disarmed.
    DisarmCorrupt,
    /// Authentication goes on once the cluster has formed.
    EnableAuth,
    /// A restore from continuous backup replays the recorded changes.
    Replay,
    /// Member volumes grow to `spec.storage.size`.
    GrowVolumes,
    /// A standby follows its source.
    Standby,
    /// The continuous backup agent records.
    ContinuousBackup,
    /// A scratch cluster verifying a backup reports.
    VerifyBackup,
    /// Scheduled defragmentation.
    Defragment,
}

/// The order the tasks run in: a stale CORRUPT alarm first (while it
/// stays, etcd serves no reads or writes), authentication before anything
/// reads the data, the replay before clients are let in, verification and
/// defragmentation last, on a cluster that has all its data.
pub const ORDER: [MaintenanceTask; 8] = [
    MaintenanceTask::DisarmCorrupt,
    MaintenanceTask::EnableAuth,
    MaintenanceTask::Replay,
    MaintenanceTask::GrowVolumes,
    MaintenanceTask::Standby,
    MaintenanceTask::ContinuousBackup,
    MaintenanceTask::VerifyBackup,
    MaintenanceTask::Defragment,
];

/// What a task leaves the pass with.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskOutcome {
    /// Nothing (more) to do this pass; the next task runs.
    Continue,
    /// Nothing more to do before this moment (a scheduled run, a status
    /// refresh); the next task runs.
    RequeueAt(jiff::Timestamp),
    /// The pass ends here, with this outcome.
    Done(Outcome),
}

/// What the stages of a pass produced, as the tasks read it.
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
    /// The membership is as the spec asks: no task was due this pass.
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

/// What the tasks did that status shows; each field is written by one
/// task only.
#[derive(Default)]
pub struct Maintained {
    /// [`MaintenanceTask::GrowVolumes`]: where the member volumes stand.
    pub volumes: Option<Volumes>,
    /// [`MaintenanceTask::GrowVolumes`]: the StatefulSet, re-created with
    /// its claim template at the grown size.
    pub statefulset: Option<Arc<StatefulSet>>,
    /// [`MaintenanceTask::ContinuousBackup`]: what the agent reported.
    pub continuous: Option<Report>,
    /// [`MaintenanceTask::Standby`]: what the follower reported.
    pub standby: Option<crate::cluster::backups::standby::followers::FollowReport>,
    /// [`MaintenanceTask::Defragment`]: when a run finished this pass.
    pub defragged_at: Option<Time>,
}

/// How the tasks ended the pass.
pub enum Finished {
    /// A task ended the pass early.
    Done(Outcome),
    /// Every task ran; the earliest moment one of them has work again.
    Ran { due_at: Option<jiff::Timestamp> },
}

/// Runs the tasks of [`ORDER`] until one ends the pass.
pub async fn run(input: &Input<'_>, done: &mut Maintained, ctx: &Context) -> Result<Finished> {
    let mut due_at: Option<jiff::Timestamp> = None;
    for task in ORDER {
        let outcome = match task {
            MaintenanceTask::DisarmCorrupt => disarm_corrupt::run(input, done, ctx).await?,
            MaintenanceTask::EnableAuth => enable_auth::run(input, done, ctx).await?,
            MaintenanceTask::Replay => replay::run(input, done, ctx).await?,
            MaintenanceTask::GrowVolumes => grow_volumes::run(input, done, ctx).await?,
            MaintenanceTask::Standby => standby::run(input, done, ctx).await?,
            MaintenanceTask::ContinuousBackup => continuous_backup::run(input, done, ctx).await?,
            MaintenanceTask::VerifyBackup => verify_backup::run(input, done, ctx).await?,
            MaintenanceTask::Defragment => defragment::run(input, done, ctx).await?,
        };
        match outcome {
            TaskOutcome::Continue => {}
            TaskOutcome::RequeueAt(at) => {
                due_at = Some(due_at.map_or(at, |due| due.min(at)));
            }
            TaskOutcome::Done(outcome) => {
                tracing::debug!(?task, "maintenance task ended the pass");
                return Ok(Finished::Done(outcome));
            }
        }
    }
    Ok(Finished::Ran { due_at })
}
