//! `application/vnd.kubernetes.protobuf` request bodies, as kubectl's typed commands (`kubectl create namespace`,
//! `create secret`, `create deployment`, …) send them for built-in kinds.
//!
//! The body is upstream's envelope (`runtime/serializer/protobuf`): the magic `k8s\0`, then a `runtime.Unknown`
//! whose `typeMeta` names the kind and whose `raw` is the object's message. The message is decoded with its k8s-pb
//! type and converted to the JSON that Go's `encoding/json` writes for the struct upstream decodes it into, so the
//! rest of the server handles it exactly as the same object sent as JSON. Kinds without a conversion, and fields a
//! conversion does not cover, are refused with 415 naming them — never stored in part. Responses stay JSON
//! (clients list `application/json` in `Accept` too).

mod core_v1;
mod fields;
mod groups;
mod meta;

use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{Map, Value};

use crate::api_error::{ApiError, ApiResult};
use fields::{ConvertError, ToJson};

pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// `k8s\0`, upstream's `protoEncodingPrefix`.
const PREFIX: [u8; 4] = [0x6b, 0x38, 0x73, 0x00];

/// A parsed envelope: the object's apiVersion and kind (possibly empty) and its encoded message.
#[derive(Debug, PartialEq)]
pub struct Envelope {
    pub api_version: String,
    pub kind: String,
    pub raw: Vec<u8>,
    pub content_encoding: String,
}

/// Splits a protobuf body into its envelope, with upstream's messages for malformed ones.
pub fn envelope(body: &[u8]) -> Result<Envelope, String> {
    if body.is_empty() {
        return Err("empty data".into());
    }
    let Some(data) = body.strip_prefix(&PREFIX[..]) else {
        return Err(format!(
            "provided data does not appear to be a protobuf message, expected prefix {PREFIX:?}"
        ));
    };
    if data.is_empty() {
        return Err("empty body".into());
    }
    let unknown = Unknown::decode(data).map_err(|e| e.to_string())?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    Ok(Envelope {
        api_version: type_meta.api_version.unwrap_or_default(),
        kind: type_meta.kind.unwrap_or_default(),
        raw: unknown.raw.unwrap_or_default(),
        content_encoding: unknown.content_encoding.unwrap_or_default(),
    })
}

type Converter = fn(&[u8]) -> Result<Value, Failure>;

enum Failure {
    Decode(prost::DecodeError),
    Convert(ConvertError),
}

fn convert<M: Message + ToJson>(raw: &[u8]) -> Result<Value, Failure> {
    let message = M::decode(raw).map_err(Failure::Decode)?;
    message.to_json("").map_err(Failure::Convert)
}

/// The kinds whose protobuf form kube-local decodes, by (apiVersion, kind).
const KINDS: &[(&str, &str, Converter)] = {
    use k8s_pb::api::{
        apps::v1 as apps, authentication::v1 as authentication, authorization::v1 as authorization,
        autoscaling::v1 as autoscaling, batch::v1 as batch, certificates::v1 as certificates,
        core::v1 as core, policy::v1 as policy, policy::v1beta1 as policy_v1beta1,
        rbac::v1 as rbac,
    };
    &[
        ("v1", "Namespace", convert::<core::Namespace>),
        ("v1", "Secret", convert::<core::Secret>),
        ("v1", "ConfigMap", convert::<core::ConfigMap>),
        ("v1", "ServiceAccount", convert::<core::ServiceAccount>),
        ("v1", "Service", convert::<core::Service>),
        ("apps/v1", "Deployment", convert::<apps::Deployment>),
        ("batch/v1", "Job", convert::<batch::Job>),
        ("batch/v1", "CronJob", convert::<batch::CronJob>),
        (
            "policy/v1",
            "PodDisruptionBudget",
            convert::<policy::PodDisruptionBudget>,
        ),
        ("policy/v1", "Eviction", convert::<policy::Eviction>),
        (
            "policy/v1beta1",
            "Eviction",
            convert::<policy_v1beta1::Eviction>,
        ),
        (
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            convert::<certificates::CertificateSigningRequest>,
        ),
        ("autoscaling/v1", "Scale", convert::<autoscaling::Scale>),
        (
            "authentication.k8s.io/v1",
            "TokenRequest",
            convert::<authentication::TokenRequest>,
        ),
        (
            "authentication.k8s.io/v1",
            "SelfSubjectReview",
            convert::<authentication::SelfSubjectReview>,
        ),
        (
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            convert::<authorization::SelfSubjectAccessReview>,
        ),
        (
            "authorization.k8s.io/v1",
            "SelfSubjectRulesReview",
            convert::<authorization::SelfSubjectRulesReview>,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            convert::<rbac::ClusterRole>,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            convert::<rbac::ClusterRoleBinding>,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "Role",
            convert::<rbac::Role>,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            convert::<rbac::RoleBinding>,
        ),
    ]
};

