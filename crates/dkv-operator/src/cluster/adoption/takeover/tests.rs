use super::*;

const LIMIT: Duration = Duration::from_secs(600);

fn old(id: u64, healthy: bool) -> OldMember {
    OldMember {
        id,
        name: format!("vm-{id}"),
        healthy,
    }
}

fn voter(ordinal: u32) -> OwnMember {
    OwnMember {
        ordinal,
        id: 100 + u64::from(ordinal),
        learner: false,
        healthy: true,
        caught_up: true,
        learner_for: Duration::ZERO,
    }
}

fn learner(ordinal: u32, caught_up: bool, for_secs: u64) -> OwnMember {
    OwnMember {
        learner: true,
        caught_up,
        learner_for: Duration::from_secs(for_secs),
        ..voter(ordinal)
    }
}

/// Three healthy old members (1 leads) and dkv's `own`, for a size of 3.
fn view(own: Vec<OwnMember>) -> TakeoverView {
    TakeoverView {
        old: vec![old(1, true), old(2, true), old(3, true)],
        own,
        leader: Some(1),
        size: 3,
        old_may_leave: false,
        back_out: false,
        catch_up_limit: LIMIT,
    }
}

/// Applies a step to the view as etcd would, with every change succeeding
/// and every learner catching up at once.
fn apply(view: &mut TakeoverView, step: &TakeoverStep) {
    match step {
        TakeoverStep::AddLearner { ordinal } => view.own.push(learner(*ordinal, true, 1)),
        TakeoverStep::Promote { id, .. } => {
            if let Some(m) = view.own.iter_mut().find(|m| m.id == *id) {
                m.learner = false;
            }
        }
        TakeoverStep::RemoveOwn { id, .. } => view.own.retain(|m| m.id != *id),
        TakeoverStep::MoveLeader { to } => view.leader = Some(*to),
        TakeoverStep::RemoveOld { id, .. } => view.old.retain(|m| m.id != *id),
        other => panic!("not a change: {other:?}"),
    }
}

/// The steps from `view` until one that is not a change.
fn run(mut view: TakeoverView) -> (Vec<TakeoverStep>, TakeoverStep, TakeoverView) {
    let mut steps = Vec::new();
    for _ in 0..50 {
        let step = next_step(&view);
        match step {
            TakeoverStep::Hold(_)
            | TakeoverStep::TakenOver
            | TakeoverStep::Adopted
            | TakeoverStep::BackedOut => return (steps, step, view),
            _ => {
                // Every change of the voters leaves a failure to spare.
                let voters = view.voters();
                apply(&mut view, &step);
                assert!(
                    view.voters() == voters
                        || keeps_one_failure_to_spare(view.voters(), view.healthy_voters()),
                    "{step:?} left {view:?}"
                );
                steps.push(step);
            }
        }
    }
    panic!("no end after 50 steps: {steps:?}");
}

#[test]
fn members_join_one_at_a_time_as_learners_and_the_old_ones_stay() {
    let (steps, end, view) = run(view(Vec::new()));
    assert_eq!(
        steps,
        vec![
            TakeoverStep::AddLearner { ordinal: 0 },
            TakeoverStep::Promote {
                ordinal: 0,
                id: 100
            },
            TakeoverStep::AddLearner { ordinal: 1 },
            TakeoverStep::Promote {
                ordinal: 1,
                id: 101
            },
            TakeoverStep::AddLearner { ordinal: 2 },
            TakeoverStep::Promote {
                ordinal: 2,
                id: 102
            },
        ]
    );
    assert_eq!(end, TakeoverStep::TakenOver);
    assert_eq!(view.old.len(), 3, "the old members are never changed");
}

#[test]
fn when_let_go_leadership_moves_first_and_the_old_members_leave_one_at_a_time() {
    let mut taken = view(vec![voter(0), voter(1), voter(2)]);
    taken.old_may_leave = true;
    let (steps, end, view) = run(taken);
    assert_eq!(steps[0], TakeoverStep::MoveLeader { to: 100 });
    assert_eq!(
        steps[1..],
        [
            TakeoverStep::RemoveOld {
                id: 1,
                name: "vm-1".to_owned()
            },
            TakeoverStep::RemoveOld {
                id: 2,
                name: "vm-2".to_owned()
            },
            TakeoverStep::RemoveOld {
                id: 3,
                name: "vm-3".to_owned()
            },
        ]
    );
    assert_eq!(end, TakeoverStep::Adopted);
    assert_eq!(view.own.len(), 3);
}

#[test]
fn an_old_member_that_does_not_answer_leaves_first() {
    let mut taken = view(vec![voter(0), voter(1), voter(2)]);
    taken.old = vec![old(1, true), old(2, true), old(3, false)];
    taken.leader = Some(100);
    taken.old_may_leave = true;
    assert_eq!(
        next_step(&taken),
        TakeoverStep::RemoveOld {
            id: 3,
            name: "vm-3".to_owned()
        }
    );
}

