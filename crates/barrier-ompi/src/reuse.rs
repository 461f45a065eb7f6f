//! A freed communicator's barrier, kept for the next communicator of the same ranks (issue 50
//! item 3). Libraries that duplicate a communicator per call and free it on return (for
//! isolation) make every call pay a first `MPI_Barrier`'s build (about 0.14 ms at 2 ranks here:
//! a private duplicate, the settings' agreement, the node's segment and its universe). The
//! next duplicate has the same ranks in the same order, so the barrier built for the last one
//! serves it as it is:
//!
//! 1. **Parking.** When Open MPI frees a communicator (its module is destroyed once no
//!    split-phase barrier of it is in flight), a built barrier that is quiet on this rank
//!    ([`BarrierComm::reuse_key`]: ours, no set-up step failed, every barrier started on it
//!    completed here without an error) is kept, up to [`PARKED`] per process, instead of freed.
//!    Nothing of it changes: its private duplicate, its node's segment and universe, its roots'
//!    link. Parking calls no MPI (a module may be destroyed inside the progress callback).
//! 2. **Offering.** At a communicator's first `MPI_Barrier`, each rank offers up to [`OFFERS`]
//!    parked barriers that could serve it: made with the same settings as this communicator's,
//!    over a private duplicate congruent with it (the same ranks in the same order). Each is
//!    offered as its private duplicate's context id and its count of barrier calls, in the
//!    exchange the component makes anyway (`glue::join`: whether every rank's component
//!    serves). The offered ones are taken off the list meanwhile, so that a first barrier of
//!    another communicator on another thread cannot offer them as well.
//! 3. **Adopting.** Every rank reads the same gathered words: a barrier that every rank offered,
//!    with the same count everywhere, serves the new communicator (the smallest context id of
//!    those, if several). A context id is the same on every rank of a communicator in Open MPI
//!    and unique among a process's live ones (a parked barrier keeps its duplicate alive), so
//!    every rank adopts the same barrier; the same count, quiet on every rank, means every
//!    barrier started on it completed everywhere, so the ranks' states match. Otherwise the
//!    communicator's barrier is built as before.
//!
//! A barrier freed while [`PARKED`] are kept is freed at once, as before. While the list is
//! full, a first barrier frees the oldest kept one (a safe place: never the progress callback),
//! so that the next freed barrier finds room; `MPI_Finalize` frees them all. A rank that froze
//! a barrier in a state the others do not share (one freed with a split-phase barrier in flight
//! is kept only once that completes) never has it offered by every rank: an offer that is not
//! everyone's adopts nothing, and it ages out.
//!
//! "The same settings" are the component's (its MCA values and the communicator's info key);
//! `BARRIER_*` environment values are read when a barrier is built, and a reused one keeps
//! those it was built with. Context ids are the same on every rank of a communicator in Open
//! MPI 4; elsewhere the C glue gives none and nothing is reused.

use std::sync::{Mutex, MutexGuard};

use barrier::Params;
use barrier_mpi::mpi::ffi::MPI_Comm;
use barrier_mpi::{raw, BarrierComm};

use crate::offer::{choose, OFFERS, OFFER_WORDS};

/// Parked barriers per process, at most.
pub const PARKED: usize = 16;

extern "C" {
    /// The C glue: `comm`'s context id (the same on every rank of it), or -1 where it is not
    /// known to be (nothing is offered then).
    fn fastbar_comm_cid(comm: MPI_Comm) -> i64;
}

/// Barriers of freed communicators, oldest first.
static PARKED_LIST: Mutex<Vec<BarrierComm>> = Mutex::new(Vec::new());

fn parked() -> MutexGuard<'static, Vec<BarrierComm>> {
    PARKED_LIST.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps `c` (its communicator was freed) for another communicator of the same ranks, if it is
/// quiet and there is room; else gives it back, to be freed as before. Calls no MPI.
pub fn park(c: BarrierComm) -> Option<BarrierComm> {
    if c.reuse_key().is_none() {
        return Some(c);
    }
    let mut list = parked();
    if list.len() >= PARKED {
        return Some(c);
    }
    list.push(c);
    None
}

/// This rank's offers for `comm` (made with `params`): see the module docs. The offered
/// barriers are taken off the list until [`Offered::adopt`] (or a drop) puts back those not
/// adopted, so that another thread's first barrier on another communicator of the same ranks
/// (`MPI_THREAD_MULTIPLE`) cannot offer them too: a barrier two communicators' exchanges both
/// found offered everywhere could be adopted for one of them on some ranks and for the other
/// on the rest. The newest are offered first (a duplicate per call reuses the last one). Frees
/// the oldest parked barrier first when the list is full, so that the next freed one finds
/// room.
pub fn offers(comm: MPI_Comm, params: &Params) -> Offered {
    // Candidates are taken off the list under its lock, which `park` takes inside the progress
    // callback: the MPI calls that choose among them run outside it.
    let (oldest, candidates) = {
        let mut list = parked();
        // A safe place to free MPI communicators (inside MPI_Barrier, not a progress callback).
        let oldest = (list.len() >= PARKED).then(|| list.remove(0));
        let mut candidates = Vec::new();
        let mut i = list.len();
        while i > 0 {
            i -= 1;
            if list[i].params() == params && list[i].reuse_key().is_some() {
                candidates.push(list.remove(i));
            }
        }
        (oldest, candidates)
    };
    drop(oldest);
    let mut offered = Offered { barriers: Vec::new(), words: [0; OFFER_WORDS] };
    let mut rest = Vec::new();
    for c in candidates {
        let id = match c.reuse_key() {
            Some((private, calls))
                if offered.barriers.len() < OFFERS && raw::congruent(private, comm).unwrap_or(false) =>
            {
                // SAFETY: `private` is a live communicator of this process (the parked barrier's own).
                u64::try_from(unsafe { fastbar_comm_cid(private) }).ok().map(|cid| (cid + 1, calls))
            }
            _ => None,
        };
        match id {
            Some((id, calls)) => {
                let at = 2 * offered.barriers.len();
                offered.words[at..at + 2].copy_from_slice(&[id, calls]);
                offered.barriers.push(c);
            }
            None => rest.push(c),
        }
    }
    // Back on the list, in their own order (`candidates` ran newest first).
    rest.reverse();
    let mut list = parked();
    for c in rest {
        list.push(c);
    }
    drop(list);
    offered
}

/// The parked barriers a rank offered to one communicator, and the words that offer them.
pub struct Offered {
    barriers: Vec<BarrierComm>,
    words: [u64; OFFER_WORDS],
}

impl Offered {
    /// The words for the exchange.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// The barrier every rank offered (`all`: every rank's [`words`](Self::words), by rank);
    /// `None` where there is none (then every rank builds). The others go back on the list.
    pub fn adopt(mut self, all: &[u64]) -> Option<BarrierComm> {
        let offer = choose(all)?;
        let at = self.words.chunks(2).position(|o| (o[0], o[1]) == offer)?;
        Some(self.barriers.remove(at))
    }
}

impl Drop for Offered {
    fn drop(&mut self) {
        parked().append(&mut self.barriers);
    }
}

/// Frees every parked barrier (`MPI_Finalize`, while MPI still works).
pub fn free_all() {
    let all = std::mem::take(&mut *parked());
    drop(all);
}
