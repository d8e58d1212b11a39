//! Certificates dkv does not issue (provided by the user, or by cert-manager): checked the way their TLS peers
//! verify them, and reported against the spec setting (or Certificate) each comes from.

use k8s_openapi::api::core::v1::Secret;

use crate::cluster::error::{Error, Result};
use crate::cluster::security::cert_manager;
use crate::cluster::security::certificates::text;
use crate::cluster::validate::ValidatedCluster;
use crate::parts::naming;
use crate::parts::tls::{CA_CERT, CertificateSource, TLS_CERT, TLS_KEY, server_name};
use crate::pki::{self, Role};

/// The Secret `secret` that the cluster's spec (or cert-manager) should
/// provide does not exist.
pub(super) fn missing(cluster: &ValidatedCluster, secret: &str) -> Error {
    match certificate_for(cluster, secret) {
        Some(certificate) => Error::CertificatePending {
            certificate,
            secret: secret.to_owned(),
        },
        None => Error::TlsSecretUnusable {
            secret: secret.to_owned(),
            setting: setting_of(cluster, secret),
            problem: "it does not exist: create it with tls.crt, tls.key and ca.crt".to_owned(),
        },
    }
}

/// The cert-manager Certificate that writes `secret`, if any.
fn certificate_for(cluster: &ValidatedCluster, secret: &str) -> Option<String> {
    cert_manager::requests(cluster)
        .into_iter()
        .find(|r| r.secret == secret)
        .map(|r| r.name)
}

/// Which spec field (or Certificate) a Secret comes from, for messages.
fn setting_of(cluster: &ValidatedCluster, secret: &str) -> String {
    if let Some(certificate) = certificate_for(cluster, secret) {
        return format!("issued by cert-manager for Certificate {certificate}");
    }
    let sources = &cluster.tls_sources;
    let mut settings = Vec::new();
    if let CertificateSource::Provided { secret: peer, .. } = &sources.peer
        && peer == secret
    {
        settings.push("spec.tls.peer.secretRef");
    }
    if let CertificateSource::Provided {
        secret: server,
        client_secret,
    } = &sources.client
    {
        if server == secret {
            settings.push("spec.tls.client.secretRef");
        }
        if client_secret.as_deref() == Some(secret) {
            settings.push("spec.tls.client.clientSecretRef");
        }
    }
    if settings.is_empty() {
        "spec.tls".to_owned()
    } else {
        settings.join(", ")
    }
}

/// Checks the certificates dkv did not issue the way their TLS peers will
/// verify them, so that a wrong one is reported before any member mounts
/// it: the peer certificate as server (for every member's name) and as
/// client, against its own CAs; the members' client-side certificate as
/// server for the name the operator dials, against the CAs the operator
/// trusts, and as client against its own CAs (etcd's gRPC gateway dials
/// the member with it); the operator's certificate as client, against the
/// CAs members trust.
pub(super) fn check_external<'a>(
    cluster: &ValidatedCluster,
    get: &impl Fn(&str) -> Result<&'a Secret>,
) -> Result<()> {
    let sources = &cluster.tls_sources;
    let name = &cluster.name;
    let external = |source: &CertificateSource| {
        matches!(
            source,
            CertificateSource::Provided { .. } | CertificateSource::CertManager { .. }
        )
    };
    let unusable = |secret: &str, problem: pki::Unusable| Error::TlsSecretUnusable {
        secret: secret.to_owned(),
        setting: setting_of(cluster, secret),
        problem: problem.0,
    };
    let pem = |secret_name: &str, key: &'static str| -> Result<String> {
        text(get(secret_name)?, key, secret_name).map_err(|_| Error::TlsSecretUnusable {
            secret: secret_name.to_owned(),
            setting: setting_of(cluster, secret_name),
            problem: format!("it has no {key}"),
        })
    };
    if external(&sources.peer)
        && let Some(peer) = sources.peer_secret(name)
    {
        let members: Vec<String> = (0..cluster.size.max(1))
            .map(|ordinal| naming::member_host(name, &cluster.namespace, ordinal))
            .collect();
        pki::check(
            &pem(&peer, TLS_CERT)?,
            &pem(&peer, TLS_KEY)?,
            &pem(&peer, CA_CERT)?,
            &[Role::Server(&members), Role::Client],
        )
        .map_err(|e| unusable(&peer, e))?;
    }
    if external(&sources.client)
        && let (Some(server), Some(client)) =
            (sources.server_secret(name), sources.client_secret(name))
    {
        let dialled = [server_name(name, &cluster.namespace)];
        pki::check(
            &pem(&server, TLS_CERT)?,
            &pem(&server, TLS_KEY)?,
            &pem(&client, CA_CERT)?,
            &[Role::Server(&dialled)],
        )
        .map_err(|e| unusable(&server, e))?;
        pki::check(
            &pem(&server, TLS_CERT)?,
            &pem(&server, TLS_KEY)?,
            &pem(&server, CA_CERT)?,
            &[Role::Client],
        )
        .map_err(|e| unusable(&server, e))?;
        pki::check(
            &pem(&client, TLS_CERT)?,
            &pem(&client, TLS_KEY)?,
            &pem(&server, CA_CERT)?,
            &[Role::Client],
        )
        .map_err(|e| unusable(&client, e))?;
    }
    Ok(())
}
