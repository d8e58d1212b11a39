//! `spec.etcd`: the backend quota and auto-compaction settings, with etcd's
//! defaults filled in; the raft timings, limits and log level, checked as
//! etcd checks them; and the extra arguments, none of which may name a flag
//! dkv sets (`etcd_flags::OWNED`).

use std::time::Duration;

use dkv_api::distributedkv::v1beta1::{AutoCompactionMode, EtcdLogLevel, EtcdTuning};

use dkv_member::etcd_flags;

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
    let (heartbeat_interval, election_timeout) = raft_timings(&tuning, problems);
    let extra_args = extra_args(&tuning, problems);
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
    let max_request_bytes = tuning.max_request_bytes.and_then(|bytes| {
        let in_range = (MIN_REQUEST_BYTES..=quota.max(MIN_REQUEST_BYTES)).contains(&bytes);
        if !in_range {
            problems.add(
                "spec.etcd.maxRequestBytes",
                format!("must be between {MIN_REQUEST_BYTES} and spec.etcd.quotaBackendBytes ({quota}), got {bytes}; omit it for etcd's 1.5 MiB"),
            );
        }
        u64::try_from(bytes).ok().filter(|_| in_range)
    });
    EtcdSettings {
        quota_backend_bytes: quota,
        auto_compaction_mode: mode_name,
        auto_compaction_retention: retention,
        corrupt_check_interval: interval,
        heartbeat_interval,
        election_timeout,
        snapshot_count: at_least_one(
            tuning.snapshot_count,
            "spec.etcd.snapshotCount",
            "omit it for etcd's default",
            problems,
        ),
        max_request_bytes,
        max_txn_ops: at_least_one(
            tuning.max_txn_ops,
            "spec.etcd.maxTxnOps",
            "omit it for etcd's 128",
            problems,
        ),
        log_level: tuning.log_level.map(log_level_name),
        extra_args,
    }
}

/// The smallest `spec.etcd.maxRequestBytes`: below it even a small key and
/// value are refused.
const MIN_REQUEST_BYTES: i64 = 1024;
/// etcd's own heartbeat interval and election timeout, which a field left
/// out keeps.
const ETCD_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
const ETCD_ELECTION_TIMEOUT: Duration = Duration::from_millis(1000);
/// etcd refuses to start with an election timeout above 50 s (its
/// `maxElectionMs`).
const MAX_ELECTION_TIMEOUT: Duration = Duration::from_millis(50_000);
/// etcd refuses to start unless the election timeout is at least this many
/// heartbeat intervals.
const ELECTION_HEARTBEATS: u32 = 5;

/// `spec.etcd.heartbeatInterval` and `electionTimeout`, each parsed into a
/// whole number of milliseconds (what etcd takes), then checked together
/// as etcd checks them when it starts, a field left out counting as etcd's
/// default.
fn raft_timings(
    tuning: &EtcdTuning,
    problems: &mut Problems,
) -> (Option<Duration>, Option<Duration>) {
    let heartbeat = tuning.heartbeat_interval.as_deref().map(|text| {
        whole_millis(text).ok_or_else(|| {
            problems.add(
                "spec.etcd.heartbeatInterval",
                format!("{text:?} is not a duration of whole milliseconds, at least 1ms; use e.g. \"100ms\" or \"250ms\""),
            );
        })
    });
    let election = tuning.election_timeout.as_deref().map(|text| {
        whole_millis(text).ok_or_else(|| {
            problems.add(
                "spec.etcd.electionTimeout",
                format!("{text:?} is not a duration of whole milliseconds, at least 1ms; use e.g. \"1s\" or \"2500ms\""),
            );
        })
    });
    // Only fields that parsed (or were left out) are compared.
    let (Ok(heartbeat), Ok(election)) = (heartbeat.transpose(), election.transpose()) else {
        return (None, None);
    };
    let mut ok = true;
    if let Some(election) = election
        && election > MAX_ELECTION_TIMEOUT
    {
        ok = false;
        problems.add(
            "spec.etcd.electionTimeout",
            format!(
                "{}ms is above etcd's limit of 50s; set at most \"50s\"",
                election.as_millis()
            ),
        );
    }
    let (hb, el) = (
        heartbeat.unwrap_or(ETCD_HEARTBEAT_INTERVAL),
        election.unwrap_or(ETCD_ELECTION_TIMEOUT),
    );
    if el < hb * ELECTION_HEARTBEATS {
        ok = false;
        let least = (hb * ELECTION_HEARTBEATS).as_millis();
        let (hb_ms, el_ms) = (hb.as_millis(), el.as_millis());
        match (heartbeat.is_some(), election.is_some()) {
            (true, false) => problems.add(
                "spec.etcd.heartbeatInterval",
                format!("{hb_ms}ms needs an election timeout of at least 5 times it ({least}ms), but spec.etcd.electionTimeout is left at etcd's 1s; set spec.etcd.electionTimeout to at least \"{least}ms\" or the heartbeat interval to at most \"200ms\""),
            ),
            _ => problems.add(
                "spec.etcd.electionTimeout",
                format!("{el_ms}ms is less than 5 times spec.etcd.heartbeatInterval ({hb_ms}ms{}), as etcd requires; set it to at least \"{least}ms\" or lower the heartbeat interval", if heartbeat.is_some() { "" } else { ", etcd's default" }),
            ),
        }
    }
    if ok {
        (heartbeat, election)
    } else {
        (None, None)
    }
}

