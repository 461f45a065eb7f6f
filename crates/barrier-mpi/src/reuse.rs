//! A freed communicator's barrier, kept for the next communicator of the same ranks (issue 50
//! item 3), for the Open MPI coll component (barrier-ompi) and the interposer (barrier-pmpi);
//! not for users. Libraries that duplicate a communicator per call and free it on return (for
//! isolation) make every call pay a first `MPI_Barrier`'s build (about 0.14 ms at 2 ranks here:
//! a private duplicate, the settings' agreement, the node's segment and its universe). The
//! next duplicate has the same ranks in the same order, so the barrier built for the last one
//! serves it as it is:
//!
//! 1. **Parking.** When a communicator is freed (the component's module is destroyed once no
//!    split-phase barrier of it is in flight; the interposer's attribute is deleted), a built
//!    barrier that is quiet on this rank (`BarrierComm::reuse_key`: ours, of two ranks or
//!    more, built with the settings' allgather, and every barrier started on it completed here
//!    without an error) is kept, up to 16 per process (`PARKED`), instead of freed. Nothing of
//!    it changes: its private duplicate, its node's segment and universe, its roots' link.
//!    Parking calls no MPI (a module may be destroyed inside Open MPI's progress callback).
//! 2. **Offering.** At a communicator's first `MPI_Barrier`, each rank offers up to [`OFFERS`]
//!    kept barriers that could serve it: made with the same settings as this communicator's,
//!    over a private duplicate congruent with it (the same ranks in the same order). Each is
//!    offered as what names its build on every rank (its rank 0's machine word and build token,
//!    from the settings' allgather: that process's ID and its count of builds), in the exchange
//!    the ranks make anyway (the component's `glue::join`, whether every rank's component
//!    serves; the interposer's meeting asleep before a build). The offered ones are taken off
//!    the list meanwhile, so that a first barrier of another communicator on another thread
//!    cannot offer them as well.
//! 3. **Adopting.** Every rank reads the same gathered words: a barrier that every rank offered
//!    serves the new communicator (the smallest, if several), so every rank adopts the same
//!    one. Two barriers offered with one name are one build: a rank offers only barriers over
//!    the new communicator's ranks in its order, so their rank 0 is the new communicator's rank
//!    0, the one process whose token names them, and it never hands out a token twice. Quiet on
//!    every rank, they are in the same state: a rank completes barrier k only once every rank
//!    has started it, so no rank can have completed more barriers of it than another started.
//!    Otherwise the communicator's barrier is built as before.
//!
//! A barrier freed while 16 are kept is freed at once, as before. While 16 are kept, a first
//! barrier that offers (two ranks or more) frees the one kept longest that it did not offer (a
//! safe place: never the progress callback), so that the next freed barrier finds room;
//! `MPI_Finalize` frees them all. A rank that froze a barrier in a state the others do not share
//! (one freed with a split-phase barrier in flight is kept only once that completes) never has
//! it offered by every rank: an offer that is not everyone's adopts nothing, and it ages out.
//!
//! "The same settings": the component compares its MCA values and the communicator's info key.
//! `BARRIER_*` environment values are not compared (the interposer's settings are those alone):
//! they are read when a barrier is built, and a reused one keeps those it was built with.

#[cfg(feature = "mpi")]
pub use with_mpi::*;

/// Parked barriers a rank offers to one communicator, at most.
pub const OFFERS: usize = 4;
/// Words of one offer: its build's name (the rank 0's machine word and token; a token of 0 for
/// no offer).
const OFFER: usize = 2;
/// Words of one rank's offers in the exchange.
pub const OFFER_WORDS: usize = OFFER * OFFERS;

/// The offer that every rank made, the smallest if several: the same on every rank, which all
/// read the same words (`all`: every rank's [`OFFER_WORDS`], by rank).
pub fn choose(all: &[u64]) -> Option<[u64; OFFER]> {
    let everyone = |offer: &[u64]| all.chunks(OFFER_WORDS).all(|row| row.chunks(OFFER).any(|o| o == offer));
    all.chunks(OFFER_WORDS)
        .next()?
        .chunks(OFFER)
        .filter(|offer| offer[1] != 0 && everyone(offer))
        .map(|offer| [offer[0], offer[1]])
        .min()
}

#[cfg(feature = "mpi")]
mod with_mpi {
    use std::sync::{Mutex, MutexGuard};

    use barrier::Params;

    use super::{choose, OFFER, OFFERS, OFFER_WORDS};
    use crate::raw::{self, Comm};
    use crate::BarrierComm;

    /// Parked barriers per process, at most.
    pub const PARKED: usize = 16;

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
    pub fn offers(comm: Comm, params: &Params) -> Offered {
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
            let fits = c
                .reuse_key()
                .filter(|key| offered.barriers.len() < OFFERS && raw::congruent(key.private, comm).unwrap_or(false));
            match fits {
                Some(key) => {
                    let at = OFFER * offered.barriers.len();
                    offered.words[at..at + OFFER].copy_from_slice(&key.build);
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
    #[derive(Debug)]
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
            let at = self.words.chunks(OFFER).position(|o| o == offer)?;
            Some(self.barriers.remove(at))
        }
    }

    impl Drop for Offered {
        fn drop(&mut self) {
            parked().append(&mut self.barriers);
        }
    }

    /// [`BarrierComm::from_raw`], or the barrier of a freed communicator of the same ranks
    /// where every rank kept one (then `true`): the ranks' meeting asleep before a build
    /// carries their offers. The interposer's.
    ///
    /// # Safety
    /// As for [`BarrierComm::from_raw`].
    pub unsafe fn from_raw_or_kept(comm: Comm, params: Params) -> barrier::Result<(BarrierComm, bool)> {
        if !raw::mpi_active() || raw::is_inter(comm)? || raw::size(comm)? < 2 {
            // SAFETY: the caller's contract (`from_raw` says what is wrong).
            return unsafe { BarrierComm::from_raw(comm, params) }.map(|c| (c, false));
        }
        let offers = offers(comm, &params);
        let all = raw::sleeping_allgather(comm, offers.words().to_vec(), params.stall_report(), |waited| {
            raw::still_meeting(comm, waited)
        })?;
        match offers.adopt(&all) {
            Some(kept) => Ok((kept, true)),
            // SAFETY: the caller's contract; the ranks have met.
            None => unsafe { BarrierComm::from_raw_as(comm, params, false, true) }.map(|c| (c, false)),
        }
    }

    /// Frees every parked barrier (`MPI_Finalize`, while MPI still works).
    pub fn free_all() {
        let all = std::mem::take(&mut *parked());
        drop(all);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(offers: &[[u64; OFFER]]) -> Vec<u64> {
        let mut r = vec![0; OFFER_WORDS];
        for (i, o) in offers.iter().enumerate() {
            r[OFFER * i..OFFER * i + OFFER].copy_from_slice(o);
        }
        r
    }

    #[test]
    fn only_an_offer_of_every_rank_is_adopted() {
        let all = [row(&[[7, 5], [7, 9]]), row(&[[7, 9], [7, 5]])].concat();
        assert_eq!(choose(&all), Some([7, 5]));
        let all = [row(&[[7, 5]]), row(&[[8, 5]])].concat();
        assert_eq!(choose(&all), None, "another machine's build of the same token");
        let all = [row(&[[7, 5]]), row(&[])].concat();
        assert_eq!(choose(&all), None, "one rank has nothing to offer");
        let all = [row(&[]), row(&[])].concat();
        assert_eq!(choose(&all), None);
    }
}
