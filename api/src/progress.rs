//! Live training progress: the one-line protocol a training script prints,
//! and the form the launcher publishes it in (an annotation on its own pod,
//! [`crate::names::ANNOTATION_PROGRESS`]) for the operator to fold into
//! `status.progress`.
//!
//! A progress line is the marker, whitespace, then one JSON object:
//!
//! ```text
//! DGLRUN_PROGRESS {"epoch":3,"epochs":10,"loss":0.41,"throughput":1234.5,"unit":"samples/s"}
//! ```
//!
//! Only `epoch` is required; unknown fields are ignored. A line that starts
//! with the marker but does not parse is ignored by its readers (never a
//! failure of the training).

use serde::{Deserialize, Serialize};

/// What a progress line starts with (after leading whitespace).
pub const MARKER: &str = "DGLRUN_PROGRESS";
/// Longest JSON object accepted (a line or an annotation), in bytes: keeps
/// what reaches the pod and the job's status small.
pub const MAX_JSON: usize = 1024;
/// Longest `unit` accepted, in characters.
pub const MAX_UNIT: usize = 32;

/// One progress report.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Progress {
    /// The epoch the training is in or has just finished, as the script
    /// counts (the examples print 1 after the first epoch).
    pub epoch: u32,
    /// Total epochs, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u32>,
    /// The last loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// The last throughput, in `unit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<f64>,
    /// Unit of `throughput`, e.g. `samples/s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

/// Why a progress report was not accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProgressError {
    #[error("progress report of {0} bytes; at most {MAX_JSON} are accepted")]
    TooLong(usize),
    #[error("progress report is not the expected JSON object (epoch required): {0}")]
    Json(String),
    #[error("progress report field {field}: {problem}")]
    Field {
        field: &'static str,
        problem: &'static str,
    },
}

impl Progress {
    /// Parses the JSON object of a report (a line's or the annotation's).
    pub fn from_json(text: &str) -> Result<Progress, ProgressError> {
        let text = text.trim();
        if text.len() > MAX_JSON {
            return Err(ProgressError::TooLong(text.len()));
        }
        let p: Progress =
            serde_json::from_str(text).map_err(|e| ProgressError::Json(e.to_string()))?;
        p.check()?;
        Ok(p)
    }

    fn check(&self) -> Result<(), ProgressError> {
        let finite = |v: Option<f64>| v.is_none_or(f64::is_finite);
        let bad = |field, problem| Err(ProgressError::Field { field, problem });
        if !finite(self.loss) {
            return bad("loss", "must be a finite number");
        }
        if !finite(self.throughput) {
            return bad("throughput", "must be a finite number");
        }
        if let Some(u) = &self.unit {
            if u.chars().count() > MAX_UNIT || u.chars().any(char::is_control) {
                return bad(
                    "unit",
                    "must be at most 32 characters without control characters",
                );
            }
        }
        Ok(())
    }

    /// The report as the launcher publishes it (compact JSON).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a checked Progress serializes")
    }

    /// Percent of the epochs done, rounded down (so 100 only once the last
    /// epoch is reported) and at most 100; `None` without a total, or with
    /// a total of 0 (nothing to divide by).
    pub fn percent(&self) -> Option<u32> {
        let total = u64::from(self.epochs.filter(|&t| t > 0)?);
        let done = u64::from(self.epoch).saturating_mul(100) / total;
        Some(u32::try_from(done.min(100)).unwrap_or(100))
    }

    /// The Progress printer column: `epoch 3/10 (30%, ~2m10s left)`, the
    /// time left shown only when estimated and not zero; `epoch 3` when
    /// the total is unknown.
    pub fn summary(&self, remaining_secs: Option<i64>) -> String {
        let Some(total) = self.epochs else {
            return format!("epoch {}", self.epoch);
        };
        let head = format!("epoch {}/{total}", self.epoch);
        match (self.percent(), remaining_secs.filter(|&s| s > 0)) {
            (None, _) => head,
            (Some(pc), None) => format!("{head} ({pc}%)"),
            (Some(pc), Some(s)) => format!("{head} ({pc}%, ~{} left)", short_duration(s)),
        }
    }
}

/// `45s`, `2m10s`, `3h05m`, `4d7h`: two units at most, the column stays short.
pub fn short_duration(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m{:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h{:02}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3_600),
    }
}