/// A Go duration that is a whole, positive number of milliseconds.
fn whole_millis(text: &str) -> Option<Duration> {
    let nanos = go_parse_duration::parse_duration(text).ok()?;
    let nanos = u64::try_from(nanos).ok()?;
    (nanos >= 1_000_000 && nanos.is_multiple_of(1_000_000)).then(|| Duration::from_nanos(nanos))
}

/// A count that must be at least 1, as a `u64`.
fn at_least_one(
    value: Option<i64>,
    field: &str,
    default: &str,
    problems: &mut Problems,
) -> Option<u64> {
    let value = value?;
    match u64::try_from(value) {
        Ok(n) if n >= 1 => Some(n),
        _ => {
            problems.add(field, format!("must be at least 1, got {value}; {default}"));
            None
        }
    }
}

/// How etcd spells a log level.
fn log_level_name(level: EtcdLogLevel) -> &'static str {
    match level {
        EtcdLogLevel::Debug => "debug",
        EtcdLogLevel::Info => "info",
        EtcdLogLevel::Warn => "warn",
        EtcdLogLevel::Error => "error",
        EtcdLogLevel::Panic => "panic",
        EtcdLogLevel::Fatal => "fatal",
    }
}

/// `spec.etcd.extraArgs`, each name checked: well formed, and not a flag
/// dkv sets itself.
fn extra_args(
    tuning: &EtcdTuning,
    problems: &mut Problems,
) -> std::collections::BTreeMap<String, String> {
    let mut accepted = std::collections::BTreeMap::new();
    for (name, value) in tuning.extra_args.iter().flatten() {
        let field = format!("spec.etcd.extraArgs.{name}");
        if let Some(bare) = name.strip_prefix("--")
            && etcd_flags::is_flag_name(bare)
        {
            problems.add(
                &field,
                format!("write the flag without its leading \"--\": {bare:?}"),
            );
        } else if !etcd_flags::is_flag_name(name) {
            problems.add(
                &field,
                format!("{name:?} is not an etcd flag name: lowercase letters and digits in words joined by single hyphens, without the leading \"--\", e.g. \"grpc-keepalive-interval\""),
            );
        } else if let Some(why) = etcd_flags::owner_of(name) {
            problems.add(
                &field,
                format!("dkv sets --{name} itself and it cannot be overridden: {why}"),
            );
        } else {
            accepted.insert(name.clone(), value.clone());
        }
    }
    accepted
}

/// Whether `text` is a duration etcd accepts (Go's `time.ParseDuration`,
/// such as `1h30m` or `1.5s`) and not negative.
fn is_go_duration(text: &str) -> bool {
    go_parse_duration::parse_duration(text).is_ok_and(|nanos| nanos >= 0)
}

#[cfg(test)]
mod tests {
    use super::super::FieldError;
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

