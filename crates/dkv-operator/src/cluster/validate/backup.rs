//! `spec.backup`: the destination, the schedule (read as Kubernetes reads a CronJob's) and the retention.

use dkv_api::distributedkv::v1beta1::{BackupRetention, BackupSpec, MaxAge};
use dkv_backup::RetentionPolicy;
use jiff::SignedDuration;

use super::Problems;

pub(super) fn check_destination(uri: &str, problems: &mut Problems) {
    const FIELD: &str = "spec.backup.destination.uri";
    let uri = uri.trim();
    let location = match dkv_backup::Location::parse(uri) {
        Ok(location) => location,
        Err(err) => {
            problems.add(
                FIELD,
                format!("{err}; write e.g. s3://my-bucket/backups/ or file:///var/backups/dkv/"),
            );
            return;
        }
    };
    if location.scheme() == dkv_backup::Scheme::S3 {
        let bucket = location.bucket();
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && !bucket.starts_with(['-', '.'])
            && !bucket.ends_with(['-', '.']);
        if !bucket_ok {
            problems.add(
                FIELD,
                format!("{bucket:?} is not a valid S3 bucket name (3-63 lowercase letters, digits, '-' or '.')"),
            );
        }
    }
}

/// The retention `backup` asks for; a limit that does not validate prunes
/// nothing (validation reports it).
pub fn retention_of(backup: Option<&BackupSpec>) -> RetentionPolicy {
    retention_policy(
        backup.and_then(|b| b.retention.as_ref()),
        &mut Problems::default(),
    )
}

/// `spec.backup.retention` as the policy retention applies.
pub(super) fn retention_policy(
    retention: Option<&BackupRetention>,
    problems: &mut Problems,
) -> RetentionPolicy {
    let Some(retention) = retention else {
        return RetentionPolicy::default();
    };
    let max_backups = match retention.max_backups {
        None => None,
        Some(n) if n >= 1 => u32::try_from(n).ok(),
        Some(n) => {
            problems.add(
                "spec.backup.retention.maxBackups",
                format!("must be at least 1 (got {n}); omit it to keep any number of backups"),
            );
            None
        }
    };
    let max_age =
        retention
            .max_age
            .as_deref()
            .and_then(|text| match text.trim().parse::<MaxAge>() {
                Ok(age) => Some(SignedDuration::from_hours(i64::from(age.hours()))),
                Err(message) => {
                    problems.add(
                        "spec.backup.retention.maxAge",
                        format!("{message}; omit it to keep backups of any age"),
                    );
                    None
                }
            });
    RetentionPolicy {
        max_age,
        max_backups,
    }
}

/// Checks a CronJob schedule the way Kubernetes reads it: five fields (or a
/// macro such as `@daily`), no seconds, no years.
pub fn check_cron(schedule: &str) -> Result<(), String> {
    use croner::parser::{CronParser, Seconds, Year};
    let schedule = schedule.trim();
    if schedule.starts_with("TZ=") || schedule.starts_with("CRON_TZ=") {
        return Err(
            "time zones in the schedule are not supported; schedules run in UTC".to_owned(),
        );
    }
    let fields = schedule.split_whitespace().count();
    if !schedule.starts_with('@') && fields != 5 {
        return Err(format!(
            "{schedule:?} has {fields} fields; a schedule has five (minute hour day-of-month month day-of-week), e.g. \"0 */6 * * *\""
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(schedule)
        .map(|_| ())
        .map_err(|err| format!("{schedule:?} is not a valid cron schedule: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_schedules_follow_kubernetes_rules() {
        assert!(check_cron("0 */6 * * *").is_ok());
        assert!(check_cron("@daily").is_ok());
        assert!(check_cron("*/5 * * * *").is_ok());
        assert!(
            check_cron("0 0 */6 * * *").is_err(),
            "seconds are not allowed"
        );
        assert!(check_cron("61 * * * *").is_err());
        assert!(check_cron("every day").is_err());
        assert!(check_cron("CRON_TZ=UTC 0 * * * *").is_err());
    }
}
