//! How a pass of the cluster reconcile ended, and the one place that decides
//! what follows from it: when to look again, what status shows of an error,
//! and which errors become Events.
//!
//! A pass ends in an [`Outcome`] or an [`Error`]. Either way the status is
//! derived afterwards from what the pass observed ([`super::status::derive`]);
//! an error adds its [`Fault`] on top. Requeueing follows the outcome
//! ([`next_action`]) or the error's category ([`retry_delay`]).

use std::time::Duration;

use crate::events::{Event, EventType};
use dkv_api::DistributedKV;
use dkv_api::conditions::reasons;
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tracing::warn;

use super::error::{Category, Error, WAITING_DELAY};
use super::lifecycle::hibernation::State as HibernationState;
use super::membership::Step;
use super::recovery::lost_node;
use super::security::certificates::TlsState;
use super::stage::connected::Connected;
use super::stage::executed::Executed;
use super::stage::planned::Planned;
use super::stage::validated::Validated;
use crate::backoff::backoff_delay;
use crate::cluster::context::{self, Context};
use crate::cluster::security::certificates;

/// How a pass that did not fail ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The cluster is paused: status was refreshed, nothing changed.
    Paused,
    /// A new operation was pinned in status; its first step runs at the
    /// next look, so that a crash or a spec edit resumes it.
    Pinned,
    /// etcd authentication was switched on.
    AuthEnabled,
    /// The pass applied what the plan asked for.
    Applied(AppliedPass),
    /// The finalizer helper acted instead of the pipeline (it added the
    /// finalizer, or deletion ran its cleanup): its action stands.
    Finalizer(Action),
}

/// Where a pass that applied the plan left the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedPass {
    pub work: Work,
    pub etcd: EtcdContact,
    pub rotation: Rotation,
    /// The next moment time alone changes something: a certificate comes
    /// due for renewal, a claim waiting for a volume has waited too long, a
    /// scheduled run is due.
    pub due_at: Option<jiff::Timestamp>,
}

impl AppliedPass {
    /// A pass that applied the children of a cluster hibernating (or
    /// hibernated): no member was asked, no step executed.
    pub fn hibernating(planned: &Planned, tls: Option<&TlsState>) -> Self {
        AppliedPass {
            work: if planned.hibernation == HibernationState::Hibernated {
                Work::Settled
            } else {
                Work::UnderWay
            },
            etcd: EtcdContact::NotAsked,
            rotation: Rotation::Idle,
            due_at: tls.map(|t| t.renew_at),
        }
    }

    /// A pass that ran every stage and every maintenance step: what is
    /// under way, and the next moment time alone changes something (a
    /// certificate's renewal, a lost member's replacement, a step's
    /// `steps_due`).
    pub fn completed(
        validated: &Validated,
        connected: &Connected,
        planned: &Planned,
        executed: &Executed,
        steps_due: Option<jiff::Timestamp>,
        now: jiff::Timestamp,
    ) -> Self {
        let plan = &planned.plan;
        let work = if plan.step.advances() {
            Work::Advanced
        } else if executed.operation.is_some() || !matches!(plan.step, Step::Converged) {
            Work::UnderWay
        } else {
            Work::Settled
        };
        let tls = connected.credentials.tls.as_ref();
        let policy = lost_node::replace_policy(validated.cluster.lost_node.as_ref());
        let replace_at = validated
            .lost
            .iter()
            .filter_map(|l| lost_node::replace_at(policy, l))
            .filter(|at| *at > now)
            .min();
        AppliedPass {
            work,
            etcd: if connected.admin.is_some() {
                EtcdContact::Asked
            } else {
                EtcdContact::NotAsked
            },
            rotation: if tls.is_some_and(|t| t.rotating.is_some()) {
                Rotation::InProgress
            } else {
                Rotation::Idle
            },
            due_at: [tls.map(|t| t.renew_at), replace_at, steps_due]
                .into_iter()
                .flatten()
                .min(),
        }
    }
}

