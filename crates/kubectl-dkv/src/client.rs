//! The API connection, from the kubeconfig as kubectl reads it, and the
//! reads every command starts with.

use dkv_api::DistributedKV;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::cli::Global;
use crate::error::{Error, Result};

/// A client and the namespace the command works in.
pub struct Target {
    pub client: Client,
    pub namespace: String,
}

impl Target {
    pub async fn connect(global: &Global) -> Result<Self> {
        let options = KubeConfigOptions {
            context: global.context.clone(),
            cluster: None,
            user: None,
        };
        let config = match &global.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| Error::Kubeconfig {
                        path: path.clone(),
                        message: e.to_string(),
                    })?
            }
            None => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| Error::Config(e.to_string()))?,
        };
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).map_err(|e| Error::Config(e.to_string()))?;
        Ok(Self { client, namespace })
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The cluster `name`, or a NotFound error naming it.
    pub async fn cluster(&self, name: &str) -> Result<DistributedKV> {
        self.api::<DistributedKV>()
            .get(name)
            .await
            .map_err(Error::api(
                format!("reading DistributedKV {}/{name}", self.namespace),
                "DistributedKV",
                &self.namespace,
                name,
            ))
    }
}

/// Whether the operator leaves `cluster` alone (`dkv.io/reconcile-paused`).
pub fn is_paused(cluster: &DistributedKV) -> bool {
    cluster
        .metadata
        .annotations
        .as_ref()
        .is_some_and(dkv_api::labels::is_paused)
}
