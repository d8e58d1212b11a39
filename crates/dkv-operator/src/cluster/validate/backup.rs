//! `spec.backup`: the destination, the schedule (read as Kubernetes reads a
//! CronJob's), the retention and continuous backup.

use std::time::Duration;

use dkv_api::distributedkv::v1beta1::{BackupRetention, BackupSpec, ContinuousBackup, MaxAge};
use dkv_backup::RetentionPolicy;
use dkv_backup::continuous::cutter::CutSettings;
use jiff::SignedDuration;

use super::Problems;
use crate::quantity::parse_quantity;

/// Bounds of `spec.backup.continuous.interval`.
const INTERVAL_RANGE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(600));
/// Bounds of `spec.backup.continuous.maxSegmentBytes`: 64Ki to 256Mi.
const SEGMENT_BYTES_RANGE: (usize, usize) = (64 << 10, 256 << 20);

/// `spec.backup.continuous` as the agent cuts segments; `None` when it is
/// off (absent or `enabled: false`).
pub(super) fn continuous_settings(
    continuous: Option<&ContinuousBackup>,
    problems: &mut Problems,
) -> Option<CutSettings> {
    let continuous = continuous.filter(|c| c.enabled)?;
    let mut settings = CutSettings::default();
    if let Some(text) = continuous.interval.as_deref() {
        match parse_interval(text.trim()) {
            Some(interval)
                if interval >= INTERVAL_RANGE.0 && interval <= INTERVAL_RANGE.1 =>
            {
                settings.interval = interval;
            }
            _ => problems.add(
                "spec.backup.continuous.interval",
                format!("{text:?} is not an interval from 1s to 10m; write seconds or minutes, e.g. 10s or 2m"),
            ),
        }
    }
    if let Some(quantity) = &continuous.max_segment_bytes {
        match parse_quantity(&quantity.0) {
            Ok(bytes)
                if bytes >= SEGMENT_BYTES_RANGE.0 as f64
                    && bytes <= SEGMENT_BYTES_RANGE.1 as f64 =>
            {
                settings.max_segment_bytes = bytes as usize;
            }
            Ok(_) => problems.add(
                "spec.backup.continuous.maxSegmentBytes",
                format!(
                    "{:?} is outside 64Ki to 256Mi; omit it for the default 16Mi",
                    quantity.0
                ),
            ),
            Err(err) => problems.add("spec.backup.continuous.maxSegmentBytes", err.to_string()),
        }
    }
    Some(settings)
}

/// `10s` or `2m`.
fn parse_interval(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number: u64 = digits.parse().ok()?;
    match unit {
        "s" => Some(Duration::from_secs(number)),
        "m" => Some(Duration::from_secs(number.checked_mul(60)?)),
        _ => None,
    }
}

/// A store URI as the spec wrote it (what a backup Job or a member is
/// given, trimmed) and the location it parsed into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUri {
    text: String,
    location: dkv_backup::Location,
}

impl StoreUri {
    pub fn parse(uri: &str) -> Result<Self, dkv_backup::Error> {
        let text = uri.trim();
        Ok(Self {
            location: dkv_backup::Location::parse(text)?,
            text: text.to_owned(),
        })
    }

    /// The URI as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn location(&self) -> &dkv_backup::Location {
        &self.location
    }
}

impl std::fmt::Display for StoreUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// `spec.backup.destination.uri`, parsed and checked.
pub(super) fn check_destination(uri: &str, problems: &mut Problems) -> Option<StoreUri> {
    const FIELD: &str = "spec.backup.destination.uri";
    let uri = match StoreUri::parse(uri) {
        Ok(uri) => uri,
        Err(err) => {
            problems.add(
                FIELD,
                format!("{err}; write e.g. s3://my-bucket/backups/ or file:///var/backups/dkv/"),
            );
            return None;
        }
    };
    let location = uri.location();
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
    Some(uri)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuous_backup_settings_have_defaults_and_bounds() {
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let settings = |interval: Option<&str>, bytes: Option<&str>| {
            let mut problems = Problems::default();
            let spec = ContinuousBackup {
                enabled: true,
                interval: interval.map(str::to_owned),
                max_segment_bytes: bytes.map(|b| Quantity(b.to_owned())),
            };
            let settings = continuous_settings(Some(&spec), &mut problems);
            (settings, format!("{:?}", problems.0))
        };
        let (defaults, problems) = settings(None, None);
        assert_eq!(defaults, Some(CutSettings::default()), "{problems}");
        let (chosen, _) = settings(Some("2m"), Some("1Mi"));
        assert_eq!(
            chosen,
            Some(CutSettings {
                interval: Duration::from_secs(120),
                max_segment_bytes: 1 << 20,
                ..CutSettings::default()
            })
        );
        for bad in ["0s", "11m", "10", "1h", "s", "1.5s"] {
            let (_, problems) = settings(Some(bad), None);
            assert!(
                problems.contains("spec.backup.continuous.interval"),
                "{bad}: {problems}"
            );
        }
        for bad in ["1Ki", "1Gi", "lots"] {
            let (_, problems) = settings(None, Some(bad));
            assert!(
                problems.contains("spec.backup.continuous.maxSegmentBytes"),
                "{bad}: {problems}"
            );
        }
        let mut problems = Problems::default();
        let off = ContinuousBackup {
            enabled: false,
            interval: None,
            max_segment_bytes: None,
        };
        assert_eq!(continuous_settings(Some(&off), &mut problems), None);
    }
}