/// What is under way after the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Nothing: the cluster is as the spec asks.
    Settled,
    /// An operation, or a wait for etcd, is under way.
    UnderWay,
    /// This pass executed a step after which the next may be possible at
    /// once (see [`super::membership::Step::advances`]).
    Advanced,
}

/// Whether the pass asked etcd (the cluster has members to ask).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdContact {
    Asked,
    NotAsked,
}

/// Whether a CA rotation is in progress: it advances once the members
/// have rolled out its phase, which no watch reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    Idle,
    InProgress,
}

/// How soon a pass follows one that pinned an operation or executed a step
/// that advances it: the step can go ahead once status holds the pin (the
/// watch brings it back within milliseconds), and the next step need not
/// wait a whole [`OPERATION_POLL`]. Were the cache behind, the pass would
/// plan the same pin again: one more status write, nothing else.
pub const STEP_FOLLOW_UP: Duration = Duration::from_millis(200);

/// How often an operation in flight is re-examined. Each membership step
/// (pin, add learner, start, promote) waits for the next look, so this paces
/// a member add: at 2 s it cost ~9 s per member on a 2-core machine against
/// etcd's own ~5 s (bench/results.md, scale 3 → 5 → 3). A look is a few
/// etcd status calls and no API write unless something changed.
pub const OPERATION_POLL: Duration = Duration::from_secs(1);

/// How often a settled cluster's members are asked how they are: status,
/// the health metrics and the alerts built on them, and the NOSPACE
/// recovery, are never older than this. A look that finds nothing new
/// writes nothing.
pub const HEALTH_LOOK: Duration = Duration::from_secs(30);

/// When to look at the cluster again after a pass that ended in `outcome`
/// and left status `unsettled` (Degraded or Progressing) or not.
pub fn next_action(outcome: &Outcome, unsettled: bool, now: jiff::Timestamp) -> Action {
    match outcome {
        Outcome::Finalizer(action) => action.clone(),
        Outcome::Paused => Action::await_change(),
        Outcome::Pinned => Action::requeue(STEP_FOLLOW_UP),
        Outcome::AuthEnabled => Action::requeue(OPERATION_POLL),
        Outcome::Applied(applied) => after_applied(applied, unsettled, now),
    }
}

fn after_applied(applied: &AppliedPass, unsettled: bool, now: jiff::Timestamp) -> Action {
    match (applied.work, applied.etcd, applied.rotation) {
        (Work::Advanced, EtcdContact::Asked, _) => Action::requeue(STEP_FOLLOW_UP),
        // etcd's progress (a learner catching up, a member rejoining) is
        // not watched, and a fault only in part (a hung member's pod turns
        // unready, but what etcd says of it is not watched; a member that
        // hangs while the cluster forms changes nothing at all): keep
        // looking while something is under way or status says Degraded or
        // Progressing, so status follows the members both ways.
        (Work::UnderWay, EtcdContact::Asked, _) => Action::requeue(OPERATION_POLL),
        (Work::Settled, EtcdContact::Asked, _) if unsettled => Action::requeue(OPERATION_POLL),
        (_, _, Rotation::InProgress) => Action::requeue(OPERATION_POLL),
        // Every other change that matters arrives through a watch, except
        // time, and what only etcd knows (an alarm, a member that stopped
        // following the leader while its pod stays Ready): a settled
        // cluster's members are asked again every HEALTH_LOOK.
        (_, etcd, Rotation::Idle) => {
            let look = (etcd == EtcdContact::Asked).then_some(HEALTH_LOOK.as_secs());
            let due = applied.due_at.map(|at| {
                let wait = at.as_second().saturating_sub(now.as_second());
                // At least a second; at most a day (the clock may jump).
                wait.clamp(1, 86_400).unsigned_abs()
            });
            match look.into_iter().chain(due).min() {
                Some(secs) => Action::requeue(Duration::from_secs(secs)),
                None => Action::await_change(),
            }
        }
    }
}

