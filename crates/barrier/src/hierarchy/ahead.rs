//! Flights fixed in advance: a layer's barrier whose every call from some call on must be ours
//! before anyone knows what will serve, because its set-up runs in the background and the switch
//! cannot be decided anywhere (barrier-mpi's coll component: a communicator across nodes whose
//! first barrier is `MPI_Ibarrier`; see its `background` module for why).
//!
//! Every call is a *flight*, queued in the order it was called; flights complete in that order.
//!
//! * **Before this rank's set-up has resolved** (built, or failed here), no flight begins
//!   ([`Ahead::drive`] returns `Ok(false)`; the layer advances the set-up).
//! * **The first flight** is a dissemination among all ranks (a [`Roots`] in which every rank is
//!   alone on its node) over a link that carries the agreement's bit ([`AgreeingLink`]: "my
//!   set-up failed"). When it completes, every rank has the OR of every rank's bit, so every rank
//!   takes the same way from the second flight on: the hierarchy ([`Hierarchy`], this rank's
//!   [`Built`]), or, where a set-up failed anywhere, the same dissemination for good. Flights
//!   called meanwhile begin in the hierarchy, in order, at the switch.
//! * **A failure** of a flight breaks the flights on this rank, as a failed blocking barrier
//!   does: every later call fails with the first error (a rank that went on would be out of step
//!   with the others' rounds and let a rank through early).

use crate::error::{Error, Result};
use crate::universe::Universe;

use super::Hierarchy;
use crate::compose::{Flight, Roots, RootsLink, RootsWaits};

/// A link whose signals can carry the agreement's bit: every signal carries the OR of this
/// member's own bit and every bit it has received, and a bit once set stays set, so after one
/// whole dissemination begun by every member with its bit set, every member has the OR of all
/// (dissemination reaches every member from every member), and nothing but a member's own bit
/// ever sets it. (barrier-mpi's private channel carries `2 × epoch + bit`, its slots keeping the
/// largest value sent.)
pub trait AgreeingLink: RootsLink {
    /// Whether a member's bit has reached this one (its own included).
    fn any_failed(&self) -> bool;
}

/// A rank's hierarchy across nodes, set up in the background.
#[derive(Debug)]
pub struct Built<L> {
    /// Declared (and so dropped) before the node's universe its halves were made from.
    pub hier: Hierarchy<L>,
    /// Held only so that it outlives the halves (nothing calls it).
    pub node: Universe,
    /// What serves, in words (for the verbose line).
    pub detail: String,
}

#[derive(Debug)]
enum Serving<L> {
    /// This rank's set-up has not resolved: no flight has begun.
    SettingUp,
    /// The dissemination among all ranks: the first flight (the agreement's), and every flight
    /// for good where a set-up failed. `hier`: this rank's hierarchy, until the agreement;
    /// `later`: the waits after the first flight (whose timeout allows for the others' set-up).
    Flat { flat: Box<Roots<L>>, current: Option<Flight>, hier: Option<Box<Built<L>>>, later: RootsWaits },
    /// Every rank's set-up succeeded: flight `base + k` is the hierarchy's flight `k`.
    Hierarchy { built: Box<Built<L>>, base: u64 },
}

/// What the agreement decided, once (for the verbose line).
#[derive(Debug, PartialEq, Eq)]
pub enum Agreed {
    /// Every rank's set-up succeeded: the hierarchy from the second flight on.
    Hierarchy,
    /// A set-up failed somewhere: the dissemination among all ranks for good.
    Flat,
}

/// A communicator's flights (see the module docs).
#[derive(Debug)]
pub struct Ahead<L> {
    /// Flights called so far (the newest's number) and completed.
    started: u64,
    finished: u64,
    serving: Serving<L>,
    /// Why the communicator is unusable, once a flight failed.
    broken: Option<String>,
    /// Rank, for the error that breaks it.
    rank: usize,
    /// The agreement's outcome, until [`take_agreed`](Self::take_agreed) takes it.
    news: Option<Agreed>,
}

impl<L: AgreeingLink> Ahead<L> {
    /// Flights of rank `rank` (for its errors), before its set-up has resolved.
    pub fn new(rank: usize) -> Self {
        Ahead { started: 0, finished: 0, serving: Serving::SettingUp, broken: None, rank, news: None }
    }

