//! The register-access seam: what the backend needs from the A64FX barrier's control plane,
//! the driver's five calls ([`Driver`]), with two implementations behind it
//! ([`super::emulated`]: the emulated node; [`super::real`]: the Fujitsu driver's ioctls). The
//! data plane is [`super::window`], one window register of the calling PE; the per-process
//! open of a device is [`super::device`].

use std::fmt::Debug;

use super::window::Window;

/// A driver error: the negated errno the driver returned, as a positive number.
pub(crate) type Errno = i32;

/// The driver's calls. "The calling PE" is the CPU the calling thread is bound to; a thread
/// not bound to exactly one CPU gets `EPERM` (the real driver's rule).
pub(crate) trait Driver: Send + Sync + Debug {
    /// Where this device is, for messages.
    fn describe(&self) -> String;

    /// `BB_ALLOC`: a free blade in the CMG of `cpus` (at least 2, all in one CMG), its MASK set
    /// to their PEs and BST cleared. Returns (CMG, blade).
    fn alloc_blade(&self, cpus: &[usize]) -> Result<(u8, u8), Errno>;

    /// `BB_FREE`.
    fn free_blade(&self, cmg: u8, bb: u8) -> Result<(), Errno>;

    /// `BW_ASSIGN`: connects a window of the calling PE (`window` -1: any free one) to blade
    /// `bb` of the PE's CMG. Returns the window.
    fn assign(&self, bb: u8, window: i8) -> Result<u8, Errno>;

    /// `BW_UNASSIGN`: disconnects the calling PE's window from blade `bb`.
    fn unassign(&self, bb: u8) -> Result<(), Errno>;

    /// The one CPU the calling thread is bound to, as this device sees it (`None`: not bound
    /// to exactly one; the driver's PE-wise calls would fail with `EPERM`).
    fn caller_cpu(&self) -> Option<usize>;

    /// `GET_PE_INFO`: (CMG, physical PE) of the calling PE.
    fn pe_info(&self) -> Result<(u8, u8), Errno>;

    /// The calling PE's window register `window`, connected to blade `bb` of CMG `cmg` at
    /// physical PE `ppe` (the emulated node needs the coordinates; hardware knows them).
    fn window(&self, cmg: u8, bb: u8, ppe: u8, window: u8) -> Result<Window, String>;
}