/// What status shows of an error.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The user must act: `Degraded=True` with this reason.
    Degraded {
        reason: &'static str,
        message: String,
    },
    /// Something outside dkv is expected to arrive (a certificate, a
    /// backup still being taken): `Progressing=True` with this reason.
    Waiting {
        reason: &'static str,
        message: String,
    },
}

/// The fault `err` shows in the status of `dkv`, if any. Transient errors
/// show none (they are retried, and published as Events); nor does an
/// error of a cluster being deleted, except a failed final backup, which
/// holds the deletion until the user acts.
pub fn fault_of(dkv: &DistributedKV, err: &Error) -> Option<Fault> {
    let message = err.to_string();
    match err.category() {
        Category::Permanent
            if dkv.meta().deletion_timestamp.is_none()
                || matches!(
                    err,
                    Error::FinalBackupFailed { .. } | Error::FinalBackupWhileHibernated { .. }
                ) =>
        {
            let reason = match err {
                Error::InvalidSpec(_) => reasons::INVALID_SPEC,
                Error::FinalBackupFailed { .. } | Error::FinalBackupWhileHibernated { .. } => {
                    reasons::BACKUP_FAILED
                }
                Error::RestoreSource { .. } => reasons::RESTORE_FAILED,
                Error::NoSpaceRecurring { .. } => reasons::NO_SPACE,
                Error::JoinRefused { .. } => reasons::JOIN_REFUSED,
                Error::TlsCaMissing { .. }
                | Error::SecretInvalid { .. }
                | Error::TlsSecretUnusable { .. }
                | Error::CertManagerMissing { .. } => reasons::TLS_FAILED,
                _ => reasons::RECONCILE_ERROR,
            };
            Some(Fault::Degraded { reason, message })
        }
        Category::Waiting => match err {
            Error::CertificatePending { .. } => Some(Fault::Waiting {
                reason: reasons::WAITING_FOR_CERTIFICATES,
                message,
            }),
            Error::RestoreSource { .. } => Some(Fault::Waiting {
                reason: reasons::RESTORING,
                message,
            }),
            Error::DisruptionBudget { .. } => Some(Fault::Waiting {
                reason: reasons::WAITING,
                message,
            }),
            _ => None,
        },
        Category::Permanent | Category::Transient => None,
    }
}

/// Logs a failed pass, and publishes a Warning Event for a transient error
/// (the recorder folds repeats into a series). Faults that show in status
/// publish their Event through the condition's transition instead, once.
pub async fn report(dkv: &DistributedKV, err: &Error, ctx: &Context) {
    let category = err.category();
    warn!(error = %err, category = category.as_str(), step = err.step(), "reconcile failed");
    if category == Category::Transient {
        context::publish(
            dkv,
            Event {
                type_: EventType::Warning,
                reason: "ReconcileFailed".to_owned(),
                note: Some(format!("{err} (will retry)")),
                action: "Reconcile".to_owned(),
                secondary: None,
            },
            ctx,
        )
        .await;
    }
}

/// When to retry after `err`: never for permanent errors (a spec change
/// triggers the next pass), soon for waiting, with exponential backoff for
/// transient ones. `jitter` is in `[0, 1)`.
pub fn retry_delay(
    dkv: &DistributedKV,
    err: &Error,
    ctx: &Context,
    jitter: f64,
) -> Option<Duration> {
    match err.category() {
        // Things the controller does not watch are looked at again now and
        // then: the backup a restore names may still be created, a Secret
        // may be restored or fixed.
        // So is etcd: the user may delete data or raise the quota after a
        // NOSPACE that came back.
        Category::Permanent
            if matches!(
                err,
                Error::RestoreSource { .. }
                    | Error::NoSpaceRecurring { .. }
                    | Error::JoinRefused { .. }
                    | Error::TlsCaMissing { .. }
                    | Error::SecretInvalid { .. }
                    | Error::TlsSecretUnusable { .. }
                    | Error::CertManagerMissing { .. }
            ) =>
        {
            Some(RESTORE_SOURCE_RECHECK)
        }
        // cert-manager usually issues within seconds.
        Category::Waiting if matches!(err, Error::CertificatePending { .. }) => {
            Some(CERTIFICATE_PENDING_RECHECK)
        }
        Category::Permanent => None,
        Category::Waiting => Some(WAITING_DELAY),
        Category::Transient => {
            let failures = ctx.record_failure(&ObjectRef::from_obj(dkv));
            Some(backoff_delay(failures, jitter))
        }
    }
}

