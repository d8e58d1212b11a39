//! The API server's object semantics independent of HTTP: create, update, patch, apply, delete, get and list, with
//! admission (normalizing, webhooks, validation) and conversion on the way. Writes through `/scale` are in
//! `scale_subresource`; what follows a CRD's write or deletion in `crd_lifecycle`.

mod crd_lifecycle;
mod scale_subresource;

use std::sync::Arc;

use futures::future::BoxFuture;

use serde_json::{Value, json};

use crate::admission;
use crate::api_error::{ApiError, ApiResult, FieldCause};
use crate::conversion;
use crate::field_set::FieldSet;
use crate::managed_fields;
use crate::meta;
use crate::patch::{self, PatchKind};
use crate::registry::{Registry, ResourceType, StorageResource};
use crate::schema;
use crate::store::{ObjectKey, Store, StoreError, rv_of};
use crate::strategy;
use crate::type_info::TypeInfo;
use crate::views;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub field_manager: String,
    pub field_validation: FieldValidation,
    pub force: bool,
    /// Writes by kube-local's own controllers skip admission webhooks.
    pub internal: bool,
}

impl WriteOptions {
    pub fn internal(manager: &str) -> Self {
        WriteOptions {
            internal: true,
            field_manager: manager.to_string(),
            field_validation: FieldValidation::Ignore,
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
    /// A write through `/scale`: stored like the main resource, admitted as
    /// an autoscaling/v1 `Scale` (what webhooks on `<plural>/scale` see).
    Scale,
}

impl Subresource {
    fn name(self) -> Option<&'static str> {
        match self {
            Subresource::Main => None,
            Subresource::Status => Some("status"),
            Subresource::Scale => Some("scale"),
        }
    }
}

/// A successful write: the object as the client sees it, the HTTP code, and `Warning` headers.
#[derive(Debug, Clone)]
pub struct Written {
    pub object: Value,
    pub created: bool,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub propagation: Option<Propagation>,
    pub grace_period_seconds: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
    /// Deletes by kube-local's own controllers skip admission webhooks.
    pub internal: bool,
}

#[derive(Debug, Clone)]
pub enum Deleted {
    /// Gone from storage; the last state.
    Now(Value),
    /// Marked for deletion, waiting on finalizers.
    Pending(Value),
}

pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
pub const ORPHAN_FINALIZER: &str = "orphan";

pub struct Core {
    pub store: Store,
    pub registry: Registry,
    /// Signs and checks ServiceAccount tokens (TokenRequest, TokenReview).
    pub tokens: crate::service_account_tokens::ServiceAccountTokens,
}

fn type_info(rt: &ResourceType) -> TypeInfo<'_> {
    match &rt.custom {
        Some(c) => TypeInfo::custom(&rt.kind, c.schema.as_ref()),
        None => TypeInfo::builtin(&rt.kind),
    }
}

fn strip_for_generation(obj: &Value, status: bool) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if status {
            m.remove("status");
        }
    }
    o
}

fn without_volatile(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
        m.remove("resourceVersion");
    }
    o
}

impl Core {
    pub fn new(history_limit: usize) -> Self {
        Core {
            store: Store::new(history_limit),
            registry: Registry::new(),
            tokens: Default::default(),
        }
    }

    /// A core over a store kept in `dir`; the custom resource types of stored CRDs are served again.
    pub async fn open(
        history_limit: usize,
        dir: &std::path::Path,
    ) -> Result<Self, crate::store::persistence::PersistError> {
        let core = Core {
            store: Store::open(history_limit, dir)?,
            registry: Registry::new(),
            tokens: Default::default(),
        };
        let crds = StorageResource {
            group: "apiextensions.k8s.io".into(),
            resource: "customresourcedefinitions".into(),
        };
        for crd in core.store.list(&crds, None).objects {
            crd_lifecycle::on_crd_written(&core, &crd).await;
        }
        Ok(core)
    }

    pub fn key(rt: &ResourceType, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            storage: rt.storage.clone(),
            namespace: if rt.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }

