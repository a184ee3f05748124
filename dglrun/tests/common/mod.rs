//! Helpers shared by the test binaries of dglrun.

pub mod netns;

/// A loopback port no other test in this binary is given, that is free now.
///
/// Not `bind(0)`: the kernel hands out ports from the ephemeral range, the
/// range it also takes the source ports of outgoing connections from, and
/// may hand the same port to two calls once the first listener is closed, so
/// a port picked that way can be taken before the fake DGL server binds it
/// (CI saw exactly that). These come from 21000–31999: below the ephemeral
/// range (32768–60999 by default) and above every port of the local test
/// clusters (at most 20259); each at most once per process, from an offset
/// of the process id so that two test processes rarely overlap.
#[allow(dead_code)] // not every test binary needs a port
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const BASE: u16 = 21_000;
    const SPAN: u16 = 11_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % u32::from(SPAN)) as u16;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(
            n < SPAN,
            "no free loopback port left below the ephemeral range"
        );
        let port = BASE + (start + n) % SPAN;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
