//! The webhook configurations that make the API server call us: what they
//! match, where they send requests, and the `caBundle` they trust.
//!
//! On a cluster, `deploy/webhook/` installs the configurations (calling the
//! `dkv-operator-webhook` Service) and the operator only keeps their
//! `caBundle` equal to its CA. In local mode the API server runs on this
//! machine, so the operator registers them itself with a `url`.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, WebhookClientConfig as CrdWebhookClientConfig,
};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Path of the validating webhook of a kind (`distributedkv`, `distributedkvbackup`).
pub const VALIDATE_CLUSTER_PATH: &str = "/validate/distributedkv";
pub const VALIDATE_BACKUP_PATH: &str = "/validate/distributedkvbackup";
pub const DEFAULT_CLUSTER_PATH: &str = "/default/distributedkv";
pub const DEFAULT_BACKUP_PATH: &str = "/default/distributedkvbackup";
/// Path of the CRD conversion webhook (ConversionReview).
pub const CONVERT_PATH: &str = "/convert";
/// The CRD whose `spec.conversion` calls [`CONVERT_PATH`].
pub const CONVERTED_CRD: &str = "distributedkvs.dkv.io";

/// Where the API server sends admission requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `https://host:port`, paths appended (local mode).
    Url(String),
    /// The webhook Service in front of the operator's pods.
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
}

impl Endpoint {
    fn client_config(&self, path: &str, ca_bundle: Option<&ByteString>) -> WebhookClientConfig {
        let (url, service) = match self {
            Endpoint::Url(base) => (Some(format!("{}{path}", base.trim_end_matches('/'))), None),
            Endpoint::Service {
                namespace,
                name,
                port,
            } => (
                None,
                Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.to_owned()),
                    port: Some(*port),
                }),
            ),
        };
        WebhookClientConfig {
            url,
            service,
            ca_bundle: ca_bundle.cloned(),
        }
    }
}

fn rule(resources: &[&str]) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec![dkv_api::DistributedKV::group(&()).into_owned()]),
        api_versions: Some(vec!["*".to_owned()]),
        operations: Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        scope: Some("Namespaced".to_owned()),
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(BTreeMap::from([(
            dkv_api::labels::MANAGED_BY_KEY.to_owned(),
            dkv_api::labels::MANAGER.to_owned(),
        )])),
        ..ObjectMeta::default()
    }
}

/// The validating configuration: refusals are fail-closed (`Fail`), so no
/// write skips the checks while the operator is unreachable.
pub fn validating(
    name: &str,
    endpoint: &Endpoint,
    ca_bundle: Option<&ByteString>,
) -> ValidatingWebhookConfiguration {
    let hook = |webhook: &str, path: &str, resources: &[&str]| ValidatingWebhook {
        name: webhook.to_owned(),
        client_config: endpoint.client_config(path, ca_bundle),
        rules: Some(vec![rule(resources)]),
        failure_policy: Some("Fail".to_owned()),
        match_policy: Some("Equivalent".to_owned()),
        side_effects: "None".to_owned(),
        admission_review_versions: vec!["v1".to_owned()],
        timeout_seconds: Some(10),
        ..ValidatingWebhook::default()
    };
    ValidatingWebhookConfiguration {
        metadata: meta(name),
        webhooks: Some(vec![
            hook(
                "validate.distributedkv.dkv.io",
                VALIDATE_CLUSTER_PATH,
                // kubectl scale writes through the scale subresource.
                &["distributedkvs", "distributedkvs/scale"],
            ),
            hook(
                "validate.distributedkvbackup.dkv.io",
                VALIDATE_BACKUP_PATH,
                &["distributedkvbackups"],
            ),
        ]),
    }
}

/// The defaulting configuration. `Ignore`: the controller applies the same
/// defaults when it reads a spec, so a write that missed defaulting loses
/// nothing, and validation alone decides whether a write is allowed.
pub fn mutating(
    name: &str,
    endpoint: &Endpoint,
    ca_bundle: Option<&ByteString>,
) -> MutatingWebhookConfiguration {
    let hook = |webhook: &str, path: &str, resources: &[&str]| MutatingWebhook {
        name: webhook.to_owned(),
        client_config: endpoint.client_config(path, ca_bundle),
        rules: Some(vec![rule(resources)]),
        failure_policy: Some("Ignore".to_owned()),
        match_policy: Some("Equivalent".to_owned()),
        reinvocation_policy: Some("Never".to_owned()),
        side_effects: "None".to_owned(),
        admission_review_versions: vec!["v1".to_owned()],
        timeout_seconds: Some(10),
        ..MutatingWebhook::default()
    };
    MutatingWebhookConfiguration {
        metadata: meta(name),
        webhooks: Some(vec![
            hook(
                "default.distributedkv.dkv.io",
                DEFAULT_CLUSTER_PATH,
                &["distributedkvs"],
            ),
            hook(
                "default.distributedkvbackup.dkv.io",
                DEFAULT_BACKUP_PATH,
                &["distributedkvbackups"],
            ),
        ]),
    }
}

/// Updates both configurations (creating one that does not exist) and points
/// the conversion of [`CONVERTED_CRD`] at us (local mode). An update needs
/// only deploy/'s `get` and `update` of the configurations named `name`,
/// which `dkv local up` creates from deploy/webhook before the operator
/// starts.
pub async fn register(
    client: &Client,
    name: &str,
    endpoint: &Endpoint,
    ca_bundle: &ByteString,
) -> Result<(), kube::Error> {
    put(client, validating(name, endpoint, Some(ca_bundle))).await?;
    put(client, mutating(name, endpoint, Some(ca_bundle))).await?;
    if let Endpoint::Url(base) = endpoint {
        let url = format!("{}{CONVERT_PATH}", base.trim_end_matches('/'));
        set_conversion_client(client, CONVERTED_CRD, |config| {
            let changed = config.url.as_deref() != Some(url.as_str())
                || config.service.is_some()
                || config.ca_bundle.as_ref() != Some(ca_bundle);
            config.url = Some(url.clone());
            config.service = None;
            config.ca_bundle = Some(ca_bundle.clone());
            changed
        })
        .await?;
    }
    Ok(())
}

