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
