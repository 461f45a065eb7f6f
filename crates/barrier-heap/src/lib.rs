//! A private heap for a library that is loaded into another program's process.
//!
//! The PMPI interposer, the Open MPI components and the OpenSHMEM interposer are shared objects
//! that a site loads into programs it did not write. Their Rust code allocates (set-up's
//! vectors, strings, each communicator's state). With Rust's default allocator those blocks come
//! from the program's own `malloc` heap, and a freed one stays there as a hole that the
//! program's next small `malloc` fills. That changes where the program's blocks land, and with
//! it how glibc trims the heap: ISx (the integer sort) allocates three 4 MB buffers and a few
//! small blocks every iteration. Run plainly, its small blocks come off the top of the heap,
//! above the first buffer, and pin it; with our set-up's holes below, they land in the holes,
//! nothing pins the top, and glibc gives 12 MB back to the kernel and faults it in again every
//! iteration (97 `brk` calls and 65,000 page faults against 20 and 7,300 in 20 iterations, 1.7x
//! the run time). Nothing in our code was slow; where our blocks lived was the difference.
//!
//! [`PrivateHeap`] is a [`GlobalAlloc`] whose memory comes from `mmap` alone, so a library that
//! declares it as its `#[global_allocator]` never takes a block from, or leaves a hole in, the
//! heap of the program that loaded it:
//!
//! ```
//! #[global_allocator]
//! static HEAP: barrier_heap::PrivateHeap = barrier_heap::PrivateHeap::new();
//!
//! let v: Vec<u64> = (0..1000).collect(); // from HEAP's own mappings
//! assert_eq!(v.iter().sum::<u64>(), 499_500);
//! ```
//!
//! Declare it in the shared object that a foreign program loads (a `cdylib`), never in a
//! library crate: a Rust program that links us as a crate chose its own allocator.
//!
//! # How it works
//!
//! * **Small blocks** (a size, rounded up to its alignment, of at most 64 KiB) are served from
//!   size classes, the powers of two from 16 bytes to 64 KiB. A freed block goes onto its
//!   class's free list (the list's link is written into the block itself) and is handed out
//!   again before new memory is carved. New blocks are carved from 1 MiB slabs, each its own
//!   anonymous mapping; a block of class `s` starts at a multiple of `min(s, 4096)` within its
//!   page-aligned slab, which is the alignment the class promises. Slabs are never unmapped:
//!   the heap's footprint is its peak use, which for these libraries is the set-up of the
//!   communicators alive at once.
//! * **Large blocks** are mappings of their own, unmapped when freed and moved with `mremap`
//!   when they grow or shrink. An alignment above a page is made by mapping the size plus the
//!   alignment and unmapping the unaligned head and the tail.
//! * **Lock.** The classes and the current slab sit behind one spin lock, a static of the shared
//!   object (a few pointer moves while held; a thread that cannot take it spins briefly, then
//!   yields). Our libraries allocate at set-up, not on a barrier's path, so one lock serves. A
//!   `pthread_atfork` handler, registered when the program or shared object is loaded (before
//!   any allocation can take the lock), holds it across `fork`, so that the child never
//!   inherits it held by a thread that does not exist there.
//!
//! The heap asks nothing of the program's `malloc` (registering the fork handler aside, which
//! glibc keeps in its own table). It returns null when the kernel refuses a mapping, which
//! Rust turns into its allocation-failure report.

#![warn(missing_docs)]

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// The smallest class: 16 bytes (2^4), room for the free-list link and malloc's alignment.
const MIN_SHIFT: u32 = 4;
/// The largest class: 64 KiB (2^16). Larger blocks are mappings of their own.
const MAX_SHIFT: u32 = 16;
/// Number of size classes.
const CLASSES: usize = (MAX_SHIFT - MIN_SHIFT + 1) as usize;
/// The size of a slab that small blocks are carved from.
const SLAB: usize = 1 << 20;
/// The alignment a small block of a large class promises at most: 4 KiB, which every page size
/// Linux uses (4 KiB, and 64 KiB on some aarch64 kernels) is a multiple of. Slabs are mappings,
/// so they start on a page.
const PAGE: usize = 4096;

