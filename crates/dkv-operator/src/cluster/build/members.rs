//! The ConfigMap carrying the membership record (see
//! [`dkv_member::record`]). Member pods mount it, and their
//! `member-init` decides from it how the member starts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::child_meta;
use crate::cluster::plan::Plan;
use crate::cluster::validate::ValidatedCluster;
use crate::parts::naming;
use dkv_member::record::RECORD_KEY;

pub fn build(cluster: &ValidatedCluster, plan: &Plan) -> ConfigMap {
    // Serialising a plain struct of strings and bools cannot fail; an empty
    // record would make every member refuse to start, never corrupt one.
    let record = serde_json::to_string_pretty(&plan.record).unwrap_or_default();
    ConfigMap {
        metadata: child_meta(
            cluster,
            naming::members_configmap(&cluster.name),
            "membership",
        ),
        data: Some(BTreeMap::from([(RECORD_KEY.to_owned(), record)])),
        ..ConfigMap::default()
    }
}
