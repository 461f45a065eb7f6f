//! Serving a barrier: the node's barrier (the core library's communicator over the node's
//! segment); across nodes the node's gather (its root learns that every PE of the node has
//! arrived), the roots' dissemination over OpenSHMEM puts, and the node's release (the two
//! halves of `barrier::Communicator::halves`: one gather and one release, not two whole node
//! barriers).

use std::cell::Cell;
use std::ffi::c_ulong;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier::shm::Segment;
use barrier::{Error, Params, Result, Universe};

use crate::progress::call_progress;
use crate::real::Real;

/// One flag per cache line in the internode inbox.
pub(crate) const LINE: usize = 128;

/// The node roots' dissemination: ⌈log2 R⌉ rounds for R nodes; in round `r` root `j` adds one
/// to round-`r` word of root `(j + 2^r) mod R` (`shmem_ulong_atomic_add`, remote; only `j`
/// adds to it, once per barrier, so it counts barriers: barrier `e` sees it reach `e`) and
/// waits until its own round-`r` word reaches the epoch, keeping the implementation
/// progressing. Words only grow: nothing is reset between barriers.
#[derive(Debug)]
pub(crate) struct Rounds {
    real: Real,
    /// This root's inbox: one flag per round, a line each (symmetric).
    inbox: usize,
    /// The partner root's PE per round.
    partners: Vec<i32>,
    /// The root whose signal each round waits for (for errors).
    senders: Vec<usize>,
    timeout: Option<Duration>,
    /// Yield between looks (more PEs than cores on this machine).
    yields: bool,
}

impl Rounds {
    pub(crate) fn new(real: Real, inbox: usize, index: usize, roots: Vec<usize>, params: &Params) -> Rounds {
        let r = roots.len();
        let rounds = barrier::rounds(r);
        Rounds {
            real,
            inbox,
            partners: (0..rounds).map(|k| roots[(index + (1 << k)) % r] as i32).collect(),
            senders: (0..rounds).map(|k| roots[(index + r - (1 << k) % r) % r]).collect(),
            timeout: params.duration("BARRIER_TIMEOUT").ok().flatten(),
            yields: barrier::sys::available_cores() < roots.len(),
        }
    }

    fn slot(&self, round: usize) -> &AtomicU64 {
        // SAFETY: inside this PE's symmetric inbox, one aligned line per round, written only by
        // remote atomic sets (whole words).
        unsafe { &*((self.inbox + round * LINE) as *const AtomicU64) }
    }

    fn run(&self, epoch: u64) -> Result<()> {
        for (round, &partner) in self.partners.iter().enumerate() {
            // One add per barrier from this root alone: the partner's word counts barriers, and
            // two adds need no ordering between them (two sets would: sync_all has no quiet).
            // SAFETY: the partner's inbox line of this round (symmetric address); a remote
            // atomic add of one word.
            unsafe { (self.real.ulong_atomic_add)((self.inbox + round * LINE) as *mut c_ulong, 1, partner) };
            let slot = self.slot(round);
            let start = Instant::now();
            let mut polls: u32 = 0;
            while slot.load(Ordering::Acquire) < epoch {
                call_progress(0);
                polls = polls.wrapping_add(1);
                if self.yields {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                if polls.is_multiple_of(1024) {
                    if let Some(limit) = self.timeout.filter(|&l| start.elapsed() >= l) {
                        return Err(Error::Setup(format!(
                            "the internode phase of barrier {epoch} timed out after {limit:?} in round {round}: the node \
                             root PE {} never signalled (its node, or a PE on it, has not arrived)",
                            self.senders[round]
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// What serves the barriers of a job that agreed to be served.
#[derive(Debug)]
pub(crate) struct Serving {
    // Field order is drop order: the table's window and the node's universe before the segment.
    sets: crate::sets::Sets,
    /// Across nodes: the node's gather and release (made from the node's universe, dropped
    /// before it).
    halves: Option<barrier::Communicator>,
    node: Universe,
    seg: Arc<Segment>,
    local_rank: usize,
    internode: Option<Rounds>,
    epoch: Cell<u64>,
    describe: String,
    /// The node of every PE, and this PE.
    node_of: Vec<usize>,
    me: usize,
    /// Yield while waiting in an active set's barrier (more PEs than cores here), and give up
    /// after this long (`BARRIER_TIMEOUT`).
    yields: bool,
    timeout: Option<Duration>,
}

/// Where the node's PEs are, for [`Serving::new`].
#[derive(Debug)]
pub(crate) struct Place {
    pub local_rank: usize,
    pub node_of: Vec<usize>,
    pub me: usize,
    pub yields: bool,
    pub timeout: Option<Duration>,
}

// SAFETY: the node's universe is used by one thread at a time (the caller holds the library's
// lock around every use); the inbox address is this process's symmetric memory.
unsafe impl Send for Serving {}

impl Serving {
    pub(crate) fn new(
        node: Universe,
        halves: Option<barrier::Communicator>,
        seg: Arc<Segment>,
        place: Place,
        sets: crate::sets::Sets,
        internode: Option<Rounds>,
        describe: String,
    ) -> Serving {
        Serving {
            sets,
            halves,
            node,
            seg,
            local_rank: place.local_rank,
            internode,
            epoch: Cell::new(0),
            describe,
            node_of: place.node_of,
            me: place.me,
            yields: place.yields,
            timeout: place.timeout,
        }
    }

    /// The barrier of an active set whose members all share this PE's node: `Ok(false)` when
    /// it is not such a set (or this PE is not in it, or the node's table is full) and the call
    /// must pass through.
    pub(crate) fn set_barrier(&mut self, start: i32, stride: i32, size: i32) -> Result<bool> {
        let Some(members) = crate::sets::members(start, stride, size, self.node_of.len()) else { return Ok(false) };
        let mine = self.node_of[self.me];
        if !members.contains(&self.me) || members.iter().any(|&pe| self.node_of[pe] != mine) {
            return Ok(false);
        }
        self.sets.barrier(start, stride, size, self.yields, self.timeout)
    }

    /// What runs the barriers, in one line.
    pub(crate) fn describe(&self) -> &str {
        &self.describe
    }

    /// A barrier of every PE (collective): writes before it on any PE are visible after it on
    /// every PE (release on arrival, acquire on departure, through the node's barrier and the
    /// roots' remote sets).
    pub(crate) fn barrier(&self) -> Result<()> {
        let Some(halves) = &self.halves else { return self.node.world().barrier() };
        // The gather: the root returns once its node's PEs have all arrived, the others at once.
        halves.barrier()?;
        if let Some(rounds) = &self.internode {
            let epoch = self.epoch.get() + 1;
            self.epoch.set(epoch);
            if let Err(e) = rounds.run(epoch) {
                // The node's PEs waiting for this root stop at once instead of at their timeout.
                self.seg.set_abort(self.local_rank);
                return Err(e);
            }
        }
        // The release: the root stores it, the others wait for it.
        halves.barrier()
    }
}
