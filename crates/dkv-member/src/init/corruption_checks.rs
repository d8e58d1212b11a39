//! etcd's data corruption checks, as each etcd version spells them in its
//! configuration file: the initial check (a member compares its hash with
//! its peers' before it serves, and refuses to start on a difference), the
//! periodic check (the leader compares every member's hash at one revision
//! and raises the CORRUPT alarm on a difference) and, where the version has
//! it, the compact-hash check (the leader compares the hashes members
//! computed at each compaction).
//!
//! The spellings were read off each release's `etcd --help`: 3.4.23 and
//! 3.5.16 have `experimental-initial-corrupt-check` and
//! `experimental-corrupt-check-time`; the compact-hash check arrived in
//! 3.5.5 (`experimental-compact-hash-check-enabled`); 3.6 turned the checks
//! into feature gates (`InitialCorruptCheck`, `CompactHashCheck`) and the
//! period into `corrupt-check-time`, deprecating the experimental names
//! that 3.7 removes.

use serde_json::{Value, json};

use crate::etcd_version::EtcdVersion;

/// How often the leader compares every member's hash by default
/// (`spec.etcd.corruptCheckInterval`). Each check hashes the whole keyspace
/// on every member, so it is not run often; the compact-hash check (3.5.5+)
/// catches a divergence at every compaction in between.
#[cfg(test)]
const PERIODIC_CHECK: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// The first 3.5 release with the compact-hash check.
const COMPACT_HASH_CHECK_SINCE: EtcdVersion = EtcdVersion::new(3, 5, 5);
/// The first release whose checks are feature gates.
const FEATURE_GATES_SINCE: EtcdVersion = EtcdVersion::new(3, 6, 0);

/// The configuration-file settings that turn every corruption check
/// `version` has on, with the periodic check every `period`.
pub fn settings(version: EtcdVersion, period: std::time::Duration) -> Vec<(&'static str, Value)> {
    // etcd reads durations in its configuration file as Go's
    // `time.Duration` from JSON: a number of nanoseconds, not "5m".
    let nanos = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
    if version >= FEATURE_GATES_SINCE {
        return vec![
            (
                "feature-gates",
                json!("InitialCorruptCheck=true,CompactHashCheck=true"),
            ),
            ("corrupt-check-time", json!(nanos)),
        ];
    }
    let mut settings = vec![
        ("experimental-initial-corrupt-check", json!(true)),
        ("experimental-corrupt-check-time", json!(nanos)),
    ];
    if version >= COMPACT_HASH_CHECK_SINCE {
        settings.push(("experimental-compact-hash-check-enabled", json!(true)));
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(version: EtcdVersion) -> Vec<&'static str> {
        settings(version, PERIODIC_CHECK)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    #[test]
    fn each_version_gets_the_checks_it_has_under_its_own_names() {
        let v = EtcdVersion::new;
        let old = [
            "experimental-initial-corrupt-check",
            "experimental-corrupt-check-time",
        ];
        assert_eq!(keys(v(3, 4, 23)), old);
        assert_eq!(keys(v(3, 5, 4)), old);
        for version in [v(3, 5, 5), v(3, 5, 16), v(3, 5, 30)] {
            assert_eq!(
                keys(version),
                [
                    "experimental-initial-corrupt-check",
                    "experimental-corrupt-check-time",
                    "experimental-compact-hash-check-enabled"
                ]
            );
        }
        for version in [v(3, 6, 0), v(3, 6, 8), v(3, 7, 0)] {
            assert_eq!(keys(version), ["feature-gates", "corrupt-check-time"]);
        }
    }

    #[test]
    fn the_period_is_nanoseconds_as_etcd_reads_a_duration() {
        let period = settings(EtcdVersion::new(3, 5, 16), PERIODIC_CHECK)
            .into_iter()
            .find(|(k, _)| *k == "experimental-corrupt-check-time")
            .map(|(_, v)| v);
        assert_eq!(period, Some(json!(300_000_000_000u64)));
    }
}
