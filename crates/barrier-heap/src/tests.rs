//! The heap's own checks: classes, contents kept across every operation, alignment, threads,
//! and a fork while other threads allocate.

use super::*;
use proptest::prelude::*;

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

/// Fills a block with a pattern derived from `seed`.
fn fill(p: *mut u8, len: usize, seed: u64) {
    for i in 0..len {
        // SAFETY: the block holds `len` bytes.
        unsafe { p.add(i).write((seed as usize).wrapping_mul(31).wrapping_add(i) as u8) };
    }
}

/// Checks the pattern `fill` wrote.
fn check(p: *const u8, len: usize, seed: u64) {
    for i in 0..len {
        // SAFETY: the block holds `len` bytes.
        let got = unsafe { p.add(i).read() };
        assert_eq!(got, (seed as usize).wrapping_mul(31).wrapping_add(i) as u8, "byte {i} of block {seed}");
    }
}

#[test]
fn classes_cover_sizes_and_alignments() {
    assert_eq!(class_of(layout(1, 1)), Some(0));
    assert_eq!(class_of(layout(16, 8)), Some(0));
    assert_eq!(class_of(layout(17, 8)), Some(1));
    assert_eq!(class_of(layout(8, 64)), Some(2), "an alignment larger than the size picks the class");
    assert_eq!(class_of(layout(65536, 8)), Some(CLASSES - 1));
    assert_eq!(class_of(layout(65537, 8)), None);
    assert_eq!(class_of(layout(16, 1 << 17)), None);
}

#[test]
fn a_freed_block_is_handed_out_again() {
    let heap = PrivateHeap::new();
    let l = layout(100, 8);
    // SAFETY: the layouts are valid and each block is freed once with its own layout.
    unsafe {
        let a = heap.alloc(l);
        heap.dealloc(a, l);
        let b = heap.alloc(l);
        assert_eq!(a, b, "the class's free list serves first");
        heap.dealloc(b, l);
    }
}

#[test]
fn large_blocks_align_grow_and_shrink() {
    let heap = PrivateHeap::new();
    for align in [8, 4096, 1 << 16, 1 << 21] {
        let l = layout(200_000, align);
        // SAFETY: valid layouts; every block freed once with the layout it now has.
        unsafe {
            let p = heap.alloc(l);
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0, "alignment {align}");
            fill(p, l.size(), 7);
            let q = heap.realloc(p, l, 3_000_000);
            assert_eq!(q as usize % align, 0);
            check(q, l.size(), 7);
            let r = heap.realloc(q, layout(3_000_000, align), 100);
            check(r, 100, 7);
            heap.dealloc(r, layout(100, align));
        }
    }
}

