//! `barrier emu`: an emulated device as a daemon that several jobs share.
//!
//! The device file is created at the given path (mode 0600, refusing to overwrite) and removed
//! when the daemon ends on SIGINT, SIGTERM or SIGHUP. Jobs find it through
//! `BARRIER_<KIND>_DEVICE_PATH`; groups and IOMMU mappings of jobs that die are reclaimed by the
//! engine (it checks their owners' pids every second), so one job's crash does not exhaust the
//! groups of the next.

use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    STOP.store(sig, Ordering::SeqCst);
}

/// Serves the device until a terminating signal arrives.
pub fn serve(config: barrier_emu::Config, path: &Path) -> Result<(), String> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe); the struct is fully
        // initialized before the call.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    let kind = config.map.kind;
    let emu =
        barrier_emu::Emulator::start_at(config, path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    eprintln!("barrier emu: {kind} device at {} (stop with Ctrl-C)", path.display());
    while STOP.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("barrier emu: stopping; counters {:?}", emu.counters());
    drop(emu);
    Ok(())
}
