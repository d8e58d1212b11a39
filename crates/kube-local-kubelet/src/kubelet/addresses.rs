//! Pod IPs: a distinct address per node, pod and Service proxy, reachable from the host and from other pods.
//!
//! By default ([`PodNetwork::Loopback`]) the addresses are loopback ones: all of 127.0.0.0/8 is local on Linux, so a
//! process can bind any of it without configuration. Each allocator takes a random block so that several
//! environments on one machine (parallel tests) rarely collide; an address is also skipped when something already
//! listens on it.
//!
//! A real API server refuses loopback addresses in Endpoints and EndpointSlices, so kubelets that join one take
//! their addresses from an ordinary /16 instead ([`PodNetwork::Local16`]), which whoever runs them makes local (a
//! `local` route to the loopback device in a network namespace of their own).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;

/// Where the addresses come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodNetwork {
    /// A random /16 of 127.0.0.0/8.
    #[default]
    Loopback,
    /// The /16 whose first two octets these are (say `[10, 244]`); the caller has made it local.
    Local16([u8; 2]),
}

pub struct Addresses {
    /// First two octets of every address this allocator hands out.
    block: [u8; 2],
    next: Mutex<u32>,
    used: Mutex<BTreeSet<Ipv4Addr>>,
}

/// Blocks go round-robin from a random start, so the environments of one process (parallel tests) never share one.
fn next_block() -> u8 {
    use std::sync::atomic::{AtomicU32, Ordering};
    // 127.0.x.x stays the host's; 127.251-255.x.x are left alone.
    const FIRST: u32 = 16;
    const COUNT: u32 = 235;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let start = {
        use rand::Rng;
        rand::rng().random_range(0..COUNT)
    };
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (FIRST + n % COUNT) as u8
}

impl Default for Addresses {
    fn default() -> Self {
        Self::new(PodNetwork::Loopback)
    }
}

impl Addresses {
    pub fn new(network: PodNetwork) -> Addresses {
        use rand::Rng;
        let mut rng = rand::rng();
        Addresses {
            block: match network {
                PodNetwork::Loopback => [127, next_block()],
                PodNetwork::Local16(block) => block,
            },
            next: Mutex::new(rng.random_range(0..200) * 256),
            used: Mutex::new(BTreeSet::new()),
        }
    }

    /// Allocates an unused address.
    pub fn allocate(&self) -> Ipv4Addr {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let n = *next % (256 * 256);
            *next = next.wrapping_add(1);
            let (b, c) = ((n / 256) as u8, (n % 256) as u8);
            if c == 0 || c == 255 {
                continue;
            }
            let ip = Ipv4Addr::new(self.block[0], self.block[1], b, c);
            if used.contains(&ip) || in_use_on_host(ip) {
                continue;
            }
            used.insert(ip);
            return ip;
        }
    }

    pub fn release(&self, ip: Ipv4Addr) {
        self.used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&ip);
    }
}

/// Whether something on the host (say, another environment's pod) already listens on this address.
fn in_use_on_host(ip: Ipv4Addr) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let o = ip.octets();
    // /proc/net/tcp prints the address as a little-endian hex word.
    let hex = format!("{:02X}{:02X}{:02X}{:02X}:", o[3], o[2], o[1], o[0]);
    table.lines().any(|l| {
        l.split_whitespace()
            .nth(1)
            .is_some_and(|local| local.starts_with(&hex))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_loopback() {
        let a = Addresses::default();
        let x = a.allocate();
        let y = a.allocate();
        assert_ne!(x, y);
        assert!(x.is_loopback() && y.is_loopback());
        a.release(x);
    }

    #[test]
    fn a_local_network_hands_out_its_own_addresses() {
        let a = Addresses::new(PodNetwork::Local16([10, 244]));
        let x = a.allocate();
        let y = a.allocate();
        assert_ne!(x, y);
        for ip in [x, y] {
            assert_eq!(ip.octets()[..2], [10, 244], "{ip}");
            assert!(!ip.is_loopback());
        }
    }
}
