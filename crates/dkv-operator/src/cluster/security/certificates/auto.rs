//! `mode: Auto`: the cluster's own CA (created with the cluster, rotated on request or when due) and the member
//! and client certificates it issues.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

use super::{
    CA_KEY, CA_NAME_ANNOTATION, CA_VALIDITY, CertificateInputs, CertificateLifetime, NEXT_CA_CERT,
    NEXT_CA_KEY, NEXT_CA_NAME_ANNOTATION, NEXT_NOT_AFTER_ANNOTATION, NOT_AFTER_ANNOTATION,
    PENDING_FOR_ANNOTATION, PHASE_ANNOTATION, ROTATED_FOR_ANNOTATION, annotate, create_secret,
    not_after, read, secret,
};
use crate::cluster::error::{Error, Result};
use crate::cluster::security::ca_rotation;
use crate::cluster::security::certificates::issue::{Signer, authority_from, current_leaf};
use crate::cluster::validate::ValidatedCluster;
use crate::parts::naming;
use crate::parts::tls::{CA_CERT, CLIENT_COMMON_NAME, member_hosts};
use crate::pki::{Authority, Leaf, Usage};

/// What a cluster's own CA issued, after [`ensure_auto`].
pub(super) struct AutoCertificates {
    pub(super) member: Secret,
    pub(super) client: Secret,
    pub(super) renew_at: jiff::Timestamp,
    pub(super) rotating: Option<ca_rotation::Phase>,
}

/// Makes sure the cluster's CA and certificates exist, are not due for
/// renewal and follow a CA rotation under way, issuing and updating what
/// is missing, due or behind (the CA only when `may_create_ca`).
pub(super) async fn ensure_auto(
    client: &Client,
    cluster: &ValidatedCluster,
    lifetime: CertificateLifetime,
    may_create_ca: bool,
    observed: &CertificateInputs<'_>,
    serial_with: &(dyn Fn(Option<&Secret>) -> String + Sync),
) -> Result<AutoCertificates> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace);
    let ca_name = naming::tls_ca_secret(&cluster.name);
    let mut ca_secret = match read(&secrets, &ca_name).await? {
        Some(secret) => secret,
        None if may_create_ca => {
            let ca = Authority::generate(&ca_common_name(cluster, 1), CA_VALIDITY)?;
            let data = [(CA_CERT, &ca.cert_pem), (CA_KEY, &ca.key_pem)];
            let mut secret = secret(cluster, &ca_name, "Opaque", &data, ca.not_after);
            annotate(&mut secret, CA_NAME_ANNOTATION, Some(&ca.common_name));
            create_secret(&secrets, &ca_name, &secret).await?
        }
        None => return Err(Error::TlsCaMissing { secret: ca_name }),
    };

    // CA rotation: advance when the members have rolled out the current
    // phase (their serial is the member Secret's as it stands).
    let member_name = naming::tls_member_secret(&cluster.name);
    let member_before = read(&secrets, &member_name).await?;
    let serial_before = member_before.as_ref().map(|m| serial_with(Some(m)));
    let settled = observed.idle
        && !observed.pod_serials.is_empty()
        && observed
            .pod_serials
            .iter()
            .all(|s| s.is_some() && *s == serial_before);
    let current = authority_from(&ca_secret, cluster, CA_CERT, CA_KEY, CA_NAME_ANNOTATION)?;
    let annotation = |s: &Secret, key: &str| s.annotations().get(key).cloned();
    let phase = annotation(&ca_secret, PHASE_ANNOTATION)
        .as_deref()
        .and_then(ca_rotation::Phase::parse);
    let rotated_for = annotation(&ca_secret, ROTATED_FOR_ANNOTATION);
    let movement = ca_rotation::next_move(&ca_rotation::Inputs {
        phase,
        rotated_for: rotated_for.as_deref(),
        requested: observed.rotation_requested,
        ca_due: CertificateLifetime { leaf: CA_VALIDITY }
            .due(current.not_after, jiff::Timestamp::now()),
        settled,
    });
    // A paused cluster is reported on, never changed.
    if movement != ca_rotation::Move::Stay && !cluster.paused {
        ca_secret = rotate(&secrets, cluster, ca_secret, &current, movement, observed).await?;
    }
    let current = authority_from(&ca_secret, cluster, CA_CERT, CA_KEY, CA_NAME_ANNOTATION)?;
    let phase = annotation(&ca_secret, PHASE_ANNOTATION)
        .as_deref()
        .and_then(ca_rotation::Phase::parse);
    let next = match phase {
        Some(ca_rotation::Phase::Trust | ca_rotation::Phase::Issue) => Some(authority_from(
            &ca_secret,
            cluster,
            NEXT_CA_CERT,
            NEXT_CA_KEY,
            NEXT_CA_NAME_ANNOTATION,
        )?),
        _ => None,
    };
    // Who signs, and whom everybody trusts, in this phase.
    let issuer = match (phase, &next) {
        (Some(ca_rotation::Phase::Issue), Some(next)) => next,
        _ => &current,
    };
    let bundle = match &next {
        Some(next) => format!("{}{}", current.cert_pem, next.cert_pem),
        None => current.cert_pem.clone(),
    };

    let signer = Signer {
        issuer,
        bundle: &bundle,
    };
    let hosts = member_hosts(&cluster.name, &cluster.namespace);
    let member = current_leaf(
        &secrets,
        cluster,
        signer,
        &Leaf {
            common_name: &cluster.name,
            hosts: &hosts,
            usage: Usage::ServerAndClient,
            validity: lifetime.leaf,
        },
        &member_name,
        member_before,
        lifetime,
    )
    .await?;
    let client_name = naming::tls_client_secret(&cluster.name);
    let client_before = read(&secrets, &client_name).await?;
    let client_secret = current_leaf(
        &secrets,
        cluster,
        signer,
        &Leaf {
            common_name: CLIENT_COMMON_NAME,
            hosts: &[],
            usage: Usage::Client,
            validity: lifetime.leaf,
        },
        &client_name,
        client_before,
        lifetime,
    )
    .await?;
    Ok(AutoCertificates {
        renew_at: [&member, &client_secret]
            .into_iter()
            .map(|s| {
                not_after(s)
                    .and_then(|t| t.parse().ok())
                    .map_or(jiff::Timestamp::UNIX_EPOCH, |t| lifetime.renew_at(t))
            })
            .min()
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        member,
        client: client_secret,
        rotating: phase,
    })
}

