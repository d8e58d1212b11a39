//! The HTTPS endpoints the API server calls with AdmissionReview v1 and
//! ConversionReview v1: decoding a review, the lookups a decision needs, and
//! encoding the answer.
//!
//! Decisions themselves are pure ([`super::validate`], [`super::default`]);
//! this module only reads what they need from the API (the restore source,
//! the cluster a backup names).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json};
use axum::routing::{get, post};
use base64::Engine as _;
use dkv_api::distributedkv::convert;
use dkv_api::{DistributedKV, DistributedKVBackup};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use kube::core::Status;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::configurations::{
    CONVERT_PATH, DEFAULT_BACKUP_PATH, DEFAULT_CLUSTER_PATH, VALIDATE_BACKUP_PATH,
    VALIDATE_CLUSTER_PATH,
};
use super::default::{default_backup, default_cluster};
use super::validate::{
    AdmissionVerdict, BackupTarget, ClusterWrite, RestoreSource, lowers_storage, members_now,
    restore_backup_name, review_backup, review_cluster, turns_auth_off,
};
use crate::cluster::validate::Defaults;

#[derive(Clone)]
struct AdmissionState {
    client: Client,
    defaults: Arc<Defaults>,
}

pub fn router(client: Client, defaults: Defaults) -> Router {
    Router::new()
        .route(VALIDATE_CLUSTER_PATH, post(validate_cluster_handler))
        .route(VALIDATE_BACKUP_PATH, post(validate_backup_handler))
        .route(DEFAULT_CLUSTER_PATH, post(default_cluster_handler))
        .route(DEFAULT_BACKUP_PATH, post(default_backup_handler))
        .route(CONVERT_PATH, post(convert_handler))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(AdmissionState {
            client,
            defaults: Arc::new(defaults),
        })
}

/// Decodes the review; the error says why a malformed one is invalid.
fn decode(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, String> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| format!("not an AdmissionReview: {e}"))?;
    review
        .try_into()
        .map_err(|_| "the AdmissionReview has no request".to_owned())
}

fn typed<K: DeserializeOwned>(object: &DynamicObject, what: &str) -> Result<K, String> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| format!("the {what} cannot be read: {e}"))
}

/// The version the decisions are made in: the one the operator works in.
const DECIDED_IN: &str = convert::V1BETA1;

/// A `DistributedKV` as v1beta1, the version the decisions are made in.
/// A v1alpha1 write arrives as written (upstream's `matchPolicy: Equivalent`
/// only converts for rules that do not list the version) and is converted
/// here as the API server would.
fn cluster(object: &DynamicObject, what: &str) -> Result<DistributedKV, String> {
    serde_json::from_value(cluster_json(object, what)?)
        .map_err(|e| format!("the {what} cannot be read: {e}"))
}

fn cluster_json(object: &DynamicObject, what: &str) -> Result<Value, String> {
    let value =
        serde_json::to_value(object).map_err(|e| format!("the {what} cannot be read: {e}"))?;
    convert::convert(&value, DECIDED_IN)
        .map_err(|e| format!("the {what} cannot be read as {DECIDED_IN}: {e}"))
}

/// `patch` (against the v1beta1 form of `written`) as a patch against
/// `written` in the version it was written in.
fn in_written_version(
    written: &DynamicObject,
    patch: &json_patch::Patch,
) -> Result<json_patch::Patch, String> {
    let written_object = written;
    let written = serde_json::to_value(written).map_err(|e| e.to_string())?;
    let version = written
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or(DECIDED_IN)
        .to_owned();
    if version == DECIDED_IN || patch.0.is_empty() {
        return Ok(patch.clone());
    }
    let mut defaulted = cluster_json(written_object, "DistributedKV")?;
    json_patch::patch(&mut defaulted, patch)
        .map_err(|e| format!("applying the defaults to the {DECIDED_IN} form: {e}"))?;
    let defaulted = convert::convert(&defaulted, &version).map_err(|e| e.to_string())?;
    Ok(json_patch::diff(&written, &defaulted))
}

