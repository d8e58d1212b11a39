//! What one pass of the reconcile reached: each stage's typed output (see
//! [`super::stage`]) and what the maintenance tasks did, kept by the driver
//! as each finishes. Status and the metrics are derived from it, however
//! the pass ended.

use std::sync::Arc;

use dkv_api::distributedkv::v1beta1::Operation;
use k8s_openapi::api::apps::v1::StatefulSet;

use super::dereference::Observed;
use super::stage::{applied, connected, executed, planned, validated};
use super::tasks::Maintained;
use crate::cluster::maintenance::volumes::Volumes;

/// What one pass reached: the output of every stage it finished, each
/// written once, by the driver, when its stage finished.
#[derive(Default)]
pub struct Pass {
    pub observed: Option<Observed>,
    pub validated: Option<validated::Validated>,
    pub connected: Option<connected::Connected>,
    /// While a running cluster is being adopted: what the adoption saw.
    pub adopting: Option<crate::cluster::adoption::drive::Adopting>,
    pub planned: Option<planned::Planned>,
    pub applied: Option<applied::Applied>,
    pub executed: Option<executed::Executed>,
    /// What the maintenance tasks did (each writes its own field).
    pub maintained: Maintained,
}

impl Pass {
    /// The StatefulSet as the pass last saw it: re-created by a step,
    /// applied, or as observed.
    pub fn statefulset(&self) -> Option<Arc<StatefulSet>> {
        self.maintained
            .statefulset
            .clone()
            .or_else(|| self.applied.as_ref().map(|a| a.statefulset.clone()))
            .or_else(|| self.observed.as_ref()?.statefulset.clone())
    }

    /// The operation pinned once the pass is over: as the executed step
    /// left it, as planned (a new pin), or as status recorded it.
    pub fn operation(&self) -> Option<Operation> {
        if let Some(executed) = &self.executed {
            return executed.operation.clone();
        }
        if let Some(planned) = &self.planned {
            return planned.operation.clone();
        }
        self.observed.as_ref()?.recorded.operation.clone()
    }

    /// Where the member volumes stand: as grown this pass, else as
    /// observed.
    pub fn volumes(&self) -> Option<&Volumes> {
        self.maintained
            .volumes
            .as_ref()
            .or_else(|| self.validated.as_ref().map(|v| &v.volumes))
    }

    /// The validated spec, if the pass got that far.
    pub fn cluster(&self) -> Option<&super::validate::ValidatedCluster> {
        self.validated.as_ref().map(|v| &v.cluster)
    }

    /// Whether the members are (to be) stopped for hibernation.
    pub fn hibernation(&self) -> crate::cluster::lifecycle::hibernation::State {
        self.planned
            .as_ref()
            .map(|p| p.hibernation.clone())
            .unwrap_or_default()
    }
}
