//! What `dkv local up` installs before its operator starts, as `kubectl apply
//! -k deploy/default` does on a cluster: the `dkv-system` namespace, the
//! operator's ServiceAccount and RBAC and the admission webhook
//! configurations, from deploy/'s own manifests built into the binary. The
//! operator then runs as that ServiceAccount, with exactly deploy/'s grants:
//! a permission the operator lacks fails here as it would on a user's
//! cluster.

use anyhow::Context as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, Resource as _};

/// Where the operator's objects live, as deploy/ puts them.
pub const NAMESPACE: &str = "dkv-system";
/// The operator's ServiceAccount (deploy/rbac/service_account.yaml).
pub const SERVICE_ACCOUNT: &str = "dkv-operator";
/// The field manager of what `dkv local up` applies.
const FIELD_MANAGER: &str = "dkv-local";
/// How long the operator's token lasts: longer than any run of `dkv local
/// up`, which asks for a new one each time it starts. It lives in the
/// process only.
const TOKEN_SECONDS: i64 = 365 * 24 * 3600;

/// deploy/'s manifests, in the order they are applied: the namespace first,
/// roles before their bindings.
const MANIFESTS: &[(&str, &str)] = &[
    (
        "deploy/operator/namespace.yaml",
        include_str!("../../../../deploy/operator/namespace.yaml"),
    ),
    (
        "deploy/rbac/service_account.yaml",
        include_str!("../../../../deploy/rbac/service_account.yaml"),
    ),
    (
        "deploy/rbac/cluster_role.yaml",
        include_str!("../../../../deploy/rbac/cluster_role.yaml"),
    ),
    (
        "deploy/rbac/cluster_role_binding.yaml",
        include_str!("../../../../deploy/rbac/cluster_role_binding.yaml"),
    ),
    (
        "deploy/rbac/leader_election_role.yaml",
        include_str!("../../../../deploy/rbac/leader_election_role.yaml"),
    ),
    (
        "deploy/rbac/leader_election_role_binding.yaml",
        include_str!("../../../../deploy/rbac/leader_election_role_binding.yaml"),
    ),
    (
        "deploy/rbac/metrics_auth_role.yaml",
        include_str!("../../../../deploy/rbac/metrics_auth_role.yaml"),
    ),
    (
        "deploy/rbac/metrics_auth_role_binding.yaml",
        include_str!("../../../../deploy/rbac/metrics_auth_role_binding.yaml"),
    ),
    (
        "deploy/rbac/metrics_reader_role.yaml",
        include_str!("../../../../deploy/rbac/metrics_reader_role.yaml"),
    ),
    (
        "deploy/webhook/cluster_role.yaml",
        include_str!("../../../../deploy/webhook/cluster_role.yaml"),
    ),
    (
        "deploy/webhook/cluster_role_binding.yaml",
        include_str!("../../../../deploy/webhook/cluster_role_binding.yaml"),
    ),
    (
        "deploy/webhook/validating_webhook_configuration.yaml",
        include_str!("../../../../deploy/webhook/validating_webhook_configuration.yaml"),
    ),
    (
        "deploy/webhook/mutating_webhook_configuration.yaml",
        include_str!("../../../../deploy/webhook/mutating_webhook_configuration.yaml"),
    ),
];

/// The API resource of a kind deploy/ uses, and whether it is namespaced.
fn resource(kind: &str) -> Option<(ApiResource, bool)> {
    use k8s_openapi::api::admissionregistration::v1 as admission;
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::api::rbac::v1 as rbac;
    Some(match kind {
        "Namespace" => (ApiResource::erase::<core::Namespace>(&()), false),
        "ServiceAccount" => (ApiResource::erase::<ServiceAccount>(&()), true),
        "ClusterRole" => (ApiResource::erase::<rbac::ClusterRole>(&()), false),
        "ClusterRoleBinding" => (ApiResource::erase::<rbac::ClusterRoleBinding>(&()), false),
        "Role" => (ApiResource::erase::<rbac::Role>(&()), true),
        "RoleBinding" => (ApiResource::erase::<rbac::RoleBinding>(&()), true),
        "ValidatingWebhookConfiguration" => (
            ApiResource::erase::<admission::ValidatingWebhookConfiguration>(&()),
            false,
        ),
        "MutatingWebhookConfiguration" => (
            ApiResource::erase::<admission::MutatingWebhookConfiguration>(&()),
            false,
        ),
        _ => return None,
    })
}