/// Applies one move of a CA rotation to the CA Secret.
async fn rotate(
    secrets: &Api<Secret>,
    cluster: &ValidatedCluster,
    mut ca_secret: Secret,
    current: &Authority,
    movement: ca_rotation::Move,
    observed: &CertificateInputs<'_>,
) -> Result<Secret> {
    use ca_rotation::{Move, Phase};
    let data = ca_secret.data.get_or_insert_default();
    let phase = match movement {
        Move::Stay => return Ok(ca_secret),
        Move::Start => {
            let generation = current
                .common_name
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(1);
            let next = Authority::generate(&ca_common_name(cluster, generation + 1), CA_VALIDITY)?;
            data.insert(
                NEXT_CA_CERT.to_owned(),
                ByteString(next.cert_pem.into_bytes()),
            );
            data.insert(
                NEXT_CA_KEY.to_owned(),
                ByteString(next.key_pem.into_bytes()),
            );
            annotate(
                &mut ca_secret,
                NEXT_CA_NAME_ANNOTATION,
                Some(&next.common_name),
            );
            annotate(
                &mut ca_secret,
                NEXT_NOT_AFTER_ANNOTATION,
                Some(&next.not_after.to_string()),
            );
            annotate(
                &mut ca_secret,
                PENDING_FOR_ANNOTATION,
                observed.rotation_requested,
            );
            Some(Phase::Trust)
        }
        Move::Enter(Phase::Finish) => {
            // The next CA becomes the CA.
            for (from, to) in [(NEXT_CA_CERT, CA_CERT), (NEXT_CA_KEY, CA_KEY)] {
                if let Some(value) = data.remove(from) {
                    data.insert(to.to_owned(), value);
                }
            }
            let name = ca_secret
                .annotations()
                .get(NEXT_CA_NAME_ANNOTATION)
                .cloned();
            let not_after = ca_secret
                .annotations()
                .get(NEXT_NOT_AFTER_ANNOTATION)
                .cloned();
            annotate(&mut ca_secret, CA_NAME_ANNOTATION, name.as_deref());
            annotate(&mut ca_secret, NOT_AFTER_ANNOTATION, not_after.as_deref());
            annotate(&mut ca_secret, NEXT_CA_NAME_ANNOTATION, None);
            annotate(&mut ca_secret, NEXT_NOT_AFTER_ANNOTATION, None);
            Some(Phase::Finish)
        }
        Move::Enter(phase) => Some(phase),
        Move::Complete => {
            let pending = ca_secret.annotations().get(PENDING_FOR_ANNOTATION).cloned();
            annotate(&mut ca_secret, ROTATED_FOR_ANNOTATION, pending.as_deref());
            annotate(&mut ca_secret, PENDING_FOR_ANNOTATION, None);
            None
        }
    };
    annotate(&mut ca_secret, PHASE_ANNOTATION, phase.map(|p| p.as_str()));
    tracing::info!(phase = ?phase, "CA rotation");
    let name = ca_secret.name_any();
    secrets
        .replace(&name, &PostParams::default(), &ca_secret)
        .await
        .map_err(|source| Error::Apply {
            kind: "Secret".to_owned(),
            name,
            source,
        })
}

/// The common name of a cluster's `generation`th CA (rotations count up).
fn ca_common_name(cluster: &ValidatedCluster, generation: u32) -> String {
    format!("dkv {}/{} CA {generation}", cluster.namespace, cluster.name)
}
