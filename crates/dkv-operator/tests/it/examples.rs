//! Every `DistributedKV` in examples/ is one the operator accepts as it is:
//! it parses as v1beta1 and validation (the webhook's and the controller's
//! checks) finds nothing to refuse. The demo and the tests apply some of the
//! examples on kube-local; this keeps the others from going stale.

use dkv_api::DistributedKV;
use dkv_operator::cluster::validate::{Defaults, Facts, spec_problems};

use dkv_test_support as support;

#[test]
fn every_example_cluster_validates() {
    let dir = support::repo_root().join("examples");
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in text.split("\n---\n") {
            let value: serde_json::Value =
                serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if value["kind"] != "DistributedKV" {
                continue;
            }
            let dkv: DistributedKV =
                serde_json::from_value(value).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let facts = Facts {
                storage_classes: Some(vec!["standard".into()]),
                running: Default::default(),
                deployed_storage_size: None,
                volume_capacity: None,
            };
            let defaults = Defaults {
                operator_image: "ghcr.io/dkv-io/dkv:test".to_owned(),
            };
            let problems = spec_problems(&dkv, &facts, &defaults);
            assert!(problems.is_empty(), "{}: {problems:?}", path.display());
            checked.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    checked.sort();
    assert!(
        checked.contains(&"distributedkv-continuous.yaml".to_owned())
            && checked.contains(&"restore-point-in-time.yaml".to_owned()),
        "{checked:?}"
    );
    println!("validated: {checked:?}");
}
