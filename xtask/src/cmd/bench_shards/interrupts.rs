//! SIGINT/SIGTERM/SIGHUP: clean up, then exit 128 + signal.

use anyhow::Result;

pub fn install() -> Result<()> {
    // SAFETY: plain sigset manipulation on a local set.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        set
    };
    // Blocked in this thread, and so in every thread started after it;
    // only the waiter below receives them. Children inherit the mask:
    // `Testbed::spawn` clears it for the dglrun processes.
    // SAFETY: `set` is initialised.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        anyhow::bail!(
            "cannot block signals: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is initialised; `sig` is written by sigwait.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                return;
            }
            super::registry::set_interrupted();
            eprintln!("\nbench-shards: signal {sig}: cleaning up (namespaces, processes, files)");
            super::registry::cleanup();
            std::process::exit(128 + sig);
        })?;
    Ok(())
}
