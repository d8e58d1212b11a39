//! How the member starts, from its volume and the membership record: restart, bootstrap or join, or a refusal that
//! says why not (see the rules in the module above).

use crate::message::InitMessage;
use crate::naming::{self, PEER_PORT};
use crate::record::{ClusterState, MembershipRecord};

use super::recoveries::RESTORE_EPOCH_PREFIX;
use super::{MemberInitArgs, scheme};

/// How this member starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Restart from the data in the volume.
    Restart { initial_cluster: String },
    /// Bootstrap a new cluster together with the other initial members.
    Bootstrap { initial_cluster: String },
    /// Join the existing cluster, which already lists this member.
    Join { initial_cluster: String },
}

/// Why this member must not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{}", InitMessage::data_lost(.0))]
    DataLost(String),
    #[error(
        "member {0} is not in the cluster's membership record yet; it starts once the operator has added it"
    )]
    NotListed(String),
    #[error(
        "member {name} has no data and is not one of the {bootstrap_size} initial members; it can only join through a membership change"
    )]
    OutsideBootstrapSet { name: String, bootstrap_size: i32 },
    #[error(
        "member {0} has no data while the cluster is being recreated from a backup; it starts once its restore steps have run"
    )]
    AwaitingRestore(String),
    #[error("the record lists {name} with peer URL {recorded}, but this pod advertises {actual}")]
    PeerUrlMismatch {
        name: String,
        recorded: String,
        actual: String,
    },
}

fn own_peer_url(args: &MemberInitArgs) -> String {
    format!(
        "{}://{}.{}.{}.svc:{PEER_PORT}",
        scheme(args.peer_tls),
        args.member,
        args.peer_service,
        args.namespace
    )
}

/// The legacy initial set: members `0..bootstrap_size`.
fn bootstrap_set(args: &MemberInitArgs) -> String {
    (0..args.bootstrap_size)
        .map(|i| {
            let member = naming::member(&args.cluster, i);
            format!(
                "{member}={}://{member}.{}.{}.svc:{PEER_PORT}",
                scheme(args.peer_tls),
                args.peer_service,
                args.namespace
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Decides how this member starts (see the module documentation).
pub fn decide(
    args: &MemberInitArgs,
    has_data: bool,
    record: Option<&MembershipRecord>,
) -> Result<Start, Refusal> {
    let name = args.member.clone();
    let Some(record) = record else {
        let ordinal = naming::ordinal_of(&args.cluster, &name).unwrap_or(i32::MAX);
        return if has_data {
            Ok(Start::Restart {
                initial_cluster: bootstrap_set(args),
            })
        } else if ordinal < args.bootstrap_size {
            Ok(Start::Bootstrap {
                initial_cluster: bootstrap_set(args),
            })
        } else {
            Err(Refusal::OutsideBootstrapSet {
                name,
                bootstrap_size: args.bootstrap_size,
            })
        };
    };
    if has_data {
        return Ok(Start::Restart {
            initial_cluster: record.initial_cluster(),
        });
    }
    let Some(entry) = record.member(&name) else {
        return Err(Refusal::NotListed(name));
    };
    let actual = own_peer_url(args);
    if entry.peer_url != actual {
        return Err(Refusal::PeerUrlMismatch {
            name,
            recorded: entry.peer_url.clone(),
            actual,
        });
    }
    if entry.started {
        return Err(Refusal::DataLost(name));
    }
    if record.state == ClusterState::New
        && record
            .epoch
            .as_deref()
            .is_some_and(|e| e.starts_with(RESTORE_EPOCH_PREFIX))
    {
        // Never bootstrap an empty member into a cluster that is being
        // recreated from a backup.
        return Err(Refusal::AwaitingRestore(name));
    }
    let initial_cluster = record.initial_cluster();
    Ok(match record.state {
        ClusterState::New => Start::Bootstrap { initial_cluster },
        ClusterState::Existing => Start::Join { initial_cluster },
    })
}
