//! Tests: the etcd configuration each start renders.

use super::*;

#[test]
fn the_configuration_uses_no_flag_etcd_3_6_removed_or_deprecated() {
    // etcd 3.6 removed the v2 store and v2v3 flags and deprecated the
    // experimental- ones: members must start on 3.6 with the same file.
    let mut tls = args("orders-1");
    tls.peer_tls = true;
    tls.client_tls = true;
    for member in [args("orders-0"), tls] {
        let start = decide(&member, false, None).unwrap_or_else(|e| panic!("{e}"));
        let config = render_config(&member, &start).unwrap_or_else(|e| panic!("{e}"));
        let keys: Vec<&String> = config
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        assert!(!keys.is_empty());
        for key in keys {
            assert!(
                !key.starts_with("experimental-")
                    && !key.starts_with("enable-v2")
                    && !key.starts_with("proxy"),
                "{key}"
            );
        }
    }
}

#[test]
fn members_run_the_corruption_checks_of_their_version() {
    let mut member = args("orders-0");
    let start = decide(&member, false, None).unwrap_or_else(|e| panic!("{e}"));
    for (version, on) in [
        ("3.4.23", "experimental-initial-corrupt-check"),
        ("3.5.16", "experimental-compact-hash-check-enabled"),
    ] {
        member.etcd_version = Some(version.to_owned());
        let config = render_config(&member, &start).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config[on], true, "{version}: {config}");
        assert_eq!(
            config["experimental-corrupt-check-time"], 300_000_000_000u64,
            "{version}"
        );
    }
    member.etcd_version = Some("3.6.5".to_owned());
    let config = render_config(&member, &start).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        config["feature-gates"],
        "InitialCorruptCheck=true,CompactHashCheck=true"
    );
    member.etcd_version = Some("3.5".to_owned());
    assert!(render_config(&member, &start).is_err());
}

#[test]
fn tls_transports_get_https_urls_and_require_certificates() {
    let mut tls = args("orders-1");
    tls.peer_tls = true;
    tls.client_tls = true;
    let start = decide(&tls, false, None).unwrap_or_else(|e| panic!("{e}"));
    let config = render_config(&tls, &start).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config["listen-peer-urls"], "https://10.0.0.7:2380");
    assert_eq!(config["listen-client-urls"], "https://10.0.0.7:2379");
    assert_eq!(config["listen-metrics-urls"], "http://10.0.0.7:2381");
    assert_eq!(
        config["initial-advertise-peer-urls"],
        "https://orders-1.orders-peer.shop.svc:2380"
    );
    assert!(
        config["initial-cluster"]
            .as_str()
            .is_some_and(|c| c.starts_with("orders-0=https://orders-0.orders-peer.shop.svc:2380,")),
        "{config}"
    );
    for side in ["peer-transport-security", "client-transport-security"] {
        assert_eq!(config[side]["client-cert-auth"], true, "{side}");
        assert_eq!(config[side]["cert-file"], "/etc/dkv/tls/member/tls.crt");
        assert_eq!(
            config[side]["trusted-ca-file"],
            "/etc/dkv/tls/member/ca.crt"
        );
    }

    // Two certificates: each transport reads its own directory.
    tls.peer_tls_dir = Some(PathBuf::from("/etc/dkv/tls/peer"));
    tls.client_tls_dir = Some(PathBuf::from("/etc/dkv/tls/server"));
    let split = render_config(&tls, &start).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        split["peer-transport-security"]["key-file"],
        "/etc/dkv/tls/peer/tls.key"
    );
    assert_eq!(
        split["client-transport-security"]["trusted-ca-file"],
        "/etc/dkv/tls/server/ca.crt"
    );

    let plain = render_config(&args("orders-1"), &start).unwrap_or_else(|e| panic!("{e}"));
    assert!(plain.get("peer-transport-security").is_none());
    assert!(plain.get("client-transport-security").is_none());
}

#[test]
fn a_fresh_initial_member_bootstraps_with_the_full_member_list() {
    let start = decide(&args("orders-1"), false, None).unwrap_or_else(|e| panic!("{e}"));
    let config = render_config(&args("orders-1"), &start).unwrap_or_default();
    assert_eq!(config["name"], "orders-1");
    assert_eq!(config["initial-cluster-state"], "new");
    assert_eq!(config["initial-cluster-token"], "shop-orders-uid1");
    assert_eq!(config["initial-cluster"], THREE);
    assert_eq!(config["listen-client-urls"], "http://10.0.0.7:2379");
    assert_eq!(config["listen-peer-urls"], "http://10.0.0.7:2380");
    assert_eq!(config["listen-metrics-urls"], "http://10.0.0.7:2381");
    assert_eq!(
        config["advertise-client-urls"],
        "http://orders-1.orders-peer.shop.svc:2379"
    );
    assert_eq!(
        config["initial-advertise-peer-urls"],
        "http://orders-1.orders-peer.shop.svc:2380"
    );
    assert_eq!(config["quota-backend-bytes"], 1024);
}

