//! The backup data path against every kind of object store dkv writes to,
//! each a real server on loopback reached through the settings a user puts
//! in the credentials Secret: S3 (moto, signatures checked), Azure Blob
//! Storage (Azurite, shared-key signatures checked, through
//! `AZURE_STORAGE_ENDPOINT`) and Google Cloud Storage (fake-gcs-server,
//! through `STORAGE_EMULATOR_HOST`; dkv writes to it through the JSON API,
//! a snapshot as one resumable upload). For each: an encrypted full backup
//! of several upload parts restores exactly its keys and only with its
//! key, and retention deletes it; a continuous backup restores to a
//! revision (base snapshot fetched, segments replayed), and an expired
//! chain is deleted whole while the current one is kept.
//!
//! What a server holds is checked with the test's own client, never
//! through dkv's store layer.

use std::time::Duration;

use dkv_backup::continuous::agent::{self, AgentSettings, Progress};
use dkv_backup::continuous::archive::{
    chain_location, continuous_location, plan_restore, read_bases,
};
use dkv_backup::continuous::chain::Target;
use dkv_backup::continuous::cutter::CutSettings;
use dkv_backup::continuous::replay::replay_plan;
use dkv_backup::continuous::retention::{ChainRetention, chain_ages, delete_chain, expired};
use dkv_backup::testing::{
    EtcdProcess, StoreKind, StoreServer, etcd_bin_dir, loopback_ip, restore_single_member,
    test_key, write_chain,
};
use dkv_backup::{
    BackupRequest, Category, Encoding, Key, Keyring, Location, MIN_PART_SIZE, RestoreTool, Store,
    UploadOptions, delete_artifact, fetch_artifact, take_backup,
};
use dkv_etcd::GrpcAdmin;
use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;

const KEYS: usize = 200;

/// Incompressible data beside the keys, so that the encrypted snapshot
/// takes several upload parts of [`MIN_PART_SIZE`].
const FILL_BYTES: usize = 12 << 20;

/// A distinct loopback group per store and scenario, so they run side by
/// side.
fn group(kind: StoreKind, scenario: u8) -> u8 {
    let store = match kind {
        StoreKind::S3 => 0,
        StoreKind::Azure => 1,
        StoreKind::Gcs => 2,
    };
    60 + scenario * 3 + store
}

fn encoding(byte: u8) -> Encoding {
    Encoding {
        compress: true,
        key: Some(Key::parse(&[byte; 32]).unwrap()),
    }
}

/// The object key of a URI in the server's bucket.
fn key_of(uri: &str) -> String {
    Location::parse(uri).unwrap().path().as_ref().to_owned()
}

/// Restores `snapshot` into a fresh single member at `ip`.
async fn restored_member(
    snapshot: &std::path::Path,
    dir: &std::path::Path,
    ip: &str,
) -> EtcdProcess {
    let bin = etcd_bin_dir("3.5");
    let data_dir = dir.join("restored");
    restore_single_member(
        &RestoreTool::for_version("3.5.16", &bin).unwrap(),
        snapshot,
        "restored",
        ip,
        "restored-token",
        &data_dir,
    )
    .await;
    let member = EtcdProcess::start(&bin, "restored", ip, &data_dir, "restored-token");
    member.wait_ready().await;
    member
}

