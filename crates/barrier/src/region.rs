//! One communicator's shared region: every line its barrier algorithms and collectives touch.
//!
//! All offsets are whole cache lines; every line has exactly one writer except the counters
//! (`ctrl_count`, `central_count`), which are read-modify-written by all and are the point of
//! the central algorithm. Nothing is ever reset: flags hold epochs, counters only grow.
//!
//! ```text
//! header          magic, size            (written once by the creator)
//! ctrl_count      control-barrier arrivals (collectives during setup)
//! ctrl_release    control-barrier release flag
//! central_count   central counter: arrivals, cumulative; then the tail spin's arrival mask
//! central_release central counter: release flag
//! tourn_release   tournament: champion's release flag
//! fault           epoch at which a rank saw its hardware module fail (0: none)
//! departures      how many ranks have left (dropped) the communicator
//! departed[n]     rank r's last completed epoch + 1 once it left (0: still a member)
//! arrival[n]      rank r's last barrier called (written first in every barrier)
//! sent[n]         hardware modules: the arrivals rank r has sent, as (epoch << 2) | count
//! exchange[n]     rank r's words for allgather (one line each)
//! diss[n][R]      dissemination: round r flag of rank i, written by (i - 2^r) mod n
//! tourn[n][R]     tournament: round r flag of winner i, written by its opponent
//! tree_up[n]      tree: rank i has gathered its subtree
//! tree_down[n]    tree: rank i's parent releases it
//! cpu[n]          tail spin: the CPU rank r ran on at its last arrival (a hint)
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::pad::{CachePadded, CACHE_LINE};
use crate::shm::{JobShape, Segment, Shared, MAX_RANKS};
use crate::wait::Flag;

const REGION_MAGIC: u64 = u64::from_le_bytes(*b"BARREGN1");
/// Words per exchange line.
pub(crate) const EXCHANGE_WORDS: usize = CACHE_LINE / 8;
/// The departed word's flag: the rank left after one of its own calls failed (or while its
/// thread panicked).
const DEPARTED_AFTER_FAILURE: u64 = 1 << 63;
/// The departed word's flag: the rank left while its thread was panicking (with
/// [`DEPARTED_AFTER_FAILURE`]: a barrier may have been cut short).
const DEPARTED_PANICKING: u64 = 1 << 62;
/// The departed word's epoch bits (last completed barrier + 1).
const DEPARTED_EPOCH: u64 = DEPARTED_PANICKING - 1;
/// The exchange word that records the control epoch a rank reached (the others carry
/// allgather payloads).
pub(crate) const CTRL_EPOCH_WORD: usize = EXCHANGE_WORDS - 1;
pub(crate) type ExchangeLine = CachePadded<[AtomicU64; EXCHANGE_WORDS]>;

/// Rounds of a dissemination or tournament barrier over `n` ranks: ⌈log2 n⌉.
pub fn rounds(n: usize) -> usize {
    if n <= 1 {
        0
    } else {
        (usize::BITS - (n - 1).leading_zeros()) as usize
    }
}

/// Offsets (relative to the region base) of every part of a region for `n` ranks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RegionLayout {
    pub n: usize,
    pub rounds: usize,
    header: usize,
    ctrl_count: usize,
    ctrl_release: usize,
    central_count: usize,
    central_release: usize,
    tourn_release: usize,
    fault: usize,
    departures: usize,
    departed: usize,
    arrival: usize,
    sent: usize,
    exchange: usize,
    diss: usize,
    tourn: usize,
    tree_up: usize,
    tree_down: usize,
    cpu: usize,
    pub total: usize,
}

impl RegionLayout {
    pub fn new(n: usize) -> Self {
        let r = rounds(n);
        let mut next = 0usize;
        let mut take = |lines: usize| {
            let at = next;
            next += lines * CACHE_LINE;
            at
        };
        let header = take(1);
        let ctrl_count = take(1);
        let ctrl_release = take(1);
        let central_count = take(1);
        let central_release = take(1);
        let tourn_release = take(1);
        let fault = take(1);
        let departures = take(1);
        let departed = take(n);
        let arrival = take(n);
        let sent = take(n);
        let exchange = take(n);
        let diss = take(n * r);
        let tourn = take(n * r);
        let tree_up = take(n);
        let tree_down = take(n);
        let cpu = take(n);
        RegionLayout {
            n,
            rounds: r,
            header,
            ctrl_count,
            ctrl_release,
            central_count,
            central_release,
            tourn_release,
            fault,
            departures,
            departed,
            arrival,
            sent,
            exchange,
            diss,
            tourn,
            tree_up,
            tree_down,
            cpu,
            total: next,
        }
    }
}

