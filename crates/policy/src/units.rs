//! Sizes (`512M`, `4G`) and durations (`30s`, `2h`, `1h30m`) as people write them.

use std::time::Duration;

/// A size or duration that could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error(
        "size {0:?} is not valid: use a number with an optional unit K, M, G or T (e.g. 512M, 4G)"
    )]
    Size(String),
    #[error("duration {0:?} is not valid: use a number with a unit, e.g. 30s, 10m, 2h, 1h30m")]
    Duration(String),
}

/// Parse a byte size: a whole number with an optional binary unit
/// (`K`, `M`, `G`, `T`, also `KiB`/`KB` spellings; all are powers of 1024).
/// Spaces are refused so that `4 GB` is not silently read as something else.
pub fn parse_size(s: &str) -> Result<u64, ParseError> {
    let err = || ParseError::Size(s.to_string());
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits_end == 0 {
        return Err(err());
    }
    let n: u64 = s[..digits_end].parse().map_err(|_| err())?;
    let shift = match s[digits_end..].to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(err()),
    };
    n.checked_mul(1u64 << shift).ok_or_else(err)
}

/// A size in the largest unit that writes it exactly (`4G`, `1536M`, `100`).
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes != 0 && bytes.trailing_zeros() >= shift {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Parse a duration with `humantime` (`30s`, `10m`, `2h`, `1h30m`, `500ms`);
/// a bare number is read as seconds.
pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| ParseError::Duration(s.to_string()));
    }
    humantime::parse_duration(s).map_err(|_| ParseError::Duration(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4gib"), Ok(4 << 30));
        assert_eq!(parse_size("100"), Ok(100));
    }

    #[test]
    fn malformed_sizes_are_refused() {
        for bad in [
            "",
            "G",
            "4 GB",
            "-1G",
            "1.5G",
            "4X",
            "99999999999999999999T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn durations_accept_units_and_bare_seconds() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("").is_err());
    }
}