/// The kernel's page size, read once: a large block's mapping is a whole number of pages, and
/// the head and tail trimmed off an over-aligned mapping must be too.
fn page_size() -> usize {
    static SIZE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    match SIZE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: sysconf only reads a system constant.
            let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let size = if size > 0 { size as usize } else { PAGE };
            SIZE.store(size, Ordering::Relaxed);
            size
        }
        size => size,
    }
}

/// A freed small block: its first word links to the next free block of its class.
struct FreeBlock {
    next: *mut FreeBlock,
}

/// What the lock guards.
struct Classes {
    /// The head of each class's free list.
    free: [*mut FreeBlock; CLASSES],
    /// The unused rest of the current slab: `[next, end)`.
    next: *mut u8,
    end: *mut u8,
}

/// A [`GlobalAlloc`] over anonymous mappings, apart from the process's `malloc` heap. See the
/// crate docs for why and how.
pub struct PrivateHeap {
    classes: UnsafeCell<Classes>,
}

// SAFETY: `classes` is read and written only while `LOCK` is held (see `with_classes`), and the
// raw pointers in it name memory that belongs to the heap, not to any thread.
unsafe impl Sync for PrivateHeap {}
// SAFETY: as above: nothing in the heap is tied to the thread that made it.
unsafe impl Send for PrivateHeap {}

impl std::fmt::Debug for PrivateHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateHeap").finish_non_exhaustive()
    }
}

impl Default for PrivateHeap {
    fn default() -> Self {
        Self::new()
    }
}

/// The lock of every heap of this shared object (one global allocator, and any a test makes): a
/// few pointer moves while held. One lock, a static, so that the fork handlers can hold it
/// whatever heaps exist and wherever they are.
static LOCK: AtomicBool = AtomicBool::new(false);
/// The fork handlers: 0 not registered, 1 being registered (others wait), 2 registered.
static FORK_HANDLERS: AtomicU8 = AtomicU8::new(0);

fn lock() {
    let mut spins = 0u32;
    while LOCK.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        if spins < 64 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            // The holder may be descheduled (more threads than cores): let it run.
            std::thread::yield_now();
        }
    }
}

fn unlock() {
    LOCK.store(false, Ordering::Release);
}

/// Registers the fork handlers when the program or shared object is loaded (its
/// `.init_array`), before any thread can reach this heap: a fork that copied the registration
/// half done (another thread between `0 -> 1` and `1 -> 2`) left the child waiting at its first
/// allocation for ever, for a thread it does not have (a hang seen once in this crate's fork
/// test). The first allocation still registers if the loader did not run this (a build that
/// dropped the section).
#[used]
#[link_section = ".init_array"]
static REGISTER_AT_LOAD: extern "C" fn() = register_at_load;

extern "C" fn register_at_load() {
    register_for_fork();
}

/// Whether the fork handlers are registered (for the test that loading registers them).
#[doc(hidden)]
pub fn fork_handlers_registered() -> bool {
    FORK_HANDLERS.load(Ordering::Acquire) == 2
}

/// Registers the fork handlers, once per process, before any allocation takes the lock: a fork
/// can then never copy the lock held by a thread the child does not have.
#[cold]
fn register_for_fork() {
    match FORK_HANDLERS.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            // SAFETY: the three handlers are `extern "C"` functions of this library, which stays
            // loaded while the program runs (the MPI library and the launcher keep it open).
            unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_release), Some(fork_release)) };
            FORK_HANDLERS.store(2, Ordering::Release);
        }
        Err(_) => {
            while FORK_HANDLERS.load(Ordering::Acquire) != 2 {
                std::thread::yield_now();
            }
        }
    }
}

