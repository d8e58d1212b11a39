//! Backup and restore throughput of the `dkv` agent against etcd's own
//! tools, measured in the same run on the same machine (reported as the
//! benchmark harness reports every figure, bench/README.md: a ratio next to
//! its baseline, the absolute values for context).
//!
//! ```sh
//! scripts/install-s3s-fs.sh
//! cargo build --release -p dkv-operator
//! cargo run --release -p dkv-backup --features testing --example backup_throughput -- \
//!     [--size-mib 256] [--dkv target/release/dkv] [--runs 3] [--data random|documents] \
//!     [--server s3s-fs|moto]
//! ```
//!
//! The S3 server is s3s-fs (a Rust server storing objects as files, which
//! keeps up with its clients on the same machine) unless `--server moto`
//! (the tests' Python server, which is the bottleneck of what it measures).
//!
//! - backup: `dkv backup` to the S3 server vs `etcdctl snapshot save` to
//!   local disk, from the same etcd 3.5 member, and vs `etcdctl snapshot
//!   save` followed by boto3 uploading that file to the same server (the
//!   same job done with standard tools); for context, `dkv backup` to a
//!   `file://` destination;
//! - restore: `dkv restore-fetch` (download + sha256 check) followed by
//!   `dkv restore-member` vs `etcdutl snapshot restore` from local disk, and
//!   the whole job up to a serving member vs boto3's download + `etcdutl
//!   snapshot restore` + the same start;
//! - the peak RSS of `dkv backup`, `dkv restore-fetch` and `dkv
//!   restore-member` (each agent logs its own `VmHWM`; restore-member's
//!   etcdutl child is not counted in it).
//!
//! boto3 runs as a user would run it against s3s-fs: `upload_file` and
//! `download_file` with the default `TransferConfig` (8 MiB parts or
//! ranges, up to 10 at a time). Against moto it uploads 2 parts at a time
//! and downloads with one streamed GET, which moto serves best.
//!
//! Each figure is the median of `--runs` runs. Prints a Markdown table and
//! one JSON line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use dkv_backup::testing::{
    EtcdProcess, MotoServer, S3sFsServer, etcd_bin_dir, loopback_ip, repo_root,
};

type Error = Box<dyn std::error::Error>;

struct Options {
    size_mib: usize,
    dkv: PathBuf,
    runs: usize,
    /// `random` (incompressible, the worst case for compression) or
    /// `documents` (JSON documents, which compress as real data does).
    data: String,
    /// `s3s-fs` or `moto`.
    server: String,
}

/// The S3 server measured against.
enum Server {
    S3sFs(S3sFsServer),
    Moto(MotoServer),
}

impl Server {
    fn start(name: &str, under: &Path) -> Self {
        match name {
            "moto" => Server::Moto(MotoServer::start("dkv-bench")),
            _ => Server::S3sFs(S3sFsServer::start("dkv-bench", under)),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Server::S3sFs(_) => "s3s-fs",
            Server::Moto(_) => "moto",
        }
    }

    /// How the standard client (boto3) transfers to and from this server.
    fn client(&self) -> &'static str {
        match self {
            Server::S3sFs(_) => {
                "boto3 upload_file/download_file, default TransferConfig (8 MiB parts, 10 at a time)"
            }
            Server::Moto(_) => {
                "boto3 upload_file (8 MiB parts, 2 at a time), download with one streamed GET"
            }
        }
    }

    fn uri(&self, prefix: &str) -> String {
        match self {
            Server::S3sFs(s) => s.uri(prefix),
            Server::Moto(s) => s.uri(prefix),
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        match self {
            Server::S3sFs(s) => s.env(),
            Server::Moto(s) => s.env(),
        }
    }

    fn upload_seconds(&self, path: &Path, key: &str) -> f64 {
        match self {
            Server::S3sFs(s) => s.boto3_upload_seconds(path, key),
            Server::Moto(s) => s.boto3_upload_seconds(path, key),
        }
    }

    fn download_seconds(&self, key: &str, path: &Path) -> f64 {
        match self {
            Server::S3sFs(s) => s.boto3_download_seconds(key, path),
            Server::Moto(s) => s.boto3_download_seconds(key, path),
        }
    }
}

