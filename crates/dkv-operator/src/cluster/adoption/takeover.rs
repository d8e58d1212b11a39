//! The take-over's one next step (pure): how a running etcd cluster that
//! passed the [`preflight`](super::preflight) becomes a dkv cluster, one
//! membership change at a time, and how an adoption that cannot complete
//! backs out.
//!
//! dkv's members join as learners, one at a time; each is promoted once it
//! has caught up, and removed again if it does not within the catch-up
//! limit. The members that were there before dkv are never changed until
//! the user lets them leave; then leadership moves to one of dkv's voters
//! first, and the old members are removed one at a time, members that do
//! not answer first. Backing out removes dkv's members the same way and
//! leaves the cluster as it was found.
//!
//! Every change of the voters goes ahead only if, once made, the healthy
//! voters of the whole cluster (old and dkv's) are a quorum with one failure
//! to spare ([`keeps_one_failure_to_spare`]); a learner is added only when
//! its promotion would be, and only while every voter is healthy: etcd's
//! strict reconfiguration check (on by default) refuses a member add,
//! learner or not, unless its leader has been connected to every voter
//! for 5 s (3.4, and 3.5 and 3.6 until etcd-io/etcd#21640 relaxed it to a
//! quorum: 3.5.16 refuses, 3.5.30 and 3.6.16 do not), so an add with a
//! voter down would be refused pass after pass while status said it was
//! under way. The preflight asks the same of the first add, and dkv's own
//! clusters add no member while one is unwell. Otherwise the step is to
//! hold, and says why.

use std::fmt;
use std::time::Duration;

use super::preflight::keeps_one_failure_to_spare;

/// A member that was there before dkv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OldMember {
    pub id: u64,
    /// etcd's name for it.
    pub name: String,
    /// Answers and follows the leader.
    pub healthy: bool,
}

/// One of dkv's members as etcd lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnMember {
    pub ordinal: u32,
    pub id: u64,
    pub learner: bool,
    pub healthy: bool,
    /// A learner whose log is close enough to the leader's for etcd to
    /// promote it.
    pub caught_up: bool,
    /// How long it has been a learner.
    pub learner_for: Duration,
}

/// What the next step is decided from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeoverView {
    pub old: Vec<OldMember>,
    pub own: Vec<OwnMember>,
    /// The member etcd's voters follow, if any.
    pub leader: Option<u64>,
    /// How many members dkv runs (`spec.replicas`).
    pub size: u32,
    /// The user let the old members leave.
    pub old_may_leave: bool,
    /// The adoption is to be undone: dkv's members leave instead.
    pub back_out: bool,
    /// How long a learner may take to catch up before it is removed again.
    pub catch_up_limit: Duration,
}

/// The one change a pass makes, or why it makes none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeoverStep {
    /// Add dkv's member `ordinal` as a learner.
    AddLearner { ordinal: u32 },
    /// Promote a learner that caught up.
    Promote { ordinal: u32, id: u64 },
    /// Remove one of dkv's members: a learner that did not catch up in
    /// time, or any of them while backing out.
    RemoveOwn { ordinal: u32, id: u64 },
    /// Move leadership before the member that leads leaves.
    MoveLeader { to: u64 },
    /// Remove one of the old members; its process may be stopped after.
    RemoveOld { id: u64, name: String },
    /// No change now.
    Hold(Hold),
    /// dkv's members are all voters; the old ones stay until the user lets
    /// them leave.
    TakenOver,
    /// Only dkv's members are left: an ordinary dkv cluster.
    Adopted,
    /// Backing out is done: only the old members are left.
    BackedOut,
}

/// Why the take-over makes no change now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// A learner is catching up.
    CatchingUp { ordinal: u32 },
    /// The change would leave no failure to spare.
    NoFailureToSpare {
        voters_after: usize,
        healthy_after: usize,
    },
    /// No member leads.
    NoLeader,
    /// No voter of the side that stays could take the leadership.
    NoLeaderCandidate,
    /// A voter is down (etcd's name for an old member, `member N` for one
    /// of dkv's): no member is added until it is back.
    VoterDown { member: String },
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CatchingUp { ordinal } => write!(f, "member {ordinal} is catching up"),
            Self::NoFailureToSpare {
                voters_after,
                healthy_after,
            } => write!(
                f,
                "the next change would leave {healthy_after} healthy of {voters_after} voters, \
                 no failure to spare; waiting for every member to be healthy"
            ),
            Self::NoLeader => f.write_str("no member leads; waiting for an election"),
            Self::NoLeaderCandidate => {
                f.write_str("no healthy voter can take the leadership; waiting")
            }
            Self::VoterDown { member } => write!(
                f,
                "{member} does not answer or does not follow the leader; no member is added \
                 while a voter is down (etcd refuses it): bring it back, or remove it from \
                 the cluster (etcdctl member remove)"
            ),
        }
    }
}

impl TakeoverView {
    fn voters(&self) -> usize {
        self.old.len() + self.own.iter().filter(|m| !m.learner).count()
    }

    fn healthy_voters(&self) -> usize {
        self.old.iter().filter(|m| m.healthy).count()
            + self.own.iter().filter(|m| !m.learner && m.healthy).count()
    }

    /// The first voter that is not healthy, as the hold it makes for an add.
    fn voter_down(&self) -> Option<Hold> {
        let old = self.old.iter().find(|m| !m.healthy).map(|m| m.name.clone());
        let own = || {
            self.own
                .iter()
                .find(|m| !m.learner && !m.healthy)
                .map(|m| format!("member {}", m.ordinal))
        };
        old.or_else(own).map(|member| Hold::VoterDown { member })
    }

