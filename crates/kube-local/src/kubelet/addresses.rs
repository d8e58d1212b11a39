//! Pod IPs: a distinct loopback address per pod (and per Service proxy), reachable from the host and from other pods.
//!
//! All of 127.0.0.0/8 is local on Linux, so a process can bind any of it without configuration. Each allocator takes a
//! random block so that several environments on one machine (parallel tests) rarely collide; an address is also
//! skipped when something already listens on it.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;

pub struct Addresses {
    /// Second octet of every address this allocator hands out.
    block: u8,
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
        Self::new()
    }
}

impl Addresses {
    pub fn new() -> Addresses {
        use rand::Rng;
        let mut rng = rand::rng();
        Addresses {
            block: next_block(),
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
            let ip = Ipv4Addr::new(127, self.block, b, c);
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
        let a = Addresses::new();
        let x = a.allocate();
        let y = a.allocate();
        assert_ne!(x, y);
        assert!(x.is_loopback() && y.is_loopback());
        a.release(x);
    }
}
