//! Prints the child objects dkv would create for a DistributedKV manifest,
//! without a cluster: `cargo run -p dkv-operator --example plan -- FILE`.
//!
//! Runs the operator's own validate → plan → build steps, so the output is
//! exactly what a reconcile would apply to a new cluster.

use anyhow::{Context as _, bail};
use dkv_api::DistributedKV;
use dkv_operator::cluster::validate::{Defaults, Facts};
use dkv_operator::cluster::{build, plan, validate};

fn main() -> anyhow::Result<()> {
    let Some(path) = std::env::args().nth(1) else {
        bail!("usage: plan FILE.yaml");
    };
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let mut dkv: DistributedKV =
        serde_saphyr::from_str(&text).with_context(|| format!("parsing {path}"))?;
    // A manifest has no uid yet; the API server would assign one.
    dkv.metadata.uid = Some("00000000-0000-4000-8000-000000000000".into());
    dkv.metadata.generation = Some(1);

    let cluster = validate::validate(
        &dkv,
        &Facts::default(),
        &Defaults {
            operator_image: dkv_operator::operator::DEFAULT_IMAGE.to_owned(),
        },
    )
    .map_err(|invalid| anyhow::anyhow!("invalid DistributedKV: {invalid}"))?;
    let plan = plan::plan(&cluster, None, None, &Default::default());
    let prepared = build::build(&cluster, &plan);

    let sts = &prepared.statefulset;
    println!(
        "   StatefulSet/{}: {} members, etcd {}, podManagementPolicy {}, updateStrategy {}",
        sts.metadata.name.as_deref().unwrap_or_default(),
        plan.replicas,
        cluster.version,
        sts.spec
            .pod_management_policy
            .as_deref()
            .unwrap_or_default(),
        sts.spec
            .update_strategy
            .as_ref()
            .and_then(|u| u.type_.as_deref())
            .unwrap_or_default(),
    );
    for svc in [
        Some(&prepared.peer_service),
        prepared.client_service.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        let spec = svc.spec.clone().unwrap_or_default();
        println!(
            "   Service/{}: clusterIP {}, ports {:?}",
            svc.metadata.name.as_deref().unwrap_or_default(),
            spec.cluster_ip.as_deref().unwrap_or("(assigned)"),
            spec.ports
                .iter()
                .flatten()
                .map(|p| p.port)
                .collect::<Vec<_>>()
        );
    }
    let pdb = prepared.pdb.spec.clone().unwrap_or_default();
    println!(
        "   PodDisruptionBudget/{}: minAvailable {:?} (quorum)",
        prepared.pdb.metadata.name.as_deref().unwrap_or_default(),
        pdb.min_available
    );
    match &prepared.backup_cronjob {
        Some(cj) => println!(
            "   CronJob/{}: schedule {:?}",
            cj.metadata.name.as_deref().unwrap_or_default(),
            cj.spec.schedule
        ),
        None => println!("   (no backup CronJob: spec.backup is not set)"),
    }
    println!(
        "   initial cluster: {}",
        dkv_operator::parts::naming::initial_cluster(
            cluster.tls.peer_scheme(),
            &cluster.name,
            &cluster.namespace,
            plan.bootstrap_size
        )
    );
    Ok(())
}
