//! The registry of served resource types: the built-in table plus custom resources registered from CRDs.

use std::sync::{Arc, RwLock};

use serde_json::Value;

/// Where objects of a type live in the store. Two served types may share one (core/v1 and events.k8s.io/v1 events).
/// Every verb a readable and writable type serves, as discovery lists them.
pub const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]

pub struct StorageResource {
    pub group: String,
    pub resource: String,
}

/// How a served version is derived from the stored form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Stored as served (apart from `apiVersion`).
    Plain,
    /// events.k8s.io/v1 `Event` over the core/v1 store.
    EventsV1,
}

/// JSON paths for the `/scale` subresource (`.spec.replicas` style, as CRDs spell them).
#[derive(Debug, Clone)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

#[derive(Debug, Clone)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// What a CRD contributes to one served version.
#[derive(Debug, Clone)]
pub struct CustomVersion {
    pub crd_name: String,
    pub schema: Option<Value>,
    pub cel: Option<Arc<kube::core::cel::CompiledSchema>>,
    pub printer_columns: Vec<PrinterColumn>,
    pub selectable_fields: Vec<String>,
    /// Name of the storage version; objects are kept with that apiVersion.
    pub storage_version: String,
    pub conversion_webhook: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status: bool,
    pub scale: Option<ScalePaths>,
    /// Whether `metadata.generation` is maintained (upstream strategies differ per type).
    pub generation: bool,
    pub storage: StorageResource,
    pub view: View,
    /// Upstream's `ReturnDeletedObject`: immediate deletes answer with the object instead of a `Status`.
    pub delete_returns_object: bool,
    /// Whether PUT without `metadata.resourceVersion` is accepted.
    pub unconditional_update: bool,
    /// A review (TokenReview, SubjectAccessReview): `create` only, answered and never stored.
    pub create_only: bool,
    pub custom: Option<CustomVersion>,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn is_custom(&self) -> bool {
        self.custom.is_some()
    }

    /// Whether the type has the `log` subresource (core pods only, streamed from the kubelet).
    pub fn has_log(&self) -> bool {
        self.group.is_empty() && self.plural == "pods"
    }

    /// Whether the type has the `approval` subresource (CertificateSigningRequests).
    pub fn has_approval(&self) -> bool {
        self.group == "certificates.k8s.io" && self.plural == "certificatesigningrequests"
    }

    /// Whether the type has the TokenRequest subresource `token` (core serviceaccounts only).
    pub fn has_token(&self) -> bool {
        self.group.is_empty() && self.plural == "serviceaccounts"
    }

    /// Served for reading only: kube-local's own APIServices (it aggregates no other API server).
    pub fn is_read_only(&self) -> bool {
        self.group == "apiregistration.k8s.io" && self.custom.is_none()
    }

    /// The verbs discovery lists for the type.
    pub fn verbs(&self) -> Vec<&'static str> {
        if self.create_only {
            return vec!["create"];
        }
        if self.is_read_only() {
            return vec!["get", "list", "watch"];
        }
        ALL_VERBS.to_vec()
    }

    pub fn subject<'a>(&'a self, name: &'a str) -> crate::api_error::Subject<'a> {
        crate::api_error::Subject {
            group: &self.group,
            resource: &self.plural,
            name,
        }
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
    scale: bool,
    generation: bool,
    all: bool,
    create_only: bool,
}

const fn b(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
) -> Builtin {
    Builtin {
        group,
        version,
        plural,
        kind,
        namespaced,
        short,
        status,
        scale: false,
        generation: false,
        all: false,
        create_only: false,
    }
}

impl Builtin {
    const fn scale(mut self) -> Self {
        self.scale = true;
        self
    }
    const fn generation(mut self) -> Self {
        self.generation = true;
        self
    }
    const fn all(mut self) -> Self {
        self.all = true;
        self
    }
    const fn create_only(mut self) -> Self {
        self.create_only = true;
        self
    }
}

