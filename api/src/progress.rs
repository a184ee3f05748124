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

    /// `epoch 3/10`, or `epoch 3` when the total is unknown: the Progress
    /// printer column.
    pub fn summary(&self) -> String {
        match self.epochs {
            Some(total) => format!("epoch {}/{total}", self.epoch),
            None => format!("epoch {}", self.epoch),
        }
    }
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
        assert_eq!(p.summary(), "epoch 3/10");
        assert_eq!(Progress::from_json(&p.to_json()).unwrap(), p);
        let only = parse_line(r#"DGLRUN_PROGRESS {"epoch":0}"#)
            .unwrap()
            .unwrap();
        assert_eq!(only.summary(), "epoch 0");
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