    /// One voter leaving (healthy or not), or why it must wait.
    fn voter_may_leave(&self, healthy: bool) -> Result<(), Hold> {
        let healthy_after = self.healthy_voters() - usize::from(healthy);
        self.allowed(self.voters() - 1, healthy_after)
    }

    /// A change to `voters_after` voters of which `healthy_after` healthy,
    /// or why it must wait.
    fn allowed(&self, voters_after: usize, healthy_after: usize) -> Result<(), Hold> {
        if self.leader.is_none() {
            return Err(Hold::NoLeader);
        }
        if keeps_one_failure_to_spare(voters_after, healthy_after) {
            Ok(())
        } else {
            Err(Hold::NoFailureToSpare {
                voters_after,
                healthy_after,
            })
        }
    }
}

/// The next step towards the view's goal.
pub fn next_step(view: &TakeoverView) -> TakeoverStep {
    if view.back_out {
        return back_out(view);
    }
    if let Some(learner) = view.own.iter().find(|m| m.learner) {
        return learner_step(view, learner);
    }
    let own_voters = view.own.len();
    if own_voters < view.size as usize {
        // A learner does not vote: adding one changes no quorum. It is
        // added only when its promotion would be allowed (as a healthy
        // voter it leaves a failure to spare), so that no learner waits
        // for a promotion the rule refuses; and only while every voter is
        // healthy, which etcd asks of a member add (see the module's doc).
        return match view.allowed(view.voters() + 1, view.healthy_voters() + 1) {
            Ok(()) => match view.voter_down() {
                Some(hold) => TakeoverStep::Hold(hold),
                None => TakeoverStep::AddLearner {
                    ordinal: lowest_free_ordinal(view),
                },
            },
            Err(hold) => TakeoverStep::Hold(hold),
        };
    }
    if view.old.is_empty() {
        return TakeoverStep::Adopted;
    }
    if !view.old_may_leave {
        return TakeoverStep::TakenOver;
    }
    old_leave_step(view)
}

fn learner_step(view: &TakeoverView, learner: &OwnMember) -> TakeoverStep {
    if learner.caught_up && learner.healthy {
        let healthy_after = view.healthy_voters() + 1;
        return match view.allowed(view.voters() + 1, healthy_after) {
            Ok(()) => TakeoverStep::Promote {
                ordinal: learner.ordinal,
                id: learner.id,
            },
            Err(hold) => TakeoverStep::Hold(hold),
        };
    }
    if learner.learner_for >= view.catch_up_limit {
        // A learner does not vote: removing it changes no quorum.
        return TakeoverStep::RemoveOwn {
            ordinal: learner.ordinal,
            id: learner.id,
        };
    }
    TakeoverStep::Hold(Hold::CatchingUp {
        ordinal: learner.ordinal,
    })
}

fn old_leave_step(view: &TakeoverView) -> TakeoverStep {
    let Some(leader) = view.leader else {
        return TakeoverStep::Hold(Hold::NoLeader);
    };
    if view.old.iter().any(|m| m.id == leader) {
        return match view
            .own
            .iter()
            .filter(|m| !m.learner && m.healthy)
            .min_by_key(|m| m.ordinal)
        {
            Some(to) => TakeoverStep::MoveLeader { to: to.id },
            None => TakeoverStep::Hold(Hold::NoLeaderCandidate),
        };
    }
    // Members that do not answer leave first: removing one raises the
    // share of healthy voters.
    let Some(leaving) = view.old.iter().min_by_key(|m| (m.healthy, m.id)).cloned() else {
        return TakeoverStep::Adopted;
    };
    match view.voter_may_leave(leaving.healthy) {
        Ok(()) => TakeoverStep::RemoveOld {
            id: leaving.id,
            name: leaving.name,
        },
        Err(hold) => TakeoverStep::Hold(hold),
    }
}

fn back_out(view: &TakeoverView) -> TakeoverStep {
    // Learners first: they do not vote.
    if let Some(learner) = view.own.iter().find(|m| m.learner) {
        return TakeoverStep::RemoveOwn {
            ordinal: learner.ordinal,
            id: learner.id,
        };
    }
    let Some(leaving) = view
        .own
        .iter()
        .min_by_key(|m| (m.healthy, std::cmp::Reverse(m.ordinal)))
    else {
        return TakeoverStep::BackedOut;
    };
    let Some(leader) = view.leader else {
        return TakeoverStep::Hold(Hold::NoLeader);
    };
    if view.own.iter().any(|m| m.id == leader) {
        return match view.old.iter().filter(|m| m.healthy).min_by_key(|m| m.id) {
            Some(to) => TakeoverStep::MoveLeader { to: to.id },
            None => TakeoverStep::Hold(Hold::NoLeaderCandidate),
        };
    }
    match view.voter_may_leave(leaving.healthy) {
        Ok(()) => TakeoverStep::RemoveOwn {
            ordinal: leaving.ordinal,
            id: leaving.id,
        },
        Err(hold) => TakeoverStep::Hold(hold),
    }
}

/// The lowest ordinal none of dkv's members has.
fn lowest_free_ordinal(view: &TakeoverView) -> u32 {
    (0..)
        .find(|o| view.own.iter().all(|m| m.ordinal != *o))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
