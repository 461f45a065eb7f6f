//! `barrier emu`: an emulated device as a daemon that several jobs share.
//!
//! The device file is created at the given path (mode 0600, refusing to overwrite) and removed
//! when the daemon ends on SIGINT, SIGTERM or SIGHUP. Jobs find it through
//! `BARRIER_<KIND>_DEVICE_PATH`; groups and IOMMU mappings of jobs that die are reclaimed by the
//! engine (it checks their owners' pids every second), so one job's crash does not exhaust the
//! groups of the next.

use std::path::Path;
use std::time::Duration;

/// Serves the device until a terminating signal arrives.
pub fn serve(config: barrier_emu::Config, path: &Path) -> Result<(), String> {
    let _signals = barrier_launch::signals::install();
    let kind = config.map.kind;
    let emu =
        barrier_emu::Emulator::start_at(config, path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    eprintln!("barrier emu: {kind} device at {} (stop with Ctrl-C)", path.display());
    while barrier_launch::signals::take().is_none() {
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("barrier emu: stopping; counters {:?}", emu.counters());
    drop(emu);
    Ok(())
}
