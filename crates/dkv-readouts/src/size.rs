//! Sizes for people.

/// Bytes in binary units with one decimal (`512 B`, `2.0 KiB`, `5.5 MiB`),
/// as `kubectl top` and etcd's tools print them.
pub fn binary(n: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_binary_units() {
        assert_eq!(binary(512), "512 B");
        assert_eq!(binary(2048), "2.0 KiB");
        assert_eq!(binary(5 * 1024 * 1024 + 512 * 1024), "5.5 MiB");
        assert_eq!(binary(3 << 40), "3.0 TiB");
        assert_eq!(binary(5 << 50), "5120.0 TiB");
    }
}
