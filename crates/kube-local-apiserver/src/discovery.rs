//! API discovery: legacy `/api`, `/apis`, group and group-version documents, aggregated discovery
//! (apidiscovery.k8s.io/v2), and `/version`.

use std::cmp::Ordering;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::registry::{Registry, ResourceType};

/// The Kubernetes release this server answers as (`/version`, the OpenAPI documents' `info`).
pub const KUBERNETES_VERSION: &str = "v1.32.0";

/// The `/version` document.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "32", "gitVersion": KUBERNETES_VERSION, "gitCommit": "kube-local", "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc", "platform": "linux/amd64"
    })
}

pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the client asked for aggregated discovery (first acceptable media type wins).
pub fn wants_aggregated(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    for media in accept.split(',') {
        let m = media.replace(' ', "");
        if m.contains("as=APIGroupDiscoveryList") {
            if m.contains("g=apidiscovery.k8s.io") && m.contains("v=v2") && !m.contains("v=v2beta1")
            {
                return true;
            }
            continue;
        }
        if m.starts_with("application/json") || m.starts_with("*/*") {
            return false;
        }
    }
    false
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first.
fn version_key(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    for (prefix, rank) in [("beta", 2u8), ("alpha", 1u8)] {
        if let Some(n) = tail.strip_prefix(prefix) {
            return (rank, major, n.parse().unwrap_or(0));
        }
    }
    (0, major, 0)
}

fn sort_versions(versions: &mut [String]) {
    versions.sort_by(|a, b| match version_key(b).cmp(&version_key(a)) {
        Ordering::Equal => a.cmp(b),
        o => o,
    });
}

/// Groups (excluding core) with their versions, preferred first, in registration order.
fn groups(reg: &Registry) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for (g, v) in reg.group_versions() {
        if g.is_empty() {
            continue;
        }
        match out.iter_mut().find(|(name, _)| *name == g) {
            Some((_, vs)) => vs.push(v),
            None => out.push((g, vec![v])),
        }
    }
    for (_, vs) in &mut out {
        sort_versions(vs);
    }
    out
}

fn gv(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

pub fn api_versions(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": gv(name, v), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

pub fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = groups(reg).iter().map(|(g, vs)| group_doc(g, vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    groups(reg)
        .into_iter()
        .find(|(g, _)| g == group)
        .map(|(g, vs)| {
            let mut doc = group_doc(&g, &vs);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            doc
        })
}

/// Namespaces, which have the `finalize` subresource.
fn is_namespaces(t: &ResourceType) -> bool {
    t.group.is_empty() && t.plural == "namespaces"
}

fn types_in(reg: &Registry, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
    reg.all()
        .into_iter()
        .filter(|t| t.group == group && t.version == version)
        .collect()
}

pub fn api_resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = types_in(reg, group, version);
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for t in &types {
        let mut r = json!({
            "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind,
            "verbs": t.verbs(),
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        resources.push(r);
        if t.has_log() {
            resources.push(json!({"name": format!("{}/attach", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": "PodAttachOptions", "verbs": ["create", "get"]}));
            resources.push(json!({"name": format!("{}/ephemeralcontainers", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"]}));
            resources.push(json!({"name": format!("{}/eviction", t.plural), "singularName": "", "namespaced": t.namespaced, "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}));
            resources.push(json!({"name": format!("{}/exec", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": "PodExecOptions", "verbs": ["create", "get"]}));
            resources.push(json!({"name": format!("{}/log", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get"]}));
            resources.push(json!({"name": format!("{}/portforward", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": "PodPortForwardOptions", "verbs": ["create", "get"]}));
        }
        if is_namespaces(t) {
            resources.push(json!({"name": "namespaces/finalize", "singularName": "", "namespaced": false, "kind": "Namespace", "verbs": ["update"]}));
        }
        if t.has_token() {
            resources.push(json!({"name": format!("{}/token", t.plural), "singularName": "", "namespaced": t.namespaced, "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]}));
        }
        if t.status {
            resources.push(json!({"name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"]}));
        }
        if t.has_approval() {
            resources.push(json!({"name": format!("{}/approval", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"]}));
        }
        if t.scale.is_some() {
            resources.push(json!({"name": format!("{}/scale", t.plural), "singularName": "", "namespaced": t.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
        }
    }
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv(group, version), "resources": resources}),
    )
}

fn aggregated_resource(t: &ResourceType) -> Value {
    let mut r = json!({
        "resource": t.plural,
        "responseKind": {"group": t.group, "version": t.version, "kind": t.kind},
        "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": t.singular,
        "verbs": t.verbs(),
    });
    if !t.short_names.is_empty() {
        r["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        r["categories"] = json!(t.categories);
    }
    let mut subs = Vec::new();
    if t.has_log() {
        subs.push(json!({"subresource": "attach", "responseKind": {"group": "", "version": "v1", "kind": "PodAttachOptions"}, "verbs": ["create", "get"]}));
        subs.push(json!({"subresource": "ephemeralcontainers", "responseKind": {"group": t.group, "version": t.version, "kind": t.kind}, "verbs": ["get", "patch", "update"]}));
        subs.push(json!({"subresource": "eviction", "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"}, "verbs": ["create"]}));
        subs.push(json!({"subresource": "exec", "responseKind": {"group": "", "version": "v1", "kind": "PodExecOptions"}, "verbs": ["create", "get"]}));
        subs.push(json!({"subresource": "log", "responseKind": {"group": t.group, "version": t.version, "kind": t.kind}, "verbs": ["get"]}));
        subs.push(json!({"subresource": "portforward", "responseKind": {"group": "", "version": "v1", "kind": "PodPortForwardOptions"}, "verbs": ["create", "get"]}));
    }
    if is_namespaces(t) {
        subs.push(json!({"subresource": "finalize", "responseKind": {"group": "", "version": "v1", "kind": "Namespace"}, "verbs": ["update"]}));
    }
    if t.has_token() {
        subs.push(json!({"subresource": "token", "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"}, "verbs": ["create"]}));
    }
    if t.status {
        subs.push(json!({"subresource": "status", "responseKind": {"group": t.group, "version": t.version, "kind": t.kind}, "verbs": ["get", "patch", "update"]}));
    }
    if t.has_approval() {
        subs.push(json!({"subresource": "approval", "responseKind": {"group": t.group, "version": t.version, "kind": t.kind}, "verbs": ["get", "patch", "update"]}));
    }
    if t.scale.is_some() {
        subs.push(json!({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": ["get", "patch", "update"]}));
    }
    if !subs.is_empty() {
        r["subresources"] = json!(subs);
    }
    r
}

fn aggregated_group(reg: &Registry, name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = types_in(reg, name, v)
                .iter()
                .map(|t| aggregated_resource(t))
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": name, "creationTimestamp": null}, "versions": vs})
}

/// `/api` (core only) or `/apis` (all named groups) as an APIGroupDiscoveryList.
pub fn aggregated(reg: &Registry, core: bool) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(reg, "", &["v1".to_string()])]
    } else {
        groups(reg)
            .iter()
            .map(|(g, vs)| aggregated_group(reg, g, vs))
            .collect()
    };
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_priority() {
        let mut vs: Vec<String> = ["v1alpha1", "v1", "v2beta1", "v1beta2", "v2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        sort_versions(&mut vs);
        assert_eq!(vs, vec!["v2", "v1", "v2beta1", "v1beta2", "v1alpha1"]);
    }

    #[test]
    fn kubectl_accept_prefers_aggregated() {
        assert!(wants_aggregated(Some(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
        )));
        assert!(!wants_aggregated(Some("application/json")));
    }
}
