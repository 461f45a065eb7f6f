//! What an emulated device is asked to be: its register map, latency and fault models
//! ([`Config`]), and what it counts ([`Counters`]); the outcomes of claiming and taking an
//! arrival message.

use std::sync::atomic::Ordering;
use std::time::Duration;

use barrier_hw::{global, DeviceMap};

use crate::device::DeviceFile;

/// Delays added by the device.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// Per network hop of a release store (every member is one hop away here).
    pub per_hop: Duration,
    /// Per member released.
    pub per_member: Duration,
}

/// Injected faults. Probabilities are per event (per arrival, per release store).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// Lose an arrival message.
    pub drop_arrival: f64,
    /// Lose a release store to one member.
    pub drop_release: f64,
    /// Write a release store twice (the second time after the next barrier starts).
    pub duplicate_release: f64,
    /// Set STATUS.ERROR for good after this many completed barriers (device-wide).
    pub stick_error_after: Option<u64>,
    /// Vanish (every register reads all ones, nothing is served) after this many barriers.
    pub vanish_after: Option<u64>,
    /// Sleep this long before serving each barrier.
    pub slow_engine: Duration,
    /// Seed of the fault model's random numbers.
    pub seed: u64,
}

/// How a pass makes sure it alone takes a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Swap the identity word for [`TAKEN`] (the engine thread's scan).
    Swap,
    /// Nobody else takes this message: mark it [`TAKEN`] with a plain store (an inline
    /// device's trap of its own rank's message, see [`inline`]).
    Own,
}

/// What one look at an arrival slot did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Nothing to take.
    Nothing,
    /// An arrival was taken (or a bad one failed the group), the epoch is not complete.
    Arrival,
    /// The arrival taken completed the epoch, and the group was released.
    Completed,
}

/// How to run an emulated device.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which device.
    pub map: &'static DeviceMap,
    /// Delays.
    pub latency: Latency,
    /// Faults.
    pub faults: Faults,
    /// Run the device's work inline, in the ranks that ring it, instead of on an engine thread
    /// (see [`crate::inline`]; faults and latency need the thread).
    pub inline: bool,
}

impl Config {
    /// A fault-free, zero-latency device with an engine thread.
    pub fn new(map: &'static DeviceMap) -> Self {
        Config { map, latency: Latency::default(), faults: Faults::default(), inline: false }
    }

    /// The same device, emulated inline.
    pub fn inline(self) -> Self {
        Config { inline: true, ..self }
    }
}

/// The device's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Arrival messages accepted.
    pub arrivals: u64,
    /// Release stores written.
    pub releases: u64,
    /// Errors raised.
    pub errors: u64,
    /// Groups allocated now.
    pub groups_in_use: u64,
    /// Barriers completed.
    pub barriers: u64,
    /// Engine time spent serving, ns.
    pub busy_ns: u64,
}

impl Counters {
    /// Reads the counters of a device file.
    pub fn read(dev: &DeviceFile) -> Counters {
        let r = |reg: &barrier_hw::Register| dev.word(reg.offset).load(Ordering::Relaxed);
        Counters {
            arrivals: r(&global::ARRIVALS),
            releases: r(&global::RELEASES),
            errors: r(&global::ERRORS),
            groups_in_use: r(&global::GROUPS_IN_USE),
            barriers: r(&global::BARRIERS),
            busy_ns: r(&global::ENGINE_BUSY_NS),
        }
    }
}
