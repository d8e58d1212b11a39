//! Stage 2, validated: the spec checked and typed ([`super::super::validate`],
//! pure), then what was observed read through it — which pods are members
//! and how to reach them, where the member volumes stand, where each member
//! runs and which members' nodes are lost.

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::OperationKind;
use kube::runtime::reflector::ObjectRef;

use crate::cluster::context::Context;
use crate::cluster::dereference::Observed;
use crate::cluster::error::Result;
use crate::cluster::maintenance::volumes::{self, Volumes};
use crate::cluster::membership;
use crate::cluster::membership::observe::{self, MemberPod};
use crate::cluster::recovery::lost_node::{self, LostMember, Placement};
use crate::cluster::validate::{self, ValidatedCluster};
use crate::parts::naming;

/// The validated spec and the members as it reads them.
pub struct Validated {
    pub cluster: ValidatedCluster,
    /// The member pods.
    pub pods: Vec<MemberPod>,
    /// Where the member volumes stand against `spec.storage.size`.
    pub volumes: Volumes,
    /// Where each member pod runs (node and zone).
    pub placements: Vec<Placement>,
    /// The members whose node is lost.
    pub lost: Vec<LostMember>,
    /// What the planner needs of the members to move off their node.
    pub stranded: Vec<membership::Stranded>,
}

impl Validated {
    /// The endpoints of the member pods that have one.
    pub fn endpoints(&self) -> Vec<String> {
        self.pods
            .iter()
            .filter_map(|p| p.endpoint.clone())
            .collect()
    }
}

/// Validates `dkv`'s spec, then reads the members of `observed` through it.
/// The last stage that reads `dkv`.
pub async fn validated(
    dkv: &DistributedKV,
    observed: &Observed,
    now: jiff::Timestamp,
    ctx: &Context,
) -> Result<Validated> {
    let cluster = validate::validate(dkv, &observed.facts, &ctx.defaults)?;
    let pods = observe::member_pods(
        &cluster.name,
        &observed.pods,
        observed.recorded.recovery_epoch().as_deref(),
        observed.recorded.replacement().as_deref(),
        cluster.tls.client_scheme(),
    );
    let volumes = volumes::observe(&cluster, &observed.claims);
    let nodes = lost_nodes(&cluster, observed, now, ctx).await?;
    Ok(Validated {
        cluster,
        pods,
        volumes,
        placements: nodes.placements,
        lost: nodes.lost,
        stranded: nodes.stranded,
    })
}

/// What a pass observed of its members' nodes.
struct LostNodes {
    placements: Vec<Placement>,
    lost: Vec<LostMember>,
    stranded: Vec<membership::Stranded>,
}

/// Where each member pod runs, which members' nodes are lost, and what the
/// planner needs of the members to move off their node: the facts of their
/// pods and volumes are read only with `spec.recovery.lostNode: Replace` or
/// while a relocation is pinned.
async fn lost_nodes(
    cluster: &ValidatedCluster,
    observed: &Observed,
    now: jiff::Timestamp,
    ctx: &Context,
) -> Result<LostNodes> {
    let mut placements = lost_node::placements(&cluster.name, &observed.pods, |node| {
        ctx.stores
            .nodes
            .as_ref()
            .and_then(|nodes| nodes.get(&ObjectRef::new(node)))
    });
    if ctx.stores.nodes.is_none() {
        // Nodes are not watched: a node missing from no cache is not gone.
        for placement in &mut placements {
            placement.loss = None;
        }
    }
    let lost = lost_node::lost_members(&cluster.name, &placements, &observed.recorded.members, now);
    let policy = lost_node::replace_policy(cluster.lost_node.as_ref());
    let relocating = observed
        .recorded
        .operation
        .as_ref()
        .filter(|op| op.kind == OperationKind::RelocateMember)
        .and_then(|op| {
            Some((
                naming::ordinal_of(&cluster.name, &op.target)?,
                op.started_at.0,
            ))
        });
    if policy.is_none() && relocating.is_none() {
        let stranded = lost_node::stranded(&lost, None, None, |_| None, now);
        return Ok(LostNodes {
            placements,
            lost,
            stranded,
        });
    }
    let mut facts = std::collections::BTreeMap::new();
    for ordinal in lost
        .iter()
        .map(|l| l.ordinal)
        .chain(relocating.map(|(ordinal, _)| ordinal))
    {
        let found = lost_node::pod_facts(
            &ctx.client,
            cluster,
            ordinal,
            &observed.pods,
            &observed.claims,
        )
        .await?;
        facts.insert(ordinal, found);
    }
    let stranded = lost_node::stranded(
        &lost,
        policy,
        relocating,
        |ordinal| facts.get(&ordinal).cloned().flatten(),
        now,
    );
    Ok(LostNodes {
        placements,
        lost,
        stranded,
    })
}
