//! The process kubelet and the workload controllers: pods run as local processes under Deployments, StatefulSets,
//! Jobs and CronJobs, with volumes, probes, restarts and DNS, driven through `kube::Client` as a user would.

mod common;

mod debug;
mod deployment;
mod eviction;
mod exec;
mod jobs;
mod kubelet;
mod logs;
mod nodes;
mod port_forward;
mod service_accounts;
mod statefulset;
