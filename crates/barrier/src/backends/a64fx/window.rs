//! The data plane: one window register of the calling PE (read LBSY, write BST), as the
//! emulated node serves it (a word of the node's shared file, [`EmulatedWindow`]) or as the
//! hardware does (the EL0 system registers, [`RealWindow`], aarch64 only: with `real.rs`, the
//! only architecture-specific code). [`Window`] dispatches statically between the two; the
//! barrier's wait loop reads it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use barrier_hw::a64fx::write_bst;

use crate::mmio::Mmio;
use crate::wait::Flag;

/// One window register of one PE: the whole data plane.
#[derive(Debug)]
pub(crate) struct Window {
    imp: WindowImp,
}

#[derive(Debug)]
enum WindowImp {
    Emulated(EmulatedWindow),
    #[cfg(target_arch = "aarch64")]
    Real(RealWindow),
}

impl Window {
    pub(super) fn emulated(w: EmulatedWindow) -> Self {
        Window { imp: WindowImp::Emulated(w) }
    }

    #[cfg(target_arch = "aarch64")]
    pub(super) fn real(w: RealWindow) -> Self {
        Window { imp: WindowImp::Real(w) }
    }

    /// Reads the window's LBSY.
    #[inline]
    pub fn lbsy(&self) -> bool {
        match &self.imp {
            WindowImp::Emulated(w) => w.lbsy(),
            #[cfg(target_arch = "aarch64")]
            WindowImp::Real(w) => w.lbsy(),
        }
    }

    /// Writes this PE's BST bit through the window.
    #[inline]
    pub fn write_bst(&self, bit: bool) {
        match &self.imp {
            WindowImp::Emulated(w) => w.write_bst(bit),
            #[cfg(target_arch = "aarch64")]
            WindowImp::Real(w) => w.write_bst(bit),
        }
    }

    /// A flag that moves whenever the blade's LBSY flips (its value counts the flips), where
    /// the implementation has one: the emulated node's, so that oversubscribed waiters can
    /// park. Hardware has none (every thread owns its PE, and `fhwb_sync` polls with `wfe`).
    #[inline]
    pub fn flips(&self) -> Option<&Flag> {
        match &self.imp {
            WindowImp::Emulated(w) => Some(w.flips()),
            #[cfg(target_arch = "aarch64")]
            WindowImp::Real(_) => None,
        }
    }
}

/// A window of an emulated PE: the blade's register word and flips flag.
#[derive(Debug)]
pub(crate) struct EmulatedWindow {
    mmio: Arc<Mmio>,
    register: u64,
    flips: u64,
    ppe: usize,
}

impl EmulatedWindow {
    /// The window of physical PE `ppe` on the blade whose register word and flips flag lie at
    /// these offsets of the node's mapping.
    pub(super) fn new(mmio: Arc<Mmio>, register: u64, flips: u64, ppe: usize) -> Self {
        EmulatedWindow { mmio, register, flips, ppe }
    }

    #[inline]
    pub fn lbsy(&self) -> bool {
        barrier_hw::a64fx::init_sync_bb::lbsy(self.mmio.word(self.register).load(Ordering::Acquire))
    }

    #[inline]
    pub fn write_bst(&self, bit: bool) {
        let word = self.mmio.word(self.register);
        let mut cur = word.load(Ordering::Relaxed);
        loop {
            let (next, flipped) = write_bst(cur, self.ppe, bit);
            // AcqRel: the write publishes this PE's work to whoever sees LBSY flip, and the
            // flipping write sees every other PE's.
            match word.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    if flipped {
                        self.flips().bump(true);
                    }
                    return;
                }
                Err(now) => cur = now,
            }
        }
    }

    #[inline]
    pub fn flips(&self) -> &Flag {
        self.mmio.flag(self.flips)
    }
}

/// One of the calling PE's EL0 window registers (`IMP_BARRIER_BST_SYNC_W<n>` /
/// `LBSY_SYNC_W<n>`, `S3_3_C15_C15_<n>`): bit 0 reads LBSY and writes BST. Accessible from EL0
/// once the driver assigned the window (the driver sets `IMP_BARRIER_CTRL_EL1.EL0AE`); any
/// other access raises SIGILL, which is why only an assigned window is ever built.
#[cfg(target_arch = "aarch64")]
#[derive(Debug)]
pub(crate) struct RealWindow {
    window: u8,
}

#[cfg(target_arch = "aarch64")]
impl RealWindow {
    /// Window register `window` (0..=3) of the calling PE, which the driver assigned.
    pub(super) fn new(window: u8) -> Self {
        RealWindow { window }
    }
}

#[cfg(target_arch = "aarch64")]
macro_rules! sync_register {
    ($w:expr, read) => {{
        let v: u64;
        match $w {
            // SAFETY: reading an assigned window register of the calling PE has no effect
            // besides returning LBSY (driver-enabled EL0 access).
            // (Not `nomem`: the read is a synchronisation point the compiler must not move
            // memory accesses across.)
            0 => unsafe { std::arch::asm!("mrs {}, S3_3_C15_C15_0", out(reg) v, options(nostack)) },
            // SAFETY: as above.
            1 => unsafe { std::arch::asm!("mrs {}, S3_3_C15_C15_1", out(reg) v, options(nostack)) },
            // SAFETY: as above.
            2 => unsafe { std::arch::asm!("mrs {}, S3_3_C15_C15_2", out(reg) v, options(nostack)) },
            // SAFETY: as above.
            _ => unsafe { std::arch::asm!("mrs {}, S3_3_C15_C15_3", out(reg) v, options(nostack)) },
        }
        v
    }};
    ($w:expr, write $v:expr) => {{
        let v: u64 = $v;
        match $w {
            // SAFETY: writing bit 0 of an assigned window register sets this PE's BST bit in
            // the window's blade; no memory is touched (the barrier orders memory: see below).
            0 => unsafe { std::arch::asm!("msr S3_3_C15_C15_0, {}", in(reg) v, options(nostack)) },
            // SAFETY: as above.
            1 => unsafe { std::arch::asm!("msr S3_3_C15_C15_1, {}", in(reg) v, options(nostack)) },
            // SAFETY: as above.
            2 => unsafe { std::arch::asm!("msr S3_3_C15_C15_2, {}", in(reg) v, options(nostack)) },
            // SAFETY: as above.
            _ => unsafe { std::arch::asm!("msr S3_3_C15_C15_3, {}", in(reg) v, options(nostack)) },
        }
    }};
}

#[cfg(target_arch = "aarch64")]
impl RealWindow {
    /// Reads LBSY. Whether the hardware orders a system-register read against later memory
    /// accesses is for the HPC extension specification to say (Fujitsu's `fhwb_sync` uses no
    /// barrier); the fence keeps the compiler and the core from hoisting later loads above it.
    #[inline]
    pub fn lbsy(&self) -> bool {
        let v = sync_register!(self.window, read);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        v & 1 == 1
    }

    #[inline]
    pub fn write_bst(&self, bit: bool) {
        // Writes before the arrival must be visible to every PE that sees the release.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        sync_register!(self.window, write u64::from(bit));
    }
}
