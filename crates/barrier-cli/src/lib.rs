//! The `barrier` command's library: the benchmarks, the model and the reports, so that tests and
//! other tools can use them without spawning the binary. The launcher is a crate of its own,
//! `barrier-launch`.

pub mod bench;
pub mod elf;
pub mod emu;
pub mod info;
pub mod model;
pub mod mpibench;
pub mod ompi;
pub mod record;
pub mod shmembench;
pub use record::plot;

/// Registers the settings of the layers above the core that `barrier` reports and checks
/// (barrier-mpi's, barrier-openshmem's) with the core's registry: `barrier info` lists them,
/// and a misspelt one is warned about. Called once at the start of the command (and by
/// [`info::report`]); a second call does nothing.
pub fn register_layers() {
    barrier_mpi::catalogue::register();
    barrier_openshmem::settings::register();
}

/// The register map of a device kind named on the command line.
pub fn device_map(kind: &str) -> Option<&'static barrier_hw::DeviceMap> {
    barrier_hw::all_maps().into_iter().find(|m| m.kind.eq_ignore_ascii_case(kind.trim()))
}

/// The shape of an emulated A64FX node from `BARRIER_A64FX_EMU_CMGS` and `_PES`.
pub fn a64fx_layout(params: &barrier::Params) -> Result<barrier_hw::a64fx::node::Layout, String> {
    use barrier::backends::a64fx::{EMU_CMGS, EMU_PES};
    let base = barrier_hw::a64fx::node::Layout::A64FX;
    let cmgs = params.parse(EMU_CMGS, base.cmgs, "a number of CMGs (1..=8)").map_err(|e| e.to_string())?;
    let pes = params.parse(EMU_PES, base.pes, "a number of PEs per CMG (2..=13)").map_err(|e| e.to_string())?;
    let layout = barrier_hw::a64fx::node::Layout { cmgs, pes, ..base };
    layout.validate().map_err(|e| format!("emulated A64FX node of {EMU_CMGS}={cmgs} x {EMU_PES}={pes}: {e}"))?;
    Ok(layout)
}
