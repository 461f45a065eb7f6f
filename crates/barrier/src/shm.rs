//! The job segment: one shared mapping per job that holds every communicator's region.
//!
//! # Life cycle and cleanup
//!
//! The launcher creates the segment with `shm_open(O_CREAT|O_EXCL, 0600)` under a name unique
//! to the job (`/barrier-<pid>-<nanos>`), sizes it, writes the header and the world region,
//! and **unlinks the name at once**. The ranks inherit the open descriptor (its number is in
//! `BARRIER_SHM_FD`) and map it. From the moment the launcher has unlinked it, nothing is left in
//! `/dev/shm` whatever happens next: a rank killed with `kill -9`, the launcher killed, a
//! power-off. The kernel frees the memory when the last mapping goes.
//!
//! In thread mode and for a program started without the launcher, the segment is an anonymous
//! shared mapping and has no name at all.
//!
//! # Allocation
//!
//! Communicator regions and shared windows come from an allocator in the header that any rank
//! may use, without locks (a rank that dies mid-call can leak a block, never block the others):
//! blocks come in size classes of whole lines, four per power of two (at most a quarter
//! wasted); a freed block goes onto its class's
//! free list (a Treiber stack whose head carries a tag against ABA), and an allocation takes
//! from that list first, from the untouched rest of the pool (a bump pointer) otherwise. A block
//! is zeroed when it is reused, because regions rely on starting from zeros.
//!
//! When is memory free? A communicator's region once every member has left it (the region's
//! departure count reaches its size: no rank can touch it any more); a shared window once the
//! last handle to it is dropped (a count in the window's first line). The world region is never
//! freed. The pool is sparse (tmpfs allocates pages on first touch), so its size costs nothing
//! until used.
//!
//! # Abort, exits and the rank table
//!
//! The header's abort word holds `failed world rank + 1` once any rank fails (the launcher sets
//! it when a rank dies; thread mode sets it when a rank panics), or [`JOB_GONE`] once a rank
//! learns that the launcher itself died. Every slow-path wait checks it, so no rank waits for a
//! rank that will never come.
//!
//! The rank table holds two words per world rank: the pid of the process that joined as that
//! rank (so a subprocess of a rank that inherited its environment cannot join as a second copy
//! of it), and how the rank ended once the launcher (or thread mode) saw it exit cleanly. A
//! waiter that finds a member exited without leaving its communicator stops waiting for it (see
//! `watch.rs`).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::pad::{CachePadded, CACHE_LINE};
use crate::sys::{self, Mapping};
use crate::wait::{WaitError, Watch};

const MAGIC: u64 = u64::from_le_bytes(*b"BARRIER1");
/// Layout version of the header and regions: bumped whenever either changes, so that a launcher
/// and a program built from different versions fail with a clear message instead of misreading
/// each other's memory.
const LAYOUT_VERSION: u64 = 6;
/// Bytes reserved for the header at the start of the segment.
const HEADER_BYTES: usize = 4096;
/// Default bytes of the pool for communicators and windows beyond the world region.
pub const DEFAULT_POOL_BYTES: usize = 64 << 20;

#[repr(C)]
#[derive(Debug)]
struct Header {
    magic: AtomicU64,
    version: AtomicU64,
    len: AtomicU64,
    world_size: AtomicU64,
    nodes: AtomicU64,
    ranks_on_machine: AtomicU64,
    cores: AtomicU64,
    world_region: AtomicU64,
    rank_table: AtomicU64,
    bump: CachePadded<AtomicU64>,
    /// Bytes handed out and not yet freed (for reports).
    in_use: CachePadded<AtomicU64>,
    /// Free list heads, one per size class: `tag << INDEX_BITS | first block index`.
    free_lists: [AtomicU64; CLASSES],
    abort: CachePadded<AtomicU64>,
    /// Ranks marked in the rank table as exited.
    exits: CachePadded<AtomicU64>,
}

