//! `dkv restore-fetch` and `dkv restore-member`: the init steps that
//! bootstrap a member of a new cluster from a backup. The first downloads
//! the artifact and verifies its sha256 (only a verified snapshot is ever
//! written to the output path); the second runs the etcd version's restore
//! tool with the member's name and the new cluster's `--initial-cluster`
//! and token. Failures are reported in the termination message.

use anyhow::Context as _;
use dkv_backup::{MemberRestore, RestoreTool};

use crate::backup_agent::report;
use crate::cli::{RestoreFetchArgs, RestoreMemberArgs};

pub async fn fetch(args: &RestoreFetchArgs) -> anyhow::Result<()> {
    crate::telemetry::init(args.log_format);
    if let Some(dir) = &args.clear {
        match tokio::fs::remove_dir_all(dir).await {
            Ok(()) => println!("removed {} (left by an earlier attempt)", dir.display()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                let message = format!("restore fetch: removing {}: {err}", dir.display());
                report(&args.termination_log, &message);
                anyhow::bail!(message);
            }
        }
    }
    let config = args.store.store_config();
    match dkv_backup::fetch_artifact(&config, &args.uri, args.sha256.as_deref(), &args.output).await
    {
        Ok(fetched) => {
            let message = format!(
                "fetched {} to {} ({} bytes, sha256 {})",
                args.uri,
                fetched.path.display(),
                fetched.size_bytes,
                fetched.sha256
            );
            println!("{message}");
            report(&args.termination_log, &message);
            Ok(())
        }
        Err(err) => {
            let message = format!("restore fetch of {} failed: {err}", args.uri);
            report(&args.termination_log, &message);
            Err(err).with_context(|| format!("restore fetch of {}", args.uri))
        }
    }
}

pub async fn restore_member(args: &RestoreMemberArgs) -> anyhow::Result<()> {
    crate::telemetry::init(args.log_format);
    let result = async {
        let tool = RestoreTool::for_version(&args.etcd_version, &args.etcd_bin_dir)?;
        dkv_backup::restore_member(
            &tool,
            &MemberRestore {
                snapshot: args.snapshot.clone(),
                name: args.name.clone(),
                initial_cluster: args.initial_cluster.clone(),
                initial_advertise_peer_urls: args.initial_advertise_peer_urls.clone(),
                initial_cluster_token: args.initial_cluster_token.clone(),
                data_dir: args.data_dir.clone(),
            },
        )
        .await
    }
    .await;
    match result {
        Ok(()) => {
            let message = format!(
                "member {} restored into {}",
                args.name,
                args.data_dir.display()
            );
            println!("{message}");
            report(&args.termination_log, &message);
            Ok(())
        }
        Err(err) => {
            let message = format!("restore of member {} failed: {err}", args.name);
            report(&args.termination_log, &message);
            Err(err).with_context(|| format!("restore of member {}", args.name))
        }
    }
}