/// The review answered: `response` with `verdict` applied.
fn answer(mut response: AdmissionResponse, verdict: &AdmissionVerdict) -> AdmissionResponse {
    if !verdict.warnings.is_empty() {
        response.warnings = Some(verdict.warnings.clone());
    }
    if !verdict.allowed() {
        response = refuse(response, verdict.message());
    }
    response
}

/// A refusal as Kubernetes webhooks phrase one: 403 Forbidden with the reason.
fn refuse(response: AdmissionResponse, message: String) -> AdmissionResponse {
    let mut response = response.deny(&message);
    response.result.code = 403;
    response.result.reason = "Forbidden".to_owned();
    response
}

fn respond(response: AdmissionResponse) -> axum::response::Response {
    let patch = response.patch.clone();
    let mut review = match serde_json::to_value(response.into_review()) {
        Ok(review) => review,
        Err(err) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding the AdmissionReview: {err}"),
            )
                .into_response();
        }
    };
    // The wire form of `patch` is base64 ([]byte in Go); kube's type would
    // write an array of numbers.
    if let (Some(patch), Some(response)) = (patch, review.get_mut("response")) {
        response["patch"] = Value::String(base64::engine::general_purpose::STANDARD.encode(patch));
    }
    Json(review).into_response()
}

async fn validate_cluster_handler(
    State(state): State<AdmissionState>,
    body: Bytes,
) -> axum::response::Response {
    let request = match decode(&body) {
        Ok(request) => request,
        Err(invalid) => return respond(AdmissionResponse::invalid(invalid)),
    };
    let response = AdmissionResponse::from(&request);
    let written = request
        .object
        .as_ref()
        .and_then(|o| o.types.as_ref())
        .map(|t| t.api_version.clone())
        .unwrap_or_default();
    respond(match validate_cluster(&state, &request).await {
        Ok(verdict) => answer(response, &verdict.for_written_version(&written)),
        Err(message) => refuse(response, message),
    })
}

