//! The segment itself: its header, the job's shape, the mapping and its constructors' lower
//! half (`region.rs` adds the world region: [`Segment::anonymous`]), and typed access to its
//! memory. The allocator is in `alloc.rs`, the rank table and abort word in `ranks.rs`.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::pad::CachePadded;
use crate::sys::{self, Mapping};

use super::classes::{block_bytes, CLASSES};
use super::plain::SharedPlain;
use crate::wait::handover::{Handover, HandoverWords};

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"BARRIER1");
/// Layout version of the header and regions: bumped whenever either changes, so that a launcher
/// and a program built from different versions fail with a clear message instead of misreading
/// each other's memory. (7: a flag parks on a futex word of its own, not the low half of
/// its epoch; 8: the header holds the hand-over's words.)
pub(super) const LAYOUT_VERSION: u64 = 8;
/// Bytes reserved for the header at the start of the segment.
pub(super) const HEADER_BYTES: usize = 4096;
/// Default bytes of the pool for communicators and windows beyond the world region.
pub const DEFAULT_POOL_BYTES: usize = 64 << 20;
/// The most ranks a job can have: every size computed from a rank count stays far from
/// overflowing (and a header that claims more is corrupt).
pub const MAX_RANKS: usize = 1 << 24;

#[repr(C)]
#[derive(Debug)]
pub(super) struct Header {
    pub(super) magic: AtomicU64,
    pub(super) version: AtomicU64,
    pub(super) len: AtomicU64,
    pub(super) world_size: AtomicU64,
    pub(super) nodes: AtomicU64,
    pub(super) ranks_on_machine: AtomicU64,
    pub(super) cores: AtomicU64,
    pub(super) world_region: AtomicU64,
    pub(super) rank_table: AtomicU64,
    pub(super) bump: CachePadded<AtomicU64>,
    /// Bytes handed out and not yet freed (for reports).
    pub(super) in_use: CachePadded<AtomicU64>,
    /// Free list heads, one per size class: `tag << INDEX_BITS | first block index`.
    pub(super) free_lists: [AtomicU64; CLASSES],
    pub(super) abort: CachePadded<AtomicU64>,
    /// Ranks marked in the rank table as exited.
    pub(super) exits: CachePadded<AtomicU64>,
    /// The switch from the barrier a layer had to this segment's ([`Segment::handover`]).
    pub(super) handover: CachePadded<HandoverWords>,
}

/// The abort word's value once the job's launcher is gone.
pub const JOB_GONE: u64 = u64::MAX;

/// Words per world rank in the rank table.
pub(super) const RANK_WORDS: usize = 2;
pub(super) const JOINED: usize = 0;
pub(super) const EXITED: usize = 1;

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

/// The node of world rank `world_rank` among `nodes` nodes (contiguous blocks of ranks).
pub(crate) fn node_of(world_rank: usize, world_size: usize, nodes: usize) -> usize {
    let nodes = nodes.clamp(1, world_size.max(1));
    world_rank * nodes / world_size.max(1)
}

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

/// Where the job's fixed parts are, read once from the header when the segment is mapped and
/// checked against the mapping: nothing in shared memory is trusted as a size or an offset
/// after that (a rank that rewrites the header changes nothing another process computes).
#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    pub(super) shape: JobShape,
    pub(super) world_region: usize,
    pub(super) rank_table: usize,
}

impl Layout {
    /// Bytes of the rank table.
    pub(super) fn table_bytes(&self) -> usize {
        block_bytes(self.shape.world_size.max(1) * RANK_WORDS * 8)
    }
}