    /// Whether this rank's set-up has resolved.
    pub fn resolved(&self) -> bool {
        !matches!(self.serving, Serving::SettingUp)
    }

    /// This rank's set-up resolved: `flat` is the dissemination among all ranks, its link
    /// carrying this rank's bit (`built` is `None`: it failed here); `built`, the hierarchy;
    /// `later`, the flat dissemination's waits after the first flight.
    pub fn resolve(&mut self, flat: Roots<L>, built: Option<Built<L>>, later: RootsWaits) {
        debug_assert!(!self.resolved());
        self.serving = Serving::Flat { flat: Box::new(flat), current: None, hier: built.map(Box::new), later };
    }

    /// The agreement's outcome, once, after the first flight.
    pub fn take_agreed(&mut self) -> Option<Agreed> {
        self.news.take()
    }

    /// What serves now, in words, once agreed.
    pub fn detail(&self) -> Option<&str> {
        match &self.serving {
            Serving::Hierarchy { built, .. } => Some(&built.detail),
            _ => None,
        }
    }

    fn usable(&self) -> Result<()> {
        match &self.broken {
            Some(why) => Err(Error::Broken(why.clone())),
            None => Ok(()),
        }
    }

    /// Calls a flight (a barrier call): its number.
    pub fn start(&mut self) -> Result<u64> {
        self.usable()?;
        self.started += 1;
        let n = self.started;
        if let Serving::Hierarchy { built, base } = &self.serving {
            let (started, base) = (built.hier.ibarrier(), *base);
            let k = started.map_err(|e| self.break_with(e))?;
            debug_assert_eq!(k + base, n, "the hierarchy numbers its flights as they are called");
        }
        Ok(n)
    }

    #[cold]
    fn break_with(&mut self, e: Error) -> Error {
        if self.broken.is_none() {
            self.broken = Some(format!("barrier failed on rank {}: {e}", self.rank));
        }
        e
    }

    /// Advances the flights in order until flight `flight` has completed (`Ok(true)`) or, unless
    /// `blocking`, until one must wait (`Ok(false)`). Before this rank's set-up has resolved it
    /// returns `Ok(false)`: the caller advances the set-up (and waits for it where `blocking`).
    pub fn drive(&mut self, flight: u64, blocking: bool) -> Result<bool> {
        self.usable()?;
        let outcome = self.drive_flights(flight, blocking);
        outcome.map_err(|e| self.break_with(e))
    }

    fn drive_flights(&mut self, flight: u64, blocking: bool) -> Result<bool> {
        while self.finished < flight {
            match &mut self.serving {
                Serving::SettingUp => return Ok(false),
                Serving::Flat { flat, current, .. } => {
                    let next = self.finished + 1;
                    let f = current.get_or_insert_with(|| Flight::new(next));
                    let done = match blocking {
                        true => flat.finish(f).map(|()| true)?,
                        false => flat.advance(f)?,
                    };
                    if !done {
                        return Ok(false);
                    }
                    *current = None;
                    self.finished = next;
                    if next == 1 {
                        self.agree()?;
                    }
                }
                Serving::Hierarchy { built, base } => {
                    if !built.hier.drive(flight - *base, blocking)? {
                        return Ok(false);
                    }
                    self.finished = flight;
                }
            }
        }
        Ok(true)
    }

    /// The first flight completed: the way of every later one, the same on every rank.
    fn agree(&mut self) -> Result<()> {
        let Serving::Flat { flat, hier, later, .. } = &mut self.serving else {
            unreachable!("the first flight is flat")
        };
        flat.set_waits(*later);
        let everyone_ready = !flat.link().any_failed();
        match (everyone_ready, hier.take()) {
            (true, Some(built)) => {
                // The flights called meanwhile begin in the hierarchy, in order (one that cannot
                // tells the node's other ranks, which would wait for it).
                for _ in 2..=self.started {
                    if let Err(e) = built.hier.ibarrier() {
                        built.hier.abandon(format!("a flight could not begin in the hierarchy: {e}"));
                        return Err(e);
                    }
                }
                self.serving = Serving::Hierarchy { built, base: 1 };
                self.news = Some(Agreed::Hierarchy);
            }
            (ready, built) => {
                // A rank whose own set-up failed sent its bit: `everyone_ready` is false there.
                debug_assert!(!ready || built.is_some());
                self.news = Some(Agreed::Flat);
            }
        }
        Ok(())
    }
}
