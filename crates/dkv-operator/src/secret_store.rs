//! Object store settings from a credentials Secret: the keys a backup
//! Job gets as its environment (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`,
//! ...), read by the operator when it reaches a store itself (retention,
//! continuous backup, restore planning).

use std::collections::HashMap;

use dkv_backup::StoreConfig;
use k8s_openapi::api::core::v1::Secret;

/// The store settings a backup Job gets from `secret` as its environment.
pub fn store_config(secret: &Secret) -> StoreConfig {
    let values: HashMap<&str, String> = secret
        .data
        .iter()
        .flatten()
        .filter_map(|(key, value)| {
            String::from_utf8(value.0.clone())
                .ok()
                .map(|v| (key.as_str(), v))
        })
        .collect();
    StoreConfig::from_lookup(|name| values.get(name).cloned())
}
