//! The API server's object semantics independent of HTTP: create, update, patch, apply, delete, get and list, with
//! admission (normalizing, webhooks, validation) and conversion on the way. This module holds the types, reads,
//! creates and what follows a write; the admission chain is in `admit`, updates and patches in `update`, deletes in
//! `delete`, the APIServices of the served group versions in `api_services`, `pods/eviction` (deletes a disruption budget allows) in `eviction`, writes through `/scale` in
//! `scale_subresource`, and what follows a CRD's write or deletion in
//! `crd_lifecycle`.

mod admit;
mod api_services;
mod crd_lifecycle;
mod delete;
mod eviction;
mod scale_subresource;
mod update;

use std::sync::Arc;

use futures::future::BoxFuture;

use serde_json::{Value, json};

use crate::api_error::{ApiError, ApiResult, FieldCause};
use crate::conversion;
use crate::managed_fields;
use crate::meta;
use crate::patch::PatchKind;
use crate::registry::{Registry, ResourceType, StorageResource};
use crate::store::{ObjectKey, Store, StoreError};
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
    /// A write through a CertificateSigningRequest's `/approval`: only its conditions change.
    Approval,
    /// A write through a pod's `/ephemeralcontainers`: only `spec.ephemeralContainers` changes (see
    /// [`crate::ephemeral_containers`]).
    EphemeralContainers,
}

impl Subresource {
    fn name(self) -> Option<&'static str> {
        match self {
            Subresource::Main => None,
            Subresource::Status => Some("status"),
            Subresource::Scale => Some("scale"),
            Subresource::Approval => Some("approval"),
            Subresource::EphemeralContainers => Some("ephemeralcontainers"),
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
    /// The CA that signs approved `kubernetes.io/kube-apiserver-client` CertificateSigningRequests; set when the
    /// server has one (HTTPS).
    certificate_signer: std::sync::OnceLock<crate::tls::CertificateAuthority>,
    /// How pods' log, exec, attach and port-forward reach their node's kubelet; plain TCP unless set.
    kubelet_client: std::sync::OnceLock<crate::kubelet_client::KubeletClient>,
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
        let core = Core {
            store: Store::new(history_limit),
            registry: Registry::new(),
            tokens: Default::default(),
            certificate_signer: Default::default(),
            kubelet_client: Default::default(),
        };
        api_services::sync(&core);
        core
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
            certificate_signer: Default::default(),
            kubelet_client: Default::default(),
        };
        let crds = StorageResource {
            group: "apiextensions.k8s.io".into(),
            resource: "customresourcedefinitions".into(),
        };
        for crd in core.store.list(&crds, None).objects {
            crd_lifecycle::on_crd_written(&core, &crd).await;
        }
        api_services::sync(&core);
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

    /// Boxed because establishing a CRD writes its status, which comes back here.
    fn after_write<'a>(&'a self, rt: &'a ResourceType, saved: &'a Arc<Value>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions" {
                crd_lifecycle::on_crd_written(self, saved).await;
                api_services::sync(self);
            }
            if rt.has_approval() {
                self.sign_certificate_request(rt, saved);
            }
        })
    }

    async fn after_delete(&self, rt: &ResourceType, last: &Arc<Value>) {
        if rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions" {
            crd_lifecycle::on_crd_deleted(self, last);
            api_services::sync(self);
        }
    }

    /// Signs approved CertificateSigningRequests of `kubernetes.io/kube-apiserver-client` with `ca` from now on
    /// (`None`: a server without a CA signs nothing).
    pub fn set_certificate_signer(&self, ca: Option<&crate::tls::CertificateAuthority>) {
        if let Some(ca) = ca {
            let _ = self.certificate_signer.set(ca.clone());
        }
    }

    /// Reach the kubelets this way from now on (a server with a CA speaks TLS to them).
    pub fn set_kubelet_client(&self, client: crate::kubelet_client::KubeletClient) {
        let _ = self.kubelet_client.set(client);
    }

    /// How the API server reaches a kubelet.
    pub(crate) fn kubelet_client(&self) -> crate::kubelet_client::KubeletClient {
        self.kubelet_client.get().cloned().unwrap_or_default()
    }

    /// What the signer does once a request is written approved: its certificate (or `Failed`) in its status,
    /// written unless the request changed meanwhile (its next write is looked at again).
    fn sign_certificate_request(&self, rt: &ResourceType, saved: &Arc<Value>) {
        let Some(ca) = self.certificate_signer.get() else {
            return;
        };
        let Some(signed) = crate::certificate_signing::sign(ca, saved, jiff::Timestamp::now())
        else {
            return;
        };
        let key = Self::key(rt, "", meta::name(saved));
        if let Err(e) = self.store.update(&key, crate::store::rv_of(saved), signed) {
            tracing::debug!(request = meta::name(saved), error = %e, "writing a signed certificate");
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

fn conflict_error(conflicts: &[managed_fields::Conflict]) -> ApiError {
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
    ApiError::apply_conflict(message, causes)
}
