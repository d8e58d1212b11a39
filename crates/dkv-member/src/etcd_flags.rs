//! The etcd flags dkv sets itself, in one list, and how a user's
//! `spec.etcd.extraArgs` become settings of a member's configuration file.
//!
//! Validation refuses an extra argument that names a flag of [`OWNED`];
//! `member_init` writes every other one into the configuration file. The
//! member-init tests check that every key the configuration builder writes
//! is listed here, so that a flag dkv starts setting cannot be overridden
//! by an extra argument.

use serde_json::Value;

/// Every etcd flag dkv sets or depends on, with what to use instead.
pub const OWNED: &[(&str, &str)] = &[
    // The member's identity and the cluster it belongs to.
    ("name", MEMBERSHIP),
    ("initial-cluster", MEMBERSHIP),
    ("initial-cluster-state", MEMBERSHIP),
    ("initial-cluster-token", MEMBERSHIP),
    (
        "force-new-cluster",
        "dkv sets it itself for a quorum recovery: use spec.recovery",
    ),
    ("strict-reconfig-check", MEMBERSHIP),
    ("discovery", MEMBERSHIP),
    ("discovery-srv", MEMBERSHIP),
    ("discovery-srv-name", MEMBERSHIP),
    ("discovery-fallback", MEMBERSHIP),
    ("discovery-proxy", MEMBERSHIP),
    ("discovery-token", MEMBERSHIP),
    ("discovery-endpoints", MEMBERSHIP),
    // Where it keeps its data.
    ("data-dir", "the member's volume is spec.storage"),
    ("wal-dir", "the member's volume is spec.storage"),
    // Where it listens and what it advertises.
    ("listen-peer-urls", URLS),
    ("listen-client-urls", URLS),
    ("listen-client-http-urls", URLS),
    ("listen-metrics-urls", URLS),
    ("initial-advertise-peer-urls", URLS),
    ("advertise-client-urls", URLS),
    // Transport security and client certificates.
    ("client-transport-security", TLS),
    ("peer-transport-security", TLS),
    ("cert-file", TLS),
    ("key-file", TLS),
    ("trusted-ca-file", TLS),
    ("client-cert-auth", TLS),
    ("client-crl-file", TLS),
    ("client-cert-file", TLS),
    ("client-key-file", TLS),
    ("auto-tls", TLS),
    ("peer-cert-file", TLS),
    ("peer-key-file", TLS),
    ("peer-trusted-ca-file", TLS),
    ("peer-client-cert-auth", TLS),
    ("peer-crl-file", TLS),
    ("peer-client-cert-file", TLS),
    ("peer-client-key-file", TLS),
    ("peer-auto-tls", TLS),
    ("peer-cert-allowed-cn", TLS),
    ("peer-cert-allowed-hostname", TLS),
    // Authentication: dkv's root user signs in with etcd's default tokens.
    (
        "auth-token",
        "dkv's authentication (spec.auth) uses etcd's default simple tokens",
    ),
    // Logging: dkv reads the member's log on stderr.
    ("logger", "dkv reads etcd's structured log (zap) on stderr"),
    (
        "log-outputs",
        "dkv reads etcd's structured log (zap) on stderr",
    ),
    ("log-level", "use spec.etcd.logLevel"),
    ("debug", "use spec.etcd.logLevel: debug"),
    // The configuration file itself.
    ("config-file", "dkv writes the member's configuration file"),
    // The settings of spec.etcd's own fields.
    ("quota-backend-bytes", "use spec.etcd.quotaBackendBytes"),
    ("auto-compaction-mode", "use spec.etcd.autoCompactionMode"),
    (
        "auto-compaction-retention",
        "use spec.etcd.autoCompactionRetention",
    ),
    ("heartbeat-interval", "use spec.etcd.heartbeatInterval"),
    ("election-timeout", "use spec.etcd.electionTimeout"),
    ("snapshot-count", "use spec.etcd.snapshotCount"),
    ("max-request-bytes", "use spec.etcd.maxRequestBytes"),
    ("max-txn-ops", "use spec.etcd.maxTxnOps"),
    ("pre-vote", "dkv turns pre-vote on for every member"),
    // The corruption checks, as each version spells them
    // (member_init::corruption_checks).
    ("experimental-initial-corrupt-check", CORRUPTION),
    ("experimental-corrupt-check-time", CORRUPTION),
    ("experimental-compact-hash-check-enabled", CORRUPTION),
    ("corrupt-check-time", CORRUPTION),
    (
        "feature-gates",
        "dkv sets etcd's feature gates for its corruption checks (spec.etcd.corruptCheckInterval)",
    ),
];