/// An encrypted full backup of three upload parts: the server holds the
/// artifact and its record with the digest dkv reported; a restore from it holds exactly the keys
/// written, and needs the key; wrong credentials are refused (where the
/// server checks them) without the secret in the message; retention's
/// deletion leaves the bucket empty.
async fn full_backup_restores_and_is_deleted(kind: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    let server = StoreServer::start(kind, "dkv-backups");
    let source = EtcdProcess::start(
        &etcd_bin_dir("3.5"),
        "src-0",
        &loopback_ip(group(kind, 0), 0),
        &dir.path().join("source"),
        "source-token",
    );
    source.wait_ready().await;
    source.put_keys(KEYS).await;
    source.fill(FILL_BYTES).await;
    let admin = GrpcAdmin::new(vec![source.client_url.clone()], Duration::from_secs(5));
    let request = BackupRequest {
        namespace: "shop".to_owned(),
        cluster: "orders".to_owned(),
        destination: Location::parse(&server.uri("prod")).unwrap(),
        seed_endpoints: vec![source.client_url.clone()],
        taken_at: Timestamp::now(),
        upload: UploadOptions {
            part_size: MIN_PART_SIZE,
            parts_in_flight: 2,
        },
        encoding: encoding(0x5a),
    };

    if let StoreServer::Azure(azurite) = &server {
        let wrong = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ==";
        let err = take_backup(&admin, &azurite.config_with_key(wrong), &request)
            .await
            .unwrap_err();
        assert_eq!(err.category(), Category::Configuration, "{err}");
        let text = err.to_string();
        assert!(text.contains("AZURE_STORAGE_ACCOUNT_KEY"), "{text}");
        assert!(!text.contains(wrong), "{text}");
        assert!(!text.contains(&azurite.access_key), "{text}");
        assert_eq!(server.objects().await, Vec::<String>::new());
    }

    let config = server.config();
    let artifact = take_backup(&admin, &config, &request).await.unwrap();
    let prefix = format!("{}://dkv-backups/prod/shop/orders/orders-", kind.scheme());
    assert!(artifact.uri.starts_with(&prefix), "{artifact:?}");
    // Compressed or not is decided on the snapshot's first pages, whose
    // layout etcd decides (the filler does not compress, etcd's own pages
    // and free space may): either way the name says it and so does the
    // record. (backup.rs tests the decision itself.)
    let suffix = match artifact.compression.as_deref() {
        None => ".db.enc",
        Some("zstd") => ".db.zst.enc",
        Some(other) => panic!("compressed with {other}: {artifact:?}"),
    };
    assert!(artifact.uri.ends_with(suffix), "{artifact:?}");

    let key = key_of(&artifact.uri);
    assert_eq!(
        server.objects().await,
        vec![key.clone(), format!("{key}.json")]
    );
    let digest = server.digest(&key).await;
    assert_eq!(digest.size, artifact.size_bytes);
    assert!(
        artifact.size_bytes > 2 * MIN_PART_SIZE as u64,
        "three parts or more: {artifact:?}"
    );
    assert_eq!(digest.sha256, artifact.sha256);

    let no_key = fetch_artifact(
        &config,
        &artifact.uri,
        Some(&artifact.sha256),
        &Keyring::default(),
        &dir.path().join("no-key.db"),
    )
    .await
    .unwrap_err();
    assert!(no_key.to_string().contains("key"), "{no_key}");
    let keys = Keyring::from(encoding(0x5a).key.unwrap());
    let fetched = fetch_artifact(
        &config,
        &artifact.uri,
        Some(&artifact.sha256),
        &keys,
        &dir.path().join("fetch/snapshot.db"),
    )
    .await
    .unwrap();
    let restored =
        restored_member(&fetched.path, dir.path(), &loopback_ip(group(kind, 0), 1)).await;
    assert_eq!(
        restored.key_count().await,
        (KEYS + FILL_BYTES.div_ceil(1 << 20)) as i64
    );
    let expected: Vec<_> = (0..KEYS).map(test_key).collect();
    assert_eq!(restored.test_keys().await, expected);

    delete_artifact(&config, &artifact.uri).await.unwrap();
    assert_eq!(server.objects().await, Vec::<String>::new());
}

