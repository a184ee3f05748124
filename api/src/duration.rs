//! Durations from flags and environment variables, capped where they are
//! parsed, and deadlines that never overflow.
//!
//! `Instant + Duration` panics when the sum does not fit (a timeout of
//! u64::MAX seconds), and so does `Duration + Duration`. Every duration a
//! user can set (dglrun's and watcher-loop's flags and their environment
//! fallbacks) is cut to [`MAX`] when parsed, and every deadline is computed
//! with [`later`], which saturates. No timeout of this project needs more
//! than a year; a larger value is taken as a year, not refused, since its
//! meaning ("wait as long as it takes") is clear.

use std::time::{Duration, Instant};

/// The longest duration any flag takes: one year.
pub const MAX_SECS: u64 = 365 * 24 * 60 * 60;

/// [`MAX_SECS`] as a duration.
pub const MAX: Duration = Duration::from_secs(MAX_SECS);

/// What every duration flag's help says about the cap (tested against
/// each binary's `--help`).
pub const CAP_HELP: &str = "capped at 1 year";

/// `d`, at most [`MAX`].
pub fn cap(d: Duration) -> Duration {
    d.min(MAX)
}

/// `n` seconds, at most [`MAX`].
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n.min(MAX_SECS))
}

/// A whole number of seconds as a flag gives it, capped at [`MAX_SECS`]
/// (also a number too large for 64 bits). clap's value parser for every
/// `SECONDS` flag.
pub fn parse_secs(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a whole number of seconds"));
    }
    // All digits: the only failure left is a number over u64::MAX.
    Ok(t.parse::<u64>().map_or(MAX_SECS, |n| n.min(MAX_SECS)))
}

/// [`parse_secs`], refusing less than `MIN` seconds.
pub fn parse_secs_min<const MIN: u64>(s: &str) -> Result<u64, String> {
    let n = parse_secs(s)?;
    if n < MIN {
        return Err(format!("{n} is less than the minimum, {MIN} seconds"));
    }
    Ok(n)
}

/// `start + d`, or the latest instant that can be reached when that sum
/// does not fit (never a panic).
pub fn later(start: Instant, d: Duration) -> Instant {
    start
        .checked_add(d)
        .or_else(|| start.checked_add(MAX))
        .unwrap_or(start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seconds_are_capped_not_refused() {
        assert_eq!(parse_secs("10"), Ok(10));
        assert_eq!(parse_secs(" 0\n"), Ok(0));
        assert_eq!(parse_secs("18446744073709551615"), Ok(MAX_SECS));
        assert_eq!(parse_secs("99999999999999999999999999"), Ok(MAX_SECS));
        assert!(parse_secs("-1").unwrap_err().contains("whole number"));
        assert!(parse_secs("").is_err());
        assert!(parse_secs("1.5").is_err());
        assert!(parse_secs_min::<5>("4").unwrap_err().contains("minimum, 5"));
        assert_eq!(parse_secs_min::<5>("5"), Ok(5));
        assert_eq!(secs(u64::MAX), MAX);
        assert_eq!(cap(Duration::MAX), MAX);
    }

    proptest! {
        #[test]
        fn any_text_parses_or_fails_within_the_cap(s in ".{0,40}", n in any::<u64>()) {
            if let Ok(v) = parse_secs(&s) {
                prop_assert!(v <= MAX_SECS);
            }
            let v = parse_secs(&n.to_string()).unwrap();
            prop_assert_eq!(v, n.min(MAX_SECS));
        }

        #[test]
        fn a_deadline_never_panics_and_is_never_early(n in any::<u64>(), nanos in 0u32..1_000_000_000) {
            let now = Instant::now();
            let d = Duration::new(n, nanos);
            let at = later(now, d);
            prop_assert!(at >= now);
            prop_assert!(at >= later(now, cap(d)));
        }
    }
}