/// What the status kept of the previous report, as the estimate needs it
/// (times in Unix seconds, the precision the status keeps).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Seen {
    pub epoch: u32,
    pub epochs: Option<u32>,
    /// When the operator first saw that report.
    pub at: Option<i64>,
    /// The report the estimate counts from: its epoch and when first seen.
    pub base: Option<(u32, i64)>,
    /// The estimate given with that report, as of `at`.
    pub remaining: Option<i64>,
}

/// What the estimate counts from after a new report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// The previous report's (unchanged).
    Keep,
    /// The new report, seen now: its epoch was first seen now.
    Now,
    /// None: when this epoch was first seen is not known on this clock.
    Drop,
}

/// The time estimate for a new report `p` seen at `now`, after `prev`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    pub base: Base,
    /// Seconds left as of `now`; `None` when not known (fewer than two
    /// distinct epochs seen, total unknown, clock or epoch went back, ...).
    pub remaining: Option<i64>,
}

/// The estimate is the rate between the first epoch seen in this run and
/// the newest one, each timed when the operator first saw it, applied to
/// the epochs left. A report of the same epoch carries the last estimate
/// forward by the time passed; it is dropped once used up, never guessed.
pub fn estimate(prev: Option<&Seen>, p: &Progress, now: i64) -> Estimate {
    let fresh = Estimate {
        base: Base::Now,
        remaining: None,
    };
    let Some(prev) = prev else { return fresh };
    // The script started over (a restarted container, an edited annotation).
    if p.epoch < prev.epoch {
        return fresh;
    }
    let clock_back = prev.at.is_some_and(|t| now < t) || prev.base.is_some_and(|(_, t)| now < t);
    if clock_back {
        // Earlier times are on another clock: only a new epoch, first seen
        // now, is a point to count from.
        let base = if p.epoch == prev.epoch {
            Base::Drop
        } else {
            Base::Now
        };
        return Estimate {
            base,
            remaining: None,
        };
    }
    if p.epoch == prev.epoch {
        return Estimate {
            base: Base::Keep,
            remaining: carried(prev, p, now),
        };
    }
    match prev.base {
        Some(base) => Estimate {
            base: Base::Keep,
            remaining: remaining_from(base, p, now),
        },
        None => fresh,
    }
}

/// Seconds left at `now` for epoch `p.epoch` of `p.epochs`, at the rate
/// since `base` (epoch, first seen): `None` unless both the epochs and the
/// time advanced, or when the result does not fit.
fn remaining_from((epoch0, at0): (u32, i64), p: &Progress, now: i64) -> Option<i64> {
    let left = p.epochs?.saturating_sub(p.epoch);
    let done = p.epoch.checked_sub(epoch0).filter(|&d| d > 0)?;
    let secs = u64::try_from(now.checked_sub(at0)?)
        .ok()
        .filter(|&s| s > 0)?;
    let done = u128::from(done);
    // Rounded to the nearest second; u128 holds u32 × i64 without overflow.
    let total = u128::from(left)
        .checked_mul(u128::from(secs))?
        .checked_add(done / 2)?;
    i64::try_from(total / done).ok()
}

/// The previous estimate less the time since it was given, for a report of
/// the same epoch; `None` once used up (unless the training is done) or
/// when the total changed.
fn carried(prev: &Seen, p: &Progress, now: i64) -> Option<i64> {
    if prev.epochs != p.epochs {
        return None;
    }
    let left = prev.remaining?;
    if left == 0 {
        return Some(0);
    }
    let passed = now.checked_sub(prev.at?).filter(|&s| s >= 0)?;
    left.checked_sub(passed).filter(|&s| s > 0)
}

