//! The tail spin, for ranks that park (more ranks than cores) and have nothing left to do after
//! their arrival: the central algorithm and the one-group hardware offload.
//!
//! A rank that has to wait with more ranks than cores yields its core at once, because the rank
//! it waits for may need that core. That is right until every rank that shares its CPU has
//! arrived: from then on none of them can do anything before the release, so a yield only hands
//! the core to a rank that finds nothing and yields it back. Each such hand-off is a context
//! switch on the barrier's critical path (on the 2-core VM measured, a `sched_yield` that
//! switches processes costs about 1.7 us, a bare one 0.6 us), and the release then comes from a
//! rank running on another CPU. A rank that spins instead sees the release at once and goes
//! straight on to its next arrival: one switch fewer per barrier on its CPU. So the rule, like
//! the kernel's mutexes that spin while the owner runs: **spin, for at most
//! `BARRIER_SW_TAIL_SPIN`, when no rank that is still missing last ran on this CPU.**
//!
//! How a rank knows, for communicators of up to 48 ranks whose waiters have nothing left to do
//! after their arrival (the central algorithm; a one-group hardware offload, whose device
//! releases everyone):
//!
//! ```text
//! arrival at e:  cpu[me] = sched_getcpu() + 1          (own line, if changed; 0 = not known)
//!                (the algorithm's own arrival: the counter add, the device store)
//!                seen = mask: tag e: set my bit; older tag: replace it by (e, my bit);
//!                       newer tag (this rank is late): leave it and do not spin
//!                spin = every rank r not in seen has cpu[r] != cpu[me]
//! ```
//!
//! The mask is one word beside the central counter, tagged with the epoch's low 16 bits, so no
//! one has to clear it: the first arrival at `e + 1` replaces `e`'s bits. A rank records its bit
//! after its own arrival, so one that is slow to do so (preempted, or the last arriver of an
//! offload group, whose release the device stored while it was still in its arrival) may find
//! the word already tagged `e + 1`: it leaves the word alone (its bit no longer matters) and
//! does not spin, since it is released already or about to be. Tags compare modulo 2^16. The
//! other way round, a rank that has arrived but not yet recorded itself looks missing: the
//! others may decline a spin, or (if it runs elsewhere) spin a little for nothing.
//!
//! The mask and the CPUs are hints and nothing completes on them: a wrong hint (a rank moved to
//! this CPU since its last arrival, a tag 65536 epochs old) costs at most one bounded spin
//! (once per barrier), after which the wait policy yields as before. A scan stops at the first
//! missing rank on this CPU and is skipped when more than [`SCAN_LIMIT`] ranks are missing
//! (early arrivers almost always share a CPU with one of them). The central algorithm's
//! completing rank records its CPU too, after its release, so that its hint stays fresh.
//!
//! **The escape.** A rank whose missing partner shares its CPU yields to it, which is right,
//! but a communicator whose ranks could each have a CPU (no more ranks than cores) can stay
//! that way for good: with the job's other processes runnable on the other CPUs (a benchmark's
//! idle ranks in MPI's progress loop), the load looks balanced to the kernel and nobody moves,
//! so every barrier is a context switch (issue 41 item 7: 1.6–2.2 µs against 0.06–0.13 µs in
//! launches that placed the pair apart). After [`ESCAPE_AFTER`] waiting arrivals in a row that
//! found a missing rank known to have last run on this CPU, that wait parks at once instead of
//! yielding (`Poll::Pending`'s `park`, honoured where the policy parks; skipping the MPI
//! progress probe before it, which may yield): the kernel places a woken task on an idle CPU
//! where there is one, so the wake that ends the park can move this rank away from its
//! partner. An escape that did not separate them (the next waiting arrival finds a missing
//! rank on this CPU again) doubles the pause before the next one may come, from
//! [`MIN_ESCAPE_PAUSE`] up to [`MAX_ESCAPE_PAUSE`] (by time, not by count: the ranks that keep
//! the other CPUs busy may go to sleep at any moment, and a pair must then separate within a
//! millisecond or two, while a failed escape costs one futex wake, ~15-20 µs on the VM
//! measured: at most 2% of a CPU); one that did (the next waiting arrival arms the spin) resets
//! it. The clock is read once per [`ESCAPE_AFTER`] such arrivals. Only for communicators of
//! at most as many ranks as the machine's cores, in a process that may run on more than one
//! CPU, and only in the central algorithm (the offload's tail spin never escapes: its waits
//! recheck the device in slices).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::pad::CachePadded;
use crate::region::Region;
use crate::shm::Shared;
use crate::wait::tail::{where_missing, Missing};
pub use crate::wait::tail::{DEFAULT_TAIL_SPIN, SCAN_LIMIT};