#[test]
fn zeroed_blocks_are_zero_even_when_reused() {
    let heap = PrivateHeap::new();
    for size in [24, 4000, 70_000] {
        let l = layout(size, 8);
        // SAFETY: valid layouts, each block freed once.
        unsafe {
            let p = heap.alloc(l);
            fill(p, size, 3);
            heap.dealloc(p, l);
            let z = heap.alloc_zeroed(l);
            assert!((0..size).all(|i| z.add(i).read() == 0), "size {size}");
            heap.dealloc(z, l);
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Alloc { size: usize, align_shift: u32 },
    Free(usize),
    Realloc(usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..200_000, 0u32..14).prop_map(|(size, align_shift)| Op::Alloc { size, align_shift }),
        2 => any::<usize>().prop_map(Op::Free),
        2 => (any::<usize>(), 1usize..150_000).prop_map(|(i, n)| Op::Realloc(i, n)),
    ]
}

proptest! {
    /// Any sequence of allocations, frees and reallocations keeps every live block's contents
    /// and alignment, and live blocks never overlap.
    #[test]
    fn any_sequence_keeps_contents(ops in proptest::collection::vec(op(), 1..120)) {
        let heap = PrivateHeap::new();
        let mut live: Vec<(*mut u8, Layout, u64)> = Vec::new();
        for (seed, op) in ops.into_iter().enumerate() {
            let seed = seed as u64;
            match op {
                Op::Alloc { size, align_shift } => {
                    let l = layout(size, 1 << align_shift);
                    // SAFETY: a valid layout.
                    let p = unsafe { heap.alloc(l) };
                    prop_assert!(!p.is_null());
                    prop_assert_eq!(p as usize % l.align(), 0);
                    fill(p, size, seed);
                    live.push((p, l, seed));
                }
                Op::Free(i) if !live.is_empty() => {
                    let (p, l, s) = live.swap_remove(i % live.len());
                    check(p, l.size(), s);
                    // SAFETY: allocated with `l`, freed once.
                    unsafe { heap.dealloc(p, l) };
                }
                Op::Realloc(i, n) if !live.is_empty() => {
                    let k = i % live.len();
                    let (p, l, s) = live[k];
                    // SAFETY: allocated with `l`; the old pointer is not used after.
                    let q = unsafe { heap.realloc(p, l, n) };
                    prop_assert!(!q.is_null());
                    prop_assert_eq!(q as usize % l.align(), 0);
                    check(q, l.size().min(n), s);
                    fill(q, n, s);
                    live[k] = (q, layout(n, l.align()), s);
                }
                _ => {}
            }
            let mut spans: Vec<(usize, usize)> = live.iter().map(|(p, l, _)| (*p as usize, *p as usize + l.size())).collect();
            spans.sort();
            prop_assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "live blocks overlap");
        }
        for (p, l, s) in live {
            check(p, l.size(), s);
            // SAFETY: allocated with `l`, freed once.
            unsafe { heap.dealloc(p, l) };
        }
    }
}

#[test]
fn threads_share_one_heap() {
    static HEAP: PrivateHeap = PrivateHeap::new();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            s.spawn(move || {
                let mut live: Vec<(*mut u8, Layout, u64)> = Vec::new();
                for i in 0..20_000u64 {
                    let seed = t << 32 | i;
                    let size = 1 + (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize;
                    let l = layout(size, 8);
                    // SAFETY: a valid layout.
                    let p = unsafe { HEAP.alloc(l) };
                    fill(p, size.min(64), seed);
                    live.push((p, l, seed));
                    if i % 3 == 0 {
                        let (p, l, s) = live.swap_remove((i as usize * 7) % live.len());
                        check(p, l.size().min(64), s);
                        // SAFETY: allocated with `l`, freed once.
                        unsafe { HEAP.dealloc(p, l) };
                    }
                }
                for (p, l, s) in live {
                    check(p, l.size().min(64), s);
                    // SAFETY: as above.
                    unsafe { HEAP.dealloc(p, l) };
                }
            });
        }
    });
}

#[test]
fn a_child_forked_while_others_allocate_can_allocate() {
    static HEAP: PrivateHeap = PrivateHeap::new();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let l = layout(48, 8);
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: a valid layout, freed once.
                    unsafe { HEAP.dealloc(HEAP.alloc(l), l) };
                }
            });
        }
        for _ in 0..20 {
            // SAFETY: the child only allocates from HEAP, frees, and leaves with _exit (no
            // destructors, no return into the test harness).
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let l = layout(48, 8);
                // SAFETY: as above.
                unsafe {
                    let p = HEAP.alloc(l);
                    HEAP.dealloc(p, l);
                    libc::_exit(if p.is_null() { 1 } else { 0 });
                }
            }
            assert!(pid > 0, "fork failed");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            let mut status = 0;
            loop {
                // SAFETY: waits for our own child without blocking.
                let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
                if done == pid {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    // SAFETY: our own child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    stop.store(true, Ordering::Relaxed);
                    panic!("the forked child did not finish an allocation in 20 s: it inherited the heap's lock held");
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status}");
        }
        stop.store(true, Ordering::Relaxed);
    });
}