/// A communicator's region inside the job segment.
#[derive(Debug, Clone)]
pub(crate) struct Region {
    seg: Arc<Segment>,
    base: usize,
    layout: RegionLayout,
}

/// The job segment's two constructors live here, beside the world communicator's region they
/// lay out: `shm.rs` maps and allocates but knows nothing of regions (it imports nothing above
/// it).
impl Segment {
    /// An anonymous segment for thread mode or a singleton program, with the world's region.
    pub fn anonymous(shape: JobShape, pool: usize) -> Result<Arc<Segment>> {
        let seg = Segment::map_anonymous(shape, pool, world_region_bytes(shape)?)?;
        Ok(with_world_region(seg, shape.world_size))
    }

    /// A named segment for a launched job: created 0600 and exclusive, then unlinked at once,
    /// with the world's region. The returned segment keeps the descriptor (close-on-exec); the
    /// launcher passes [`Segment::raw_fd`] to the ranks it starts, and to nothing else.
    pub fn create_for_job(shape: JobShape, pool: usize) -> Result<Arc<Segment>> {
        let seg = Segment::map_for_job(shape, pool, world_region_bytes(shape)?)?;
        Ok(with_world_region(seg, shape.world_size))
    }

    /// [`Segment::create_for_job`] in a memfd made earlier ([`crate::sys::memfd_empty`]), whose
    /// descriptor and identity the others already have: how a set-up that must not block offers
    /// its segment in its one exchange, before it knows the node's size.
    pub fn create_for_job_in(fd: std::os::fd::OwnedFd, shape: JobShape, pool: usize) -> Result<Arc<Segment>> {
        let seg = Segment::map_for_job_in(fd, shape, pool, world_region_bytes(shape)?)?;
        let seg = with_world_region(seg, shape.world_size);
        // The others may map it the moment it is a segment: only now, with its world region.
        seg.publish();
        Ok(seg)
    }
}

/// The bytes of the world region of a job of this shape; refused past [`MAX_RANKS`] ranks, where
/// sizes would overflow.
fn world_region_bytes(shape: JobShape) -> Result<usize> {
    if shape.world_size > MAX_RANKS {
        return Err(Error::InvalidArgument(format!(
            "{} ranks is more than a job can hold (at most {MAX_RANKS})",
            shape.world_size
        )));
    }
    Ok(RegionLayout::new(shape.world_size).total)
}

/// Shares a new segment and writes its world region's header.
fn with_world_region(seg: Segment, world_size: usize) -> Arc<Segment> {
    let seg = Arc::new(seg);
    Region::init_at(&seg, seg.world_region(), world_size);
    seg
}

#[repr(C)]
struct RegionHeader {
    magic: AtomicU64,
    size: AtomicU64,
}
// SAFETY: repr(C) of atomics.
unsafe impl crate::shm::SharedPlain for RegionHeader {}

impl Region {
    /// Allocates and initializes a new region for `n` ranks (done by one rank, the creator).
    pub fn create(seg: &Arc<Segment>, n: usize) -> Result<Region> {
        let layout = RegionLayout::new(n);
        let base = seg.alloc(layout.total)?;
        let region = Region { seg: seg.clone(), base, layout };
        region.write_header();
        Ok(region)
    }

    /// Writes the header of a region whose memory is already allocated (the world region).
    fn init_at(seg: &Arc<Segment>, base: usize, n: usize) -> Region {
        let region = Region { seg: seg.clone(), base, layout: RegionLayout::new(n) };
        region.write_header();
        region
    }

    fn write_header(&self) {
        let h: &RegionHeader = self.seg.at(self.base + self.layout.header);
        h.size.store(self.layout.n as u64, Ordering::Relaxed);
        h.magic.store(REGION_MAGIC, Ordering::Release);
    }

    /// Attaches to a region another rank created, checking it was made for `n` ranks.
    pub fn attach(seg: &Arc<Segment>, base: usize, n: usize) -> Result<Region> {
        let layout = RegionLayout::new(n);
        // The offset came through shared memory (another rank's exchange line): a region lies
        // on whole cache lines, past the header, clear of the rank table, inside the segment.
        if n > MAX_RANKS || !base.is_multiple_of(CACHE_LINE) || !seg.holds_regions(base, layout.total) {
            return Err(Error::Bootstrap(format!(
                "region offset {base} for {n} ranks is not a place for a communicator's region in the job segment"
            )));
        }
        let region = Region { seg: seg.clone(), base, layout };
        let h: &RegionHeader = seg.at(base + layout.header);
        let magic = h.magic.load(Ordering::Acquire);
        let size = h.size.load(Ordering::Relaxed);
        if magic != REGION_MAGIC || size != n as u64 {
            return Err(Error::Bootstrap(format!(
                "region at offset {base} is not a communicator of {n} ranks (magic {magic:#x}, size {size})"
            )));
        }
        Ok(region)
    }