const MEMBERSHIP: &str = "dkv manages the membership (spec.size)";
const URLS: &str = "dkv sets the member's URLs from its pod and the peer Service";
const TLS: &str = "use spec.tls";
const CORRUPTION: &str = "use spec.etcd.corruptCheckInterval";

/// Why dkv refuses `name` as an extra argument, if it sets that flag.
pub fn owner_of(name: &str) -> Option<&'static str> {
    OWNED
        .iter()
        .find(|(owned, _)| *owned == name)
        .map(|(_, why)| *why)
}

/// Whether `name` is spelled as etcd spells a flag: lowercase words of
/// letters and digits joined by single hyphens, no leading `--`.
pub fn is_flag_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('-').all(|word| {
            !word.is_empty()
                && word
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// An extra argument's value as etcd reads it from its configuration file,
/// where a setting has its type: `true`/`false` a boolean, a number a
/// number, a Go duration with a unit (`1h`, `500ms`) a number of
/// nanoseconds (how a Go `time.Duration` reads from JSON), anything else
/// a string.
pub fn config_value(text: &str) -> Value {
    match text {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(n) = text.parse::<i64>() {
        return Value::from(n);
    }
    if let Ok(n) = text.parse::<u64>() {
        return Value::from(n);
    }
    if text.bytes().any(|b| b.is_ascii_alphabetic())
        && let Ok(nanos) = go_parse_duration::parse_duration(text)
    {
        return Value::from(nanos);
    }
    if let Ok(x) = text.parse::<f64>()
        && x.is_finite()
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return Value::from(x);
    }
    Value::String(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flag_names_are_lowercase_words_joined_by_hyphens() {
        for ok in [
            "grpc-keepalive-interval",
            "max-concurrent-streams",
            "v2-deprecated",
        ] {
            assert!(is_flag_name(ok), "{ok}");
        }
        for bad in [
            "",
            "--data-dir",
            "Max-Txn",
            "max_txn_ops",
            "a--b",
            "-a",
            "a-",
            "a=b",
            "a b",
        ] {
            assert!(!is_flag_name(bad), "{bad}");
        }
    }

    #[test]
    fn values_take_the_type_etcd_reads_from_its_configuration_file() {
        assert_eq!(config_value("true"), json!(true));
        assert_eq!(config_value("false"), json!(false));
        assert_eq!(config_value("100"), json!(100));
        assert_eq!(config_value("0"), json!(0));
        assert_eq!(config_value("1h"), json!(3_600_000_000_000_i64));
        assert_eq!(config_value("500ms"), json!(500_000_000));
        assert_eq!(config_value("0.5"), json!(0.5));
        assert_eq!(config_value("extensive"), json!("extensive"));
        assert_eq!(config_value("TLS1.3"), json!("TLS1.3"));
        assert_eq!(config_value("*.example.com"), json!("*.example.com"));
        assert_eq!(config_value(""), json!(""));
    }

    #[test]
    fn every_owned_flag_is_listed_once_and_well_formed() {
        let mut seen = std::collections::BTreeSet::new();
        for (name, why) in OWNED {
            assert!(is_flag_name(name), "{name}");
            assert!(seen.insert(*name), "{name} listed twice");
            assert!(!why.is_empty());
        }
    }
}
