//! Object store credentials, and the one rule about them: they never reach a
//! log line, an error message, an Event or a status field.
//!
//! A backup Job gets them as environment variables from the Secret named in
//! the cluster's spec (`envFrom`). The variable names are the ones each
//! cloud's own tools use:
//!
//! | store | variables |
//! |---|---|
//! | S3 and S3-compatible | `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optional `AWS_SESSION_TOKEN` |
//! | Google Cloud Storage | `GOOGLE_SERVICE_ACCOUNT_KEY` (the JSON key itself) or `GOOGLE_APPLICATION_CREDENTIALS` (path of a mounted key file) |
//! | Azure Blob Storage | `AZURE_STORAGE_ACCOUNT_NAME` with `AZURE_STORAGE_ACCOUNT_KEY` or `AZURE_STORAGE_SAS_TOKEN` |
//!
//! Non-secret S3 settings (`AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`)
//! live in [`crate::S3Options`]; the Azure and GCS endpoints
//! (`AZURE_STORAGE_ENDPOINT`, `STORAGE_EMULATOR_HOST`) in
//! [`crate::AzureOptions`] and [`crate::GcsOptions`]. Without any credentials the stores fall back
//! to their ambient identity (instance metadata, workload identity).

use std::fmt;
use std::path::PathBuf;

pub const AWS_ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
pub const AWS_SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
pub const AWS_SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";
pub const GOOGLE_SERVICE_ACCOUNT_KEY: &str = "GOOGLE_SERVICE_ACCOUNT_KEY";
pub const GOOGLE_APPLICATION_CREDENTIALS: &str = "GOOGLE_APPLICATION_CREDENTIALS";
pub const AZURE_STORAGE_ACCOUNT_NAME: &str = "AZURE_STORAGE_ACCOUNT_NAME";
pub const AZURE_STORAGE_ACCOUNT_KEY: &str = "AZURE_STORAGE_ACCOUNT_KEY";
pub const AZURE_STORAGE_SAS_TOKEN: &str = "AZURE_STORAGE_SAS_TOKEN";

/// A value that must not be printed. `Debug` shows `[redacted]`; there is
/// no `Display`, so it cannot end up in a `format!` by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for handing to the store client and nothing else.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// Static S3 credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    /// Not secret by itself (it names the key), but kept out of logs anyway.
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
}

/// Google Cloud Storage service account credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GcpCredentials {
    /// The service account JSON key itself.
    ServiceAccountKey(Secret),
    /// Path of a service account JSON key file (a mounted Secret).
    ServiceAccountFile(PathBuf),
}

/// Azure Blob Storage credentials for one storage account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureCredentials {
    pub account: String,
    pub key: AzureKey,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AzureKey {
    AccessKey(Secret),
    SasToken(Secret),
}

/// Credentials for whichever store a URI names; only the matching part is
/// used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    pub aws: Option<AwsCredentials>,
    pub gcp: Option<GcpCredentials>,
    pub azure: Option<AzureCredentials>,
}

impl Credentials {
    /// Reads the variables in the module documentation from the process
    /// environment.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `lookup` (the environment, or a map in
    /// tests). Empty values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let aws = match (get(AWS_ACCESS_KEY_ID), get(AWS_SECRET_ACCESS_KEY)) {
            (Some(access_key_id), Some(secret)) => Some(AwsCredentials {
                access_key_id,
                secret_access_key: Secret::new(secret),
                session_token: get(AWS_SESSION_TOKEN).map(Secret::new),
            }),
            _ => None,
        };
        let gcp = get(GOOGLE_SERVICE_ACCOUNT_KEY)
            .map(|key| GcpCredentials::ServiceAccountKey(Secret::new(key)))
            .or_else(|| {
                get(GOOGLE_APPLICATION_CREDENTIALS)
                    .map(|path| GcpCredentials::ServiceAccountFile(PathBuf::from(path)))
            });
        let azure = get(AZURE_STORAGE_ACCOUNT_NAME).and_then(|account| {
            let key = get(AZURE_STORAGE_ACCOUNT_KEY)
                .map(|k| AzureKey::AccessKey(Secret::new(k)))
                .or_else(|| {
                    get(AZURE_STORAGE_SAS_TOKEN).map(|t| AzureKey::SasToken(Secret::new(t)))
                })?;
            Some(AzureCredentials { account, key })
        });
        Self { aws, gcp, azure }
    }

    /// Every secret value, for scrubbing text that leaves this crate.
    pub(crate) fn secret_values(&self) -> Vec<String> {
        let mut values = Vec::new();
        if let Some(aws) = &self.aws {
            values.push(aws.secret_access_key.expose().to_owned());
            if let Some(token) = &aws.session_token {
                values.push(token.expose().to_owned());
            }
        }
        if let Some(GcpCredentials::ServiceAccountKey(key)) = &self.gcp {
            values.push(key.expose().to_owned());
        }
        if let Some(azure) = &self.azure {
            match &azure.key {
                AzureKey::AccessKey(s) | AzureKey::SasToken(s) => {
                    values.push(s.expose().to_owned())
                }
            }
        }
        values.retain(|v| !v.is_empty());
        values
    }
}

