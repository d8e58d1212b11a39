//! The webhooks of `dkv operator`: CRD version conversion, validation the schema and CEL
//! cannot express, defaulting, and the TLS that lets the API server call us.
//!
//! Modules: [`validate`] and [`default`] decide (pure), [`server`] speaks
//! AdmissionReview and ConversionReview (`DistributedKV` v1alpha1 ⇄ v1beta1,
//! by [`dkv_api::distributedkv::convert`]; decisions are made on v1beta1) over HTTPS, [`certs`] owns the CA, the serving certificate
//! and its renewal, [`configurations`] the webhook configurations and their
//! `caBundle`. Every replica serves admission, leader or not.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::ByteString;
use kube::Client;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::cluster::validate::Defaults;

pub mod certs;
pub mod configurations;
pub mod default;
pub mod server;
pub mod validate;

use crate::tls_serving::ServingCertResolver;
use certs::{CertPolicy, CertSecret};
use configurations::{CaBundleTarget, Endpoint};

/// Port of the webhook Service (`deploy/webhook/service.yaml`).
pub const SERVICE_PORT: i32 = 443;

/// The admission webhook server (HTTPS) every replica runs.
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// Serve the validating and defaulting webhooks.
    #[arg(long = "webhooks", default_value_t = true, action = clap::ArgAction::Set)]
    pub enabled: bool,
    /// Address of the HTTPS webhook endpoints.
    #[arg(
        long = "webhook-addr",
        default_value = "0.0.0.0:9443",
        env = "DKV_WEBHOOK_ADDR"
    )]
    pub addr: SocketAddr,
    /// Namespace of the webhook Service and the certificate Secret.
    #[arg(
        id = "webhook_namespace",
        value_name = "NAMESPACE",
        long = "webhook-namespace",
        env = "POD_NAMESPACE",
        default_value = "dkv-system"
    )]
    pub namespace: String,
    /// The Service in front of the operator's webhook port.
    #[arg(long = "webhook-service", default_value = "dkv-operator-webhook")]
    pub service: String,
    /// Secret holding the webhook CA and serving certificate (created if absent).
    #[arg(long = "webhook-secret", default_value = "dkv-operator-webhook-tls")]
    pub secret: String,
    /// Name of the ValidatingWebhookConfiguration and of the
    /// MutatingWebhookConfiguration whose caBundle the operator maintains.
    #[arg(long = "webhook-configuration", default_value = "dkv-operator")]
    pub configuration: String,
    /// Create the webhook configurations with `url: https://<this address>`
    /// instead of updating the caBundle of installed ones (local mode, where
    /// the API server runs on this machine).
    #[arg(long = "webhook-register-url", default_value_t = false, action = clap::ArgAction::Set)]
    pub register_url: bool,
    /// Lifetime of a serving certificate.
    #[arg(long = "webhook-cert-validity-seconds", default_value_t = 90 * 24 * 3600)]
    pub cert_validity_seconds: u64,
    /// Renew the serving certificate when less than this is left.
    #[arg(long = "webhook-cert-renew-before-seconds", default_value_t = 30 * 24 * 3600)]
    pub cert_renew_before_seconds: u64,
}

/// Binds the webhook's address, so a port conflict stops the operator at start.
pub async fn bind(args: &WebhookArgs) -> anyhow::Result<TcpListener> {
    TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("binding the webhook server to {}", args.addr))
}

/// Serves admission on `listener` until `stop`, keeping the certificate
/// fresh and the configurations' `caBundle` in step with the CA.
pub async fn run(
    client: Client,
    args: WebhookArgs,
    listener: TcpListener,
    defaults: Defaults,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let local = listener
        .local_addr()
        .context("reading the webhook server's address")?;
    let (endpoint, policy) = endpoint_and_policy(&args, local);
    let secret = CertSecret::new(client.clone(), &args.namespace, &args.secret);
    let retry = check_interval(&policy);

    // The API may still be starting: retry, but give up when told to stop.
    let mut current = loop {
        match secret.load_or_issue(&policy).await {
            Ok(certs) => break certs,
            Err(err) => warn!(error = %err, "obtaining the webhook certificate; retrying"),
        }
        if sleep_or_stop(&mut stop, retry).await {
            return Ok(());
        }
    };
    let resolver = Arc::new(ServingCertResolver::new(
        current
            .certified_key()
            .context("loading the webhook serving certificate")?,
    ));
    let tls = crate::tls_serving::server_config(resolver.clone())
        .context("configuring TLS for the webhook server")?;

    info!(addr = %local, ?endpoint, "serving admission webhooks");
    let serving = tokio::spawn(crate::tls_serving::serve(
        listener,
        server::router(client.clone(), defaults),
        tls,
        stop.clone(),
    ));

    loop {
        // Every round, not only when the CA changes: re-applying
        // deploy/crds or deploy/webhook resets the caBundle (and a CRD
        // installed after us needs its conversion pointed at us); each
        // target is only written when it differs.
        if let Err(err) = publish(&client, &args, &endpoint, &current.ca_bundle()).await {
            warn!(error = %err, "publishing the webhook caBundle; retrying");
        }
        if sleep_or_stop(&mut stop, check_interval(&policy)).await {
            break;
        }
        // Renews when due; picks up a renewal another replica wrote.
        match secret.load_or_issue(&policy).await {
            Ok(certs) if certs.cert_pem != current.cert_pem => match certs.certified_key() {
                Ok(key) => {
                    resolver.set(key);
                    info!(not_after = %certs.not_after, "serving the renewed webhook certificate");
                    current = certs;
                }
                Err(err) => warn!(error = %err, "the renewed webhook certificate is unusable"),
            },
            Ok(_) => {}
            Err(err) => warn!(error = %err, "checking the webhook certificate"),
        }
    }
    serving.await.context("the webhook server task panicked")?;
    Ok(())
}

