//! Times as wavegate stores them (unix milliseconds) and as people read
//! and write them (durations in config files and reports).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A moment, as milliseconds since the Unix epoch: what every record, fact,
/// lease and wait is dated by, and how it is stored (a plain integer in the
/// database and in JSON). Displayed as a UTC time a person reads; its
/// integer form is [`UnixMs::millis`]. Adding or taking a [`Duration`]
/// saturates instead of overflowing.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct UnixMs(i64);

impl UnixMs {
    /// The epoch itself: a time not yet known, in records written before
    /// their field existed.
    pub(crate) const EPOCH: Self = Self(0);

    /// Later than any time a clock reads.
    pub(crate) const MAX: Self = Self(i64::MAX);

    pub const fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    pub const fn millis(self) -> i64 {
        self.0
    }

    /// How long after `earlier` this is; zero when it is not after it.
    pub(crate) fn since(self, earlier: Self) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

/// Tests write times and durations as milliseconds.
#[cfg(test)]
pub(crate) mod in_tests {
    use super::UnixMs;
    use std::time::Duration;

    /// The moment `ms` milliseconds after the epoch.
    pub(crate) const fn unix(ms: i64) -> UnixMs {
        UnixMs::from_millis(ms)
    }

    /// `n` milliseconds.
    pub(crate) const fn millis(n: u64) -> Duration {
        Duration::from_millis(n)
    }
}

/// A duration in whole milliseconds, as far as an `i64` reaches.
fn millis_of(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Add<Duration> for UnixMs {
    type Output = Self;

    fn add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(millis_of(d)))
    }
}

impl AddAssign<Duration> for UnixMs {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Duration> for UnixMs {
    type Output = Self;

    fn sub(self, d: Duration) -> Self {
        Self(self.0.saturating_sub(millis_of(d)))
    }
}

impl fmt::Display for UnixMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match chrono::DateTime::from_timestamp_millis(self.0) {
            Some(t) => write!(f, "{}", t.format("%Y-%m-%d %H:%M:%S UTC")),
            None => write!(f, "{} ms", self.0),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::in_tests::{millis, unix};
    use super::*;

    #[test]
    fn a_time_reads_as_utc_and_is_stored_as_its_milliseconds() {
        let at = unix(1_764_460_800_123);
        assert_eq!(at.to_string(), "2025-11-30 00:00:00 UTC");
        assert_eq!(serde_json::to_string(&at).unwrap(), "1764460800123");
        assert_eq!(serde_json::from_str::<UnixMs>("1764460800123").unwrap(), at);
        assert_eq!(UnixMs::MAX.to_string(), format!("{} ms", i64::MAX));
    }

    #[test]
    fn adding_or_taking_a_duration_saturates_and_since_is_never_negative() {
        assert_eq!(unix(1_000) + millis(500), unix(1_500));
        assert_eq!(unix(1_000) - millis(1_500), unix(-500));
        assert_eq!(UnixMs::MAX + Duration::MAX, UnixMs::MAX);
        assert_eq!(unix(i64::MIN) - millis(1), unix(i64::MIN));
        assert_eq!(unix(3_000).since(unix(1_000)), millis(2_000));
        assert_eq!(unix(1_000).since(unix(3_000)), Duration::ZERO);
        let mut at = unix(0);
        at += millis(7);
        assert_eq!(at, unix(7));
    }
}
