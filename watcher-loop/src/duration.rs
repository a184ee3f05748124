//! Durations as users write them: `90s`, `10m`, `1h30m`, `500ms`.

use std::time::Duration;

use dgl_api::duration;

/// Parses a duration made of one or more `<integer><unit>` parts, units
/// `ms`, `s`, `m`, `h`, `d` (Go's `time.ParseDuration` style, as in kubectl's
/// `--timeout`; humantime's longer spellings such as `min` are accepted
/// too). A bare integer is seconds. `0` means zero. Capped at a year
/// (`dgl_api::duration::MAX`): a longer one, or a number too large to hold,
/// is a year, so that no deadline computed from it can overflow.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    match parse_uncapped(input) {
        Ok(d) => Ok(duration::cap(d)),
        Err(Overflow) => Ok(duration::MAX),
        Err(Invalid(e)) => Err(e),
    }
}

/// Why a duration did not parse.
enum ParseError {
    /// The number does not fit: the duration is longer than any cap.
    Overflow,
    Invalid(String),
}
use ParseError::{Invalid, Overflow};

fn parse_uncapped(input: &str) -> Result<Duration, ParseError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(Invalid(
            "empty duration; expected e.g. `90s`, `10m` or `1h30m`".into(),
        ));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        // All digits: the only failure left is a number over u64::MAX.
        return s
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| Overflow);
    }
    // Whole numbers and units only, no spaces: `1.5h`, `-5s` or `2m 5s`
    // (which humantime would take) stay errors, as kubectl's are.
    if let Some(at) = s.find(|c: char| !c.is_ascii_alphanumeric()) {
        let e = humantime::DurationError::NumberExpected(at);
        return Err(Invalid(explain(input, s, e)));
    }
    match humantime::parse_duration(s) {
        Ok(d) => Ok(d),
        Err(humantime::DurationError::NumberOverflow) => Err(Overflow),
        Err(e) => Err(Invalid(explain(input, s, e))),
    }
}

/// humantime's error, in the words of this tool's `--help`.
fn explain(input: &str, s: &str, e: humantime::DurationError) -> String {
    use humantime::DurationError as E;
    match e {
        E::InvalidCharacter(at) | E::NumberExpected(at) => format!(
            "invalid duration {input:?}: expected a number at {:?} (e.g. `90s`, `10m`, `1h30m`)",
            &s[at.min(s.len())..]
        ),
        E::UnknownUnit { unit, value, .. } if unit.is_empty() => {
            format!("invalid duration {input:?}: {value} has no unit (use ms, s, m, h or d)")
        }
        E::UnknownUnit { unit, .. } => {
            format!("invalid duration {input:?}: unknown unit {unit:?} (use ms, s, m, h or d)")
        }
        E::NumberOverflow => format!("invalid duration {input:?}: number too large"),
        E::Empty => "empty duration; expected e.g. `90s`, `10m` or `1h30m`".into(),
    }
}

/// Renders a duration compactly for messages (`10m`, `1h30m`, `2.5s`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if d.subsec_millis() != 0 {
        return format!("{:.1}s", d.as_secs_f64());
    }
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, size) in [("h", 3600), ("m", 60)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if secs > 0 || out.is_empty() {
        out.push_str(&format!("{secs}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_compounds() {
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("45").unwrap(), Duration::from_secs(45));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86400));
        assert_eq!(parse_duration(" 2m5s ").unwrap(), Duration::from_secs(125));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn rejects_garbage_with_a_reason() {
        assert!(parse_duration("").unwrap_err().contains("empty"));
        assert!(parse_duration("10x")
            .unwrap_err()
            .contains("unknown unit \"x\""));
        assert!(parse_duration("1h30").unwrap_err().contains("no unit"));
        assert!(parse_duration("m")
            .unwrap_err()
            .contains("expected a number"));
        assert!(parse_duration("-5s").is_err());
        assert!(parse_duration("1.5h").is_err());
    }

    #[test]
    fn a_duration_beyond_a_year_is_a_year() {
        let year = Duration::from_secs(365 * 24 * 3600);
        for s in [
            "18446744073709551615",
            "99999999999999999999999",
            "9999999999h",
            "400d",
        ] {
            assert_eq!(parse_duration(s), Ok(year), "{s}");
        }
        assert_eq!(parse_duration("364d"), Ok(Duration::from_secs(364 * 86400)));
    }

    proptest::proptest! {
        #[test]
        fn any_text_or_number_parses_within_the_cap_or_fails(s in "\\PC{0,30}", n in proptest::prelude::any::<u64>(), unit in "(ms|s|m|h|d|min|us|ns)?") {
            if let Ok(d) = parse_duration(&s) {
                proptest::prop_assert!(d <= duration::MAX);
            }
            let d = parse_duration(&format!("{n}{unit}"));
            proptest::prop_assert!(d.is_ok_and(|d| d <= duration::MAX));
        }
    }

    #[test]
    fn formats_compactly() {
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::from_secs(3)), "3s");
        assert_eq!(format_duration(Duration::from_millis(2500)), "2.5s");
        assert_eq!(format_duration(Duration::from_millis(20)), "20ms");
        assert_eq!(format_duration(Duration::from_secs(3601)), "1h1s");
    }
}
