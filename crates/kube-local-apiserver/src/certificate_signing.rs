//! certificates.k8s.io/v1 CertificateSigningRequests: the requester recorded on create, what writes must hold (a PEM
//! request, a signer name, usages, consistent approval conditions), and the `kubernetes.io/kube-apiserver-client`
//! signer, which issues an approved request's certificate with the server's CA (when it serves HTTPS), as
//! kube-controller-manager's signer does: a client certificate whose subject is the request's, valid for
//! `expirationSeconds` (at most a year) from five minutes ago.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rcgen::{ExtendedKeyUsagePurpose, KeyUsagePurpose};
use serde_json::{Map, Value, json};

use crate::api_error::FieldCause;
use crate::meta;
use crate::tls::CertificateAuthority;

pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";

/// Upstream's default `--cluster-signing-duration`.
const MAX_VALIDITY_SECONDS: i64 = 365 * 24 * 3600;
/// Certificates are valid from a little before they are signed, for clocks that lag.
const BACKDATE_SECONDS: i64 = 5 * 60;

const KNOWN_USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// Records who asked, as upstream's create strategy does (whatever the client put there).
pub fn set_requester(obj: &mut Value, user: &str, groups: &[String]) {
    let root = meta::object_mut(obj);
    let spec = root.entry("spec").or_insert_with(|| json!({}));
    if let Some(spec) = spec.as_object_mut() {
        spec.insert("username".into(), json!(user));
        spec.insert("groups".into(), json!(groups));
        spec.remove("uid");
        spec.remove("extra");
    }
}

