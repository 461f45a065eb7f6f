//! Global window (offset 0) registers, common to both devices.

#[cfg(doc)] // only DOORBELL's documentation links to it
use crate::layout::FLAG_BYTES;
use crate::layout::MAX_FLAG_BYTES;
use crate::register::{reg, Access::*, Register};

/// Identification magic.
pub const MAGIC: Register = reg("MAGIC", 0x000, 8, ReadOnly, "device identification (ASCII)");
/// Layout version.
pub const VERSION: Register = reg("VERSION", 0x008, 8, ReadOnly, "register-map version");
/// Device present: 1; all ones once the device is gone.
pub const DEVICE_STATUS: Register = reg("DEVICE_STATUS", 0x010, 8, ReadOnly, "1 = present, all ones = gone");
/// Network address of the device.
pub const NETWORK_ADDR: Register = reg("NETWORK_ADDR", 0x018, 8, ReadOnly, "network address of the switch");
/// Doorbell: drivers bump it after sending arrivals or changing a group (lets an emulator
/// sleep; real hardware sees the transactions themselves). A flag line with a waiter count:
/// [`MAX_FLAG_BYTES`] bytes at an offset aligned to them, so that it is one aligned line
/// whatever this architecture's [`FLAG_BYTES`].
pub const DOORBELL: Register =
    reg("DOORBELL", 0x200, MAX_FLAG_BYTES, ReadWrite, "arrival/config doorbell (epoch-style counter + waiters)");
/// Counters (read-only): arrivals accepted.
pub const ARRIVALS: Register = reg("ARRIVALS", 0x100, 8, ReadOnly, "arrival messages accepted");
/// Releases written.
pub const RELEASES: Register = reg("RELEASES", 0x108, 8, ReadOnly, "release stores written");
/// Errors raised.
pub const ERRORS: Register = reg("ERRORS", 0x110, 8, ReadOnly, "errors raised in any group");
/// Groups owned.
pub const GROUPS_IN_USE: Register = reg("GROUPS_IN_USE", 0x118, 8, ReadOnly, "groups currently allocated");
/// Barriers completed.
pub const BARRIERS: Register = reg("BARRIERS", 0x120, 8, ReadOnly, "barriers completed in any group");
/// Engine time spent serving, in ns (emulator).
pub const ENGINE_BUSY_NS: Register =
    reg("ENGINE_BUSY_NS", 0x128, 8, ReadOnly, "emulator CPU time serving the device, ns");
/// Configuration sequence: drivers bump it after claiming, configuring or freeing a group,
/// so the device re-reads group configuration only when something changed.
pub const CONFIG_SEQ: Register =
    reg("CONFIG_SEQ", 0x130, 8, ReadWrite, "bumped by drivers after any group configuration change");
/// The CONFIG_SEQ value the device has finished processing.
pub const CONFIG_SEEN: Register = reg("CONFIG_SEEN", 0x138, 8, ReadOnly, "last CONFIG_SEQ the device has applied");
/// Incremented by the device every time it scans its groups for arrivals: a driver that
/// suspects a lost arrival first checks that the device has looked since it arrived.
pub const HEARTBEAT: Register = reg("HEARTBEAT", 0x140, 8, ReadOnly, "scans of the arrival slots so far");
/// How the device does its work: [`DEVICE_MODE_SELF`] (hardware, or an emulator's own
/// engine) or [`DEVICE_MODE_INLINE`] (an emulated device whose work runs in the context of
/// the store that triggers it, the way an emulator traps an MMIO write).
pub const DEVICE_MODE: Register =
    reg("DEVICE_MODE", 0x148, 8, ReadOnly, "0: the device works on its own; 1: emulated inline");
/// The inline engine's lock: scans of every group (doorbell rings) run under it.
pub const ENGINE_LOCK: Register = reg("ENGINE_LOCK", 0x150, 8, ReadWrite, "inline engine lock");
/// A random number fixed when the device powers on: tells two devices apart that were
/// reached through the same path at different times.
pub const INSTANCE: Register = reg("INSTANCE", 0x158, 8, ReadOnly, "random id of this power-on");
/// DEVICE_MODE: the device works on its own.
pub const DEVICE_MODE_SELF: u64 = 0;
/// DEVICE_MODE: emulated inline.
pub const DEVICE_MODE_INLINE: u64 = 1;
/// Every global register.
pub const ALL: &[Register] = &[
    MAGIC,
    VERSION,
    DEVICE_STATUS,
    NETWORK_ADDR,
    DOORBELL,
    ARRIVALS,
    RELEASES,
    ERRORS,
    GROUPS_IN_USE,
    BARRIERS,
    ENGINE_BUSY_NS,
    CONFIG_SEQ,
    CONFIG_SEEN,
    HEARTBEAT,
    DEVICE_MODE,
    ENGINE_LOCK,
    INSTANCE,
];