/// How often a restore source that does not exist is looked for again
/// (and a TLS Secret that cannot be used).
const RESTORE_SOURCE_RECHECK: Duration = certificates::EXTERNAL_RECHECK;
/// How often a certificate cert-manager has not issued yet is looked for.
const CERTIFICATE_PENDING_RECHECK: Duration = Duration::from_secs(3);

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(work: Work, rotation: Rotation, due_at: Option<jiff::Timestamp>) -> Outcome {
        Outcome::Applied(AppliedPass {
            work,
            etcd: EtcdContact::Asked,
            rotation,
            due_at,
        })
    }

    #[test]
    fn a_pass_is_looked_at_again_while_something_is_under_way_or_wrong() {
        let now = jiff::Timestamp::UNIX_EPOCH;
        let poll = Action::requeue(OPERATION_POLL);
        let (settled, idle) = (Work::Settled, Rotation::Idle);
        assert_eq!(
            next_action(&applied(Work::UnderWay, idle, None), false, now),
            poll
        );
        assert_eq!(next_action(&applied(settled, idle, None), true, now), poll);
        assert_eq!(
            next_action(&applied(settled, Rotation::InProgress, None), false, now),
            poll
        );
        let soon = Action::requeue(STEP_FOLLOW_UP);
        assert_eq!(next_action(&Outcome::Pinned, false, now), soon);
        let advanced = applied(Work::Advanced, idle, None);
        assert_eq!(next_action(&advanced, false, now), soon);
        assert_eq!(
            next_action(&applied(settled, idle, None), false, now),
            Action::requeue(HEALTH_LOOK)
        );
        assert_eq!(
            next_action(&Outcome::Paused, true, now),
            Action::await_change()
        );
        // No member to ask yet: the pods' watch brings the next pass.
        let no_etcd = Outcome::Applied(AppliedPass {
            work: Work::UnderWay,
            etcd: EtcdContact::NotAsked,
            rotation: Rotation::Idle,
            due_at: None,
        });
        assert_eq!(next_action(&no_etcd, true, now), Action::await_change());
    }

    #[test]
    fn an_idle_cluster_is_looked_at_again_when_time_changes_something() {
        let now = jiff::Timestamp::UNIX_EPOCH;
        let at = |secs: i64| Some(now + jiff::SignedDuration::from_secs(secs));
        // With members to ask: every HEALTH_LOOK at the latest.
        assert_eq!(
            next_action(
                &applied(Work::Settled, Rotation::Idle, at(3_600)),
                false,
                now
            ),
            Action::requeue(HEALTH_LOOK)
        );
        // Overdue: at once (a second).
        assert_eq!(
            next_action(&applied(Work::Settled, Rotation::Idle, at(-5)), false, now),
            Action::requeue(Duration::from_secs(1))
        );
        // No member to ask: when time changes something, at most a day.
        let idle = |due_at| {
            Outcome::Applied(AppliedPass {
                work: Work::Settled,
                etcd: EtcdContact::NotAsked,
                rotation: Rotation::Idle,
                due_at,
            })
        };
        assert_eq!(
            next_action(&idle(at(3_600)), false, now),
            Action::requeue(Duration::from_secs(3_600))
        );
        assert_eq!(
            next_action(&idle(at(10 * 86_400)), false, now),
            Action::requeue(Duration::from_secs(86_400))
        );
        assert_eq!(next_action(&idle(None), false, now), Action::await_change());
    }
}
