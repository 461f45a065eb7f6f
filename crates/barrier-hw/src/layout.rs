//! Sizes of the device's windows and lines: the global window, release flag lines (per
//! architecture) and arrival slots.

/// Bytes of the global window.
pub const GLOBAL_BYTES: u64 = 0x1000;
/// Bytes of one release flag line in DMA memory: one cache line of this architecture, the size
/// of the library's `Flag` (it asserts the two agree at compile time), so every flag in DMA
/// memory is aligned and the last one ends inside the device.
///
/// * x86_64: 128 (64-byte lines fetched in adjacent pairs by Intel's spatial prefetcher);
/// * aarch64: 256 (the A64FX L1 and L2 line, A64FX Microarchitecture Manual);
/// * everything else: 64.
#[cfg(target_arch = "x86_64")]
pub const FLAG_BYTES: u64 = 128;
/// Bytes of one release flag line in DMA memory (see the x86_64 definition).
#[cfg(target_arch = "aarch64")]
pub const FLAG_BYTES: u64 = 256;
/// Bytes of one release flag line in DMA memory (see the x86_64 definition).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const FLAG_BYTES: u64 = 64;
const _: () = assert!(FLAG_BYTES.is_power_of_two());
/// The largest [`FLAG_BYTES`] of any architecture: flag-shaped registers (the doorbell) take
/// this much room, aligned to it, so one device layout serves every architecture.
pub const MAX_FLAG_BYTES: u64 = 256;
const _: () = assert!(FLAG_BYTES <= MAX_FLAG_BYTES && MAX_FLAG_BYTES.is_multiple_of(FLAG_BYTES));
/// Bytes of one member's arrival slot (one remote-store message, padded to a line).
pub const ARRIVAL_SLOT_BYTES: u64 = 128;
