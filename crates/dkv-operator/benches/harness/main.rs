//! dkv's benchmark harness: every metric of the benchmark list (`METRICS`),
//! each beside a baseline measured in the same run, and the reliability
//! table; writes `bench/results.md` and `bench/results.json`. Run it
//! through `bench/run.sh` (which installs etcd and moto and builds what it
//! needs).
//!
//! Sections, in order (each runs even when an earlier one failed; a failed
//! section's metrics are reported "not measured" with the error):
//! - `footprint`: the operator process with 0 / 100 / 1,000 clusters on
//!   kube-local without a kubelet;
//! - `ops`: real etcd on kube-local: create, scale, faults, upgrade,
//!   rolling restart, storage growth;
//! - `backup`: backup and restore throughput against etcdctl/etcdutl;
//! - `continuous`: continuous backup's lag and cost at ~1,000 writes/s;
//! - `standby`: a standby's lag at ~1,000 writes/s, a switchover and a
//!   promotion;
//! - `nodes`: several nodes: kube-local's RSS with 3 nodes against 1, the
//!   drains of all three nodes under a dkv cluster against a bare
//!   StatefulSet, a member's lost node replaced.

mod backup_throughput;
mod bare_etcd;
mod bare_statefulset;
mod cluster_ops;
mod continuous;
mod footprint;
mod nodes;
mod operator_process;
mod operator_upgrade;
mod pitr;
mod releases;
mod report;
mod standby;

use dkv_test_support as support;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;

use crate::report::{Metric, Results};

#[derive(Debug, Parser)]
#[command(about = "dkv benchmark harness (see bench/README.md)")]
struct Args {
    /// Where results.md and results.json go.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench"))]
    out: PathBuf,
    /// Cluster counts of the footprint section (ascending).
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    counts: Vec<usize>,
    /// Seconds of API writes counted after convergence (the benchmark target: 60).
    #[arg(long, default_value_t = 60)]
    quiet_seconds: u64,
    /// The built `backup_throughput` example of dkv-backup; without it the
    /// backup metrics are not measured.
    #[arg(long)]
    backup_example: Option<PathBuf>,
    /// Database size of the backup measurement.
    #[arg(long, default_value_t = 1024)]
    backup_size_mib: usize,
    /// Database size of the point-in-time restore measurement (ten times
    /// this is written as changes).
    #[arg(long, default_value_t = 128)]
    pitr_size_mib: usize,
    /// Clusters of the upgrade section.
    #[arg(long, default_value_t = 100)]
    upgrade_clusters: usize,
    /// Sections to run (footprint, ops, backup, continuous, standby, pitr,
    /// nodes, upgrade, releases).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "footprint,ops,backup,continuous,standby,pitr,nodes,upgrade,releases"
    )]
    only: Vec<String>,
    /// Passed by `cargo bench` to every bench target; nothing to do with it.
    #[arg(long, hide = true)]
    bench: bool,
    /// The operator binary the footprint section measures: the container
    /// image's build (`--no-default-features`, no local mode). Default: the
    /// `dkv` this harness was built with (local mode linked in).
    #[arg(long)]
    operator: Option<PathBuf>,
    /// The release build of the `kube-local` binary, whose RSS with 3 nodes
    /// and with 1 the nodes section compares; without it that figure is
    /// not measured.
    #[arg(long)]
    kube_local: Option<PathBuf>,
    /// How the binaries were built, for the record.
    #[arg(long, default_value = "unknown")]
    build: String,
}

