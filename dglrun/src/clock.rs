//! Deadlines on tokio's clock that never overflow: `Instant + d` panics
//! when the sum does not fit, so every deadline of dglrun is taken here,
//! through [`dgl_api::duration::later`] (saturating).

use std::time::Duration;

use tokio::time::Instant;

/// `d` from now, saturating.
pub fn after(d: Duration) -> Instant {
    later(Instant::now(), d)
}

/// `start + d`, saturating.
pub fn later(start: Instant, d: Duration) -> Instant {
    Instant::from_std(dgl_api::duration::later(start.into_std(), d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_duration_is_a_deadline_not_a_panic() {
        let now = Instant::now();
        assert!(later(now, Duration::MAX) > now);
        assert_eq!(
            later(now, Duration::from_secs(3)),
            now + Duration::from_secs(3)
        );
    }
}