/// Edits the conversion webhook's client config of CRD `name` with `edit`
/// (which says whether it changed anything) and writes it back when it did.
/// A CRD that does not exist, or converts without a webhook (a single
/// version, as the operator's tests install it), is left alone: there is
/// nothing to point at us. Returns `false` when the CRD does not exist.
async fn set_conversion_client(
    client: &Client,
    name: &str,
    edit: impl FnOnce(&mut CrdWebhookClientConfig) -> bool,
) -> Result<bool, kube::Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(mut crd) = api.get_opt(name).await? else {
        return Ok(false);
    };
    let Some(conversion) = crd
        .spec
        .conversion
        .as_mut()
        .filter(|c| c.strategy == "Webhook")
    else {
        return Ok(true);
    };
    let webhook = conversion.webhook.get_or_insert_with(Default::default);
    if webhook.conversion_review_versions.is_empty() {
        webhook.conversion_review_versions = vec!["v1".to_owned()];
    }
    if edit(webhook.client_config.get_or_insert_with(Default::default)) {
        api.replace(name, &Default::default(), &crd).await?;
    }
    Ok(true)
}

/// Makes the cluster-scoped `desired` the stored object: replaces the stored
/// one when its content differs (its metadata and status aside), creates it
/// when there is none.
async fn put<K>(client: &Client, mut desired: K) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + Serialize
        + DeserializeOwned,
{
    let api: Api<K> = Api::all(client.clone());
    let name = desired.meta().name.clone().unwrap_or_default();
    let Some(stored) = api.get_opt(&name).await? else {
        api.create(&PostParams::default(), &desired).await?;
        return Ok(());
    };
    let content = |object: &K| -> Result<serde_json::Value, kube::Error> {
        let mut value = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
        if let Some(map) = value.as_object_mut() {
            map.remove("metadata");
            map.remove("status");
        }
        Ok(value)
    };
    if content(&stored)? == content(&desired)? {
        return Ok(());
    }
    desired.meta_mut().resource_version = stored.meta().resource_version.clone();
    api.replace(&name, &PostParams::default(), &desired).await?;
    Ok(())
}

/// A configuration whose `caBundle` the operator keeps equal to its CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaBundleTarget {
    ValidatingWebhookConfiguration(String),
    MutatingWebhookConfiguration(String),
    /// `spec.conversion.webhook.clientConfig.caBundle` of a CRD.
    CustomResourceDefinition(String),
}

/// Sets `caBundle` in every webhook of `target`; a no-op when it already is.
/// Returns `false` when the configuration does not exist (yet).
pub async fn inject_ca_bundle(
    client: &Client,
    target: &CaBundleTarget,
    ca_bundle: &ByteString,
) -> Result<bool, kube::Error> {
    match target {
        CaBundleTarget::ValidatingWebhookConfiguration(name) => {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            let Some(mut config) = api.get_opt(name).await? else {
                return Ok(false);
            };
            let mut changed = false;
            for hook in config.webhooks.iter_mut().flatten() {
                changed |= set_ca(&mut hook.client_config, ca_bundle);
            }
            if changed {
                api.replace(name, &Default::default(), &config).await?;
            }
        }
        CaBundleTarget::MutatingWebhookConfiguration(name) => {
            let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
            let Some(mut config) = api.get_opt(name).await? else {
                return Ok(false);
            };
            let mut changed = false;
            for hook in config.webhooks.iter_mut().flatten() {
                changed |= set_ca(&mut hook.client_config, ca_bundle);
            }
            if changed {
                api.replace(name, &Default::default(), &config).await?;
            }
        }
        CaBundleTarget::CustomResourceDefinition(name) => {
            return set_conversion_client(client, name, |config| {
                if config.ca_bundle.as_ref() == Some(ca_bundle) {
                    return false;
                }
                config.ca_bundle = Some(ca_bundle.clone());
                true
            })
            .await;
        }
    }
    Ok(true)
}

fn set_ca(config: &mut WebhookClientConfig, ca_bundle: &ByteString) -> bool {
    if config.ca_bundle.as_ref() == Some(ca_bundle) {
        return false;
    }
    config.ca_bundle = Some(ca_bundle.clone());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> Endpoint {
        Endpoint::Service {
            namespace: "dkv-system".into(),
            name: "dkv-operator-webhook".into(),
            port: 443,
        }
    }

    /// deploy/webhook installs what the code would register: one definition.
    #[test]
    fn deploy_manifests_match_the_generated_configurations() {
        let deployed: ValidatingWebhookConfiguration = serde_saphyr::from_str(include_str!(
            "../../../../deploy/webhook/validating_webhook_configuration.yaml"
        ))
        .unwrap_or_else(|e| panic!("validating manifest: {e}"));
        assert_eq!(
            deployed.webhooks,
            validating("dkv-operator", &service(), None).webhooks
        );
        let deployed: MutatingWebhookConfiguration = serde_saphyr::from_str(include_str!(
            "../../../../deploy/webhook/mutating_webhook_configuration.yaml"
        ))
        .unwrap_or_else(|e| panic!("mutating manifest: {e}"));
        assert_eq!(
            deployed.webhooks,
            mutating("dkv-operator", &service(), None).webhooks
        );
    }
}