    pub fn base(&self) -> usize {
        self.base
    }
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }
    pub fn size(&self) -> usize {
        self.layout.n
    }
    pub fn rounds(&self) -> usize {
        self.layout.rounds
    }

    /// A segment-holding reference to one of this region's flags.
    pub fn shared_flag(&self, flag: &Flag) -> Shared<Flag> {
        Shared::new(&self.seg, self.seg.offset_of(flag))
    }

    /// A segment-holding reference to one of this region's counters.
    pub fn shared_counter(&self, counter: &AtomicU64) -> Shared<AtomicU64> {
        Shared::new(&self.seg, self.seg.offset_of(counter))
    }

    fn flag(&self, off: usize) -> &Flag {
        self.seg.at(self.base + off)
    }
    fn flags(&self, off: usize, count: usize) -> &[Flag] {
        self.seg.slice(self.base + off, count)
    }

    pub fn ctrl_count(&self) -> &AtomicU64 {
        self.seg.at(self.base + self.layout.ctrl_count)
    }
    pub fn ctrl_release(&self) -> &Flag {
        self.flag(self.layout.ctrl_release)
    }
    pub fn central_count(&self) -> &AtomicU64 {
        self.seg.at(self.base + self.layout.central_count)
    }
    /// The tail spin's arrival mask (communicators of up to 48 ranks): the low 48 bits hold
    /// one bit per rank that arrived, the high 16 the epoch they arrived at (its low bits). A
    /// hint, never what a barrier completes on; it shares the central counter's line, which a
    /// central arrival already holds.
    pub fn tail_mask(&self) -> &AtomicU64 {
        self.seg.at(self.base + self.layout.central_count + 8)
    }
    /// The CPU each rank ran on at its last arrival (a tail-spin hint).
    pub fn cpus(&self) -> &[CachePadded<AtomicU64>] {
        self.seg.slice(self.base + self.layout.cpu, self.layout.n)
    }
    pub fn central_release(&self) -> &Flag {
        self.flag(self.layout.central_release)
    }
    pub fn tourn_release(&self) -> &Flag {
        self.flag(self.layout.tourn_release)
    }
    /// Raised (to the epoch at which it happened) by any rank that saw its hardware module fail;
    /// from then on every rank of the communicator completes barriers in software.
    pub fn fault(&self) -> &Flag {
        self.flag(self.layout.fault)
    }
    pub fn arrivals(&self) -> &[Flag] {
        self.flags(self.layout.arrival, self.layout.n)
    }
    /// Hardware modules: what each rank has sent to the device, as `(epoch << 2) | sends`.
    pub fn sent(&self) -> &[Flag] {
        self.flags(self.layout.sent, self.layout.n)
    }
    pub fn exchange(&self) -> &[ExchangeLine] {
        self.seg.slice(self.base + self.layout.exchange, self.layout.n)
    }
    /// Dissemination flag of `rank` for `round`.
    pub fn diss(&self, rank: usize, round: usize) -> &Flag {
        &self.flags(self.layout.diss, self.layout.n * self.layout.rounds)[rank * self.layout.rounds + round]
    }
    /// Every dissemination flag of `rank`, round 0 first (what it registers for its peers).
    pub fn diss_row(&self, rank: usize) -> &[Flag] {
        let r = self.layout.rounds;
        &self.flags(self.layout.diss, self.layout.n * r)[rank * r..rank * r + r]
    }
    /// Tournament flag of winner `rank` for `round`.
    pub fn tourn(&self, rank: usize, round: usize) -> &Flag {
        &self.flags(self.layout.tourn, self.layout.n * self.layout.rounds)[rank * self.layout.rounds + round]
    }
    pub fn tree_up(&self) -> &[Flag] {
        self.flags(self.layout.tree_up, self.layout.n)
    }
    pub fn tree_down(&self) -> &[Flag] {
        self.flags(self.layout.tree_down, self.layout.n)
    }

    fn departed_words(&self) -> &[CachePadded<AtomicU64>] {
        self.seg.slice(self.base + self.layout.departed, self.layout.n)
    }

    /// Records that `rank` left the communicator after completing barrier `completed`: from
    /// now on members waiting for it at a later barrier, or in a collective it never reached,
    /// stop waiting (see `watch.rs`). `after_failure`: it left because one of its own calls on
    /// the communicator had failed (a consequence, not a cause: reports prefer other ranks).
    pub fn depart(&self, rank: usize, completed: u64, after_failure: bool) {
        self.record_departure(rank, completed, if after_failure { DEPARTED_AFTER_FAILURE } else { 0 });
    }

    /// [`Region::depart`] for a rank whose thread is panicking: it counts as leaving after a
    /// failure, and reports say it panicked.
    pub fn depart_panicking(&self, rank: usize, completed: u64) {
        self.record_departure(rank, completed, DEPARTED_AFTER_FAILURE | DEPARTED_PANICKING);
    }

    fn record_departure(&self, rank: usize, completed: u64, flags: u64) {
        let value = (completed + 1).min(DEPARTED_EPOCH) | flags;
        if self.departed_words()[rank].compare_exchange(0, value, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let departures = self.seg.at::<CachePadded<AtomicU64>>(self.base + self.layout.departures);
            let gone = departures.fetch_add(1, Ordering::AcqRel) + 1;
            // The last member out frees the region (the world region belongs to the job).
            if gone == self.layout.n as u64 && self.base != self.seg.world_region() {
                self.seg.free(self.base, self.layout.total);
            }
        }
    }

    /// Whether `rank` left while its thread was panicking.
    pub fn departed_panicking(&self, rank: usize) -> bool {
        self.departed_words()[rank].load(Ordering::Acquire) & DEPARTED_PANICKING != 0
    }

    /// How many members have left (cheap test before scanning).
    pub fn departures(&self) -> u64 {
        self.seg.at::<CachePadded<AtomicU64>>(self.base + self.layout.departures).load(Ordering::Acquire)
    }

    /// The last barrier `rank` completed before it left, and whether it left after one of its
    /// own calls failed; `None` while it is a member.
    pub fn departed(&self, rank: usize) -> Option<(u64, bool)> {
        match self.departed_words()[rank].load(Ordering::Acquire) {
            0 => None,
            d => Some(((d & DEPARTED_EPOCH).saturating_sub(1), d & DEPARTED_AFTER_FAILURE != 0)),
        }
    }

    /// The control epoch `rank` has reached (it arrived at that control barrier).
    pub fn ctrl_reached(&self, rank: usize) -> u64 {
        self.exchange()[rank].0[CTRL_EPOCH_WORD].load(Ordering::Acquire)
    }

    /// Records that this rank arrived at control epoch `e`.
    pub fn ctrl_arrive(&self, rank: usize, e: u64) {
        self.exchange()[rank].0[CTRL_EPOCH_WORD].store(e, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region's offset comes through shared memory: one that is not on a whole cache line,
    /// lies in the header or the rank table, or runs past the end is refused, not used.
    #[test]
    fn a_region_offset_from_shared_memory_is_checked() {
        let seg = Segment::anonymous(JobShape::local(2, 1), 1 << 20).unwrap();
        let region = Region::create(&seg, 3).unwrap();
        assert!(Region::attach(&seg, region.base(), 3).is_ok());
        for bad in [region.base() + 8, region.base() + 64, 0, 64, seg.len() - CACHE_LINE, usize::MAX - 7] {
            assert!(Region::attach(&seg, bad, 3).is_err(), "offset {bad}");
        }
        assert!(Region::attach(&seg, region.base(), MAX_RANKS + 1).is_err());
    }

    #[test]
    fn rounds_is_ceil_log2() {
        let expect = [(0, 0), (1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4), (13, 4), (1000, 10)];
        for (n, r) in expect {
            assert_eq!(rounds(n), r, "n={n}");
        }
    }

    #[test]
    fn layout_parts_do_not_overlap() {
        for n in [1, 2, 3, 5, 8, 13, 64] {
            let l = RegionLayout::new(n);
            let r = l.rounds;
            let mut parts = vec![
                (l.header, 1),
                (l.ctrl_count, 1),
                (l.ctrl_release, 1),
                (l.central_count, 1),
                (l.central_release, 1),
                (l.tourn_release, 1),
                (l.fault, 1),
                (l.departures, 1),
                (l.departed, n),
                (l.arrival, n),
                (l.sent, n),
                (l.exchange, n),
                (l.diss, n * r),
                (l.tourn, n * r),
                (l.tree_up, n),
                (l.tree_down, n),
                (l.cpu, n),
            ];
            parts.retain(|p| p.1 > 0);
            parts.sort();
            for w in parts.windows(2) {
                assert!(w[0].0 + w[0].1 * CACHE_LINE <= w[1].0, "n={n}: {w:?}");
            }
            let last = parts.last().unwrap();
            assert_eq!(last.0 + last.1 * CACHE_LINE, l.total);
        }
    }
}
