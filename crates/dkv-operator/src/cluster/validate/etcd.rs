//! `spec.etcd`: the backend quota and auto-compaction settings, with etcd's defaults filled in.

use dkv_api::distributedkv::v1beta1::{AutoCompactionMode, EtcdTuning};

use super::{EtcdSettings, Problems};

/// etcd's default backend quota (2 GiB), which we also default to.
pub const DEFAULT_QUOTA_BACKEND_BYTES: i64 = 2 * 1024 * 1024 * 1024;
/// etcd warns above 8 GiB; larger databases make snapshots and restarts slow.
pub const MAX_QUOTA_BACKEND_BYTES: i64 = 8 * 1024 * 1024 * 1024;

/// How often the leader compares the members' hashes, unless
/// `spec.etcd.corruptCheckInterval` says otherwise.
pub const DEFAULT_CORRUPT_CHECK_INTERVAL: &str = "5m";
/// Bounds of `spec.etcd.corruptCheckInterval`, in nanoseconds: each check
/// hashes the whole keyspace on every member.
const CORRUPT_CHECK_RANGE: (i64, i64) = (5_000_000_000, 86_400_000_000_000);

/// `spec.etcd` with every field the operator defaults filled in; fields that
/// are set stay as they are (valid or not).
pub fn etcd_tuning_with_defaults(tuning: Option<&EtcdTuning>) -> EtcdTuning {
    let mut tuning = tuning.cloned().unwrap_or_default();
    let mode = *tuning
        .auto_compaction_mode
        .get_or_insert(AutoCompactionMode::Periodic);
    tuning
        .quota_backend_bytes
        .get_or_insert(DEFAULT_QUOTA_BACKEND_BYTES);
    tuning
        .auto_compaction_retention
        .get_or_insert_with(|| default_compaction_retention(mode).to_owned());
    tuning
}

/// etcd's own default retention per compaction mode.
fn default_compaction_retention(mode: AutoCompactionMode) -> &'static str {
    match mode {
        AutoCompactionMode::Periodic => "1h",
        AutoCompactionMode::Revision => "1000",
    }
}

pub(super) fn etcd_settings(tuning: Option<&EtcdTuning>, problems: &mut Problems) -> EtcdSettings {
    let tuning = etcd_tuning_with_defaults(tuning);
    let quota = tuning
        .quota_backend_bytes
        .unwrap_or(DEFAULT_QUOTA_BACKEND_BYTES);
    if quota <= 0 || quota > MAX_QUOTA_BACKEND_BYTES {
        problems.add(
            "spec.etcd.quotaBackendBytes",
            format!("must be between 1 and {MAX_QUOTA_BACKEND_BYTES} (8 GiB), got {quota}; omit it for the 2 GiB default"),
        );
    }
    let mode = tuning
        .auto_compaction_mode
        .unwrap_or(AutoCompactionMode::Periodic);
    let mode_name = match mode {
        AutoCompactionMode::Periodic => "periodic",
        AutoCompactionMode::Revision => "revision",
    };
    let retention = tuning
        .auto_compaction_retention
        .unwrap_or_else(|| default_compaction_retention(mode).to_owned());
    let retention_ok = match mode {
        // etcd reads a bare number as hours in periodic mode.
        AutoCompactionMode::Periodic => {
            is_go_duration(&retention) || retention.parse::<u64>().is_ok()
        }
        AutoCompactionMode::Revision => retention.parse::<u64>().is_ok(),
    };
    if !retention_ok {
        problems.add(
            "spec.etcd.autoCompactionRetention",
            match mode {
                AutoCompactionMode::Periodic => {
                    format!("{retention:?} is not a duration; use e.g. \"1h\" or \"30m\"")
                }
                AutoCompactionMode::Revision => {
                    format!(
                        "{retention:?} must be a revision count in revision mode, e.g. \"1000\""
                    )
                }
            },
        );
    }
    let interval = tuning
        .corrupt_check_interval
        .unwrap_or_else(|| DEFAULT_CORRUPT_CHECK_INTERVAL.to_owned());
    let in_range = go_parse_duration::parse_duration(&interval)
        .is_ok_and(|nanos| (CORRUPT_CHECK_RANGE.0..=CORRUPT_CHECK_RANGE.1).contains(&nanos));
    if !in_range {
        problems.add(
            "spec.etcd.corruptCheckInterval",
            format!("{interval:?} is not a duration from 5s to 24h; use e.g. \"5m\" or \"1h\""),
        );
    }
    EtcdSettings {
        quota_backend_bytes: quota,
        auto_compaction_mode: mode_name,
        auto_compaction_retention: retention,
        corrupt_check_interval: interval,
    }
}

/// Whether `text` is a duration etcd accepts (Go's `time.ParseDuration`,
/// such as `1h30m` or `1.5s`) and not negative.
fn is_go_duration(text: &str) -> bool {
    go_parse_duration::parse_duration(text).is_ok_and(|nanos| nanos >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corruption_check_interval_is_a_bounded_duration() {
        let check = |interval: Option<&str>| {
            let mut problems = Problems::default();
            let tuning = EtcdTuning {
                corrupt_check_interval: interval.map(str::to_owned),
                ..EtcdTuning::default()
            };
            let settings = etcd_settings(Some(&tuning), &mut problems);
            (settings.corrupt_check_interval, problems.0.len())
        };
        assert_eq!(check(None), ("5m".to_owned(), 0));
        assert_eq!(check(Some("30s")), ("30s".to_owned(), 0));
        assert_eq!(check(Some("24h")).1, 0);
        for bad in ["1s", "25h", "5", "soon"] {
            assert_eq!(check(Some(bad)).1, 1, "{bad}");
        }
    }

    #[test]
    fn go_durations() {
        for ok in ["1h", "30m", "1h30m", "1.5s", "500ms"] {
            assert!(is_go_duration(ok), "{ok}");
        }
        for bad in ["", "h", "1d", "1 h", "-1h"] {
            assert!(!is_go_duration(bad), "{bad}");
        }
    }
}