async fn validate_cluster(
    state: &AdmissionState,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<AdmissionVerdict, String> {
    let Some(object) = &request.object else {
        return Ok(AdmissionVerdict::default());
    };
    if request.sub_resource.as_deref() == Some("scale") {
        return validate_scale(state, request, object).await;
    }
    let new = cluster(object, "DistributedKV")?;
    match (&request.operation, &request.old_object) {
        (Operation::Update, Some(old)) => {
            let old = cluster(old, "previous DistributedKV")?;
            validate_update(state, request, &old, &new).await
        }
        (Operation::Create, _) => validate_create(state, request, &new).await,
        _ => Ok(AdmissionVerdict::default()),
    }
}

/// A write of the scale subresource (`kubectl scale`).
async fn validate_scale(
    state: &AdmissionState,
    request: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
) -> Result<AdmissionVerdict, String> {
    let replicas = |scale: Option<&DynamicObject>| {
        scale
            .and_then(|s| s.data.pointer("/spec/replicas"))
            .and_then(Value::as_i64)
            .and_then(|r| i32::try_from(r).ok())
    };
    let (Some(old), Some(new)) = (
        replicas(request.old_object.as_ref()),
        replicas(Some(object)),
    ) else {
        return Ok(AdmissionVerdict::default());
    };
    // The scale object does not carry spec.hibernation: the cluster does.
    let namespace = request.namespace.clone().unwrap_or_default();
    let found = if old == new {
        None
    } else {
        let api: Api<DistributedKV> = Api::namespaced(state.client.clone(), &namespace);
        match api.get_opt(&request.name).await {
            Ok(found) => found,
            Err(err) => {
                return Err(format!(
                    "spec.size: could not check whether cluster {namespace}/{} is hibernated ({err}); retry",
                    request.name
                ));
            }
        }
    };
    let hibernated = found
        .as_ref()
        .filter(|c| c.spec.hibernation)
        .map(|_| format!("{namespace}/{}", request.name));
    Ok(review_cluster(
        ClusterWrite::Scale {
            old,
            new,
            hibernated: hibernated.as_deref(),
            members: found.as_ref().map(members_now),
        },
        &RestoreSource::NotAsked,
        &state.defaults,
    ))
}

/// An update of a cluster, with what the API says of its StorageClass,
/// etcd's authentication and its volumes where the edit depends on them.
async fn validate_update(
    state: &AdmissionState,
    request: &AdmissionRequest<DynamicObject>,
    old: &DistributedKV,
    new: &DistributedKV,
) -> Result<AdmissionVerdict, String> {
    let expandable = match growing_storage_class(old, new) {
        None => None,
        Some(class) => {
            let api: Api<StorageClass> = Api::all(state.client.clone());
            match api.get_opt(class).await {
                Ok(found) => Some(found.is_some_and(|c| c.allow_volume_expansion == Some(true))),
                Err(err) => {
                    return Err(format!(
                        "spec.storage.size: could not check whether StorageClass {class} allows volume expansion ({err}); retry"
                    ));
                }
            }
        }
    };
    // Refused only if dkv did turn it on: a spec that asked for
    // authentication and never got it can be taken back.
    let auth_on = if turns_auth_off(old, new) {
        let namespace = request.namespace.clone().unwrap_or_default();
        match crate::cluster::security::auth::enabled_in_etcd(
            &state.client,
            &namespace,
            &request.name,
        )
        .await
        {
            Ok(on) => Some(on),
            Err(err) => {
                return Err(format!(
                    "spec.auth.enabled: could not check whether etcd authentication is on in cluster {namespace}/{} ({err}); retry",
                    request.name
                ));
            }
        }
    } else {
        None
    };
    // A lower size is checked against what the volumes hold, not
    // against a size the previous spec asked for.
    let volume_capacity = if lowers_storage(old, new) {
        let namespace = request.namespace.clone().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(state.client.clone(), &namespace);
        let selector = format!("{}={}", dkv_api::labels::CLUSTER_KEY, request.name);
        match api.list(&ListParams::default().labels(&selector)).await {
            Ok(claims) => crate::cluster::dereference::largest_reached(claims.items.iter()),
            Err(err) => {
                return Err(format!(
                    "spec.storage.size: could not read the volume claims of cluster {namespace}/{} ({err}); retry",
                    request.name
                ));
            }
        }
    } else {
        None
    };
    Ok(review_cluster(
        ClusterWrite::Update {
            old,
            new,
            expandable,
            auth_on,
            volume_capacity: volume_capacity.as_deref(),
        },
        &RestoreSource::NotAsked,
        &state.defaults,
    ))
}

/// A new cluster, with whether the backup it restores from exists.
async fn validate_create(
    state: &AdmissionState,
    request: &AdmissionRequest<DynamicObject>,
    new: &DistributedKV,
) -> Result<AdmissionVerdict, String> {
    let restore = match restore_backup_name(new) {
        None => RestoreSource::NotAsked,
        Some(name) => {
            let namespace = request.namespace.clone().unwrap_or_default();
            let api: Api<DistributedKVBackup> = Api::namespaced(state.client.clone(), &namespace);
            match api.get_opt(name).await {
                Ok(Some(backup)) => RestoreSource::Found {
                    completed: backup.status.and_then(|s| s.phase)
                        == Some(dkv_api::backup::v1alpha1::BackupPhase::Completed),
                },
                Ok(None) => RestoreSource::Missing,
                Err(err) => {
                    return Err(format!(
                        "spec.bootstrap.restore.backupName: could not check that DistributedKVBackup {namespace}/{name} exists ({err}); retry"
                    ));
                }
            }
        }
    };
    Ok(review_cluster(
        ClusterWrite::Create(new),
        &restore,
        &state.defaults,
    ))
}

/// The StorageClass of a write that grows `spec.storage.size`, if it does.
fn growing_storage_class<'a>(old: &DistributedKV, new: &'a DistributedKV) -> Option<&'a str> {
    let size = |d: &DistributedKV| {
        d.spec
            .storage
            .as_ref()
            .and_then(|s| crate::quantity::parse_quantity(&s.size.0).ok())
    };
    match (size(old), size(new)) {
        (Some(before), Some(after)) if after > before => new
            .spec
            .storage
            .as_ref()
            .map(|s| s.storage_class_name.as_str()),
        _ => None,
    }
}

