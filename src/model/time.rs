//! Times as wavegate stores them (unix milliseconds) and as people read them.

/// Milliseconds since the epoch as a UTC time a person reads.
pub(crate) fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| format!("{ms} ms"))
}
