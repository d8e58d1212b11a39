//! `etcdctl`, `move-leader` and `defrag`: etcd's own maintenance, run with
//! etcdctl inside member pods (see [`crate::etcd`]).

use dkv_api::DistributedKV;
use dkv_api::labels::RECONCILE_PAUSED;
use kube::ResourceExt;

use crate::client::{Target, is_paused};
use crate::error::{Error, Result};
use crate::etcd::{Etcdctl, parse_endpoint_status};

/// Runs etcdctl `args` in `member` (or the leader's pod, else any ready
/// member pod), output passed through; returns etcdctl's exit code.
pub async fn etcdctl(
    target: &Target,
    name: &str,
    member: Option<&str>,
    args: &[String],
) -> Result<i32> {
    let cluster = target.cluster(name).await?;
    let pod = match member {
        Some(member) => {
            let pods = crate::lookup::member_pods(target, name).await?;
            if !pods.iter().any(|p| p.name_any() == member) {
                return Err(not_a_member(target, &cluster, member));
            }
            member.to_owned()
        }
        None => crate::lookup::pick_pod(target, &cluster).await?,
    };
    let etcdctl = Etcdctl::new(target, &cluster).await?;
    // The pod's own member by default; an `--endpoints` among `args` comes
    // later and wins.
    let mut with_endpoint = vec![format!("--endpoints={}", etcdctl.endpoint(&pod))];
    with_endpoint.extend(args.iter().cloned());
    etcdctl.passthrough(&pod, &with_endpoint).await
}

/// Hands leadership to `to`, through the current leader.
pub async fn move_leader(target: &Target, name: &str, to: &str) -> Result<()> {
    let cluster = target.cluster(name).await?;
    refuse_paused(target, &cluster, "move leadership")?;
    let status = cluster.status.clone().unwrap_or_default();
    let member = status
        .members
        .iter()
        .find(|m| m.name == to && !m.learner)
        .ok_or_else(|| not_a_member(target, &cluster, to))?;
    let leader = status.leader.clone().ok_or_else(|| {
        Error::Refused(format!(
            "DistributedKV {}/{name} reports no leader: wait until it has one (kubectl dkv status {name})",
            target.namespace
        ))
    })?;
    if leader == to {
        println!("{to} already leads {}/{name}", target.namespace);
        return Ok(());
    }
    let id = member.id.clone().ok_or_else(|| {
        Error::Refused(format!(
            "the operator has not recorded {to}'s member ID yet; try again shortly"
        ))
    })?;
    let etcdctl = Etcdctl::new(target, &cluster).await?;
    etcdctl
        .output(
            &leader,
            &[
                format!("--endpoints={}", etcdctl.endpoint(&leader)),
                "move-leader".to_owned(),
                id,
            ],
        )
        .await?
        .success(&format!("moving leadership from {leader} to {to}"))?;
    println!(
        "leadership of {}/{name} moved from {leader} to {to}",
        target.namespace
    );
    Ok(())
}

/// Defragments each member in turn, followers first, the leader last, only
/// while every member is healthy.
pub async fn defrag(target: &Target, name: &str) -> Result<()> {
    let cluster = target.cluster(name).await?;
    refuse_paused(target, &cluster, "defragment")?;
    let status = cluster.status.clone().unwrap_or_default();
    let voters = status.members.iter().filter(|m| !m.learner).count();
    let healthy = status.members.iter().all(|m| m.healthy);
    if !healthy || status.ready_replicas < cluster.spec.size || voters == 0 {
        return Err(Error::Refused(format!(
            "DistributedKV {}/{name} is not healthy ({}/{} members ready): defragmentation blocks each member in turn, so it runs only on a healthy cluster",
            target.namespace, status.ready_replicas, cluster.spec.size
        )));
    }
    let leader = status.leader.clone().unwrap_or_default();
    let mut order: Vec<String> = status.members.iter().map(|m| m.name.clone()).collect();
    order.sort_by_key(|m| (*m == leader, m.clone()));
    let etcdctl = Etcdctl::new(target, &cluster).await?;
    for member in &order {
        let endpoint = format!("--endpoints={}", etcdctl.endpoint(member));
        let size = async |when: &str| -> Result<i64> {
            let out = etcdctl
                .output(
                    member,
                    &[
                        endpoint.clone(),
                        "endpoint".into(),
                        "status".into(),
                        "-w".into(),
                        "json".into(),
                    ],
                )
                .await?
                .success(&format!("reading {member}'s status {when} defragmenting"))?;
            Ok(parse_endpoint_status(&out.stdout())?
                .first()
                .map_or(0, |s| s.status.db_size))
        };
        let before = size("before").await?;
        etcdctl
            .output(
                member,
                &[
                    endpoint.clone(),
                    "defrag".into(),
                    "--command-timeout=5m".into(),
                ],
            )
            .await?
            .success(&format!("defragmenting {member}"))?;
        let after = size("after").await?;
        println!(
            "{member}{}: {} -> {}",
            if *member == leader { " (leader)" } else { "" },
            dkv_readouts::size::binary(before),
            dkv_readouts::size::binary(after)
        );
    }
    Ok(())
}

fn refuse_paused(target: &Target, cluster: &DistributedKV, what: &str) -> Result<()> {
    if is_paused(cluster) {
        let name = cluster.name_any();
        return Err(Error::Refused(format!(
            "DistributedKV {}/{name} is paused ({RECONCILE_PAUSED}=true): not going to {what} while someone works on it by hand; run `kubectl dkv resume {name}` first",
            target.namespace
        )));
    }
    Ok(())
}

fn not_a_member(target: &Target, cluster: &DistributedKV, member: &str) -> Error {
    let members: Vec<String> = cluster
        .status
        .iter()
        .flat_map(|s| &s.members)
        .filter(|m| !m.learner)
        .map(|m| m.name.clone())
        .collect();
    Error::Refused(format!(
        "{member} is not a voting member of {}/{} (members: {})",
        target.namespace,
        cluster.name_any(),
        if members.is_empty() {
            "none yet".to_owned()
        } else {
            members.join(", ")
        }
    ))
}
