//! The `DistributedKV` controller: this module is its driver.
//!
//! One reconcile is a chain of typed [`stage`]s, each consuming the
//! previous one's output: observed ([`dereference`]) → validated →
//! connected (credentials, then etcd's view) → planned → built ([`build`])
//! → applied → executed; then the ordered maintenance [`tasks`] of a
//! converged cluster. Validate, plan and build are pure and tested from
//! YAML fixtures. However a pass ends, [`status`] alone writes the status,
//! derived from the stages the pass reached, and [`outcome`] alone decides
//! what an error shows and when to look again. Deletion runs [`cleanup`]
//! behind the `dkv.io/finalizer` finalizer. The watches and the controller
//! loop are wired in [`controller`].

pub mod adoption;
pub(crate) mod apply;
pub mod backups;
pub mod build;
pub mod context;
mod controller;
pub(crate) mod dereference;
pub(crate) mod diff;
pub mod error;
pub(crate) mod execute;
pub mod lifecycle;
pub mod maintenance;
pub mod membership;
pub mod outcome;
pub mod pass;
pub mod plan;
pub mod recovery;
pub(crate) mod security;
pub mod stage;
pub mod status;
pub(crate) mod tasks;
pub mod upgrade;
pub mod validate;
pub mod watches;

use std::sync::Arc;
use std::time::Instant;

use dkv_api::DistributedKV;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::{Instrument, field, info_span, warn};

use self::context::Context;
pub use self::controller::{Settings, run};
use self::error::{Error, Result};
pub use self::outcome::retry_delay;
use self::outcome::{AppliedPass, Outcome};
use self::pass::Pass;
use self::stage::planned::Gate;

/// Finalizer that guards deletion (final backup, volume reclaim).
pub const FINALIZER: &str = "dkv.io/finalizer";

/// Runs one reconcile of `dkv`: the finalizer helper routes to the step
/// pipeline or to cleanup; then, however the pass ended, the one status
/// writer derives status from what it observed, and [`outcome`] decides
/// what follows.
pub async fn reconcile(dkv: Arc<DistributedKV>, ctx: Arc<Context>) -> Result<Action> {
    let obj_ref = ObjectRef::from_obj(dkv.as_ref());
    let span = info_span!("reconcile", cluster = %obj_ref, generation = field::Empty);
    if let Some(generation) = dkv.meta().generation {
        span.record("generation", generation);
    }
    async move {
        let started = Instant::now();
        let namespace = dkv.namespace().ok_or(Error::MissingNamespace)?;
        let api: Api<DistributedKV> = Api::namespaced(ctx.client.clone(), &namespace);
        let mut pass = Pass::default();
        let mut pipeline_outcome = None;
        let (reached, outcome_of_pass, pass_ctx) = (&mut pass, &mut pipeline_outcome, ctx.as_ref());
        let result = finalizer(&api, FINALIZER, dkv.clone(), |event| async move {
            match event {
                FinalizerEvent::Apply(dkv) => {
                    // Boxed: the stages' futures together are too large to
                    // live on the stack of the task that polls them.
                    let outcome = Box::pin(reconcile_cluster(&dkv, pass_ctx, reached)).await?;
                    *outcome_of_pass = Some(outcome);
                    // Replaced below, once status says whether it is Degraded.
                    Ok(Action::await_change())
                }
                // A cluster deleted before it adopted the running cluster
                // it joined: its members leave that cluster first, through
                // the stages, one per pass; the finalizer stays meanwhile.
                FinalizerEvent::Cleanup(dkv) if adoption::drive::must_back_out(&dkv) => {
                    let outcome = Box::pin(reconcile_cluster(&dkv, pass_ctx, reached)).await?;
                    *outcome_of_pass = Some(outcome);
                    Err(Error::CleanupWaiting {
                        what: "dkv's members to leave the running cluster it joined".to_owned(),
                    })
                }
                FinalizerEvent::Cleanup(dkv) => lifecycle::cleanup::cleanup(&dkv, pass_ctx).await,
            }
        })
        .await
        .map_err(unwrap_finalizer_error)
        .map(|action| pipeline_outcome.unwrap_or(Outcome::Finalizer(action)));

        let now = jiff::Timestamp::now();
        let fault = result
            .as_ref()
            .err()
            .and_then(|err| outcome::fault_of(&dkv, err));
        let backups = backups::observe(
            &dkv,
            pass.cluster(),
            (
                pass.maintained.continuous.as_ref(),
                pass.maintained.standby.as_ref(),
            ),
            &ctx.backups(),
            now,
        )
        .await;
        let status = status::derive(&dkv, &pass, fault.as_ref(), &backups, &Time(now));
        if dkv.meta().deletion_timestamp.is_none() {
            let current = status.as_ref().or(dkv.status.as_ref());
            ctx.metrics
                .observe_cluster(&status::metrics_view::view(&dkv, current, &pass));
        }
        // Degraded, or still progressing (forming, rolling out): what etcd
        // says is not watched, so such a cluster is looked at again soon
        // even when no step is under way (a member that hangs while the
        // cluster forms changes no object).
        let unsettled = status.as_ref().is_some_and(|s| {
            use dkv_api::conditions::{is_true, types};
            is_true(&s.conditions, types::DEGRADED) || is_true(&s.conditions, types::PROGRESSING)
        });
        let written = match status {
            Some(status) => status::write(&dkv, status, &ctx).await.map(drop),
            None => Ok(()),
        };
        let result = match (result, written) {
            (Ok(outcome), Ok(())) => Ok(outcome::next_action(&outcome, unsettled, now)),
            (Ok(_), Err(err)) => Err(err),
            (Err(err), Ok(())) => Err(err),
            (Err(err), Err(status_err)) => {
                warn!(error = %status_err, "failed to report the error in status");
                Err(err)
            }
        };

        tracing::debug!(?result, unsettled, "pass finished");
        match &result {
            Ok(_) => {
                ctx.clear_failures(&obj_ref);
                ctx.metrics.observe_reconcile("success", started.elapsed());
            }
            Err(err) => {
                let category = err.category();
                ctx.metrics
                    .observe_reconcile(category.as_str(), started.elapsed());
                ctx.metrics.count_error(category.as_str(), err.step());
                ctx.metrics.count_cluster_error(
                    &namespace,
                    &dkv.name_any(),
                    &format!("{}/{}", category.as_str(), err.step()),
                );
                outcome::report(&dkv, err, &ctx).await;
            }
        }
        result
    }
    .instrument(span)
    .await
}

