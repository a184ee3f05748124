//! The job's worker count and its meanings, read once: `--num-partitions`
//! (the operator's `DGL_OPERATOR_NUM_WORKERS`) is at the same time the
//! number of partitions and the number of workers (DGL needs one partition
//! per worker), and 0 means a job without workers, whose launcher trains
//! alone.

use std::fmt;
use std::num::NonZeroU32;

use dgl_api::names;

/// What the worker count says about the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// 0: no workers; the launcher runs the training as one local process.
    Standalone,
    /// One partition per worker, at least one.
    Partitioned(NumParts),
}

/// The number of partitions, which is the number of workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumParts(NonZeroU32);

impl NumParts {
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl fmt::Display for NumParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Workers {
    /// The count as a number (0 for a job without workers).
    pub fn count(self) -> u32 {
        match self {
            Workers::Standalone => 0,
            Workers::Partitioned(n) => n.get(),
        }
    }

    /// The meaning of a count.
    pub fn of(count: u32) -> Workers {
        match NonZeroU32::new(count) {
            None => Workers::Standalone,
            Some(n) => Workers::Partitioned(NumParts(n)),
        }
    }

    /// clap's parser of `--num-partitions`.
    pub fn parse(s: &str) -> Result<Workers, String> {
        s.parse::<u32>()
            .map(Workers::of)
            .map_err(|e| format!("expected a number of workers (0 for none): {e}"))
    }

    /// Whether `workers` (as `stated` words it, e.g. "the hostfile lists 3
    /// worker(s)") fits: an error naming both counts when it does not.
    pub fn check(self, workers: usize, stated: &str) -> Result<(), String> {
        if usize::try_from(self.count()).ok() == Some(workers) {
            return Ok(());
        }
        Err(format!(
            "--num-partitions is {} but {stated}; DGL needs one partition per worker",
            self.count()
        ))
    }
}

/// The job's worker count as the operator states it in a pod
/// (`DGL_OPERATOR_NUM_WORKERS`), which a `--num-partitions` flag may
/// contradict; `None` when unset or not a number (nothing to check).
pub fn stated_by_operator(value: Option<&str>) -> Option<u32> {
    value?.trim().parse().ok()
}

/// [`stated_by_operator`] of this process's environment.
pub fn stated_by_operator_env() -> Option<u32> {
    stated_by_operator(std::env::var(names::ENV_NUM_WORKERS).ok().as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_standalone_and_the_count_round_trips() {
        assert_eq!(Workers::parse("0"), Ok(Workers::Standalone));
        let two = Workers::parse("2").unwrap();
        assert!(matches!(two, Workers::Partitioned(n) if n.get() == 2));
        assert_eq!(two.count(), 2);
        assert!(Workers::parse("-1")
            .unwrap_err()
            .contains("number of workers"));
    }

    #[test]
    fn a_count_that_differs_is_named() {
        assert!(Workers::of(2).check(2, "x").is_ok());
        let e = Workers::of(2).check(3, "the hostfile lists 3 worker(s)");
        assert_eq!(
            e.unwrap_err(),
            "--num-partitions is 2 but the hostfile lists 3 worker(s); DGL needs one partition per worker"
        );
        assert_eq!(stated_by_operator(Some(" 2\n")), Some(2));
        assert_eq!(stated_by_operator(Some("two")), None);
        assert_eq!(stated_by_operator(None), None);
    }
}
