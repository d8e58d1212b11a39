//! The RBAC authorizer: decides a SubjectAccessReview from the Roles,
//! ClusterRoles and their bindings stored in this server, as upstream's RBAC
//! authorizer does (plus the `system:masters` group, which upstream's
//! authorizer chain allows everything before RBAC is asked).
//!
//! Not modelled: aggregated ClusterRoles (`aggregationRule`; upstream a
//! controller copies the selected roles' rules in, here the rules written are
//! the rules used) and authorizers other than RBAC (Node, webhooks).

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use serde::de::DeserializeOwned;

use crate::core::Core;
use crate::registry::StorageResource;
use crate::store::ObjectKey;

const GROUP: &str = "rbac.authorization.k8s.io";
/// Members of this group may do anything (upstream's privileged group).
const MASTERS: &str = "system:masters";

pub use kube_local_base::identity::UserInfo;

/// What is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Resource {
        namespace: String,
        verb: String,
        group: String,
        resource: String,
        subresource: String,
        name: String,
    },
    NonResource {
        path: String,
        verb: String,
    },
}

/// The answer: allowed, and by which binding (empty when denied: RBAC has no opinion then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
    /// The binding and rule that allowed the request (`None` when denied or for `system:masters`).
    pub grant: Option<Grant>,
}

/// Which rule of which role, through which binding, allowed a request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    /// `ClusterRoleBinding` or `RoleBinding`.
    pub binding_kind: String,
    /// The RoleBinding's namespace (empty for a ClusterRoleBinding).
    pub binding_namespace: String,
    pub binding_name: String,
    /// `ClusterRole` or `Role`.
    pub role_kind: String,
    pub role_name: String,
    /// Index of the rule in the role's `rules`.
    pub rule: usize,
}

fn matches_or_star(values: &[String], wanted: &str) -> bool {
    values.iter().any(|v| v == "*" || v == wanted)
}

/// Whether a rule's `nonResourceURLs` cover `path`: `*` covers all, `/prefix/*` covers what starts with `/prefix/`.
fn non_resource_url_matches(urls: &[String], path: &str) -> bool {
    urls.iter().any(|url| {
        url == "*"
            || url == path
            || url
                .strip_suffix('*')
                .is_some_and(|prefix| path.starts_with(prefix))
    })
}

/// Whether a rule's `resources` cover `resource[/subresource]`; `*/sub` covers that subresource of every resource.
fn resource_matches(resources: &[String], resource: &str, subresource: &str) -> bool {
    let combined = if subresource.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}/{subresource}")
    };
    resources.iter().any(|r| {
        r == "*"
            || *r == combined
            || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
    })
}

/// Whether `rule` allows `request`.
pub fn rule_allows(rule: &PolicyRule, request: &Request) -> bool {
    match request {
        Request::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let names = rule.resource_names.as_deref().unwrap_or_default();
            matches_or_star(&rule.verbs, verb)
                && matches_or_star(rule.api_groups.as_deref().unwrap_or_default(), group)
                && resource_matches(
                    rule.resources.as_deref().unwrap_or_default(),
                    resource,
                    subresource,
                )
                && (names.is_empty() || names.iter().any(|n| n == name))
        }
        Request::NonResource { path, verb } => {
            matches_or_star(&rule.verbs, verb)
                && non_resource_url_matches(
                    rule.non_resource_urls.as_deref().unwrap_or_default(),
                    path,
                )
        }
    }
}

/// Whether a binding's `subject` names `user`. A ServiceAccount subject without
/// a namespace means the binding's own (`binding_namespace`, empty for ClusterRoleBindings).
pub fn subject_applies(subject: &Subject, user: &UserInfo, binding_namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == user.name,
        "Group" => user.groups.contains(&subject.name),
        "ServiceAccount" => {
            let namespace = subject
                .namespace
                .as_deref()
                .filter(|ns| !ns.is_empty())
                .unwrap_or(binding_namespace);
            !namespace.is_empty()
                && user.name == format!("system:serviceaccount:{namespace}:{}", subject.name)
        }
        _ => false,
    }
}

