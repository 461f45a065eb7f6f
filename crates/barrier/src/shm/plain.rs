//! [`SharedPlain`]: the types that may live in shared memory.

use std::sync::atomic::AtomicU64;

use crate::pad::CachePadded;

/// Types that may live in shared memory: made only of atomics, valid for any bit pattern.
///
/// # Safety
/// Implementors must be `repr(C)` or `repr(transparent)` aggregates of atomics (or padding
/// wrappers of them), with no invariants beyond their bits.
pub unsafe trait SharedPlain: Sync {}
// SAFETY: an atomic integer is valid for every bit pattern.
unsafe impl SharedPlain for AtomicU64 {}
// SAFETY: Flag is repr(C) of three atomics.
unsafe impl SharedPlain for crate::wait::Flag {}
// SAFETY: CachePadded is repr(C) around its field; arrays of atomics are plain.
unsafe impl<const N: usize> SharedPlain for CachePadded<[AtomicU64; N]> {}
// SAFETY: as above.
unsafe impl SharedPlain for CachePadded<AtomicU64> {}