/// An encrypted continuous backup recorded by the agent restores to a
/// revision in the middle of its chain; an older chain past its age is
/// deleted whole (record, segments, base snapshot and its record) and the
/// current one kept.
async fn continuous_backup_restores_to_a_revision_and_expires(kind: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    let server = StoreServer::start(kind, "dkv-continuous");
    let source = EtcdProcess::start(
        &etcd_bin_dir("3.5"),
        "source",
        &loopback_ip(group(kind, 1), 0),
        &dir.path().join("source"),
        "source-token",
    );
    source.wait_ready().await;
    let mut writer = source.client().await;
    for i in 0..20 {
        writer
            .put(format!("before/{i:02}"), format!("{i}"), None)
            .await
            .unwrap();
    }
    let config = server.config();
    let destination = Location::parse(&server.uri("pitr")).unwrap();
    let settings = AgentSettings {
        namespace: "shop".into(),
        cluster: "orders".into(),
        destination: destination.clone(),
        endpoints: vec![source.client_url.clone()],
        cut: CutSettings {
            interval: Duration::from_millis(200),
            max_segment_bytes: 4096,
            ..CutSettings::default()
        },
        encoding: encoding(0x42),
    };
    let keys = Keyring::from(settings.encoding.key.clone().unwrap());

    let (stop, stopped) = watch::channel(false);
    let agent = {
        let etcd = GrpcAdmin::new(vec![source.client_url.clone()], Duration::from_secs(5));
        let (config, settings) = (config.clone(), settings.clone());
        tokio::spawn(async move {
            let mut progress = Vec::new();
            let result = agent::run(&etcd, &config, &settings, stopped, |p| progress.push(p)).await;
            (result, progress)
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (target, at_target) = source.write_around_a_target().await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.send(true).unwrap();
    let (result, progress) = agent.await.unwrap();
    result.unwrap();
    assert!(
        progress.iter().any(|p| matches!(p, Progress::Stored(_))),
        "{progress:?}"
    );

    // An older chain, a week old, beside it: for retention below.
    let week_ago = Timestamp::now() - SignedDuration::from_hours(24 * 7);
    let store = Store::open(&destination, &config).unwrap();
    let continuous = continuous_location(&destination, "shop", "orders");
    write_chain(&store, &destination, &continuous, "old", 1, week_ago).await;

    // Every object is encrypted, and all are in the bucket as listed by
    // the test's own client.
    let objects = server.objects().await;
    assert!(
        objects
            .iter()
            .any(|o| o.contains("/continuous/") && o.ends_with(".jsonl.zst.enc")),
        "{objects:?}"
    );
    assert!(
        objects.iter().any(|o| o.ends_with(".db.zst.enc")),
        "{objects:?}"
    );

    // Restore to the target revision: base fetched, segments replayed.
    let bases = read_bases(&store, &continuous).await.unwrap();
    assert_eq!(bases.len(), 2, "{bases:?}");
    let planned = plan_restore(&store, &continuous, &keys, Target::Revision(target))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        planned.base, bases[1],
        "the recorded chain, not the old one"
    );
    let snapshot = dir.path().join("base.db");
    fetch_artifact(&config, &planned.base.uri, None, &keys, &snapshot)
        .await
        .unwrap();
    let restored = restored_member(&snapshot, dir.path(), &loopback_ip(group(kind, 1), 1)).await;
    let into = GrpcAdmin::new(vec![restored.client_url.clone()], Duration::from_secs(5));
    let replayed = replay_plan(&into, &store, &planned, &keys, 0)
        .await
        .unwrap();
    assert_eq!(replayed.source_revision, target);
    assert!(replayed.events > 0, "{replayed:?}");
    assert_eq!(restored.key_values_at(0).await, at_target);

    // Retention: the old chain expires, the current one is the newest and
    // stays.
    let ages = chain_ages(&store, &continuous, &keys).await.unwrap();
    assert_eq!(ages.len(), 2, "{ages:?}");
    let keep = ChainRetention {
        max_age: Some(SignedDuration::from_hours(24)),
        max_chains: None,
    };
    let gone = expired(&ages, keep, Timestamp::now());
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(gone[0].chain, "old");
    delete_chain(&store, &config, &continuous, gone[0])
        .await
        .unwrap();
    let old_chain = format!("{}/", chain_location(&continuous, "old").path().as_ref());
    let current_record = format!("/{}/base.json", bases[1].chain);
    let left = server.objects().await;
    assert!(
        left.iter()
            .all(|o| !o.starts_with(&old_chain) && !o.starts_with("pitr/old.db")),
        "{left:?}"
    );
    assert!(
        left.iter().any(|o| o.ends_with(&current_record)),
        "{left:?}"
    );
    assert_eq!(
        left.len(),
        objects.len() - 5,
        "the old chain's 5 objects went: {left:?}"
    );
}

/// One test a store for each scenario, named `<store>_<scenario>`.
macro_rules! on_stores {
    ($scenario:ident: $($test:ident => $kind:expr),+) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            $scenario($kind).await;
        }
    )+};
}

on_stores!(full_backup_restores_and_is_deleted:
    s3_full_backup_restores_and_is_deleted => StoreKind::S3,
    azure_full_backup_restores_and_is_deleted => StoreKind::Azure,
    gcs_full_backup_restores_and_is_deleted => StoreKind::Gcs);
on_stores!(continuous_backup_restores_to_a_revision_and_expires:
    s3_continuous_backup_restores_to_a_revision_and_expires => StoreKind::S3,
    azure_continuous_backup_restores_to_a_revision_and_expires => StoreKind::Azure,
    gcs_continuous_backup_restores_to_a_revision_and_expires => StoreKind::Gcs);