/// The kinds with a protobuf conversion, e.g. for messages: `v1/Namespace, apps/v1/Deployment, …`.
pub fn supported_kinds() -> String {
    KINDS
        .iter()
        .map(|(v, k, _)| format!("{v}/{k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Decodes a protobuf request body into the JSON object the server handles. `default_api_version` and
/// `default_kind` (the endpoint's) fill an envelope that leaves them empty, as upstream's `copyKindDefaults`.
pub fn decode(body: &[u8], default_api_version: &str, default_kind: &str) -> ApiResult<Value> {
    let env = envelope(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {default_kind}): {e}"
        ))
    })?;
    let kind = if env.kind.is_empty() {
        default_kind
    } else {
        env.kind.as_str()
    };
    let api_version = if env.api_version.is_empty() {
        default_api_version
    } else {
        env.api_version.as_str()
    };
    if !env.content_encoding.is_empty() {
        return Err(ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - {MEDIA_TYPE} with content encoding {:?} is not supported",
            env.content_encoding
        )));
    }
    let Some((_, _, converter)) = KINDS
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)
    else {
        return Err(ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - kube-local does not decode {MEDIA_TYPE} for {api_version}, Kind={kind} (only {}); send it as application/json or application/yaml",
            supported_kinds()
        )));
    };
    let version = api_version.rsplit('/').next().unwrap_or(api_version);
    let fields = match converter(&env.raw) {
        Ok(Value::Object(fields)) => fields,
        Ok(other) => {
            return Err(ApiError::internal(format!(
                "{kind} converted from protobuf to a non-object: {other}"
            )));
        }
        Err(Failure::Decode(e)) => {
            return Err(ApiError::bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {default_kind}: {e}"
            )));
        }
        Err(Failure::Convert(ConvertError::Unsupported(path))) => {
            return Err(ApiError::unsupported_media(format!(
                "the body of the request was in an unknown format - kube-local does not decode field {path:?} of {api_version}, Kind={kind} from {MEDIA_TYPE}; send the object as application/json or application/yaml"
            )));
        }
        Err(Failure::Convert(ConvertError::Invalid(path, why))) => {
            return Err(ApiError::bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {default_kind}: {path}: {why}"
            )));
        }
    };
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::from(api_version));
    object.insert("kind".into(), Value::from(kind));
    object.extend(fields);
    Ok(Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::apps::v1 as apps;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as metav1;
    use k8s_pb::apimachinery::pkg::runtime::TypeMeta;
    use serde_json::json;

    /// A length-delimited field (wire type 2) with a one-byte length.
    fn field(tag: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(tag << 3) | 2, u8::try_from(bytes.len()).unwrap()];
        out.extend_from_slice(bytes);
        out
    }

    fn wrap(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw.to_vec()),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut body = PREFIX.to_vec();
        body.extend(unknown.encode_to_vec());
        body
    }

    #[test]
    fn hand_built_envelope() {
        // ObjectMeta{name: "shop", generateName: "", labels: {team: a}}, as gogo writes it (empty strings too).
        let label = [field(1, b"team"), field(2, b"a")].concat();
        let metadata = [field(1, b"shop"), field(2, b""), field(11, &label)].concat();
        let namespace = [field(1, &metadata), field(2, b""), field(3, b"")].concat();
        let type_meta = [field(1, b"v1"), field(2, b"Namespace")].concat();
        let body = [
            b"k8s\0".to_vec(),
            field(1, &type_meta),
            field(2, &namespace),
            field(3, b""),
            field(4, b""),
        ]
        .concat();

        let env = envelope(&body).unwrap();
        assert_eq!(
            (env.api_version.as_str(), env.kind.as_str()),
            ("v1", "Namespace")
        );
        assert_eq!(env.raw, namespace);
        assert_eq!(
            decode(&body, "v1", "Namespace").unwrap(),
            json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "shop", "creationTimestamp": null, "labels": {"team": "a"}},
                "spec": {}, "status": {}
            })
        );
    }

    #[test]
    fn malformed_envelopes_are_bad_requests() {
        assert_eq!(envelope(b"").unwrap_err(), "empty data");
        assert!(
            envelope(b"{\"kind\":1}")
                .unwrap_err()
                .contains("expected prefix [107, 56, 115, 0]")
        );
        assert_eq!(envelope(b"k8s\0").unwrap_err(), "empty body");
        let e = decode(b"k8s\0\x0a\x05ab", "v1", "Secret").unwrap_err();
        assert_eq!((e.code, e.reason.as_ref()), (400, "BadRequest"));
        assert!(
            e.message
                .starts_with("the object provided is unrecognized (must be of type Secret)"),
            "{}",
            e.message
        );
    }

    #[test]
    fn empty_type_meta_takes_the_endpoint_kind() {
        let cm = core::ConfigMap {
            metadata: Some(metav1::ObjectMeta {
                name: Some("c".into()),
                ..Default::default()
            }),
            data: [("k".to_string(), "v".to_string())].into(),
            ..Default::default()
        };
        let body = wrap("", "", &cm.encode_to_vec());
        let obj = decode(&body, "v1", "ConfigMap").unwrap();
        assert_eq!(obj["kind"], "ConfigMap");
        assert_eq!(obj["apiVersion"], "v1");
        assert_eq!(obj["data"], json!({"k": "v"}));
    }

    #[test]
    fn unsupported_kind_is_415_naming_it() {
        let lease = k8s_pb::api::coordination::v1::Lease::default();
        let body = wrap("coordination.k8s.io/v1", "Lease", &lease.encode_to_vec());
        let e = decode(&body, "coordination.k8s.io/v1", "Lease").unwrap_err();
        assert_eq!((e.code, e.reason.as_ref()), (415, "UnsupportedMediaType"));
        assert!(
            e.message.contains("coordination.k8s.io/v1, Kind=Lease"),
            "{}",
            e.message
        );
    }

    #[test]
    fn unconverted_field_is_415_naming_it() {
        let deployment = |pod: core::PodSpec| apps::Deployment {
            spec: Some(apps::DeploymentSpec {
                template: Some(core::PodTemplateSpec {
                    metadata: None,
                    spec: Some(pod),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let container = core::Container {
            name: Some("c".into()),
            ..Default::default()
        };
        let pod = core::PodSpec {
            containers: vec![container.clone()],
            affinity: Some(core::Affinity::default()),
            ..Default::default()
        };
        let body = wrap("apps/v1", "Deployment", &deployment(pod).encode_to_vec());
        let e = decode(&body, "apps/v1", "Deployment").unwrap_err();
        assert_eq!(e.code, 415);
        assert!(
            e.message.contains("\"spec.template.spec.affinity\""),
            "{}",
            e.message
        );
        // A non-pointer field at its zero value (Go always sends those) is not a use.
        let pod = core::PodSpec {
            containers: vec![container],
            hostname: Some(String::new()),
            ..Default::default()
        };
        let body = wrap("apps/v1", "Deployment", &deployment(pod).encode_to_vec());
        assert!(decode(&body, "apps/v1", "Deployment").is_ok());
    }

    #[test]
    fn secret_bytes_become_base64_and_pointers_keep_zero() {
        let s = core::Secret {
            metadata: Some(metav1::ObjectMeta {
                name: Some("s3-creds".into()),
                namespace: Some("shop".into()),
                owner_references: vec![metav1::OwnerReference {
                    api_version: Some("v1".into()),
                    kind: Some("ConfigMap".into()),
                    name: Some("o".into()),
                    uid: Some("u-1".into()),
                    controller: Some(false),
                    block_owner_deletion: None,
                }],
                finalizers: vec!["x/y".into()],
                annotations: [("a".to_string(), String::new())].into(),
                creation_timestamp: Some(metav1::Time {
                    seconds: Some(1_700_000_000),
                    nanos: Some(0),
                }),
                ..Default::default()
            }),
            immutable: Some(false),
            data: [("AWS_ACCESS_KEY_ID".to_string(), b"x\xff".to_vec())].into(),
            string_data: [("plain".to_string(), "p".to_string())].into(),
            r#type: Some("Opaque".into()),
        };
        let obj = decode(&wrap("v1", "Secret", &s.encode_to_vec()), "v1", "Secret").unwrap();
        assert_eq!(
            obj,
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {
                    "name": "s3-creds", "namespace": "shop", "creationTimestamp": "2023-11-14T22:13:20Z",
                    "annotations": {"a": ""},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-1", "controller": false}],
                    "finalizers": ["x/y"]
                },
                "immutable": false,
                "data": {"AWS_ACCESS_KEY_ID": "eP8="},
                "stringData": {"plain": "p"},
                "type": "Opaque"
            })
        );
    }

    /// Every JSON name a conversion writes is a property of the k8s-openapi type it stands for, so a misspelt
    /// or mis-cased name (which decoding through k8s-openapi would silently drop) cannot slip in.
    #[test]
    fn json_names_match_the_openapi_schemas() {
        let mut bad = Vec::new();
        let all = [
            meta::json_names(),
            core_v1::json_names(),
            groups::json_names(),
        ]
        .concat();
        for (message, schema, names) in &all {
            let props = schema.get("properties").and_then(Value::as_object);
            for name in names {
                if !props.is_some_and(|p| p.contains_key(name)) {
                    bad.push(format!("{message}.{name}"));
                }
            }
        }
        assert!(bad.is_empty(), "JSON names not in the schemas: {bad:?}");
        assert!(all.len() > 60);
    }
}