async fn validate_backup_handler(
    State(state): State<AdmissionState>,
    body: Bytes,
) -> axum::response::Response {
    let request = match decode(&body) {
        Ok(request) => request,
        Err(invalid) => return respond(AdmissionResponse::invalid(invalid)),
    };
    let response = AdmissionResponse::from(&request);
    respond(match validate_backup(&state, &request).await {
        Ok(verdict) => answer(response, &verdict),
        Err(message) => refuse(response, message),
    })
}

async fn validate_backup(
    state: &AdmissionState,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<AdmissionVerdict, String> {
    // The spec is immutable (CEL); later writes are the operator's
    // bookkeeping and always pass.
    let (Operation::Create, Some(object)) = (&request.operation, &request.object) else {
        return Ok(AdmissionVerdict::default());
    };
    let backup: DistributedKVBackup = typed(object, "DistributedKVBackup")?;
    let namespace = request.namespace.clone().unwrap_or_default();
    let cluster = backup.spec.cluster.trim();
    let api: Api<DistributedKV> = Api::namespaced(state.client.clone(), &namespace);
    let target = match api.get_opt(cluster).await {
        Ok(Some(found)) => BackupTarget::Found {
            has_destination: found.spec.backup.is_some(),
            hibernated: found.spec.hibernation,
        },
        Ok(None) => BackupTarget::Missing,
        Err(err) => {
            return Err(format!(
                "spec.cluster: could not check that DistributedKV {namespace}/{cluster} exists ({err}); retry"
            ));
        }
    };
    Ok(review_backup(&backup, &target))
}

async fn default_cluster_handler(
    State(state): State<AdmissionState>,
    body: Bytes,
) -> axum::response::Response {
    let request = match decode(&body) {
        Ok(request) => request,
        Err(invalid) => return respond(AdmissionResponse::invalid(invalid)),
    };
    let response = AdmissionResponse::from(&request);
    let patch = (|| {
        let Some(object) = &request.object else {
            return Ok(json_patch::Patch(Vec::new()));
        };
        // An object that does not fit the schema is admitted unchanged:
        // the API server's schema validation, which follows, refuses it
        // naming the field (`spec.backup.schedule: Required value`), which
        // says more than a failed decode here would.
        let Ok(new) = cluster(object, "DistributedKV") else {
            return Ok(json_patch::Patch(Vec::new()));
        };
        let old = request
            .old_object
            .as_ref()
            .and_then(|old| cluster(old, "previous DistributedKV").ok());
        let patch = default_cluster(&new, old.as_ref(), &state.defaults)
            .map_err(|e| format!("computing the defaults of {}: {e}", new.name_any()))?;
        in_written_version(object, &patch)
    })();
    respond(patched(response, patch))
}

async fn default_backup_handler(body: Bytes) -> axum::response::Response {
    let request = match decode(&body) {
        Ok(request) => request,
        Err(invalid) => return respond(AdmissionResponse::invalid(invalid)),
    };
    let response = AdmissionResponse::from(&request);
    let patch = (|| {
        let Some(object) = &request.object else {
            return Ok(json_patch::Patch(Vec::new()));
        };
        // As for clusters: schema validation names what does not fit.
        let Ok(backup) = typed::<DistributedKVBackup>(object, "DistributedKVBackup") else {
            return Ok(json_patch::Patch(Vec::new()));
        };
        default_backup(&backup)
            .map_err(|e| format!("computing the defaults of {}: {e}", backup.name_any()))
    })();
    respond(patched(response, patch))
}

/// ConversionReview v1 for `DistributedKV`: every object to the desired
/// version, or a failure naming the object that could not be converted.
async fn convert_handler(body: Bytes) -> axum::response::Response {
    Json(conversion_review(&body)).into_response()
}

fn conversion_review(body: &[u8]) -> ConversionReview {
    let review: ConversionReview = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(err) => {
            return ConversionResponse::invalid(Status::failure(
                &format!("not a ConversionReview: {err}"),
                "BadRequest",
            ))
            .into_review();
        }
    };
    let request = match ConversionRequest::try_from(review) {
        Ok(request) => request,
        Err(err) => {
            return ConversionResponse::invalid(Status::failure(&err.to_string(), "BadRequest"))
                .into_review();
        }
    };
    let converted: Result<Vec<Value>, String> = request
        .objects
        .iter()
        .map(|object| {
            convert::convert(object, &request.desired_api_version).map_err(|e| {
                let name = object.pointer("/metadata/name").and_then(Value::as_str);
                let namespace = object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str);
                format!(
                    "converting DistributedKV {}/{} to {}: {e}",
                    namespace.unwrap_or_default(),
                    name.unwrap_or_default(),
                    request.desired_api_version
                )
            })
        })
        .collect();
    let response = ConversionResponse::for_request(request);
    match converted {
        Ok(objects) => response.success(objects),
        Err(message) => response.failure(Status::failure(&message, "BadRequest")),
    }
    .into_review()
}

