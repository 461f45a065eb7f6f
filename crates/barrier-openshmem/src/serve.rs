//! Serving a barrier: the node's barrier (the core library's communicator over the node's
//! segment); across nodes the core's composer ([`barrier::hierarchy`]) over the node's halves
//! and the roots' link this file provides: OpenSHMEM atomics into a symmetric inbox.
//!
//! Threads: a barrier of every PE holds the library's lock (one thread of a PE in it at a
//! time, as OpenSHMEM asks of collectives on one team); an active-set barrier takes no lock
//! through its wait (its table is shared atomics, [`SetServing`] is shared by reference), so a thread in one never keeps another
//! thread of the same PE out of the other (issue 40 item 4: a lock held through the whole wait
//! deadlocked a program that OpenSHMEM alone completes).

use std::ffi::c_ulong;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use barrier::hierarchy::{Hierarchy, OwnBarrier, RootsLink};
use barrier::shm::Segment;
use barrier::{Error, Universe};

use crate::progress::call_progress;
use crate::real::Real;
use crate::waits::{pe_list, Result, Waits};

/// One flag per cache line in the internode inbox.
pub const LINE: usize = 128;

/// The node roots' link over OpenSHMEM: in round `r` root `j` adds one to round-`r` word of
/// root `(j + 2^r) mod R` (`shmem_ulong_atomic_add`, remote; only `j` adds to it, once per
/// barrier, so it counts barriers: barrier `e` sees it reach `e`, and two adds need no ordering
/// between them, as two puts would: sync_all has no quiet). Words only grow: nothing is reset
/// between barriers. The composer runs the rounds and their waits, calling the
/// implementation's progress while it polls.
///
/// Departures: after the round lines the inbox holds a word per root. A root that calls
/// `shmem_finalize` adds (the barriers it completed + 1) to its word in every other root's
/// inbox, once. A root waiting in barrier `e` that finds a word below `e + 1` knows that root
/// will never arrive, and fails at once, naming it, instead of waiting for ever.
#[derive(Debug)]
pub struct ShmemRoots {
    real: Real,
    /// This root's inbox: one flag per round, a line each, then a word per root (symmetric).
    inbox: usize,
    /// This root's index among the roots, and every root's PE.
    index: usize,
    roots: Vec<usize>,
    /// The partner root's PE per round.
    partners: Vec<i32>,
    /// The PEs of each root's node (for reports).
    node_pes: Vec<Vec<usize>>,
    me: usize,
}

impl ShmemRoots {
    /// Bytes of a root's inbox for `roots` nodes.
    pub fn inbox_bytes(roots: usize) -> usize {
        barrier::rounds(roots) * LINE + roots * 8
    }

    pub fn new(
        real: Real,
        inbox: usize,
        index: usize,
        roots: Vec<usize>,
        node_pes: Vec<Vec<usize>>,
        me: usize,
    ) -> ShmemRoots {
        let r = roots.len();
        let rounds = barrier::rounds(r);
        ShmemRoots {
            real,
            inbox,
            index,
            partners: (0..rounds).map(|k| roots[(index + (1 << k)) % r] as i32).collect(),
            roots,
            node_pes,
            me,
        }
    }

    /// How the composer's reports name this root and the others.
    pub fn names(&self, size: usize) -> barrier::hierarchy::Names {
        barrier::hierarchy::Names {
            layer: "barrier-shmem",
            member: "PE",
            me: format!("PE {}", self.me),
            index: self.index,
            rank: self.me,
            world_rank: self.me,
            size,
            roots: self
                .roots
                .iter()
                .zip(&self.node_pes)
                .map(|(pe, node)| format!("the node root PE {pe} (its node: PEs {})", pe_list(node)))
                .collect(),
            root_ranks: self.roots.iter().map(|&pe| (pe, pe)).collect(),
            limit: "BARRIER_TIMEOUT".into(),
            setting: crate::settings::INTERNODE,
            flat: false,
        }
    }

    fn slot(&self, round: usize) -> &AtomicU64 {
        // SAFETY: inside this PE's symmetric inbox, one aligned line per round, written only by
        // remote atomic adds (whole words).
        unsafe { &*((self.inbox + round * LINE) as *const AtomicU64) }
    }

    /// The address of root `j`'s departure word (in any root's inbox: symmetric).
    fn departure_word(&self, j: usize) -> usize {
        self.inbox + self.partners.len() * LINE + j * 8
    }

    /// Tells every other root that this one leaves after `completed` barriers (at finalize).
    pub fn depart(&self, completed: u64) {
        for (j, &pe) in self.roots.iter().enumerate() {
            if j != self.index {
                // SAFETY: root j's inbox word for this root (symmetric address); a remote
                // atomic add of one word, made once.
                unsafe {
                    (self.real.ulong_atomic_add)(
                        self.departure_word(self.index) as *mut c_ulong,
                        completed + 1,
                        pe as i32,
                    )
                };
            }
        }
        // SAFETY: completes this PE's adds before it goes on into the implementation's finalize.
        unsafe { (self.real.quiet)() };
    }
}

impl RootsLink for ShmemRoots {
    #[inline]
    fn signal(&self, round: usize, _epoch: u64) -> barrier::Result<()> {
        // SAFETY: the partner's inbox line of this round (symmetric address); a remote atomic
        // add of one word.
        unsafe { (self.real.ulong_atomic_add)((self.inbox + round * LINE) as *mut c_ulong, 1, self.partners[round]) };
        Ok(())
    }

