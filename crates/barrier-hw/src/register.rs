//! One register as data ([`Register`], [`Access`], the `reg` constructor the maps are written
//! with) and the bits and values of the per-group CONTROL, STATUS and ERROR_CODE registers.

/// How software may access a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Written by the device only.
    ReadOnly,
    /// Written by drivers, read by both.
    ReadWrite,
}

/// One register (or table) in a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Register {
    /// Name as in the documentation.
    pub name: &'static str,
    /// Byte offset inside its window.
    pub offset: u64,
    /// Size in bytes (a table's whole size).
    pub bytes: u64,
    /// Access.
    pub access: Access,
    /// What it is.
    pub description: &'static str,
}

pub(crate) const fn reg(
    name: &'static str,
    offset: u64,
    bytes: u64,
    access: Access,
    description: &'static str,
) -> Register {
    Register { name, offset, bytes, access, description }
}

/// Bits of the per-group CONTROL register (seed).
pub mod control {
    /// Enable the group.
    pub const ENABLE: u64 = 1 << 0;
    /// Reset barrier state (the device clears the bit when done).
    pub const RESET: u64 = 1 << 1;
    /// Arm: count arrivals (the device re-arms itself after each release).
    pub const ARM: u64 = 1 << 2;
    /// Wake waiters after each release (the emulator's "interrupt" is a futex wake on the
    /// release flag).
    pub const INTERRUPT_EN: u64 = 1 << 3;
}

/// Bits of the per-group STATUS register (seed). A read of all ones means the device is gone
/// (as a surprise-removed PCIe device reads).
pub mod status {
    /// Configured and waiting for arrivals.
    pub const READY: u64 = 1 << 0;
    /// Some, not all, members have arrived.
    pub const ACTIVE: u64 = 1 << 1;
    /// Every member arrived at `COMPLETED_EPOCH`; releases sent.
    pub const COMPLETE: u64 = 1 << 2;
    /// Error; see `ERROR_CODE`.
    pub const ERROR: u64 = 1 << 3;
    /// What a vanished device reads as.
    pub const GONE: u64 = u64::MAX;
}

/// Values of a group's ERROR_CODE register.
pub mod error_code {
    /// No error.
    pub const NONE: u64 = 0;
    /// A release address did not translate through the IOMMU.
    pub const IOMMU_FAULT: u64 = 1;
    /// An arrival message named another group or member, or a sequence out of range.
    pub const BAD_MESSAGE: u64 = 2;
    /// Configuration invalid (member count or mask out of range).
    pub const BAD_CONFIG: u64 = 3;
    /// Injected by the emulator's fault model.
    pub const INJECTED: u64 = 4;
}
