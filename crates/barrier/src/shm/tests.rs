//! The allocator's unit tests.

use std::sync::atomic::{AtomicU64, Ordering};

use super::classes::{class_lines, class_of};
use super::segment::{Header, MAX_RANKS};
use super::*;
use crate::error::Error;
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

/// A job segment whose header another process (a rank) wrote over: mapping it again must fail
/// with an error that says so, naming what is wrong.
#[test]
fn a_corrupt_header_is_refused_when_the_segment_is_mapped() {
    use std::os::fd::AsRawFd;
    type Corrupt = fn(&Header, usize);
    let cases: [(&str, Corrupt, &str); 5] = [
        ("huge world", |h, _| h.world_size.store(1 << 60, Ordering::Relaxed), "ranks"),
        ("no ranks", |h, _| h.world_size.store(0, Ordering::Relaxed), "ranks"),
        ("table past the end", |h, len| h.rank_table.store(len as u64, Ordering::Relaxed), "rank table"),
        ("region past the end", |h, len| h.world_region.store(len as u64 - 8, Ordering::Relaxed), "world region"),
        ("length", |h, len| h.len.store(len as u64 * 2, Ordering::Relaxed), "bytes"),
    ];
    for (what, corrupt, says) in cases {
        let seg = Segment::create_for_job(JobShape::local(3, 1), 1 << 20).unwrap();
        let fd = seg.raw_fd().unwrap();
        assert!(Segment::map_checked(fd, "the test's segment", "", Error::Bootstrap).is_ok());
        corrupt(seg.header(), seg.len());
        let err = Segment::map_checked(fd, "the test's segment", "", Error::Bootstrap).unwrap_err().to_string();
        assert!(err.contains("corrupt job segment") && err.contains(says), "{what}: {err}");
        let _ = fd.as_raw_fd();
    }
}

/// The creator (the launcher) never re-reads the header: a rank that rewrites it cannot move
/// where the launcher writes its exit records.
#[test]
fn the_creator_keeps_the_layout_it_made() {
    let seg = Segment::create_for_job(JobShape::local(3, 1), 1 << 20).unwrap();
    let table = seg.layout.rank_table;
    seg.header().world_size.store(1 << 60, Ordering::Relaxed);
    seg.header().rank_table.store(seg.len() as u64, Ordering::Relaxed);
    assert_eq!(seg.shape().world_size, 3);
    seg.mark_exited(2, RankExit::Status(0));
    assert_eq!(seg.exited(2), Some(RankExit::Status(0)));
    assert_eq!(seg.slice::<AtomicU64>(table, 6)[5].load(Ordering::Relaxed), 1, "rank 2's exit record");
    // A rank number outside the job is no rank.
    seg.mark_exited(5, RankExit::Status(3));
    assert_eq!(seg.exited(5), None);
    assert_eq!(seg.exit_count(), 1);
}

#[test]
fn rank_counts_whose_layout_would_overflow_are_refused() {
    for n in [MAX_RANKS + 1, 1 << 40, 1 << 61, usize::MAX] {
        let err = Segment::anonymous(JobShape::local(n, 1), 1 << 20).unwrap_err().to_string();
        assert!(err.contains("more than a job can hold"), "{n}: {err}");
    }
    let err = Segment::anonymous(JobShape::local(2, 1), usize::MAX - 100).unwrap_err().to_string();
    assert!(err.contains("BARRIER_SHM_POOL_BYTES"), "{err}");
}

#[test]
#[should_panic(expected = "shared slice out of bounds")]
fn a_slice_whose_size_overflows_is_refused() {
    let seg = Segment::anonymous(JobShape::local(2, 1), 1 << 20).unwrap();
    let _ = seg.slice::<AtomicU64>(8, usize::MAX / 4);
}

/// Every rank holds the job segment's descriptor: none may shrink the file under the others'
/// mappings (their next touch would be SIGBUS), or grow it.
#[test]
fn the_job_segment_cannot_be_resized_by_a_rank() {
    let seg = Segment::create_for_job(JobShape::local(2, 1), 1 << 20).unwrap();
    let fd = seg.raw_fd().unwrap();
    for len in [0, seg.len() as libc::off_t * 2] {
        // SAFETY: ftruncate on our own descriptor; it must be refused.
        let rc = unsafe { libc::ftruncate(fd, len) };
        assert_eq!(rc, -1, "a resize to {len} bytes was allowed");
    }
    assert_eq!(crate::sys::fd_len(fd).unwrap(), seg.len());
}

/// A node's first rank closes the segment's descriptor once the others have mapped it (issue
/// 50 item 3): the segment and a second process's mapping of it go on working.
#[test]
fn a_released_descriptor_leaves_the_mappings_working() {
    let seg = Segment::create_for_job(JobShape::local(2, 1), 1 << 20).unwrap();
    let (fd, identity) = (seg.raw_fd().unwrap(), seg.identity().unwrap());
    let other = Segment::open_from_process(std::process::id(), fd, identity).unwrap();
    seg.release_fd();
    assert_eq!((seg.raw_fd(), seg.identity()), (None, None));
    // The descriptor is closed: its number no longer names the segment's file.
    assert!(crate::sys::fd_identity(fd).map_or(true, |id| id != identity));
    let word = &seg.slice::<AtomicU64>(seg.len() - 8, 1)[0];
    word.store(42, Ordering::Release);
    assert_eq!(other.slice::<AtomicU64>(other.len() - 8, 1)[0].load(Ordering::Acquire), 42);
    seg.release_fd(); // twice: nothing more
}

/// A segment laid out in a memfd offered before the node's size was known (barrier-mpi's
/// background set-up): mapping it before it is laid out is refused (the others retry), after
/// it works, and both mappings share one hand-over.
#[test]
fn a_segment_laid_out_in_an_offered_memfd_is_mapped_once_laid_out() {
    use crate::wait::handover::Switch;
    let fd = crate::sys::memfd_empty("barrier-test").unwrap();
    use std::os::fd::AsRawFd;
    let (raw, identity) = (fd.as_raw_fd(), crate::sys::fd_identity(fd.as_raw_fd()).unwrap());
    let early = Segment::open_from_process(std::process::id(), raw, identity).unwrap_err().to_string();
    assert!(early.contains("too small for a job segment"), "{early}");
    let seg = Segment::create_for_job_in(fd, JobShape::local(2, 1), 1 << 20).unwrap();
    assert_eq!((seg.raw_fd(), seg.identity()), (Some(raw), Some(identity)));
    let other = Segment::open_from_process(std::process::id(), raw, identity).unwrap();
    assert_eq!(other.shape().world_size, 2);
    seg.handover().ready(3);
    assert_eq!(seg.handover().call(3), Switch::Old);
    other.handover().ready(2);
    assert_eq!(other.handover().switch_call(), Some(4));
    assert_eq!(other.handover().call(4), Switch::New);
}
