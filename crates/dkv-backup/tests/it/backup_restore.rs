//! The backup data path against real etcd (3.5 and 3.4) and a real S3
//! server (moto, with signature checking on): back up, check the object
//! independently, fetch with verification, restore into a fresh member and
//! find exactly the keys that were written, in a new cluster. Corruption,
//! wrong credentials and broken streams are refused and leave nothing
//! behind.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use dkv_backup::testing::{
    EtcdProcess, MotoServer, etcd_bin_dir, loopback_ip, restore_single_member, test_key,
};
use dkv_backup::{
    Artifact, BackupRequest, Category, Encoding, Error, Key, Keyring, Location, MemberRestore,
    RestoreTool, StoreConfig, StoreErrorKind, UploadOptions, choose_snapshot_source,
    delete_artifact, fetch_artifact, restore_member, take_backup, upload_snapshot,
};
use dkv_etcd::GrpcAdmin;

const KEYS: usize = 300;

fn expected_keys(count: usize) -> Vec<(String, String)> {
    (0..count).map(test_key).collect()
}

struct Source {
    member: EtcdProcess,
    admin: GrpcAdmin,
    cluster_id: u64,
}

async fn source_cluster(minor: &str, dir: &Path, group: u8) -> Source {
    let member = EtcdProcess::start(
        &etcd_bin_dir(minor),
        "src-0",
        &loopback_ip(group, 0),
        &dir.join("source"),
        "source-token",
    );
    let admin = GrpcAdmin::new(vec![member.client_url.clone()], Duration::from_secs(5));
    let status = member.wait_ready().await;
    member.put_keys(KEYS).await;
    // Only the test keys: a restore must hold exactly these.
    assert_eq!(member.key_count().await, KEYS as i64);
    Source {
        cluster_id: status.cluster_id,
        member,
        admin,
    }
}

fn request(source: &Source, destination: &str) -> BackupRequest {
    BackupRequest {
        namespace: "shop".to_owned(),
        cluster: "orders".to_owned(),
        destination: Location::parse(destination).unwrap(),
        seed_endpoints: vec![source.member.client_url.clone()],
        taken_at: jiff::Timestamp::now(),
        upload: UploadOptions::default(),
        encoding: Encoding::default(),
    }
}

/// The object key of an artifact in the moto bucket.
fn key_of(artifact: &Artifact) -> String {
    Location::parse(&artifact.uri)
        .unwrap()
        .path()
        .as_ref()
        .to_owned()
}

/// Restores `snapshot` into a fresh single member and returns its keys and
/// cluster ID.
async fn restore_and_read(
    minor: &str,
    snapshot: &Path,
    dir: &Path,
    group: u8,
) -> (Vec<(String, String)>, u64) {
    let bin = etcd_bin_dir(minor);
    // The release each directory of the tools holds (3.6 and 3.7 are
    // installed by their full version).
    let version = match minor {
        "3.4" => "3.4.23",
        "3.5" => "3.5.16",
        release => release,
    };
    let tool = RestoreTool::for_version(version, &bin).unwrap();
    let ip = loopback_ip(group, 1);
    let data_dir = dir.join("restored");
    restore_single_member(&tool, snapshot, "new-0", &ip, "restored-token", &data_dir).await;
    assert!(data_dir.join("member").is_dir());
    let member = EtcdProcess::start(&bin, "new-0", &ip, &data_dir, "restored-token");
    let status = member.wait_ready().await;
    assert_eq!(
        member.key_count().await,
        KEYS as i64,
        "no key more than written"
    );
    (member.test_keys().await, status.cluster_id)
}

async fn backup_fetch_restore(minor: &str, group: u8) {
    backup_fetch_restore_into(minor, minor, group).await;
}

