//! Errors shown to a person: one line with the causes.

/// Format an error with its causes on one line.
pub fn chain_str(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
