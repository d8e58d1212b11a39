//! What a pass hands to the per-cluster health series
//! ([`crate::metrics::ClusterView`]): the members as status records them,
//! etcd's alarms, the certificates in use, and the backup cadences.

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::DistributedKVStatus;
use kube::ResourceExt;

use crate::metrics::{ClusterView, MemberView};

use super::status::Seen;

/// How many runs of a schedule are looked at for its longest gap: enough
/// for any weekly pattern with a few runs a day.
const RUNS_EXAMINED: usize = 64;

pub fn view(
    dkv: &DistributedKV,
    status: Option<&DistributedKVStatus>,
    seen: &Seen,
    continuous_interval: Option<std::time::Duration>,
) -> ClusterView {
    let schedule = seen
        .cluster
        .as_ref()
        .and_then(|c| c.backup.as_ref())
        .map(|b| b.schedule.as_str());
    ClusterView {
        namespace: dkv.namespace().unwrap_or_default(),
        cluster: dkv.name_any(),
        desired_members: i64::from(dkv.spec.size),
        members: status
            .map(|s| {
                s.members
                    .iter()
                    .map(|m| MemberView {
                        name: m.name.clone(),
                        healthy: m.healthy,
                        learner: m.learner,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        // Stopping or stopped for spec.hibernation: its members are away by
        // design, and the alerts leave it alone.
        hibernated: seen.hibernation.stopped()
            || status.and_then(|s| s.phase)
                == Some(dkv_api::distributedkv::v1beta1::Phase::Hibernated),
        forming: status.and_then(|s| s.phase).is_none_or(|phase| {
            matches!(
                phase,
                dkv_api::distributedkv::v1beta1::Phase::Creating
                    | dkv_api::distributedkv::v1beta1::Phase::Restoring
            )
        }),
        has_backup: seen.cluster.as_ref().is_some_and(|c| c.backup.is_some()),
        alarms: seen.alarms.clone().unwrap_or_default(),
        certificates: seen
            .certificates
            .iter()
            .map(|(secret, not_after)| (secret.clone(), not_after.as_second()))
            .collect(),
        backup_schedule_interval: schedule
            .and_then(|s| longest_gap(s, jiff::Timestamp::now()))
            .map(|gap| gap.as_secs()),
        continuous_interval: continuous_interval
            .map(|i| i64::try_from(i.as_secs()).unwrap_or(i64::MAX)),
    }
}

/// The longest time between two consecutive runs of the cron `schedule`
/// (UTC) over its next [`RUNS_EXAMINED`] runs after `from`.
pub fn longest_gap(schedule: &str, from: jiff::Timestamp) -> Option<jiff::SignedDuration> {
    use croner::parser::{CronParser, Seconds, Year};
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(schedule.trim())
        .ok()?;
    let mut at = from.to_zoned(jiff::tz::TimeZone::UTC);
    let mut previous: Option<jiff::Timestamp> = None;
    let mut longest: Option<jiff::SignedDuration> = None;
    for _ in 0..RUNS_EXAMINED {
        let Ok(next) = cron.find_next_occurrence(&at, false) else {
            break;
        };
        let run = next.timestamp();
        if let Some(previous) = previous {
            let gap = run.duration_since(previous);
            longest = Some(longest.map_or(gap, |l| l.max(gap)));
        }
        previous = Some(run);
        at = next;
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hours(schedule: &str) -> i64 {
        let from: jiff::Timestamp = "2026-11-26T00:00:00Z"
            .parse()
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        longest_gap(schedule, from).map_or(-1, |g| g.as_hours())
    }

    #[test]
    fn the_longest_gap_between_runs_is_the_schedules_interval() {
        assert_eq!(hours("0 * * * *"), 1);
        assert_eq!(hours("0 */6 * * *"), 6);
        assert_eq!(hours("@daily"), 24);
        // Weekdays only: Friday's run to Monday's.
        assert_eq!(hours("0 2 * * 1-5"), 72);
        assert_eq!(hours("not a schedule"), -1);
    }
}
