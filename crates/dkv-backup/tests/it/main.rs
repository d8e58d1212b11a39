//! dkv-backup's integration tests, in one binary (one module per suite).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_restore;
mod every_store;