/// The PEM text of `spec.request` (base64 in JSON), or why it is not a certificate request.
fn request_pem(obj: &Value) -> Result<String, String> {
    let encoded = meta::str_at(obj, &["spec", "request"]).unwrap_or_default();
    let bytes = BASE64
        .decode(encoded)
        .map_err(|e| format!("not base64: {e}"))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    if !text.contains("-----BEGIN CERTIFICATE REQUEST-----") {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    Ok(text)
}

fn usages(obj: &Value) -> Vec<String> {
    meta::value_at(obj, &["spec", "usages"])
        .and_then(Value::as_array)
        .map(|u| {
            u.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn conditions(obj: &Value) -> Vec<Value> {
    meta::value_at(obj, &["status", "conditions"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn has_true_condition(obj: &Value, kind: &str) -> bool {
    conditions(obj).iter().any(|c| {
        c.get("type").and_then(Value::as_str) == Some(kind)
            && c.get("status").and_then(Value::as_str) == Some("True")
    })
}

/// Why a new request may not be made at all, as upstream's CertificateSubjectRestriction admission refuses it: a
/// request to the API server's client signer for the `system:masters` group, which no approval may turn into an
/// admin's certificate.
pub fn restricted(obj: &Value) -> Option<String> {
    if meta::str_at(obj, &["spec", "signerName"]) != Some(KUBE_APISERVER_CLIENT) {
        return None;
    }
    let params = rcgen::CertificateSigningRequestParams::from_pem(&request_pem(obj).ok()?).ok()?;
    let is_masters = |value: &rcgen::DnValue| match value {
        rcgen::DnValue::PrintableString(s) => s.as_str() == "system:masters",
        rcgen::DnValue::Utf8String(s) => s == "system:masters",
        _ => false,
    };
    let masters = params
        .params
        .distinguished_name
        .iter()
        .any(|(kind, value)| *kind == rcgen::DnType::OrganizationName && is_masters(value));
    masters.then(|| {
        format!("use of {KUBE_APISERVER_CLIENT} signer with system:masters group is not allowed")
    })
}

/// What a write of a CertificateSigningRequest must hold (`old` for updates).
pub fn validate(obj: &Value, old: Option<&Value>) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if old.is_none() {
        let request = meta::value_at(obj, &["spec", "request"])
            .cloned()
            .unwrap_or(Value::Null);
        if request.is_null() {
            causes.push(FieldCause::required("spec.request", ""));
        } else if let Err(why) = request_pem(obj).and_then(|pem| {
            rcgen::CertificateSigningRequestParams::from_pem(&pem)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }) {
            causes.push(FieldCause::invalid(
                "spec.request",
                &json!("<request>"),
                why,
            ));
        }
        match meta::str_at(obj, &["spec", "signerName"]) {
            None | Some("") => causes.push(FieldCause::required("spec.signerName", "")),
            Some(name) if !name.contains('/') => causes.push(FieldCause::invalid(
                "spec.signerName",
                &json!(name),
                "must be a fully qualified domain and path of the form 'example.com/signer-name'",
            )),
            Some(_) => {}
        }
        let requested = usages(obj);
        if requested.is_empty() {
            causes.push(FieldCause::required("spec.usages", ""));
        }
        for (i, u) in requested.iter().enumerate() {
            if !KNOWN_USAGES.contains(&u.as_str()) {
                let allowed: Vec<Value> = KNOWN_USAGES.iter().map(|k| json!(k)).collect();
                causes.push(FieldCause::unsupported(
                    format!("spec.usages[{i}]"),
                    &json!(u),
                    &allowed,
                ));
            }
        }
        if let Some(seconds) =
            meta::value_at(obj, &["spec", "expirationSeconds"]).and_then(Value::as_i64)
            && seconds < 600
        {
            causes.push(FieldCause::invalid(
                "spec.expirationSeconds",
                &json!(seconds),
                "may not specify a duration less than 600 seconds (10 minutes)",
            ));
        }
    }
    let list = conditions(obj);
    let mut seen: Vec<&str> = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let kind = c.get("type").and_then(Value::as_str).unwrap_or_default();
        let status = c.get("status").and_then(Value::as_str).unwrap_or_default();
        if kind.is_empty() {
            causes.push(FieldCause::required(
                format!("status.conditions[{i}].type"),
                "",
            ));
            continue;
        }
        if matches!(kind, "Approved" | "Denied" | "Failed") {
            if seen.contains(&kind) {
                causes.push(FieldCause::duplicate(
                    format!("status.conditions[{i}].type"),
                    &json!(kind),
                ));
            }
            seen.push(kind);
            if status != "True" {
                causes.push(FieldCause::unsupported(
                    format!("status.conditions[{i}].status"),
                    &json!(status),
                    &[json!("True")],
                ));
            }
        }
    }
    if seen.contains(&"Approved") && seen.contains(&"Denied") {
        causes.push(FieldCause::invalid(
            "status.conditions",
            &json!("Approved"),
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
    if let Some(old) = old {
        for kind in ["Approved", "Denied", "Failed"] {
            if has_true_condition(old, kind) && !seen.contains(&kind) {
                causes.push(FieldCause::forbidden(
                    "status.conditions",
                    format!("updates may not remove a condition of type {kind:?}"),
                ));
            }
        }
        let old_certificate = meta::str_at(old, &["status", "certificate"]).unwrap_or_default();
        let certificate = meta::str_at(obj, &["status", "certificate"]).unwrap_or_default();
        if !old_certificate.is_empty() && certificate != old_certificate {
            causes.push(FieldCause::forbidden(
                "status.certificate",
                "updates may not modify existing certificate content",
            ));
        }
    }
    causes
}

/// The request with what the `kube-apiserver-client` signer does to it: its certificate, or a `Failed` condition
/// when its usages are not those of a client certificate. `None` when it has nothing to do (not approved, denied,
/// failed, already issued, or for another signer).
pub fn sign(ca: &CertificateAuthority, obj: &Value, now: jiff::Timestamp) -> Option<Value> {
    if meta::str_at(obj, &["spec", "signerName"]) != Some(KUBE_APISERVER_CLIENT)
        || !has_true_condition(obj, "Approved")
        || has_true_condition(obj, "Denied")
        || has_true_condition(obj, "Failed")
        || !meta::str_at(obj, &["status", "certificate"])
            .unwrap_or_default()
            .is_empty()
    {
        return None;
    }
    let issued = client_usages(&usages(obj)).and_then(|(key_usages, extended)| {
        let pem = request_pem(obj)?;
        let requested = meta::value_at(obj, &["spec", "expirationSeconds"])
            .and_then(Value::as_i64)
            .unwrap_or(MAX_VALIDITY_SECONDS);
        let seconds = now.as_second();
        ca.sign_request(
            &pem,
            key_usages,
            extended,
            seconds - BACKDATE_SECONDS,
            seconds + requested.min(MAX_VALIDITY_SECONDS),
        )
        .map_err(|e| e.to_string())
    });
    let mut out = obj.clone();
    let root = meta::object_mut(&mut out);
    let status = root.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let status: &mut Map<String, Value> = status.as_object_mut()?;
    match issued {
        Ok(pem) => {
            status.insert("certificate".into(), json!(BASE64.encode(pem)));
        }
        Err(why) => {
            let time = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            let failed = json!({
                "type": "Failed", "status": "True", "reason": "SignerValidationFailure", "message": why,
                "lastUpdateTime": time, "lastTransitionTime": time,
            });
            match status.get_mut("conditions").and_then(Value::as_array_mut) {
                Some(list) => list.push(failed),
                None => {
                    status.insert("conditions".into(), json!([failed]));
                }
            }
        }
    }
    Some(out)
}

/// The key usages of a client certificate, or why the requested ones are not (upstream's checks for the
/// `kube-apiserver-client` signer).
fn client_usages(
    usages: &[String],
) -> Result<(Vec<KeyUsagePurpose>, Vec<ExtendedKeyUsagePurpose>), String> {
    let mut key_usages = Vec::new();
    let mut client_auth = false;
    for u in usages {
        match u.as_str() {
            "digital signature" => key_usages.push(KeyUsagePurpose::DigitalSignature),
            "key encipherment" => key_usages.push(KeyUsagePurpose::KeyEncipherment),
            "client auth" => client_auth = true,
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    if !client_auth {
        return Err("missing required usage for client certificate: client auth".into());
    }
    Ok((key_usages, vec![ExtendedKeyUsagePurpose::ClientAuth]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn request(cn: &str) -> String {
        request_in(cn, "devs")
    }

    fn request_in(cn: &str, group: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, group);
        BASE64.encode(params.serialize_request(&key).unwrap().pem().unwrap())
    }

    #[test]
    fn no_request_for_system_masters_to_the_api_server_client_signer_is_admitted() {
        let asking = |group: &str, signer: &str| {
            restricted(&json!({"spec": {
                "request": request_in("mallory", group), "signerName": signer, "usages": ["client auth"],
            }}))
        };
        assert_eq!(
            asking("system:masters", KUBE_APISERVER_CLIENT).as_deref(),
            Some(
                "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"
            )
        );
        assert_eq!(asking("devs", KUBE_APISERVER_CLIENT), None);
        assert_eq!(asking("system:masters", "example.com/other"), None);
    }

    fn csr(usages: Value, conditions: Value) -> Value {
        json!({
            "metadata": {"name": "alice"},
            "spec": {"request": request("alice"), "signerName": KUBE_APISERVER_CLIENT, "usages": usages},
            "status": {"conditions": conditions},
        })
    }

    #[test]
    fn an_approved_client_request_gets_a_certificate_naming_its_subject() {
        let ca = CertificateAuthority::new("test-ca").unwrap();
        let approved = csr(
            json!(["client auth", "digital signature"]),
            json!([{"type": "Approved", "status": "True"}]),
        );
        let signed = sign(&ca, &approved, jiff::Timestamp::now()).unwrap();
        let pem = BASE64
            .decode(signed["status"]["certificate"].as_str().unwrap())
            .unwrap();
        let (_, block) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        let (user, groups) = crate::tls::certificate_subject(&block.contents).unwrap();
        assert_eq!((user.as_str(), groups), ("alice", vec!["devs".to_string()]));
        // Nothing more to do once issued, or before approval.
        assert!(sign(&ca, &signed, jiff::Timestamp::now()).is_none());
        assert!(
            sign(
                &ca,
                &csr(json!(["client auth"]), json!([])),
                jiff::Timestamp::now()
            )
            .is_none()
        );
    }

    #[test]
    fn a_request_for_server_auth_fails_the_client_signer() {
        let ca = CertificateAuthority::new("test-ca").unwrap();
        let approved = csr(
            json!(["server auth"]),
            json!([{"type": "Approved", "status": "True"}]),
        );
        let failed = sign(&ca, &approved, jiff::Timestamp::now()).unwrap();
        let last = failed["status"]["conditions"]
            .as_array()
            .unwrap()
            .last()
            .cloned()
            .unwrap();
        assert_eq!(last["type"], "Failed");
        assert_eq!(last["reason"], "SignerValidationFailure");
        assert_eq!(
            last["message"],
            "invalid usage for client certificate: server auth"
        );
        assert!(failed["status"].get("certificate").is_none());
    }

    #[test]
    fn writes_must_hold_a_request_and_consistent_conditions() {
        let fields =
            |causes: Vec<FieldCause>| causes.into_iter().map(|c| c.field).collect::<Vec<_>>();
        let bad = json!({"spec": {"request": BASE64.encode("nope"), "usages": []}});
        assert_eq!(
            fields(validate(&bad, None)),
            ["spec.request", "spec.signerName", "spec.usages"]
        );
        let both = csr(
            json!(["client auth"]),
            json!([{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]),
        );
        assert_eq!(fields(validate(&both, None)), ["status.conditions"]);
        let approved = csr(
            json!(["client auth"]),
            json!([{"type": "Approved", "status": "True"}]),
        );
        let unapproved = csr(json!(["client auth"]), json!([]));
        assert_eq!(
            fields(validate(&unapproved, Some(&approved))),
            ["status.conditions"]
        );
        assert!(validate(&approved, Some(&unapproved)).is_empty());
    }
}
