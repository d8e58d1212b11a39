//! Kubernetes resource quantities (`1Gi`, `500M`, `1.5e3`) as numbers, to
//! validate and compare storage sizes without an API server. The parsing is
//! `kube_quantity`'s (the grammar of apimachinery's `resource.Quantity`);
//! this adds the error users read.

use std::fmt;

/// A quantity that failed to parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidQuantity(pub String);

impl fmt::Display for InvalidQuantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a Kubernetes quantity (use a number with an optional suffix such as Ki, Mi, Gi, k, M, G)",
            self.0
        )
    }
}

/// The value of a quantity in base units (bytes for storage), as a float:
/// exact for every size a volume can have.
pub fn parse_quantity(text: &str) -> Result<f64, InvalidQuantity> {
    let trimmed = text.trim();
    // kube_quantity reads "" and a bare suffix ("Gi") as zero; apimachinery
    // wants a number first.
    trimmed
        .starts_with(|c: char| c.is_ascii_digit() || matches!(c, '+' | '-' | '.'))
        .then(|| kube_quantity::ParsedQuantity::try_from(trimmed).ok())
        .flatten()
        .and_then(|q| q.to_bytes_f64())
        .ok_or_else(|| InvalidQuantity(text.to_owned()))
}

/// A storage size as the spec wrote it (what claims are asked for) and its
/// value in bytes (what sizes are compared by): parsed once.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageSize {
    text: String,
    bytes: f64,
}

impl StorageSize {
    pub fn parse(text: &str) -> Result<Self, InvalidQuantity> {
        Ok(Self {
            bytes: parse_quantity(text)?,
            text: text.trim().to_owned(),
        })
    }

    /// The size as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The size in bytes.
    pub fn bytes(&self) -> f64 {
        self.bytes
    }
}

impl fmt::Display for StorageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_decimal_and_exponent_suffixes() {
        assert_eq!(parse_quantity("1Gi"), Ok(1024.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("500M"), Ok(5e8));
        assert_eq!(parse_quantity("1.5e3"), Ok(1500.0));
        assert_eq!(parse_quantity("2048"), Ok(2048.0));
        assert_eq!(parse_quantity("250m"), Ok(0.25));
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(parse_quantity("").is_err());
        assert!(parse_quantity("Gi").is_err());
        assert!(parse_quantity("1GB").is_err());
        assert!(parse_quantity("one").is_err());
    }
}
