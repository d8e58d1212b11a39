//! Issuing from a CA kept in a Secret: the CA read back as an [`Authority`], and a leaf certificate's Secret issued,
//! renewed or re-trusted as its signer requires.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, PostParams};

use super::{
    CertificateLifetime, ISSUER_ANNOTATION, NEXT_NOT_AFTER_ANNOTATION, NOT_AFTER_ANNOTATION,
    annotate, create_secret, not_after, secret, text,
};
use crate::cluster::error::{Error, Result};
use crate::cluster::validate::ValidatedCluster;
use crate::parts::tls::{CA_CERT, TLS_CERT, TLS_KEY};
use crate::pki::{Authority, Issued, Leaf};

/// Who signs a leaf and what its holders trust.
#[derive(Clone, Copy)]
pub(super) struct Signer<'a> {
    pub(super) issuer: &'a Authority,
    pub(super) bundle: &'a str,
}

/// The Secret `name` holding `leaf` (`existing` as read): issued if it is
/// missing, due for renewal or signed by another CA than `signer`'s, and
/// its trusted CAs updated if they are not `signer`'s bundle (replaced only
/// if nobody changed it since it was read).
#[allow(clippy::too_many_arguments)]
pub(super) async fn current_leaf(
    secrets: &Api<Secret>,
    cluster: &ValidatedCluster,
    signer: Signer<'_>,
    leaf: &Leaf<'_>,
    name: &str,
    existing: Option<Secret>,
    lifetime: CertificateLifetime,
) -> Result<Secret> {
    let Some(old) = existing else {
        if cluster.paused {
            return Err(Error::SecretInvalid {
                secret: name.to_owned(),
                key: TLS_CERT,
                fix: "it is missing; dkv issues it once the cluster is no longer paused (dkv.io/reconcile-paused)",
            });
        }
        let issued = signer.issuer.issue(leaf)?;
        let secret = leaf_secret(cluster, name, signer, &issued);
        return create_secret(secrets, name, &secret).await;
    };
    let due = not_after(&old)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .is_none_or(|t| lifetime.due(t, jiff::Timestamp::now()));
    let signed_by_other = old
        .annotations()
        .get(ISSUER_ANNOTATION)
        .is_some_and(|issuer| *issuer != signer.issuer.common_name);
    if cluster.paused {
        return Ok(old);
    }
    let mut updated = if due || signed_by_other {
        let issued = signer.issuer.issue(leaf)?;
        tracing::info!(secret = %name, not_after = %issued.not_after, issuer = %signer.issuer.common_name, "issued certificate");
        leaf_secret(cluster, name, signer, &issued)
    } else if text(&old, CA_CERT, name).ok().as_deref() != Some(signer.bundle) {
        let mut secret = old.clone();
        secret.data.get_or_insert_default().insert(
            CA_CERT.to_owned(),
            ByteString(signer.bundle.as_bytes().to_vec()),
        );
        secret
    } else {
        return Ok(old);
    };
    updated.metadata.resource_version = old.metadata.resource_version;
    secrets
        .replace(name, &PostParams::default(), &updated)
        .await
        .map_err(|source| Error::Apply {
            kind: "Secret".to_owned(),
            name: name.to_owned(),
            source,
        })
}

pub(super) fn authority_from(
    secret: &Secret,
    cluster: &ValidatedCluster,
    cert_key: &'static str,
    key_key: &'static str,
    name_annotation: &str,
) -> Result<Authority> {
    let name = secret.name_any();
    let annotations = secret.annotations();
    Ok(Authority {
        // CA Secrets from before rotations existed carry no name: their CA
        // is the first.
        common_name: annotations
            .get(name_annotation)
            .cloned()
            .unwrap_or_else(|| format!("dkv {}/{} CA", cluster.namespace, cluster.name)),
        cert_pem: text(secret, cert_key, &name)?,
        key_pem: text(secret, key_key, &name)?,
        not_after: annotations
            .get(if cert_key == CA_CERT {
                NOT_AFTER_ANNOTATION
            } else {
                NEXT_NOT_AFTER_ANNOTATION
            })
            .and_then(|t| t.parse().ok())
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
    })
}

fn leaf_secret(
    cluster: &ValidatedCluster,
    name: &str,
    signer: Signer<'_>,
    issued: &Issued,
) -> Secret {
    let bundle = signer.bundle.to_owned();
    let data = [
        (TLS_CERT, &issued.cert_pem),
        (TLS_KEY, &issued.key_pem),
        (CA_CERT, &bundle),
    ];
    let mut secret = secret(cluster, name, "kubernetes.io/tls", &data, issued.not_after);
    annotate(
        &mut secret,
        ISSUER_ANNOTATION,
        Some(&signer.issuer.common_name),
    );
    secret
}
