//! Conversion of `DistributedKV` objects between `v1alpha1` and `v1beta1`,
//! without loss in either direction.
//!
//! Only `spec.backup` differs. v1alpha1 cannot express everything v1beta1
//! can (`maxBackups`, `maxAge` in hours, `retention: {}`), so going down
//! keeps v1beta1's `destination` and `retention` verbatim in the annotation
//! [`BACKUP_ANNOTATION`], and going up restores them from it, as long as the
//! v1alpha1 fields still say what the annotation does. After an edit through
//! v1alpha1 (another `s3Path`, `retentionDays`) the edit wins and the stale
//! annotation is dropped.
//!
//! v1alpha1 → v1beta1: `s3Path` → `destination.uri`, `credentialsSecret` →
//! `destination.credentialsSecret`, `retentionDays: n` → `retention.maxAge:
//! "<n>d"`. v1beta1 → v1alpha1: the reverse, with a `maxAge` that is not
//! whole days rounded *up* (`36h` → `retentionDays: 2`: a reader of v1alpha1
//! never deletes a backup v1beta1 keeps) and a non-`s3://` destination
//! written to `s3Path` as it is.
//!
//! The functions work on JSON so that every field they do not own passes
//! through byte for byte, whatever serde defaults the Rust types have.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{v1alpha1, v1beta1};

pub const V1ALPHA1: &str = "dkv.io/v1alpha1";
pub const V1BETA1: &str = "dkv.io/v1beta1";

/// On a v1alpha1 object: the v1beta1 `spec.backup.destination` and
/// `retention` it was converted from (JSON).
pub const BACKUP_ANNOTATION: &str = "dkv.io/v1beta1-backup";

/// Why an object could not be converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversionError(String);

impl std::fmt::Display for ConversionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConversionError {}

/// What v1alpha1 keeps of a v1beta1 backup it cannot express.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct PreservedBackup {
    destination: v1beta1::BackupDestination,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retention: Option<v1beta1::BackupRetention>,
    /// v1alpha1 has no continuous backup at all: kept whatever else an
    /// edit through v1alpha1 changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    continuous: Option<v1beta1::ContinuousBackup>,
    /// Neither has v1alpha1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compression: Option<v1beta1::Compression>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    encryption: Option<v1beta1::BackupEncryption>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    verify: Option<bool>,
}

/// The v1alpha1 fields that stand for `destination` and `retention`.
#[derive(Debug, PartialEq)]
struct AlphaBackupFields<'a> {
    s3_path: &'a str,
    credentials_secret: Option<&'a str>,
    retention_days: Option<i32>,
}

impl PreservedBackup {
    fn alpha_fields(&self) -> AlphaBackupFields<'_> {
        AlphaBackupFields {
            s3_path: &self.destination.uri,
            credentials_secret: self.destination.credentials_secret.as_deref(),
            retention_days: self
                .retention
                .as_ref()
                .and_then(|r| r.max_age.as_deref())
                .and_then(|age| age.parse::<v1beta1::MaxAge>().ok())
                .and_then(|age| i32::try_from(age.hours().div_ceil(24)).ok()),
        }
    }

    /// What v1alpha1's fields alone convert to.
    fn from_alpha(alpha: &v1alpha1::BackupSpec) -> Self {
        Self {
            destination: v1beta1::BackupDestination {
                uri: alpha.s3_path.clone(),
                credentials_secret: alpha.credentials_secret.clone(),
            },
            retention: alpha.retention_days.map(|days| v1beta1::BackupRetention {
                max_backups: None,
                max_age: Some(format!("{days}d")),
            }),
            continuous: None,
            compression: None,
            encryption: None,
            verify: None,
        }
    }
}

/// v1alpha1's backup → v1beta1's; `preserved` is the annotation, if any.
pub fn backup_to_v1beta1(
    alpha: &v1alpha1::BackupSpec,
    preserved: Option<&str>,
) -> v1beta1::BackupSpec {
    let preserved = preserved.and_then(|text| serde_json::from_str::<PreservedBackup>(text).ok());
    let continuous = preserved.as_ref().and_then(|p| p.continuous.clone());
    let compression = preserved.as_ref().and_then(|p| p.compression);
    let encryption = preserved.as_ref().and_then(|p| p.encryption.clone());
    let verify = preserved.as_ref().and_then(|p| p.verify);
    let PreservedBackup {
        destination,
        retention,
        ..
    } = preserved
        .filter(|p| {
            p.alpha_fields()
                == AlphaBackupFields {
                    s3_path: &alpha.s3_path,
                    credentials_secret: alpha.credentials_secret.as_deref(),
                    retention_days: alpha.retention_days,
                }
        })
        .unwrap_or_else(|| PreservedBackup::from_alpha(alpha));
    v1beta1::BackupSpec {
        destination,
        schedule: alpha.schedule.clone(),
        backup_image: alpha.backup_image.clone(),
        retention,
        final_backup_on_delete: alpha.final_backup_on_delete,
        continuous,
        compression,
        encryption,
        verify,
    }
}

