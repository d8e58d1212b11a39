//! Backup and restore throughput against etcd's own tools: runs dkv-backup's
//! `backup_throughput` example (one etcd 3.5 member filled to the size asked,
//! `dkv backup` to moto S3 vs `etcdctl snapshot save` to local disk, `dkv
//! restore-fetch` + `restore-member` vs `etcdutl snapshot restore`) and turns
//! its JSON line into metrics.

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

pub async fn run(settings: Settings<'_>) -> anyhow::Result<(Vec<Metric>, Vec<(String, String)>)> {
    let output = tokio::process::Command::new(settings.example)
        .args([
            "--size-mib",
            &settings.size_mib.to_string(),
            "--runs",
            "1",
            "--dkv",
        ])
        .arg(settings.dkv)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .await
        .with_context(|| format!("running {}", settings.example.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "{} failed ({}): {stdout}",
            settings.example.display(),
            output.status
        );
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("the example printed no JSON line")?;
    let v: Value = serde_json::from_str(line).context("parsing the example's JSON line")?;
    let num = |pointer: &str| -> anyhow::Result<f64> {
        v.pointer(pointer)
            .and_then(Value::as_f64)
            .with_context(|| format!("no {pointer} in {line}"))
    };
    let mib = num("/snapshotBytes")? / f64::from(1 << 20);
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
                "snapshot → object store throughput ({mib:.0} MiB snapshot, `dkv backup` → moto S3)"
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
            "restore throughput (`dkv restore-fetch` from moto S3 + `restore-member`)",
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
    metrics.push(
        match v.pointer("/dkvBackupPeakRssMiB").and_then(Value::as_f64) {
            Some(rss) => Metric::against_target(
                "backupPeakRssMiB",
                "peak RSS of the backup process (`dkv backup`)",
                rss,
                "MiB",
                64.0,
                "≤ 64 MiB",
            ),
            None => Metric::not_measured(
                "backupPeakRssMiB",
                "peak RSS of the backup process (`dkv backup`)",
                "≤ 64 MiB",
                "neither /usr/bin/time nor the agent's peak_rss_kib log line was available",
            ),
        },
    );
    let mut context = vec![(
        "backup database size".to_owned(),
        format!(
            "{:.0} MiB database, {mib:.0} MiB snapshot",
            num("/databaseBytes").unwrap_or(f64::NAN) / f64::from(1 << 20)
        ),
    )];
    if let (Ok(file), Ok(boto)) = (
        num("/backupToFileSeconds"),
        num("/boto3UploadToMotoSeconds"),
    ) {
        context.push((
            "`dkv backup` → file:// (vs etcdctl to local disk)".to_owned(),
            format!("{file:.2} s, ratio {:.2}", etcdctl / file),
        ));
        context.push((
            "boto3 upload of the same snapshot → the same moto (what moto itself takes in)"
                .to_owned(),
            format!(
                "{boto:.2} s; dkv → moto vs boto3 → moto ratio {:.2}",
                boto / dkv_backup
            ),
        ));
    }
    Ok((metrics, context))
}