/// A backup of an etcd `minor` member restored with the tools of etcd
/// `restore_minor` into a member of that release.
async fn backup_fetch_restore_into(minor: &str, restore_minor: &str, group: u8) {
    let dir = tempfile::tempdir().unwrap();
    let moto = MotoServer::start("dkv-backups");
    let source = source_cluster(minor, dir.path(), group).await;

    let artifact = take_backup(
        &source.admin,
        &moto.config(),
        &request(&source, &moto.uri("prod")),
    )
    .await
    .unwrap();
    assert!(
        artifact
            .uri
            .starts_with("s3://dkv-backups/prod/shop/orders/orders-"),
        "{artifact:?}"
    );
    assert!(artifact.etcd_version.starts_with(minor), "{artifact:?}");
    assert!(artifact.revision > KEYS as i64, "{artifact:?}");
    // What a verification compares a restored copy against.
    let content = artifact.content.unwrap();
    assert_eq!(
        (content.revision, content.keys),
        (artifact.revision, KEYS as i64)
    );

    // What the server holds, hashed by another client.
    let key = key_of(&artifact);
    let listing = moto.list();
    assert_eq!(listing.objects, vec![key.clone(), format!("{key}.json")]);
    assert!(listing.uploads.is_empty(), "{listing:?}");
    let digest = moto.digest(&key);
    assert_eq!(digest.size, artifact.size_bytes);
    assert_eq!(digest.sha256, artifact.sha256);
    // Every part went with its SHA-256, checked by the server on arrival;
    // the object keeps the checksum of its parts' checksums.
    let stored = moto.stored_checksum(&key);
    assert!(stored.sha256.is_some(), "{stored:?}");

    // Fetch: with the recorded digest, and by bare URI through the record.
    let fetched = fetch_artifact(
        &moto.config(),
        &artifact.uri,
        Some(&artifact.sha256),
        &Keyring::default(),
        &dir.path().join("fetch/snapshot.db"),
    )
    .await
    .unwrap();
    assert_eq!(fetched.size_bytes, artifact.size_bytes);
    let by_uri = fetch_artifact(
        &moto.config(),
        &artifact.uri,
        None,
        &Keyring::default(),
        &dir.path().join("again.db"),
    )
    .await
    .unwrap();
    assert_eq!(by_uri.sha256, artifact.sha256);

    let (keys, cluster_id) =
        restore_and_read(restore_minor, &fetched.path, dir.path(), group).await;
    assert_eq!(
        keys,
        expected_keys(KEYS),
        "exactly the keys written, no more"
    );
    assert_ne!(cluster_id, source.cluster_id, "a restore is a new cluster");

    delete_artifact(&moto.config(), &artifact.uri)
        .await
        .unwrap();
    assert_eq!(moto.list().objects, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_3_5_backup_to_s3_restores_exactly_its_keys() {
    backup_fetch_restore("3.5", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_3_4_backup_to_s3_restores_exactly_its_keys() {
    backup_fetch_restore("3.4", 2).await;
}

/// etcd 3.6.16 and 3.7.3 are built from etcd's Go modules (`go/etcd/`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_3_7_backup_to_s3_restores_exactly_its_keys() {
    backup_fetch_restore("3.7.3", 11).await;
}

/// A backup taken on one version restored into a cluster of the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_3_6_backup_restores_into_etcd_3_7() {
    backup_fetch_restore_into("3.6.16", "3.7.3", 12).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_artifact_is_refused_with_both_digests() {
    let dir = tempfile::tempdir().unwrap();
    let moto = MotoServer::start("dkv-backups");
    let source = source_cluster("3.5", dir.path(), 3).await;
    let artifact = take_backup(
        &source.admin,
        &moto.config(),
        &request(&source, &moto.uri("p")),
    )
    .await
    .unwrap();
    moto.corrupt(&key_of(&artifact), artifact.size_bytes / 2);
    let out = dir.path().join("snapshot.db");
    let err = fetch_artifact(
        &moto.config(),
        &artifact.uri,
        Some(&artifact.sha256),
        &Keyring::default(),
        &out,
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    println!("corrupted artifact: {text}");
    assert!(matches!(err, Error::ChecksumMismatch { .. }), "{text}");
    assert_eq!(err.category(), Category::Integrity);
    assert!(
        text.contains(&artifact.sha256),
        "names the expected digest: {text}"
    );
    assert!(text.contains("expected"), "{text}");
    assert!(!out.exists(), "no snapshot file after a mismatch");
    assert!(!dir.path().join("snapshot.db.partial").exists());
    // Through the record beside it: refused the same way.
    let err = fetch_artifact(
        &moto.config(),
        &artifact.uri,
        None,
        &Keyring::default(),
        &out,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::ChecksumMismatch { .. }), "{err}");
}

/// For S3-compatible servers that refuse checksum headers: with
/// `AWS_REQUEST_CHECKSUM_CALCULATION=when_required` none is sent, and the
/// backup still restores, checked against its own recorded digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksums_can_be_left_out_for_servers_that_refuse_them() {
    let dir = tempfile::tempdir().unwrap();
    let moto = MotoServer::start("dkv-backups");
    let source = source_cluster("3.5", dir.path(), 8).await;
    let mut config = moto.config();
    let env = |name: &str| {
        (name == "AWS_REQUEST_CHECKSUM_CALCULATION").then(|| "when_required".to_owned())
    };
    config.s3.checksums = StoreConfig::from_lookup(env).s3.checksums;
    assert!(!config.s3.checksums);
    let artifact = take_backup(&source.admin, &config, &request(&source, &moto.uri("p")))
        .await
        .unwrap();
    let stored = moto.stored_checksum(&key_of(&artifact));
    assert_eq!(stored.sha256, None, "{stored:?}");
    let fetched = fetch_artifact(
        &config,
        &artifact.uri,
        Some(&artifact.sha256),
        &Keyring::default(),
        &dir.path().join("snapshot.db"),
    )
    .await
    .unwrap();
    assert_eq!(fetched.sha256, artifact.sha256);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_fail_clearly_without_revealing_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let moto = MotoServer::start("dkv-backups");
    let source = source_cluster("3.5", dir.path(), 4).await;
    let wrong_secret = "Wr0ngS3cretKeyThatMustNeverBeLogged/abc+xyz";
    let config = moto.config_with_secret(wrong_secret);

    let err = take_backup(&source.admin, &config, &request(&source, &moto.uri("p")))
        .await
        .unwrap_err();
    let text = err.to_string();
    println!("wrong credentials: {text}");
    let debug = format!("{err:?}");
    assert!(
        !text.contains(wrong_secret) && !debug.contains(wrong_secret),
        "{text}"
    );
    assert!(!text.contains(&moto.secret_access_key), "{text}");
    assert!(
        matches!(
            err,
            Error::Store {
                kind: StoreErrorKind::AccessDenied,
                ..
            }
        ),
        "{text}"
    );
    assert_eq!(err.category(), Category::Configuration);
    assert!(
        text.contains("SignatureDoesNotMatch") || text.contains("403"),
        "{text}"
    );
    assert_eq!(moto.list().objects, Vec::<String>::new());

    // The upload itself (not only the existence check) refuses the same way.
    let location = Location::parse(&format!("{}/x.db", moto.uri("p"))).unwrap();
    let store = dkv_backup::Store::open(&location, &config).unwrap();
    let stream = futures::stream::iter([Ok(Bytes::from(vec![0u8; 1024]))]);
    let err = upload_snapshot(
        &store,
        &location,
        "test",
        stream,
        UploadOptions::default(),
        &Encoding::default(),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    println!("wrong credentials, upload: {text}");
    assert!(!text.contains(wrong_secret), "{text}");
    assert!(text.contains("multipart upload"), "{text}");
    assert!(
        matches!(
            err,
            Error::Store {
                kind: StoreErrorKind::AccessDenied,
                ..
            }
        ),
        "{text}"
    );

    let err = fetch_artifact(
        &config,
        &location.to_string(),
        Some(&"0".repeat(64)),
        &Keyring::default(),
        &dir.path().join("x"),
    )
    .await
    .unwrap_err();
    println!("wrong credentials, fetch: {err}");
    assert!(!err.to_string().contains(wrong_secret), "{err}");
    assert_eq!(err.category(), Category::Configuration, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_broken_midway_leaves_no_object_and_no_open_upload() {
    let moto = MotoServer::start("dkv-backups");
    let location = Location::parse(&format!("{}/broken.db", moto.uri("p"))).unwrap();
    let store = dkv_backup::Store::open(&location, &moto.config()).unwrap();
    // Two full 5 MiB parts, then the etcd stream breaks.
    let mut chunks: Vec<dkv_backup::Result<Bytes>> = (0..12)
        .map(|_| Ok(Bytes::from(vec![7u8; 1024 * 1024])))
        .collect();
    chunks.push(Err(Error::Etcd {
        operation: "snapshot",
        cause: dkv_etcd::Error::Unavailable {
            operation: "snapshot",
            message: "connection reset".to_owned(),
        },
    }));
    let options = UploadOptions {
        part_size: dkv_backup::MIN_PART_SIZE,
        parts_in_flight: 2,
    };
    let err = upload_snapshot(
        &store,
        &location,
        "test",
        futures::stream::iter(chunks),
        options,
        // Stored as they come, so that whole parts are uploaded before
        // the break.
        &Encoding::plain(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Etcd { .. }), "{err}");
    let listing = moto.list();
    assert!(listing.objects.is_empty(), "{listing:?}");
    assert!(
        listing.uploads.is_empty(),
        "the multipart upload was aborted: {listing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_destination_works_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let source = source_cluster("3.5", dir.path(), 5).await;
    let destination = format!("file://{}/backups", dir.path().display());
    let config = StoreConfig::default();
    let artifact = take_backup(&source.admin, &config, &request(&source, &destination))
        .await
        .unwrap();
    let object = Location::parse(&artifact.uri).unwrap();
    let on_disk = std::fs::metadata(format!("/{}", object.path().as_ref())).unwrap();
    assert_eq!(on_disk.len(), artifact.size_bytes);
    let fetched = fetch_artifact(
        &config,
        &artifact.uri,
        None,
        &Keyring::default(),
        &dir.path().join("snap.db"),
    )
    .await
    .unwrap();
    let (keys, cluster_id) = restore_and_read("3.5", &fetched.path, dir.path(), 5).await;
    assert_eq!(keys, expected_keys(KEYS));
    assert_ne!(cluster_id, source.cluster_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_member_cluster_is_backed_up_from_a_follower() {
    let dir = tempfile::tempdir().unwrap();
    let bin = etcd_bin_dir("3.5");
    let ips: Vec<String> = (0..3).map(|i| loopback_ip(6, i)).collect();
    let initial_cluster = (0..3)
        .map(|i| format!("m{i}=http://{}:2380", ips[i]))
        .collect::<Vec<_>>()
        .join(",");
    let members: Vec<EtcdProcess> = (0..3)
        .map(|i| {
            EtcdProcess::start_member(
                &bin,
                &format!("m{i}"),
                &ips[i],
                &dir.path().join(format!("m{i}")),
                "three",
                &initial_cluster,
            )
        })
        .collect();
    for member in &members {
        member.wait_ready().await;
    }
    members[0].put_keys(50).await;
    // Through one seed URL, as through the client Service.
    let seed = vec![members[0].client_url.clone()];
    let admin = GrpcAdmin::new(seed.clone(), Duration::from_secs(5));
    let leader = members[0].wait_ready().await.leader;
    let chosen = choose_snapshot_source(&admin, &seed).await.unwrap();
    assert!(!chosen.is_leader, "{chosen:?}");
    assert_ne!(chosen.member, leader);
    assert!(
        members.iter().any(|m| m.client_url == chosen.endpoint),
        "{chosen:?}"
    );

    let destination = format!("file://{}/backups", dir.path().display());
    let artifact = take_backup(
        &admin,
        &StoreConfig::default(),
        &BackupRequest {
            namespace: "shop".to_owned(),
            cluster: "orders".to_owned(),
            destination: Location::parse(&destination).unwrap(),
            seed_endpoints: seed,
            taken_at: jiff::Timestamp::now(),
            upload: UploadOptions::default(),
            encoding: Encoding::default(),
        },
    )
    .await
    .unwrap();
    assert!(artifact.revision > 50, "{artifact:?}");
}

/// What a restored cluster of three does at bootstrap: every member
/// restores the same verified snapshot with its own name and the new
/// cluster's membership, and they start together as one new cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_restored_from_one_snapshot_form_one_new_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let source = source_cluster("3.5", dir.path(), 7).await;
    let destination = format!("file://{}/backups", dir.path().display());
    let config = StoreConfig::default();
    // Compressed and encrypted, as with spec.backup.encryption.
    let key = Key::parse(&[0x5a; 32]).unwrap();
    let mut request = request(&source, &destination);
    request.encoding.key = Some(key.clone());
    let artifact = take_backup(&source.admin, &config, &request).await.unwrap();
    assert!(artifact.uri.ends_with(".db.zst.enc"), "{artifact:?}");
    assert_eq!(artifact.encryption_key_id.as_deref(), Some(key.id()));
    let fetched = fetch_artifact(
        &config,
        &artifact.uri,
        Some(&artifact.sha256),
        &Keyring::from(key),
        &dir.path().join("snapshot.db"),
    )
    .await
    .unwrap();
    assert!(
        fetched.compressed && fetched.snapshot_bytes > fetched.size_bytes,
        "{fetched:?}"
    );
    let snapshot = fetched.path;

    let bin = etcd_bin_dir("3.5");
    let tool = RestoreTool::for_version("3.5.16", &bin).unwrap();
    let ips: Vec<String> = (1..4).map(|i| loopback_ip(7, i)).collect();
    let initial_cluster = (0..3)
        .map(|i| format!("r{i}=http://{}:2380", ips[i]))
        .collect::<Vec<_>>()
        .join(",");
    for (i, ip) in ips.iter().enumerate() {
        restore_member(
            &tool,
            &MemberRestore {
                snapshot: snapshot.clone(),
                name: format!("r{i}"),
                initial_cluster: initial_cluster.clone(),
                initial_advertise_peer_urls: format!("http://{ip}:2380"),
                initial_cluster_token: "restored-three".to_owned(),
                data_dir: dir.path().join(format!("r{i}")),
                revision_bump: None,
                // fetch_artifact checked it.
                snapshot_checked: true,
            },
        )
        .await
        .unwrap();
    }
    let members: Vec<EtcdProcess> = ips
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            EtcdProcess::start_member(
                &bin,
                &format!("r{i}"),
                ip,
                &dir.path().join(format!("r{i}")),
                "restored-three",
                &initial_cluster,
            )
        })
        .collect();
    let mut cluster_ids = Vec::new();
    for member in &members {
        cluster_ids.push(member.wait_ready().await.cluster_id);
    }
    assert!(
        cluster_ids.iter().all(|id| *id == cluster_ids[0]),
        "{cluster_ids:?}"
    );
    assert_ne!(cluster_ids[0], source.cluster_id);
    let admin = GrpcAdmin::new(vec![members[0].client_url.clone()], Duration::from_secs(5));
    let listed = dkv_etcd::EtcdAdmin::member_list(&admin).await.unwrap();
    assert_eq!(listed.len(), 3, "{listed:?}");
    // Every member serves exactly the snapshot's keys.
    for member in &members {
        assert_eq!(member.key_count().await, KEYS as i64);
        assert_eq!(member.test_keys().await, expected_keys(KEYS));
    }
}
