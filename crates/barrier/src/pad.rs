//! Cache-line padding: one writer per line.
//!
//! Every word that one rank writes and others poll lives alone on its line, so a store by one
//! rank never invalidates a line another rank is writing. The line size is per architecture:
//!
//! * x86_64: 128 bytes. Lines are 64 bytes, but Intel's adjacent-line ("spatial") prefetcher
//!   pulls lines in 128-byte pairs, so two hot words 64 bytes apart still interfere (the same
//!   reasoning as crossbeam's `CachePadded`).
//! * aarch64: 256 bytes. The A64FX L1 and L2 lines are 256 bytes (A64FX Microarchitecture
//!   Manual); on other Arm cores 256 only wastes memory, never correctness.
//! * everything else: 64 bytes.

/// Bytes in one padded line on this architecture.
#[cfg(target_arch = "x86_64")]
pub const CACHE_LINE: usize = 128;
/// Bytes in one padded line on this architecture.
#[cfg(target_arch = "aarch64")]
pub const CACHE_LINE: usize = 256;
/// Bytes in one padded line on this architecture.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const CACHE_LINE: usize = 64;

// The device register maps size their flag lines with the same constant.
const _: () = assert!(CACHE_LINE as u64 == barrier_hw::FLAG_BYTES);

/// A value alone on its cache line(s).
#[cfg_attr(target_arch = "x86_64", repr(C, align(128)))]
#[cfg_attr(target_arch = "aarch64", repr(C, align(256)))]
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), repr(C, align(64)))]
#[derive(Debug, Default)]
pub struct CachePadded<T>(pub T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_values_fill_whole_lines() {
        assert_eq!(std::mem::align_of::<CachePadded<u64>>(), CACHE_LINE);
        assert_eq!(std::mem::size_of::<CachePadded<u64>>(), CACHE_LINE);
        assert_eq!(std::mem::size_of::<CachePadded<[u64; 3]>>(), CACHE_LINE);
    }
}