/// Size classes, in whole lines: 1, 2, 3, then four steps per power of two (4, 5, 6, 7, 8, 10,
/// 12, 14, 16, 20, ...), so a block wastes at most a quarter of what it holds.
const CLASSES: usize = 3 + 4 * 38;
/// A free list head: the low bits are a block index (offset / CACHE_LINE, 0 = empty list), the
/// high bits a tag bumped by every change (so a stale head cannot win a compare-and-swap).
///
/// The tag has 24 bits and wraps silently. A stale head wins only if the rank that read it
/// stalls between its load and its compare-and-swap across exactly k * 2^24 changes of the same
/// size class's list and finds the same block on top again: negligible, and the 40 index bits
/// (2^40 lines) are what lets a pool be any size a machine can map.
const INDEX_BITS: u32 = 40;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

/// Lines in a block of class `c`.
fn class_lines(c: usize) -> usize {
    if c < 3 {
        c + 1
    } else {
        let (k, sub) = ((c - 3) / 4 + 2, (c - 3) % 4);
        (4 + sub) << (k - 2)
    }
}

/// The smallest size class that holds `bytes`, if any class is that large.
fn class_of(bytes: usize) -> Option<usize> {
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
fn block_bytes(bytes: usize) -> usize {
    class_of(bytes).map_or(bytes, |c| class_lines(c) * CACHE_LINE)
}

/// The abort word's value once the job's launcher is gone.
pub const JOB_GONE: u64 = u64::MAX;

/// Words per world rank in the rank table.
const RANK_WORDS: usize = 2;
const JOINED: usize = 0;
const EXITED: usize = 1;

/// How a rank ended, as recorded in the rank table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankExit {
    /// It exited with this status.
    Status(i32),
    /// Its thread returned (thread mode).
    Returned,
}

impl std::fmt::Display for RankExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RankExit::Status(c) => write!(f, "exited with status {c}"),
            RankExit::Returned => f.write_str("returned from its rank function"),
        }
    }
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);

/// The shape of a job, stored in the segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobShape {
    /// Ranks in the world.
    pub world_size: usize,
    /// Simulated (or real) nodes the ranks are spread over, block-wise.
    pub nodes: usize,
    /// Ranks of this job that share this machine's cores (drives the automatic wait policy).
    pub ranks_on_machine: usize,
    /// Cores the job may use, counted once by whoever created the job (the launcher's affinity
    /// mask). Not each rank's own mask: a rank pinned to one core must not conclude that the
    /// machine has one core and start parking.
    pub cores: usize,
}

impl JobShape {
    /// A job of `ranks` ranks on one machine with this process's cores.
    pub fn local(ranks: usize, nodes: usize) -> Self {
        JobShape {
            world_size: ranks,
            nodes: nodes.clamp(1, ranks.max(1)),
            ranks_on_machine: ranks,
            cores: crate::sys::available_cores(),
        }
    }
}

/// A mapped job segment.
#[derive(Debug)]
pub struct Segment {
    map: Mapping,
    // Keeps the descriptor open in the launcher so that it can be passed to children.
    fd: Option<OwnedFd>,
    /// This process's outside progress engine (MPI's, set by `barrier-mpi`): every communicator
    /// made on this segment in this process calls it while it waits (see `wait`'s module docs).
    progress: std::sync::OnceLock<crate::wait::Progress>,
    /// How this segment's ranks are known outside it (`barrier-mpi`'s MPI ranks), for stall
    /// reports, which are printed where they happen.
    names: std::sync::OnceLock<RankNames>,
    /// Communicators alive in this process, per world rank (thread mode: whether a rank whose
    /// thread returned still has one, moved to another thread).
    live: std::sync::OnceLock<Box<[std::sync::atomic::AtomicUsize]>>,
}

/// How the ranks of a segment are known outside it: under `barrier-mpi` a node's segment numbers
/// the node's ranks from 0, while the user knows them by their `MPI_COMM_WORLD` ranks and their
/// ranks in the MPI communicator. Stall reports (printed by the waiting rank itself) use these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankNames {
    /// The `MPI_COMM_WORLD` rank of each of the segment's ranks.
    pub world: Vec<usize>,
    /// The rank in the user's communicator of each of the segment's ranks.
    pub comm: Vec<usize>,
    /// Ranks in the user's communicator.
    pub comm_size: usize,
    /// The segment is one node of a hierarchical barrier: every user barrier is two barriers
    /// here (the node's gather, odd numbers, and its release by the node's first rank after the
    /// internode phase, even numbers).
    pub hierarchical: bool,
}