extern "C" fn fork_prepare() {
    lock();
}

/// In the parent and in the child (which has one thread: the lock was taken by `fork_prepare` on
/// the forking thread).
extern "C" fn fork_release() {
    unlock();
}

impl PrivateHeap {
    /// An empty heap; it maps memory at its first allocation.
    pub const fn new() -> Self {
        Self {
            classes: UnsafeCell::new(Classes {
                free: [ptr::null_mut(); CLASSES],
                next: ptr::null_mut(),
                end: ptr::null_mut(),
            }),
        }
    }

    /// Runs `f` on the classes with the lock held.
    fn with_classes<R>(&self, f: impl FnOnce(&mut Classes) -> R) -> R {
        if FORK_HANDLERS.load(Ordering::Acquire) != 2 {
            register_for_fork();
        }
        lock();
        // SAFETY: the lock is held, so no other thread reads or writes `classes` until it is
        // released below; `f` cannot reach `self` again (it is given only the classes).
        let r = f(unsafe { &mut *self.classes.get() });
        unlock();
        r
    }
}

/// The class index of a layout, or `None` for a large block.
fn class_of(layout: Layout) -> Option<usize> {
    let size = layout.size().max(layout.align()).max(1 << MIN_SHIFT);
    let shift = size.next_power_of_two().trailing_zeros();
    (shift <= MAX_SHIFT).then(|| (shift - MIN_SHIFT) as usize)
}

fn class_size(class: usize) -> usize {
    1 << (class as u32 + MIN_SHIFT)
}

/// The length of a large block's mapping.
fn mapped_len(size: usize) -> usize {
    let page = page_size();
    size.div_ceil(page) * page
}

