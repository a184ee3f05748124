//! A failing dglrun leaves its error as the container's termination message,
//! so that `kubectl describe pod` and the DGLJob's Failed condition say why
//! (a missing file, a refused shard) instead of only "exited with code 1".

use std::path::Path;

use dgl_api::names::{TERMINATION_LOG, TERMINATION_MESSAGE_MAX};

/// Writes `message` (its last bytes that fit the kubelet's limit) to the
/// termination log when it exists, i.e. when dglrun runs in a container.
pub fn write(message: &str) {
    write_to(Path::new(TERMINATION_LOG), message);
}

fn write_to(path: &Path, message: &str) {
    if !path.exists() {
        return;
    }
    if let Err(e) = std::fs::write(path, capped(message, TERMINATION_MESSAGE_MAX)) {
        tracing::debug!(error = %e, path = %path.display(), "cannot write the termination message");
    }
}

/// The last `max` bytes of `s` at most, cut at a character boundary: the
/// end of an error chain is its cause.
fn capped(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_keep_their_end_within_the_limit() {
        let s = format!("{}: the cause é", "x".repeat(5000));
        let c = capped(&s, TERMINATION_MESSAGE_MAX);
        assert!(c.len() <= TERMINATION_MESSAGE_MAX);
        assert!(c.ends_with("the cause é"));
        assert_eq!(capped("short", 10), "short");
        // A cut inside a multi-byte character moves past it.
        assert_eq!(capped("aé", 1), "");
    }

    #[test]
    fn written_only_where_the_file_exists() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent");
        write_to(&missing, "boom");
        assert!(!missing.exists());
        let log = dir.path().join("termination-log");
        std::fs::write(&log, "").unwrap();
        write_to(&log, "shard part1/graph.dgl changed");
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "shard part1/graph.dgl changed"
        );
    }
}
