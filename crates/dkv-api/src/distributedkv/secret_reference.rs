//! A reference to a Secret, shared by both API versions and every part of
//! the spec that names one.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Secret in the cluster's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}
