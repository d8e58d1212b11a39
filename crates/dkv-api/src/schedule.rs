//! Cron schedules as dkv reads them (`spec.backup.schedule`,
//! `spec.maintenance.defrag.schedule`): as Kubernetes reads a CronJob's,
//! five fields (or a macro such as `@daily`), no seconds, no years, in UTC.
//!
//! Here, with the types whose fields they are, so that the operator (which
//! validates them and runs on them) and `kubectl dkv` (which shows the next
//! run) read a schedule the same way. The parsing is `croner`'s.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::{SignedDuration, Timestamp};

/// How many runs [`longest_gap`] looks at: enough for any weekly pattern
/// with a few runs a day.
const RUNS_EXAMINED: usize = 64;

/// A schedule as validated: its text (what a CronJob is given) and the
/// cron it parsed into, so that nothing parses it again.
#[derive(Debug, Clone)]
pub struct Schedule {
    text: String,
    cron: Cron,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Schedule {}

impl Schedule {
    /// The schedule, or why it is not one (worded for the field's user).
    pub fn parse(schedule: &str) -> Result<Self, String> {
        let text = schedule.trim();
        if text.starts_with("TZ=") || text.starts_with("CRON_TZ=") {
            return Err(
                "time zones in the schedule are not supported; schedules run in UTC".to_owned(),
            );
        }
        let fields = text.split_whitespace().count();
        if !text.starts_with('@') && fields != 5 {
            return Err(format!(
                "{text:?} has {fields} fields; a schedule has five (minute hour day-of-month month day-of-week), e.g. \"0 */6 * * *\""
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(text)
            .map_err(|err| format!("{text:?} is not a valid cron schedule: {err}"))?;
        Ok(Self {
            text: text.to_owned(),
            cron,
        })
    }

    /// The schedule as written (trimmed).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The first run after `after`.
    pub fn next_run(&self, after: Timestamp) -> Option<Timestamp> {
        self.cron
            .find_next_occurrence(&after.to_zoned(jiff::tz::TimeZone::UTC), false)
            .ok()
            .map(|next| next.timestamp())
    }

    /// The longest time between two consecutive runs over the next
    /// [`RUNS_EXAMINED`] runs after `from`.
    pub fn longest_gap(&self, from: Timestamp) -> Option<SignedDuration> {
        let mut previous = self.next_run(from)?;
        let mut longest: Option<SignedDuration> = None;
        for _ in 1..RUNS_EXAMINED {
            let Some(run) = self.next_run(previous) else {
                break;
            };
            let gap = run.duration_since(previous);
            longest = Some(longest.map_or(gap, |l| l.max(gap)));
            previous = run;
        }
        longest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn schedules_follow_kubernetes_rules() {
        assert!(Schedule::parse("0 */6 * * *").is_ok());
        assert!(Schedule::parse("@daily").is_ok());
        assert!(Schedule::parse("*/5 * * * *").is_ok());
        assert!(
            Schedule::parse("0 0 */6 * * *").is_err(),
            "no seconds field"
        );
        assert!(Schedule::parse("61 * * * *").is_err());
        assert!(Schedule::parse("every day").is_err());
        assert!(Schedule::parse("CRON_TZ=UTC 0 * * * *").is_err());
    }

    #[test]
    fn the_next_run_follows_the_given_time() {
        let from = at("2026-11-26T02:59:00Z");
        let daily = Schedule::parse("0 3 * * *").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(daily.next_run(from), Some(at("2026-11-26T03:00:00Z")));
        assert_eq!(
            daily.next_run(at("2026-11-26T03:00:00Z")),
            Some(at("2026-11-27T03:00:00Z"))
        );
    }

    #[test]
    fn the_longest_gap_between_runs_is_the_schedules_interval() {
        let hours = |schedule| {
            Schedule::parse(schedule)
                .ok()
                .and_then(|s| s.longest_gap(at("2026-11-26T00:00:00Z")))
                .map_or(-1, |g| g.as_hours())
        };
        assert_eq!(hours("0 * * * *"), 1);
        assert_eq!(hours("0 */6 * * *"), 6);
        assert_eq!(hours("@daily"), 24);
        // Weekdays only: Friday's run to Monday's.
        assert_eq!(hours("0 2 * * 1-5"), 72);
        assert_eq!(hours("not a schedule"), -1);
    }
}
