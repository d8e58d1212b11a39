//! What the authorizer decided, kept for tests: every refused request, and
//! per user the distinct allowed requests with the grant that allowed them
//! (so a test can report RBAC rules that nothing used).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use super::rbac::{Grant, Request, UserInfo};

/// A request the authorizer refused (answered 403).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ForbiddenRequest {
    pub user: String,
    pub verb: String,
    /// API group of a resource request (empty for the core group).
    pub group: String,
    /// Resource of a resource request, empty for a non-resource request.
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The path of a non-resource request (e.g. `/metrics`), empty for a resource request.
    pub path: String,
}

/// The kind of request a user was allowed to make, and what allowed it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AllowedRequest {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    /// The path of a non-resource request, empty for a resource request.
    pub path: String,
    /// The binding, role and rule that allowed it; `None` for `system:masters`.
    pub grant: Option<Grant>,
}

/// Refused requests in order, and allowed ones per user (deduplicated).
#[derive(Debug, Default)]
pub struct AccessLog {
    forbidden: Mutex<Vec<ForbiddenRequest>>,
    allowed: Mutex<BTreeMap<String, BTreeSet<AllowedRequest>>>,
}

fn parts(request: &Request) -> (String, String, String, String, String, String, String) {
    match request {
        Request::Resource {
            namespace,
            verb,
            group,
            resource,
            subresource,
            name,
        } => (
            verb.clone(),
            group.clone(),
            resource.clone(),
            subresource.clone(),
            namespace.clone(),
            name.clone(),
            String::new(),
        ),
        Request::NonResource { path, verb } => (
            verb.clone(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            path.clone(),
        ),
    }
}

impl AccessLog {
    pub fn record_forbidden(&self, user: &UserInfo, request: &Request) {
        let (verb, group, resource, subresource, namespace, name, path) = parts(request);
        let entry = ForbiddenRequest {
            user: user.name.clone(),
            verb,
            group,
            resource,
            subresource,
            namespace,
            name,
            path,
        };
        if let Ok(mut log) = self.forbidden.lock() {
            log.push(entry);
        }
    }

    pub fn record_allowed(&self, user: &UserInfo, request: &Request, grant: Option<Grant>) {
        let (verb, group, resource, subresource, namespace, _name, path) = parts(request);
        let entry = AllowedRequest {
            verb,
            group,
            resource,
            subresource,
            namespace,
            path,
            grant,
        };
        if let Ok(mut log) = self.allowed.lock() {
            log.entry(user.name.clone()).or_default().insert(entry);
        }
    }

    /// The refused requests so far, oldest first.
    pub fn forbidden(&self) -> Vec<ForbiddenRequest> {
        self.forbidden.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The distinct allowed requests so far, per user name.
    pub fn allowed(&self) -> BTreeMap<String, BTreeSet<AllowedRequest>> {
        self.allowed.lock().map(|l| l.clone()).unwrap_or_default()
    }
}
