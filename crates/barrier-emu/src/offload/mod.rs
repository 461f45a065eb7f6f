//! The engine of an emulated switch or GBA: one device's protocol, run on an engine thread
//! (`Emulator::start`) or inline in the ranks whose stores trap into it (`crate::inline`).
//! The engine keeps no barrier state of its own (that is in the registers); its files follow
//! the protocol: `groups.rs` configuration and the IOMMU, `arrivals.rs` taking messages,
//! `release.rs` completing an epoch, `faults.rs` the vanishing device and the collector of
//! dead jobs' groups.

mod arrivals;
mod engine;
mod faults;
mod groups;
mod release;
mod state;

pub(crate) use state::{Engine, Group};