/// A line of the training's output: `None` when it is no progress line,
/// else the report or why it was refused.
pub fn parse_line(line: &str) -> Option<Result<Progress, ProgressError>> {
    let rest = line.trim_start().strip_prefix(MARKER)?;
    // The marker is a word of its own: `DGLRUN_PROGRESSX` is no report.
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    Some(Progress::from_json(rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_full_line_parses_and_round_trips() {
        let line = r#"  DGLRUN_PROGRESS {"epoch":3,"epochs":10,"loss":0.41,"throughput":1234.5,"unit":"samples/s","lr":0.01}"#;
        let p = parse_line(line).unwrap().unwrap();
        assert_eq!(
            p,
            Progress {
                epoch: 3,
                epochs: Some(10),
                loss: Some(0.41),
                throughput: Some(1234.5),
                unit: Some("samples/s".into()),
            }
        );
        assert_eq!(p.summary(None), "epoch 3/10 (30%)");
        assert_eq!(Progress::from_json(&p.to_json()).unwrap(), p);
        let only = parse_line(r#"DGLRUN_PROGRESS {"epoch":0}"#)
            .unwrap()
            .unwrap();
        assert_eq!(only.summary(Some(60)), "epoch 0");
        assert_eq!(only.to_json(), r#"{"epoch":0}"#);
    }

    #[test]
    fn other_lines_are_not_reports() {
        for line in [
            "epoch=3 loss=0.4",
            "",
            "DGLRUN_PROGRESSX {\"epoch\":1}",
            "x DGLRUN_PROGRESS {\"epoch\":1}",
        ] {
            assert!(parse_line(line).is_none(), "{line:?}");
        }
    }

    #[test]
    fn bad_reports_say_why() {
        let err = |l: &str| parse_line(l).unwrap().unwrap_err().to_string();
        assert!(err("DGLRUN_PROGRESS").contains("epoch required"));
        assert!(err(r#"DGLRUN_PROGRESS {"loss":1}"#).contains("epoch required"));
        assert!(err(r#"DGLRUN_PROGRESS {"epoch":-1}"#).contains("epoch required"));
        assert!(err(r#"DGLRUN_PROGRESS {"epoch":1,"loss":NaN}"#).contains("JSON"));
        assert!(err(r#"DGLRUN_PROGRESS {"epoch":1,"loss":1e999}"#).contains("JSON"));
        let unit = format!(
            r#"DGLRUN_PROGRESS {{"epoch":1,"unit":"{}"}}"#,
            "u".repeat(33)
        );
        assert!(err(&unit).contains("field unit"));
        let long = format!(
            r#"DGLRUN_PROGRESS {{"epoch":1,"x":"{}"}}"#,
            "a".repeat(MAX_JSON)
        );
        assert!(err(&long).contains("at most 1024"));
    }

    fn at(epoch: u32, epochs: Option<u32>) -> Progress {
        Progress {
            epoch,
            epochs,
            loss: None,
            throughput: None,
            unit: None,
        }
    }

    #[test]
    fn percent_rounds_down_and_stops_at_100() {
        let pc = |e, t| at(e, t).percent();
        assert_eq!(pc(3, Some(10)), Some(30));
        assert_eq!(pc(1, Some(3)), Some(33));
        assert_eq!(pc(9_999, Some(10_000)), Some(99), "100 only when done");
        assert_eq!(pc(10, Some(10)), Some(100));
        assert_eq!(pc(12, Some(10)), Some(100), "past the total: clamped");
        assert_eq!(pc(u32::MAX, Some(1)), Some(100));
        assert_eq!(pc(u32::MAX - 1, Some(u32::MAX)), Some(99));
        assert_eq!(pc(0, Some(u32::MAX)), Some(0));
        assert_eq!(pc(3, None), None, "total unknown");
        assert_eq!(pc(3, Some(0)), None, "a total of 0 divides nothing");
    }

    #[test]
    fn the_summary_shows_percent_and_time_left_briefly() {
        let p = at(3, Some(10));
        assert_eq!(p.summary(Some(130)), "epoch 3/10 (30%, ~2m10s left)");
        assert_eq!(p.summary(None), "epoch 3/10 (30%)");
        assert_eq!(p.summary(Some(0)), "epoch 3/10 (30%)");
        assert_eq!(at(10, Some(10)).summary(Some(0)), "epoch 10/10 (100%)");
        assert_eq!(at(3, None).summary(Some(130)), "epoch 3");
        assert_eq!(at(3, Some(0)).summary(Some(0)), "epoch 3/0");
        let widest = at(u32::MAX, Some(u32::MAX)).summary(Some(i64::MAX));
        assert_eq!(
            widest,
            "epoch 4294967295/4294967295 (100%, ~106751991167300d15h left)"
        );
    }

    #[test]
    fn durations_are_two_units_at_most() {
        let cases = [
            (-5, "0s"),
            (0, "0s"),
            (45, "45s"),
            (60, "1m00s"),
            (130, "2m10s"),
            (3_599, "59m59s"),
            (3_600, "1h00m"),
            (11_100, "3h05m"),
            (86_399, "23h59m"),
            (86_400, "1d0h"),
            (371_000, "4d7h"),
        ];
        for (secs, text) in cases {
            assert_eq!(short_duration(secs), text, "{secs}");
        }
    }

    /// The status' progress after each report `(epoch, epochs, seen at)`,
    /// as the operator folds them.
    fn fold(reports: &[(u32, Option<u32>, i64)]) -> Vec<crate::JobProgress> {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use k8s_openapi::jiff::Timestamp;
        let mut out: Vec<crate::JobProgress> = Vec::new();
        for &(epoch, epochs, secs) in reports {
            let when = Time(Timestamp::from_second(1_800_000_000 + secs).unwrap());
            out.push(crate::JobProgress::next(
                out.last(),
                &at(epoch, epochs),
                when,
            ));
        }
        out
    }

    fn etas(reports: &[(u32, Option<u32>, i64)]) -> Vec<Option<i64>> {
        let folded = fold(reports);
        folded
            .iter()
            .map(|p| p.estimated_remaining_seconds)
            .collect()
    }

    #[test]
    fn the_estimate_needs_two_epochs_and_counts_from_the_first() {
        let ten = Some(10);
        let p = fold(&[(3, ten, 0), (3, ten, 40), (5, ten, 100), (6, ten, 150)]);
        assert_eq!(p[0].estimated_remaining_seconds, None, "one report");
        assert_eq!(p[0].progress_percentage, Some(30));
        assert_eq!(p[0].summary, "epoch 3/10 (30%)");
        assert_eq!(p[1].estimated_remaining_seconds, None, "one epoch");
        let first = p[0].first_report.as_ref().unwrap();
        assert_eq!(first.epoch, 3);
        assert_eq!(p[1].first_report, p[0].first_report, "first seen at 0");
        // 2 epochs in 100 s, 5 left.
        assert_eq!(p[2].estimated_remaining_seconds, Some(250));
        assert_eq!(p[2].summary, "epoch 5/10 (50%, ~4m10s left)");
        // 3 epochs in 150 s, 4 left.
        assert_eq!(p[3].estimated_remaining_seconds, Some(200));
        assert_eq!(p[3].first_report, p[0].first_report);
        // Done: nothing left.
        assert_eq!(etas(&[(1, ten, 0), (10, ten, 90)]), [None, Some(0)]);
        // 5 epochs at 3 per 10 s: 16.7 s, rounded.
        assert_eq!(etas(&[(1, Some(9), 0), (4, Some(9), 10)]), [None, Some(17)]);
        // Two epochs within the same second: no rate to measure.
        assert_eq!(etas(&[(1, ten, 5), (2, ten, 5)]), [None, None]);
    }

    #[test]
    fn a_report_of_the_same_epoch_carries_the_estimate_until_used_up() {
        let ten = Some(10);
        let e = etas(&[(1, ten, 0), (2, ten, 10), (2, ten, 30), (2, ten, 95)]);
        assert_eq!(e, [None, Some(80), Some(60), None], "used up at 90 s");
        // Once used up, the next epoch estimates again from the first.
        let e = etas(&[(1, ten, 0), (2, ten, 10), (2, ten, 95), (3, ten, 100)]);
        assert_eq!(e, [None, Some(80), None, Some(350)]);
        // Done stays done.
        assert_eq!(
            etas(&[(1, ten, 0), (10, ten, 90), (10, ten, 500)]),
            [None, Some(0), Some(0)]
        );
        // The total changed: the old estimate no longer holds.
        assert_eq!(
            etas(&[(1, ten, 0), (2, ten, 10), (2, Some(20), 20)]),
            [None, Some(80), None]
        );
    }

    #[test]
    fn the_epoch_going_back_starts_the_estimate_over() {
        let ten = Some(10);
        let p = fold(&[(1, ten, 0), (4, ten, 30), (2, ten, 40), (3, ten, 50)]);
        assert_eq!(p[1].estimated_remaining_seconds, Some(60));
        assert_eq!(p[2].estimated_remaining_seconds, None, "epoch 4 -> 2");
        assert_eq!(p[2].first_report.as_ref().unwrap().epoch, 2);
        assert_eq!(p[2].progress_percentage, Some(20));
        // From (2, 40): 1 epoch in 10 s, 7 left.
        assert_eq!(p[3].estimated_remaining_seconds, Some(70));
    }

    #[test]
    fn the_clock_going_back_gives_no_estimate_until_it_can_be_measured() {
        let ten = Some(10);
        // A new epoch seen at an earlier time: counted from there on.
        let p = fold(&[(1, ten, 100), (2, ten, 110), (3, ten, 50), (4, ten, 60)]);
        assert_eq!(p[1].estimated_remaining_seconds, Some(80));
        assert_eq!(p[2].estimated_remaining_seconds, None);
        assert_eq!(p[2].first_report.as_ref().unwrap().epoch, 3);
        assert_eq!(p[3].estimated_remaining_seconds, Some(60));
        // The same epoch at an earlier time: when it began is unknown on
        // this clock, so the next epoch starts the count.
        let p = fold(&[(1, ten, 100), (2, ten, 110), (2, ten, 50), (3, ten, 60)]);
        assert_eq!(p[2].estimated_remaining_seconds, None);
        assert_eq!(p[2].first_report, None);
        assert_eq!(p[3].estimated_remaining_seconds, None);
        assert_eq!(p[3].first_report.as_ref().unwrap().epoch, 3);
        assert_eq!(
            etas(&[(2, ten, 110), (2, ten, 50), (3, ten, 60), (4, ten, 70)])[3],
            Some(60)
        );
    }

    #[test]
    fn without_a_total_there_is_no_percent_or_estimate() {
        let p = fold(&[(1, None, 0), (2, None, 10), (3, None, 20)]);
        for p in &p {
            assert_eq!(
                (p.progress_percentage, p.estimated_remaining_seconds),
                (None, None)
            );
        }
        assert_eq!(p[2].summary, "epoch 3");
        assert_eq!(p[2].first_report.as_ref().unwrap().epoch, 1);
        // The total appears later: estimated from the first report on.
        assert_eq!(
            etas(&[(1, None, 0), (2, None, 10), (3, Some(5), 20)])[2],
            Some(20)
        );
    }

    #[test]
    fn huge_numbers_give_no_estimate_rather_than_a_wrong_one() {
        let max = Some(u32::MAX);
        let seen = |at: i64| Seen {
            epoch: 1,
            epochs: max,
            at: Some(at),
            base: Some((1, at)),
            remaining: Some(i64::MAX),
        };
        // The time between does not fit in an i64.
        let est = estimate(Some(&seen(i64::MIN)), &at(2, max), i64::MAX);
        assert_eq!(est.remaining, None);
        // The product fits u128 but not the answer in i64.
        let est = estimate(Some(&seen(0)), &at(2, max), i64::MAX / 2);
        assert_eq!(
            est,
            Estimate {
                base: Base::Keep,
                remaining: None
            }
        );
        // Large but representable.
        let est = estimate(Some(&seen(0)), &at(2, max), 1_000_000);
        assert_eq!(est.remaining, Some((i64::from(u32::MAX) - 2) * 1_000_000));
        // Carried past the end of time.
        let est = estimate(Some(&seen(i64::MIN)), &at(1, max), i64::MAX);
        assert_eq!(est.remaining, None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn estimates_never_panic_and_stay_in_range(
            prev_epoch in any::<u32>(),
            epoch in any::<u32>(),
            epochs in proptest::option::of(any::<u32>()),
            seen_at in proptest::option::of(any::<i64>()),
            base in proptest::option::of((any::<u32>(), any::<i64>())),
            remaining in proptest::option::of(any::<i64>()),
            now in any::<i64>(),
        ) {
            let prev = Seen { epoch: prev_epoch, epochs, at: seen_at, base, remaining };
            let p = at(epoch, epochs);
            let est = estimate(Some(&prev), &p, now);
            prop_assert!(est.remaining.is_none_or(|r| r >= 0), "{:?}", est);
            prop_assert!(p.percent().is_none_or(|pc| pc <= 100));
            let _ = p.summary(est.remaining);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn garbage_never_panics(s in ".{0,300}") {
            let _ = parse_line(&s);
            let _ = parse_line(&format!("{MARKER} {s}"));
            let _ = Progress::from_json(&s);
        }

        #[test]
        fn accepted_reports_round_trip(
            epoch in any::<u32>(),
            epochs in proptest::option::of(any::<u32>()),
            loss in proptest::option::of(-1e30f64..1e30),
            unit in proptest::option::of("[a-z/]{0,32}"),
        ) {
            let p = Progress { epoch, epochs, loss, throughput: None, unit };
            let line = format!("{MARKER} {}", p.to_json());
            prop_assert_eq!(parse_line(&line).unwrap().unwrap(), p);
        }
    }
}
