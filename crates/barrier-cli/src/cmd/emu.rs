//! `barrier emu`: an emulated device as a daemon that several jobs share.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct EmuArgs {
    /// switch or gba.
    #[arg(long, default_value = "switch")]
    pub kind: String,
    /// Where to create the device file (removed on exit).
    #[arg(long)]
    pub device: PathBuf,
    /// Probability of dropping an arrival.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub drop_arrival: f64,
    /// Probability of dropping a release store.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub drop_release: f64,
    /// Probability of duplicating a release store.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub duplicate_release: f64,
    /// Stick the ERROR bit after this many barriers.
    #[arg(long)]
    pub stick_error_after: Option<u64>,
    /// Vanish after this many barriers.
    #[arg(long)]
    pub vanish_after: Option<u64>,
    /// Sleep this many microseconds before each release.
    #[arg(long, default_value_t = 0)]
    pub slow_us: u64,
    /// Delay per network hop of a release, nanoseconds.
    #[arg(long, default_value_t = 0)]
    pub hop_ns: u64,
    /// Delay per member released, nanoseconds.
    #[arg(long, default_value_t = 0)]
    pub member_ns: u64,
}

impl EmuArgs {
    /// Runs the command: the exit code says what happened.
    pub fn run(self) -> ExitCode {
        let EmuArgs {
            kind,
            device,
            drop_arrival,
            drop_release,
            duplicate_release,
            stick_error_after,
            vanish_after,
            slow_us,
            hop_ns,
            member_ns,
        } = self;
        let Some(map) = barrier_cli::device_map(&kind) else {
            eprintln!("barrier emu: --kind {kind}: unknown device; use switch or gba");
            return ExitCode::from(2);
        };
        let faults = barrier_emu::Faults {
            drop_arrival,
            drop_release,
            duplicate_release,
            stick_error_after,
            vanish_after,
            slow_engine: std::time::Duration::from_micros(slow_us),
            seed: std::process::id() as u64,
        };
        let latency = barrier_emu::Latency {
            per_hop: std::time::Duration::from_nanos(hop_ns),
            per_member: std::time::Duration::from_nanos(member_ns),
        };
        super::finish(
            "barrier emu",
            barrier_cli::emu::serve(barrier_emu::Config { map, latency, faults, inline: false }, &device),
        )
    }
}

/// A probability: a number from 0 to 1.
fn probability(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{text} is not a probability (a number from 0 to 1, e.g. 0.01)")),
    }
}
