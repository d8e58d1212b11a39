//! `spec.tls`: the references each transport's mode needs, and only those.

use crate::cluster::validate::Problems;

/// What the schema's CEL rules say about `spec.tls`, for specs written
/// past them (and for the webhook's single list of problems).
pub(super) fn check_tls(tls: &dkv_api::distributedkv::v1beta1::TlsSpec, problems: &mut Problems) {
    use dkv_api::distributedkv::v1beta1::TlsMode;
    for (transport, t) in [("peer", &tls.peer), ("client", &tls.client)] {
        let provided = t.mode == TlsMode::Provided;
        if provided != t.secret_ref.as_ref().is_some_and(|r| !r.name.is_empty()) {
            problems.add(
                &format!("spec.tls.{transport}.secretRef"),
                "required with mode Provided (the Secret with tls.crt, tls.key and ca.crt) and allowed only with it",
            );
        }
        let cert_manager = t.mode == TlsMode::CertManager;
        if cert_manager != t.issuer_ref.as_ref().is_some_and(|r| !r.name.is_empty()) {
            problems.add(
                &format!("spec.tls.{transport}.issuerRef"),
                "required with mode CertManager (the cert-manager Issuer or ClusterIssuer that signs) and allowed only with it",
            );
        }
        let wants_client_secret = transport == "client" && provided;
        if wants_client_secret
            != t.client_secret_ref
                .as_ref()
                .is_some_and(|r| !r.name.is_empty())
        {
            problems.add(
                &format!("spec.tls.{transport}.clientSecretRef"),
                "required on spec.tls.client with mode Provided (the client certificate dkv's operator and backup agents present) and allowed only there",
            );
        }
        if let Some(kind) = t.issuer_ref.as_ref().and_then(|r| r.kind.as_deref())
            && !matches!(kind, "Issuer" | "ClusterIssuer")
            && t.issuer_ref
                .as_ref()
                .and_then(|r| r.group.as_deref())
                .is_none_or(|g| g == "cert-manager.io")
        {
            problems.add(
                &format!("spec.tls.{transport}.issuerRef.kind"),
                "must be Issuer or ClusterIssuer for cert-manager.io issuers",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_references_belong_to_their_mode_and_transport() {
        let spec = |tls: serde_json::Value| -> dkv_api::distributedkv::v1beta1::TlsSpec {
            serde_json::from_value(tls).unwrap_or_else(|e| panic!("{e}"))
        };
        let fields = |tls: serde_json::Value| {
            let mut problems = Problems::default();
            check_tls(&spec(tls), &mut problems);
            problems.0.into_iter().map(|p| p.field).collect::<Vec<_>>()
        };
        assert!(fields(serde_json::json!({})).is_empty());
        assert!(
            fields(serde_json::json!({
                "peer": {"mode": "Provided", "secretRef": {"name": "p"}},
                "client": {"mode": "Provided", "secretRef": {"name": "s"}, "clientSecretRef": {"name": "c"}}
            }))
            .is_empty()
        );
        assert_eq!(
            fields(serde_json::json!({"peer": {"mode": "Provided"}})),
            ["spec.tls.peer.secretRef"]
        );
        assert_eq!(
            fields(serde_json::json!({"client": {"mode": "Provided", "secretRef": {"name": "s"}}})),
            ["spec.tls.client.clientSecretRef"]
        );
        assert_eq!(
            fields(
                serde_json::json!({"peer": {"secretRef": {"name": "p"}, "clientSecretRef": {"name": "c"}}})
            ),
            ["spec.tls.peer.secretRef", "spec.tls.peer.clientSecretRef"]
        );
        assert_eq!(
            fields(
                serde_json::json!({"client": {"mode": "CertManager", "issuerRef": {"name": "ca", "kind": "Vault"}}})
            ),
            ["spec.tls.client.issuerRef.kind"]
        );
        assert_eq!(
            fields(serde_json::json!({"client": {"mode": "CertManager"}})),
            ["spec.tls.client.issuerRef"]
        );
    }
}
