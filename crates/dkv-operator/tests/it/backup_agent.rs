//! The `dkv backup`, `dkv restore-fetch` and `dkv restore-member` commands
//! as a Job's and an init container's processes run them: against real etcd
//! 3.5 and a real S3 server (moto, signatures checked), with credentials
//! only in the environment and results in the termination message.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use dkv_backup::Artifact;
use dkv_backup::testing::{EtcdProcess, MotoServer, etcd_bin_dir, loopback_ip, test_key};

const KEYS: usize = 200;

/// `dkv <args>` with exactly `env` as its object store environment (the
/// test's own AWS_* variables, if any, are removed).
fn dkv(args: &[String], env: &[(String, String)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dkv"));
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ALLOW_HTTP",
        "POD_NAMESPACE",
    ] {
        command.env_remove(name);
    }
    command.args(args).envs(env.iter().cloned());
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn backup_args(member: &EtcdProcess, destination: &str, termination_log: &Path) -> Vec<String> {
    vec![
        "backup".to_owned(),
        "--cluster=orders".to_owned(),
        "--namespace=shop".to_owned(),
        format!("--destination={destination}"),
        format!("--endpoints={}", member.client_url),
        format!("--termination-log={}", termination_log.display()),
        // What the CronJob passes today.
        "--retention-days=7".to_owned(),
    ]
}

async fn source(dir: &Path, group: u8, keys: usize) -> EtcdProcess {
    let member = EtcdProcess::start(
        &etcd_bin_dir("3.5"),
        "src-0",
        &loopback_ip(group, 0),
        &dir.join("source"),
        "source-token",
    );
    member.wait_ready().await;
    member.put_keys(keys).await;
    member
}

fn key_of(uri: &str) -> String {
    uri.strip_prefix("s3://dkv-backups/").unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_then_fetch_and_restore_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let moto = MotoServer::start("dkv-backups");
    let member = source(dir.path(), 11, KEYS).await;
    let source_cluster = member.wait_ready().await.cluster_id;

    let termination_log = dir.path().join("termination-log");
    // Encrypted with a key from a file, as a Secret volume provides it.
    let keys = dir.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("key"), format!("{}\n", "c3".repeat(32))).unwrap();
    let mut args = backup_args(&member, &moto.uri("prod"), &termination_log);
    args.push(format!(
        "--encryption-key-file={}",
        keys.join("key").display()
    ));
    let out = dkv(&args, &moto.env());
    assert!(
        out.status.success(),
        "dkv backup failed: {}",
        text(&out.stderr)
    );
    let stdout: Artifact = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let reported: Artifact =
        serde_json::from_str(&std::fs::read_to_string(&termination_log).unwrap()).unwrap();
    assert_eq!(stdout, reported, "stdout and termination message agree");
    assert!(
        reported
            .uri
            .starts_with("s3://dkv-backups/prod/shop/orders/orders-"),
        "{reported:?}"
    );
    assert_eq!(reported.etcd_version, "3.5.16");
    let digest = moto.digest(&key_of(&reported.uri));
    assert_eq!(
        (digest.size, digest.sha256.as_str()),
        (reported.size_bytes, reported.sha256.as_str())
    );
    let stderr = text(&out.stderr);
    assert!(!stderr.contains(&moto.secret_access_key), "{stderr}");

    assert!(reported.uri.ends_with(".db.zst.enc"), "{reported:?}");
    let key_id = reported.encryption_key_id.clone().unwrap();

    // The restore init steps: fetch (verified through the .json record),
    // then this member's data directory. Without the key: refused, naming it.
    let snapshot = dir.path().join("restore/snapshot.db");
    let fetch_log = dir.path().join("fetch-log");
    let fetch = |keys_dir: Option<&Path>| {
        let mut args = vec![
            "restore-fetch".to_owned(),
            format!("--uri={}", reported.uri),
            format!("--output={}", snapshot.display()),
            format!("--termination-log={}", fetch_log.display()),
        ];
        if let Some(dir) = keys_dir {
            args.push(format!("--decryption-keys-dir={}", dir.display()));
        }
        dkv(&args, &moto.env())
    };
    let out = fetch(None);
    assert!(!out.status.success());
    let refused = std::fs::read_to_string(&fetch_log).unwrap();
    assert!(refused.contains(&key_id), "{refused}");
    assert!(!snapshot.exists());
    let out = fetch(Some(&keys));
    assert!(
        out.status.success(),
        "restore-fetch failed: {}",
        text(&out.stderr)
    );
    // Decompressed: larger than what was stored.
    assert!(std::fs::metadata(&snapshot).unwrap().len() > reported.size_bytes);
    let fetched = std::fs::read_to_string(&fetch_log).unwrap();
    assert!(
        fetched.contains(&reported.sha256) && fetched.contains(&key_id),
        "{fetched}"
    );

    let ip = loopback_ip(11, 1);
    let data_dir = dir.path().join("restore/data");
    let out = dkv(
        &[
            "restore-member".to_owned(),
            format!("--snapshot={}", snapshot.display()),
            "--name=new-0".to_owned(),
            format!("--initial-cluster=new-0=http://{ip}:2380"),
            format!("--initial-advertise-peer-urls=http://{ip}:2380"),
            "--initial-cluster-token=new-token".to_owned(),
            format!("--data-dir={}", data_dir.display()),
            "--etcd-version=3.5.16".to_owned(),
            format!("--etcd-bin-dir={}", etcd_bin_dir("3.5").display()),
            format!(
                "--termination-log={}",
                dir.path().join("restore-log").display()
            ),
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "restore-member failed: {}",
        text(&out.stderr)
    );
    let restored = EtcdProcess::start(&etcd_bin_dir("3.5"), "new-0", &ip, &data_dir, "new-token");
    let status = restored.wait_ready().await;
    assert_ne!(status.cluster_id, source_cluster);
    assert_eq!(restored.key_count().await, KEYS as i64);
    assert_eq!(
        restored.test_keys().await,
        (0..KEYS).map(test_key).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_exit_non_zero_with_the_reason_and_without_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let moto = MotoServer::start("dkv-backups");
    let member = source(dir.path(), 12, 10).await;
    let wrong_secret = "N0tTheS3cret/ButStillSecret+xyz";
    let env: Vec<(String, String)> = moto
        .env()
        .into_iter()
        .map(|(k, v)| {
            if k == "AWS_SECRET_ACCESS_KEY" {
                (k, wrong_secret.to_owned())
            } else {
                (k, v)
            }
        })
        .collect();
    let termination_log = dir.path().join("termination-log");
    let out = dkv(
        &backup_args(&member, &moto.uri("prod"), &termination_log),
        &env,
    );
    let stderr = text(&out.stderr);
    let message = std::fs::read_to_string(&termination_log).unwrap();
    println!("termination message: {message}");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no artifact on failure");
    for shown in [&stderr, &message] {
        assert!(!shown.contains(wrong_secret), "{shown}");
        assert!(!shown.contains(&moto.secret_access_key), "{shown}");
    }
    assert!(
        message.starts_with("backup of shop/orders to s3://dkv-backups/prod failed"),
        "{message}"
    );
    assert!(
        message.contains("(access denied)") && message.contains("AWS_SECRET_ACCESS_KEY"),
        "{message}"
    );
    assert!(moto.list().objects.is_empty());

    // Unreachable etcd: also a clear failure, after the etcd deadline.
    let out = dkv(
        &[
            "backup".to_owned(),
            "--cluster=orders".to_owned(),
            "--namespace=shop".to_owned(),
            format!("--destination={}", moto.uri("prod")),
            format!("--endpoints=http://{}:2379", loopback_ip(12, 9)),
            "--etcd-timeout-seconds=2".to_owned(),
            "--wait-for-cluster-seconds=0".to_owned(),
            format!("--termination-log={}", termination_log.display()),
        ],
        &moto.env(),
    );
    assert!(!out.status.success());
    let message = std::fs::read_to_string(&termination_log).unwrap();
    assert!(message.contains("etcd member list failed"), "{message}");

    // A wrong digest: refused, nothing at the output path.
    let good = dkv(
        &backup_args(&member, &moto.uri("prod"), &termination_log),
        &moto.env(),
    );
    assert!(good.status.success(), "{}", text(&good.stderr));
    let artifact: Artifact = serde_json::from_slice(&good.stdout).unwrap();
    let output = dir.path().join("snapshot.db");
    let out = dkv(
        &[
            "restore-fetch".to_owned(),
            format!("--uri={}", artifact.uri),
            format!("--sha256={}", "ab".repeat(32)),
            format!("--output={}", output.display()),
            format!("--termination-log={}", termination_log.display()),
        ],
        &moto.env(),
    );
    assert!(!out.status.success());
    let message = std::fs::read_to_string(&termination_log).unwrap();
    assert!(
        message.contains(&"ab".repeat(32)) && message.contains(&artifact.sha256),
        "{message}"
    );
    assert!(!output.exists());
}

/// Peak memory of `dkv backup` for a database of at least 64 MiB. Prints
/// the figures; asserts only that the backup is complete (memory depends
/// on the build profile and the machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peak_memory_of_a_64_mib_backup_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let moto = MotoServer::start("dkv-backups");
    let member = source(dir.path(), 13, 10).await;
    member.fill(72 << 20).await;
    let db_size = member.wait_ready().await.db_size;
    assert!(db_size >= 64 << 20, "database is only {db_size} bytes");

    let termination_log = dir.path().join("termination-log");
    let mut args = backup_args(&member, &moto.uri("mem"), &termination_log);
    let time = PathBuf::from("/usr/bin/time");
    let out = if time.exists() {
        let mut with_time = vec!["-v".to_owned(), env!("CARGO_BIN_EXE_dkv").to_owned()];
        with_time.append(&mut args);
        let mut command = Command::new(&time);
        command.args(&with_time).envs(moto.env());
        command.output().unwrap()
    } else {
        dkv(&args, &moto.env())
    };
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "dkv backup failed: {stderr}");
    let artifact: Artifact = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(moto.digest(&key_of(&artifact.uri)).sha256, artifact.sha256);

    let agent_peak = stderr
        .lines()
        .find(|l| l.contains("peak memory"))
        .unwrap_or("(no peak memory line)");
    let time_peak = stderr
        .lines()
        .find(|l| l.contains("Maximum resident set size"))
        .unwrap_or("(/usr/bin/time not available)");
    println!(
        "dkv backup of a {} MiB database ({} MiB artifact): agent says: {agent_peak}; /usr/bin/time: {}",
        db_size >> 20,
        artifact.size_bytes >> 20,
        time_peak.trim()
    );

    // The same backup, terminated (Job deleted or past its deadline) once
    // the snapshot is streaming: it aborts the upload and says so.
    let before = moto.list();
    let mut args = backup_args(&member, &moto.uri("terminated"), &termination_log);
    args.push("--log-format=json".to_owned());
    let mut child = Command::new(env!("CARGO_BIN_EXE_dkv"))
        .args(&args)
        .envs(moto.env())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("streaming snapshot") {
        line.clear();
        assert_ne!(
            stderr.read_line(&mut line).unwrap(),
            0,
            "dkv backup ended early"
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the backup finished within 300 ms of streaming; nothing was interrupted: {rest}"
    );
    let message = std::fs::read_to_string(&termination_log).unwrap();
    assert!(
        message.contains("stopped before the backup completed"),
        "{message}"
    );
    let after = moto.list();
    assert_eq!(after.objects, before.objects, "no new object");
    assert!(
        after.uploads.is_empty(),
        "the multipart upload was aborted: {after:?}"
    );
}
