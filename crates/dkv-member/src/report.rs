//! What a dkv tool in a pod reports when it ends: its termination message
//! (read by the operator from the pod status) and its peak memory.

use std::path::Path;

/// Kubernetes keeps at most this much of a termination message.
const TERMINATION_MESSAGE_LIMIT: usize = 4096;

/// Writes the termination message; a failure to write it is logged, not
/// fatal (the exit status still tells success from failure).
pub fn report(path: &Path, message: &str) {
    let mut end = message.len().min(TERMINATION_MESSAGE_LIMIT);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    if let Err(err) = std::fs::write(path, &message[..end]) {
        tracing::warn!(path = %path.display(), error = %err, "could not write the termination message");
    }
}

/// Logs the process's peak resident memory (Linux `VmHWM`), the figure the
/// agents' memory budget is checked against.
pub fn log_peak_memory() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(kib) = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
    {
        tracing::info!(peak_rss_kib = kib, "peak memory");
    }
}