/// Errors of our own stages and tasks come back from the finalizer helper wrapped;
/// unwrap them so their category is the step's.
fn unwrap_finalizer_error(err: kube::runtime::finalizer::Error<Error>) -> Error {
    use kube::runtime::finalizer::Error as F;
    match err {
        F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner,
        other => Error::Finalizer(Box::new(other)),
    }
}

/// The stages of a cluster that is not being deleted, in order, each
/// consuming the previous one's output (see [`stage`]), then the
/// maintenance [`tasks`]. Each stage's output goes into `pass` as the stage
/// finishes, so status is derived from how far the pass got however it
/// ends.
async fn reconcile_cluster(dkv: &DistributedKV, ctx: &Context, pass: &mut Pass) -> Result<Outcome> {
    let namespace = dkv.namespace().ok_or(Error::MissingNamespace)?;
    ctx.stores
        .ready()
        .map_err(|what| Error::CacheNotReady { what })?;
    let now = jiff::Timestamp::now();

    let observed = pass
        .observed
        .insert(dereference::observe(dkv, &namespace, &ctx.stores));
    // The last stage that reads the object: everything after works from
    // the validated spec and what `observed` recorded of its status.
    let validated = pass
        .validated
        .insert(stage::validated::validated(dkv, observed, now, ctx).await?);
    let connected = pass
        .connected
        .insert(stage::connected::connected(validated, observed, ctx).await?);
    let adopting = match &validated.cluster.join {
        Some(join) if adoption::drive::under_way(&validated.cluster, observed) => {
            let back_out = dkv.meta().deletion_timestamp.is_some();
            Some(
                &*pass.adopting.insert(
                    adoption::drive::observe(
                        validated,
                        connected,
                        observed,
                        (join, back_out),
                        now,
                        ctx,
                    )
                    .await?,
                ),
            )
        }
        _ => None,
    };
    let given = adopting.map(|a| {
        a.plan(
            connected
                .credentials
                .tls
                .as_ref()
                .map(|t| t.member_serial.clone()),
        )
    });
    let planned = pass
        .planned
        .insert(stage::planned::planned(validated, connected, observed, given, now, ctx).await?);
    match planned.gate {
        Gate::Paused => return Ok(Outcome::Paused),
        Gate::Pinned => return Ok(Outcome::Pinned),
        Gate::Proceed => {}
    }
    let built = build::build(&validated.cluster, &planned.plan);
    let applied = pass
        .applied
        .insert(stage::applied::applied(built, validated, planned, observed, ctx).await?);
    if planned.plan.hibernated {
        return Ok(Outcome::Applied(AppliedPass::hibernating(
            planned,
            connected.credentials.tls.as_ref(),
        )));
    }
    if let Some(adopting) = adopting {
        return adoption::drive::execute(adopting, validated, connected, observed, ctx).await;
    }
    let executed = pass
        .executed
        .insert(stage::executed::executed(validated, connected, planned, now, ctx).await?);

    let input = tasks::Input {
        observed,
        validated,
        connected,
        planned,
        applied,
        executed,
        now,
    };
    let steps_due = match Box::pin(tasks::run(&input, &mut pass.maintained, ctx)).await? {
        tasks::Finished::Done(outcome) => return Ok(outcome),
        tasks::Finished::Ran { due_at } => due_at,
    };

    Ok(Outcome::Applied(AppliedPass::completed(
        validated, connected, planned, executed, steps_due, now,
    )))
}

/// What the controller does after a failed reconcile: see
/// [`outcome::retry_delay`].
pub fn error_policy(dkv: Arc<DistributedKV>, err: &Error, ctx: Arc<Context>) -> Action {
    match retry_delay(&dkv, err, &ctx, rand::random::<f64>()) {
        Some(delay) => Action::requeue(delay),
        None => Action::await_change(),
    }
}
