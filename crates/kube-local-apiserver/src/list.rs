//! LIST semantics: selectors, `resourceVersion`/`resourceVersionMatch`, and `limit`/`continue` over a consistent snapshot.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use crate::api_error::{ApiError, ApiResult, FieldCause};
use crate::core::Core;
use crate::meta;
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::views;

#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Listed {
    pub items: Vec<Value>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

fn encode_token(rv: u64, namespace: &str, name: &str) -> String {
    let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{namespace}/{name}\u{0}")})
        .to_string();
    BASE64.encode(raw.as_bytes())
}

fn decode_token(token: &str) -> Option<(u64, String, String)> {
    let bytes = BASE64.decode(token).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    let rv = v.get("rv")?.as_u64()?;
    let start = v.get("start")?.as_str()?.trim_end_matches('\u{0}');
    let (ns, name) = start.split_once('/')?;
    Some((rv, ns.to_string(), name.to_string()))
}

pub fn parse_rv(rv: &str) -> ApiResult<u64> {
    rv.parse::<u64>()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))
}

pub fn list(
    core: &Core,
    rt: &ResourceType,
    namespace: Option<&str>,
    q: &ListQuery,
) -> ApiResult<Listed> {
    let rv_param = q.resource_version.as_deref().filter(|s| !s.is_empty());
    if let Some(m) = q
        .resource_version_match
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        if rv_param.is_none() {
            return Err(ApiError::invalid_list_options(FieldCause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            )));
        }
        if q.continue_token.is_some() {
            return Err(ApiError::invalid_list_options(FieldCause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            )));
        }
        if m == "Exact" && rv_param == Some("0") {
            return Err(ApiError::invalid_list_options(FieldCause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            )));
        }
        if m != "Exact" && m != "NotOlderThan" {
            return Err(ApiError::invalid_list_options(FieldCause::unsupported(
                "resourceVersionMatch",
                &json!(m),
                &[json!("Exact"), json!("NotOlderThan")],
            )));
        }
    }
    if q.continue_token.is_some() && rv_param.is_some_and(|r| r != "0") {
        return Err(ApiError::invalid_list_options(FieldCause::forbidden(
            "resourceVersion",
            "specifying resource version is not allowed when using continue",
        )));
    }
    let (snapshot, start_after) = match &q.continue_token {
        Some(token) => {
            let (rv, ns, name) = decode_token(token)
                .ok_or_else(|| ApiError::bad_request("continue key is not valid: invalid token"))?;
            let snap = core.store.list_at(&rt.storage, namespace, rv).map_err(|_| {
                ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
            })?;
            (snap, Some((ns, name)))
        }
        None => {
            let exact = q.resource_version_match.as_deref() == Some("Exact");
            match rv_param {
                Some(r) if exact => {
                    let rv = parse_rv(r)?;
                    let snap = core
                        .store
                        .list_at(&rt.storage, namespace, rv)
                        .map_err(|e| {
                            ApiError::expired(format!(
                                "too old resource version: {} ({})",
                                e.requested, e.oldest
                            ))
                        })?;
                    (snap, None)
                }
                Some(r) if r != "0" => {
                    let rv = parse_rv(r)?;
                    if rv > core.store.current_rv() {
                        return Err(ApiError::timeout(format!(
                            "Too large resource version: {rv}, current: {}",
                            core.store.current_rv()
                        )));
                    }
                    (core.store.list(&rt.storage, namespace), None)
                }
                _ => (core.store.list(&rt.storage, namespace), None),
            }
        }
    };
    let snapshot_rv = snapshot.rv;
    let mut matching = snapshot.objects.into_iter().filter(|o| {
        let after = match &start_after {
            Some((ns, name)) => (meta::namespace(o), meta::name(o)) > (ns.as_str(), name.as_str()),
            None => true,
        };
        after && q.labels.matches(o) && q.fields.matches(o)
    });
    let mut items = Vec::new();
    let limit = q.limit.filter(|l| *l > 0);
    let mut continue_token = None;
    let mut remaining = None;
    for o in matching.by_ref() {
        if let Some(l) = limit
            && items.len() == l
        {
            let last: &Value = items.last().unwrap_or(o.as_ref());
            continue_token = Some(encode_token(
                snapshot_rv,
                meta::namespace(last),
                meta::name(last),
            ));
            let rest = 1 + matching.count() as u64;
            if q.labels.is_empty() && q.fields.is_empty() {
                remaining = Some(rest);
            }
            break;
        }
        items.push(o.as_ref().clone());
    }
    // `items.last()` above refers to stored form; view conversion happens after paging.
    let items = items.iter().map(|o| views::to_view(rt, o)).collect();
    Ok(Listed {
        items,
        resource_version: snapshot_rv,
        continue_token,
        remaining,
    })
}
