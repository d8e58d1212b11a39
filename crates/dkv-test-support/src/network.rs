//! Reaching pods of `dkv local up --kubernetes`, whose addresses exist only
//! in the network namespace that process made: a test thread joins it.

use std::os::fd::AsFd as _;

/// Moves the calling thread into the network namespace of process `pid`.
/// Threads and processes it starts afterwards (a runtime's workers, a
/// `kubectl`, an object-store server) are in it too; other threads are not.
pub fn enter_network_of(pid: u32) -> std::io::Result<()> {
    let namespace = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    rustix::thread::move_into_link_name_space(
        namespace.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )?;
    Ok(())
}
