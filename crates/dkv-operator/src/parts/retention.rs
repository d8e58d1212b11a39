//! `spec.backup.retention` as the policy the retention controller applies
//! (and the cluster's validation checks).

use dkv_api::distributedkv::v1beta1::{BackupRetention, BackupSpec, MaxAge};
use dkv_backup::RetentionPolicy;
use jiff::SignedDuration;

/// The retention `backup` asks for; a limit that does not validate prunes
/// nothing (validation reports it).
pub fn retention_of(backup: Option<&BackupSpec>) -> RetentionPolicy {
    policy(backup.and_then(|b| b.retention.as_ref())).0
}

/// `retention` as a policy, and what is wrong with it: each problem's
/// field and what to do. A limit with a problem is left out of the policy.
pub fn policy(
    retention: Option<&BackupRetention>,
) -> (RetentionPolicy, Vec<(&'static str, String)>) {
    let mut problems = Vec::new();
    let Some(retention) = retention else {
        return (RetentionPolicy::default(), problems);
    };
    let max_backups = match retention.max_backups {
        None => None,
        Some(n) if n >= 1 => u32::try_from(n).ok(),
        Some(n) => {
            problems.push((
                "spec.backup.retention.maxBackups",
                format!("must be at least 1 (got {n}); omit it to keep any number of backups"),
            ));
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
                    problems.push((
                        "spec.backup.retention.maxAge",
                        format!("{message}; omit it to keep backups of any age"),
                    ));
                    None
                }
            });
    (
        RetentionPolicy {
            max_age,
            max_backups,
        },
        problems,
    )
}