/// A fresh anonymous, private, read-write mapping of `len` bytes (a multiple of the page size),
/// or null when the kernel refuses it.
fn map(len: usize) -> *mut u8 {
    // SAFETY: an anonymous mapping at an address of the kernel's choosing touches no existing
    // memory; the result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

/// Unmaps `[p, p + len)`.
///
/// # Safety
///
/// The range is part of a mapping this heap made, and nothing uses it afterwards.
unsafe fn unmap(p: *mut u8, len: usize) {
    if len > 0 {
        // SAFETY: the caller's promise. (A failure would leave the range mapped: a leak, which an
        // allocator must not turn into a panic.)
        let _ = unsafe { libc::munmap(p.cast(), len) };
    }
}

impl Classes {
    /// A block of `class`: the head of its free list, or carved from the slab.
    fn take(&mut self, class: usize) -> *mut u8 {
        let head = self.free[class];
        if !head.is_null() {
            // SAFETY: every block on a free list was put there by `give` and is at least 16
            // bytes, aligned to 16: its first word holds the link.
            self.free[class] = unsafe { (*head).next };
            return head.cast();
        }
        let size = class_size(class);
        let align = size.min(PAGE);
        let mut start = (self.next as usize).next_multiple_of(align);
        if self.next.is_null() || start + size > self.end as usize {
            let slab = map(SLAB);
            if slab.is_null() {
                return ptr::null_mut();
            }
            self.next = slab;
            // SAFETY: the slab is SLAB bytes long.
            self.end = unsafe { slab.add(SLAB) };
            start = slab as usize;
        }
        let block = start as *mut u8;
        // SAFETY: `start + size <= end`, within the current slab.
        self.next = unsafe { block.add(size) };
        block
    }

    /// Returns a block to its class's free list.
    ///
    /// # Safety
    ///
    /// `p` came from `take(class)` and is not used again until handed out anew.
    unsafe fn give(&mut self, class: usize, p: *mut u8) {
        let block = p.cast::<FreeBlock>();
        // SAFETY: the block is at least 16 bytes, aligned to 16, and no longer in use.
        unsafe { block.write(FreeBlock { next: self.free[class] }) };
        self.free[class] = block;
    }
}

/// Maps a large block of `layout`.
fn map_large(layout: Layout) -> *mut u8 {
    let len = mapped_len(layout.size());
    if layout.align() <= page_size() {
        return map(len);
    }
    // Map enough to find an aligned start, then give back the head and the tail.
    let Some(total) = len.checked_add(layout.align()) else { return ptr::null_mut() };
    let raw = map(total);
    if raw.is_null() {
        return raw;
    }
    let aligned = (raw as usize).next_multiple_of(layout.align());
    let head = aligned - raw as usize;
    // SAFETY: head and tail are the parts of the new mapping outside `[aligned, aligned + len)`.
    unsafe {
        unmap(raw, head);
        unmap((aligned + len) as *mut u8, total - head - len);
    }
    aligned as *mut u8
}

// SAFETY: a small block is served only for a layout with `align <= PAGE`; its class size `s` is a
// power of two at least `max(size, align)`, and it starts at a multiple of `min(s, PAGE)`, which
// `align` (a power of two, at most both) divides. A large block is a mapping of its own of at
// least `size` bytes, aligned as the layout asks (`map_large`). A block is either on a free list
// or handed out, never both, so no two live blocks overlap; `dealloc` and `realloc` find the
// block's class from the layout it was allocated with, as `GlobalAlloc` promises to pass.
unsafe impl GlobalAlloc for PrivateHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match class_of(layout) {
            Some(class) if layout.align() <= PAGE => self.with_classes(|c| c.take(class)),
            _ => map_large(layout),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match class_of(layout) {
            Some(class) if layout.align() <= PAGE => {
                // SAFETY: the layout is the caller's, valid for `alloc`.
                let p = unsafe { self.alloc(layout) };
                if !p.is_null() {
                    // SAFETY: the block holds at least `class_size(class) >= layout.size()` bytes.
                    unsafe { ptr::write_bytes(p, 0, layout.size().min(class_size(class))) };
                }
                p
            }
            // A fresh mapping is zero already.
            _ => map_large(layout),
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        match class_of(layout) {
            Some(class) if layout.align() <= PAGE => {
                // SAFETY: `p` was allocated with this layout, so by `alloc` from this class.
                self.with_classes(|c| unsafe { c.give(class, p) })
            }
            // SAFETY: a large block is a mapping of its own of exactly this length.
            _ => unsafe { unmap(p, mapped_len(layout.size())) },
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc::realloc's contract: `new_size`, rounded to `align`, fits isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let (old_class, new_class) = (class_of(layout), class_of(new_layout));
        if layout.align() <= PAGE {
            if old_class.is_some() && old_class == new_class {
                // The block's class already holds the new size.
                return p;
            }
            if old_class.is_none() && new_class.is_none() {
                // Both large, page-aligned mappings: let the kernel move the pages.
                let (old_len, new_len) = (mapped_len(layout.size()), mapped_len(new_size));
                if old_len == new_len {
                    return p;
                }
                // SAFETY: `p` is a mapping of `old_len` bytes made by `map`; MREMAP_MAYMOVE
                // returns a mapping of `new_len` bytes holding the old contents.
                let q = unsafe { libc::mremap(p.cast(), old_len, new_len, libc::MREMAP_MAYMOVE) };
                return if q == libc::MAP_FAILED { ptr::null_mut() } else { q.cast() };
            }
        }
        // SAFETY: the new layout is valid (see above).
        let q = unsafe { self.alloc(new_layout) };
        if let Some(q) = NonNull::new(q) {
            // SAFETY: both blocks hold at least the smaller size, and they are distinct (the old
            // one is still in use).
            unsafe {
                ptr::copy_nonoverlapping(p, q.as_ptr(), layout.size().min(new_size));
                self.dealloc(p, layout);
            }
        }
        q
    }
}

#[cfg(test)]
mod tests;
