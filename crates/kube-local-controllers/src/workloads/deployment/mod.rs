//! The Deployment controller, after upstream's `deployment_controller.go`, `sync.go`, `rolling.go` and
//! `recreate.go`.
//!
//! A Deployment owns ReplicaSets (adopting orphans its selector matches, releasing ones it no longer matches); the
//! one whose template is the Deployment's is the new ReplicaSet ([`revision`]), made on demand as
//! `<deployment>-<pod-template-hash>`. `RollingUpdate` grows it and shrinks the old ones within `maxSurge` and
//! `maxUnavailable` ([`rollout`]); `Recreate` scales the old ones to zero and waits for their pods to be gone before
//! scaling the new one up. A resize of the Deployment mid-rollout is shared out between its ReplicaSets in
//! proportion; `spec.paused` stops rollouts but not resizes. Old ReplicaSets scaled to zero are kept up to
//! `revisionHistoryLimit`. Status and conditions: [`status`].
//!
//! Every write carries the resourceVersion it was computed from, so a pass that acted on a cache behind its own
//! earlier writes fails with a conflict and is retried on fresh data.

mod revision;
mod rollout;
mod status;

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use super::Context;
use super::ownership::{
    Claim, Claimant, adopt, claim, controller_ref, controller_uid, release, selects_something,
};
use super::replicaset;
use revision::{DESIRED_REPLICAS, HASH_LABEL, MAX_REPLICAS, REVISION};
use rollout::{Params, actual, by_creation, size};

/// How soon a pass that stopped on a failed write is retried.
const RETRY: Duration = Duration::from_secs(1);

/// A pass stopped early (a write failed or conflicted); the next one starts afresh.
struct Retry;

type Step<T> = Result<T, Retry>;

/// One pass over every Deployment; returns when to look again at the latest.
pub async fn reconcile(ctx: &Context) -> Option<Duration> {
    let mut next: Option<Duration> = None;
    for d in ctx.caches.deployments.state() {
        if let Some(wake) = sync_deployment(ctx, &d).await {
            next = Some(next.map_or(wake, |n| n.min(wake)));
        }
    }
    next
}

async fn sync_deployment(ctx: &Context, d: &Deployment) -> Option<Duration> {
    let uid = d.metadata.uid.as_deref()?;
    let ns = d.metadata.namespace.as_deref().unwrap_or_default();
    let spec = &d.spec;
    if !selects_something(&spec.selector) {
        // Upstream refuses to act on a Deployment that would select every pod.
        return None;
    }
    let replicasets: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), ns);
    let who = Claimant {
        uid,
        namespace: ns,
        selector: &spec.selector,
        deleting: d.metadata.deletion_timestamp.is_some(),
    };
    let mut owned: Vec<ReplicaSet> = Vec::new();
    let mut ownership_changed = false;
    for rs in ctx
        .caches
        .replicasets
        .state_filter(|rs| rs.metadata.namespace.as_deref() == Some(ns))
    {
        match claim(&who, &rs.metadata) {
            Claim::Owned => owned.push((*rs).clone()),
            Claim::Adopt => {
                let owner = controller_ref("apps/v1", "Deployment", &d.metadata);
                ownership_changed |= adopt(&replicasets, &rs.metadata, owner).await;
            }
            Claim::Release => ownership_changed |= release(&replicasets, &rs.metadata, uid).await,
            Claim::Ignore => {}
        }
    }
    if ownership_changed {
        // Act once the cache shows the new owners.
        return Some(Duration::from_millis(100));
    }
    owned.sort_by(by_creation);
    let mut pass = Pass {
        ctx,
        p: Params::of(d),
        d: d.clone(),
        deployments: Api::namespaced(ctx.client.clone(), ns),
        replicasets,
    };
    pass.run(owned).await.unwrap_or(Some(RETRY))
}

/// One Deployment's pass, holding the Deployment as last written.
struct Pass<'a> {
    ctx: &'a Context,
    d: Deployment,
    p: Params,
    deployments: Api<Deployment>,
    replicasets: Api<ReplicaSet>,
}

