//! Response representations chosen by `Accept`: plain objects, `PartialObjectMetadata`, or `Table`.

use serde_json::{Value, json};

use crate::api_error::{ApiError, ApiResult};
use crate::registry::ResourceType;
use crate::table::{self, IncludeObject};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Object,
    Metadata,
    Table(IncludeObject),
}

fn params(media: &str) -> (String, Vec<(String, String)>) {
    let mut parts = media.split(';').map(str::trim);
    let base = parts.next().unwrap_or("").to_ascii_lowercase();
    let ps = parts
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    (base, ps)
}

/// Picks the first acceptable representation, as upstream's negotiation does.
pub fn negotiate(accept: Option<&str>, include_object: Option<&str>) -> ApiResult<Format> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Format::Object);
    };
    let include = match include_object {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    };
    for media in accept.split(',') {
        let (base, ps) = params(media);
        if !matches!(
            base.as_str(),
            "application/json" | "*/*" | "application/*" | "application/yaml"
        ) {
            continue;
        }
        let get = |k: &str| ps.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.as_str());
        match get("as") {
            None => return Ok(Format::Object),
            Some("Table")
                if get("g") == Some("meta.k8s.io")
                    && matches!(get("v"), Some("v1") | Some("v1beta1")) =>
            {
                return Ok(Format::Table(include));
            }
            Some("PartialObjectMetadata") | Some("PartialObjectMetadataList")
                if get("g") == Some("meta.k8s.io")
                    && matches!(get("v"), Some("v1") | Some("v1beta1")) =>
            {
                return Ok(Format::Metadata);
            }
            _ => continue,
        }
    }
    Err(ApiError::not_acceptable(format!(
        "only the following media types are accepted: application/json, application/yaml; got {accept}"
    )))
}

pub fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
}

pub fn object(format: Format, rt: &ResourceType, obj: Value) -> Value {
    match format {
        Format::Object => obj,
        Format::Metadata => partial(&obj),
        Format::Table(include) => table::table(rt, std::slice::from_ref(&obj), include, None, None),
    }
}

pub fn list(
    format: Format,
    rt: &ResourceType,
    items: Vec<Value>,
    rv: u64,
    continue_token: Option<String>,
    remaining: Option<u64>,
) -> Value {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = &continue_token {
        metadata["continue"] = json!(c);
    }
    if let Some(r) = remaining {
        metadata["remainingItemCount"] = json!(r);
    }
    match format {
        Format::Object => {
            json!({"kind": rt.list_kind(), "apiVersion": rt.api_version(), "metadata": metadata, "items": items})
        }
        Format::Metadata => json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "items": items.iter().map(partial).collect::<Vec<_>>(),
        }),
        Format::Table(include) => {
            table::table(rt, &items, include, Some(rv.to_string()), continue_token)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn kubectl_and_kube_accept_headers() {
        assert_eq!(
            negotiate(Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"), None).unwrap(),
            Format::Table(IncludeObject::Metadata)
        );
        assert_eq!(
            negotiate(
                Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                None
            )
            .unwrap(),
            Format::Metadata
        );
        assert_eq!(
            negotiate(
                Some("application/vnd.kubernetes.protobuf,application/json"),
                None
            )
            .unwrap(),
            Format::Object
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf"), None)
                .unwrap_err()
                .code,
            406
        );
    }
}
