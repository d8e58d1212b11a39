//! The webhook's TLS: a self-signed CA and a serving certificate kept in one
//! Secret (served through [`crate::tls_serving`]), and the `caBundle` of the
//! configurations that call us.
//!
//! Every replica serves admission (a standby too), so the Secret is the one
//! source of truth: the first replica creates it, whoever finds the serving
//! certificate due renews it with an optimistic-concurrency replace, and the
//! others pick the new one up on their next read. The CA is long-lived and
//! stays put across renewals, so the `caBundle` does not change when the
//! serving certificate does and in-flight callers keep trusting us.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use rustls::sign::CertifiedKey;

use crate::pki::{Authority, Leaf, PkiError, Usage};

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const TLS_CERT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";
/// When the serving certificate expires (RFC 3339); read to decide renewal
/// without parsing X.509.
pub const NOT_AFTER_ANNOTATION: &str = "dkv.io/serving-cert-not-after";
/// The names the serving certificate was issued for, comma-separated; a
/// change (a new Service name, local mode's address) reissues it.
pub const HOSTS_ANNOTATION: &str = "dkv.io/serving-cert-hosts";
const CA_COMMON_NAME: &str = "dkv-operator-webhook-ca";
/// The CA outlives many serving certificates; rotating it is not automated.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error("the webhook certificates: {0}")]
    Invalid(String),
    #[error("{action} the webhook certificate Secret {secret}: {source}")]
    Api {
        action: &'static str,
        secret: String,
        #[source]
        source: kube::Error,
    },
    #[error("building the TLS key: {0}")]
    Tls(#[from] rustls::Error),
}

/// How the serving certificate is issued and renewed.
#[derive(Debug, Clone)]
pub struct CertPolicy {
    /// DNS names and IP addresses the certificate is valid for.
    pub hosts: Vec<String>,
    pub validity: Duration,
    /// Renew once less than this is left.
    pub renew_before: Duration,
}

/// The CA and serving certificate as stored, all PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookCerts {
    pub ca_cert_pem: String,
    ca_key_pem: String,
    pub cert_pem: String,
    key_pem: String,
    pub not_after: jiff::Timestamp,
    hosts: Vec<String>,
}

impl WebhookCerts {
    /// A new CA and a serving certificate signed by it.
    pub fn generate(policy: &CertPolicy) -> Result<Self, CertError> {
        let ca = Authority::generate(CA_COMMON_NAME, CA_VALIDITY)?;
        let mut certs = WebhookCerts {
            ca_cert_pem: ca.cert_pem,
            ca_key_pem: ca.key_pem,
            cert_pem: String::new(),
            key_pem: String::new(),
            not_after: jiff::Timestamp::UNIX_EPOCH,
            hosts: Vec::new(),
        };
        certs.renew(policy)?;
        Ok(certs)
    }

    /// Issues a new serving certificate with the same CA.
    pub fn renew(&mut self, policy: &CertPolicy) -> Result<(), CertError> {
        let ca = Authority {
            common_name: CA_COMMON_NAME.to_owned(),
            cert_pem: self.ca_cert_pem.clone(),
            key_pem: self.ca_key_pem.clone(),
            // Not read when issuing.
            not_after: jiff::Timestamp::UNIX_EPOCH,
        };
        let issued = ca.issue(&Leaf {
            common_name: policy
                .hosts
                .first()
                .map(String::as_str)
                .unwrap_or("dkv-operator-webhook"),
            hosts: &policy.hosts,
            usage: Usage::Server,
            validity: policy.validity,
        })?;
        self.cert_pem = issued.cert_pem;
        self.key_pem = issued.key_pem;
        self.not_after = issued.not_after;
        self.hosts = policy.hosts.clone();
        Ok(())
    }

    /// Whether the serving certificate must be reissued: due for renewal or
    /// issued for other names.
    pub fn needs_renewal(&self, policy: &CertPolicy, now: jiff::Timestamp) -> bool {
        let left = self.not_after.as_second() - now.as_second();
        let renew_before = i64::try_from(policy.renew_before.as_secs()).unwrap_or(i64::MAX);
        left <= renew_before || self.hosts != policy.hosts
    }

    /// The `caBundle` callers use to trust us (base64 of the CA's PEM).
    pub fn ca_bundle(&self) -> ByteString {
        ByteString(self.ca_cert_pem.clone().into_bytes())
    }

    /// The serving certificate and key for rustls.
    pub fn certified_key(&self) -> Result<CertifiedKey, CertError> {
        crate::tls_serving::certified_key(self.cert_pem.as_bytes(), self.key_pem.as_bytes())
            .map_err(|e| CertError::Invalid(format!("{TLS_CERT}/{TLS_KEY}: {e}")))
    }