impl Segment {
    fn header(&self) -> &Header {
        // SAFETY: every constructor maps at least HEADER_BYTES, the base is page aligned, and the
        // header consists of atomics, for which any bit pattern (zero included) is valid.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    fn total_len(shape: &JobShape, pool: usize) -> usize {
        // The blocks `init` allocates, as the allocator rounds them, so the pool stays whole.
        let world = block_bytes(crate::region::RegionLayout::new(shape.world_size).total);
        let table = block_bytes(shape.world_size.max(1) * RANK_WORDS * 8);
        (HEADER_BYTES + world + table + pool).next_multiple_of(4096)
    }

    fn init(&self, shape: &JobShape) -> Result<()> {
        let h = self.header();
        h.len.store(self.map.len() as u64, Ordering::Relaxed);
        h.version.store(LAYOUT_VERSION, Ordering::Relaxed);
        h.world_size.store(shape.world_size as u64, Ordering::Relaxed);
        h.nodes.store(shape.nodes as u64, Ordering::Relaxed);
        h.ranks_on_machine.store(shape.ranks_on_machine as u64, Ordering::Relaxed);
        h.cores.store(shape.cores as u64, Ordering::Relaxed);
        h.bump.store(HEADER_BYTES as u64, Ordering::Relaxed);
        let world = self.alloc(crate::region::RegionLayout::new(shape.world_size).total)?;
        h.world_region.store(world as u64, Ordering::Relaxed);
        let table = self.alloc(shape.world_size.max(1) * RANK_WORDS * 8)?;
        h.rank_table.store(table as u64, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(())
    }

    fn with_world_region(seg: Segment, shape: &JobShape) -> Arc<Self> {
        let seg = Arc::new(seg);
        crate::region::Region::init_at(&seg, seg.world_region(), shape.world_size);
        seg
    }

    /// An anonymous segment for thread mode or a singleton program.
    pub fn anonymous(shape: JobShape, pool: usize) -> Result<Arc<Self>> {
        let len = Self::total_len(&shape, pool);
        let map = Mapping::anonymous(len).map_err(|e| Error::io(format!("mapping {len} bytes of shared memory"), e))?;
        let seg = Segment { map, fd: None, progress: std::sync::OnceLock::new(), names: std::sync::OnceLock::new(), live: std::sync::OnceLock::new() };
        seg.init(&shape)?;
        Ok(Self::with_world_region(seg, &shape))
    }

    /// A named segment for a launched job: created 0600 and exclusive, then unlinked at once.
    /// The returned segment keeps the descriptor (close-on-exec); the launcher passes
    /// [`Segment::raw_fd`] to the ranks it starts, and to nothing else.
    pub fn create_for_job(shape: JobShape, pool: usize) -> Result<Arc<Self>> {
        let len = Self::total_len(&shape, pool);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = format!("/barrier-{}-{nanos:x}", std::process::id());
        let fd = sys::shm_create(&name, len)
            .map_err(|e| Error::io(format!("creating shared segment {name} ({len} bytes)"), e))?;
        // Unlink before anything else can fail: from here on nothing can be left behind.
        sys::shm_unlink(&name).map_err(|e| Error::io(format!("unlinking {name}"), e))?;
        let map =
            Mapping::map_fd(fd.as_raw_fd(), len).map_err(|e| Error::io(format!("mapping shared segment {name}"), e))?;
        let seg = Segment { map, fd: Some(fd), progress: std::sync::OnceLock::new(), names: std::sync::OnceLock::new(), live: std::sync::OnceLock::new() };
        seg.init(&shape)?;
        Ok(Self::with_world_region(seg, &shape))
    }

    /// Maps the segment behind an inherited descriptor and checks its header.
    pub fn from_fd(fd: RawFd) -> Result<Arc<Self>> {
        const NOT_A_RANK: &str = "a process started by a rank inherits its BARRIER_* environment but not \
             the job; only the processes `barrier run` starts are ranks";
        Self::map_checked(fd, &format!("BARRIER_SHM_FD={fd}"), NOT_A_RANK, Error::Bootstrap)
    }

    /// Maps the segment that process `pid` holds open as descriptor `fd` (a segment made by
    /// [`Segment::create_for_job`], already unlinked): how ranks that were not started by one
    /// launcher (MPI ranks of one node) share the segment one of them made. Opens
    /// `/proc/<pid>/fd/<fd>`, which needs the same user as `pid`; the mapping outlives the
    /// descriptor, which is closed before this returns. `identity` is what the creator's
    /// [`Segment::identity`] says: a process of another PID namespace with the same number
    /// cannot hand over another segment.
    pub fn open_from_process(pid: u32, fd: RawFd, identity: (u64, u64)) -> Result<Arc<Self>> {
        let path = format!("/proc/{pid}/fd/{fd}");
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).map_err(|e| {
            Error::io(format!("opening the node's shared segment through {path} (held by process {pid})"), e)
        })?;
        let found = sys::fd_identity(file.as_raw_fd()).map_err(|e| Error::io(format!("fstat of {path}"), e))?;
        if found != identity {
            return Err(Error::Setup(format!(
                "{path} is not the segment the node's first rank made (device and inode {found:?}, expected \
                 {identity:?}): the ranks of one node must see the same processes (one PID namespace)"
            )));
        }
        Self::map_checked(
            file.as_raw_fd(),
            &path,
            "the process that made the node's segment must run as the same user on the same machine",
            Error::Setup,
        )
    }