/// v1beta1's backup → v1alpha1's, and the annotation that must go with it
/// when v1alpha1 cannot say everything.
pub fn backup_to_v1alpha1(beta: &v1beta1::BackupSpec) -> (v1alpha1::BackupSpec, Option<String>) {
    let preserved = PreservedBackup {
        destination: beta.destination.clone(),
        retention: beta.retention.clone(),
        continuous: beta.continuous.clone(),
        compression: beta.compression,
        encryption: beta.encryption.clone(),
        verify: beta.verify,
    };
    let fields = preserved.alpha_fields();
    let alpha = v1alpha1::BackupSpec {
        s3_path: fields.s3_path.to_owned(),
        schedule: beta.schedule.clone(),
        backup_image: beta.backup_image.clone(),
        retention_days: fields.retention_days,
        credentials_secret: fields.credentials_secret.map(str::to_owned),
        final_backup_on_delete: beta.final_backup_on_delete,
    };
    let annotation = (PreservedBackup::from_alpha(&alpha) != preserved)
        .then(|| serde_json::to_string(&preserved).ok())
        .flatten();
    (alpha, annotation)
}

/// `object` (a whole `DistributedKV` as JSON) in `desired` (`dkv.io/v1alpha1`
/// or `dkv.io/v1beta1`). Fields other than `apiVersion`, `spec.backup` and
/// the [`BACKUP_ANNOTATION`] are left as they are.
pub fn convert(object: &Value, desired: &str) -> Result<Value, ConversionError> {
    let from = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| ConversionError("the object has no apiVersion".into()))?;
    let mut out = object.clone();
    match (from, desired) {
        (from, desired) if from == desired => return Ok(out),
        (V1ALPHA1, V1BETA1) => to_v1beta1(&mut out)?,
        (V1BETA1, V1ALPHA1) => to_v1alpha1(&mut out)?,
        _ => {
            return Err(ConversionError(format!(
                "cannot convert DistributedKV from {from} to {desired}; served versions are {V1ALPHA1} and {V1BETA1}"
            )));
        }
    }
    out["apiVersion"] = Value::String(desired.to_owned());
    Ok(out)
}

fn to_v1beta1(object: &mut Value) -> Result<(), ConversionError> {
    let preserved = take_annotation(object);
    let Some(backup) = object.pointer_mut("/spec/backup") else {
        return Ok(());
    };
    let alpha: v1alpha1::BackupSpec = serde_json::from_value(backup.clone())
        .map_err(|e| ConversionError(format!("spec.backup is not a v1alpha1 backup spec: {e}")))?;
    *backup = to_json(&backup_to_v1beta1(&alpha, preserved.as_deref()))?;
    Ok(())
}

fn to_v1alpha1(object: &mut Value) -> Result<(), ConversionError> {
    // An annotation on a v1beta1 object means nothing; never let it pose as ours.
    take_annotation(object);
    let Some(backup) = object.pointer_mut("/spec/backup") else {
        return Ok(());
    };
    let beta: v1beta1::BackupSpec = serde_json::from_value(backup.clone())
        .map_err(|e| ConversionError(format!("spec.backup is not a v1beta1 backup spec: {e}")))?;
    let (alpha, annotation) = backup_to_v1alpha1(&beta);
    *backup = to_json(&alpha)?;
    if let Some(annotation) = annotation {
        let metadata = object
            .as_object_mut()
            .ok_or_else(|| ConversionError("the object is not a JSON object".into()))?
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        let annotations = metadata
            .as_object_mut()
            .ok_or_else(|| ConversionError("metadata is not an object".into()))?
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        annotations
            .as_object_mut()
            .ok_or_else(|| ConversionError("metadata.annotations is not an object".into()))?
            .insert(BACKUP_ANNOTATION.to_owned(), Value::String(annotation));
    }
    Ok(())
}

/// Removes [`BACKUP_ANNOTATION`] (and `annotations` when it was the only
/// one, as the API server would not store an empty map) and returns it.
fn take_annotation(object: &mut Value) -> Option<String> {
    let metadata = object.get_mut("metadata")?.as_object_mut()?;
    let annotations = metadata.get_mut("annotations")?.as_object_mut()?;
    let value = annotations.remove(BACKUP_ANNOTATION)?;
    if annotations.is_empty() {
        metadata.remove("annotations");
    }
    value.as_str().map(str::to_owned)
}

fn to_json(value: &impl Serialize) -> Result<Value, ConversionError> {
    serde_json::to_value(value).map_err(|e| ConversionError(format!("encoding spec.backup: {e}")))
}

#[cfg(test)]
mod tests;
