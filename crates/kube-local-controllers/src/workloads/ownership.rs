//! Controller references, and upstream's `ClaimObject` rules for the objects a selector-based controller manages:
//! it keeps what it controls and still selects, adopts orphans it selects, and releases what it controls but no
//! longer selects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use serde_json::{Value, json};

use super::disruption::selector_matches;

/// The owner reference a controller puts on what it manages (`controller` and `blockOwnerDeletion` set).
pub fn controller_ref(api_version: &str, kind: &str, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The UID of `meta`'s controller, if it has one.
pub fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// What a controller does with an object in its namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Controlled and selected: the controller's.
    Owned,
    /// An orphan the selector matches: the controller's once adopted.
    Adopt,
    /// Controlled but no longer selected: to be let go.
    Release,
    /// Someone else's, or nothing to do with the controller.
    Ignore,
}

/// A controller's view of itself for [`claim`].
pub struct Claimant<'a> {
    pub uid: &'a str,
    pub namespace: &'a str,
    pub selector: &'a LabelSelector,
    /// A controller being deleted neither adopts nor releases.
    pub deleting: bool,
}

/// Whether a selector selects anything at all: an empty one selects nothing for these controllers.
pub fn selects_something(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_some_and(|l| !l.is_empty())
        || selector
            .match_expressions
            .as_ref()
            .is_some_and(|e| !e.is_empty())
}

/// Upstream's `ClaimObject` decision for `meta`.
pub fn claim(who: &Claimant<'_>, meta: &ObjectMeta) -> Claim {
    let empty = std::collections::BTreeMap::new();
    let selected = selects_something(who.selector)
        && selector_matches(who.selector, meta.labels.as_ref().unwrap_or(&empty));
    match controller_uid(meta) {
        Some(uid) if uid != who.uid => Claim::Ignore,
        Some(_) if selected => Claim::Owned,
        Some(_) if who.deleting => Claim::Ignore,
        Some(_) => Claim::Release,
        None if who.deleting || !selected || meta.deletion_timestamp.is_some() => Claim::Ignore,
        None if meta.namespace.as_deref() != Some(who.namespace) => Claim::Ignore,
        None => Claim::Adopt,
    }
}

/// The merge patch that swaps `meta`'s owner references for `refs`, valid only against the object as read (its UID
/// and resourceVersion are preconditions, so an object that changed meanwhile is left for the next pass).
fn owner_patch(meta: &ObjectMeta, refs: Vec<OwnerReference>) -> Value {
    let refs = if refs.is_empty() {
        Value::Null
    } else {
        json!(refs)
    };
    json!({"metadata": {
        "ownerReferences": refs,
        "uid": meta.uid,
        "resourceVersion": meta.resource_version,
    }})
}

/// Makes `owner` the controller of the object `meta` describes; whether that worked.
pub async fn adopt<K>(api: &Api<K>, meta: &ObjectMeta, owner: OwnerReference) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut refs = meta.owner_references.clone().unwrap_or_default();
    refs.retain(|r| r.uid != owner.uid);
    refs.push(owner);
    set_owners(api, meta, refs, "adopting an orphan").await
}

/// Drops the owner reference to `owner_uid` from the object `meta` describes; whether that worked.
pub async fn release<K>(api: &Api<K>, meta: &ObjectMeta, owner_uid: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut refs = meta.owner_references.clone().unwrap_or_default();
    refs.retain(|r| r.uid != owner_uid);
    set_owners(api, meta, refs, "releasing an object").await
}

/// Writes `refs` as the owner references of the object `meta` describes.
async fn set_owners<K>(
    api: &Api<K>,
    meta: &ObjectMeta,
    refs: Vec<OwnerReference>,
    doing: &str,
) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = meta.name.as_deref().unwrap_or_default();
    match api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(owner_patch(meta, refs)),
        )
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(name, error = %e, "{doing}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(labels: &[(&str, &str)], controller: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some("x".into()),
            namespace: Some("ns".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            owner_references: controller.map(|uid| {
                vec![OwnerReference {
                    uid: uid.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn claims_as_upstream() {
        let selector = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: None,
        };
        let who = Claimant {
            uid: "me",
            namespace: "ns",
            selector: &selector,
            deleting: false,
        };
        assert_eq!(
            claim(&who, &meta(&[("app", "web")], Some("me"))),
            Claim::Owned
        );
        assert_eq!(
            claim(&who, &meta(&[("app", "db")], Some("me"))),
            Claim::Release
        );
        assert_eq!(claim(&who, &meta(&[("app", "web")], None)), Claim::Adopt);
        assert_eq!(
            claim(&who, &meta(&[("app", "web")], Some("other"))),
            Claim::Ignore
        );
        assert_eq!(claim(&who, &meta(&[("app", "db")], None)), Claim::Ignore);
        let deleting = Claimant {
            deleting: true,
            ..who
        };
        assert_eq!(
            claim(&deleting, &meta(&[("app", "web")], None)),
            Claim::Ignore
        );
        assert_eq!(
            claim(&deleting, &meta(&[("app", "db")], Some("me"))),
            Claim::Ignore
        );
    }
}
