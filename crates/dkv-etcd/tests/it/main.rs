//! dkv-etcd's integration tests, in one binary (one module per suite).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod grpc_real_etcd;