fn describe_subject(subject: &Subject, binding_namespace: &str) -> String {
    match subject.kind.as_str() {
        "ServiceAccount" => {
            let namespace = subject.namespace.as_deref().unwrap_or(binding_namespace);
            format!("ServiceAccount \"{}/{namespace}\"", subject.name)
        }
        kind => format!("{kind} \"{}\"", subject.name),
    }
}

fn stored<T: DeserializeOwned>(core: &Core, resource: &str, namespace: Option<&str>) -> Vec<T> {
    let storage = StorageResource {
        group: GROUP.into(),
        resource: resource.into(),
    };
    core.store
        .list(&storage, namespace)
        .objects
        .iter()
        // An object the typed form cannot read grants nothing, as upstream.
        .filter_map(|o| serde_json::from_value(o.as_ref().clone()).ok())
        .collect()
}

/// The stored object `resource/name` of the RBAC group in `namespace` (empty: cluster-scoped), typed.
fn stored_one<T: DeserializeOwned>(
    core: &Core,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Option<T> {
    let key = ObjectKey {
        storage: StorageResource {
            group: GROUP.into(),
            resource: resource.into(),
        },
        namespace: namespace.into(),
        name: name.into(),
    };
    core.store
        .get(&key)
        .and_then(|o| serde_json::from_value(o.as_ref().clone()).ok())
}

/// The rules `role_ref` grants in `namespace` (a Role there, or a ClusterRole).
fn rules_of(core: &Core, role_ref: &RoleRef, namespace: &str) -> Vec<PolicyRule> {
    if role_ref.api_group.as_deref() != Some(GROUP) {
        return Vec::new();
    }
    match role_ref.kind.as_str() {
        "ClusterRole" => stored_one::<ClusterRole>(core, "clusterroles", "", &role_ref.name)
            .and_then(|r| r.rules)
            .unwrap_or_default(),
        "Role" if !namespace.is_empty() => {
            stored_one::<Role>(core, "roles", namespace, &role_ref.name)
                .and_then(|r| r.rules)
                .unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// Decides `request` for `user`: ClusterRoleBindings first, then, for a
/// namespaced resource request, the RoleBindings of that namespace.
pub fn authorize(core: &Core, user: &UserInfo, request: &Request) -> Decision {
    if user.groups.iter().any(|g| g == MASTERS) {
        return Decision {
            allowed: true,
            reason: format!("allowed: member of the privileged group {MASTERS:?}"),
            grant: None,
        };
    }
    let allowed_by = |role_ref: &RoleRef, namespace: &str| {
        rules_of(core, role_ref, namespace)
            .iter()
            .position(|rule| rule_allows(rule, request))
    };
    for binding in stored::<ClusterRoleBinding>(core, "clusterrolebindings", None) {
        if let Some(subject) = binding
            .subjects
            .iter()
            .flatten()
            .find(|s| subject_applies(s, user, ""))
            && binding.role_ref.kind == "ClusterRole"
            && let Some(rule) = allowed_by(&binding.role_ref, "")
        {
            let binding_name = binding.metadata.name.clone().unwrap_or_default();
            return Decision {
                allowed: true,
                reason: format!(
                    "RBAC: allowed by ClusterRoleBinding {:?} of ClusterRole {:?} to {}",
                    binding.metadata.name.as_deref().unwrap_or_default(),
                    binding.role_ref.name,
                    describe_subject(subject, "")
                ),
                grant: Some(Grant {
                    binding_kind: "ClusterRoleBinding".into(),
                    binding_namespace: String::new(),
                    binding_name,
                    role_kind: binding.role_ref.kind.clone(),
                    role_name: binding.role_ref.name.clone(),
                    rule,
                }),
            };
        }
    }
    if let Request::Resource { namespace, .. } = request
        && !namespace.is_empty()
    {
        for binding in stored::<RoleBinding>(core, "rolebindings", Some(namespace)) {
            if let Some(subject) = binding
                .subjects
                .iter()
                .flatten()
                .find(|s| subject_applies(s, user, namespace))
                && let Some(rule) = allowed_by(&binding.role_ref, namespace)
            {
                return Decision {
                    allowed: true,
                    reason: format!(
                        "RBAC: allowed by RoleBinding {:?} of {} {:?} to {}",
                        format!(
                            "{}/{namespace}",
                            binding.metadata.name.as_deref().unwrap_or_default()
                        ),
                        binding.role_ref.kind,
                        binding.role_ref.name,
                        describe_subject(subject, namespace)
                    ),
                    grant: Some(Grant {
                        binding_kind: "RoleBinding".into(),
                        binding_namespace: namespace.clone(),
                        binding_name: binding.metadata.name.clone().unwrap_or_default(),
                        role_kind: binding.role_ref.kind.clone(),
                        role_name: binding.role_ref.name.clone(),
                        rule,
                    }),
                };
            }
        }
    }
    Decision {
        allowed: false,
        reason: String::new(),
        grant: None,
    }
}

/// Every rule `user` holds in `namespace` (empty: cluster-wide only): the rules of the ClusterRoles bound by
/// ClusterRoleBindings, then of the roles bound by the namespace's RoleBindings (a SelfSubjectRulesReview).
pub fn rules_for(core: &Core, user: &UserInfo, namespace: &str) -> Vec<PolicyRule> {
    let mut rules = Vec::new();
    for binding in stored::<ClusterRoleBinding>(core, "clusterrolebindings", None) {
        if binding.role_ref.kind == "ClusterRole"
            && binding
                .subjects
                .iter()
                .flatten()
                .any(|s| subject_applies(s, user, ""))
        {
            rules.extend(rules_of(core, &binding.role_ref, ""));
        }
    }
    if !namespace.is_empty() {
        for binding in stored::<RoleBinding>(core, "rolebindings", Some(namespace)) {
            if binding
                .subjects
                .iter()
                .flatten()
                .any(|s| subject_applies(s, user, namespace))
            {
                rules.extend(rules_of(core, &binding.role_ref, namespace));
            }
        }
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    fn non_resource_rule(urls: &[&str], verbs: &[&str]) -> PolicyRule {
        PolicyRule {
            non_resource_urls: Some(strings(urls)),
            verbs: strings(verbs),
            ..PolicyRule::default()
        }
    }

    fn resource_rule(
        groups: &[&str],
        resources: &[&str],
        names: &[&str],
        verbs: &[&str],
    ) -> PolicyRule {
        PolicyRule {
            api_groups: Some(strings(groups)),
            resources: Some(strings(resources)),
            resource_names: (!names.is_empty()).then(|| strings(names)),
            verbs: strings(verbs),
            ..PolicyRule::default()
        }
    }

    fn get(path: &str) -> Request {
        Request::NonResource {
            path: path.into(),
            verb: "get".into(),
        }
    }

    fn resource(verb: &str, group: &str, resource: &str, subresource: &str, name: &str) -> Request {
        super::super::attributes::tests::resource(verb, group, resource, subresource, "ns", name)
    }

    #[test]
    fn non_resource_urls_match_exactly_by_prefix_star_or_star() {
        let metrics = non_resource_rule(&["/metrics"], &["get"]);
        assert!(rule_allows(&metrics, &get("/metrics")));
        assert!(!rule_allows(&metrics, &get("/metrics/extra")));
        assert!(!rule_allows(&metrics, &get("/healthz")));
        let prefix = non_resource_rule(&["/metrics/*"], &["get"]);
        assert!(rule_allows(&prefix, &get("/metrics/cadvisor")));
        assert!(!rule_allows(&prefix, &get("/metrics")));
        let trailing = non_resource_rule(&["/metrics*"], &["get"]);
        assert!(rule_allows(&trailing, &get("/metrics")));
        assert!(rule_allows(&trailing, &get("/metricsx")));
        let all = non_resource_rule(&["*"], &["get"]);
        assert!(rule_allows(&all, &get("/anything")));
    }

    #[test]
    fn verbs_must_match_or_be_star() {
        let metrics = non_resource_rule(&["/metrics"], &["get"]);
        let post = Request::NonResource {
            path: "/metrics".into(),
            verb: "post".into(),
        };
        assert!(!rule_allows(&metrics, &post));
        assert!(rule_allows(
            &non_resource_rule(&["/metrics"], &["*"]),
            &post
        ));
    }

    #[test]
    fn resource_rules_do_not_grant_non_resource_urls_and_back() {
        let pods = resource_rule(&[""], &["pods"], &[], &["*"]);
        assert!(!rule_allows(&pods, &get("/metrics")));
        let metrics = non_resource_rule(&["*"], &["*"]);
        assert!(!rule_allows(
            &metrics,
            &resource("get", "", "pods", "", "p")
        ));
    }

    #[test]
    fn resource_rules_match_group_resource_subresource_and_name() {
        let rule = resource_rule(&["apps"], &["deployments"], &[], &["get", "list"]);
        assert!(rule_allows(
            &rule,
            &resource("get", "apps", "deployments", "", "d")
        ));
        assert!(!rule_allows(
            &rule,
            &resource("get", "", "deployments", "", "d")
        ));
        assert!(!rule_allows(
            &rule,
            &resource("delete", "apps", "deployments", "", "d")
        ));
        // A subresource is its own resource to RBAC.
        assert!(!rule_allows(
            &rule,
            &resource("get", "apps", "deployments", "scale", "d")
        ));
        let scale = resource_rule(&["apps"], &["deployments/scale"], &[], &["get"]);
        assert!(rule_allows(
            &scale,
            &resource("get", "apps", "deployments", "scale", "d")
        ));
        let any_status = resource_rule(&["*"], &["*/status"], &[], &["get"]);
        assert!(rule_allows(
            &any_status,
            &resource("get", "apps", "deployments", "status", "d")
        ));
        assert!(!rule_allows(
            &any_status,
            &resource("get", "apps", "deployments", "", "d")
        ));
        let named = resource_rule(&[""], &["secrets"], &["tls"], &["get"]);
        assert!(rule_allows(
            &named,
            &resource("get", "", "secrets", "", "tls")
        ));
        assert!(!rule_allows(
            &named,
            &resource("get", "", "secrets", "", "other")
        ));
        let star = resource_rule(&["*"], &["*"], &[], &["*"]);
        assert!(rule_allows(
            &star,
            &resource("patch", "example.com", "widgets", "status", "x")
        ));
    }

    #[test]
    fn subjects_name_users_groups_and_service_accounts() {
        let user = UserInfo {
            name: "system:serviceaccount:monitoring:prometheus".into(),
            groups: strings(&["system:serviceaccounts", "system:authenticated"]),
        };
        let subject = |kind: &str, name: &str, ns: Option<&str>| Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: ns.map(str::to_owned),
            ..Subject::default()
        };
        assert!(subject_applies(
            &subject("ServiceAccount", "prometheus", Some("monitoring")),
            &user,
            ""
        ));
        assert!(!subject_applies(
            &subject("ServiceAccount", "prometheus", Some("other")),
            &user,
            ""
        ));
        // Without a namespace: the RoleBinding's own; a ClusterRoleBinding has none.
        assert!(subject_applies(
            &subject("ServiceAccount", "prometheus", None),
            &user,
            "monitoring"
        ));
        assert!(!subject_applies(
            &subject("ServiceAccount", "prometheus", None),
            &user,
            ""
        ));
        assert!(subject_applies(
            &subject("Group", "system:serviceaccounts", None),
            &user,
            ""
        ));
        assert!(!subject_applies(
            &subject("Group", "system:masters", None),
            &user,
            ""
        ));
        assert!(subject_applies(
            &subject("User", "system:serviceaccount:monitoring:prometheus", None),
            &user,
            ""
        ));
        assert!(!subject_applies(
            &subject("User", "prometheus", None),
            &user,
            ""
        ));
    }
}