#[test]
fn foreign_pod_names_are_rejected() {
    let start = Start::Bootstrap {
        initial_cluster: String::new(),
    };
    assert!(render_config(&args("billing-0"), &start).is_err());
}

/// `args` with every optional `spec.etcd` setting given.
fn tuned(member: &str) -> MemberInitArgs {
    let mut tuned = args(member);
    tuned.heartbeat_interval_ms = Some(250);
    tuned.election_timeout_ms = Some(2500);
    tuned.snapshot_count = Some(5000);
    tuned.max_request_bytes = Some(4096);
    tuned.max_txn_ops = Some(4);
    tuned.log_level = Some("warn".into());
    tuned.extra_args = vec![
        "grpc-keepalive-interval=1h".into(),
        "max-concurrent-streams=100".into(),
    ];
    tuned
}

#[test]
fn etcd_settings_are_written_only_when_given() {
    let start = decide(&args("orders-0"), false, None).unwrap_or_else(|e| panic!("{e}"));
    let plain = render_config(&args("orders-0"), &start).unwrap_or_else(|e| panic!("{e}"));
    for key in [
        "heartbeat-interval",
        "election-timeout",
        "snapshot-count",
        "max-request-bytes",
        "max-txn-ops",
        "log-level",
        "grpc-keepalive-interval",
    ] {
        assert!(plain.get(key).is_none(), "{key} written unasked: {plain}");
    }
    let config = render_config(&tuned("orders-0"), &start).unwrap_or_else(|e| panic!("{e}"));
    // etcd reads both timings in milliseconds from its configuration file.
    assert_eq!(config["heartbeat-interval"], 250);
    assert_eq!(config["election-timeout"], 2500);
    assert_eq!(config["snapshot-count"], 5000);
    assert_eq!(config["max-request-bytes"], 4096);
    assert_eq!(config["max-txn-ops"], 4);
    assert_eq!(config["log-level"], "warn");
    // A Go duration, as etcd reads one from its configuration file.
    assert_eq!(config["grpc-keepalive-interval"], 3_600_000_000_000_u64);
    assert_eq!(config["max-concurrent-streams"], 100);
}

#[test]
fn an_extra_arg_never_replaces_a_setting_of_dkv() {
    let start = decide(&args("orders-0"), false, None).unwrap_or_else(|e| panic!("{e}"));
    for arg in [
        "data-dir=/tmp/elsewhere",
        "log-outputs=stdout",
        "no-equals-sign",
    ] {
        let mut member = args("orders-0");
        member.extra_args = vec![arg.to_owned()];
        assert!(render_config(&member, &start).is_err(), "{arg} accepted");
    }
}

/// Every setting dkv writes is in `etcd_flags::OWNED`, so that validation
/// refuses an extra argument naming it: rendered for every kind of start,
/// both transports, each etcd release's corruption checks and every
/// optional setting.
#[test]
fn every_setting_dkv_writes_is_one_extra_args_may_not_name() {
    let tls = || {
        let mut tls = tuned("orders-1");
        tls.peer_tls = true;
        tls.client_tls = true;
        tls
    };
    let mut written =
        std::collections::BTreeSet::from([crate::init::config::FORCE_NEW_CLUSTER.to_owned()]);
    for version in ["3.4.23", "3.5.4", "3.5.16", "3.6.16", "3.7.3"] {
        for member in [args("orders-0"), tuned("orders-0"), tls()] {
            let mut member = member;
            member.extra_args.clear();
            member.etcd_version = Some(version.to_owned());
            for has_data in [false, true] {
                let start = decide(&member, has_data, None).unwrap_or_else(|e| panic!("{e}"));
                let config = render_config(&member, &start).unwrap_or_else(|e| panic!("{e}"));
                written.extend(
                    config
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, _)| k.clone()),
                );
            }
        }
    }
    assert!(written.contains("peer-transport-security") && written.contains("feature-gates"));
    let unlisted: Vec<&String> = written
        .iter()
        .filter(|key| crate::etcd_flags::owner_of(key).is_none())
        .collect();
    assert!(
        unlisted.is_empty(),
        "dkv writes {unlisted:?}: list them in etcd_flags::OWNED"
    );
}