/// Where callers reach us and the names our certificate must carry.
fn endpoint_and_policy(args: &WebhookArgs, local: SocketAddr) -> (Endpoint, CertPolicy) {
    let service_host = format!("{}.{}.svc", args.service, args.namespace);
    let mut hosts = vec![
        service_host.clone(),
        format!("{service_host}.cluster.local"),
        args.service.clone(),
        format!("{}.{}", args.service, args.namespace),
    ];
    let endpoint = if args.register_url {
        let ip = match local.ip() {
            ip if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            ip => ip,
        };
        hosts.insert(0, ip.to_string());
        Endpoint::Url(format!("https://{}", SocketAddr::new(ip, local.port())))
    } else {
        Endpoint::Service {
            namespace: args.namespace.clone(),
            name: args.service.clone(),
            port: SERVICE_PORT,
        }
    };
    let policy = CertPolicy {
        hosts,
        validity: Duration::from_secs(args.cert_validity_seconds),
        renew_before: Duration::from_secs(args.cert_renew_before_seconds),
    };
    (endpoint, policy)
}

/// Often enough that a renewal happens well before expiry, rarely enough
/// not to load the API server.
fn check_interval(policy: &CertPolicy) -> Duration {
    (policy.renew_before / 4).clamp(Duration::from_millis(500), Duration::from_secs(60))
}

async fn publish(
    client: &Client,
    args: &WebhookArgs,
    endpoint: &Endpoint,
    ca_bundle: &ByteString,
) -> anyhow::Result<()> {
    if args.register_url {
        configurations::register(client, &args.configuration, endpoint, ca_bundle)
            .await
            .with_context(|| {
                format!(
                    "registering the webhook configurations {:?}",
                    args.configuration
                )
            })?;
        return Ok(());
    }
    for target in [
        CaBundleTarget::ValidatingWebhookConfiguration(args.configuration.clone()),
        CaBundleTarget::MutatingWebhookConfiguration(args.configuration.clone()),
        CaBundleTarget::CustomResourceDefinition(configurations::CONVERTED_CRD.to_owned()),
    ] {
        let found = configurations::inject_ca_bundle(client, &target, ca_bundle)
            .await
            .with_context(|| format!("setting the caBundle of {target:?}"))?;
        if !found {
            anyhow::bail!(
                "{target:?} does not exist; apply deploy/webhook and deploy/crds (kubectl apply -k deploy/default)"
            );
        }
    }
    Ok(())
}

/// Sleeps `period`; `true` when `stop` turned true meanwhile.
async fn sleep_or_stop(stop: &mut watch::Receiver<bool>, period: Duration) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(period) => false,
        _ = stop.wait_for(|stop| *stop) => true,
    };
    stopped || *stop.borrow()
}

/// The objects the admission tests start from.
#[cfg(test)]
pub(crate) mod fixtures {
    use dkv_api::DistributedKV;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use crate::cluster::validate::Defaults;

    /// A cluster `orders` in namespace `shop` with `spec`, as a user writes it.
    pub(crate) fn dkv(spec: serde_json::Value) -> DistributedKV {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": spec,
        }))
        .unwrap_or_else(|e| panic!("test object: {e}"))
    }

    pub(crate) fn defaults() -> Defaults {
        Defaults {
            operator_image: "ghcr.io/dkv-io/dkv:test".into(),
        }
    }

    /// A condition of a cluster's status, as the operator writes it.
    pub(crate) fn condition(type_: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: String::new(),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }
}
