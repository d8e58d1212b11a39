//! Backup and restore throughput of the `dkv` agent against etcd's own
//! tools, measured in the same run on the same machine (reported as the
//! benchmark harness reports every figure, bench/README.md: a ratio next to
//! its baseline, the absolute values for context).
//!
//! ```sh
//! cargo build --release -p dkv-operator
//! cargo run --release -p dkv-backup --features testing --example backup_throughput -- \
//!     [--size-mib 256] [--dkv target/release/dkv] [--runs 3] [--data random|documents]
//! ```
//!
//! - backup: `dkv backup` to a moto S3 server vs `etcdctl snapshot save` to
//!   local disk, from the same etcd 3.5 member; for context, `dkv backup` to
//!   a `file://` destination, and boto3 uploading the etcdctl snapshot from
//!   local disk to the same moto server (what moto itself can take in);
//! - restore: `dkv restore-fetch` (download + sha256 check) followed by
//!   `dkv restore-member` vs `etcdutl snapshot restore` from local disk;
//! - the peak RSS of `dkv backup` (`/usr/bin/time -v`, else the agent's
//!   own `VmHWM` log line).
//!
//! Each figure is the median of `--runs` runs. Prints a Markdown table and
//! one JSON line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use dkv_backup::testing::{EtcdProcess, MotoServer, etcd_bin_dir, loopback_ip, repo_root};

type Error = Box<dyn std::error::Error>;

struct Options {
    size_mib: usize,
    dkv: PathBuf,
    runs: usize,
    /// `random` (incompressible, the worst case for compression) or
    /// `documents` (JSON documents, which compress as real data does).
    data: String,
}