/// The project's benchmark list, in its order: (id, name, target).
const METRICS: &[(&str, &str, &str)] = &[
    ("rssIdleMiB", "operator RSS, idle, 0 clusters", "≤ 15 MiB"),
    (
        "rss100MiB",
        "operator RSS with 100 DistributedKVs",
        "≤ 25 MiB",
    ),
    (
        "rss1000MiB",
        "operator RSS with 1000 DistributedKVs",
        "≤ 60 MiB",
    ),
    (
        "apiWritesAfterConvergence100",
        "API writes in the 60 s after 100 clusters converged",
        "0",
    ),
    (
        "apiWritesAfterConvergence1000",
        "API writes in the 60 s after 1000 clusters converged",
        "0",
    ),
    (
        "reconcilesPerSpecChange",
        "reconciles per spec change",
        "≤ 1.0 (≤ 2 incl. the status echo)",
    ),
    (
        "noopReconcilesPerSecond",
        "no-op reconcile throughput",
        "≥ 500 /s",
    ),
    (
        "noopReconcileP99Ms",
        "no-op reconcile p99 latency",
        "≤ 10 ms",
    ),
    (
        "createToAvailableSeconds",
        "create → Available, 3 members",
        "≤ 1.5 × the bare script",
    ),
    (
        "scale3to5to3Seconds",
        "scale 3 → 5 → 3",
        "≤ 2 × etcd's own minimum",
    ),
    (
        "memberKillToHealthySeconds",
        "killed etcd process → 3/3 voters healthy",
        "≤ 10 s",
    ),
    (
        "pvcLossToHealthySeconds",
        "lost volume → 3/3 voters healthy",
        "≤ 30 s (small db)",
    ),
    (
        "leaderChangesPerUpgrade",
        "leader changes per rolling upgrade 3.4 → 3.5",
        "≤ 1",
    ),
    (
        "rollingRestartSeconds",
        "rolling restart of 3 members, writer running",
        "≤ 1.5 × the bare script",
    ),
    (
        "leaderChangesPerRollout",
        "leader changes per rolling restart",
        "≤ 1",
    ),
    (
        "storageGrowthSeconds",
        "storage growth of 3 member volumes, writer running",
        "≤ 30 s, no member restarted",
    ),
    (
        "backupMiBPerSecond",
        "snapshot → object store throughput",
        "≥ 0.8 × etcdctl snapshot save",
    ),
    (
        "backupVsSaveAndUpload",
        "full backup to S3 against etcdctl snapshot save + a standard S3 client's upload",
        "≥ 1.2 ×",
    ),
    (
        "backupDocumentsVsSaveAndUpload",
        "full backup of JSON documents to S3 against etcdctl snapshot save + a standard S3 client's upload",
        "≥ 1.2 ×",
    ),
    (
        "restoreMiBPerSecond",
        "restore throughput",
        "≥ 0.8 × etcdutl snapshot restore",
    ),
    (
        "backupPeakRssMiB",
        "peak RSS of the backup process",
        "≤ 64 MiB",
    ),
    (
        "restorePeakRssMiB",
        "peak RSS of the restore download",
        "≤ 64 MiB",
    ),
    (
        "pitrRestoreVsFullRestore",
        "restore to the newest point after 10 × the database in changes, against a full restore of the same data",
        "≤ 1.5 × the full restore",
    ),
    (
        "continuousLagP99Seconds",
        "continuous backup lag p99 (write → durable segment)",
        "≤ interval + 2 s",
    ),
    (
        "standbyLagP99Seconds",
        "standby lag p99 (write on the source → on the standby)",
        "≤ interval + 2 s",
    ),
    (
        "switchoverSeconds",
        "switchover: demotion edit → first write on the promoted standby",
        "≤ 30 s",
    ),
    (
        "standbyPromoteSeconds",
        "promotion of a caught-up standby: edit → first write",
        "≤ 10 s",
    ),
    (
        "lostNodeToVoterSeconds",
        "member's node declared lost → replacement voter, 3/3",
        "≤ 60 s",
    ),
    (
        "drainThreeNodesSeconds",
        "draining all 3 nodes in turn under a 3-member cluster",
        "≤ 1.5 × the bare StatefulSet",
    ),
    (
        "kubeLocalRss3NodesMiB",
        "kube-local RSS with 3 nodes against 1",
        "≤ 1.3 × 1 node",
    ),
    (
        "memberRestartsOnOperatorUpgrade",
        "member pods restarted by an operator upgrade whose member side is unchanged (100 clusters)",
        "0",
    ),
    (
        "memberUpgradesPerMinute",
        "most clusters starting a member-side rollout in one minute",
        "≤ 2 × rate in any minute",
    ),
    (
        "createOnEtcd35Seconds",
        "create → Available on etcd 3.5.30",
        "≤ 1.5 × the bare script",
    ),
    (
        "createOnEtcd36Seconds",
        "create → Available on etcd 3.6.16",
        "≤ 1.5 × the bare script",
    ),
    (
        "createOnEtcd37Seconds",
        "create → Available on etcd 3.7.3",
        "≤ 1.5 × the bare script",
    ),
    (
        "rollbackOnEtcd35Seconds",
        "rollback of a failed rollout on etcd 3.5.30",
        "≤ 1.5 × by hand",
    ),
    (
        "rollbackOnEtcd36Seconds",
        "rollback of a failed rollout on etcd 3.6.16",
        "≤ 1.5 × by hand",
    ),
    (
        "rollbackOnEtcd37Seconds",
        "rollback of a failed rollout on etcd 3.7.3",
        "≤ 1.5 × by hand",
    ),
    (
        "upgradeToEtcd36Seconds",
        "rolling upgrade 3.5.30 → 3.6.16",
        "≤ 1.5 × by hand",
    ),
    (
        "upgradeToEtcd37Seconds",
        "rolling upgrade 3.6.16 → 3.7.3",
        "≤ 1.5 × by hand",
    ),
    (
        "acknowledgedWritesLost",
        "acknowledged writes lost in fault scenarios (outside deliberate quorum loss)",
        "0",
    ),
];