const BUILTINS: &[Builtin] = &[
    b("", "v1", "namespaces", "Namespace", false, &["ns"], true),
    b("", "v1", "pods", "Pod", true, &["po"], true)
        .generation()
        .all(),
    b("", "v1", "services", "Service", true, &["svc"], true).all(),
    b("", "v1", "endpoints", "Endpoints", true, &["ep"], false),
    b("", "v1", "configmaps", "ConfigMap", true, &["cm"], false),
    b("", "v1", "secrets", "Secret", true, &[], false),
    b(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        &["sa"],
        false,
    ),
    b("", "v1", "events", "Event", true, &["ev"], false),
    b(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
        &["pvc"],
        true,
    ),
    b(
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        false,
        &["pv"],
        true,
    ),
    b("", "v1", "nodes", "Node", false, &["no"], true),
    b(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        true,
        &["sts"],
        true,
    )
    .scale()
    .generation()
    .all(),
    b(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        true,
    )
    .scale()
    .generation()
    .all(),
    b(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        true,
        &["rs"],
        true,
    )
    .scale()
    .generation()
    .all(),
    b("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"], true)
        .generation()
        .all(),
    b(
        "apps",
        "v1",
        "controllerrevisions",
        "ControllerRevision",
        true,
        &[],
        false,
    ),
    b("batch", "v1", "jobs", "Job", true, &[], true)
        .generation()
        .all(),
    b("batch", "v1", "cronjobs", "CronJob", true, &["cj"], true)
        .generation()
        .all(),
    b(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        &["pdb"],
        true,
    )
    .generation(),
    b(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        &[],
        false,
    ),
    b(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        true,
        &["ev"],
        false,
    ),
    b(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "EndpointSlice",
        true,
        &[],
        false,
    ),
    b(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        "StorageClass",
        false,
        &["sc"],
        false,
    ),
    b(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
    )
    .generation(),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        false,
        &[],
        false,
    )
    .generation(),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        false,
        &[],
        false,
    )
    .generation(),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        &[],
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
        false,
    ),
    b(
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        "CertificateSigningRequest",
        false,
        &["csr"],
        true,
    ),
    b(
        "apiregistration.k8s.io",
        "v1",
        "apiservices",
        "APIService",
        false,
        &[],
        true,
    ),
    b(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "TokenReview",
        false,
        &[],
        false,
    )
    .create_only(),
    b(
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
        false,
        &[],
        false,
    )
    .create_only(),
    b(
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        false,
        &[],
        false,
    )
    .create_only(),
    b(
        "authorization.k8s.io",
        "v1",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        false,
        &[],
        false,
    )
    .create_only(),
    b(
        "authentication.k8s.io",
        "v1",
        "selfsubjectreviews",
        "SelfSubjectReview",
        false,
        &[],
        false,
    )
    .create_only(),
];

fn builtin_type(bt: &Builtin) -> ResourceType {
    let (storage, view) = if bt.group == "events.k8s.io" {
        (
            StorageResource {
                group: String::new(),
                resource: "events".into(),
            },
            View::EventsV1,
        )
    } else {
        (
            StorageResource {
                group: bt.group.into(),
                resource: bt.plural.into(),
            },
            View::Plain,
        )
    };
    let scale = bt.scale.then(|| ScalePaths {
        spec_replicas: ".spec.replicas".into(),
        status_replicas: ".status.replicas".into(),
        label_selector: Some(".spec.selector".into()),
    });
    ResourceType {
        group: bt.group.into(),
        version: bt.version.into(),
        plural: bt.plural.into(),
        singular: bt.kind.to_ascii_lowercase(),
        kind: bt.kind.into(),
        namespaced: bt.namespaced,
        short_names: bt.short.iter().map(|s| s.to_string()).collect(),
        categories: if bt.all { vec!["all".into()] } else { vec![] },
        status: bt.status,
        scale,
        generation: bt.generation,
        storage,
        view,
        // Upstream's registries that return the object: pods, services, serviceaccounts and storageclasses set
        // `ReturnDeletedObject`; namespaces and CRDs are always deleted through a finalizer, which answers with the
        // object too. Every other built-in answers with a `Status`.
        delete_returns_object: matches!(
            bt.plural,
            "pods"
                | "services"
                | "serviceaccounts"
                | "storageclasses"
                | "namespaces"
                | "customresourcedefinitions"
        ),
        unconditional_update: true,
        create_only: bt.create_only,
        custom: None,
    }
}

/// All served types. Lookups clone `Arc`s so callers never hold the lock across awaits.
pub struct Registry {
    types: RwLock<Vec<Arc<ResourceType>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        Registry {
            types: RwLock::new(BUILTINS.iter().map(|b| Arc::new(builtin_type(b))).collect()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<ResourceType>>> {
        self.types
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn all(&self) -> Vec<Arc<ResourceType>> {
        self.read().clone()
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.read()
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
            .cloned()
    }

    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.read()
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
            .cloned()
    }

    /// The type objects of a storage resource are kept as (used by controllers that act on stored objects).
    pub fn storage_type(&self, storage: &StorageResource) -> Option<Arc<ResourceType>> {
        let types = self.read();
        types
            .iter()
            .find(|t| {
                &t.storage == storage
                    && t.view == View::Plain
                    && t.custom
                        .as_ref()
                        .is_none_or(|c| c.storage_version == t.version)
            })
            .cloned()
    }

    pub fn group_versions(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for t in self.read().iter() {
            let gv = (t.group.clone(), t.version.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
        out
    }

    /// Replaces every served version of the CRD `crd_name` by `versions` (empty removes them).
    pub fn set_custom(&self, crd_name: &str, versions: Vec<ResourceType>) {
        let mut types = self
            .types
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        types.retain(|t| t.custom.as_ref().is_none_or(|c| c.crd_name != crd_name));
        types.extend(versions.into_iter().map(Arc::new));
    }
}
