//! The allocator's unit tests.

use std::sync::atomic::{AtomicU64, Ordering};

use super::classes::{class_lines, class_of};
use super::*;
use crate::pad::CACHE_LINE;

#[test]
fn size_classes_hold_what_they_are_asked_and_waste_at_most_a_quarter() {
    for bytes in (1..5000).chain([CACHE_LINE * 1000 + 1, 33_554_432, 1 << 30]) {
        let c = class_of(bytes).unwrap();
        let lines = bytes.div_ceil(CACHE_LINE);
        assert!(class_lines(c) >= lines, "{bytes}");
        assert!(c == 0 || class_lines(c - 1) < lines, "{bytes}: not the smallest class");
        assert!(lines < 4 || class_lines(c) * 4 <= lines * 5, "{bytes}: {} lines for {lines}", class_lines(c));
    }
}

#[test]
fn freed_blocks_are_reused_and_zeroed() {
    let seg = Segment::anonymous(JobShape::local(2, 1), 1 << 20).unwrap();
    let before = seg.usage().0;
    let a = seg.alloc(1000).unwrap();
    seg.slice::<AtomicU64>(a, 100).iter().for_each(|w| w.store(7, Ordering::Relaxed));
    seg.free(a, 1000);
    assert_eq!(seg.usage().0, before);
    let b = seg.alloc(900).unwrap();
    assert_eq!(a, b, "same class, same block");
    assert!(seg.slice::<AtomicU64>(b, 100).iter().all(|w| w.load(Ordering::Relaxed) == 0));
    // A window of most of the pool still fits.
    assert!(seg.alloc((1 << 20) * 3 / 4).is_ok());
}

#[test]
fn ranks_allocating_near_the_end_at_once_leave_the_rest_to_smaller_blocks() {
    for _ in 0..50 {
        let seg = Segment::anonymous(JobShape::local(2, 1), 1 << 20).unwrap();
        let big = seg.free_bytes() * 3 / 5;
        let got: Vec<bool> = std::thread::scope(|s| {
            let tries: Vec<_> = (0..2).map(|_| s.spawn(|| seg.alloc(big).is_ok())).collect();
            tries.into_iter().map(|t| t.join().unwrap()).collect()
        });
        // At most one of two blocks of 60% fits (classes round up, so maybe none), and a
        // refused one takes nothing: the rest still serves small blocks.
        assert!(got.iter().filter(|&&ok| ok).count() <= 1, "{got:?}");
        assert!(seg.free_bytes() >= (1 << 20) / 4, "{} bytes left", seg.free_bytes());
        assert!(seg.alloc(2048).is_ok());
    }
}
