//! The store's notion of "now", in unix milliseconds. Injected so that leases
//! and retry backoff can be tested by moving time instead of sleeping, and,
//! in a test build, a running server's time limits too ([`ShiftedClock`]).

use crate::model::UnixMs;
#[cfg(test)]
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub(crate) trait Clock: Send + Sync {
    fn now(&self) -> UnixMs;
}

/// Wall-clock time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixMs {
        UnixMs::EPOCH
            + SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
    }
}

/// The system's clock moved on by the milliseconds a file holds (none while
/// it is missing), read at every call: the scenario tests move a running
/// server's time with it (an approval's `approval_ttl`, a stage's `timeout`)
/// instead of sleeping through it. Only in a build with the `test-clock`
/// feature: the package's dev-dependency on itself turns it on wherever
/// dev-dependencies are built (`cargo test`, `cargo bench`, `--all-targets`),
/// never in `cargo build`, `cargo install` or the container image.
#[cfg(feature = "test-clock")]
#[derive(Debug)]
pub(crate) struct ShiftedClock {
    shift_file: std::path::PathBuf,
}

#[cfg(feature = "test-clock")]
impl ShiftedClock {
    pub(crate) fn new(shift_file: impl Into<std::path::PathBuf>) -> Self {
        Self {
            shift_file: shift_file.into(),
        }
    }
}

#[cfg(feature = "test-clock")]
impl Clock for ShiftedClock {
    fn now(&self) -> UnixMs {
        let shift = std::fs::read_to_string(&self.shift_file)
            .ok()
            .and_then(|text| text.trim().parse::<i64>().ok())
            .unwrap_or(0);
        UnixMs::from_millis(SystemClock.now().millis().saturating_add(shift))
    }
}

#[cfg(test)]
/// A clock that only moves when told to.
#[derive(Debug, Default)]
pub(crate) struct ManualClock {
    now_ms: AtomicI64,
}

#[cfg(test)]
impl ManualClock {
    pub(crate) fn new(start: UnixMs) -> Self {
        Self {
            now_ms: AtomicI64::new(start.millis()),
        }
    }

    pub(crate) fn advance(&self, ms: i64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    pub(crate) fn set(&self, at: UnixMs) {
        self.now_ms.store(at.millis(), Ordering::SeqCst);
    }
}

#[cfg(test)]
impl Clock for ManualClock {
    fn now(&self) -> UnixMs {
        UnixMs::from_millis(self.now_ms.load(Ordering::SeqCst))
    }
}

#[cfg(all(test, feature = "test-clock"))]
mod tests {
    use super::*;

    #[test]
    fn a_shifted_clock_moves_when_its_file_does() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("shift");
        let clock = ShiftedClock::new(&file);
        let within_a_minute_of = |expected: i64| {
            let now = clock.now().millis();
            assert!((now - expected).abs() < 60_000, "{now} vs {expected}");
        };
        within_a_minute_of(SystemClock.now().millis());
        std::fs::write(&file, "3600000\n").unwrap();
        within_a_minute_of(SystemClock.now().millis() + 3_600_000);
        std::fs::write(&file, "not a number").unwrap();
        within_a_minute_of(SystemClock.now().millis());
    }
}
