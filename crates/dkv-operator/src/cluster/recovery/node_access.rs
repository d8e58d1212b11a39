//! Whether the operator may watch Nodes. Member placement (node and zone in
//! status) and lost-node detection read them; an install whose RBAC leaves
//! Nodes out (a hardened platform, or a ClusterRole from before dkv read
//! them) must still run its clusters, without those two, rather than wait
//! forever for a Node cache that can never fill.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use tracing::{debug, warn};

/// Asks the API server (SelfSubjectAccessReview, which every authenticated
/// identity may create) whether this identity may list and watch Nodes.
/// An answer that cannot be had counts as yes: the watch then retries as
/// every other watch does.
pub async fn may_watch_nodes(client: &Client) -> bool {
    for verb in ["list", "watch"] {
        match allowed(client, verb).await {
            Ok(true) => {}
            Ok(false) => {
                warn!(
                    verb,
                    "this operator may not {verb} nodes: members' nodes and zones are not shown and lost nodes are \
                     neither reported nor replaced; grant nodes get/list/watch (deploy/rbac/cluster_role.yaml) and \
                     restart the operator"
                );
                return false;
            }
            Err(e) => {
                debug!(error = %e, verb, "could not ask whether nodes may be watched; watching them");
                return true;
            }
        }
    }
    true
}

async fn allowed(client: &Client, verb: &str) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_owned()),
                resource: Some("nodes".to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}