/// The longest tail spin a setting can ask for: the spin checks neither the timeout nor aborts.
pub const MAX_TAIL_SPIN: Duration = Duration::from_millis(1);
/// Largest communicator with an arrival mask (one bit per rank, beside a 16-bit epoch tag).
pub const MAX_RANKS: usize = crate::wait::tail::MAX_HINTS;
/// The mask's epoch tag: the low 16 bits of the epoch, above the rank bits.
const TAG_MASK: u64 = 0xffff;
/// Tags less than this far ahead (modulo 2^16) are newer, the rest older.
const TAG_HALF: u64 = 0x8000;
/// Arrivals in a row beside a missing rank on this CPU before an escape (and between looks at
/// the clock while escapes pause).
pub const ESCAPE_AFTER: u32 = 32;
/// The pause after the first escape that failed; it doubles with each that fails.
pub const MIN_ESCAPE_PAUSE: Duration = Duration::from_micros(50);
/// The longest pause between escapes.
pub const MAX_ESCAPE_PAUSE: Duration = Duration::from_millis(1);

/// One rank's view of the hints.
#[derive(Debug)]
pub struct TailSpin {
    rank: usize,
    full: u64,
    limit: Duration,
    /// The tagged arrival mask.
    mask: Shared<AtomicU64>,
    /// Every rank's CPU at its last arrival, plus one.
    cpus: Vec<Shared<CachePadded<AtomicU64>>>,
    /// The spin decided at this rank's last arrival.
    armed: bool,
    /// Whether escapes apply: the communicator has no more ranks than the machine has cores.
    may_escape: bool,
    /// Arrivals in a row that found a missing rank on this CPU (up to [`ESCAPE_AFTER`]).
    beside: u32,
    /// When the last escape came, and how long after it the next may (0 after a success).
    last_escape: Option<Instant>,
    escape_pause: Duration,
    /// This rank's wait for its last arrival parks at once (the escape).
    escaping: bool,
}

/// Whether a communicator wants the tail spin: its ranks park because they outnumber the
/// cores (the same on every rank: the job's shape), and it lies on one node. Not for a park
/// policy chosen to save CPU time on a machine with cores to spare.
pub(crate) fn wanted(ctx: &crate::backend::EnableContext<'_>) -> bool {
    let job = ctx.query.job;
    ctx.policy.wakes() && ctx.query.nodes == 1 && job.ranks_on_machine > job.cores
}

impl TailSpin {
    /// The hints of `rank` in `region`, or `None` where they do not apply (more than
    /// [`MAX_RANKS`] ranks, a zero bound, nothing to wait for).
    pub(crate) fn new(region: &Region, rank: usize, limit: Duration) -> Option<Box<TailSpin>> {
        let n = region.size();
        if !(2..=MAX_RANKS).contains(&n) || limit.is_zero() {
            return None;
        }
        let seg = region.segment();
        let at = |word: &AtomicU64| Shared::new(seg, seg.offset_of(word));
        Some(Box::new(TailSpin {
            rank,
            full: u64::MAX >> (64 - n),
            limit,
            mask: at(region.tail_mask()),
            cpus: region.cpus().iter().map(|c| Shared::new(seg, seg.offset_of(c))).collect(),
            armed: false,
            // A rank bound to one CPU cannot be moved by a wake.
            may_escape: n <= seg.shape().cores && crate::sys::available_cores() > 1,
            beside: 0,
            last_escape: None,
            escape_pause: Duration::ZERO,
            escaping: false,
        }))
    }

    /// Called at every arrival at `epoch`, after the algorithm's own (by the central
    /// algorithm's completing rank after its release, with `complete`: it never waits, and
    /// nobody needs its bit, only its CPU for later scans).
    #[inline]
    pub(crate) fn arrived(&mut self, epoch: u64, complete: bool) {
        let cpu = crate::sys::current_cpu().map_or(0, |c| u64::from(c) + 1);
        if complete {
            // (An escape is judged at the next arrival that waits: this one never does.)
            self.armed = false;
            self.record_cpu(cpu);
        } else {
            self.arrived_on(epoch, cpu);
        }
    }

