//! PATCH bodies by content type: JSON merge patch, JSON patch (with upstream's `test` semantics) and strategic merge.

use serde_json::Value;

use crate::api_error::{ApiError, ApiResult};
use crate::strategic_merge;
use crate::type_info::TypeInfo;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchKind {
    pub fn from_content_type(ct: &str) -> ApiResult<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/json-patch+json" => Ok(PatchKind::Json),
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
            "application/apply-patch+yaml" => Ok(PatchKind::Apply),
            _ => Err(ApiError::unsupported_media_type(ct)),
        }
    }
}

/// Applies a non-apply patch to the current object.
pub fn apply(kind: PatchKind, current: &Value, body: &[u8], ti: &TypeInfo<'_>) -> ApiResult<Value> {
    match kind {
        PatchKind::Merge => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            let mut out = current.clone();
            json_patch::merge(&mut out, &p);
            Ok(out)
        }
        PatchKind::Json => json_patch_apply(current, body),
        PatchKind::Strategic => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            strategic_merge::apply(current, &p, ti).map_err(|e| {
                let mut err = ApiError::invalid("", "", "", vec![]);
                err.message = e;
                err.details = None;
                err
            })
        }
        PatchKind::Apply => Err(ApiError::internal(
            "apply patches are handled by server-side apply",
        )),
    }
}

/// RFC 6902, except that `test` of an absent path against `null` passes, as the API server's patch library does.
fn json_patch_apply(current: &Value, body: &[u8]) -> ApiResult<Value> {
    let ops: Vec<json_patch::PatchOperation> = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let mut doc = current.clone();
    for op in &ops {
        if let json_patch::PatchOperation::Test(t) = op
            && t.value.is_null()
            && doc.pointer(t.path.as_str()).is_none()
        {
            continue;
        }
        json_patch::patch(&mut doc, std::slice::from_ref(op)).map_err(|e| {
            let mut err = ApiError::invalid("", "", "", vec![]);
            err.message =
                format!("the server rejected our request due to an error in our request: {e}");
            err.details = Some(Box::new(serde_json::json!({})));
            err
        })?;
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn test_of_missing_path_against_null_passes() {
        let ti = TypeInfo::builtin("ConfigMap");
        let body = br#"[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["x"]}]"#;
        let out = apply(PatchKind::Json, &json!({"metadata": {}}), body, &ti).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["x"]));
        let failing = br#"[{"op":"test","path":"/metadata/name","value":"other"}]"#;
        let e = apply(
            PatchKind::Json,
            &json!({"metadata": {"name": "a"}}),
            failing,
            &ti,
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json; charset=utf-8").unwrap(),
            PatchKind::Merge
        );
        assert_eq!(
            PatchKind::from_content_type("application/json")
                .unwrap_err()
                .code,
            415
        );
    }
}
