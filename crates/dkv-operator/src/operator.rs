//! `dkv operator`: its arguments ([`OperatorArgs`]), and the wiring of the
//! controllers, the HTTP endpoints, leader election and graceful shutdown.
//!
//! Life of a replica: serve health and metrics at once (a standby is ready
//! too); wait for the leader lease; run the controllers while renewing it.
//! SIGTERM stops the controllers, lets in-flight reconciles finish, then
//! releases the lease so a standby takes over without waiting for expiry.
//! Losing the lease stops the process with an error: a replica that may no
//! longer be leader must not write anything, and a restart is the simplest
//! way to be sure.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::events::Reporter;
use anyhow::Context as _;
use clap::Args;
use kube::Client;
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::cluster::{self, validate::Defaults};
use crate::leader::{LeaderElector, LeaseConfig};
use crate::metrics::Metrics;
use crate::server::{self, EndpointArgs, Health};
use crate::webhook::WebhookArgs;
use dkv_member::logging::LogFormat;

/// The image this binary was released as; pods that run `dkv` subcommands
/// (member-init, backups) use it unless told otherwise.
pub const DEFAULT_IMAGE: &str = concat!("ghcr.io/dkv-io/dkv:", env!("CARGO_PKG_VERSION"));

/// `dkv operator`.
#[derive(Debug, Args)]
pub struct OperatorArgs {
    #[command(flatten)]
    pub endpoints: EndpointArgs,
    #[arg(long, value_enum, default_value = "text", env = "DKV_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "DKV_WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Clusters reconciled at the same time.
    #[arg(long, default_value_t = 8)]
    pub concurrency: u16,
    /// Image that runs member-init and backups in the pods dkv creates.
    #[arg(long, env = "DKV_OPERATOR_IMAGE", default_value = DEFAULT_IMAGE)]
    pub operator_image: String,
    /// Elect a leader among replicas through a Lease (disable only when a
    /// single replica can ever run).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    #[arg(long, default_value = "dkv-operator-leader")]
    pub leader_election_lease: String,
    /// Namespace of the lease; defaults to the operator's own namespace.
    #[arg(long, env = "POD_NAMESPACE", default_value = "dkv-system")]
    pub leader_election_namespace: String,
    /// This replica's identity in the lease; defaults to the pod name.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Validity of the member and client certificates issued for clusters
    /// with `spec.tls` (renewed when a third is left; at least 60).
    #[arg(long, default_value_t = 365 * 24 * 3600)]
    pub tls_certificate_validity_seconds: u64,
    /// Clusters whose members start rolling onto this operator's
    /// member-side code per minute, across the installation, when only the
    /// operator changed (0 holds them all). Each rolls one member at a time;
    /// an operator whose member side did not change restarts no member.
    #[arg(long, default_value_t = crate::cluster::upgrade::member_side::DEFAULT_UPGRADES_PER_MINUTE)]
    pub member_upgrades_per_minute: u32,
    /// Raise to roll every cluster's members onto this operator's image
    /// although its member-side code did not change (say, an image rebuilt
    /// for a fix in its base), at `--member-upgrades-per-minute`.
    #[arg(long, default_value_t = 0)]
    pub member_side_epoch: u32,
    #[command(flatten)]
    pub webhook: WebhookArgs,
}

/// Runs the operator until SIGINT/SIGTERM.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    dkv_member::logging::init(args.log_format);
    let client = Client::try_default()
        .await
        .context("connecting to the Kubernetes API (in-cluster config or KUBECONFIG)")?;

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        info!("shutdown requested");
        let _ = stop_tx.send(true);
    });
    run_with(client, args, stop_rx).await
}

