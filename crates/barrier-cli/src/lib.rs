//! The `barrier` command's library: the launcher, the benchmark and the reports, so that tests
//! and other tools can use them without spawning the binary.

pub mod bench;
pub mod info;
pub mod launch;
pub mod plot;