#[test]
fn old_members_down_hold_the_take_over_until_one_is_back() {
    // Five voters (3 old, 2 of dkv's), two old ones down: a sixth voter
    // would leave 4 healthy of 6, no failure to spare.
    let mut down = view(vec![voter(0), voter(1)]);
    down.old[1].healthy = false;
    down.old[2].healthy = false;
    let hold = next_step(&down);
    assert_eq!(
        hold,
        TakeoverStep::Hold(Hold::NoFailureToSpare {
            voters_after: 6,
            healthy_after: 4
        })
    );
    assert!(
        hold.to_string_if_hold().contains("no failure to spare"),
        "{hold:?}"
    );
    // A learner that caught up meanwhile is not promoted either.
    down.own.push(learner(2, true, 5));
    assert_eq!(next_step(&down), hold);
    // One old member back: its promotion leaves 5 healthy of 6.
    down.old[1].healthy = true;
    assert_eq!(
        next_step(&down),
        TakeoverStep::Promote {
            ordinal: 2,
            id: 102
        }
    );
}

#[test]
fn one_old_member_down_holds_the_next_add_but_not_a_promotion() {
    let mut one_down = view(vec![voter(0)]);
    one_down.old[2].healthy = false;
    // 4 voters, 3 healthy; the next member as a voter would leave 4 healthy
    // of 5, but etcd refuses a member add while a voter is down.
    let hold = next_step(&one_down);
    assert_eq!(
        hold,
        TakeoverStep::Hold(Hold::VoterDown {
            member: "vm-3".to_owned()
        })
    );
    assert!(hold.to_string_if_hold().contains("vm-3"), "{hold:?}");
    // A learner already in is promoted: 4 healthy of 5 voters.
    one_down.own.push(learner(1, true, 5));
    assert_eq!(
        next_step(&one_down),
        TakeoverStep::Promote {
            ordinal: 1,
            id: 101
        }
    );
    // One of dkv's voters down holds an add the same way.
    let mut own_down = view(vec![voter(0), voter(1)]);
    own_down.own[1].healthy = false;
    assert_eq!(
        next_step(&own_down),
        TakeoverStep::Hold(Hold::VoterDown {
            member: "member 1".to_owned()
        })
    );
    // Back: the take-over goes on.
    own_down.own[1].healthy = true;
    assert_eq!(
        next_step(&own_down),
        TakeoverStep::AddLearner { ordinal: 2 }
    );
}

#[test]
fn a_learner_that_does_not_catch_up_in_time_is_removed_again() {
    let slow = view(vec![learner(0, false, 30)]);
    assert_eq!(
        next_step(&slow),
        TakeoverStep::Hold(Hold::CatchingUp { ordinal: 0 })
    );
    let stuck = view(vec![learner(0, false, LIMIT.as_secs())]);
    assert_eq!(
        next_step(&stuck),
        TakeoverStep::RemoveOwn {
            ordinal: 0,
            id: 100
        }
    );
    // A learner whose pod is gone (not healthy) is not promoted.
    let mut gone = view(vec![learner(0, true, 30)]);
    gone.own[0].healthy = false;
    assert_eq!(
        next_step(&gone),
        TakeoverStep::Hold(Hold::CatchingUp { ordinal: 0 })
    );
}

#[test]
fn backing_out_leaves_the_cluster_as_it_was_found() {
    let mut half = view(vec![voter(0), voter(1), learner(2, false, 10)]);
    half.leader = Some(101);
    half.back_out = true;
    let (steps, end, view) = run(half);
    assert_eq!(
        steps,
        vec![
            TakeoverStep::RemoveOwn {
                ordinal: 2,
                id: 102
            },
            TakeoverStep::MoveLeader { to: 1 },
            TakeoverStep::RemoveOwn {
                ordinal: 1,
                id: 101
            },
            TakeoverStep::RemoveOwn {
                ordinal: 0,
                id: 100
            },
        ]
    );
    assert_eq!(end, TakeoverStep::BackedOut);
    assert_eq!(view.old, vec![old(1, true), old(2, true), old(3, true)]);
}

#[test]
fn nothing_changes_without_a_leader() {
    let mut leaderless = view(Vec::new());
    leaderless.leader = None;
    assert_eq!(next_step(&leaderless), TakeoverStep::Hold(Hold::NoLeader));
    leaderless.own = vec![voter(0), voter(1), voter(2)];
    leaderless.old_may_leave = true;
    assert_eq!(next_step(&leaderless), TakeoverStep::Hold(Hold::NoLeader));
}

#[test]
fn a_two_member_cluster_is_taken_over_with_a_failure_to_spare_after_every_change() {
    let mut two = view(Vec::new());
    two.old = vec![old(1, true), old(2, true)];
    two.old_may_leave = true;
    let (steps, end, view) = run(two);
    assert_eq!(end, TakeoverStep::Adopted);
    assert_eq!(view.own.len(), 3);
    assert!(view.old.is_empty());
    assert_eq!(
        steps
            .iter()
            .filter(|s| matches!(s, TakeoverStep::RemoveOld { .. }))
            .count(),
        2
    );
}

impl TakeoverStep {
    fn to_string_if_hold(&self) -> String {
        match self {
            TakeoverStep::Hold(hold) => hold.to_string(),
            _ => String::new(),
        }
    }
}
