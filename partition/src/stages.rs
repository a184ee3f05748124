//! The stages of a run, timed: one recorder for both drivers' reports
//! ([`crate::report::Report`]).

use std::time::{Duration, Instant};

use crate::Result;

/// Each stage's wall time in order, and its CPU time where measured.
#[derive(Clone, Debug, Default)]
pub struct Stages {
    pub list: Vec<(&'static str, Duration)>,
    /// CPU time (user + system, every thread of this process) of each
    /// stage, in the order of `list`; empty where /proc is not readable or
    /// CPU time is not measured.
    pub cpu: Vec<Duration>,
    measure_cpu: bool,
}

impl Stages {
    /// Wall and CPU time of each stage.
    pub fn with_cpu() -> Self {
        Stages {
            measure_cpu: true,
            ..Default::default()
        }
    }

    /// Runs `f` as stage `stage`; a failed stage is not recorded.
    pub fn timed<T>(&mut self, stage: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let measure = self.measure_cpu;
        let cpu = || measure.then(process_cpu).flatten();
        let (t, before) = (Instant::now(), cpu());
        let out = f()?;
        self.list.push((stage, t.elapsed()));
        if let (Some(a), Some(b)) = (before, cpu()) {
            self.cpu.push(b.saturating_sub(a));
        }
        Ok(out)
    }

    /// The stages' wall time together.
    pub fn total(&self) -> Duration {
        self.list.iter().map(|(_, d)| *d).sum()
    }

    /// One line per stage: `stage <name>: <s>s [(cpu <s>s)]`.
    pub fn lines(&self) -> Vec<String> {
        self.list
            .iter()
            .enumerate()
            .map(|(i, (s, d))| match self.cpu.get(i) {
                Some(c) => format!(
                    "stage {s}: {:.2}s (cpu {:.2}s)",
                    d.as_secs_f64(),
                    c.as_secs_f64()
                ),
                None => format!("stage {s}: {:.2}s", d.as_secs_f64()),
            })
            .collect()
    }
}

/// User + system CPU time of this process so far (Linux /proc; its
/// clock ticks are USER_HZ, 100 per second on every Linux ABI).
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name: state is field 3,
    // utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(ms: u64) {
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(ms) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    }

    #[test]
    fn process_cpu_grows_with_work() {
        let a = process_cpu().expect("/proc/self/stat is readable on Linux");
        spin(120);
        let b = process_cpu().unwrap();
        assert!(b > a, "{a:?} then {b:?} after 120 ms of spinning");
    }

    #[test]
    fn stages_are_listed_in_order_with_cpu_only_when_measured() {
        let mut wall = Stages::default();
        wall.timed("a", || {
            spin(20);
            Ok(())
        })
        .unwrap();
        assert!(wall
            .timed::<()>("b", || Err(crate::Error::Config("x".into())))
            .is_err());
        assert_eq!(wall.lines().len(), 1);
        assert!(
            wall.lines()[0].starts_with("stage a: "),
            "{:?}",
            wall.lines()
        );
        assert!(!wall.lines()[0].contains("cpu"));
        assert!(wall.total() >= Duration::from_millis(20));
        let mut both = Stages::with_cpu();
        both.timed("read", || {
            spin(30);
            Ok(())
        })
        .unwrap();
        assert!(both.lines()[0].contains("(cpu "), "{:?}", both.lines());
    }
}
