//! The object store settings every dkv tool that reads or writes backups
//! takes on its command line (`restore-fetch` in member pods, `backup` in
//! backup Jobs).

use clap::Args;
use dkv_backup::{S3Options, StoreConfig};

/// Non-secret object store settings (S3 and S3-compatible servers).
#[derive(Debug, Args)]
pub struct ObjectStoreArgs {
    /// S3-compatible server URL (MinIO, Ceph, ...); AWS when unset.
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub s3_endpoint: Option<String>,
    /// S3 region; us-east-1 when unset.
    #[arg(long, env = "AWS_REGION")]
    pub s3_region: Option<String>,
    /// Path-style requests (endpoint/bucket/key); false for virtual-hosted
    /// style (bucket.endpoint/key).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub s3_path_style: bool,
    /// Allow a plain-HTTP S3 endpoint (a server inside the cluster).
    #[arg(
        long,
        env = "AWS_ALLOW_HTTP",
        default_value_t = false,
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub s3_allow_http: bool,
    /// `when_supported` (the default) sends a SHA-256 checksum with every
    /// part, checked by the server on arrival; `when_required` leaves it
    /// out, for S3-compatible servers that refuse the header.
    #[arg(long, env = "AWS_REQUEST_CHECKSUM_CALCULATION", value_parser = ["when_supported", "when_required"], ignore_case = true)]
    pub s3_request_checksum_calculation: Option<String>,
}

impl ObjectStoreArgs {
    /// The S3 settings from the command line; the credentials and the
    /// Azure and GCS endpoints (`AZURE_STORAGE_ENDPOINT`,
    /// `STORAGE_EMULATOR_HOST`) from the environment (see
    /// [`dkv_backup::credentials`]).
    pub fn store_config(&self) -> StoreConfig {
        let from_env = StoreConfig::from_env();
        StoreConfig {
            credentials: from_env.credentials,
            azure: from_env.azure,
            gcs: from_env.gcs,
            s3: S3Options {
                endpoint: self.s3_endpoint.clone().filter(|e| !e.is_empty()),
                region: self.s3_region.clone().filter(|r| !r.is_empty()),
                path_style: self.s3_path_style,
                allow_http: self.s3_allow_http,
                checksums: dkv_backup::checksums_requested(
                    self.s3_request_checksum_calculation.as_deref(),
                ),
            },
        }
    }
}
