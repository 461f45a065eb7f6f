//! The seam over real hardware: the Fujitsu driver's ioctls on `/dev/fujitsu_hwb` and the
//! EL0 window registers.
//!
//! **Untested on hardware.** No A64FX machine and no aarch64 target are available where this
//! library is built and tested: the ioctl numbers and structures are checked against the C
//! header (`barrier_hw::a64fx::ioctl`), the system-register names against the specification,
//! and everything above this file runs against the emulated node. The register access is the
//! only architecture-specific code, under `cfg(target_arch = "aarch64")`; elsewhere opening the
//! device declines with the reason.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use barrier_hw::a64fx::{errno, ioctl};

use super::driver::{Driver, Errno};
#[cfg(target_arch = "aarch64")]
use super::window::RealWindow;
use super::window::Window;

/// The driver's device file, open once per process (the driver ties blades to the fd).
#[derive(Debug)]
pub(crate) struct RealDriver {
    fd: OwnedFd,
    path: String,
}

impl RealDriver {
    /// Opens the character device, on an architecture whose window registers we can reach.
    pub fn open(path: &Path) -> Result<RealDriver, String> {
        let shown = path.display().to_string();
        if !cfg!(target_arch = "aarch64") {
            return Err(format!(
                "{shown} is not an emulated node, and the A64FX window registers exist only on aarch64 (this build is \
                 for {})",
                std::env::consts::ARCH
            ));
        }
        let file = crate::sys::open_trusted(path, false).map_err(|e| format!("cannot open {shown}: {e}"))?;
        Ok(RealDriver { fd: file.into(), path: shown })
    }

    fn ioctl<T>(&self, request: u64, arg: &mut T) -> Result<(), Errno> {
        // SAFETY: `request` is one of the driver's ioctls, whose argument is the `#[repr(C)]`
        // structure `T` from the driver's header; `arg` is valid for reads and writes of `T`.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), request as _, arg as *mut T) };
        if rc < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(errno::EFAULT))
        } else {
            Ok(())
        }
    }
}

impl Driver for RealDriver {
    fn describe(&self) -> String {
        format!("Fujitsu hardware-barrier driver at {}", self.path)
    }

    fn alloc_blade(&self, cpus: &[usize]) -> Result<(u8, u8), Errno> {
        // SAFETY: cpu_set_t is plain data; zeroed is its empty value.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus {
            if c >= libc::CPU_SETSIZE as usize {
                return Err(errno::EINVAL);
            }
            // SAFETY: the index is inside the set (checked above).
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        let mut ctl = ioctl::BbCtl {
            size: std::mem::size_of::<libc::cpu_set_t>() as u32,
            pemask: &mut set as *mut libc::cpu_set_t as u64,
            ..Default::default()
        };
        self.ioctl(ioctl::BB_ALLOC, &mut ctl)?;
        Ok((ctl.cmg, ctl.bb))
    }

    fn free_blade(&self, cmg: u8, bb: u8) -> Result<(), Errno> {
        let mut ctl = ioctl::BbCtl { cmg, bb, ..Default::default() };
        self.ioctl(ioctl::BB_FREE, &mut ctl)
    }

    fn assign(&self, bb: u8, window: i8) -> Result<u8, Errno> {
        let mut ctl = ioctl::BwCtl { bb, window };
        self.ioctl(ioctl::BW_ASSIGN, &mut ctl)?;
        Ok(ctl.window as u8)
    }

    fn unassign(&self, bb: u8) -> Result<(), Errno> {
        let mut ctl = ioctl::BwCtl { bb, window: 0 };
        self.ioctl(ioctl::BW_UNASSIGN, &mut ctl)
    }

    fn caller_cpu(&self) -> Option<usize> {
        // The driver takes the PE from where the thread runs: only a real affinity of exactly
        // one CPU makes that the CPU the blade's mask names.
        crate::sys::affinity_one()
    }

    fn pe_info(&self) -> Result<(u8, u8), Errno> {
        let mut info = ioctl::PeInfo::default();
        self.ioctl(ioctl::GET_PE_INFO, &mut info)?;
        Ok((info.cmg, info.ppe))
    }

    #[cfg(target_arch = "aarch64")]
    fn window(&self, _cmg: u8, _bb: u8, _ppe: u8, window: u8) -> Result<Window, String> {
        if window > 3 {
            return Err(format!("window {window} does not exist (a PE has 4)"));
        }
        Ok(Window::real(RealWindow::new(window)))
    }

    #[cfg(not(target_arch = "aarch64"))]
    fn window(&self, _cmg: u8, _bb: u8, _ppe: u8, _window: u8) -> Result<Window, String> {
        Err("the A64FX window registers exist only on aarch64".into())
    }
}
