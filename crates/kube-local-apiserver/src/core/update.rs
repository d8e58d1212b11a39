//! Updates and patches (PUT, and PATCH of every kind including server-side apply): the read-modify-write loop with
//! optimistic concurrency, the update rules (identity, status, generation, finalizers) and generation bumps.

use serde_json::{Value, json};

use super::{
    Candidate, Core, Subresource, WriteOptions, Written, conflict_error, patch_mentions_rv,
    strip_for_generation, type_info, without_volatile,
};
use crate::api_error::{ApiError, ApiResult, FieldCause};
use crate::field_set::FieldSet;
use crate::managed_fields;
use crate::meta;
use crate::patch::{self, PatchKind};
use crate::registry::ResourceType;
use crate::store::{StoreError, rv_of};
use crate::strategy;

impl Core {
    /// Turns a client's candidate into the object to store, applying update rules (identity, status, generation, finalizers).
    pub(super) fn prepare_update(
        &self,
        rt: &ResourceType,
        sub: Subresource,
        old: &Value,
        mut new: Value,
        url_namespace: &str,
        url_name: &str,
    ) -> ApiResult<Value> {
        Self::check_identity(rt, url_namespace, &mut new)?;
        strategy::prepare_update(rt, &mut new, old);
        let body_name = meta::name(&new).to_string();
        if body_name.is_empty() {
            meta::set_meta(&mut new, "name", json!(url_name));
        } else if body_name != url_name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
            )));
        }
        let old_meta = old
            .get("metadata")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        {
            let m = meta::meta_mut(&mut new);
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_meta.get(k) {
                    Some(v) => m.insert(k.to_string(), v.clone()),
                    None => m.remove(k),
                };
            }
            m.remove("selfLink");
            if !m.contains_key("managedFields")
                && let Some(mf) = old_meta.get("managedFields")
            {
                m.insert("managedFields".into(), mf.clone());
            }
        }
        match sub {
            Subresource::Main | Subresource::Scale => {
                if rt.status {
                    let root = meta::object_mut(&mut new);
                    match old.get("status") {
                        Some(s) => root.insert("status".into(), s.clone()),
                        None => root.remove("status"),
                    };
                }
            }
            Subresource::Approval => {
                let conditions = new.pointer("/status/conditions").cloned();
                let managed = new.pointer("/metadata/managedFields").cloned();
                let mut out = old.clone();
                let root = meta::object_mut(&mut out);
                let status = root.entry("status").or_insert_with(|| json!({}));
                if !status.is_object() {
                    *status = json!({});
                }
                if let Some(status) = status.as_object_mut() {
                    match conditions {
                        Some(c) => status.insert("conditions".into(), c),
                        None => status.remove("conditions"),
                    };
                }
                if let Some(mf) = managed {
                    meta::set_meta(&mut out, "managedFields", mf);
                }
                new = out;
            }
            Subresource::EphemeralContainers => {
                new = crate::ephemeral_containers::keep_only_ephemeral_containers(old, &new);
            }
            Subresource::Status => {
                let status = new.get("status").cloned();
                let managed = new.pointer("/metadata/managedFields").cloned();
                let mut out = old.clone();
                let root = meta::object_mut(&mut out);
                match status {
                    Some(s) => root.insert("status".into(), s),
                    None => root.remove("status"),
                };
                if let Some(mf) = managed {
                    meta::set_meta(&mut out, "managedFields", mf);
                }
                new = out;
            }
        }
        if meta::is_deleting(old) {
            let before = meta::finalizers(old);
            let added: Vec<String> = meta::finalizers(&new)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    url_name,
                    vec![FieldCause::forbidden(
                        "metadata.finalizers",
                        format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                        ),
                    )],
                ));
            }
        }
        Ok(new)
    }

    /// Bumps `generation` when anything but metadata (and status, with a status subresource) changed.
    /// Runs after defaulting and mutating admission, so server-filled fields do not count as changes.
    pub(super) fn bump_generation(rt: &ResourceType, old: &Value, new: &mut Value) {
        if (rt.generation || rt.is_custom())
            && strip_for_generation(old, rt.status) != strip_for_generation(new, rt.status)
        {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta::set_meta(new, "generation", json!(g + 1));
        }
    }

    /// Read-modify-write with optimistic concurrency, retried when another writer got in between.
    /// `mutate` gets the current object (client view) and returns the candidate plus whether it carried an explicit resourceVersion.
    #[allow(clippy::too_many_arguments)]
    pub async fn write(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        sub: Subresource,
        opts: &WriteOptions,
        allow_create: bool,
        mutate: &mut (dyn FnMut(Option<&Value>) -> ApiResult<Candidate> + Send),
    ) -> ApiResult<Written> {
        let key = Self::key(rt, namespace, name);
        for _ in 0..32 {
            let stored = self.store.get(&key);
            let current = match &stored {
                Some(s) => Some(self.served(rt, s, true).await?),
                None => None,
            };
            let candidate = mutate(current.as_ref())?;
            let Some(current) = current else {
                if allow_create && sub == Subresource::Main {
                    let mut obj = candidate.object;
                    if meta::name(&obj).is_empty() {
                        meta::set_meta(&mut obj, "name", json!(name));
                    }
                    return self
                        .create_inner(rt, namespace, &mut obj, opts, candidate.managed)
                        .await;
                }
                return Err(ApiError::not_found(rt.subject(name)));
            };
            let current_rv = rv_of(&current);
            let explicit_rv = meta::resource_version(&candidate.object).to_string();
            if !explicit_rv.is_empty()
                && explicit_rv != current_rv.to_string()
                && candidate.rv_is_precondition
            {
                return Err(ApiError::stale(rt.subject(name)));
            }
            if explicit_rv.is_empty() && !rt.unconditional_update && candidate.rv_is_precondition {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    name,
                    vec![FieldCause::invalid(
                        "metadata.resourceVersion",
                        &json!(0),
                        "must be specified for an update",
                    )],
                ));
            }
            let mut new =
                self.prepare_update(rt, sub, &current, candidate.object, namespace, name)?;
            let warnings = self.admit(rt, &mut new, Some(&current), opts, sub).await?;
            Self::bump_generation(rt, &current, &mut new);
            if !candidate.managed {
                managed_fields::record_update(
                    &type_info(rt),
                    Some(&current),
                    &mut new,
                    &opts.field_manager,
                    &rt.api_version(),
                    sub.name(),
                );
            }
            meta::set_meta(&mut new, "resourceVersion", json!(current_rv.to_string()));
            if without_volatile(&new) == without_volatile(&current) {
                return Ok(Written {
                    object: current,
                    created: false,
                    warnings,
                });
            }
            if opts.dry_run {
                return Ok(Written {
                    object: new,
                    created: false,
                    warnings,
                });
            }
            if meta::is_deleting(&new) && meta::finalizers(&new).is_empty() {
                // Removing the last finalizer of a deleting object deletes it (upstream writes no intermediate update).
                match self.store.delete(&key, Some(current_rv)) {
                    Ok(last) => {
                        self.after_delete(rt, &last).await;
                        let mut shown = new.clone();
                        meta::set_meta(
                            &mut shown,
                            "resourceVersion",
                            json!(meta::resource_version(&last)),
                        );
                        return Ok(Written {
                            object: shown,
                            created: false,
                            warnings,
                        });
                    }
                    Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound) => continue,
                    Err(e) => return Err(ApiError::internal(e.to_string())),
                }
            }
            let to_store = self.storable(rt, new).await?;
            match self.store.update(&key, current_rv, to_store) {
                Ok(saved) => {
                    self.after_write(rt, &saved).await;
                    return Ok(Written {
                        object: self.served(rt, &saved, true).await?,
                        created: false,
                        warnings,
                    });
                }
                Err(StoreError::Conflict { .. })
                    if !explicit_rv.is_empty() && candidate.rv_is_precondition =>
                {
                    return Err(ApiError::stale(rt.subject(name)));
                }
                Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound) => continue,
                Err(e) => return Err(ApiError::internal(e.to_string())),
            }
        }
        Err(ApiError::conflict(
            rt.subject(name),
            "too many concurrent writers",
        ))
    }

    /// PUT.
    pub async fn update(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        sub: Subresource,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        self.write(rt, namespace, name, sub, opts, false, &mut |_| {
            Ok(Candidate {
                object: body.clone(),
                rv_is_precondition: true,
                managed: false,
            })
        })
        .await
    }

    /// PATCH of any kind, including server-side apply.
    #[allow(clippy::too_many_arguments)]
    pub async fn patch(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        sub: Subresource,
        kind: PatchKind,
        body: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        if kind == PatchKind::Strategic && rt.is_custom() {
            return Err(ApiError::unsupported_media(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        let ti = type_info(rt);
        if kind == PatchKind::Apply {
            if opts.field_manager.is_empty() {
                return Err(ApiError::bad_request(
                    "PATCH, application/apply-patch+yaml requires fieldManager parameter",
                ));
            }
            let applied: Value = serde_saphyr::from_slice(body)
                .or_else(|_| serde_json::from_slice(body))
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            let mut applied = applied;
            Self::check_identity(rt, namespace, &mut applied)?;
            let applied_name = meta::name(&applied).to_string();
            if !applied_name.is_empty() && applied_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({applied_name}) does not match the name on the URL ({name})"
                )));
            }
            let status_sub = rt.status;
            return self
                .write(rt, namespace, name, sub, opts, true, &mut |current| {
                    let restrict = |set: &mut FieldSet| match sub {
                        Subresource::Main if status_sub => {
                            set.children.remove("f:status");
                        }
                        Subresource::Status | Subresource::Approval => {
                            set.children.retain(|k, _| k == "f:status");
                        }
                        Subresource::EphemeralContainers => {
                            set.children.retain(|k, _| k == "f:spec");
                            if let Some(spec) = set.children.get_mut("f:spec") {
                                spec.children.retain(|k, _| k == "f:ephemeralContainers");
                            }
                        }
                        Subresource::Main | Subresource::Scale => {}
                    };
                    let merged = managed_fields::apply(
                        &ti,
                        current,
                        &applied,
                        &opts.field_manager,
                        &rt.api_version(),
                        opts.force,
                        sub.name(),
                        restrict,
                    )
                    .map_err(|conflicts| conflict_error(&conflicts))?;
                    let mut merged = merged;
                    if current.is_none() {
                        meta::set_meta(&mut merged, "name", json!(name));
                    }
                    let rv_given = !meta::resource_version(&applied).is_empty();
                    Ok(Candidate {
                        object: merged,
                        rv_is_precondition: rv_given,
                        managed: true,
                    })
                })
                .await;
        }
        self.write(rt, namespace, name, sub, opts, false, &mut |current| {
            let Some(current) = current else {
                return Err(ApiError::not_found(rt.subject(name)));
            };
            let patched = patch::apply(kind, current, body, &ti)?;
            let changed_rv = meta::resource_version(&patched) != meta::resource_version(current);
            let rv_mentioned = patch_mentions_rv(kind, body);
            Ok(Candidate {
                object: patched,
                rv_is_precondition: changed_rv || rv_mentioned,
                managed: false,
            })
        })
        .await
    }
}
