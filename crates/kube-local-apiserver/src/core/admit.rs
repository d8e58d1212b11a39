//! Admission of a write, in upstream's order: namespace and identity checks, normalizing (defaults, typed
//! round-trip, unknown fields), mutating and validating webhooks, and the built-in admission plugins.

use serde_json::{Value, json};

use super::{Core, FieldValidation, Subresource, WriteOptions};
use crate::admission;
use crate::api_error::{ApiError, ApiResult, FieldCause};
use crate::meta;
use crate::registry::{ResourceType, StorageResource};
use crate::schema;
use crate::store::ObjectKey;
use crate::strategy;

impl Core {
    /// Upstream's PersistentVolumeClaimResize admission: a claim may grow only when it is bound and its
    /// StorageClass sets `allowVolumeExpansion: true` (403 otherwise, with upstream's message).
    pub(super) fn admit_claim_resize(
        &self,
        rt: &ResourceType,
        name: &str,
        new: &Value,
        old: &Value,
    ) -> ApiResult<()> {
        let (Some(wanted), Some(had)) = (
            strategy::requested_storage(new),
            strategy::requested_storage(old),
        ) else {
            return Ok(());
        };
        if wanted <= had {
            return Ok(());
        }
        let bound = old.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");
        let key = |group: &str, resource: &str, name: &str| ObjectKey {
            storage: StorageResource {
                group: group.into(),
                resource: resource.into(),
            },
            namespace: String::new(),
            name: name.to_string(),
        };
        // The claim's class, or (a claim that relied on the default class)
        // the class its volume was provisioned from.
        let volume_class = || {
            let volume = new.pointer("/spec/volumeName").and_then(Value::as_str)?;
            let pv = self.store.get(&key("", "persistentvolumes", volume))?;
            pv.pointer("/spec/storageClassName")
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let class_name = new
            .pointer("/spec/storageClassName")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .or_else(volume_class);
        let class = class_name.as_deref().and_then(|class| {
            self.store
                .get(&key("storage.k8s.io", "storageclasses", class))
        });
        let expandable = class
            .as_ref()
            .and_then(|c| c.get("allowVolumeExpansion"))
            .and_then(Value::as_bool)
            == Some(true);
        if bound && expandable {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                rt.subject(name),
                "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
            ))
        }
    }

    pub(super) fn check_namespace(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> ApiResult<()> {
        if !rt.namespaced {
            return Ok(());
        }
        if namespace.is_empty() {
            return Err(ApiError::bad_request(
                "the server could not find the requested resource",
            ));
        }
        match self.store.get(&ObjectKey::namespace(namespace)) {
            None => Err(ApiError::not_found(crate::api_error::Subject { group: "", resource: "namespaces", name: namespace })),
            Some(ns) if meta::is_deleting(&ns) => Err(ApiError::forbidden(
                rt.subject(name),
                format!("unable to create new content in namespace {namespace} because it is being terminated"),
            )
            .with_causes(vec![json!({"reason": "NamespaceTerminating", "message": format!("namespace {namespace} is being terminated"), "field": "metadata.namespace"})])),
            Some(_) => Ok(()),
        }
    }

    /// Checks the body's type and namespace against the URL (400s as upstream).
    pub(super) fn check_identity(
        rt: &ResourceType,
        url_namespace: &str,
        obj: &mut Value,
    ) -> ApiResult<()> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !api_version.is_empty() && api_version != rt.api_version() {
            let group_only = api_version.split('/').next().unwrap_or("");
            let same_group = if rt.group.is_empty() {
                !api_version.contains('/')
            } else {
                group_only == rt.group
            };
            if !same_group || rt.custom.is_none() {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({api_version}) does not match the expected API version ({})",
                    rt.api_version()
                )));
            }
        }
        if !kind.is_empty() && kind != rt.kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                rt.kind
            )));
        }
        let body_ns = meta::namespace(obj).to_string();
        if rt.namespaced {
            if body_ns.is_empty() {
                meta::set_meta(obj, "namespace", json!(url_namespace));
            } else if body_ns != url_namespace {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        } else {
            meta::remove_meta(obj, "namespace");
        }
        Ok(())
    }

    /// Unknown fields under `fieldValidation`: an error (Strict), `Warning` headers (Warn) or nothing.
    pub(super) fn report_unknown(
        unknown: &[String],
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
    ) -> ApiResult<()> {
        if unknown.is_empty() {
            return Ok(());
        }
        match opts.field_validation {
            FieldValidation::Strict => {
                let list: Vec<String> = unknown
                    .iter()
                    .map(|u| format!("unknown field {u:?}"))
                    .collect();
                Err(ApiError::bad_request(format!(
                    "strict decoding error: {}",
                    list.join(", ")
                )))
            }
            FieldValidation::Warn => {
                warnings.extend(unknown.iter().map(|u| format!("unknown field {u:?}")));
                Ok(())
            }
            FieldValidation::Ignore => Ok(()),
        }
    }

    /// The object with its served apiVersion/kind, as typed decoding expects them.
    pub(super) fn typed_input(rt: &ResourceType, obj: &Value) -> Value {
        let mut o = obj.clone();
        let m = meta::object_mut(&mut o);
        m.insert("apiVersion".into(), json!(rt.api_version()));
        m.insert("kind".into(), json!(rt.kind));
        o
    }

    /// Decoding, pruning and defaulting: what the API server does to any object it is handed.
    pub(super) fn normalize(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
    ) -> ApiResult<()> {
        if let Some(custom) = &rt.custom {
            if let Some(s) = &custom.schema {
                let unknown = schema::prune(s, obj);
                Self::report_unknown(&unknown, opts, warnings)?;
                schema::apply_defaults(s, obj);
            }
        } else {
            if let Some(decoded) = crate::typed::decode(rt, &Self::typed_input(rt, obj)) {
                let decoded = decoded.map_err(|e| {
                    ApiError::bad_request(format!(
                        "{} in version \"{}\" cannot be handled as a {}: {e}",
                        rt.kind, rt.version, rt.kind
                    ))
                })?;
                Self::report_unknown(&decoded.unknown, opts, warnings)?;
                *obj = decoded.object;
            }
            strategy::apply_defaults(rt, obj);
        }
        Ok(())
    }

    /// The admission chain of a write: normalize → mutating webhooks → validation → validating webhooks.
    /// Returns `Warning` header texts.
    pub(super) async fn admit(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOptions,
        sub: Subresource,
    ) -> ApiResult<Vec<String>> {
        let mut warnings = Vec::new();
        self.normalize(rt, obj, opts, &mut warnings)?;
        if old.is_none() && sub == Subresource::Main && rt.group.is_empty() && rt.kind == "Pod" {
            strategy::add_default_tolerations(obj);
        }
        // StorageObjectInUseProtection: a claim is protected from its creation on (the controller in
        // workloads::volume_protection lets it go once no pod uses it).
        if old.is_none()
            && sub == Subresource::Main
            && rt.group.is_empty()
            && rt.kind == "PersistentVolumeClaim"
        {
            let mut finalizers = meta::finalizers(obj);
            if !finalizers
                .iter()
                .any(|f| f == meta::PVC_PROTECTION_FINALIZER)
            {
                finalizers.push(meta::PVC_PROTECTION_FINALIZER.to_owned());
                meta::set_meta(obj, "finalizers", json!(finalizers));
            }
        }
        let webhooks = !opts.internal && !admission::exempt(rt);
        let name = meta::name(obj).to_string();
        let namespace = meta::namespace(obj).to_string();
        let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
        // Webhooks on `/scale` see Scale objects, as upstream sends them.
        let as_scale = sub == Subresource::Scale;
        let old_scale = old
            .filter(|_| as_scale)
            .map(|o| crate::scale::to_scale(rt, o));
        let old_for_hooks = if as_scale { old_scale.as_ref() } else { old };
        // What the webhooks are sent: the object itself only to validating ones.
        let request = |object| admission::Request {
            rt,
            subresource: sub.name(),
            operation,
            namespace: &namespace,
            name: &name,
            object,
            old_object: old_for_hooks,
            dry_run: opts.dry_run,
        };
        if webhooks {
            let req = request(None);
            if as_scale {
                let mut scale = crate::scale::to_scale(rt, obj);
                if admission::mutate(&self.store, &req, &mut scale, &mut warnings).await? {
                    crate::scale::set_replicas(rt, obj, &scale)?;
                }
            } else {
                let mut mutated = obj.clone();
                if admission::mutate(&self.store, &req, &mut mutated, &mut warnings).await? {
                    *obj = mutated;
                    self.normalize(rt, obj, opts, &mut warnings)?;
                }
            }
        }
        let mut causes: Vec<FieldCause> = strategy::validate_metadata(rt, obj);
        if let Some(custom) = &rt.custom {
            if let Some(s) = &custom.schema {
                let schema_causes = schema::validate(s, obj);
                let valid = schema_causes.is_empty();
                causes.extend(schema_causes);
                if valid && let Some(cel) = &custom.cel {
                    causes.extend(schema::validate_cel(cel, obj, old));
                }
            }
        } else {
            causes.extend(strategy::validate(rt, obj));
            match old {
                // The subresource's own rules replace the pod's update rules (which refuse any change of
                // `spec.ephemeralContainers`).
                Some(old) if sub == Subresource::EphemeralContainers => {
                    causes.extend(crate::ephemeral_containers::validate_update(obj, old));
                }
                Some(old) => causes.extend(strategy::validate_update(rt, obj, old)),
                None if rt.group.is_empty() && rt.kind == "Pod" => {
                    causes.extend(crate::ephemeral_containers::validate_create(obj));
                }
                None => {}
            }
        }
        if rt.kind == "CustomResourceDefinition" && rt.group == "apiextensions.k8s.io" {
            causes.extend(crate::crd::validate(obj, old));
        }
        if rt.has_approval() {
            if old.is_none()
                && let Some(why) = crate::certificate_signing::restricted(obj)
            {
                return Err(ApiError::forbidden(
                    crate::api_error::Subject {
                        group: &rt.group,
                        resource: &rt.plural,
                        name: &name,
                    },
                    why,
                ));
            }
            causes.extend(crate::certificate_signing::validate(obj, old));
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid(&rt.group, &rt.kind, &name, causes));
        }
        if let Some(old) = old
            && rt.group.is_empty()
            && rt.kind == "PersistentVolumeClaim"
        {
            self.admit_claim_resize(rt, &name, obj, old)?;
        }
        if webhooks {
            let scale = as_scale.then(|| crate::scale::to_scale(rt, obj));
            let req = request(Some(scale.as_ref().unwrap_or(obj)));
            admission::validate(&self.store, &req, &mut warnings).await?;
        }
        Ok(warnings)
    }
}
