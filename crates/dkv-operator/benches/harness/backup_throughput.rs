//! Backup and restore throughput against etcd's own tools: runs dkv-backup's
//! `backup_throughput` example (one etcd 3.5 member filled to the size asked,
//! `dkv backup` to an s3s-fs S3 server vs `etcdctl snapshot save` to local
//! disk and vs `etcdctl snapshot save` + a boto3 upload, `dkv
//! restore-fetch` and `restore-member` vs `etcdutl snapshot restore`) and
//! turns its JSON line into metrics. s3s-fs is installed on first use
//! (`scripts/install-s3s-fs.sh`; the test suite does not need it).

use std::path::Path;
use std::process::Stdio;

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::report::{Baseline, Goal, Metric};

pub struct Settings<'a> {
    pub example: &'a Path,
    pub dkv: &'a Path,
    pub size_mib: usize,
}

/// The example keeps up to ~5 copies of the database on disk at once (the
/// member's data, etcdctl's snapshot, the S3 server's objects, the fetched
/// snapshot, a restored member).
const DISK_COPIES: u64 = 5;

/// Free bytes of the filesystem holding `dir` (`df -Pk`).
fn free_bytes(dir: &Path) -> anyhow::Result<u64> {
    let out = std::process::Command::new("df")
        .arg("-Pk")
        .arg(dir)
        .output()
        .context("running df")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|k| k.parse::<u64>().ok())
        .map(|k| k * 1024)
        .with_context(|| format!("parsing df's answer: {text}"))
}

/// Builds s3s-fs into the tools directory unless it is there
/// (`scripts/install-s3s-fs.sh`, minutes once, then a no-op).
async fn install_s3s_fs() -> anyhow::Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-s3s-fs.sh");
    let status = tokio::process::Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .status()
        .await
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    Ok(())
}

