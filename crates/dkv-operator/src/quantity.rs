//! Parsing of Kubernetes resource quantities (`1Gi`, `500M`, `1.5e3`), enough to
//! validate and compare storage sizes without an API server.

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
    let invalid = || InvalidQuantity(text.to_owned());
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() {
        return Err(invalid());
    }
    let value: f64 = number.parse().map_err(|_| invalid())?;
    let multiplier = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exp if exp.starts_with(['e', 'E']) => {
            let power: i32 = exp[1..].parse().map_err(|_| invalid())?;
            10f64.powi(power)
        }
        _ => return Err(invalid()),
    };
    Ok(value * multiplier)
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
