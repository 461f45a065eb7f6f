//! The flights of a communicator across nodes whose first barrier is `MPI_Ibarrier`, fixed in
//! advance as ours from its second barrier call on (issue 50 item 8; the set-up that feeds them
//! is [`crate::background`]'s). Not for users.
//!
//! On one node the switch from Open MPI's barrier to ours is decided in the node's shared
//! segment, atomically, at a call above every call any rank has made ([`barrier::wait::handover`]).
//! Across nodes there is no such place, and a rank may start any number of `MPI_Ibarrier`
//! without completing one, so no word from the other ranks can bound the call at which it
//! switches; and a call served by Open MPI's barrier cannot be put off either (its non-blocking
//! collectives match by the order they start in on the communicator). So the switch is fixed
//! before anyone knows what will serve: every rank's second barrier call and every later one is
//! a *flight* of ours, queued in the order it was called, and flights complete in that order.
//!
//! * **Before this rank's set-up has resolved** (succeeded, or failed here), no flight begins.
//! * **The first flight** is a dissemination among all ranks over the communicator's private
//!   channel ([`crate::channel`]), begun once this rank's set-up has resolved, carrying the
//!   agreement's bit: "my set-up failed". When it completes, every rank has the OR of every
//!   rank's bit, so every rank takes the same way from the second flight on: the hierarchy
//!   ([`barrier::hierarchy::Hierarchy`] over the node's halves and the node roots' link on the same
//!   channel), or, where a set-up failed anywhere, the same dissemination among all ranks for
//!   good. Flights called meanwhile begin in the hierarchy, in order, at the switch.
//! * **A failure** of a flight breaks the communicator on this rank, as a failed blocking
//!   barrier does: every later call fails with the first error (a rank that went on would be
//!   out of step with the others' rounds and let a rank through early).

use barrier::hierarchy::{Flight, Hierarchy, Roots, RootsWaits};
use barrier::{Error, Result, Universe};

use crate::channel::ChannelLink;

/// A rank's hierarchy across nodes, set up in the background.
#[derive(Debug)]
pub(crate) struct Built {
    /// Declared (and so dropped) before the node's universe its halves were made from.
    pub hier: Hierarchy<ChannelLink>,
    /// Held only so that it outlives the halves (nothing calls it).
    pub _node: Universe,
    /// What serves, in words (for the verbose line).
    pub detail: String,
}

#[derive(Debug)]
enum Way {
    /// This rank's set-up has not resolved: no flight has begun.
    SettingUp,
    /// The dissemination among all ranks: the first flight (the agreement's), and every flight
    /// for good where a set-up failed. `hier`: this rank's hierarchy, until the agreement;
    /// `later`: the waits after the first flight (whose timeout allows for the others' set-up).
    Flat { flat: Box<Roots<ChannelLink>>, current: Option<Flight>, hier: Option<Box<Built>>, later: RootsWaits },
    /// Every rank's set-up succeeded: flight `base + k` is the hierarchy's flight `k`.
    Hierarchy { built: Box<Built>, base: u64 },
}

/// What the agreement decided, once (for the verbose line).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Agreed {
    Hierarchy,
    Flat,
}

/// A communicator's flights (see the module docs).
#[derive(Debug)]
pub(crate) struct Ahead {
    /// Flights called so far (the newest's number) and completed.
    started: u64,
    finished: u64,
    way: Way,
    /// Why the communicator is unusable, once a flight failed.
    broken: Option<String>,
    /// Rank, for the error that breaks it.
    rank: usize,
    /// The agreement's outcome, until [`take_agreed`](Self::take_agreed) takes it.
    news: Option<Agreed>,
}

impl Ahead {
    pub(crate) fn new(rank: usize) -> Self {
        Ahead { started: 0, finished: 0, way: Way::SettingUp, broken: None, rank, news: None }
    }

    /// Whether this rank's set-up has resolved.
    pub(crate) fn resolved(&self) -> bool {
        !matches!(self.way, Way::SettingUp)
    }

    /// This rank's set-up resolved: `flat` is the dissemination among all ranks, its link
    /// carrying this rank's bit (`built` is `None`: it failed here); `built`, the hierarchy;
    /// `later`, the flat dissemination's waits after the first flight.
    pub(crate) fn resolve(&mut self, flat: Roots<ChannelLink>, built: Option<Built>, later: RootsWaits) {
        debug_assert!(!self.resolved());
        self.way = Way::Flat { flat: Box::new(flat), current: None, hier: built.map(Box::new), later };
    }

    /// The agreement's outcome, once, after the first flight.
    pub(crate) fn take_agreed(&mut self) -> Option<Agreed> {
        self.news.take()
    }

    /// What serves now, in words, once agreed.
    pub(crate) fn detail(&self) -> Option<&str> {
        match &self.way {
            Way::Hierarchy { built, .. } => Some(&built.detail),
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
    pub(crate) fn start(&mut self) -> Result<u64> {
        self.usable()?;
        self.started += 1;
        let n = self.started;
        if let Way::Hierarchy { built, base } = &self.way {
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
    pub(crate) fn drive(&mut self, flight: u64, blocking: bool) -> Result<bool> {
        self.usable()?;
        let outcome = self.drive_flights(flight, blocking);
        outcome.map_err(|e| self.break_with(e))
    }

    fn drive_flights(&mut self, flight: u64, blocking: bool) -> Result<bool> {
        while self.finished < flight {
            match &mut self.way {
                Way::SettingUp => return Ok(false),
                Way::Flat { flat, current, .. } => {
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
                Way::Hierarchy { built, base } => {
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
        let Way::Flat { flat, hier, later, .. } = &mut self.way else { unreachable!("the first flight is flat") };
        flat.set_waits(*later);
        let everyone_ready = !flat.link().any_failed();
        match (everyone_ready, hier.take()) {
            (true, Some(built)) => {
                // The flights called meanwhile begin in the hierarchy, in order.
                for _ in 2..=self.started {
                    built.hier.ibarrier()?;
                }
                self.way = Way::Hierarchy { built, base: 1 };
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