pub async fn run(settings: Settings<'_>) -> anyhow::Result<(Vec<Metric>, Vec<(String, String)>)> {
    install_s3s_fs().await?;
    // A smaller database than asked when the disk cannot hold the copies
    // (said in the results), rather than etcd dying of a full disk midway.
    let free = free_bytes(&std::env::temp_dir())?;
    let mut size_mib = settings.size_mib;
    while size_mib > 64 && (size_mib as u64) << 20 > free / (DISK_COPIES + 1) {
        size_mib /= 2;
    }
    let size_note = (size_mib != settings.size_mib).then(|| {
        format!(
            "measured on {size_mib} MiB instead of {} MiB: {:.1} GiB of disk were free, the run needs ~{DISK_COPIES} copies of the database",
            settings.size_mib,
            free as f64 / f64::from(1 << 30)
        )
    });
    let v = run_example(&settings, size_mib, "random").await?;
    let line = v.to_string();
    let num = |pointer: &str| -> anyhow::Result<f64> {
        v.pointer(pointer)
            .and_then(Value::as_f64)
            .with_context(|| format!("no {pointer} in {line}"))
    };
    let mib = num("/snapshotBytes")? / f64::from(1 << 20);
    let server = v.pointer("/server").and_then(Value::as_str).unwrap_or("S3");
    let (dkv_backup, etcdctl) = (
        num("/backupSeconds/dkv")?,
        num("/backupSeconds/etcdctlSnapshotSave")?,
    );
    let (dkv_restore, etcdutl) = (
        num("/restoreSeconds/dkv")?,
        num("/restoreSeconds/etcdutlSnapshotRestore")?,
    );
    let mut metrics = vec![
        Metric::measured(
            "backupMiBPerSecond",
            &format!(
                "snapshot → object store throughput ({mib:.0} MiB snapshot, `dkv backup` → {server} S3)"
            ),
            mib / dkv_backup,
            "MiB/s",
            Some(Baseline {
                what: "`etcdctl snapshot save` → local disk".into(),
                value: mib / etcdctl,
            }),
            etcdctl / dkv_backup,
            Goal::at_least(0.8),
            "≥ 0.8 × etcdctl snapshot save to local disk",
        )
        .with_note(format!("dkv {dkv_backup:.2} s, etcdctl {etcdctl:.2} s")),
        Metric::measured(
            "restoreMiBPerSecond",
            &format!("restore throughput (`dkv restore-fetch` from {server} S3 + `restore-member`)"),
            mib / dkv_restore,
            "MiB/s",
            Some(Baseline {
                what: "`etcdutl snapshot restore` from local disk".into(),
                value: mib / etcdutl,
            }),
            etcdutl / dkv_restore,
            Goal::at_least(0.8),
            "≥ 0.8 × etcdutl snapshot restore from local disk",
        )
        .with_note(format!(
            "dkv {dkv_restore:.2} s (download + sha256 alone {:.2} s), etcdutl {etcdutl:.2} s",
            num("/restoreSeconds/dkvFetchOnly").unwrap_or(f64::NAN)
        )),
    ];
    // Restore as a whole job, from the object store to a serving member:
    // dkv's fetch (download, sha256, decode) + restore-member + the start,
    // against a standard client's download + etcd's tool + the same start.
    metrics.push(
        match (
            num("/restoreAndStartSeconds/dkv"),
            num("/restoreAndStartSeconds/boto3DownloadEtcdutlRestoreStart"),
        ) {
            (Ok(dkv), Ok(baseline)) => Metric::measured(
                "restoreVsDownloadRestoreStart",
                &format!(
                    "restore of a {mib:.0} MiB snapshot from {server} S3 to a serving member: `dkv restore-fetch` + `restore-member` + start, against a boto3 download + `etcdutl snapshot restore` + start"
                ),
                dkv,
                "s",
                Some(Baseline {
                    what: "boto3 download + `etcdutl snapshot restore` + etcd start".into(),
                    value: baseline,
                }),
                baseline / dkv,
                Goal::at_least(1.0),
                "≥ 1.0 × (the baseline's time over dkv's)",
            ),
            (Err(why), _) | (_, Err(why)) => Metric::not_measured(
                "restoreVsDownloadRestoreStart",
                "restore from S3 to a serving member against download + etcdutl snapshot restore + start",
                "≥ 1.0 ×",
                &why.to_string(),
            ),
        },
    );
    // The fair baseline for the same job (a snapshot in the object store):
    // etcd's own tool to local disk, then a standard S3 client's upload of
    // that file to the same server (boto3, its default transfer settings).
    metrics.push(
        match num("/boto3UploadSeconds") {
            Ok(boto) => Metric::measured(
                "backupVsSaveAndUpload",
                &format!(
                    "full backup of a {mib:.0} MiB snapshot of incompressible values to {server} S3: `dkv backup` against `etcdctl snapshot save` then a boto3 upload"
                ),
                dkv_backup,
                "s",
                Some(Baseline {
                    what: format!("`etcdctl snapshot save` + boto3 upload to the same {server}"),
                    value: etcdctl + boto,
                }),
                (etcdctl + boto) / dkv_backup,
                Goal::at_least(1.2),
                "≥ 1.2 × (the baseline's time over dkv's)",
            )
            .with_note(format!(
                "dkv streams the snapshot to the store while etcd sends it, {}; the baseline saves {etcdctl:.2} s, then uploads {boto:.2} s",
                match num("/storedBytes") {
                    Ok(stored) if stored >= num("/snapshotBytes").unwrap_or(f64::MAX) =>
                        "uncompressed (its start does not compress)".to_owned(),
                    Ok(stored) => format!("zstd-compressed to {:.0} MiB", stored / f64::from(1 << 20)),
                    Err(_) => "as encoded by default".to_owned(),
                }
            )),
            Err(why) => Metric::not_measured(
                "backupVsSaveAndUpload",
                "full backup to S3 against etcdctl snapshot save + a standard S3 client's upload",
                "≥ 1.2 ×",
                &why.to_string(),
            ),
        },
    );
    // The same job on data that compresses as real databases do: what
    // users see, since dkv compresses by default and the baseline does not.
    metrics.push(match run_example(&settings, size_mib, "documents").await {
        Ok(documents) => documents_backup_metric(&documents)?,
        Err(why) => Metric::not_measured(
            "backupDocumentsVsSaveAndUpload",
            "full backup of JSON documents to S3 against etcdctl snapshot save + a standard S3 client's upload",
            "≥ 1.2 ×",
            &format!("{why:#}"),
        ),
    });
    metrics.push(peak_rss_metric(
        &v,
        "dkvBackup",
        "backupPeakRssMiB",
        &format!("peak RSS of the backup process (`dkv backup`, {mib:.0} MiB snapshot)"),
    ));
    metrics.push(peak_rss_metric(
        &v,
        "dkvRestoreFetch",
        "restorePeakRssMiB",
        &format!("peak RSS of the restore download (`dkv restore-fetch`, {mib:.0} MiB snapshot)"),
    ));
    let mut context = vec![(
        "backup database size".to_owned(),
        format!(
            "{:.0} MiB database, {mib:.0} MiB snapshot",
            num("/databaseBytes").unwrap_or(f64::NAN) / f64::from(1 << 20)
        ),
    )];
    context.push((
        "backup S3 server and standard client".to_owned(),
        format!(
            "{server}; {}",
            v.pointer("/standardClient")
                .and_then(Value::as_str)
                .unwrap_or("boto3")
        ),
    ));
    if let (Ok(file), Ok(boto)) = (num("/backupToFileSeconds"), num("/boto3UploadSeconds")) {
        context.push((
            "`dkv backup` → file:// (vs etcdctl to local disk)".to_owned(),
            format!("{file:.2} s, ratio {:.2}", etcdctl / file),
        ));
        context.push((
            format!("boto3 upload of the same snapshot → the same {server}"),
            format!(
                "{boto:.2} s; dkv → {server} vs boto3 → {server} ratio {:.2}",
                boto / dkv_backup
            ),
        ));
    }
    if let Some(rss) = v
        .pointer("/peakRssMiB/dkvRestoreMember")
        .and_then(Value::as_f64)
    {
        context.push((
            "peak RSS of `dkv restore-member` (its etcdutl child not counted)".to_owned(),
            format!("{rss:.1} MiB"),
        ));
    }
    if let Some(note) = size_note {
        for m in &mut metrics {
            m.note = if m.note.is_empty() {
                note.clone()
            } else {
                format!("{}; {note}", m.note)
            };
        }
    }
    Ok((metrics, context))
}

