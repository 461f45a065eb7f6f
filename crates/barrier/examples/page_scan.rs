//! A pinned-thread probe of one explanation of the 12-rank gap to the floor (issue 41 item 5):
//! the gather's up-slots of a 12-rank world region cross a 4 KiB page (region lines 152-163 from
//! segment offset 4096: the page turns at line 160), and hardware prefetchers do not cross pages,
//! so the root's scan of its children's lines might lose its read-ahead there.
//!
//! A root thread on CPU 0 waits for N child lines (128 bytes apart) that a thread on CPU 1
//! stores in order, then stores a release line that the child thread waits for. Two layouts,
//! alternating in chunks: the lines and the release inside one page, and placed as the 12-rank
//! region places them (slots from page line 24, the page turning after 8 of them). Prints the
//! median round trip of each and their ratio.
//!
//!   cargo run --release -p hpc-barrier --example page_scan [N]     (default N = 11)
//!
//! On the 2-core VM (one writer for every child line), N = 11, six runs: the medians' ratio was
//! 0.96-1.05 (once 1.59), but the best chunks, from the machine's fast phases, were 138-160 ns
//! inside one page against 188-274 ns crossing it: 50-110 ns, the size of the 12-rank gap
//! (70-220 ns), though not proof. On the lent 16-core machine (2026-11-27) the medians were
//! 956 against 1034 ns at N = 11 (1.08) and 1232 against 1147 at N = 15 (0.93), and the test
//! that decides, the library's gather with its lines moved onto the region's first page against
//! the layout as it is (alternating binaries, `barrier bench -n 11..16 --algorithms`), ran no
//! faster (12 ranks: 1.09-1.12x the floor against 1.06-1.08x): the explanation is refuted.
//! What closed the gap at 9-11 ranks was the selector's threshold (docs/benchmark.md).
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const LINE: usize = 128;
const PAGE_LINES: usize = 4096 / LINE;

/// Pins this thread to `cpu` (ignored where the machine has no such CPU).
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it; the call
    // reads `size_of` bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Lines from a page boundary, each holding one word (a plain vector, used from its first
/// page-aligned word on).
struct Lines {
    words: Vec<AtomicU64>,
    first: usize,
}

impl Lines {
    fn new(pages: usize) -> &'static Lines {
        let words: Vec<AtomicU64> = (0..(pages + 1) * 4096 / 8).map(|_| AtomicU64::new(0)).collect();
        let misaligned = words.as_ptr() as usize % 4096;
        let first = (4096 - misaligned) % 4096 / 8;
        Box::leak(Box::new(Lines { words, first }))
    }

    fn line(&self, l: usize) -> &AtomicU64 {
        &self.words[self.first + l * LINE / 8]
    }
}

/// `iters` round trips from epoch `start`: ns per round trip.
fn run(lines: &'static Lines, slots: &'static [usize], release: usize, iters: u64, start: u64) -> f64 {
    let child = std::thread::spawn(move || {
        pin(1);
        for e in start..start + iters {
            for &s in slots {
                lines.line(s).store(e, Ordering::Release);
            }
            while lines.line(release).load(Ordering::Acquire) < e {
                std::hint::spin_loop();
            }
        }
    });
    pin(0);
    let t = Instant::now();
    for e in start..start + iters {
        for &s in slots {
            while lines.line(s).load(Ordering::Acquire) < e {
                std::hint::spin_loop();
            }
        }
        lines.line(release).store(e, Ordering::Release);
    }
    let ns = t.elapsed().as_nanos() as f64 / iters as f64;
    child.join().expect("the child thread");
    ns
}

fn main() {
    let n: usize = std::env::args().nth(1).map_or(11, |a| a.parse().expect("N: a number of child lines"));
    assert!((1..=PAGE_LINES - 5).contains(&n), "N from 1 to {}", PAGE_LINES - 5);
    let lines = Lines::new(4);
    let leak = |v: Vec<usize>| -> &'static [usize] { Box::leak(v.into_boxed_slice()) };
    // One page: slots from line 4, the release after them.
    let one = leak((4..4 + n).collect());
    // The 12-rank region's place: from line 24 of the second page on.
    let cross = leak((PAGE_LINES + 24..PAGE_LINES + 24 + n).collect());
    let (iters, chunks) = (20_000u64, 21);
    let (mut a, mut c) = (Vec::new(), Vec::new());
    let mut e = 1;
    for _ in 0..chunks {
        a.push(run(lines, one, 4 + n, iters, e));
        e += iters;
        c.push(run(lines, cross, PAGE_LINES + 24 + n, iters, e));
        e += iters;
    }
    a.sort_by(f64::total_cmp);
    c.sort_by(f64::total_cmp);
    println!(
        "{n} child lines: inside one page median {:.0} ns (best {:.0}); crossing a page median {:.0} ns \
         (best {:.0}); ratio {:.3}",
        a[chunks / 2],
        a[0],
        c[chunks / 2],
        c[0],
        c[chunks / 2] / a[chunks / 2]
    );
}