    /// Stores this rank's CPU only when it changed: ranks seldom move, and a line nobody writes
    /// stays in every reader's cache, so the scans of the other ranks cost no cache misses.
    fn record_cpu(&self, cpu: u64) {
        let mine = &self.cpus[self.rank];
        if mine.load(Ordering::Relaxed) != cpu {
            mine.store(cpu, Ordering::Relaxed);
        }
    }

    /// [`TailSpin::arrived`] of a rank that waits, running on `cpu` (plus one; 0: not known).
    fn arrived_on(&mut self, epoch: u64, cpu: u64) {
        self.record_cpu(cpu);
        let tag = epoch & TAG_MASK;
        let bit = 1u64 << self.rank;
        let mut seen = 0;
        let updated = self.mask.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
            // How far the word's epoch is ahead of ours, modulo 2^16.
            let ahead = (word >> MAX_RANKS).wrapping_sub(tag) & TAG_MASK;
            seen = match ahead {
                0 => word | bit,
                1..TAG_HALF => return None,
                _ => (tag << MAX_RANKS) | bit,
            };
            Some(seen)
        });
        // Nobody missing: this is an offload group's last arriver (a central completer never
        // sets its bit), whose release is the device's work, which an inline device has done
        // already and an emulator's engine may need this very CPU for. No spin.
        let missing = self.full & !seen;
        let waits = updated.is_ok() && cpu != 0 && missing != 0;
        let place = if waits { self.where_missing(missing, cpu) } else { Missing::Unknown };
        self.armed = place == Missing::Elsewhere;
        if self.may_escape {
            // Beside: a missing rank is known to have last run on this CPU (not merely unknown,
            // nor too many missing to look).
            self.count_escape(place == Missing::Here);
        }
    }

    /// The escape's bookkeeping at an arrival that waits `beside` a missing rank on this CPU
    /// or not (see the module docs).
    fn count_escape(&mut self, beside: bool) {
        if std::mem::take(&mut self.escaping) {
            // Judge the last escape by where this arrival finds the others.
            if beside {
                self.escape_pause = (self.escape_pause * 2).clamp(MIN_ESCAPE_PAUSE, MAX_ESCAPE_PAUSE);
            } else if self.armed {
                self.escape_pause = Duration::ZERO;
            }
        }
        self.beside = if beside { self.beside + 1 } else { 0 };
        if self.beside >= ESCAPE_AFTER {
            self.beside = 0;
            let now = Instant::now();
            if self.last_escape.is_none_or(|at| now.duration_since(at) >= self.escape_pause) {
                self.last_escape = Some(now);
                self.escaping = true;
            }
        }
    }

    /// Whether the wait for this rank's last arrival should park at once (the escape).
    #[inline]
    pub fn escaping(&self) -> bool {
        self.escaping
    }

    /// How long to spin for the release of the epoch this rank last arrived at, if at all.
    #[inline]
    pub fn spin(&self) -> Option<Duration> {
        self.armed.then_some(self.limit)
    }

    /// Where the ranks in `missing` last arrived, seen from `cpu`.
    fn where_missing(&self, missing: u64, cpu: u64) -> Missing {
        where_missing(missing, cpu, |r| self.cpus[r].load(Ordering::Relaxed))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::shm::{JobShape, Segment};

    #[test]
    fn arrivals_tag_the_mask_and_arm_the_spin_only_when_no_cpu_mate_is_missing() {
        let seg = Segment::anonymous(JobShape::local(3, 1), 1 << 20).unwrap();
        let region = Region::create(&seg, 3).unwrap();
        let limit = Duration::from_micros(50);
        let mut tails: Vec<TailSpin> = (0..3).map(|r| *TailSpin::new(&region, r, limit).unwrap()).collect();
        // Ranks 0 and 1 on one CPU (1, plus one), rank 2 on another (2), as at earlier arrivals.
        let cpu = [1u64, 1, 2];
        for (r, c) in cpu.iter().enumerate() {
            region.cpus()[r].store(*c, Ordering::Relaxed);
        }
        let tag = |e: u64| e << MAX_RANKS;
        // Stale bits of an older epoch (modulo 2^16): replaced, not added to.
        region.tail_mask().store(tag(0xfff0) | 0b111, Ordering::Relaxed);
        // Epoch 1: rank 0 first, its CPU mate is missing: yield.
        tails[0].arrived_on(1, cpu[0]);
        assert_eq!(tails[0].spin(), None);
        assert_eq!(region.tail_mask().load(Ordering::Relaxed), tag(1) | 0b001);
        // Rank 1: only rank 2 is missing, on the other CPU: spin.
        tails[1].arrived_on(1, cpu[1]);
        assert_eq!(tails[1].spin(), Some(limit));
        assert_eq!(region.tail_mask().load(Ordering::Relaxed), tag(1) | 0b011);
        // Rank 2 completes: it never spins and leaves the mask alone.
        tails[2].arrived(1, true);
        assert_eq!(tails[2].spin(), None);
        assert_eq!(region.tail_mask().load(Ordering::Relaxed), tag(1) | 0b011);
        // Epoch 2: rank 2 first; both missing ranks are on the other CPU: spin.
        tails[2].arrived_on(2, cpu[2]);
        assert_eq!(tails[2].spin(), Some(limit));
        assert_eq!(region.tail_mask().load(Ordering::Relaxed), tag(2) | 0b100);
        // A rank late to record epoch 1 (the word holds epoch 2 already): word untouched, no spin.
        tails[1].arrived_on(1, cpu[1]);
        assert_eq!(tails[1].spin(), None);
        assert_eq!(region.tail_mask().load(Ordering::Relaxed), tag(2) | 0b100);
        // Tags compare modulo 2^16: epoch 65537 is newer than 65535, and replaces it.
        region.tail_mask().store(tag(0xffff) | 0b011, Ordering::Relaxed);
        tails[2].arrived_on(0x1_0001, cpu[2]);
        assert_eq!(region.tail_mask().load(Ordering::Relaxed), tag(1) | 0b100);
        region.tail_mask().store(tag(2) | 0b100, Ordering::Relaxed);
        // A rank that cannot tell its CPU never spins; every rank's CPU is kept up to date.
        tails[0].arrived_on(2, 0);
        assert_eq!(tails[0].spin(), None);
        tails[1].arrived_on(2, 2);
        assert_eq!(region.cpus()[1].load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_device_waiter_that_finds_nobody_missing_does_not_spin() {
        let seg = Segment::anonymous(JobShape::local(2, 1), 1 << 20).unwrap();
        let region = Region::create(&seg, 2).unwrap();
        region.cpus()[0].store(1, Ordering::Relaxed);
        region.cpus()[1].store(2, Ordering::Relaxed);
        let mut first = TailSpin::new(&region, 0, DEFAULT_TAIL_SPIN).unwrap();
        let mut last = TailSpin::new(&region, 1, DEFAULT_TAIL_SPIN).unwrap();
        first.arrived_on(1, 1);
        assert_eq!(first.spin(), Some(DEFAULT_TAIL_SPIN));
        last.arrived_on(1, 2);
        assert_eq!(last.spin(), None);
    }

    #[test]
    fn no_hints_where_they_cannot_help() {
        let seg = Segment::anonymous(JobShape::local(2, 1), 1 << 22).unwrap();
        let one = Region::create(&seg, 1).unwrap();
        assert!(TailSpin::new(&one, 0, DEFAULT_TAIL_SPIN).is_none());
        let big = Region::create(&seg, MAX_RANKS + 1).unwrap();
        assert!(TailSpin::new(&big, 0, DEFAULT_TAIL_SPIN).is_none());
        let two = Region::create(&seg, 2).unwrap();
        assert!(TailSpin::new(&two, 0, Duration::ZERO).is_none());
    }

    #[test]
    fn spins_only_when_every_missing_rank_ran_elsewhere() {
        // Ranks 0..8, CPUs (plus one) 1,2,1,2,1,2,1,2: even ranks on CPU 0, odd on CPU 1.
        let cpu_of = |r: usize| 1 + (r as u64 % 2);
        // Rank 0 (CPU 0) sees ranks 1, 3, 5 missing: all on CPU 1.
        assert!(where_missing(0b0010_1010, 1, cpu_of) == Missing::Elsewhere);
        // Rank 7 missing too, and rank 4, on CPU 0: no.
        assert!(where_missing(0b1011_0000, 1, cpu_of) != Missing::Elsewhere);
        // Nobody missing: vacuously true (arrived_on does not spin then).
        assert!(where_missing(0, 2, cpu_of) == Missing::Elsewhere);
        // A rank whose CPU is not known yet counts as here.
        assert!(where_missing(0b10, 1, |_| 0) != Missing::Elsewhere);
        // Too many missing to look at.
        let many = (1u64 << (SCAN_LIMIT + 1)) - 1;
        assert!(where_missing(many << 1, 99, cpu_of) != Missing::Elsewhere);
        assert!(where_missing((1u64 << SCAN_LIMIT) - 1, 99, cpu_of) == Missing::Elsewhere);
    }

    /// The escape: a park at once after ESCAPE_AFTER arrivals beside a missing rank on this
    /// CPU; paused, doubling, after an escape that left them together, not after one that
    /// separated them (the next arrival arms the spin); never where the ranks outnumber the
    /// cores.
    #[test]
    fn escapes_come_after_a_run_beside_the_partner_and_back_off_when_they_fail() {
        let mut shape = JobShape::local(2, 1);
        shape.cores = 2;
        let seg = Segment::anonymous(shape, 1 << 20).unwrap();
        let region = Region::create(&seg, 2).unwrap();
        let mut t = *TailSpin::new(&region, 0, Duration::from_micros(50)).unwrap();
        assert_eq!(t.may_escape, crate::sys::available_cores() > 1);
        // Arrivals beside the partner: the escape at the ESCAPE_AFTER-th only.
        let beside = |t: &mut TailSpin, times: u32| -> Vec<u32> {
            (1..=times)
                .filter(|_| {
                    t.armed = false;
                    t.count_escape(true);
                    t.escaping()
                })
                .collect()
        };
        assert_eq!(beside(&mut t, ESCAPE_AFTER), vec![ESCAPE_AFTER]);
        // Still together after it: the next one waits for the pause (as if just escaped).
        t.count_escape(true);
        assert_eq!(t.escape_pause, MIN_ESCAPE_PAUSE);
        t.last_escape = Some(Instant::now());
        t.escape_pause = Duration::from_secs(60);
        assert_eq!(beside(&mut t, 3 * ESCAPE_AFTER), Vec::<u32>::new());
        // Once the pause is over, the next run of ESCAPE_AFTER escapes.
        t.escape_pause = Duration::ZERO;
        t.beside = 0;
        assert_eq!(beside(&mut t, ESCAPE_AFTER), vec![ESCAPE_AFTER]);
        // Still together: the pause doubles, bounded.
        t.escape_pause = MAX_ESCAPE_PAUSE;
        t.count_escape(true);
        assert_eq!(t.escape_pause, MAX_ESCAPE_PAUSE);
        t.escape_pause = MIN_ESCAPE_PAUSE;
        t.escaping = true;
        t.count_escape(true);
        assert_eq!(t.escape_pause, 2 * MIN_ESCAPE_PAUSE);
        // Apart after one (the spin armed): no pause.
        t.escaping = true;
        t.armed = true;
        t.count_escape(false);
        assert_eq!((t.escape_pause, t.beside, t.escaping()), (Duration::ZERO, 0, false));
        // A run broken by an arrival that does not wait beside anyone starts again.
        beside(&mut t, ESCAPE_AFTER - 1);
        t.armed = false;
        t.count_escape(false);
        assert_eq!(beside(&mut t, ESCAPE_AFTER - 1), Vec::<u32>::new());
        // A completing arrival (it never waits) leaves the escape to be judged by the next
        // arrival that waits.
        t.escaping = true;
        t.arrived(7, true);
        assert!(t.escaping());
        assert_eq!(where_missing(0b10, 3, |_| 3), Missing::Here);
        assert_eq!(where_missing(0b10, 3, |_| 0), Missing::Unknown);
        assert_eq!(where_missing(0b10, 3, |_| 4), Missing::Elsewhere);
        // A rank on this CPU counts even behind one whose CPU is not known.
        assert_eq!(where_missing(0b110, 3, |r| if r == 1 { 0 } else { 3 }), Missing::Here);
        // More ranks than cores: no escapes.
        let mut crowded = JobShape::local(3, 1);
        crowded.cores = 2;
        let seg = Segment::anonymous(crowded, 1 << 20).unwrap();
        let region = Region::create(&seg, 3).unwrap();
        assert!(!TailSpin::new(&region, 0, Duration::from_micros(50)).unwrap().may_escape);
    }
}
