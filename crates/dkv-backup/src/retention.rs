//! Which backups retention removes, decided from the records alone (pure;
//! the caller deletes the artifacts with [`crate::delete_artifact`] and then
//! the records).
//!
//! The rules:
//! - a backup still in progress is never pruned;
//! - the newest successful backup is never pruned, whatever its age and
//!   whatever the policy says (a cluster always has one restorable backup
//!   if it ever had one);
//! - successful backups: beyond the newest `maxBackups`, or taken before
//!   `now - maxAge`, are pruned;
//! - failed backups (no artifact worth keeping; their records explain a
//!   failure) follow the same two limits counted among failed ones only, so
//!   a run of failures can never push out a good backup and never piles up;
//! - no limit set: nothing is pruned.

use jiff::{SignedDuration, Timestamp};

/// How long and how many backups are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionPolicy {
    pub max_age: Option<SignedDuration>,
    /// Counted per outcome (successful, failed); at least 1 is kept.
    pub max_backups: Option<u32>,
}

impl RetentionPolicy {
    /// v1alpha1's `backup.retentionDays`.
    pub fn from_retention_days(days: Option<i32>) -> Self {
        Self {
            max_age: days
                .filter(|d| *d > 0)
                .map(|d| SignedDuration::from_hours(i64::from(d) * 24)),
            max_backups: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    InProgress,
    Succeeded,
    Failed,
}

/// What retention needs to know about one backup; `key` identifies it to
/// the caller (a record name, an artifact URI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupRecord<K> {
    pub key: K,
    pub taken_at: Timestamp,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneReason {
    OlderThanMaxAge,
    BeyondMaxBackups,
}

/// One backup to remove, and why (for the Event the caller emits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prune<K> {
    pub key: K,
    pub reason: PruneReason,
}

/// The backups `policy` removes at `now`, oldest first. Ties in time are
/// broken by key, so the answer does not depend on the input order.
pub fn select_for_pruning<K: Clone + Ord>(
    records: &[BackupRecord<K>],
    policy: &RetentionPolicy,
    now: Timestamp,
) -> Vec<Prune<K>> {
    let cutoff = policy.max_age.and_then(|age| now.checked_sub(age).ok());
    let keep_count = policy.max_backups.map(|n| n.max(1) as usize);
    let mut pruned = Vec::new();
    for outcome in [Outcome::Succeeded, Outcome::Failed] {
        let mut group: Vec<&BackupRecord<K>> =
            records.iter().filter(|r| r.outcome == outcome).collect();
        // Newest first.
        group.sort_by(|a, b| (b.taken_at, &b.key).cmp(&(a.taken_at, &a.key)));
        for (rank, record) in group.into_iter().enumerate() {
            if outcome == Outcome::Succeeded && rank == 0 {
                continue;
            }
            let reason = if cutoff.is_some_and(|cutoff| record.taken_at < cutoff) {
                Some(PruneReason::OlderThanMaxAge)
            } else if keep_count.is_some_and(|keep| rank >= keep) {
                Some(PruneReason::BeyondMaxBackups)
            } else {
                None
            };
            if let Some(reason) = reason {
                pruned.push((
                    record.taken_at,
                    Prune {
                        key: record.key.clone(),
                        reason,
                    },
                ));
            }
        }
    }
    pruned.sort_by(|(ta, a), (tb, b)| (ta, &a.key).cmp(&(tb, &b.key)));
    pruned.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;

    fn now() -> Timestamp {
        Timestamp::from_second(100 * DAY).unwrap()
    }

    fn record(key: &str, days_ago: i64, outcome: Outcome) -> BackupRecord<String> {
        BackupRecord {
            key: key.to_owned(),
            taken_at: Timestamp::from_second(100 * DAY - days_ago * DAY).unwrap(),
            outcome,
        }
    }

    fn keys(pruned: &[Prune<String>]) -> Vec<(&str, PruneReason)> {
        pruned.iter().map(|p| (p.key.as_str(), p.reason)).collect()
    }

    fn policy(days: Option<i64>, max: Option<u32>) -> RetentionPolicy {
        RetentionPolicy {
            max_age: days.map(|d| SignedDuration::from_secs(d * DAY)),
            max_backups: max,
        }
    }

    use Outcome::{Failed, InProgress, Succeeded};
    use PruneReason::{BeyondMaxBackups, OlderThanMaxAge};

    #[test]
    fn age_limit_spares_the_newest_success() {
        let records = [
            record("a", 10, Succeeded),
            record("b", 8, Succeeded),
            record("c", 2, Succeeded),
        ];
        assert_eq!(
            keys(&select_for_pruning(&records, &policy(Some(7), None), now())),
            [("a", OlderThanMaxAge), ("b", OlderThanMaxAge)]
        );
        // All too old: the newest is kept anyway.
        assert_eq!(
            keys(&select_for_pruning(&records, &policy(Some(1), None), now())),
            [("a", OlderThanMaxAge), ("b", OlderThanMaxAge)]
        );
        // Exactly at the limit is kept.
        assert_eq!(
            keys(&select_for_pruning(&records, &policy(Some(8), None), now())),
            [("a", OlderThanMaxAge)]
        );
    }

    #[test]
    fn count_limit_keeps_the_newest_n_and_at_least_one() {
        let records = [
            record("a", 4, Succeeded),
            record("b", 3, Succeeded),
            record("c", 2, Succeeded),
            record("d", 1, Succeeded),
        ];
        assert_eq!(
            keys(&select_for_pruning(&records, &policy(None, Some(2)), now())),
            [("a", BeyondMaxBackups), ("b", BeyondMaxBackups)]
        );
        assert_eq!(
            select_for_pruning(&records, &policy(None, Some(0)), now()).len(),
            3
        );
        assert!(select_for_pruning(&records, &policy(None, Some(4)), now()).is_empty());
        assert!(select_for_pruning(&records, &RetentionPolicy::default(), now()).is_empty());
    }

    #[test]
    fn failures_never_push_out_a_good_backup_and_never_pile_up() {
        let records = [
            record("good-old", 30, Succeeded),
            record("f1", 5, Failed),
            record("f2", 4, Failed),
            record("f3", 3, Failed),
            record("running", 0, InProgress),
        ];
        assert_eq!(
            keys(&select_for_pruning(
                &records,
                &policy(Some(7), Some(2)),
                now()
            )),
            [("f1", BeyondMaxBackups)]
        );
        // The in-progress one is never touched, however old.
        let records = [record("stuck", 50, InProgress), record("ok", 1, Succeeded)];
        assert!(select_for_pruning(&records, &policy(Some(7), Some(1)), now()).is_empty());
        // Old failures go by age even when no success exists.
        let records = [record("f-old", 9, Failed), record("f-new", 1, Failed)];
        assert_eq!(
            keys(&select_for_pruning(&records, &policy(Some(7), None), now())),
            [("f-old", OlderThanMaxAge)]
        );
    }

    #[test]
    fn ties_and_input_order_do_not_change_the_answer() {
        let a = [
            record("x", 2, Succeeded),
            record("y", 2, Succeeded),
            record("z", 2, Succeeded),
        ];
        let mut b = a.clone();
        b.reverse();
        let expected = [("x", BeyondMaxBackups), ("y", BeyondMaxBackups)];
        assert_eq!(
            keys(&select_for_pruning(&a, &policy(None, Some(1)), now())),
            expected
        );
        assert_eq!(
            keys(&select_for_pruning(&b, &policy(None, Some(1)), now())),
            expected
        );
    }

    #[test]
    fn retention_days_and_clock_edge_cases() {
        assert_eq!(
            RetentionPolicy::from_retention_days(Some(7)).max_age,
            Some(SignedDuration::from_hours(168))
        );
        assert_eq!(
            RetentionPolicy::from_retention_days(Some(0)),
            RetentionPolicy::default()
        );
        assert_eq!(
            RetentionPolicy::from_retention_days(None),
            RetentionPolicy::default()
        );
        // A record from the future (clock skew) is not too old.
        let records = [
            record("future", -3, Succeeded),
            record("older", 1, Succeeded),
        ];
        assert_eq!(
            keys(&select_for_pruning(&records, &policy(Some(0), None), now())),
            [("older", OlderThanMaxAge)]
        );
        // An age limit reaching before the representable range prunes nothing.
        let huge = RetentionPolicy {
            max_age: Some(SignedDuration::MAX),
            max_backups: None,
        };
        assert!(select_for_pruning(&records, &huge, now()).is_empty());
    }

    /// Every combination of outcomes and ages for up to four records under
    /// a grid of policies, against the rules stated in the module docs.
    #[test]
    fn the_rules_hold_for_every_small_case() {
        let outcomes = [Succeeded, Failed, InProgress];
        let ages = [0, 3, 6, 9];
        let mut cases = 0;
        for n in 0..=4usize {
            let combinations = (outcomes.len() * ages.len()).pow(n as u32);
            for mut code in 0..combinations {
                let mut records = Vec::new();
                for i in 0..n {
                    let pick = code % (outcomes.len() * ages.len());
                    code /= outcomes.len() * ages.len();
                    records.push(record(
                        &format!("r{i}"),
                        ages[pick % ages.len()],
                        outcomes[pick / ages.len()],
                    ));
                }
                for days in [None, Some(0), Some(5)] {
                    for max in [None, Some(0), Some(1), Some(2)] {
                        cases += 1;
                        check_rules(&records, &policy(days, max));
                    }
                }
            }
        }
        assert!(cases > 100_000, "{cases}");
    }

    fn check_rules(records: &[BackupRecord<String>], policy: &RetentionPolicy) {
        let pruned = select_for_pruning(records, policy, now());
        let is_pruned = |key: &str| pruned.iter().any(|p| p.key == key);
        let cutoff = policy.max_age.map(|age| now() - age);
        let context = || format!("{records:?} {policy:?} -> {pruned:?}");

        let newest_success = records
            .iter()
            .filter(|r| r.outcome == Succeeded)
            .max_by(|a, b| (a.taken_at, &a.key).cmp(&(b.taken_at, &b.key)));
        if let Some(newest) = newest_success {
            assert!(
                !is_pruned(&newest.key),
                "newest success pruned: {}",
                context()
            );
        }
        for outcome in [Succeeded, Failed] {
            let group: Vec<_> = records.iter().filter(|r| r.outcome == outcome).collect();
            let kept: Vec<_> = group.iter().filter(|r| !is_pruned(&r.key)).collect();
            if let Some(max) = policy.max_backups {
                assert!(
                    kept.len() <= (max as usize).max(1),
                    "too many kept: {}",
                    context()
                );
            }
            for r in &group {
                let too_old = cutoff.is_some_and(|c| r.taken_at < c);
                let is_newest_success = newest_success.is_some_and(|n| n.key == r.key);
                if too_old && !is_newest_success {
                    assert!(is_pruned(&r.key), "too old but kept: {}", context());
                }
                // Nothing is pruned without a reason: a pruned record is
                // too old, or beyond the count among newer ones.
                if is_pruned(&r.key) {
                    let newer = group
                        .iter()
                        .filter(|o| (o.taken_at, &o.key) > (r.taken_at, &r.key))
                        .count();
                    let beyond = policy
                        .max_backups
                        .is_some_and(|m| newer >= (m as usize).max(1));
                    assert!(too_old || beyond, "pruned without reason: {}", context());
                }
            }
        }
        for r in records.iter().filter(|r| r.outcome == InProgress) {
            assert!(!is_pruned(&r.key), "in-progress pruned: {}", context());
        }
        // Oldest first.
        let times: Vec<_> = pruned
            .iter()
            .map(|p| records.iter().find(|r| r.key == p.key).map(|r| r.taken_at))
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{}", context());
    }
}
