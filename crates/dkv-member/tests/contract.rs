//! The member side reads every released format of what the operator hands
//! it (`tests/contract/`, see `dkv_member::contract`): the membership
//! records of every build since records existed, and member-init's
//! arguments as the operator of the build before wrote them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use clap::Parser;
use dkv_member::init::{MemberInitArgs, Start, decide};
use dkv_member::message::InitMessage;
use dkv_member::record::{ClusterState, MembershipRecord};

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/contract")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the fixtures directory")
        .map(|e| e.expect("a fixture").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

#[derive(Parser)]
struct Dkv {
    #[command(subcommand)]
    command: dkv_member::Command,
}

/// member-init's arguments from a fixture, with what the pod's
/// environment gives (`POD_NAME`, `POD_NAMESPACE`, `POD_IP`).
fn member_init_args(fixture: &Path, member: &str) -> MemberInitArgs {
    let text = std::fs::read_to_string(fixture).expect("reading the fixture");
    let args = std::iter::once("dkv".to_owned())
        .chain(text.lines().map(str::to_owned))
        .chain([
            format!("--member={member}"),
            "--namespace=shop".to_owned(),
            "--pod-ip=10.0.0.7".to_owned(),
        ]);
    match Dkv::try_parse_from(args) {
        Ok(Dkv {
            command: dkv_member::Command::MemberInit(args),
        }) => args,
        Ok(_) => panic!("{} is not member-init's", fixture.display()),
        Err(err) => panic!("member-init refuses {}: {err}", fixture.display()),
    }
}

#[test]
fn member_init_takes_the_arguments_of_every_released_operator() {
    for fixture in fixtures("args") {
        let args = member_init_args(&fixture, "orders-1");
        assert_eq!(args.cluster, "orders", "{}", fixture.display());
        assert_eq!(args.bootstrap_size, 3, "{}", fixture.display());
        assert!(args.members_file.is_some(), "{}", fixture.display());
    }
}

#[test]
fn every_released_record_is_read_and_decides_as_written() {
    let args = member_init_args(&fixtures("args")[0], "orders-2");
    let restarting = member_init_args(&fixtures("args")[0], "orders-0");
    for fixture in fixtures("record") {
        let text = std::fs::read_to_string(&fixture).expect("reading the fixture");
        let record: MembershipRecord = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", fixture.display()));
        assert_eq!(record.contract, 1, "{}", fixture.display());
        assert_eq!(record.state, ClusterState::Existing);
        assert_eq!(record.members.len(), 3, "{}", fixture.display());
        assert_eq!(
            record.initial_cluster(),
            "orders-0=https://orders-0.orders-peer.shop.svc:2380,\
             orders-1=https://orders-1.orders-peer.shop.svc:2380,\
             orders-2=https://orders-2.orders-peer.shop.svc:2380"
        );
        // A member listed as not started, without data, joins; one with
        // data restarts from it.
        assert!(
            matches!(decide(&args, false, Some(&record)), Ok(Start::Join { .. })),
            "{}",
            fixture.display()
        );
        assert!(
            matches!(
                decide(&restarting, true, Some(&record)),
                Ok(Start::Restart { .. })
            ),
            "{}",
            fixture.display()
        );
    }
}

/// The newest fixture is what this build writes: a field renamed, dropped
/// or added without a fixture fails here (and needs a new contract
/// version when members of the build before would misread it).
#[test]
fn this_build_writes_the_newest_released_record_format() {
    let newest = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "tests/contract/record/v{}.json",
        dkv_member::contract::VERSION
    ));
    let text = std::fs::read_to_string(&newest).expect("the newest record fixture");
    let fixture: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let record: MembershipRecord = serde_json::from_value(fixture.clone()).expect("a record");
    let written = serde_json::to_value(&record).expect("serializing");
    assert_eq!(written, fixture);
}

/// Every released format of member-init's termination messages reads as
/// the message it is, and this build writes the newest one word for word
/// (the operator reads them, `dkv-operator`'s contract tests).
#[test]
fn every_released_termination_message_reads_back_and_this_build_writes_the_newest() {
    let newest = format!("v{}.txt", dkv_member::contract::VERSION);
    for fixture in fixtures("messages") {
        let text = std::fs::read_to_string(&fixture).expect("reading the fixture");
        let mut kinds = Vec::new();
        for line in text.lines() {
            let message = InitMessage::parse(line)
                .unwrap_or_else(|| panic!("{}: {line:?} does not read", fixture.display()));
            if fixture.ends_with(&newest) {
                assert_eq!(message.to_string(), line, "{}", fixture.display());
            }
            kinds.push(std::mem::discriminant(&message));
        }
        kinds.dedup();
        assert_eq!(
            kinds.len(),
            4,
            "{}: one line of each kind",
            fixture.display()
        );
    }
}

/// The record of a cluster that joins a running one (`spec.bootstrap.join`,
/// since 2026-12-07) lists the members that were there before, by their
/// etcd names and peer URLs, beside dkv's: its first member, without data,
/// joins with all of them (etcd checks a joining member's
/// `--initial-cluster` against the running member list). Written in
/// contract 1's fields only, so members of the builds before read it the
/// same way.
#[test]
fn an_adoption_record_makes_dkvs_first_member_join_the_running_members() {
    let args = member_init_args(&fixtures("args")[0], "orders-0");
    for fixture in fixtures("adoption") {
        let text = std::fs::read_to_string(&fixture).expect("reading the fixture");
        let record: MembershipRecord = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", fixture.display()));
        assert_eq!(record.contract, 1, "{}", fixture.display());
        match decide(&args, false, Some(&record)) {
            Ok(Start::Join { initial_cluster }) => assert_eq!(
                initial_cluster,
                "etcd-a=https://10.0.0.11:2380,etcd-b=https://10.0.0.12:2380,\
                 etcd-c=https://10.0.0.13:2380,\
                 orders-0=https://orders-0.orders-peer.shop.svc:2380",
                "{}",
                fixture.display()
            ),
            other => panic!("{}: {other:?}", fixture.display()),
        }
    }
}
