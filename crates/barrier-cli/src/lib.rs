//! The `barrier` command's library: the launcher, the benchmark and the reports, so that tests
//! and other tools can use them without spawning the binary.

pub mod bench;
pub mod emu;
pub mod info;
pub mod launch;
pub mod plot;
pub mod proc;
pub mod signals;

/// The register map of a device kind named on the command line.
pub fn device_map(kind: &str) -> Option<&'static barrier_hw::DeviceMap> {
    barrier_hw::all_maps().into_iter().find(|m| m.kind.eq_ignore_ascii_case(kind.trim()))
}