    /// The settings and the fields of every problem found in `tuning`
    /// (JSON, as in the spec).
    fn checked(tuning: serde_json::Value) -> (EtcdSettings, Vec<FieldError>) {
        let tuning: EtcdTuning = serde_json::from_value(tuning).unwrap();
        let mut problems = Problems::default();
        let settings = etcd_settings(Some(&tuning), &mut problems);
        (settings, problems.0)
    }

    /// The one problem `tuning` has: its field and message.
    fn refusal(tuning: serde_json::Value) -> (String, String) {
        let (_, problems) = checked(tuning.clone());
        assert_eq!(problems.len(), 1, "{tuning}: {problems:?}");
        (problems[0].field.clone(), problems[0].message.clone())
    }

    #[test]
    fn settings_left_out_stay_etcds_own_and_are_not_written() {
        let (settings, problems) = checked(serde_json::json!({}));
        assert!(problems.is_empty());
        assert_eq!(settings.heartbeat_interval, None);
        assert_eq!(settings.election_timeout, None);
        assert_eq!(settings.snapshot_count, None);
        assert_eq!(settings.max_request_bytes, None);
        assert_eq!(settings.max_txn_ops, None);
        assert_eq!(settings.log_level, None);
        assert!(settings.extra_args.is_empty());
    }

    #[test]
    fn settings_are_parsed_once_into_their_types() {
        let (settings, problems) = checked(serde_json::json!({
            "heartbeatInterval": "250ms",
            "electionTimeout": "2.5s",
            "snapshotCount": 5000,
            "maxRequestBytes": 4194304,
            "maxTxnOps": 512,
            "logLevel": "warn",
            "extraArgs": {"grpc-keepalive-interval": "1h"},
        }));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            settings.heartbeat_interval,
            Some(Duration::from_millis(250))
        );
        assert_eq!(settings.election_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(settings.snapshot_count, Some(5000));
        assert_eq!(settings.max_request_bytes, Some(4_194_304));
        assert_eq!(settings.max_txn_ops, Some(512));
        assert_eq!(settings.log_level, Some("warn"));
        assert_eq!(
            settings
                .extra_args
                .get("grpc-keepalive-interval")
                .map(String::as_str),
            Some("1h")
        );
    }

    #[test]
    fn heartbeat_and_election_are_checked_together_as_etcd_checks_them() {
        let ok = |tuning: serde_json::Value| {
            let (settings, problems) = checked(tuning.clone());
            assert!(problems.is_empty(), "{tuning}: {problems:?}");
            (settings.heartbeat_interval, settings.election_timeout)
        };
        let ms = |n| Some(Duration::from_millis(n));
        assert_eq!(
            ok(serde_json::json!({"heartbeatInterval": "200ms"})),
            (ms(200), None)
        );
        assert_eq!(
            ok(serde_json::json!({"electionTimeout": "500ms"})),
            (None, ms(500))
        );
        assert_eq!(
            ok(serde_json::json!({"heartbeatInterval": "10s", "electionTimeout": "50s"})),
            (ms(10_000), ms(50_000))
        );

        // Too close to the heartbeat: the field the user set is named.
        let (field, message) = refusal(serde_json::json!({"heartbeatInterval": "300ms"}));
        assert_eq!(field, "spec.etcd.heartbeatInterval");
        assert!(
            message.contains("\"1500ms\"") && message.contains("spec.etcd.electionTimeout"),
            "{message}"
        );
        let (field, message) = refusal(serde_json::json!({"electionTimeout": "400ms"}));
        assert_eq!(field, "spec.etcd.electionTimeout");
        assert!(message.contains("at least \"500ms\""), "{message}");
        let (field, message) =
            refusal(serde_json::json!({"heartbeatInterval": "500ms", "electionTimeout": "2s"}));
        assert_eq!(field, "spec.etcd.electionTimeout");
        assert!(
            message.contains("5 times") && message.contains("\"2500ms\""),
            "{message}"
        );

        // etcd's cap.
        let (field, message) = refusal(serde_json::json!({"electionTimeout": "51s"}));
        assert_eq!(field, "spec.etcd.electionTimeout");
        assert!(message.contains("50s"), "{message}");

        // Not whole milliseconds, or not a duration at all.
        for (tuning, wanted) in [
            (
                serde_json::json!({"heartbeatInterval": "1500us"}),
                "spec.etcd.heartbeatInterval",
            ),
            (
                serde_json::json!({"heartbeatInterval": "0s"}),
                "spec.etcd.heartbeatInterval",
            ),
            (
                serde_json::json!({"heartbeatInterval": "100"}),
                "spec.etcd.heartbeatInterval",
            ),
            (
                serde_json::json!({"electionTimeout": "soon"}),
                "spec.etcd.electionTimeout",
            ),
        ] {
            let (field, message) = refusal(tuning);
            assert_eq!(field, wanted);
            assert!(message.contains("whole milliseconds"), "{message}");
        }
        // Both malformed: both named, nothing compared.
        let (settings, problems) =
            checked(serde_json::json!({"heartbeatInterval": "x", "electionTimeout": "y"}));
        assert_eq!(problems.len(), 2);
        assert_eq!(
            (settings.heartbeat_interval, settings.election_timeout),
            (None, None)
        );
    }