/// The objects of deploy/'s manifests, each with its API resource and namespace.
fn objects() -> anyhow::Result<Vec<(DynamicObject, ApiResource, Option<String>)>> {
    MANIFESTS
        .iter()
        .map(|(path, text)| {
            let object: DynamicObject =
                serde_saphyr::from_str(text).with_context(|| format!("parsing {path}"))?;
            let kind = object
                .types
                .as_ref()
                .map(|t| t.kind.clone())
                .unwrap_or_default();
            let (resource, namespaced) = resource(&kind)
                .with_context(|| format!("{path}: dkv local does not install a {kind:?}"))?;
            let namespace = namespaced.then(|| {
                object
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| NAMESPACE.to_owned())
            });
            Ok((object, resource, namespace))
        })
        .collect()
}

/// Applies deploy/'s namespace, RBAC and webhook configurations with `admin`
/// (server-side apply, so a later `dkv local up` updates what an earlier one
/// made; the webhook configurations, which the operator keeps pointed at
/// itself, only when they do not exist yet).
pub async fn apply(admin: &Client) -> anyhow::Result<()> {
    for (object, resource, namespace) in objects()? {
        let name = object.meta().name.clone().unwrap_or_default();
        let api: Api<DynamicObject> = match &namespace {
            Some(ns) => Api::namespaced_with(admin.clone(), ns, &resource),
            None => Api::all_with(admin.clone(), &resource),
        };
        // The operator points the webhook configurations at its own address
        // once it serves; applying deploy/'s Service reference over that
        // would leave both in the object. They are created once.
        if resource.kind.ends_with("WebhookConfiguration")
            && api
                .get_opt(&name)
                .await
                .with_context(|| format!("reading {} {name}", resource.kind))?
                .is_some()
        {
            continue;
        }
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .with_context(|| format!("applying {} {name}", resource.kind))?;
    }
    Ok(())
}

/// Installs (or updates) `crds` with `admin`, as `kubectl apply` of
/// deploy/crds does, and waits until each is established.
pub async fn crds(admin: &Client, crds: &[CustomResourceDefinition]) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let mut body = serde_json::to_value(crd).context("serializing a CRD")?;
        body["apiVersion"] = "apiextensions.k8s.io/v1".into();
        body["kind"] = "CustomResourceDefinition".into();
        // The operator points the conversion at itself once it serves: a
        // CRD from an earlier run keeps that (applying the Service reference
        // over it would leave both, which kube-apiserver refuses).
        if let Some(stored) = api
            .get_opt(&name)
            .await
            .with_context(|| format!("reading CRD {name}"))?
            && let Some(conversion) = stored.spec.conversion
        {
            body["spec"]["conversion"] =
                serde_json::to_value(conversion).context("serializing a CRD's conversion")?;
        }
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .with_context(|| format!("installing CRD {name}"))?;
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        tokio::time::timeout(std::time::Duration::from_secs(60), established)
            .await
            .with_context(|| format!("CRD {name} was not established within 60 s"))?
            .with_context(|| format!("waiting for CRD {name}"))?;
    }
    Ok(())
}

/// A token of the operator's ServiceAccount, asked of the API server with
/// `admin` (a TokenRequest, as `kubectl create token` does).
pub async fn operator_token(admin: &Client) -> anyhow::Result<String> {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), NAMESPACE)
        .create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .with_context(|| {
            format!("requesting a token of ServiceAccount {NAMESPACE}/{SERVICE_ACCOUNT}")
        })?
        .status
        .and_then(|s| s.token)
        .context("the TokenRequest was answered without a token")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_manifest_is_an_object_local_mode_installs() {
        let objects = objects().unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(objects.len(), MANIFESTS.len());
        let account = objects
            .iter()
            .find(|(o, r, _)| {
                r.kind == "ServiceAccount" && o.metadata.name.as_deref() == Some(SERVICE_ACCOUNT)
            })
            .unwrap_or_else(|| panic!("no ServiceAccount {SERVICE_ACCOUNT}"));
        assert_eq!(account.2.as_deref(), Some(NAMESPACE));
    }

    #[test]
    fn every_rbac_manifest_of_deploy_is_installed() {
        // deploy/rbac and deploy/webhook list what an install applies; local
        // mode must apply the same RBAC, or a missing grant would pass here.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for kustomization in [
            "deploy/rbac/kustomization.yaml",
            "deploy/webhook/kustomization.yaml",
        ] {
            let text = std::fs::read_to_string(root.join(kustomization))
                .unwrap_or_else(|e| panic!("{kustomization}: {e}"));
            let dir = kustomization.trim_end_matches("kustomization.yaml");
            for line in text.lines() {
                let Some(file) = line.trim().strip_prefix("- ") else {
                    continue;
                };
                if file == "service.yaml" {
                    // The webhook Service routes to operator pods; local mode's operator is no pod and registers
                    // its address instead.
                    continue;
                }
                let path = format!("{dir}{file}");
                assert!(
                    MANIFESTS.iter().any(|(p, _)| *p == path),
                    "{path} is applied by deploy/ but not by dkv local"
                );
            }
        }
    }
}