/// Which section measures a metric (to say why it is missing).
fn section_of(id: &str) -> &'static str {
    match id {
        "createToAvailableSeconds"
        | "scale3to5to3Seconds"
        | "memberKillToHealthySeconds"
        | "pvcLossToHealthySeconds"
        | "leaderChangesPerUpgrade"
        | "rollingRestartSeconds"
        | "leaderChangesPerRollout"
        | "storageGrowthSeconds"
        | "acknowledgedWritesLost" => "ops",
        "backupMiBPerSecond"
        | "backupVsSaveAndUpload"
        | "backupDocumentsVsSaveAndUpload"
        | "restoreMiBPerSecond"
        | "backupPeakRssMiB"
        | "restorePeakRssMiB" => "backup",
        "continuousLagP99Seconds" => "continuous",
        "standbyLagP99Seconds" | "switchoverSeconds" | "standbyPromoteSeconds" => "standby",
        "pitrRestoreVsFullRestore" => "pitr",
        "lostNodeToVoterSeconds" | "drainThreeNodesSeconds" | "kubeLocalRss3NodesMiB" => "nodes",
        "memberRestartsOnOperatorUpgrade" | "memberUpgradesPerMinute" => "upgrade",
        id if id.starts_with("createOnEtcd")
            || id.starts_with("rollbackOnEtcd")
            || id.starts_with("upgradeToEtcd") =>
        {
            "releases"
        }
        _ => "footprint",
    }
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem_gib = operator_process::proc_meminfo_total_kib().map_or(0.0, |k| k as f64 / 1048576.0);
    format!("{cpus} CPUs ({model}), {mem_gib:.0} GiB RAM")
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let started_at = jiff::Timestamp::now()
        .round(jiff::Unit::Second)?
        .to_string();
    let dkv = PathBuf::from(env!("CARGO_BIN_EXE_dkv"));
    let work = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/bench-work"
    ));
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    eprintln!("bench: work directory (operator logs) {}", work.display());

    let mut metrics: Vec<Metric> = Vec::new();
    let mut reliability = Vec::new();
    let mut context = Vec::new();
    let mut failures: Vec<(&'static str, String)> = Vec::new();
    // A section's output added to the report's (see `take_output`).
    macro_rules! take {
        ($section:expr, $joined:expr) => {
            take_output(
                $section,
                $joined,
                &mut metrics,
                &mut reliability,
                &mut context,
                &mut failures,
            )
        };
    }
    let wanted = |s: &str| args.only.iter().any(|o| o == s);

    if wanted("footprint") {
        eprintln!("bench: footprint ({:?} clusters)", args.counts);
        let operator = args.operator.clone().unwrap_or_else(|| dkv.clone());
        let (work, counts) = (work.clone(), args.counts.clone());
        let quiet_window = std::time::Duration::from_secs(args.quiet_seconds);
        let section = tokio::spawn(async move {
            footprint::run(footprint::Settings {
                dkv: &operator,
                work: &work,
                counts,
                quiet_window,
            })
            .await
        });
        match flatten(section.await) {
            Ok(rows) => gather(rows, &mut metrics, &mut context),
            Err(e) => failures.push(("footprint", e)),
        }
    } else {
        failures.push(("footprint", "not selected (--only)".into()));
    }

    if wanted("ops") {
        eprintln!("bench: cluster operations and faults");
        let (dkv, work) = (dkv.clone(), work.clone());
        let section = tokio::spawn(async move {
            let mut out = cluster_ops::Output::default();
            let result = cluster_ops::run(
                cluster_ops::Settings {
                    dkv: &dkv,
                    work: &work,
                },
                &mut out,
            )
            .await;
            (out, result)
        });
        take!("ops", section.await);
    } else {
        failures.push(("ops", "not selected (--only)".into()));
    }

    if !wanted("backup") {
        failures.push(("backup", "not selected (--only)".into()));
    } else if let Some(example) = args.backup_example.clone() {
        eprintln!(
            "bench: backup and restore throughput ({} MiB)",
            args.backup_size_mib
        );
        let (dkv, size_mib) = (dkv.clone(), args.backup_size_mib);
        let section = tokio::spawn(async move {
            backup_throughput::run(backup_throughput::Settings {
                example: &example,
                dkv: &dkv,
                size_mib,
            })
            .await
        });
        match flatten(section.await) {
            Ok(rows) => gather(rows, &mut metrics, &mut context),
            Err(e) => failures.push(("backup", e)),
        }
    } else {
        failures.push(("backup", "no --backup-example given".into()));
    }

    if wanted("continuous") {
        eprintln!("bench: continuous backup under load");
        let (dkv, work) = (dkv.clone(), work.clone());
        let section = tokio::spawn(async move {
            continuous::run(continuous::Settings {
                dkv: &dkv,
                work: &work,
            })
            .await
        });
        match flatten(section.await) {
            Ok(rows) => gather(rows, &mut metrics, &mut context),
            Err(e) => failures.push(("continuous", e)),
        }
    } else {
        failures.push(("continuous", "not selected (--only)".into()));
    }

    if wanted("standby") {
        eprintln!("bench: standby clusters under load");
        let (dkv, work) = (dkv.clone(), work.clone());
        let section = tokio::spawn(async move {
            standby::run(standby::Settings {
                dkv: &dkv,
                work: &work,
            })
            .await
        });
        match flatten(section.await) {
            Ok(rows) => gather(rows, &mut metrics, &mut context),
            Err(e) => failures.push(("standby", e)),
        }
    } else {
        failures.push(("standby", "not selected (--only)".into()));
    }

    if wanted("pitr") {
        eprintln!(
            "bench: point-in-time restore after {} MiB × 10 of changes",
            args.pitr_size_mib
        );
        let (work, size_mib) = (work.clone(), args.pitr_size_mib);
        let section = tokio::spawn(async move {
            pitr::run(pitr::Settings {
                work: &work,
                size_mib,
            })
            .await
        });
        match flatten(section.await) {
            Ok(rows) => gather(rows, &mut metrics, &mut context),
            Err(e) => failures.push(("pitr", e)),
        }
    } else {
        failures.push(("pitr", "not selected (--only)".into()));
    }

    if wanted("nodes") {
        eprintln!("bench: several nodes (drains, a lost node, kube-local's RSS)");
        let (dkv, work, kube_local) = (dkv.clone(), work.clone(), args.kube_local.clone());
        let section = tokio::spawn(async move {
            let mut out = cluster_ops::Output::default();
            let result = nodes::run(
                nodes::Settings {
                    dkv: &dkv,
                    work: &work,
                    kube_local: kube_local.as_deref(),
                },
                &mut out,
            )
            .await;
            (out, result)
        });
        take!("nodes", section.await);
    } else {
        failures.push(("nodes", "not selected (--only)".into()));
    }

    if wanted("upgrade") {
        eprintln!(
            "bench: operator upgrades and member restarts ({} clusters)",
            args.upgrade_clusters
        );
        let (dkv, work, clusters) = (dkv.clone(), work.clone(), args.upgrade_clusters);
        let section = tokio::spawn(async move {
            operator_upgrade::run(operator_upgrade::Settings {
                dkv: &dkv,
                work: &work,
                clusters,
            })
            .await
        });
        match flatten(section.await) {
            Ok(rows) => gather(rows, &mut metrics, &mut context),
            Err(e) => failures.push(("upgrade", e)),
        }
    } else {
        failures.push(("upgrade", "not selected (--only)".into()));
    }

    if wanted("releases") {
        eprintln!("bench: etcd releases against the same steps by hand");
        let section = tokio::spawn(releases::run(dkv.clone(), work.clone()));
        take!("releases", section.await);
    } else {
        failures.push(("releases", "not selected (--only)".into()));
    }

    // The invariant, summed over the fault scenarios that ran.
    let faults: Vec<_> = reliability
        .iter()
        .filter(|r: &&report::Reliability| !r.scenario.starts_with("quorum loss"))
        .collect();
    if !faults.is_empty() {
        let lost: u64 = faults.iter().filter_map(|r| r.lost_writes).sum();
        let acked: u64 = faults.iter().filter_map(|r| r.acknowledged_writes).sum();
        metrics.push(
            Metric::against_target(
                "acknowledgedWritesLost",
                "acknowledged writes lost in fault scenarios (outside deliberate quorum loss)",
                lost as f64,
                "writes",
                0.0,
                "0",
            )
            .with_note(format!(
                "{acked} acknowledged writes over {} scenarios",
                faults.len()
            )),
        );
    }

    // The order of METRICS; whatever is missing says why.
    let mut ordered = Vec::new();
    for (id, name, target) in METRICS {
        match metrics.iter().position(|m| m.id == *id) {
            Some(i) => ordered.push(metrics.remove(i)),
            None => {
                let section = section_of(id);
                let why = failures
                    .iter()
                    .find(|(s, _)| *s == section)
                    .map(|(s, e)| format!("section {s} failed or was skipped: {e}"))
                    .unwrap_or_else(|| "the section ended before measuring it".into());
                ordered.push(Metric::not_measured(id, name, target, &why));
            }
        }
    }
    ordered.extend(metrics);

    let results = Results {
        started_at,
        machine: machine(),
        build: args.build.clone(),
        total_seconds: started.elapsed().as_secs_f64(),
        metrics: ordered,
        reliability,
        sections_not_run: failures.iter().map(|(s, e)| format!("{s}: {e}")).collect(),
        context,
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let md = args.out.join("results.md");
    let json = args.out.join("results.json");
    std::fs::write(&md, results.to_markdown())
        .with_context(|| format!("writing {}", md.display()))?;
    let mut text = serde_json::to_string_pretty(&results).context("serializing the results")?;
    text.push('\n');
    std::fs::write(&json, text).with_context(|| format!("writing {}", json.display()))?;
    eprintln!(
        "bench: wrote {} and {} in {:.0} s",
        md.display(),
        json.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Takes what a section reporting through a [`cluster_ops::Output`]
/// measured — kept even when it failed part way — and its error or panic.
fn take_output(
    section: &'static str,
    joined: Result<(cluster_ops::Output, anyhow::Result<()>), tokio::task::JoinError>,
    metrics: &mut Vec<Metric>,
    reliability: &mut Vec<report::Reliability>,
    context: &mut Vec<(String, String)>,
    failures: &mut Vec<(&'static str, String)>,
) {
    match joined {
        Ok((out, result)) => {
            metrics.extend(out.metrics);
            reliability.extend(out.reliability);
            context.extend(out.context);
            if let Err(e) = result {
                failures.push((section, format!("{e:#}")));
            }
        }
        Err(e) => failures.push((section, panic_message(e))),
    }
}

/// A section's result, with a panic (the shared test helpers assert) or an
/// error turned into its message.
/// A section's metrics and context rows, added to the report's.
fn gather(
    (m, c): (Vec<Metric>, Vec<(String, String)>),
    metrics: &mut Vec<Metric>,
    context: &mut Vec<(String, String)>,
) {
    metrics.extend(m);
    context.extend(c);
}

fn flatten<T>(joined: Result<anyhow::Result<T>, tokio::task::JoinError>) -> Result<T, String> {
    match joined {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(e) => Err(panic_message(e)),
    }
}

fn panic_message(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .map(|m| format!("panicked: {m}"))
            .unwrap_or_else(|| "panicked".into()),
        Err(e) => format!("cancelled: {e}"),
    }
}
