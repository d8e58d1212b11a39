//! `spec.backup`: the destination, the schedule (read as Kubernetes reads a
//! CronJob's), the retention and continuous backup.

use std::time::Duration;

use dkv_api::distributedkv::v1beta1::{BackupRetention, ContinuousBackup, NewChain};
use dkv_backup::RetentionPolicy;
use dkv_backup::continuous::cutter::CutSettings;
use dkv_backup::continuous::rotation::ChainLimits;

use super::Problems;
use crate::quantity::parse_quantity;

/// Bounds of `spec.backup.continuous.interval`.
const INTERVAL_RANGE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(600));
/// Bounds of `spec.backup.continuous.newChain.every`.
const NEW_CHAIN_EVERY_RANGE: (Duration, Duration) =
    (Duration::from_secs(600), Duration::from_secs(30 * 86_400));
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
        match parse_whole_duration(text.trim(), &[SECOND, MINUTE]) {
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
    settings.new_chain = new_chain_limits(continuous.new_chain.as_ref(), problems);
    Some(settings)
}

/// Seconds in each unit a duration of the continuous backup spec may use.
pub(super) const SECOND: (&str, u64) = ("s", 1);
pub(super) const MINUTE: (&str, u64) = ("m", 60);
pub(super) const HOUR: (&str, u64) = ("h", 3600);
const DAY: (&str, u64) = ("d", 86_400);

/// A whole number and one of `units`: `10s`, `2m`, `24h`.
pub(super) fn parse_whole_duration(text: &str, units: &[(&str, u64)]) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number: u64 = digits.parse().ok()?;
    let (_, seconds) = units.iter().find(|(name, _)| *name == unit)?;
    Some(Duration::from_secs(number.checked_mul(*seconds)?))
}

/// `spec.backup.continuous.newChain.<field>`, a whole number within
/// `range`; a problem otherwise.
fn bounded<T: TryFrom<i64>>(
    value: i64,
    range: std::ops::RangeInclusive<i64>,
    field: &str,
    default: i64,
    problems: &mut Problems,
) -> Option<T> {
    let fits = range
        .contains(&value)
        .then(|| T::try_from(value).ok())
        .flatten();
    if fits.is_none() {
        problems.add(
            &format!("spec.backup.continuous.newChain.{field}"),
            format!(
                "{value} is outside {} to {}; omit it for the default {default}",
                range.start(),
                range.end()
            ),
        );
    }
    fits
}

/// `spec.backup.continuous.newChain` into the chain limits.
fn new_chain_limits(new_chain: Option<&NewChain>, problems: &mut Problems) -> ChainLimits {
    let mut limits = ChainLimits::default();
    let Some(new_chain) = new_chain else {
        return limits;
    };
    if let Some(text) = new_chain.every.as_deref() {
        match parse_whole_duration(text.trim(), &[MINUTE, HOUR, DAY]) {
            Some(every) if every >= NEW_CHAIN_EVERY_RANGE.0 && every <= NEW_CHAIN_EVERY_RANGE.1 => {
                limits.every = every;
            }
            _ => problems.add(
                "spec.backup.continuous.newChain.every",
                format!("{text:?} is not a duration from 10m to 30d; write minutes, hours or days, e.g. 12h or 1d"),
            ),
        }
    }
    if let Some(revisions) = new_chain.max_revisions
        && let Some(revisions) = bounded(
            revisions,
            1000..=100_000_000,
            "maxRevisions",
            100_000,
            problems,
        )
    {
        limits.max_revisions = revisions;
    }
    if let Some(percent) = new_chain.change_percent
        && let Some(percent) = bounded(i64::from(percent), 1..=1000, "changePercent", 25, problems)
    {
        limits.change_percent = percent;
    }
    limits
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

/// `spec.backup.retention` as the policy retention applies, its problems
/// reported.
pub(super) fn retention_policy(
    retention: Option<&BackupRetention>,
    problems: &mut Problems,
) -> RetentionPolicy {
    let (policy, found) = crate::parts::retention::policy(retention);
    for (field, message) in found {
        problems.add(field, message);
    }
    policy
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
                new_chain: None,
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
            new_chain: None,
        };
        assert_eq!(continuous_settings(Some(&off), &mut problems), None);
    }

    #[test]
    fn new_chain_limits_have_defaults_and_bounds() {
        let limits = |every: Option<&str>, percent: Option<i32>| {
            let mut problems = Problems::default();
            let new_chain = NewChain {
                every: every.map(str::to_owned),
                change_percent: percent,
                max_revisions: None,
            };
            let limits = new_chain_limits(Some(&new_chain), &mut problems);
            (limits, format!("{:?}", problems.0))
        };
        assert_eq!(limits(None, None).0, ChainLimits::default());
        assert_eq!(
            limits(Some("12h"), Some(100)).0,
            ChainLimits {
                every: Duration::from_secs(12 * 3600),
                change_percent: 100,
                ..ChainLimits::default()
            }
        );
        assert_eq!(
            limits(Some("7d"), None).0.every,
            Duration::from_secs(7 * 86_400)
        );
        for bad in ["5m", "31d", "1w", "24", "1.5h"] {
            let (_, problems) = limits(Some(bad), None);
            assert!(problems.contains("newChain.every"), "{bad}: {problems}");
        }
        let mut problems = Problems::default();
        let few = NewChain {
            max_revisions: Some(5000),
            ..NewChain::default()
        };
        assert_eq!(
            new_chain_limits(Some(&few), &mut problems).max_revisions,
            5000
        );
        let too_few = NewChain {
            max_revisions: Some(10),
            ..NewChain::default()
        };
        new_chain_limits(Some(&too_few), &mut problems);
        assert!(format!("{:?}", problems.0).contains("newChain.maxRevisions"));
        for bad in [0, 1001, -5] {
            let (_, problems) = limits(None, Some(bad));
            assert!(
                problems.contains("newChain.changePercent"),
                "{bad}: {problems}"
            );
        }
    }
}
