//! Cron schedules (`spec.backup.schedule`,
//! `spec.maintenance.defrag.schedule`) are read by the API crate's
//! [`dkv_api::schedule`], which `kubectl dkv` shares; the controllers here
//! name them through this module.

pub use dkv_api::schedule::Schedule;
