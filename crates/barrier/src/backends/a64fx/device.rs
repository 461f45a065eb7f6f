//! One open of the A64FX barrier device per process and path ([`Device`]): the real driver
//! requires every thread that takes part in a blade's barrier to use the fd that allocated
//! it, and the blade belongs to that open. Blades are counted ([`BladeHold`]) so that the last
//! user frees each one, and a connected window ([`Assignment`]) is disconnected by the thread
//! that connected it. Opening picks the implementation of the [`Driver`] seam: an emulated
//! node (a regular file) or the real driver (a character device).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use barrier_hw::a64fx::errno;

use super::driver::{Driver, Errno};
use super::emulated::EmulatedDriver;
use super::real::RealDriver;
use super::window::Window;

/// An open device shared by every thread of this process, with the blades it allocated
/// counted so that the last user frees each one.
#[derive(Debug)]
pub(crate) struct Device {
    pub driver: Box<dyn Driver>,
    /// Users of each blade (cmg, bb): the allocation itself and every assigned window.
    holds: Mutex<HashMap<(u8, u8), usize>>,
}

/// Devices open in this process, by path.
static OPEN: Mutex<Vec<(PathBuf, Weak<Device>)>> = Mutex::new(Vec::new());

impl Device {
    /// This process's open of the device at `path`, opening it if nobody holds it.
    pub fn open(path: &Path) -> Result<Arc<Device>, String> {
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|(_, w)| w.strong_count() > 0);
        if let Some(dev) = open.iter().find(|(p, _)| p == path).and_then(|(_, w)| w.upgrade()) {
            return Ok(dev);
        }
        let driver = open_driver(path)?;
        let dev = Arc::new(Device { driver, holds: Mutex::new(HashMap::new()) });
        open.push((path.to_path_buf(), Arc::downgrade(&dev)));
        Ok(dev)
    }

    /// Allocates a blade for `cpus`; the returned hold frees it when it and every hold taken
    /// with [`Device::hold`] are gone.
    pub fn alloc(self: &Arc<Self>, cpus: &[usize]) -> Result<BladeHold, Errno> {
        let (cmg, bb) = self.driver.alloc_blade(cpus)?;
        Ok(self.hold(cmg, bb))
    }

    /// One more user of blade (cmg, bb).
    pub fn hold(self: &Arc<Self>, cmg: u8, bb: u8) -> BladeHold {
        *self.holds.lock().unwrap_or_else(|e| e.into_inner()).entry((cmg, bb)).or_insert(0) += 1;
        BladeHold { device: Arc::clone(self), cmg, bb }
    }
}

/// One user's share of a blade; the last one dropped frees the blade.
#[derive(Debug)]
pub(crate) struct BladeHold {
    device: Arc<Device>,
    pub cmg: u8,
    pub bb: u8,
}

impl BladeHold {
    /// Keeps the blade allocated for good: a window on it could not be disconnected, so
    /// freeing it would fail (and on hardware leave a window pointing at a free blade).
    fn leak(&self) {
        *self.device.holds.lock().unwrap_or_else(|e| e.into_inner()).entry((self.cmg, self.bb)).or_insert(0) += 1;
    }
}

impl Drop for BladeHold {
    fn drop(&mut self) {
        let last = {
            let mut holds = self.device.holds.lock().unwrap_or_else(|e| e.into_inner());
            let n = holds.get_mut(&(self.cmg, self.bb)).expect("a held blade is counted");
            *n -= 1;
            if *n == 0 {
                holds.remove(&(self.cmg, self.bb));
                true
            } else {
                false
            }
        };
        if last {
            if let Err(e) = self.device.driver.free_blade(self.cmg, self.bb) {
                tracing::warn!(cmg = self.cmg, bb = self.bb, "freeing a barrier blade failed: {}", errno::name(e));
            }
        }
    }
}

/// A window of the calling PE connected to a held blade; dropping it disconnects the window
/// (from the thread bound to that PE, as the driver requires) and lets go of the blade.
#[derive(Debug)]
pub(crate) struct Assignment {
    pub window: Window,
    pub number: u8,
    /// The CPU of the thread that connected the window: only that thread may disconnect it.
    cpu: Option<usize>,
    hold: BladeHold,
}

impl Assignment {
    /// Connects a free window of the calling PE (physical PE `ppe` of CMG `cmg`) to blade `bb`,
    /// holding the blade while connected.
    pub fn new(device: &Arc<Device>, cmg: u8, bb: u8, ppe: u8) -> Result<Assignment, Errno> {
        let number = device.driver.assign(bb, -1)?;
        let hold = device.hold(cmg, bb);
        match device.driver.window(cmg, bb, ppe, number) {
            Ok(window) => Ok(Assignment { window, number, cpu: device.driver.caller_cpu(), hold }),
            Err(e) => {
                tracing::warn!("window {number} of PE {ppe} in CMG {cmg}: {e}");
                let _ = device.driver.unassign(bb);
                Err(errno::EFAULT)
            }
        }
    }
}

impl Drop for Assignment {
    fn drop(&mut self) {
        let here = self.hold.device.driver.caller_cpu();
        if here != self.cpu {
            // BW_UNASSIGN acts on the caller's PE: from another thread it would disconnect a
            // window of some other rank. Leave this one connected (the blade then stays
            // allocated until the process closes the device) rather than corrupt another.
            tracing::warn!(
                window = self.number,
                "a communicator on the A64FX barrier was dropped on a thread bound to {here:?}, not to its rank's \
                 CPU {:?}: its window and blade stay in use until the process exits; drop communicators on the \
                 thread that used them",
                self.cpu
            );
            self.hold.leak();
            return;
        }
        if let Err(e) = self.hold.device.driver.unassign(self.hold.bb) {
            tracing::warn!(window = self.number, "disconnecting a barrier window failed: -{}", errno::name(e));
            self.hold.leak();
        }
    }
}

/// Opens the device at `path`: an emulated node (a regular file with the node's MAGIC) or the
/// real driver's character device.
fn open_driver(path: &Path) -> Result<Box<dyn Driver>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if meta.file_type().is_file() {
        return EmulatedDriver::open(path).map(|d| Box::new(d) as Box<dyn Driver>);
    }
    RealDriver::open(path).map(|d| Box::new(d) as Box<dyn Driver>)
}