    #[test]
    fn counts_and_sizes_have_bounds_that_name_the_field() {
        for (tuning, wanted) in [
            (
                serde_json::json!({"snapshotCount": 0}),
                "spec.etcd.snapshotCount",
            ),
            (serde_json::json!({"maxTxnOps": -1}), "spec.etcd.maxTxnOps"),
            (
                serde_json::json!({"maxRequestBytes": 1023}),
                "spec.etcd.maxRequestBytes",
            ),
            (
                serde_json::json!({"quotaBackendBytes": 1048576, "maxRequestBytes": 2097152}),
                "spec.etcd.maxRequestBytes",
            ),
        ] {
            let (field, message) = refusal(tuning.clone());
            assert_eq!(field, wanted, "{tuning}");
            assert!(message.contains("omit it"), "{message}");
        }
    }

    #[test]
    fn extra_args_that_dkv_sets_or_that_are_malformed_are_refused_by_name() {
        for (name, says) in [
            ("data-dir", "spec.storage"),
            ("initial-cluster", "membership"),
            ("listen-client-urls", "URLs"),
            ("cert-file", "spec.tls"),
            ("client-cert-auth", "spec.tls"),
            ("auth-token", "spec.auth"),
            ("log-outputs", "stderr"),
            ("log-level", "spec.etcd.logLevel"),
            ("quota-backend-bytes", "spec.etcd.quotaBackendBytes"),
            ("heartbeat-interval", "spec.etcd.heartbeatInterval"),
            ("max-txn-ops", "spec.etcd.maxTxnOps"),
            ("feature-gates", "corruptCheckInterval"),
            ("experimental-corrupt-check-time", "corruptCheckInterval"),
        ] {
            let (field, message) = refusal(serde_json::json!({"extraArgs": {name: "x"}}));
            assert_eq!(field, format!("spec.etcd.extraArgs.{name}"));
            assert!(
                message.contains(&format!("--{name}")) && message.contains(says),
                "{message}"
            );
        }
        let (field, message) =
            refusal(serde_json::json!({"extraArgs": {"--max-concurrent-streams": "8"}}));
        assert_eq!(field, "spec.etcd.extraArgs.--max-concurrent-streams");
        assert!(message.contains("without its leading"), "{message}");
        for bad in ["Max-Streams", "max_streams", "max--streams", "a=b", ""] {
            let (field, message) = refusal(serde_json::json!({"extraArgs": {bad: "1"}}));
            assert_eq!(field, format!("spec.etcd.extraArgs.{bad}"));
            assert!(message.contains("not an etcd flag name"), "{message}");
        }
        // Every problem is reported, and the good ones kept.
        let (settings, problems) = checked(serde_json::json!({"extraArgs": {
            "data-dir": "/tmp", "name": "x", "max-concurrent-streams": "100",
        }}));
        assert_eq!(problems.len(), 2);
        assert_eq!(
            settings.extra_args.keys().collect::<Vec<_>>(),
            ["max-concurrent-streams"]
        );
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