/// The peak RSS the example measured for `process` (a key of its
/// `peakRssMiB`), against the agents' memory budget: 64 MiB whatever the
/// database size.
fn peak_rss_metric(v: &Value, process: &str, id: &str, name: &str) -> Metric {
    match v
        .pointer(&format!("/peakRssMiB/{process}"))
        .and_then(Value::as_f64)
    {
        Some(rss) => Metric::against_target(id, name, rss, "MiB", 64.0, "≤ 64 MiB"),
        None => Metric::not_measured(
            id,
            name,
            "≤ 64 MiB",
            "the agent logged no peak_rss_kib line",
        ),
    }
}

/// Each figure of the example is the median of this many rounds: on two
/// shared cores one round's `etcdutl snapshot restore` of the same file
/// took 1.8 s in one run and 4.1 s in the next (write-back of the upload
/// before it), and boto3's download 1.7 s against 2.9 s.
const ROUNDS: usize = 3;

/// Runs the example on `data` (`random` or `documents`) and returns its
/// JSON line.
async fn run_example(
    settings: &Settings<'_>,
    size_mib: usize,
    data: &str,
) -> anyhow::Result<Value> {
    let output = tokio::process::Command::new(settings.example)
        .args([
            "--size-mib",
            &size_mib.to_string(),
            "--runs",
            &ROUNDS.to_string(),
            "--data",
            data,
            "--dkv",
        ])
        .arg(settings.dkv)
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {}", settings.example.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprint!("{stderr}");
    if !output.status.success() {
        let why: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with(' ') && !l.trim().is_empty())
            .collect();
        bail!(
            "{} --data {data} failed ({}): {}",
            settings.example.display(),
            output.status,
            why[why.len().saturating_sub(4)..].join(" / ")
        );
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("the example printed no JSON line")?;
    serde_json::from_str(line).context("parsing the example's JSON line")
}

/// The full-backup comparison on JSON documents, with the compression that
/// makes the difference said in the note.
fn documents_backup_metric(v: &Value) -> anyhow::Result<Metric> {
    let num = |pointer: &str| -> anyhow::Result<f64> {
        v.pointer(pointer)
            .and_then(Value::as_f64)
            .with_context(|| format!("no {pointer} in {v}"))
    };
    let mib = num("/snapshotBytes")? / f64::from(1 << 20);
    let stored = num("/storedBytes")? / f64::from(1 << 20);
    let server = v.pointer("/server").and_then(Value::as_str).unwrap_or("S3");
    let (dkv, etcdctl, boto) = (
        num("/backupSeconds/dkv")?,
        num("/backupSeconds/etcdctlSnapshotSave")?,
        num("/boto3UploadSeconds")?,
    );
    let restore = match (
        num("/restoreAndStartSeconds/dkv"),
        num("/restoreAndStartSeconds/boto3DownloadEtcdutlRestoreStart"),
    ) {
        (Ok(dkv), Ok(baseline)) => format!(
            "; restore to a serving member from the same objects: dkv {dkv:.2} s, boto3 download + etcdutl + start {baseline:.2} s ({:.2} ×)",
            baseline / dkv
        ),
        _ => String::new(),
    };
    Ok(Metric::measured(
        "backupDocumentsVsSaveAndUpload",
        &format!(
            "full backup of a {mib:.0} MiB snapshot of JSON documents to {server} S3: `dkv backup` against `etcdctl snapshot save` then a boto3 upload"
        ),
        dkv,
        "s",
        Some(Baseline {
            what: format!("`etcdctl snapshot save` + boto3 upload to the same {server}"),
            value: etcdctl + boto,
        }),
        (etcdctl + boto) / dkv,
        Goal::at_least(1.2),
        "≥ 1.2 × (the baseline's time over dkv's)",
    )
    .with_note(format!(
        "~6 KiB JSON documents (ids, versions, times and amounts vary; fields repeat); dkv stores {stored:.0} MiB zstd-compressed ({:.1} × smaller), the baseline uploads the {mib:.0} MiB snapshot as it is; the baseline saves {etcdctl:.2} s, then uploads {boto:.2} s{restore}",
        mib / stored
    )))
}