fn name_of(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

impl Pass<'_> {
    fn paused(&self) -> bool {
        self.d.spec.paused == Some(true)
    }

    fn current_status(&self) -> DeploymentStatus {
        self.d.status.clone().unwrap_or_default()
    }

    async fn run(&mut self, owned: Vec<ReplicaSet>) -> Step<Option<Duration>> {
        if self.d.metadata.deletion_timestamp.is_some() {
            let (new, old) = self.split(owned);
            return self.sync_status(new.as_ref(), &old).await;
        }
        self.check_paused_conditions().await?;
        let (new, old) = self.split(owned);
        let new = match new {
            Some(rs) => Some(self.sync_new_rs(rs, &old).await?),
            None => None,
        };
        let all: Vec<&ReplicaSet> = old.iter().chain(new.as_ref()).collect();
        if self.paused() || rollout::is_scaling_event(&self.p, &all) {
            return self.sync(new, old).await;
        }
        if self.p.rolling {
            self.rolling(new, old).await
        } else {
            self.recreate(new, old).await
        }
    }

    /// The new ReplicaSet (if there is one) and the old ones, oldest first.
    fn split(&self, owned: Vec<ReplicaSet>) -> (Option<ReplicaSet>, Vec<ReplicaSet>) {
        let refs: Vec<&ReplicaSet> = owned.iter().collect();
        let new_name = revision::find_new(&self.d, &refs).and_then(|rs| rs.metadata.name.clone());
        let (new, old): (Vec<ReplicaSet>, Vec<ReplicaSet>) = owned
            .into_iter()
            .partition(|rs| rs.metadata.name.is_some() && rs.metadata.name == new_name);
        (new.into_iter().next(), old)
    }

    async fn write_status(&mut self, status: DeploymentStatus) -> Step<()> {
        if self.d.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let mut d = self.d.clone();
        d.status = Some(status);
        match self
            .deployments
            .replace_status(name_of(&self.d.metadata), &PostParams::default(), &d)
            .await
        {
            Ok(written) => {
                self.d = written;
                Ok(())
            }
            Err(e) => {
                tracing::debug!(deployment = name_of(&self.d.metadata), error = %e, "updating Deployment status");
                Err(Retry)
            }
        }
    }

    /// Records `revision` in the Deployment's `deployment.kubernetes.io/revision` annotation.
    async fn set_revision(&mut self, revision: &str) -> Step<()> {
        let current = self
            .d
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION));
        if current.map(String::as_str) == Some(revision) {
            return Ok(());
        }
        let patch = json!({"metadata": {
            "annotations": {REVISION: revision},
            "resourceVersion": self.d.metadata.resource_version,
        }});
        match self
            .deployments
            .patch(
                name_of(&self.d.metadata),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(written) => {
                self.d = written;
                Ok(())
            }
            Err(e) => {
                tracing::debug!(deployment = name_of(&self.d.metadata), error = %e, "recording the revision");
                Err(Retry)
            }
        }
    }

    /// Upstream's `checkPausedConditions`: a paused or resumed Deployment says so in its Progressing condition
    /// (unless it already timed out), so the pause does not count against the progress deadline.
    async fn check_paused_conditions(&mut self) -> Step<()> {
        if !status::has_progress_deadline(&self.d) {
            return Ok(());
        }
        let mut st = self.current_status();
        let reason = status::get(&st, status::PROGRESSING).and_then(|c| c.reason.clone());
        if reason.as_deref() == Some(status::TIMED_OUT) {
            return Ok(());
        }
        let paused_recorded = reason.as_deref() == Some(status::PAUSED);
        let now = status::now();
        let c = match (self.paused(), paused_recorded) {
            (true, false) => status::condition(
                status::PROGRESSING,
                "Unknown",
                status::PAUSED,
                "Deployment is paused".into(),
                &now,
            ),
            (false, true) => status::condition(
                status::PROGRESSING,
                "Unknown",
                status::RESUMED,
                "Deployment is resumed".into(),
                &now,
            ),
            _ => return Ok(()),
        };
        status::set(&mut st, c);
        self.write_status(st).await
    }

    /// The existing new ReplicaSet brought up to date (upstream's `getNewReplicaSet` when it exists): the
    /// Deployment's annotations and the next revision copied onto it, `minReadySeconds` synced; else the
    /// Deployment's revision annotation taken from it.
    async fn sync_new_rs(&mut self, rs: ReplicaSet, old: &[ReplicaSet]) -> Step<ReplicaSet> {
        let next = old.iter().map(revision::revision_of).max().unwrap_or(0) + 1;
        let mut annotations = rs.metadata.annotations.clone().unwrap_or_default();
        let changed = revision::set_new_rs_annotations(&self.d, &mut annotations, next, None);
        let min_ready = self.d.spec.min_ready_seconds.unwrap_or(0);
        let rs_min_ready = rs.spec.min_ready_seconds.unwrap_or(0);
        if changed || min_ready != rs_min_ready {
            let patch = json!({
                "metadata": {"annotations": annotations, "resourceVersion": rs.metadata.resource_version},
                "spec": {"minReadySeconds": min_ready},
            });
            return match self
                .replicasets
                .patch(
                    name_of(&rs.metadata),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(written) => Ok(written),
                Err(e) => {
                    tracing::debug!(replicaset = name_of(&rs.metadata), error = %e, "syncing the new ReplicaSet");
                    Err(Retry)
                }
            };
        }
        if let Some(r) = rs
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION))
        {
            self.set_revision(r).await?;
        }
        let mut st = self.current_status();
        if status::has_progress_deadline(&self.d) && status::get(&st, status::PROGRESSING).is_none()
        {
            let c = status::condition(
                status::PROGRESSING,
                "True",
                status::FOUND_NEW_RS,
                format!("Found new replica set {:?}", name_of(&rs.metadata)),
                &status::now(),
            );
            status::set(&mut st, c);
            self.write_status(st).await?;
        }
        Ok(rs)
    }

    /// Makes the new ReplicaSet (upstream's `getNewReplicaSet` when none exists), sized as the strategy allows.
    async fn create_new_rs(&mut self, old: &[ReplicaSet]) -> Step<ReplicaSet> {
        let revision = old.iter().map(revision::revision_of).max().unwrap_or(0) + 1;
        let collision_count = self
            .d
            .status
            .as_ref()
            .and_then(|s| s.collision_count)
            .unwrap_or(0);
        let spec = self.d.spec.clone();
        let made = revision::new_replicaset(&self.d, collision_count).ok_or(Retry)?;
        let mut selector = spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_with(Default::default)
            .insert(HASH_LABEL.into(), made.hash.clone());
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(made.name.clone()),
                namespace: self.d.metadata.namespace.clone(),
                labels: made
                    .template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.labels.clone()),
                owner_references: Some(vec![controller_ref(
                    "apps/v1",
                    "Deployment",
                    &self.d.metadata,
                )]),
                ..ObjectMeta::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: spec.min_ready_seconds,
                selector,
                template: Some(made.template),
            },
            status: None,
        };
        let all: Vec<&ReplicaSet> = old.iter().chain([&rs]).collect();
        let replicas = rollout::new_rs_size(&self.p, &all, &rs);
        rs.spec.replicas = Some(replicas);
        let mut annotations = Default::default();
        revision::set_new_rs_annotations(
            &self.d,
            &mut annotations,
            revision,
            Some((self.p.replicas, self.p.replicas + self.p.max_surge)),
        );
        rs.metadata.annotations = Some(annotations);

        let (created, already_existed) =
            match self.replicasets.create(&PostParams::default(), &rs).await {
                Ok(created) => (created, false),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let existing = self
                        .replicasets
                        .get_opt(&made.name)
                        .await
                        .ok()
                        .flatten()
                        .ok_or(Retry)?;
                    let ours = controller_uid(&existing.metadata) == self.d.metadata.uid.as_deref();
                    let same = existing
                        .spec
                        .template
                        .as_ref()
                        .is_some_and(|t| revision::equal_ignore_hash(t, &spec.template));
                    if !(ours && same) {
                        // A hash collision: the next pass hashes with a higher collision count.
                        let mut st = self.current_status();
                        st.collision_count = Some(collision_count + 1);
                        self.write_status(st).await?;
                        return Err(Retry);
                    }
                    (existing, true)
                }
                Err(e) => {
                    tracing::debug!(replicaset = %made.name, error = %e, "creating a ReplicaSet");
                    if status::has_progress_deadline(&self.d) {
                        let mut st = self.current_status();
                        let c = status::condition(
                            status::PROGRESSING,
                            "False",
                            status::RS_CREATE_ERROR,
                            format!("Failed to create new replica set {:?}: {e}", made.name),
                            &status::now(),
                        );
                        status::set(&mut st, c);
                        let _ = self.write_status(st).await;
                    }
                    return Err(Retry);
                }
            };
        self.set_revision(&revision.to_string()).await?;
        if !already_existed && status::has_progress_deadline(&self.d) {
            let mut st = self.current_status();
            let c = status::condition(
                status::PROGRESSING,
                "True",
                status::NEW_RS_CREATED,
                format!("Created new replica set {:?}", made.name),
                &status::now(),
            );
            status::set(&mut st, c);
            self.write_status(st).await?;
        }
        Ok(created)
    }

    /// Sets a ReplicaSet's size and replica annotations (upstream's `scaleReplicaSet`); whether the size changed.
    async fn scale(&mut self, rs: &ReplicaSet, to: i32) -> Step<bool> {
        let resized = size(rs) != to;
        let mut annotations = rs.metadata.annotations.clone().unwrap_or_default();
        let annotated = revision::set_replicas_annotations(
            &mut annotations,
            self.p.replicas,
            self.p.replicas + self.p.max_surge,
        );
        if !resized && !annotated {
            return Ok(false);
        }
        let patch = json!({
            "metadata": {
                "annotations": {
                    DESIRED_REPLICAS: annotations.get(DESIRED_REPLICAS),
                    MAX_REPLICAS: annotations.get(MAX_REPLICAS),
                },
                "resourceVersion": rs.metadata.resource_version,
            },
            "spec": {"replicas": to},
        });
        match self
            .replicasets
            .patch(
                name_of(&rs.metadata),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(resized),
            Err(e) => {
                tracing::debug!(replicaset = name_of(&rs.metadata), error = %e, "scaling a ReplicaSet");
                Err(Retry)
            }
        }
    }

    /// [`Self::scale`] only when the size changes (upstream's `scaleReplicaSetAndRecordEvent`).
    async fn resize(&mut self, rs: &ReplicaSet, to: i32) -> Step<bool> {
        if size(rs) == to {
            return Ok(false);
        }
        self.scale(rs, to).await
    }

    /// Upstream's `sync`, for paused Deployments and resizes: shares the size out, trims history while paused,
    /// and updates the status without touching the Progressing condition.
    async fn sync(
        &mut self,
        new: Option<ReplicaSet>,
        old: Vec<ReplicaSet>,
    ) -> Step<Option<Duration>> {
        let old_refs: Vec<&ReplicaSet> = old.iter().collect();
        let status_replicas = self.d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        for (name, to) in rollout::resize(&self.p, new.as_ref(), &old_refs, status_replicas) {
            if let Some(rs) = old
                .iter()
                .chain(new.as_ref())
                .find(|rs| rs.metadata.name.as_deref() == Some(name.as_str()))
            {
                self.scale(rs, to).await?;
            }
        }
        if self.paused() {
            self.cleanup(&old).await?;
        }
        self.sync_status(new.as_ref(), &old).await
    }

    /// Upstream's `rolloutRolling`: grow the new ReplicaSet, else shrink old ones, else trim history once complete.
    async fn rolling(
        &mut self,
        new: Option<ReplicaSet>,
        old: Vec<ReplicaSet>,
    ) -> Step<Option<Duration>> {
        let new = match new {
            Some(rs) => rs,
            None => self.create_new_rs(&old).await?,
        };
        let all: Vec<&ReplicaSet> = old.iter().chain([&new]).collect();
        let target = rollout::new_rs_size(&self.p, &all, &new);
        if self.resize(&new, target).await? {
            return self.rollout_status(Some(&new), &old).await;
        }
        let old_refs: Vec<&ReplicaSet> = old.iter().collect();
        let mut scaled = false;
        for (name, to) in rollout::old_rs_sizes(&self.p, &old_refs, &new) {
            if let Some(rs) = old
                .iter()
                .find(|rs| rs.metadata.name.as_deref() == Some(name.as_str()))
            {
                scaled |= self.resize(rs, to).await?;
            }
        }
        if scaled {
            return self.rollout_status(Some(&new), &old).await;
        }
        if status::complete(&self.d, &self.current_status()) {
            self.cleanup(&old).await?;
        }
        self.rollout_status(Some(&new), &old).await
    }

    /// Upstream's `rolloutRecreate`: old ReplicaSets to zero; once none of their pods runs, the new one (made now
    /// if need be) to the full count.
    async fn recreate(
        &mut self,
        new: Option<ReplicaSet>,
        old: Vec<ReplicaSet>,
    ) -> Step<Option<Duration>> {
        let mut scaled = false;
        for rs in old.iter().filter(|rs| size(rs) > 0) {
            scaled |= self.resize(rs, 0).await?;
        }
        if scaled || self.old_pods_running(&old) {
            return self.rollout_status(new.as_ref(), &old).await;
        }
        let new = match new {
            Some(rs) => rs,
            None => self.create_new_rs(&old).await?,
        };
        self.resize(&new, self.p.replicas).await?;
        if status::complete(&self.d, &self.current_status()) {
            self.cleanup(&old).await?;
        }
        self.rollout_status(Some(&new), &old).await
    }

    /// Whether any pod of an old ReplicaSet still runs (or is still shutting down).
    fn old_pods_running(&self, old: &[ReplicaSet]) -> bool {
        old.iter().map(actual).sum::<i32>() > 0
            || old.iter().any(|rs| {
                replicaset::pods_of(self.ctx, rs).iter().any(|p| {
                    !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
                })
            })
    }

    /// Upstream's `cleanupDeployment`: deletes the oldest revisions beyond `revisionHistoryLimit` among old
    /// ReplicaSets that are scaled to zero, have no pods and have observed their spec.
    async fn cleanup(&mut self, old: &[ReplicaSet]) -> Step<()> {
        let Some(limit) = self.d.spec.revision_history_limit else {
            return Ok(());
        };
        let mut cleanable: Vec<&ReplicaSet> = old
            .iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        let excess = cleanable
            .len()
            .saturating_sub(usize::try_from(limit).unwrap_or(0));
        if excess == 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| {
            revision::revision_of(a)
                .cmp(&revision::revision_of(b))
                .then_with(|| by_creation(a, b))
        });
        for rs in &cleanable[..excess] {
            let observed = rs
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            if actual(rs) != 0 || size(rs) != 0 || rs.metadata.generation.unwrap_or(0) > observed {
                continue;
            }
            match self
                .replicasets
                .delete(name_of(&rs.metadata), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => {
                    tracing::debug!(replicaset = name_of(&rs.metadata), error = %e, "deleting an old ReplicaSet");
                    return Err(Retry);
                }
            }
        }
        Ok(())
    }

    /// Upstream's `syncDeploymentStatus`: counts and `Available`, written if they changed.
    async fn sync_status(
        &mut self,
        new: Option<&ReplicaSet>,
        old: &[ReplicaSet],
    ) -> Step<Option<Duration>> {
        let all: Vec<&ReplicaSet> = old.iter().chain(new).collect();
        let st = status::calculate(&self.d, &self.p, &all, new, &status::now());
        if self.d.status.as_ref() != Some(&st) {
            self.write_status(st).await?;
        }
        Ok(None)
    }

    /// Upstream's `syncRolloutStatus`: [`Self::sync_status`] plus the Progressing condition; wakes for the progress
    /// deadline.
    async fn rollout_status(
        &mut self,
        new: Option<&ReplicaSet>,
        old: &[ReplicaSet],
    ) -> Step<Option<Duration>> {
        let all: Vec<&ReplicaSet> = old.iter().chain(new).collect();
        let now = status::now();
        let st = status::calculate(&self.d, &self.p, &all, new, &now);
        let (st, wake) = status::with_progress(&self.d, st, new, &now);
        if self.d.status.as_ref() != Some(&st) {
            self.write_status(st).await?;
        }
        Ok(wake)
    }
}