fn options() -> Result<Options, Error> {
    let mut options = Options {
        size_mib: 256,
        dkv: repo_root().join("target/release/dkv"),
        runs: 3,
        data: "random".to_owned(),
        server: "s3s-fs".to_owned(),
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
            "--server" if value == "s3s-fs" || value == "moto" => options.server = value,
            "--server" => return Err(format!("--server is s3s-fs or moto, not {value}").into()),
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

/// The agent's peak RSS in KiB, from the `peak_rss_kib=` line it logs on
/// success (its own `VmHWM`).
fn peak_rss_kib(stderr: &[u8]) -> Option<u64> {
    // The text log colours field names: drop the escape sequences first.
    let mut plain = String::new();
    let mut in_escape = false;
    for c in String::from_utf8_lossy(stderr).chars() {
        match (in_escape, c) {
            (false, '\u{1b}') => in_escape = true,
            (false, c) => plain.push(c),
            (true, 'm') => in_escape = false,
            (true, _) => {}
        }
    }
    plain.lines().find_map(|line| {
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
        // As the operator's restore does: restore-fetch checked the
        // snapshot's own hash.
        "--snapshot-checked".to_owned(),
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

/// Peak RSS in MiB of the largest of `kib`, if any was measured.
fn max_mib(kib: &[u64]) -> Option<f64> {
    kib.iter().max().map(|kib| *kib as f64 / 1024.0)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let options = options()?;
    let dir = tempfile::tempdir()?;
    let bin = etcd_bin_dir("3.5");
    let server = Server::start(&options.server, dir.path());
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
    let server_name = server.name();

    let mut baseline_backup = Vec::new();
    let mut dkv_backup = Vec::new();
    let mut dkv_backup_file = Vec::new();
    let mut boto3_upload = Vec::new();
    let mut boto3_download = Vec::new();
    let mut baseline_restore = Vec::new();
    let mut dkv_fetch = Vec::new();
    let mut dkv_restore = Vec::new();
    let mut baseline_restore_and_start = Vec::new();
    let mut dkv_restore_and_start = Vec::new();
    let mut backup_rss = Vec::new();
    let mut fetch_rss = Vec::new();
    let mut restore_member_rss = Vec::new();
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

        // moto's first large upload is slower than the next ones (it grows
        // its memory and temporary files): one untimed upload of the same
        // size first, so neither measured upload pays for it.
        if round == 0 && matches!(server, Server::Moto(_)) {
            server.upload_seconds(&local, "warm-up.db");
        }

        let (output, seconds) = run(Command::new(&options.dkv)
            .args([
                "backup",
                "--cluster=bench",
                "--namespace=bench",
                &format!("--destination={}", server.uri(&format!("round-{round}"))),
                &format!("--endpoints={}", member.client_url),
                &format!(
                    "--termination-log={}",
                    work.join("termination-log").display()
                ),
            ])
            .envs(server.env()))?;
        dkv_backup.push(seconds);
        backup_rss.extend(peak_rss_kib(&output.stderr));
        let artifact: dkv_backup::Artifact = serde_json::from_slice(&output.stdout)?;
        stored_size = artifact.size_bytes;

        // Context: the same agent to local disk.
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
        // The second half of the standard tools' backup: the upload.
        boto3_upload.push(server.upload_seconds(&local, &format!("boto3-{round}.db")));

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
        std::fs::remove_file(&local)?;
        // The whole job, from the object store to a member serving: a
        // standard client's download, etcd's restore tool, the start.
        let downloaded = work.join("downloaded.db");
        let download = server.download_seconds(&format!("boto3-{round}.db"), &downloaded);
        boto3_download.push(download);
        std::fs::remove_file(&downloaded)?;
        let start = serving_seconds(&bin, &ip, &work.join("etcdutl-data")).await;
        baseline_restore_and_start.push(download + seconds + start);
        std::fs::remove_dir_all(work.join("etcdutl-data"))?;

        // dkv: fetch + verify from S3, then restore-member.
        let fetched = work.join("fetched.db");
        let (output, fetch_seconds) = run(Command::new(&options.dkv)
            .args([
                "restore-fetch",
                &format!("--uri={}", artifact.uri),
                &format!("--sha256={}", artifact.sha256),
                &format!("--output={}", fetched.display()),
                &format!("--termination-log={}", work.join("fetch-log").display()),
            ])
            .envs(server.env()))?;
        fetch_rss.extend(peak_rss_kib(&output.stderr));
        let (output, restore_seconds) = run(Command::new(&options.dkv)
            .arg("restore-member")
            .args(restore_args(&bin, &fetched, &work.join("dkv-data"), &ip))
            .arg(format!(
                "--termination-log={}",
                work.join("restore-log").display()
            )))?;
        restore_member_rss.extend(peak_rss_kib(&output.stderr));
        dkv_fetch.push(fetch_seconds);
        dkv_restore.push(fetch_seconds + restore_seconds);
        std::fs::remove_file(&fetched)?;
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
    let (dbf, up, down) = (
        median(dkv_backup_file),
        median(boto3_upload),
        median(boto3_download),
    );
    let (drs, brs) = (
        median(dkv_restore_and_start),
        median(baseline_restore_and_start),
    );
    let (backup_mib, fetch_mib, member_mib) = (
        max_mib(&backup_rss),
        max_mib(&fetch_rss),
        max_mib(&restore_member_rss),
    );
    let client = server.client();
    println!("S3 server: {server_name}; standard client: {client}");
    println!("| metric | dkv | baseline | ratio (baseline time / dkv time) |");
    println!("|---|---|---|---|");
    println!(
        "| backup, {mib:.0} MiB snapshot | `dkv backup` → {server_name}: {db:.2} s ({:.0} MiB/s) | `etcdctl snapshot save` → local disk: {bb:.2} s ({:.0} MiB/s) | {:.2} |",
        mib / db,
        mib / bb,
        bb / db
    );
    println!(
        "| full backup | `dkv backup` → {server_name}: {db:.2} s | `etcdctl snapshot save` {bb:.2} s + boto3 upload {up:.2} s | {:.2} |",
        (bb + up) / db
    );
    println!(
        "| backup, context | `dkv backup` → `file://`: {dbf:.2} s ({:.0} MiB/s) | boto3 upload alone: {up:.2} s ({:.0} MiB/s) | {:.2} (file:// vs etcdctl) |",
        mib / dbf,
        mib / up,
        bb / dbf,
    );
    println!(
        "| restore | `dkv restore-fetch` + `restore-member`: {dr:.2} s ({:.0} MiB/s; fetch+verify alone {df:.2} s) | `etcdutl snapshot restore` from local disk: {br:.2} s ({:.0} MiB/s) | {:.2} |",
        mib / dr,
        mib / br,
        br / dr
    );
    println!(
        "| restore + start | dkv: {drs:.2} s | boto3 download {down:.2} s + etcdutl + start: {brs:.2} s | {:.2} |",
        brs / drs
    );
    let shown = |mib: Option<f64>| mib.map_or("not measured".to_owned(), |m| format!("{m:.1} MiB"));
    println!(
        "| peak RSS | `dkv backup` {}, `dkv restore-fetch` {}, `dkv restore-member` {} | | |",
        shown(backup_mib),
        shown(fetch_mib),
        shown(member_mib)
    );
    println!(
        "{}",
        serde_json::json!({
            "server": server_name,
            "standardClient": client,
            "data": options.data,
            "databaseBytes": db_size,
            "snapshotBytes": snapshot_size,
            "storedBytes": stored_size,
            "runs": options.runs,
            "backupSeconds": {"dkv": db, "etcdctlSnapshotSave": bb},
            "backupRatio": bb / db,
            "backupToFileSeconds": dbf,
            "backupToFileRatio": bb / dbf,
            "boto3UploadSeconds": up,
            "boto3DownloadSeconds": down,
            "fullBackupRatio": (bb + up) / db,
            "restoreSeconds": {"dkv": dr, "dkvFetchOnly": df, "etcdutlSnapshotRestore": br},
            "restoreRatio": br / dr,
            "restoreAndStartSeconds": {"dkv": drs, "boto3DownloadEtcdutlRestoreStart": brs},
            "restoreAndStartRatio": brs / drs,
            "peakRssMiB": {
                "dkvBackup": backup_mib,
                "dkvRestoreFetch": fetch_mib,
                "dkvRestoreMember": member_mib,
            },
        })
    );
    Ok(())
}