/// Replaces every secret value in text with `[redacted]`. Applied to every
/// message built from a store client's error, whatever the store echoes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    pub(crate) fn new(credentials: &Credentials) -> Self {
        let mut secrets = credentials.secret_values();
        // Longest first, so a secret containing another is removed whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Self { secrets }
    }

    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), "[redacted]");
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn reads_the_standard_variables() {
        let creds = Credentials::from_lookup(lookup(&[
            (AWS_ACCESS_KEY_ID, "AKIDEXAMPLE"),
            (AWS_SECRET_ACCESS_KEY, "wJalrXUtnFEMI"),
            (AWS_SESSION_TOKEN, "tok"),
            (GOOGLE_APPLICATION_CREDENTIALS, "/var/run/gcp/key.json"),
            (AZURE_STORAGE_ACCOUNT_NAME, "acct"),
            (AZURE_STORAGE_SAS_TOKEN, "sv=2024&sig=abc"),
        ]));
        let aws = creds.aws.as_ref().unwrap();
        assert_eq!(aws.access_key_id, "AKIDEXAMPLE");
        assert_eq!(aws.secret_access_key.expose(), "wJalrXUtnFEMI");
        assert_eq!(aws.session_token.as_ref().unwrap().expose(), "tok");
        assert_eq!(
            creds.gcp,
            Some(GcpCredentials::ServiceAccountFile(PathBuf::from(
                "/var/run/gcp/key.json"
            )))
        );
        let azure = creds.azure.as_ref().unwrap();
        assert_eq!(azure.account, "acct");
        assert_eq!(
            azure.key,
            AzureKey::SasToken(Secret::new("sv=2024&sig=abc"))
        );
    }

    #[test]
    fn half_a_key_pair_or_empty_values_are_no_credentials() {
        let creds = Credentials::from_lookup(lookup(&[(AWS_ACCESS_KEY_ID, "AKID")]));
        assert_eq!(creds, Credentials::default());
        let creds = Credentials::from_lookup(lookup(&[
            (AWS_ACCESS_KEY_ID, "AKID"),
            (AWS_SECRET_ACCESS_KEY, ""),
            (AZURE_STORAGE_ACCOUNT_NAME, "acct"),
        ]));
        assert_eq!(creds, Credentials::default());
    }

    #[test]
    fn debug_output_never_shows_a_secret() {
        let creds = Credentials::from_lookup(lookup(&[
            (AWS_ACCESS_KEY_ID, "AKID"),
            (AWS_SECRET_ACCESS_KEY, "very-secret-value"),
            (GOOGLE_SERVICE_ACCOUNT_KEY, "{\"private_key\":\"pk-value\"}"),
        ]));
        let text = format!("{creds:?}");
        assert!(!text.contains("very-secret-value"), "{text}");
        assert!(!text.contains("pk-value"), "{text}");
        assert!(text.contains("[redacted]"));
    }

    #[test]
    fn the_redactor_removes_every_secret_longest_first() {
        let creds = Credentials {
            aws: Some(AwsCredentials {
                access_key_id: "AKID".to_owned(),
                secret_access_key: Secret::new("abc"),
                session_token: Some(Secret::new("abcdef")),
            }),
            ..Credentials::default()
        };
        let redactor = Redactor::new(&creds);
        assert_eq!(
            redactor.scrub("token abcdef, key abc, id AKID"),
            "token [redacted], key [redacted], id AKID"
        );
    }
}