    /// Maps and checks; `error` makes the error for a segment that is not what it should be.
    fn map_checked(fd: RawFd, what: &str, hint: &str, error: fn(String) -> Error) -> Result<Arc<Self>> {
        let len = sys::fd_len(fd).map_err(|e| {
            if e.raw_os_error() == Some(libc::EBADF) {
                error(format!("{what} is not an open descriptor in this process ({hint})"))
            } else {
                Error::io(format!("fstat of {what}"), e)
            }
        })?;
        if len < HEADER_BYTES {
            return Err(error(format!("{what} is {len} bytes, too small for a job segment ({hint})")));
        }
        let map = Mapping::map_fd(fd, len).map_err(|e| Error::io(format!("mapping {what}"), e))?;
        let seg = Segment { map, fd: None, progress: std::sync::OnceLock::new(), names: std::sync::OnceLock::new(), live: std::sync::OnceLock::new() };
        if seg.header().magic.load(Ordering::Acquire) != MAGIC {
            return Err(error(format!("{what} is not a barrier job segment ({hint})")));
        }
        let version = seg.header().version.load(Ordering::Relaxed);
        if version != LAYOUT_VERSION {
            return Err(error(format!(
                "{what} is a job segment of layout version {version}, but this program's barrier library \
                 expects version {LAYOUT_VERSION}; rebuild every program of the job (and the `barrier` command) \
                 from the same release"
            )));
        }
        Ok(Arc::new(seg))
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Never true: a segment always holds at least its header.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The device and inode of a segment made by [`Segment::create_for_job`] (see
    /// [`Segment::open_from_process`]).
    pub fn identity(&self) -> Option<(u64, u64)> {
        self.fd.as_ref().and_then(|f| sys::fd_identity(f.as_raw_fd()).ok())
    }

    /// The descriptor of a segment made by [`Segment::create_for_job`].
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Makes every communicator created on this segment from now on, in this process, call
    /// `progress` on the slow path of its waits (MPI's progress engine under `barrier-mpi`: a
    /// rank waiting in a barrier must let MPI progress). Set once; a second call is ignored.
    pub fn set_progress(&self, progress: crate::wait::Progress) {
        let _ = self.progress.set(progress);
    }

    /// Names this segment's ranks as the user knows them, for stall reports (set once; a
    /// second call is ignored). Errors are renamed by whoever returns them.
    pub fn set_rank_names(&self, names: RankNames) {
        let _ = self.names.set(names);
    }

    /// The names set by [`Segment::set_rank_names`], if any.
    pub fn rank_names(&self) -> Option<&RankNames> {
        self.names.get()
    }

    /// The progress call set by [`Segment::set_progress`], if any.
    pub fn progress(&self) -> Option<crate::wait::Progress> {
        self.progress.get().copied()
    }

    /// The job's shape.
    pub fn shape(&self) -> JobShape {
        let h = self.header();
        JobShape {
            world_size: h.world_size.load(Ordering::Relaxed) as usize,
            nodes: h.nodes.load(Ordering::Relaxed) as usize,
            ranks_on_machine: h.ranks_on_machine.load(Ordering::Relaxed) as usize,
            cores: h.cores.load(Ordering::Relaxed) as usize,
        }
    }

    pub(crate) fn world_region(&self) -> usize {
        self.header().world_region.load(Ordering::Relaxed) as usize
    }

    /// Allocates a zeroed block of at least `bytes` and returns its offset.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<usize> {
        let len = self.map.len();
        let Some(class) = class_of(bytes).filter(|&c| class_lines(c) * CACHE_LINE <= len) else {
            return Err(Error::SegmentFull { needed: bytes, free: self.free_bytes() });
        };
        let size = class_lines(class) * CACHE_LINE;
        let h = self.header();
        let list = &h.free_lists[class];
        let mut head = list.load(Ordering::Acquire);
        loop {
            let index = head & INDEX_MASK;
            // The list lives in shared memory: a block that does not fit is treated as the end.
            let off = index as usize * CACHE_LINE;
            if index == 0 || off.checked_add(size).is_none_or(|end| end > len) {
                break;
            }
            let next = self.at::<AtomicU64>(off).load(Ordering::Acquire) & INDEX_MASK;
            let tag = (head >> INDEX_BITS).wrapping_add(1);
            match list.compare_exchange(head, tag << INDEX_BITS | next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    for word in self.slice::<AtomicU64>(off, size / 8) {
                        word.store(0, Ordering::Relaxed);
                    }
                    h.in_use.fetch_add(size as u64, Ordering::Relaxed);
                    return Ok(off);
                }
                Err(now) => head = now,
            }
        }
        // The bump pointer moves only for a block that fits: a request too large for the rest
        // (refused) must leave the rest to smaller ones, and two ranks allocating near the end at
        // once must not push it past the end for each other (a fetch_add that overshot and was
        // never taken back left the segment reporting itself full for good). It lives in shared
        // memory too: never trust it to be small.
        let mut off = h.bump.load(Ordering::Relaxed);
        loop {
            match (off as usize).checked_add(size) {
                Some(end) if off <= len as u64 && end <= len => {}
                _ => return Err(Error::SegmentFull { needed: size, free: len.saturating_sub(off as usize) }),
            }
            match h.bump.compare_exchange_weak(off, off + size as u64, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    h.in_use.fetch_add(size as u64, Ordering::Relaxed);
                    return Ok(off as usize);
                }
                Err(now) => off = now,
            }
        }
    }

    /// Returns the block at `off`, allocated with [`Segment::alloc`] for `bytes`, for reuse. The
    /// caller guarantees that no rank uses it any more.
    pub(crate) fn free(&self, off: usize, bytes: usize) {
        let Some(class) = class_of(bytes) else { return };
        let h = self.header();
        let list = &h.free_lists[class];
        let mut head = list.load(Ordering::Acquire);
        loop {
            self.at::<AtomicU64>(off).store(head & INDEX_MASK, Ordering::Relaxed);
            let tag = (head >> INDEX_BITS).wrapping_add(1);
            let new = tag << INDEX_BITS | (off / CACHE_LINE) as u64;
            match list.compare_exchange(head, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => head = now,
            }
        }
        h.in_use.fetch_sub((class_lines(class) * CACHE_LINE) as u64, Ordering::Relaxed);
    }

    /// Bytes never handed out yet (the pool beyond the bump pointer; freed blocks come on top).
    pub fn free_bytes(&self) -> usize {
        self.map.len().saturating_sub(self.header().bump.load(Ordering::Relaxed) as usize)
    }

    /// Bytes of the segment in use now (header, world, communicators, windows) and in all.
    pub fn usage(&self) -> (usize, usize) {
        (HEADER_BYTES + self.header().in_use.load(Ordering::Relaxed) as usize, self.map.len())
    }

    fn rank_word(&self, rank: usize, which: usize) -> Option<&AtomicU64> {
        let shape_size = self.header().world_size.load(Ordering::Relaxed) as usize;
        if rank >= shape_size {
            return None;
        }
        let table = self.header().rank_table.load(Ordering::Relaxed) as usize;
        let words = self.slice::<AtomicU64>(table, shape_size * RANK_WORDS);
        Some(&words[rank * RANK_WORDS + which])
    }

    /// Records that this process is world rank `rank`. Fails if another live process already
    /// joined as that rank (a subprocess of a rank that inherited its environment).
    pub fn join(&self, rank: usize) -> Result<()> {
        let me = std::process::id() as u64;
        let word = self.rank_word(rank, JOINED).ok_or_else(|| {
            Error::Bootstrap(format!("rank {rank} is outside this job of {} ranks", self.shape().world_size))
        })?;
        match word.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(()),
            Err(pid) if pid == me => Ok(()),
            Err(pid) => Err(Error::Bootstrap(format!(
                "rank {rank} of this job has already joined as process {pid}, and this is process {me}: a \
                 process started by a rank inherits its BARRIER_* environment but is not a rank itself \
                 (only the processes `barrier run` starts are); unset BARRIER_SHM_FD in the environment \
                 of programs a rank starts, or do not call barrier::init() in them"
            ))),
        }
    }

    /// The pid of the process that joined as world rank `rank`, once it has.
    pub fn joined_pid(&self, rank: usize) -> Option<u64> {
        self.rank_word(rank, JOINED).map(|w| w.load(Ordering::Acquire)).filter(|&pid| pid != 0)
    }

    /// Records that world rank `rank` ended cleanly (the launcher reaped it with status 0, or
    /// its thread returned); members waiting for it then stop waiting (see `watch.rs`).
    pub fn mark_exited(&self, rank: usize, how: RankExit) {
        let code = match how {
            RankExit::Status(c) => (c as u32 as u64) + 1,
            RankExit::Returned => u64::MAX,
        };
        if let Some(word) = self.rank_word(rank, EXITED) {
            if word.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                self.header().exits.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    fn live_counts(&self) -> &[std::sync::atomic::AtomicUsize] {
        self.live.get_or_init(|| (0..self.shape().world_size).map(|_| Default::default()).collect())
    }

    /// Counts a communicator of world rank `rank` made in this process (until
    /// [`Segment::communicator_dropped`]).
    pub(crate) fn communicator_made(&self, rank: usize) {
        if let Some(n) = self.live_counts().get(rank) {
            n.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The communicator counted by [`Segment::communicator_made`] is gone.
    pub(crate) fn communicator_dropped(&self, rank: usize) {
        if let Some(n) = self.live_counts().get(rank) {
            n.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// How many communicators of world rank `rank` are alive in this process.
    pub(crate) fn live_communicators(&self, rank: usize) -> usize {
        self.live_counts().get(rank).map_or(0, |n| n.load(Ordering::Acquire))
    }

    /// How world rank `rank` ended, if it has.
    pub fn exited(&self, rank: usize) -> Option<RankExit> {
        match self.rank_word(rank, EXITED)?.load(Ordering::Acquire) {
            0 => None,
            u64::MAX => Some(RankExit::Returned),
            code => Some(RankExit::Status((code - 1) as u32 as i32)),
        }
    }

    /// How many ranks have been marked exited (cheap test before scanning the table).
    pub(crate) fn exit_count(&self) -> u64 {
        self.header().exits.load(Ordering::Acquire)
    }

    /// A reference to a `T` at `offset`. Panics if it does not fit or is misaligned.
    ///
    /// `T` must be made of atomics (any bit pattern valid, shared mutation through `&`).
    pub(crate) fn at<T: SharedPlain>(&self, offset: usize) -> &T {
        self.slice::<T>(offset, 1).first().expect("one element")
    }

    /// A slice of `count` `T`s at `offset`. Panics if it does not fit or is misaligned.
    pub(crate) fn slice<T: SharedPlain>(&self, offset: usize, count: usize) -> &[T] {
        let size = std::mem::size_of::<T>() * count;
        assert!(offset.checked_add(size).is_some_and(|end| end <= self.map.len()), "shared slice out of bounds");
        assert_eq!(offset % std::mem::align_of::<T>(), 0, "misaligned shared slice");
        // SAFETY: bounds and alignment checked above; the mapping lives as long as `self`; `T` is
        // `SharedPlain`, so zeroed or concurrently written memory is a valid `T` and all mutation
        // goes through its atomics.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(offset) as *const T, count) }
    }

    /// Whether `len` bytes at `offset` lie where communicators' regions and windows live: past
    /// the header, outside the rank table, inside the segment (what a transport accepts as the
    /// target of a peer's handle).
    pub(crate) fn holds_regions(&self, offset: usize, len: usize) -> bool {
        let Some(end) = offset.checked_add(len) else { return false };
        let table = self.header().rank_table.load(Ordering::Relaxed) as usize;
        let table_end = table + block_bytes(self.shape().world_size.max(1) * RANK_WORDS * 8);
        offset >= HEADER_BYTES && end <= self.map.len() && (end <= table || offset >= table_end)
    }

    /// The offset of `value` if it lies inside this segment.
    pub(crate) fn try_offset_of<T>(&self, value: &T) -> Option<usize> {
        let addr = value as *const T as usize;
        let base = self.map.as_ptr() as usize;
        (addr >= base && addr < base + self.map.len()).then(|| addr - base)
    }

    /// The offset of `value`, which must lie inside this segment.
    pub(crate) fn offset_of<T>(&self, value: &T) -> usize {
        let addr = value as *const T as usize;
        let base = self.map.as_ptr() as usize;
        assert!(addr >= base && addr < base + self.map.len(), "value outside the segment");
        addr - base
    }

    /// Marks the job as aborted because `world_rank` failed (the first failure wins).
    pub fn set_abort(&self, world_rank: usize) {
        let _ = self.header().abort.compare_exchange(0, world_rank as u64 + 1, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Marks the job as gone: its launcher died, and every wait ends with [`WaitError::JobGone`].
    pub fn set_job_gone(&self) {
        let _ = self.header().abort.compare_exchange(0, JOB_GONE, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Why the job is being torn down, if it is: the failed world rank, or the launcher's death.
    pub fn abort_state(&self) -> Result<(), WaitError> {
        match self.header().abort.load(Ordering::Acquire) {
            0 => Ok(()),
            JOB_GONE => Err(WaitError::JobGone),
            r => Err(WaitError::Aborted(r as usize - 1)),
        }
    }
}

/// The job-wide part of every wait's watch: the abort word.
impl Watch for Segment {
    fn check(&self, _waited: std::time::Duration) -> Result<(), WaitError> {
        self.abort_state()
    }
}

/// A reference into the job segment that keeps the segment mapped: what modules hold so that
/// the barrier path is one pointer load, with no bounds arithmetic.
pub struct Shared<T: SharedPlain> {
    ptr: std::ptr::NonNull<T>,
    _seg: Arc<Segment>,
}

impl<T: SharedPlain> Shared<T> {
    /// The `T` at `offset` of `seg`. Panics if it does not fit or is misaligned.
    pub(crate) fn new(seg: &Arc<Segment>, offset: usize) -> Self {
        let r: &T = seg.at(offset);
        Shared { ptr: std::ptr::NonNull::from(r), _seg: seg.clone() }
    }
}

impl<T: SharedPlain> std::ops::Deref for Shared<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: `ptr` was checked in bounds and aligned by `Segment::at` and points into the
        // mapping that `_seg` keeps alive; `T: SharedPlain` is valid for any shared bits.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: SharedPlain> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shared({:p})", self.ptr)
    }
}

// SAFETY: the pointee is Sync (SharedPlain: Sync) and the Arc is Send + Sync.
unsafe impl<T: SharedPlain> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: SharedPlain> Sync for Shared<T> {}

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
