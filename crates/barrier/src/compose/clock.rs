//! Time per phase (`BARRIER_HIER_DEBUG`): what each barrier, blocking or split-phase, spent in
//! the node's gather, among the roots and in the node's release, said once when the hierarchy
//! goes.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The phases, in the order a flight passes them.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Phase {
    Gather = 0,
    Roots = 1,
    Release = 2,
}

/// A rank's time per phase, summed over its barriers.
#[derive(Debug)]
pub(crate) struct PhaseClock {
    /// Who this rank is, as the report starts ("barrier: hierarchical rank 3 (node 1, local
    /// rank 1)").
    who: String,
    mark: Cell<Instant>,
    totals: [Cell<Duration>; 3],
    flights: Cell<u64>,
}

impl PhaseClock {
    pub fn new(who: String) -> Self {
        PhaseClock { who, mark: Cell::new(Instant::now()), totals: Default::default(), flights: Cell::new(0) }
    }

    /// A barrier starts.
    pub fn start(&self) {
        self.mark.set(Instant::now());
        self.flights.set(self.flights.get() + 1);
    }

    /// A barrier finished `phase`: the time since the last mark is that phase's.
    pub fn lap(&self, phase: Phase) {
        let now = Instant::now();
        let total = &self.totals[phase as usize];
        total.set(total.get() + (now - self.mark.get()));
        self.mark.set(now);
    }
}

impl Drop for PhaseClock {
    fn drop(&mut self) {
        let per = |d: &Cell<Duration>| d.get().as_nanos() as f64 / self.flights.get().max(1) as f64;
        crate::text::say(&format!(
            "{}: {} barriers; per barrier: gather {:.0} ns, internode {:.0} ns, release {:.0} ns (a rank that is not \
             its node's root counts its gather with its release in split-phase barriers)",
            self.who,
            self.flights.get(),
            per(&self.totals[0]),
            per(&self.totals[1]),
            per(&self.totals[2])
        ));
    }
}
