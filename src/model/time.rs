//! Times as wavegate stores them (unix milliseconds) and as people read
//! and write them (durations in config files and reports).

use std::time::Duration;

/// Milliseconds since the epoch as a UTC time a person reads.
pub(crate) fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| format!("{ms} ms"))
}

/// Parses a duration such as `90s`, `30m`, `1h30m` or `500ms` (humantime's
/// grammar: `1h 30m`, `2days` and `5min` read too); zero is refused.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let total = humantime::parse_duration(text.trim()).map_err(|_| {
        format!("`{text}` is not a duration; write it like `90s`, `30m` or `1h30m`")
    })?;
    if total.is_zero() {
        return Err(format!(
            "`{text}` is zero; a timeout must be longer than that"
        ));
    }
    Ok(total)
}

/// A duration as a person writes it: `1h`, `30m`, `90s`, `500ms`.
pub(crate) fn humanize(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0 => format!("{}ms", d.as_millis()),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