    /// Upstream's PersistentVolumeClaimResize admission: a claim may grow only when it is bound and its
    /// StorageClass sets `allowVolumeExpansion: true` (403 otherwise, with upstream's message).
    fn admit_claim_resize(
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

    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> ApiResult<Value> {
        self.store
            .get(&Self::key(rt, namespace, name))
            .map(|o| views::to_view(rt, &o))
            .ok_or_else(|| ApiError::not_found(rt.subject(name)))
    }

    /// GET as a client of `rt` sees it: like [`Core::get`], converted by the CRD's webhook when `rt` is not the
    /// version the object is stored in.
    pub async fn read(&self, rt: &ResourceType, namespace: &str, name: &str) -> ApiResult<Value> {
        let stored = self
            .store
            .get(&Self::key(rt, namespace, name))
            .ok_or_else(|| ApiError::not_found(rt.subject(name)))?;
        self.served(rt, &stored, false).await
    }

    /// Stored objects (of any version of `rt`'s type) as a client of `rt` sees them. For CRDs converted by a
    /// webhook, objects in another version go to the webhook in one review (with the defaults of their own version
    /// applied first, and those of `rt` after). `write` says whether the read is part of a write (how a failing
    /// webhook is reported).
    pub async fn served_all(
        &self,
        rt: &ResourceType,
        stored: Vec<Value>,
        write: bool,
    ) -> ApiResult<Vec<Value>> {
        if !conversion::uses_webhook(rt) {
            return Ok(stored.iter().map(|o| views::to_view(rt, o)).collect());
        }
        let defaulted: Vec<Value> = stored
            .into_iter()
            .map(|o| {
                let version = o
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                match self.registry.find(&rt.group, &version, &rt.plural) {
                    Some(own) => views::to_view(&own, &o),
                    None => o,
                }
            })
            .collect();
        let converted =
            conversion::convert(&self.store, rt, defaulted, &rt.api_version(), write).await?;
        Ok(converted.iter().map(|o| views::to_view(rt, o)).collect())
    }

    async fn served(&self, rt: &ResourceType, stored: &Value, write: bool) -> ApiResult<Value> {
        self.served_all(rt, vec![stored.clone()], write)
            .await?
            .pop()
            .ok_or_else(|| ApiError::internal("conversion returned no object"))
    }

    /// A client's object of `rt` in the form it is stored in (converted by the CRD's webhook when needed).
    async fn storable(&self, rt: &ResourceType, mut view: Value) -> ApiResult<Value> {
        let Some(storage_version) = rt
            .custom
            .as_ref()
            .filter(|_| conversion::uses_webhook(rt))
            .map(|c| format!("{}/{}", rt.group, c.storage_version))
        else {
            return Ok(views::from_view(rt, view));
        };
        meta::object_mut(&mut view).insert("apiVersion".into(), json!(rt.api_version()));
        meta::object_mut(&mut view).insert("kind".into(), json!(rt.kind));
        conversion::convert(&self.store, rt, vec![view], &storage_version, true)
            .await?
            .pop()
            .ok_or_else(|| ApiError::internal("conversion returned no object"))
    }

    fn check_namespace(&self, rt: &ResourceType, namespace: &str, name: &str) -> ApiResult<()> {
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
    fn check_identity(rt: &ResourceType, url_namespace: &str, obj: &mut Value) -> ApiResult<()> {
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
    fn report_unknown(
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
    fn typed_input(rt: &ResourceType, obj: &Value) -> Value {
        let mut o = obj.clone();
        let m = meta::object_mut(&mut o);
        m.insert("apiVersion".into(), json!(rt.api_version()));
        m.insert("kind".into(), json!(rt.kind));
        o
    }

    /// Decoding, pruning and defaulting: what the API server does to any object it is handed.
    fn normalize(
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
    async fn admit(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOptions,
        sub: Subresource,
    ) -> ApiResult<Vec<String>> {
        let mut warnings = Vec::new();
        self.normalize(rt, obj, opts, &mut warnings)?;
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
        if webhooks {
            let req = admission::Request {
                rt,
                subresource: sub.name(),
                operation,
                namespace: &namespace,
                name: &name,
                object: None,
                old_object: old_for_hooks,
                dry_run: opts.dry_run,
            };
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
            if let Some(old) = old {
                causes.extend(strategy::validate_update(rt, obj, old));
            }
        }
        if rt.kind == "CustomResourceDefinition" && rt.group == "apiextensions.k8s.io" {
            causes.extend(crate::crd::validate(obj, old));
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
            let req = admission::Request {
                rt,
                subresource: sub.name(),
                operation,
                namespace: &namespace,
                name: &name,
                object: Some(scale.as_ref().unwrap_or(obj)),
                old_object: old_for_hooks,
                dry_run: opts.dry_run,
            };
            admission::validate(&self.store, &req, &mut warnings).await?;
        }
        Ok(warnings)
    }

    /// Create with metadata initialisation. `managed` is set when server-side apply already computed managedFields.
    pub async fn create(
        &self,
        rt: &ResourceType,
        namespace: &str,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        self.create_inner(rt, namespace, &mut obj, opts, false)
            .await
    }

    async fn create_inner(
        &self,
        rt: &ResourceType,
        namespace: &str,
        obj: &mut Value,
        opts: &WriteOptions,
        managed: bool,
    ) -> ApiResult<Written> {
        Self::check_identity(rt, namespace, obj)?;
        let mut name = meta::name(obj).to_string();
        if name.is_empty() {
            let prefix = meta::str_at(obj, &["metadata", "generateName"])
                .unwrap_or("")
                .to_string();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    "",
                    vec![FieldCause::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ));
            }
            name = format!("{prefix}{}", meta::generated_suffix());
            meta::set_meta(obj, "name", json!(name));
        }
        self.check_namespace(rt, namespace, &name)?;
        let m = meta::meta_mut(obj);
        m.insert("uid".into(), json!(meta::new_uid()));
        m.insert("creationTimestamp".into(), json!(meta::now_time()));
        for k in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            m.remove(k);
        }
        if rt.generation || rt.is_custom() {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        if rt.status {
            let root = meta::object_mut(obj);
            match strategy::initial_status(rt, &Value::Object(root.clone())) {
                Some(s) => root.insert("status".into(), s),
                None => root.remove("status"),
            };
        }
        strategy::prepare_create(rt, obj);
        let warnings = self.admit(rt, obj, None, opts, Subresource::Main).await?;
        if !managed {
            managed_fields::record_update(
                &type_info(rt),
                None,
                obj,
                &opts.field_manager,
                &rt.api_version(),
                None,
            );
        }
        let key = Self::key(rt, namespace, &name);
        if opts.dry_run {
            if self.store.get(&key).is_some() {
                return Err(ApiError::already_exists(rt.subject(&name)));
            }
            return Ok(Written {
                object: obj.clone(),
                created: true,
                warnings,
            });
        }
        let stored = self.storable(rt, obj.clone()).await?;
        let saved = self.store.create(key, stored).map_err(|e| match e {
            StoreError::AlreadyExists => ApiError::already_exists(rt.subject(&name)),
            other => ApiError::internal(other.to_string()),
        })?;
        self.after_write(rt, &saved).await;
        Ok(Written {
            object: self.served(rt, &saved, true).await?,
            created: true,
            warnings,
        })
    }

    /// Turns a client's candidate into the object to store, applying update rules (identity, status, generation, finalizers).
    fn prepare_update(
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
    fn bump_generation(rt: &ResourceType, old: &Value, new: &mut Value) {
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
                        Subresource::Status => {
                            set.children.retain(|k, _| k == "f:status");
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
                    .map_err(|conflicts| conflict_error(rt, name, &conflicts))?;
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

    /// DELETE of one object.
    pub async fn delete(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted> {
        let key = Self::key(rt, namespace, name);
        for _ in 0..32 {
            let Some(stored) = self.store.get(&key) else {
                return Err(ApiError::not_found(rt.subject(name)));
            };
            let current = self.served(rt, &stored, true).await?;
            if let Some(uid) = &opts.precondition_uid
                && uid != meta::uid(&current)
            {
                return Err(ApiError::conflict(
                    rt.subject(name),
                    format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta::uid(&current)
                    ),
                ));
            }
            if let Some(rv) = &opts.precondition_rv
                && rv != meta::resource_version(&current)
            {
                return Err(ApiError::conflict(
                    rt.subject(name),
                    format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta::resource_version(&current)
                    ),
                ));
            }
            if !opts.internal && !admission::exempt(rt) {
                let req = admission::Request {
                    rt,
                    subresource: None,
                    operation: "DELETE",
                    namespace,
                    name,
                    object: None,
                    old_object: Some(&current),
                    dry_run: opts.dry_run,
                };
                admission::validate(&self.store, &req, &mut Vec::new()).await?;
            }
            let mut finalizers = meta::finalizers(&current);
            let mut add = |f: &str| {
                if !finalizers.iter().any(|x| x == f) {
                    finalizers.push(f.to_string());
                }
            };
            match opts.propagation {
                Some(Propagation::Foreground) => add(FOREGROUND_FINALIZER),
                Some(Propagation::Orphan) => add(ORPHAN_FINALIZER),
                _ => {}
            }
            let is_namespace = rt.group.is_empty() && rt.plural == "namespaces";
            let graceful = is_namespace || !finalizers.is_empty();
            if !graceful {
                if opts.dry_run {
                    return Ok(Deleted::Now(current));
                }
                match self.store.delete(&key, Some(rv_of(&stored))) {
                    Ok(last) => {
                        self.after_delete(rt, &last).await;
                        return Ok(Deleted::Now(self.served(rt, &last, true).await?));
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(StoreError::NotFound) => return Err(ApiError::not_found(rt.subject(name))),
                    Err(e) => return Err(ApiError::internal(e.to_string())),
                }
            }
            let mut new = current.clone();
            let already = meta::is_deleting(&current);
            if !already {
                meta::set_meta(&mut new, "deletionTimestamp", json!(meta::now_time()));
                meta::set_meta(
                    &mut new,
                    "deletionGracePeriodSeconds",
                    json!(opts.grace_period_seconds.unwrap_or(0).max(0)),
                );
                if let Some(g) = new.pointer("/metadata/generation").and_then(Value::as_i64)
                    && g > 0
                {
                    meta::set_meta(&mut new, "generation", json!(g + 1));
                }
            }
            if !finalizers.is_empty() {
                meta::set_meta(&mut new, "finalizers", json!(finalizers));
            }
            if is_namespace {
                let root = meta::object_mut(&mut new);
                root.insert("status".into(), json!({"phase": "Terminating"}));
            }
            if new == current || opts.dry_run {
                return Ok(Deleted::Pending(new));
            }
            let to_store = self.storable(rt, new).await?;
            match self.store.update(&key, rv_of(&stored), to_store) {
                Ok(saved) => {
                    self.after_write(rt, &saved).await;
                    return Ok(Deleted::Pending(self.served(rt, &saved, true).await?));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound) => return Err(ApiError::not_found(rt.subject(name))),
                Err(e) => return Err(ApiError::internal(e.to_string())),
            }
        }
        Err(ApiError::conflict(
            rt.subject(name),
            "too many concurrent writers",
        ))
    }

    /// Boxed because establishing a CRD writes its status, which comes back here.
    fn after_write<'a>(&'a self, rt: &'a ResourceType, saved: &'a Arc<Value>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions" {
                crd_lifecycle::on_crd_written(self, saved).await;
            }
        })
    }

    async fn after_delete(&self, rt: &ResourceType, last: &Arc<Value>) {
        if rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions" {
            crd_lifecycle::on_crd_deleted(self, last);
        }
    }

    /// Changes made by the server itself (controllers), bypassing client identity checks but not storage rules.
    pub async fn internal_update(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        sub: Subresource,
        manager: &str,
        f: &mut (dyn FnMut(&mut Value) -> bool + Send),
    ) -> ApiResult<Option<Written>> {
        let mut skipped = false;
        let written = self
            .write(
                rt,
                namespace,
                name,
                sub,
                &WriteOptions::internal(manager),
                false,
                &mut |current| {
                    let Some(current) = current else {
                        return Err(ApiError::not_found(rt.subject(name)));
                    };
                    let mut obj = current.clone();
                    skipped = !f(&mut obj);
                    Ok(Candidate {
                        object: obj,
                        rv_is_precondition: false,
                        managed: false,
                    })
                },
            )
            .await?;
        Ok(if skipped { None } else { Some(written) })
    }
}

/// What a write's mutation produced.
pub struct Candidate {
    pub object: Value,
    /// A resourceVersion in the candidate is a precondition (PUT bodies, patches that set it).
    pub rv_is_precondition: bool,
    /// managedFields were already computed (server-side apply).
    pub managed: bool,
}

fn patch_mentions_rv(kind: PatchKind, body: &[u8]) -> bool {
    match kind {
        PatchKind::Merge | PatchKind::Strategic => serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|p| p.pointer("/metadata/resourceVersion").cloned())
            .is_some_and(|v| !v.is_null()),
        _ => false,
    }
}

fn conflict_error(
    rt: &ResourceType,
    name: &str,
    conflicts: &[managed_fields::Conflict],
) -> ApiError {
    let lines: Vec<String> = conflicts
        .iter()
        .map(|c| {
            format!(
                "conflict with {:?} using {}: {}",
                c.manager, c.api_version, c.path
            )
        })
        .collect();
    let message = if conflicts.len() == 1 {
        format!("Apply failed with 1 conflict: {}", lines.join("\n"))
    } else {
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    let causes = conflicts
        .iter()
        .map(|c| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with {:?} using {}", c.manager, c.api_version), "field": c.path})
        })
        .collect();
    let mut e = ApiError::conflict(rt.subject(name), "").with_causes(causes);
    e.message = message;
    e
}
