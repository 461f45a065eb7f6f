//! The allocator's size classes: whole cache lines, four classes per power of two, and the
//! tagged free-list head.

use crate::pad::CACHE_LINE;

/// Size classes, in whole lines: 1, 2, 3, then four steps per power of two (4, 5, 6, 7, 8, 10,
/// 12, 14, 16, 20, ...), so a block wastes at most a quarter of what it holds.
pub(super) const CLASSES: usize = 3 + 4 * 38;
/// A free list head: the low bits are a block index (offset / CACHE_LINE, 0 = empty list), the
/// high bits a tag bumped by every change (so a stale head cannot win a compare-and-swap).
///
/// The tag has 24 bits and wraps silently. A stale head wins only if the rank that read it
/// stalls between its load and its compare-and-swap across exactly k * 2^24 changes of the same
/// size class's list and finds the same block on top again: negligible, and the 40 index bits
/// (2^40 lines) are what lets a pool be any size a machine can map.
pub(super) const INDEX_BITS: u32 = 40;
pub(super) const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

/// Lines in a block of class `c`.
pub(super) fn class_lines(c: usize) -> usize {
    if c < 3 {
        c + 1
    } else {
        let (k, sub) = ((c - 3) / 4 + 2, (c - 3) % 4);
        (4 + sub) << (k - 2)
    }
}

/// The smallest size class that holds `bytes`, if any class is that large.
pub(super) fn class_of(bytes: usize) -> Option<usize> {
    let lines = bytes.max(1).div_ceil(CACHE_LINE);
    let class = if lines <= 3 {
        lines - 1
    } else {
        let k = (usize::BITS - 1 - lines.leading_zeros()) as usize;
        let step = 1usize << (k - 2);
        let sub = (lines - (1 << k)).div_ceil(step);
        3 + (k - 2) * 4 + sub
    };
    (class < CLASSES).then_some(class)
}

/// Bytes of the block `alloc` hands out for `bytes` (what a segment must reserve for it).
pub(super) fn block_bytes(bytes: usize) -> usize {
    class_of(bytes).map_or(bytes, |c| class_lines(c) * CACHE_LINE)
}