/// Runs the operator with `client` until `stop` turns true. Tests and the
/// embedded local mode call this directly.
pub async fn run_with(
    client: Client,
    args: OperatorArgs,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());

    let endpoints = server::Endpoints::bind(&args.endpoints).await?;
    let server = TaskGuard(tokio::spawn(endpoints.serve(
        client.clone(),
        metrics.clone(),
        health.clone(),
        stop.clone(),
    )));

    // Fail fast with a clear message when the API is unreachable or the CRDs
    // are missing, instead of retrying watches forever.
    client
        .apiserver_version()
        .await
        .context("the Kubernetes API server does not answer")?;

    let defaults = Defaults {
        operator_image: args.operator_image.clone(),
    };
    // Admission is served by every replica, standby or leader: the API
    // server calls whichever pod the webhook Service picks.
    let _webhooks = if args.webhook.enabled {
        let listener = crate::webhook::bind(&args.webhook).await?;
        Some(TaskGuard(tokio::spawn(crate::webhook::run(
            client.clone(),
            args.webhook.clone(),
            listener,
            defaults.clone(),
            stop.clone(),
        ))))
    } else {
        None
    };
    health.ready.store(true, Ordering::Relaxed);

    let identity = args
        .identity
        .clone()
        .unwrap_or_else(|| format!("dkv-{}", std::process::id()));
    let mut elector = args.leader_election.then(|| {
        LeaderElector::new(
            client.clone(),
            LeaseConfig::new(
                args.leader_election_lease.clone(),
                args.leader_election_namespace.clone(),
                identity.clone(),
            ),
        )
    });

    let mut stop_for_election = stop.clone();
    if let Some(elector) = elector.as_mut() {
        info!(identity = %elector.identity(), lease = %args.leader_election_lease, "waiting for the leader lease");
        if elector.acquire(&mut stop_for_election).await.is_none() {
            return finish(server).await;
        }
        info!(identity = %elector.identity(), "became leader");
    }
    metrics.set_leader(true);

    let settings = cluster::Settings {
        namespace: args.namespace.clone(),
        concurrency: args.concurrency,
        certificate_lifetime: cluster::security::certificates::CertificateLifetime {
            leaf: std::time::Duration::from_secs(args.tls_certificate_validity_seconds.max(60)),
        },
        member_upgrades_per_minute: args.member_upgrades_per_minute,
        member_side_epoch: args.member_side_epoch,
    };
    let reporter = Reporter {
        controller: "dkv-operator".into(),
        instance: Some(identity),
    };
    let (lost_tx, lost_rx) = watch::channel(false);
    let controller_stop = stopped_or_lost(stop.clone(), lost_rx.clone());
    let backup_stop = stopped_or_lost(stop.clone(), lost_rx.clone());
    let mut backups = TaskGuard(tokio::spawn(crate::backup::run(
        client.clone(),
        args.namespace.clone(),
        args.operator_image.clone(),
        metrics.clone(),
        backup_stop,
    )));
    let mut controller = TaskGuard(tokio::spawn(cluster::run(
        client.clone(),
        settings,
        defaults,
        metrics.clone(),
        reporter,
        controller_stop,
    )));

    let mut lost = false;
    if let Some(elector) = elector.as_mut() {
        let mut stop_for_hold = stop.clone();
        lost = elector.hold(&mut stop_for_hold).await;
        if lost {
            error!("lost the leader lease; stopping");
            let _ = lost_tx.send(true);
        }
    }
    join_after_stop(
        &mut controller,
        stopped_or_lost(stop.clone(), lost_rx.clone()),
        "cluster controller",
    )
    .await?;
    join_after_stop(
        &mut backups,
        stopped_or_lost(stop.clone(), lost_rx.clone()),
        "backup controller",
    )
    .await?;
    metrics.set_leader(false);
    if let Some(elector) = elector.as_mut()
        && !lost
        && let Err(err) = elector.release().await
    {
        error!(error = %err, "failed to release the leader lease; a standby takes over when it expires");
    }
    if lost {
        anyhow::bail!("lost the leader lease");
    }
    finish(server).await
}

/// A spawned task that is aborted when its guard is dropped: when the
/// operator's own future is dropped (its runtime shuts down, or an embedding
/// program cancels it), nothing it started keeps acting on clusters.
struct TaskGuard<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for TaskGuard<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long a controller may take to finish its reconciles after a stop.
/// (Every step is pinned in status before it acts, so one cut short is
/// resumed by the next leader.)
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

/// Waits for a controller task until it ends or, once `stop` resolved, for
/// at most [`SHUTDOWN_GRACE`]; then aborts it. kube-runtime's controller
/// cannot stop before its first list succeeded (it waits for its caches), so
/// without this an operator stopped while the API server refuses the list
/// (e.g. a conversion webhook not answering yet) would never exit.
async fn join_after_stop(
    task: &mut TaskGuard<()>,
    stop: impl Future<Output = ()>,
    what: &str,
) -> anyhow::Result<()> {
    tokio::select! {
        joined = &mut task.0 => {
            return joined.with_context(|| format!("the {what} task panicked"));
        }
        () = stop => {}
    }
    match tokio::time::timeout(SHUTDOWN_GRACE, &mut task.0).await {
        Ok(joined) => joined.with_context(|| format!("the {what} task panicked")),
        Err(_) => {
            warn!(what, grace = ?SHUTDOWN_GRACE, "did not stop in time; aborting it");
            task.0.abort();
            Ok(())
        }
    }
}

async fn finish(mut server: TaskGuard<anyhow::Result<()>>) -> anyhow::Result<()> {
    (&mut server.0)
        .await
        .context("the HTTP server task panicked")?
        .context("the HTTP endpoints failed")?;
    info!("operator stopped");
    Ok(())
}

/// Resolves on a requested stop or when the leader lease is lost.
async fn stopped_or_lost(stop: watch::Receiver<bool>, lost: watch::Receiver<bool>) {
    tokio::select! {
        _ = stopped(stop) => {}
        _ = stopped(lost) => {}
    }
}

/// Resolves once `rx` holds `true`.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Resolves on SIGINT or SIGTERM.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_controller_that_cannot_stop_is_aborted_after_the_grace_period() {
        let mut task = TaskGuard(tokio::spawn(std::future::pending::<()>()));
        let started = tokio::time::Instant::now();
        let joined = join_after_stop(&mut task, async {}, "stuck controller").await;
        assert!(joined.is_ok());
        assert_eq!(started.elapsed(), SHUTDOWN_GRACE);
        let ended = (&mut task.0).await;
        assert!(ended.is_err_and(|e| e.is_cancelled()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_controller_that_stops_is_joined_without_waiting() {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut rx = stop_rx.clone();
        let mut task = TaskGuard(tokio::spawn(async move {
            let _ = rx.wait_for(|s| *s).await;
        }));
        let started = tokio::time::Instant::now();
        let _ = stop_tx.send(true);
        join_after_stop(&mut task, stopped(stop_rx), "controller")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(started.elapsed() < SHUTDOWN_GRACE);
    }
}
