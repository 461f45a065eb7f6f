//! The engine's state: the engine itself, what it knows of each group, what an arrival
//! slot holds, and the counts it holds back. The files beside this one add its methods.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier_hw::{control, status, DeviceMap};

use crate::config::Config;
use crate::dev::Dev;

/// Counter increments an inline engine has not written yet (see [`Engine::tally`]).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) arrivals: u64,
    pub(crate) releases: u64,
    pub(crate) barriers: u64,
    pub(crate) busy_ns: u64,
}

/// An inline engine writes its counts at least every this many barriers.
pub(crate) const TALLY_BARRIERS: u64 = 256;

pub(crate) struct Engine {
    pub(crate) tally: Tally,
    /// No faults and no latency configured: arrivals and releases skip their checks.
    pub(crate) plain: bool,
    /// Each group's register offsets, by group.
    pub(crate) regs: Vec<RegsAt>,
    pub(crate) dev: Dev,
    pub(crate) map: &'static DeviceMap,
    pub(crate) config: Config,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) groups: Vec<Group>,
    pub(crate) active: Vec<usize>,
    pub(crate) rng: u64,
    pub(crate) vanished: bool,
    pub(crate) error_stuck: bool,
    pub(crate) last_gc: Instant,
}

pub(crate) fn spin_for(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Per-group engine state: the group's configuration as this engine knows it. The barrier
/// state itself (ARRIVED_MASK, ARRIVAL_COUNT, COMPLETED_EPOCH) lives in the registers, so that
/// every engine of an inline device works on the same state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Group {
    /// The owner id the group had when this engine configured or adopted it.
    pub(crate) owner: u64,
    pub(crate) enabled: bool,
    /// ERROR was raised; the group stays failed until RESET or until it is freed.
    pub(crate) failed: bool,
    pub(crate) members: Vec<usize>,
    /// Each member id's index in `members` (and `release`), [`NOT_A_MEMBER`] for the others;
    /// empty for a group that is not running.
    pub(crate) index: Vec<u32>,
    pub(crate) mask: Vec<u64>,
    /// The one MEMBER_MASK word that holds every member, if there is one: then the arrival
    /// that fills that ARRIVED_MASK word completes the epoch; otherwise ARRIVAL_COUNT decides.
    pub(crate) single_word: Option<usize>,
    /// Each member's release target.
    pub(crate) release: Vec<ReleaseTarget>,
    /// Duplicate releases to send at the next release: (target, epoch).
    pub(crate) duplicates: Vec<(ReleaseTarget, u64)>,
}

/// Where a member is released (the DMA offset of its flag), and the IOMMU mapping that allows
/// it: the entry and its state word when the member's release address was translated. A VALID
/// state word is drawn anew for every claim of an entry (VALID, a random tag, the pid; see
/// [`barrier_hw::IOMMU_STATE`]), and a driver changes an entry only through FREE, so the state
/// word alone says whether that mapping is still the one in place. Every release store checks
/// it: no flag is written through a mapping found removed or replaced.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReleaseTarget {
    pub(crate) flag: u64,
    /// Device offset of the IOMMU entry.
    pub(crate) entry: u64,
    pub(crate) state: u64,
}

/// Device offsets of a group's registers that every barrier touches, worked out once per
/// engine (a trap would otherwise compute each from the map at every access).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RegsAt {
    pub(crate) owner: u64,
    pub(crate) control: u64,
    pub(crate) status: u64,
    pub(crate) completed_epoch: u64,
    pub(crate) arrival_count: u64,
    /// ARRIVED_MASK's first word.
    pub(crate) arrived_mask: u64,
    /// Member 0's arrival slot.
    pub(crate) slots: u64,
}

/// Whether a group whose CONTROL and STATUS read `ctl` and `st` is served: enabled and
/// armed, READY, no ERROR.
#[inline]
pub(crate) fn served(ctl: u64, st: u64) -> bool {
    ctl & (control::ENABLE | control::ARM) == control::ENABLE | control::ARM
        && st & status::READY != 0
        && st & status::ERROR == 0
}

/// [`Group::index`] of an id that is not a member.
pub(crate) const NOT_A_MEMBER: u32 = u32::MAX;

/// The identity word of an arrival slot whose message the device has taken. Member ids stay
/// below 2^32 - 1, so no message carries it: a message is taken once.
pub(crate) const TAKEN: u64 = u64::MAX;

/// What an arrival slot holds, measured against the epoch its group expects.
pub(crate) enum Slot {
    /// Nothing to take: empty, still being written, taken, or a message for an epoch the
    /// group completed already.
    Nothing,
    /// A complete message for the expected epoch: its identity word and the epoch.
    Current { ident: u64, epoch: u64 },
    /// A malformed message, or one for an epoch after the expected one.
    Bad,
}

/// OWNER (or an IOMMU entry's state) while the collector decides whether to free it (no driver
/// id or entry state is all ones).
pub(crate) const FREEING: u64 = u64::MAX;
