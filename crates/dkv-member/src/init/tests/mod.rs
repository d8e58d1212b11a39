//! Tests of `member-init`: fixtures (arguments, membership records), and the tests of each concern in the
//! submodules.

mod config;
mod decision;
mod recoveries;

use super::*;
use crate::message::InitMessage;
use crate::record::{ClusterState, RecordedMember};
use std::path::PathBuf;

fn args(member: &str) -> MemberInitArgs {
    MemberInitArgs {
        cluster: "orders".into(),
        member: member.into(),
        namespace: "shop".into(),
        pod_ip: "10.0.0.7".into(),
        peer_service: "orders-peer".into(),
        bootstrap_size: 3,
        initial_cluster_token: "shop-orders-uid1".into(),
        data_dir: PathBuf::from("/var/lib/etcd/data"),
        config_file: PathBuf::from("/var/run/dkv/etcd.conf.yml"),
        quota_backend_bytes: 1024,
        auto_compaction_mode: "periodic".into(),
        auto_compaction_retention: "1h".into(),
        etcd_version: None,
        corrupt_check_interval: "5m".into(),
        heartbeat_interval_ms: None,
        election_timeout_ms: None,
        snapshot_count: None,
        max_request_bytes: None,
        max_txn_ops: None,
        log_level: None,
        extra_args: Vec::new(),
        members_file: None,
        termination_log: PathBuf::from("/dev/null"),
        peer_tls: false,
        client_tls: false,
        tls_dir: PathBuf::from("/etc/dkv/tls/member"),
        peer_tls_dir: None,
        client_tls_dir: None,
    }
}

fn recorded(ordinal: i32, started: bool) -> RecordedMember {
    RecordedMember {
        name: format!("orders-{ordinal}"),
        peer_url: format!("http://orders-{ordinal}.orders-peer.shop.svc:2380"),
        started,
        replacement: None,
    }
}

fn record(state: ClusterState, members: Vec<RecordedMember>) -> MembershipRecord {
    MembershipRecord {
        contract: crate::contract::VERSION,
        state,
        members,
        epoch: None,
        recover_from: None,
    }
}

const THREE: &str = "orders-0=http://orders-0.orders-peer.shop.svc:2380,orders-1=http://orders-1.orders-peer.shop.svc:2380,orders-2=http://orders-2.orders-peer.shop.svc:2380";
