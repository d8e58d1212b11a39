//! `dkv backup`: the agent a backup Job runs.
//!
//! Not implemented in this version: the CronJob exists so that the schedule,
//! history limits and credentials wiring can be reviewed, but the agent that
//! streams snapshots to object storage arrives with the backup feature. Until
//! then it fails loudly instead of pretending a backup was taken.

use crate::cli::BackupArgs;

pub fn run(args: &BackupArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "dkv {}: the backup agent is not available in this version; no backup of cluster {:?} to {} was taken",
        env!("CARGO_PKG_VERSION"),
        args.cluster,
        args.destination
    )
}
