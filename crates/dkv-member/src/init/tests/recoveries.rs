//! Tests: quorum recovery epochs and the data a restore from backup staged.

use super::*;

#[test]
fn the_restore_steps_stage_where_member_init_looks() {
    use crate::layout::DATA_DIR;
    use crate::layout::{RESTORE_DIR, STAGING_DIR};
    assert_eq!(restore_dir(Path::new(DATA_DIR)), Path::new(RESTORE_DIR));
    assert_eq!(
        restore_dir(Path::new(DATA_DIR)).join("data"),
        Path::new(STAGING_DIR)
    );
}

/// A volume laid out as the restore steps leave it.
fn volume(staged: bool, data: bool) -> tempfile::TempDir {
    let volume = tempfile::tempdir().unwrap();
    if staged {
        std::fs::create_dir_all(volume.path().join("dkv-restore/data/member/snap")).unwrap();
        std::fs::write(volume.path().join("dkv-restore/data/member/restored"), "r").unwrap();
        std::fs::write(volume.path().join("dkv-restore/snapshot.db"), "s").unwrap();
    }
    if data {
        std::fs::create_dir_all(volume.path().join("data/member/snap")).unwrap();
        std::fs::write(volume.path().join("data/member/own"), "o").unwrap();
    }
    volume
}

#[test]
fn restored_data_becomes_the_data_of_a_member_without_any() {
    let v = volume(true, false);
    let data = v.path().join("data");
    let new = record(ClusterState::New, vec![recorded(0, false)]);
    adopt_restored_data("orders-0", &data, Some(&new)).unwrap();
    assert!(data.join("member/restored").is_file());
    assert!(!v.path().join("dkv-restore/data").exists());
    // Still creating: the snapshot stays for a pod that restarts.
    assert!(v.path().join("dkv-restore/snapshot.db").is_file());
}

#[test]
fn a_member_that_has_data_keeps_it_and_the_restored_copy_goes() {
    let v = volume(true, true);
    let data = v.path().join("data");
    let new = record(ClusterState::New, vec![recorded(0, true)]);
    adopt_restored_data("orders-0", &data, Some(&new)).unwrap();
    assert!(data.join("member/own").is_file());
    assert!(!data.join("member/restored").exists());
    assert!(!v.path().join("dkv-restore/data").exists());
}

#[test]
fn once_the_cluster_exists_the_restore_leftovers_are_removed() {
    let v = volume(false, true);
    std::fs::create_dir_all(v.path().join("dkv-restore")).unwrap();
    std::fs::write(v.path().join("dkv-restore/snapshot.db"), "s").unwrap();
    let data = v.path().join("data");
    let existing = record(ClusterState::Existing, vec![recorded(0, true)]);
    adopt_restored_data("orders-0", &data, Some(&existing)).unwrap();
    assert!(!v.path().join("dkv-restore").exists());
    assert!(data.join("member/own").is_file());
}

#[test]
fn an_unfinished_staging_directory_is_never_adopted() {
    // The restore tool failed halfway: no member/ directory in staging.
    let v = volume(false, false);
    std::fs::create_dir_all(v.path().join("dkv-restore/data/partial")).unwrap();
    let data = v.path().join("data");
    adopt_restored_data("orders-0", &data, None).unwrap();
    assert!(!data.exists());
}

#[test]
fn a_recovery_forces_the_survivor_once_and_sets_stale_data_aside() {
    let mut r = record(ClusterState::Existing, vec![recorded(0, true)]);
    assert_eq!(recovery("orders-0", true, None, Some(&r)), Recovery::None);
    r.epoch = Some("e1".into());
    r.recover_from = Some("orders-0".into());
    let force = Recovery::ForceNewCluster { epoch: "e1".into() };
    let stale = Recovery::StaleData { epoch: "e1".into() };
    assert_eq!(recovery("orders-0", true, None, Some(&r)), force);
    assert_eq!(recovery("orders-0", true, Some("e0"), Some(&r)), force);
    assert_eq!(
        recovery("orders-0", true, Some("e1"), Some(&r)),
        Recovery::None,
        "forced once: a restart under the same epoch starts normally"
    );
    assert_eq!(recovery("orders-1", true, None, Some(&r)), stale);
    assert_eq!(
        recovery("orders-1", true, Some("e1"), Some(&r)),
        Recovery::None
    );
    assert_eq!(
        recovery("orders-1", false, None, Some(&r)),
        Recovery::None,
        "nothing to set aside"
    );
    r.recover_from = None;
    assert_eq!(recovery("orders-0", true, Some("e0"), Some(&r)), stale);
}

#[test]
fn a_replaced_member_sets_its_old_data_aside_once_and_keeps_what_it_writes_after() {
    let v = volume(false, true);
    let data = v.path().join("data");
    let mut entry = recorded(1, false);
    entry.replacement = Some("replace-1700000000".to_owned());
    let replacing = record(ClusterState::Existing, vec![recorded(0, true), entry]);

    // Other members keep their data.
    let token = set_aside_for_replacement("orders-0", &data, Some(&replacing)).unwrap();
    assert_eq!(token, None);
    assert!(data.join("member/own").is_file());

    let token = set_aside_for_replacement("orders-1", &data, Some(&replacing)).unwrap();
    assert_eq!(token.as_deref(), Some("replace-1700000000"));
    assert!(!data.exists(), "the old data is moved, not copied");
    let aside = v.path().join("data.before-replace-1700000000");
    assert!(
        aside.join("member/own").is_file(),
        "moved aside, not deleted"
    );

    // The new member writes data; a later start under the same
    // replacement keeps it.
    std::fs::create_dir_all(data.join("member/snap")).unwrap();
    std::fs::write(data.join("member/new"), "n").unwrap();
    let again = set_aside_for_replacement("orders-1", &data, Some(&replacing)).unwrap();
    assert_eq!(again.as_deref(), Some("replace-1700000000"));
    assert!(data.join("member/new").is_file());

    // Once the replacement is over the record names none, and nothing moves.
    let done = record(
        ClusterState::Existing,
        vec![recorded(0, true), recorded(1, true)],
    );
    assert_eq!(
        set_aside_for_replacement("orders-1", &data, Some(&done)).unwrap(),
        None
    );
    assert!(data.join("member/new").is_file());
}