fn patched(
    response: AdmissionResponse,
    patch: Result<json_patch::Patch, String>,
) -> AdmissionResponse {
    match patch {
        Ok(patch) if patch.0.is_empty() => response,
        Ok(patch) => match response.clone().with_patch(patch) {
            Ok(response) => response,
            Err(err) => refuse(response, err.to_string()),
        },
        Err(message) => refuse(response, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(objects: Value, desired: &str) -> Value {
        let body = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "abc", "desiredAPIVersion": desired, "objects": objects}
        });
        serde_json::to_value(conversion_review(
            &serde_json::to_vec(&body).unwrap_or_default(),
        ))
        .unwrap_or_default()
    }

    #[test]
    fn conversion_review_converts_every_object_and_echoes_the_uid() {
        let objects = serde_json::json!([
            {"apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKV", "metadata": {"name": "a", "namespace": "shop"},
             "spec": {"size": 3, "image": "etcd", "backup": {"s3Path": "s3://b/x/", "schedule": "@daily", "retentionDays": 2}}},
            {"apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV", "metadata": {"name": "b", "namespace": "shop"},
             "spec": {"size": 1, "image": "etcd"}}
        ]);
        let answer = review(objects, "dkv.io/v1beta1");
        assert_eq!(answer["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(answer["kind"], "ConversionReview");
        assert_eq!(answer["response"]["uid"], "abc");
        assert_eq!(answer["response"]["result"]["status"], "Success");
        let converted = &answer["response"]["convertedObjects"];
        assert_eq!(converted[0]["apiVersion"], "dkv.io/v1beta1");
        assert_eq!(converted[0]["spec"]["backup"]["retention"]["maxAge"], "2d");
        assert_eq!(converted[1]["metadata"]["name"], "b");
    }

    #[test]
    fn a_failed_conversion_names_the_object() {
        let objects = serde_json::json!([
            {"apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV", "metadata": {"name": "b", "namespace": "shop"},
             "spec": {"size": 1, "image": "etcd", "backup": {"schedule": "@daily"}}}
        ]);
        let answer = review(objects, "dkv.io/v1alpha1");
        assert_eq!(answer["response"]["uid"], "abc");
        assert_eq!(answer["response"]["result"]["status"], "Failure");
        let message = answer["response"]["result"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.starts_with("converting DistributedKV shop/b to dkv.io/v1alpha1: spec.backup is not a v1beta1 backup spec"),
            "{message}"
        );
        let garbage = conversion_review(b"{");
        assert!(
            garbage
                .response
                .is_some_and(|r| r.result.message.contains("not a ConversionReview"))
        );
    }
}
