//! `barrier info`: backends and parameters, and which backend a job of N ranks gets and why.

use std::process::ExitCode;

use super::settings::{check_settings, emulated_devices, warn_unknown_settings};

#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// Ranks of the job to select for.
    #[arg(short = 'n', long = "np", default_value_t = 2)]
    pub ranks: usize,
    /// Simulated nodes.
    #[arg(long, default_value_t = 1)]
    pub nodes: usize,
    /// Start emulated devices for the report: switch, gba, a64fx, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub emulate: Vec<String>,
}

impl InfoArgs {
    /// Runs the command: the exit code says what happened.
    pub fn run(self) -> ExitCode {
        let InfoArgs { ranks, nodes, emulate } = self;
        if ranks == 0 || nodes == 0 {
            eprintln!("barrier info: {} 0: a job needs at least 1", if ranks == 0 { "-n" } else { "--nodes" });
            return ExitCode::from(2);
        }
        // A setting every rank would refuse is refused as the other commands refuse it.
        if let Err(e) = check_settings(None, false) {
            eprintln!("barrier info: {e}");
            return ExitCode::from(2);
        }
        warn_unknown_settings("barrier info");
        match emulated_devices("info", &emulate) {
            Ok((maps, a64fx)) => match barrier_cli::info::report(ranks, nodes, &maps, a64fx) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("barrier info: {e}");
                    ExitCode::FAILURE
                }
            },
            Err(code) => code,
        }
    }
}