    #[inline]
    fn reached(&self, round: usize, epoch: u64) -> bool {
        self.slot(round).load(Ordering::Acquire) >= epoch
    }

    #[inline]
    fn progress(&self) -> barrier::Result<()> {
        call_progress(0);
        Ok(())
    }

    fn departed(&self, epoch: u64) -> Option<Error> {
        (0..self.roots.len()).filter(|&j| j != self.index).find_map(|j| {
            // SAFETY: inside this PE's inbox (see `departure_word`), written by remote adds.
            let word = unsafe { &*(self.departure_word(j) as *const AtomicU64) }.load(Ordering::Acquire);
            (word != 0 && word - 1 < epoch).then(|| Error::RankLeft {
                rank: self.roots[j],
                world_rank: self.roots[j],
                during: format!("barrier {epoch}"),
                how: format!(
                    "(the node root of PEs {}) called shmem_finalize after {} barrier(s)",
                    pe_list(&self.node_pes[j]),
                    word - 1
                ),
            })
        })
    }
}

/// The implementation's own `shmem_barrier_all`, among the roots where every node has one PE
/// (the roots are every PE).
#[derive(Debug)]
pub struct ShmemOwn(pub Real);

impl OwnBarrier for ShmemOwn {
    fn name(&self) -> &'static str {
        "shmem_barrier_all"
    }

    fn barrier(&self) -> barrier::Result<()> {
        // SAFETY: the implementation's barrier, called by every PE in the same order. (Timed
        // against our rounds alone: the quiet that a served shmem_barrier_all adds before either
        // is left out of both.)
        unsafe { (self.0.barrier_all)() };
        Ok(())
    }
}

/// Active-set barriers of sets inside this PE's node. Shared by reference: a thread waits in
/// one holding no lock.
#[derive(Debug)]
pub struct SetServing {
    pub(crate) sets: crate::sets::Sets,
    /// The node of every PE, and this PE.
    pub(crate) node_of: Vec<usize>,
    pub(crate) me: usize,
    pub(crate) waits: Waits,
}

impl SetServing {
    /// The barrier of an active set whose members all share this PE's node: `Ok(false)` when
    /// it is not such a set (or this PE is not in it, or the node's table is full) and the call
    /// must pass through.
    pub fn set_barrier(&self, start: i32, stride: i32, size: i32) -> Result<bool> {
        let Some(members) = crate::sets::members(start, stride, size, self.node_of.len()) else { return Ok(false) };
        let mine = self.node_of[self.me];
        if !members.contains(&self.me) || members.iter().any(|&pe| self.node_of[pe] != mine) {
            return Ok(false);
        }
        self.sets.barrier(&members, (start, stride, size), self.me, self.waits)
    }

    /// This PE calls `shmem_finalize`: a member waiting for it in a set learns it at once.
    pub fn depart(&self) {
        self.sets.depart(self.me);
    }
}

/// What serves the barriers of a job that agreed to be served: the barrier of every PE (the
/// node's universe, and across nodes the core's hierarchy over its halves and the roots'
/// link), used by one thread at a time (the library's lock around it), and the active sets.
#[derive(Debug)]
pub struct Serving {
    // Field order is drop order: the table's window, then the hierarchy (its halves are made
    // from the node's universe), then the universe, all before the segment.
    pub(crate) sets: Arc<SetServing>,
    pub(crate) hier: Option<Hierarchy<ShmemRoots>>,
    pub(crate) node: Universe,
    /// Held so that the node's segment outlives everything made over it.
    pub(crate) _seg: Arc<Segment>,
    pub(crate) describe: String,
    /// Every node has one PE and the implementation's own barrier was chosen for the barriers
    /// of every PE (`BARRIER_SHMEM_INTERNODE`): they pass through.
    pub(crate) delegated: bool,
}

// SAFETY: the node's universe and the hierarchy are used by one thread at a time (the caller
// holds the library's lock around every use); the inbox address is this process's symmetric
// memory.
unsafe impl Send for Serving {}

impl Serving {
    /// The barriers of every PE pass through to the implementation from now on (agreed by
    /// every PE); `describe` says so.
    pub fn delegate(&mut self, describe: String) {
        self.delegated = true;
        self.describe = describe;
    }

    /// Whether the barriers of every PE pass through to the implementation.
    pub fn delegated(&self) -> bool {
        self.delegated
    }

    /// Adds to the description (how the roots' way was chosen).
    pub fn say_also(&mut self, what: &str) {
        self.describe = format!("{}; {what}", self.describe);
    }

    /// The active sets' side, to share with threads that wait without the lock.
    pub fn sets(&self) -> Arc<SetServing> {
        self.sets.clone()
    }

    /// What runs the barriers, in one line.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// A barrier of every PE (collective): writes before it on any PE are visible after it on
    /// every PE (release on arrival, acquire on departure, through the node's barrier and the
    /// roots' remote adds).
    pub fn barrier(&self) -> Result<()> {
        match &self.hier {
            None => Ok(self.node.world().barrier()?),
            Some(hier) => Ok(hier.barrier()?),
        }
    }

    /// This PE calls `shmem_finalize`: on a node root, the other roots learn that it will make
    /// no more barriers.
    pub fn depart(&self) {
        if let Some(hier) = &self.hier {
            if let Some(roots) = hier.roots() {
                roots.link().depart(hier.entered());
            }
        }
    }
}