    fn to_secret(&self, namespace: &str, name: &str) -> Secret {
        let data = [
            (CA_CERT, &self.ca_cert_pem),
            (CA_KEY, &self.ca_key_pem),
            (TLS_CERT, &self.cert_pem),
            (TLS_KEY, &self.key_pem),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.clone().into_bytes())))
        .collect();
        Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([(
                    dkv_api::labels::MANAGED_BY_KEY.to_owned(),
                    dkv_api::labels::MANAGER.to_owned(),
                )])),
                annotations: Some(BTreeMap::from([
                    (NOT_AFTER_ANNOTATION.to_owned(), self.not_after.to_string()),
                    (HOSTS_ANNOTATION.to_owned(), self.hosts.join(",")),
                ])),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".to_owned()),
            data: Some(data),
            ..Secret::default()
        }
    }

    fn from_secret(secret: &Secret) -> Result<Self, String> {
        let text = |key: &str| -> Result<String, String> {
            let bytes = secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .ok_or_else(|| format!("has no {key:?}"))?;
            String::from_utf8(bytes.0.clone()).map_err(|_| format!("{key:?} is not PEM text"))
        };
        let annotation = |key: &str| secret.annotations().get(key).cloned().unwrap_or_default();
        let not_after = annotation(NOT_AFTER_ANNOTATION)
            .parse::<jiff::Timestamp>()
            .map_err(|e| format!("annotation {NOT_AFTER_ANNOTATION}: {e}"))?;
        Ok(WebhookCerts {
            ca_cert_pem: text(CA_CERT)?,
            ca_key_pem: text(CA_KEY)?,
            cert_pem: text(TLS_CERT)?,
            key_pem: text(TLS_KEY)?,
            not_after,
            hosts: annotation(HOSTS_ANNOTATION)
                .split(',')
                .filter(|h| !h.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }
}

/// The Secret that holds the webhook's certificates.
#[derive(Clone)]
pub struct CertSecret {
    api: Api<Secret>,
    namespace: String,
    name: String,
}

impl CertSecret {
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The stored certificates, renewed (and written back) when due; created
    /// when there is no Secret yet or it cannot be read as ours.
    pub async fn load_or_issue(&self, policy: &CertPolicy) -> Result<WebhookCerts, CertError> {
        let existing = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|source| CertError::Api {
                action: "reading",
                secret: self.describe(),
                source,
            })?;
        let Some(secret) = existing else {
            let certs = WebhookCerts::generate(policy)?;
            let created = self
                .api
                .create(
                    &PostParams::default(),
                    &certs.to_secret(&self.namespace, &self.name),
                )
                .await;
            return match created {
                Ok(_) => {
                    tracing::info!(secret = %self.describe(), not_after = %certs.not_after, "created the webhook CA and serving certificate");
                    Ok(certs)
                }
                // Another replica was first: use theirs.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    Box::pin(self.load_or_issue(policy)).await
                }
                Err(source) => Err(CertError::Api {
                    action: "creating",
                    secret: self.describe(),
                    source,
                }),
            };
        };
        let certs = match WebhookCerts::from_secret(&secret) {
            Ok(mut certs) => {
                if !certs.needs_renewal(policy, jiff::Timestamp::now()) {
                    return Ok(certs);
                }
                certs.renew(policy)?;
                certs
            }
            Err(message) => {
                tracing::warn!(secret = %self.describe(), %message, "the webhook certificate Secret is unusable; issuing a new CA");
                WebhookCerts::generate(policy)?
            }
        };
        let mut updated = certs.to_secret(&self.namespace, &self.name);
        // Replace only the version we read: when two replicas renew at once,
        // one wins and the other reads the winner's next time.
        updated.metadata.resource_version = secret.resource_version();
        self.api
            .replace(&self.name, &PostParams::default(), &updated)
            .await
            .map_err(|source| CertError::Api {
                action: "renewing the serving certificate in",
                secret: self.describe(),
                source,
            })?;
        tracing::info!(secret = %self.describe(), not_after = %certs.not_after, "renewed the webhook serving certificate");
        Ok(certs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> CertPolicy {
        CertPolicy {
            hosts: vec![
                "dkv-operator-webhook.dkv-system.svc".into(),
                "127.0.0.1".into(),
            ],
            validity: Duration::from_secs(3600),
            renew_before: Duration::from_secs(600),
        }
    }

    #[test]
    fn renewal_keeps_the_ca_and_round_trips_through_the_secret() {
        let mut certs = WebhookCerts::generate(&policy()).unwrap_or_else(|e| panic!("{e}"));
        let now = jiff::Timestamp::now();
        assert!(!certs.needs_renewal(&policy(), now));
        let later = now + jiff::SignedDuration::from_secs(3001);
        assert!(certs.needs_renewal(&policy(), later));
        let mut other_hosts = policy();
        other_hosts.hosts.pop();
        assert!(certs.needs_renewal(&other_hosts, now));

        let first = certs.cert_pem.clone();
        let ca = certs.ca_cert_pem.clone();
        certs.renew(&policy()).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(certs.cert_pem, first);
        assert_eq!(certs.ca_cert_pem, ca);
        certs.certified_key().unwrap_or_else(|e| panic!("{e}"));

        let read = WebhookCerts::from_secret(&certs.to_secret("ns", "s"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read, certs);
    }
}