/// A mapped job segment.
#[derive(Debug)]
pub struct Segment {
    pub(super) map: Mapping,
    pub(super) layout: Layout,
    // Keeps the descriptor open in the launcher so that it can be passed to children, and in a
    // node's first rank until the node's others have mapped it ([`Segment::release_fd`]).
    pub(super) fd: std::sync::Mutex<Option<OwnedFd>>,
    /// This process's outside progress engine (MPI's, set by `barrier-mpi`): every communicator
    /// made on this segment in this process calls it while it waits (see `wait`'s module docs).
    pub(super) progress: std::sync::OnceLock<crate::wait::Progress>,
    /// How this segment's ranks are known outside it (`barrier-mpi`'s MPI ranks), for stall
    /// reports, which are printed where they happen.
    pub(super) names: std::sync::OnceLock<RankNames>,
    /// Communicators alive in this process, per world rank (thread mode: whether a rank whose
    /// thread returned still has one, moved to another thread).
    pub(super) live: std::sync::OnceLock<Box<[std::sync::atomic::AtomicUsize]>>,
}

/// How the ranks of a segment are known outside it: under `barrier-mpi` a node's segment numbers
/// the node's ranks from 0, while the user knows them by their `MPI_COMM_WORLD` ranks and their
/// ranks in the MPI communicator. Stall reports and the errors of the segment's waits use these
/// (and, for a node of a hierarchical barrier, count the user's barriers, not the node's).
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
    /// A segment over a fresh mapping (and the descriptor behind it, if it keeps one), with
    /// nothing set yet: what every constructor starts from.
    fn over(map: Mapping, fd: Option<OwnedFd>, layout: Layout) -> Segment {
        Segment {
            map,
            layout,
            fd: std::sync::Mutex::new(fd),
            progress: std::sync::OnceLock::new(),
            names: std::sync::OnceLock::new(),
            live: std::sync::OnceLock::new(),
        }
    }

    pub(super) fn header(&self) -> &Header {
        // SAFETY: every constructor maps at least HEADER_BYTES, the base is page aligned, and the
        // header consists of atomics, for which any bit pattern (zero included) is valid.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    /// The bytes of a new segment: refused when a size would overflow (a rank count past
    /// [`MAX_RANKS`], a pool near the address space).
    fn total_len(shape: &JobShape, pool: usize, world_region: usize) -> Result<usize> {
        if shape.world_size > MAX_RANKS {
            return Err(Error::InvalidArgument(format!(
                "{} ranks is more than a job can hold (at most {MAX_RANKS})",
                shape.world_size
            )));
        }
        // The blocks `init` allocates, as the allocator rounds them, so the pool stays whole.
        let world = block_bytes(world_region);
        let table = block_bytes(shape.world_size.max(1) * RANK_WORDS * 8);
        [world, table, pool]
            .iter()
            .try_fold(HEADER_BYTES, |sum, &part| sum.checked_add(part))
            .and_then(|sum| sum.checked_next_multiple_of(4096))
            .filter(|&sum| sum <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "a job segment for {} with a pool of {pool} bytes is larger than this machine can map; \
                     lower BARRIER_SHM_POOL_BYTES",
                    crate::text::count(shape.world_size, "rank")
                ))
            })
    }

    /// A layout to fill in by [`Segment::init`].
    fn unset(shape: JobShape) -> Layout {
        Layout { shape, world_region: 0, rank_table: 0 }
    }

    fn init(&mut self, shape: &JobShape, world_region: usize) -> Result<()> {
        let h = self.header();
        h.len.store(self.map.len() as u64, Ordering::Relaxed);
        h.version.store(LAYOUT_VERSION, Ordering::Relaxed);
        h.world_size.store(shape.world_size as u64, Ordering::Relaxed);
        h.nodes.store(shape.nodes as u64, Ordering::Relaxed);
        h.ranks_on_machine.store(shape.ranks_on_machine as u64, Ordering::Relaxed);
        h.cores.store(shape.cores as u64, Ordering::Relaxed);
        h.bump.store(HEADER_BYTES as u64, Ordering::Relaxed);
        let world = self.alloc(world_region)?;
        let table = self.alloc(shape.world_size.max(1) * RANK_WORDS * 8)?;
        let h = self.header();
        h.world_region.store(world as u64, Ordering::Relaxed);
        h.rank_table.store(table as u64, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        self.layout = Layout { shape: *shape, world_region: world, rank_table: table };
        Ok(())
    }

    /// An anonymous segment for thread mode or a singleton program, with `world_region` bytes
    /// set aside for the world communicator's region (which `region.rs` lays out:
    /// [`Segment::anonymous`]).
    pub(crate) fn map_anonymous(shape: JobShape, pool: usize, world_region: usize) -> Result<Segment> {
        let len = Self::total_len(&shape, pool, world_region)?;
        let map = Mapping::anonymous(len).map_err(|e| Error::io(format!("mapping {len} bytes of shared memory"), e))?;
        let mut seg = Segment::over(map, None, Self::unset(shape));
        seg.init(&shape, world_region)?;
        Ok(seg)
    }

    /// A named segment for a launched job, with `world_region` bytes set aside for the world
    /// communicator's region (which `region.rs` lays out: [`Segment::create_for_job`]).
    pub(crate) fn map_for_job(shape: JobShape, pool: usize, world_region: usize) -> Result<Segment> {
        let len = Self::total_len(&shape, pool, world_region)?;
        // A memfd: no name to collide or be left behind, and not on /dev/shm (see `memfd_sized`).
        let fd = sys::memfd_sized("barrier-job", len)
            .map_err(|e| Error::io(format!("creating the job's shared segment ({len} bytes, memfd)"), e))?;
        let map = Mapping::map_fd(fd.as_raw_fd(), len)
            .map_err(|e| Error::io(format!("mapping the job's shared segment ({len} bytes)"), e))?;
        let mut seg = Segment::over(map, Some(fd), Self::unset(shape));
        seg.init(&shape, world_region)?;
        Ok(seg)
    }

    /// A segment for a job laid out in the memfd `fd` (empty until now, made before the job's
    /// shape was known: see [`Segment::create_for_job_in`]).
    pub(crate) fn map_for_job_in(fd: OwnedFd, shape: JobShape, pool: usize, world_region: usize) -> Result<Segment> {
        let len = Self::total_len(&shape, pool, world_region)?;
        sys::memfd_size(fd.as_raw_fd(), len)
            .map_err(|e| Error::io(format!("sizing the job's shared segment ({len} bytes, memfd)"), e))?;
        let map = Mapping::map_fd(fd.as_raw_fd(), len)
            .map_err(|e| Error::io(format!("mapping the job's shared segment ({len} bytes)"), e))?;
        let mut seg = Segment::over(map, Some(fd), Self::unset(shape));
        seg.init(&shape, world_region)?;
        // Not a segment yet for the others, who map it as soon as it is one: published once
        // the world region is laid out too (`publish`).
        seg.header().magic.store(0, Ordering::Relaxed);
        Ok(seg)
    }

    /// Makes a segment from [`Segment::map_for_job_in`] visible as one to the processes
    /// retrying to map it, once everything they read is written.
    pub(crate) fn publish(&self) {
        self.header().magic.store(MAGIC, Ordering::Release);
    }

    /// The hand-over among this segment's ranks from the barrier their layer had to this
    /// segment's ([`crate::wait::handover`]).
    pub fn handover(&self) -> Handover<'_> {
        Handover::new(&self.header().handover, self.layout.shape.world_size)
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
    pub(super) fn map_checked(fd: RawFd, what: &str, hint: &str, error: fn(String) -> Error) -> Result<Arc<Self>> {
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
        let mut seg = Segment::over(map, None, Self::unset(JobShape::local(1, 1)));
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
        seg.layout = seg.checked_layout().map_err(|why| {
            error(format!(
                "{what} is a corrupt job segment: {why} (a rank of the job wrote over its header); the job cannot \
                 go on"
            ))
        })?;
        Ok(Arc::new(seg))
    }

    /// The header's shape and offsets, checked against the mapping: every size consistent with
    /// its length, every offset inside it, every sum checked.
    fn checked_layout(&self) -> std::result::Result<Layout, String> {
        let h = self.header();
        let word = |w: &AtomicU64| usize::try_from(w.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        let len = self.map.len();
        if word(&h.len) != len {
            return Err(format!("it says it is {} bytes, but it is {len}", word(&h.len)));
        }
        let shape = JobShape {
            world_size: word(&h.world_size),
            nodes: word(&h.nodes),
            ranks_on_machine: word(&h.ranks_on_machine),
            cores: word(&h.cores),
        };
        if !(1..=MAX_RANKS).contains(&shape.world_size) {
            return Err(format!("a job of {} (1 to {MAX_RANKS})", crate::text::count(shape.world_size, "rank")));
        }
        if !(1..=shape.world_size).contains(&shape.nodes) || shape.ranks_on_machine == 0 || shape.cores == 0 {
            return Err(format!("an impossible shape {shape:?}"));
        }
        let layout = Layout { shape, world_region: word(&h.world_region), rank_table: word(&h.rank_table) };
        let inside = |at: usize, bytes: usize, align: usize| {
            at >= HEADER_BYTES && at.is_multiple_of(align) && at.checked_add(bytes).is_some_and(|end| end <= len)
        };
        if !inside(layout.rank_table, layout.table_bytes(), 8) {
            return Err(format!("a rank table at offset {} outside its {len} bytes", layout.rank_table));
        }
        if !inside(layout.world_region, crate::pad::CACHE_LINE, crate::pad::CACHE_LINE) {
            return Err(format!("a world region at offset {} outside its {len} bytes", layout.world_region));
        }
        Ok(layout)
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
        self.fd_lock().as_ref().and_then(|f| sys::fd_identity(f.as_raw_fd()).ok())
    }

    /// The descriptor of a segment made by [`Segment::create_for_job`] (until
    /// [`release_fd`](Self::release_fd)).
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.fd_lock().as_ref().map(|f| f.as_raw_fd())
    }

    /// Closes the descriptor behind the segment; the mapping stays. For a segment another
    /// process opened through this one's descriptor ([`Segment::open_from_process`]), once every
    /// one has: a program that makes thousands of communicators must not keep a descriptor for
    /// each (`ulimit -n`; issue 50 item 3).
    pub fn release_fd(&self) {
        drop(self.fd_lock().take());
    }

    fn fd_lock(&self) -> std::sync::MutexGuard<'_, Option<OwnedFd>> {
        self.fd.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes every communicator created on this segment from now on, in this process, call
    /// `progress` on the slow path of its waits (MPI's progress engine under `barrier-mpi`: a
    /// rank waiting in a barrier must let MPI progress). Set once; a second call is ignored.
    pub fn set_progress(&self, progress: crate::wait::Progress) {
        let _ = self.progress.set(progress);
    }

    /// Names this segment's ranks as the user knows them, for stall reports and errors (set
    /// once; a second call is ignored).
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

    /// The job's shape (as checked when the segment was mapped).
    pub fn shape(&self) -> JobShape {
        self.layout.shape
    }

    pub(crate) fn world_region(&self) -> usize {
        self.layout.world_region
    }

    /// A reference to a `T` at `offset`. Panics if it does not fit or is misaligned.
    ///
    /// `T` must be made of atomics (any bit pattern valid, shared mutation through `&`).
    pub(crate) fn at<T: SharedPlain>(&self, offset: usize) -> &T {
        self.slice::<T>(offset, 1).first().expect("one element")
    }

    /// A slice of `count` `T`s at `offset`. Panics if it does not fit or is misaligned.
    pub(crate) fn slice<T: SharedPlain>(&self, offset: usize, count: usize) -> &[T] {
        let end = std::mem::size_of::<T>().checked_mul(count).and_then(|size| offset.checked_add(size));
        assert!(end.is_some_and(|end| end <= self.map.len()), "shared slice out of bounds");
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
        let table = self.layout.rank_table;
        let table_end = table + self.layout.table_bytes();
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
}
