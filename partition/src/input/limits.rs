//! What the readers may trust of a file, and how they speak of its
//! contents: errors never echo bytes of an input file (it may hold
//! secrets), only short sanitised names and what kind of token was found;
//! counts from files are added and multiplied with overflow as an error.

use serde_json::Value;

/// Longest name quoted in a message.
const NAME_CHARS: usize = 48;

/// A name from an input file (a type or key name), quoted for a message:
/// at most 48 characters, anything but letters, digits and `_:.-/+@ <>|=[]`
/// replaced by `?`.
pub(crate) fn quoted(name: &str) -> String {
    format!("\"{}\"", safe(name))
}

/// [`quoted`] without the quotes, for keys of a message's location.
pub(crate) fn safe(name: &str) -> String {
    let mut out: String = name
        .chars()
        .take(NAME_CHARS)
        .map(|c| {
            let safe = c.is_ascii_alphanumeric() || "_:.-/+@ <>|=[]".contains(c);
            if safe {
                c
            } else {
                '?'
            }
        })
        .collect();
    if name.chars().count() > NAME_CHARS {
        out.push_str("...");
    }
    out
}

/// What a JSON value is, without its contents (numbers, which are not
/// secrets and say what was wrong, are shown when short).
pub(crate) fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(n) => {
            let text = n.to_string();
            if text.len() <= 24 {
                format!("the number {text}")
            } else {
                "a number".into()
            }
        }
        Value::String(s) => format!("a string of {} bytes", s.len()),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(o) => format!("an object of {} keys", o.len()),
    }
}

/// What a field of a text file is, without its bytes.
pub(crate) fn token_kind(b: &[u8]) -> String {
    let digits = |b: &[u8]| !b.is_empty() && b.iter().all(u8::is_ascii_digit);
    let numeric = |b: &[u8]| {
        b.iter().any(u8::is_ascii_digit)
            && b.iter().all(|c| c.is_ascii_digit() || b".eE+-".contains(c))
    };
    match b {
        [] => "an empty field".into(),
        [b'-', rest @ ..] if digits(rest) => "a negative integer".into(),
        _ if digits(b) => format!("an integer of {} digits", b.len()),
        _ if numeric(b) => "a number with a fraction or exponent".into(),
        [_] => "1 byte that is not a number".into(),
        _ => format!("{} bytes that are not a number", b.len()),
    }
}

/// Bytes this process may use: its cgroup's memory limit (v2 or v1), else
/// the machine's memory; `u64::MAX` when neither can be read.
pub(crate) fn memory_limit() -> u64 {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|p| read(p)?.trim().parse::<u64>().ok())
    .min();
    let total = read("/proc/meminfo").and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    });
    match (cgroup, total) {
        (Some(c), Some(t)) => c.min(t),
        (c, t) => c.or(t).unwrap_or(u64::MAX),
    }
}

/// The sum of counts from a file, `None` when it overflows 64 bits.
pub(crate) fn sum<'a>(counts: impl IntoIterator<Item = &'a u64>) -> Option<u64> {
    counts.into_iter().try_fold(0u64, |a, &b| a.checked_add(b))
}

/// The product of dimensions from a file, `None` when it overflows.
pub(crate) fn product<'a>(dims: impl IntoIterator<Item = &'a u64>) -> Option<u64> {
    dims.into_iter().try_fold(1u64, |a, &b| a.checked_mul(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_and_sanitised() {
        assert_eq!(quoted("paper:cites:paper"), "\"paper:cites:paper\"");
        assert_eq!(quoted("a\"b\nc"), "\"a?b?c\"");
        let long = "x".repeat(100);
        assert_eq!(quoted(&long), format!("\"{}...\"", "x".repeat(48)));
    }

    #[test]
    fn tokens_are_described_not_echoed() {
        assert_eq!(token_kind(b"-1"), "a negative integer");
        assert_eq!(token_kind(b"2.0"), "a number with a fraction or exponent");
        assert_eq!(token_kind(b"hunter2"), "7 bytes that are not a number");
        assert_eq!(kind(&serde_json::json!("secret")), "a string of 6 bytes");
        assert_eq!(kind(&serde_json::json!(-3)), "the number -3");
    }

    #[test]
    fn sums_and_products_overflow_to_none() {
        assert_eq!(sum(&[u64::MAX, 1]), None);
        assert_eq!(sum(&[2, 3]), Some(5));
        assert_eq!(product(&[1 << 40, 1 << 40]), None);
        assert_eq!(product(&[]), Some(1));
    }
}