fn options() -> Result<Options, Error> {
    let mut options = Options {
        size_mib: 256,
        dkv: repo_root().join("target/release/dkv"),
        runs: 3,
        data: "random".to_owned(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--size-mib" => options.size_mib = value.parse()?,
            "--dkv" => options.dkv = PathBuf::from(value),
            "--runs" => options.runs = value.parse::<usize>()?.max(1),
            "--data" if value == "random" || value == "documents" => options.data = value,
            "--data" => return Err(format!("--data is random or documents, not {value}").into()),
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    if !options.dkv.exists() {
        return Err(format!(
            "{} is missing: cargo build --release -p dkv-operator",
            options.dkv.display()
        )
        .into());
    }
    Ok(options)
}

fn run(command: &mut Command) -> Result<(Output, f64), Error> {
    let started = Instant::now();
    let output = command.output()?;
    let seconds = started.elapsed().as_secs_f64();
    if !output.status.success() {
        return Err(format!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok((output, seconds))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Peak RSS in KiB from `/usr/bin/time -v` or the agent's log line.
fn peak_rss_kib(stderr: &str) -> Option<u64> {
    stderr.lines().find_map(|line| {
        if let Some(rest) = line
            .trim()
            .strip_prefix("Maximum resident set size (kbytes):")
        {
            return rest.trim().parse().ok();
        }
        let (_, rest) = line.split_once("peak_rss_kib=")?;
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    })
}

fn restore_args(tool_dir: &Path, snapshot: &Path, data_dir: &Path, ip: &str) -> Vec<String> {
    vec![
        format!("--snapshot={}", snapshot.display()),
        "--name=bench-0".to_owned(),
        format!("--initial-cluster=bench-0=http://{ip}:2380"),
        format!("--initial-advertise-peer-urls=http://{ip}:2380"),
        "--initial-cluster-token=bench-restored".to_owned(),
        format!("--data-dir={}", data_dir.display()),
        "--etcd-version=3.5.16".to_owned(),
        format!("--etcd-bin-dir={}", tool_dir.display()),
    ]
}

/// Seconds from starting a member on the restored `data_dir` until it
/// answers; the member is stopped again.
async fn serving_seconds(bin: &Path, ip: &str, data_dir: &Path) -> f64 {
    let started = Instant::now();
    let member = EtcdProcess::start(bin, "bench-0", ip, data_dir, "bench-restored");
    member.wait_ready().await;
    let seconds = started.elapsed().as_secs_f64();
    drop(member);
    seconds
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let options = options()?;
    let dir = tempfile::tempdir()?;
    let bin = etcd_bin_dir("3.5");
    let moto = MotoServer::start("dkv-bench");
    let member = EtcdProcess::start(
        &bin,
        "src-0",
        &loopback_ip(42, 0),
        &dir.path().join("src"),
        "bench",
    );
    member.wait_ready().await;
    eprintln!(
        "filling the database with {} MiB of {} data ...",
        options.size_mib, options.data
    );
    if options.data == "documents" {
        member.fill_documents(options.size_mib << 20).await;
    } else {
        member.fill(options.size_mib << 20).await;
    }
    let db_size = member.wait_ready().await.db_size as u64;
    let time = Path::new("/usr/bin/time");

    let mut baseline_backup = Vec::new();
    let mut dkv_backup = Vec::new();
    let mut dkv_backup_file = Vec::new();
    let mut boto3_upload = Vec::new();
    let mut baseline_restore = Vec::new();
    let mut dkv_fetch = Vec::new();
    let mut dkv_restore = Vec::new();
    let mut baseline_restore_and_start = Vec::new();
    let mut dkv_restore_and_start = Vec::new();
    let mut peak_rss = Vec::new();
    let mut snapshot_size = 0u64;
    let mut stored_size = 0u64;
    for round in 0..options.runs {
        let work = dir.path().join(format!("round-{round}"));
        std::fs::create_dir_all(&work)?;

        // Baseline: etcdctl to local disk.
        let local = work.join("etcdctl.db");
        let (_, seconds) = run(Command::new(bin.join("etcdctl"))
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", member.client_url))
            .args(["snapshot", "save"])
            .arg(&local))?;
        baseline_backup.push(seconds);
        snapshot_size = std::fs::metadata(&local)?.len();

        // The S3 server's first large upload is slower than the next ones
        // (it grows its memory and temporary files): one untimed upload of
        // the same size first, so neither measured upload pays for it.
        if round == 0 {
            moto.boto3_upload_seconds(&local, "warm-up.db");
        }

        // dkv backup to S3, under /usr/bin/time when there is one.
        let mut command = if time.exists() {
            let mut c = Command::new(time);
            c.arg("-v").arg(&options.dkv);
            c
        } else {
            Command::new(&options.dkv)
        };
        command
            .args([
                "backup",
                "--cluster=bench",
                "--namespace=bench",
                &format!("--destination={}", moto.uri(&format!("round-{round}"))),
                &format!("--endpoints={}", member.client_url),
                &format!(
                    "--termination-log={}",
                    work.join("termination-log").display()
                ),
            ])
            .envs(moto.env());
        let (output, seconds) = run(&mut command)?;
        dkv_backup.push(seconds);
        peak_rss.extend(peak_rss_kib(&String::from_utf8_lossy(&output.stderr)));
        let artifact: dkv_backup::Artifact = serde_json::from_slice(&output.stdout)?;
        stored_size = artifact.size_bytes;

        // Context: the same agent to local disk, and the S3 server's own
        // intake for the same bytes.
        let (_, seconds) = run(Command::new(&options.dkv).args([
            "backup",
            "--cluster=bench",
            "--namespace=bench",
            &format!("--destination=file://{}", work.join("file-dest").display()),
            &format!("--endpoints={}", member.client_url),
            &format!(
                "--termination-log={}",
                work.join("termination-log").display()
            ),
        ]))?;
        dkv_backup_file.push(seconds);
        // Each copy is as large as the database: keep at most a few on disk.
        std::fs::remove_dir_all(work.join("file-dest"))?;
        boto3_upload.push(moto.boto3_upload_seconds(&local, &format!("boto3-{round}.db")));

        // Baseline: etcdutl from local disk.
        let ip = loopback_ip(42, 1);
        let (_, seconds) = run(Command::new(bin.join("etcdutl"))
            .args(["snapshot", "restore"])
            .arg(&local)
            .args([
                "--name=bench-0",
                &format!("--initial-cluster=bench-0=http://{ip}:2380"),
                &format!("--initial-advertise-peer-urls=http://{ip}:2380"),
                "--initial-cluster-token=bench-restored",
                &format!("--data-dir={}", work.join("etcdutl-data").display()),
            ]))?;
        baseline_restore.push(seconds);
        // The whole job, from the object store to a member serving: a
        // standard client's download, etcd's restore tool, the start.
        let downloaded = work.join("downloaded.db");
        let download = moto.boto3_download_seconds(&format!("boto3-{round}.db"), &downloaded);
        std::fs::remove_file(&downloaded)?;
        let start = serving_seconds(&bin, &ip, &work.join("etcdutl-data")).await;
        baseline_restore_and_start.push(download + seconds + start);
        std::fs::remove_dir_all(work.join("etcdutl-data"))?;

        // dkv: fetch + verify from S3, then restore-member.
        let fetched = work.join("fetched.db");
        let (_, fetch_seconds) = run(Command::new(&options.dkv)
            .args([
                "restore-fetch",
                &format!("--uri={}", artifact.uri),
                &format!("--sha256={}", artifact.sha256),
                &format!("--output={}", fetched.display()),
                &format!("--termination-log={}", work.join("fetch-log").display()),
            ])
            .envs(moto.env()))?;
        let (_, restore_seconds) = run(Command::new(&options.dkv)
            .arg("restore-member")
            .args(restore_args(&bin, &fetched, &work.join("dkv-data"), &ip))
            .arg(format!(
                "--termination-log={}",
                work.join("restore-log").display()
            )))?;
        dkv_fetch.push(fetch_seconds);
        dkv_restore.push(fetch_seconds + restore_seconds);
        let start = serving_seconds(&bin, &ip, &work.join("dkv-data")).await;
        dkv_restore_and_start.push(fetch_seconds + restore_seconds + start);
        std::fs::remove_dir_all(&work)?;
        eprintln!("round {round} done");
    }

    let mib = snapshot_size as f64 / f64::from(1 << 20);
    let (bb, db, br, dr, df) = (
        median(baseline_backup),
        median(dkv_backup),
        median(baseline_restore),
        median(dkv_restore),
        median(dkv_fetch),
    );
    let (dbf, boto) = (median(dkv_backup_file), median(boto3_upload));
    let (drs, brs) = (
        median(dkv_restore_and_start),
        median(baseline_restore_and_start),
    );
    let rss_mib = peak_rss.iter().max().map(|kib| *kib as f64 / 1024.0);
    println!("| metric | dkv | baseline | ratio (dkv/baseline throughput) |");
    println!("|---|---|---|---|");
    println!(
        "| backup, {mib:.0} MiB snapshot | `dkv backup` → moto S3: {db:.2} s ({:.0} MiB/s) | `etcdctl snapshot save` → local disk: {bb:.2} s ({:.0} MiB/s) | {:.2} |",
        mib / db,
        mib / bb,
        bb / db
    );
    println!(
        "| backup, context | `dkv backup` → `file://`: {dbf:.2} s ({:.0} MiB/s) | boto3 `upload_file` of the etcdctl snapshot → the same moto: {boto:.2} s ({:.0} MiB/s) | {:.2} (file:// vs etcdctl); {:.2} (dkv → moto vs boto3 → moto) |",
        mib / dbf,
        mib / boto,
        bb / dbf,
        boto / db
    );
    println!(
        "| restore | `dkv restore-fetch` + `restore-member`: {dr:.2} s ({:.0} MiB/s; fetch+verify alone {df:.2} s) | `etcdutl snapshot restore` from local disk: {br:.2} s ({:.0} MiB/s) | {:.2} |",
        mib / dr,
        mib / br,
        br / dr
    );
    match rss_mib {
        Some(rss) => println!("| `dkv backup` peak RSS | {rss:.1} MiB | | |"),
        None => println!("| `dkv backup` peak RSS | not measured | | |"),
    }
    println!(
        "{}",
        serde_json::json!({
            "data": options.data,
            "databaseBytes": db_size,
            "snapshotBytes": snapshot_size,
            "storedBytes": stored_size,
            "runs": options.runs,
            "backupSeconds": {"dkv": db, "etcdctlSnapshotSave": bb},
            "backupRatio": bb / db,
            "backupToFileSeconds": dbf,
            "backupToFileRatio": bb / dbf,
            "boto3UploadToMotoSeconds": boto,
            "dkvVsBoto3ToMotoRatio": boto / db,
            "restoreSeconds": {"dkv": dr, "dkvFetchOnly": df, "etcdutlSnapshotRestore": br},
            "restoreRatio": br / dr,
            "restoreAndStartSeconds": {"dkv": drs, "boto3DownloadEtcdutlRestoreStart": brs},
            "dkvBackupPeakRssMiB": rss_mib,
        })
    );
    Ok(())
}
